"""The drift reference: one fixed GEMM, timed now and then, whose speed says how far the machine's
own speed moved (another job starting, clocks throttling) while a run timed its cases.

The workload is fixed per device type and dtype (a square product of `reference_n`), so readings
taken in different cases, processes and runs compare, and `stats.drift` turns them into one
figure. A reading follows `device.settle`'s rule (RULE): warm-up calls until setup is paid, samples
sized from a warm call to last at least SAMPLE_S, taken until 3 consecutive ones agree within 10%
(at most 9); the reading is their median, and a reading whose samples never agree is "unstable",
with no speed (`Reading.flops` None), never a figure of drift. A measured peak's calibration takes
one reading too (`peak.calibrate_peak`); what a case keeps of its readings is
`probes.drift.drift_record`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trainready.device import settle
from trainready.device.runtime import Timer, device_type, step_boundary, synchronize, torch_dtype

# Small, so that every case can afford two readings: on 2 CPU cores a 512³ product takes 0.3-30
# ms (idle to loaded); 1024³ keeps an accelerator's compute units busy (a few µs on a datacenter
# GPU, repeated to SAMPLE_S) and still costs a slow or emulated device only ~25 ms a product.
CPU_N, ACCELERATOR_N = 512, 1024
# A sample lasts at least this long (why 20 ms: `device/settle.py`); a reading takes at least 3.
SAMPLE_S = 0.02
RULE = settle.Rule(sample_s=SAMPLE_S)


def reference_n(device: str) -> int:
    return CPU_N if device_type(device) == "cpu" else ACCELERATOR_N


def reference_workload(device: str, dtype: str) -> str:
    """The reference as the report names it, e.g. '512³ bf16 matmul'."""
    return f"{reference_n(device)}³ {dtype} matmul"


@dataclass
class Reading:
    """One reading of the drift reference: its speed if its samples agreed, and how it was taken."""

    workload: str
    settled: settle.Settled

    @property
    def flops(self) -> float | None:
        """FLOP/s: the median of the agreeing samples; None when they never agreed (unstable)."""
        return self.settled.rate

    @property
    def agreed(self) -> bool:
        return self.settled.agreed

    def to_json(self) -> dict[str, Any]:
        """{"flops", "agreed", "stopped" ("agreed", "unstable"), "samples" (how many were taken),
        "samples_flops" (each, in order), "kept", "remeasured" (indices), "products_per_sample",
        "warmup_calls", "short_samples", "tolerance", "window", "sample_s"}."""
        record = self.settled.to_json()
        return {"flops": self.flops, "samples_flops": record.pop("samples_rate"), **record}


def gemm_timer(device: str, dtype: str) -> settle.Timed:
    """The reference's workload as `settle` times it: `count` back-to-back products -> seconds."""
    n = reference_n(device)
    gen = torch.Generator().manual_seed(0)  # its own generator: the caller's seeds stay untouched
    a, b = (torch.randn(n, n, generator=gen).to(device, torch_dtype(dtype)) for _ in range(2))
    out = torch.empty_like(a)
    clock = Timer(device)
    synchronize(device)

    def timed(count: int) -> float:
        clock.start()
        for _ in range(count):
            torch.matmul(a, b, out=out)
            step_boundary(device)  # each product its own graph on xla (see peak._time_matmuls)
        return clock.stop()

    return timed


def read_reference(
    device: str, dtype: str, *, timed: settle.Timed | None = None, rule: settle.Rule = RULE
) -> Reading:
    """One reading of the reference (module docstring). `timed` replaces the GEMM (tests plant
    timings through it)."""
    n = reference_n(device)
    timed = timed if timed is not None else gemm_timer(device, dtype)
    return Reading(reference_workload(device, dtype), settle.measure(timed, 2.0 * n**3, rule))


def reference_rate(device: str, dtype: str) -> float | None:
    """One reading's FLOP/s (`read_reference`), None when its samples never agreed (unstable)."""
    return read_reference(device, dtype).flops
