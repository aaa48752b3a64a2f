"""What a case keeps of the drift reference: its workload and the readings it took.

The reference itself (one fixed GEMM per device type and dtype, read now and then, whose speed
says how far the machine's own speed moved while a run timed its cases) lives in the device layer,
`trainready/device/reference.py`, since the peak calibration reads it too, and its readings follow
`device/settle.py`'s rule (warm-up, samples sized to last 20 ms, taken until 3 in a row agree within
10%); `stats.drift` turns the readings into one figure.

Only readings whose samples agreed are speeds of the machine: an unstable one (its samples never
agreed) is counted (`unstable`) and kept in `readings`, never put among `readings_flops`, from
which the drift is computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainready.device import Reading, reference_workload


def _record(reading: Reading | float | None) -> dict[str, Any]:
    if isinstance(reading, Reading):
        return reading.to_json()
    # a bare number (a caller that kept only the speed): how it was taken is not known
    return {"flops": reading, "agreed": reading is not None}


def drift_record(
    device: str, dtype: str, readings: Sequence[Reading | float | None], peak: dict | None
) -> dict[str, object]:
    """What a case keeps of the reference: {"workload", "readings_flops" (the speeds of the
    readings that agreed, in the order taken), "calibration_flops" (the reading taken with a
    measured peak's calibration, else None), "readings" (each reading's record, in order: "flops",
    "agreed", "samples" taken, "remeasured" ones, ...: `reference.Reading.to_json`), "unstable"
    (how many readings never agreed: no speed, so no drift figure either)}."""
    records = [_record(r) for r in readings]
    return {
        "workload": reference_workload(device, dtype),
        "readings_flops": [r["flops"] for r in records if r["agreed"] and r["flops"]],
        "calibration_flops": (peak or {}).get("reference_flops"),
        "readings": records,
        "unstable": sum(not r["agreed"] for r in records),
    }
