"""What a case keeps of the drift reference: its workload and the readings it took.

The reference itself (one fixed GEMM per device type and dtype, timed now and then, whose speed
says how far the machine's own speed moved while a run timed its cases) lives in the device layer,
`trainready/device/reference.py`, since the peak calibration reads it too; `stats.drift` turns
the readings into one figure.
"""

from __future__ import annotations

from trainready.device import reference_workload


def drift_record(
    device: str, dtype: str, readings: list[float], peak: dict | None
) -> dict[str, object]:
    """What a case keeps of the reference: {"workload", "readings_flops" (in the order taken),
    "calibration_flops" (the reading taken with a measured peak's calibration, else None)}."""
    return {
        "workload": reference_workload(device, dtype),
        "readings_flops": readings,
        "calibration_flops": (peak or {}).get("reference_flops"),
    }
