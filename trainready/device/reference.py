"""The drift reference: one fixed GEMM, timed now and then, whose speed says how far the machine's
own speed moved (another job starting, clocks throttling) while a run timed its cases.

The workload is fixed per device type and dtype (a square product of `reference_n`), so readings
taken in different cases, processes and runs compare, and `stats.drift` turns them into one
figure. Only the number of back-to-back products per sample adapts, so that a sample lasts at
least about SAMPLE_S on any device; a reading is the median speed of SAMPLES samples. A measured
peak's calibration takes one reading too (`peak.calibrate_peak`); what a case keeps of its
readings is `probes.drift.drift_record`.
"""

from __future__ import annotations

import math
import statistics

import torch

from trainready.device.runtime import Timer, device_type, step_boundary, synchronize, torch_dtype

# Small, so that every case can afford two readings: on 2 CPU cores a 512³ product takes 0.3-30
# ms (idle to loaded); 1024³ keeps an accelerator's compute units busy (a few µs on a datacenter
# GPU, repeated to SAMPLE_S) and still costs a slow or emulated device only ~25 ms a product.
CPU_N, ACCELERATOR_N = 512, 1024
SAMPLE_S = 0.004
SAMPLES = 3


def reference_n(device: str) -> int:
    return CPU_N if device_type(device) == "cpu" else ACCELERATOR_N


def reference_workload(device: str, dtype: str) -> str:
    """The reference as the report names it, e.g. '512³ bf16 matmul'."""
    return f"{reference_n(device)}³ {dtype} matmul"


def reference_rate(device: str, dtype: str) -> float:
    """One reading of the reference: its median FLOP/s over SAMPLES timed samples."""
    n = reference_n(device)
    gen = torch.Generator().manual_seed(0)  # its own generator: the caller's seeds stay untouched
    a, b = (torch.randn(n, n, generator=gen).to(device, torch_dtype(dtype)) for _ in range(2))
    out = torch.empty_like(a)
    clock = Timer(device)
    synchronize(device)
    clock.start()
    torch.matmul(a, b, out=out)  # untimed as a reading: it pays library and kernel setup
    # Sized by that first call, which setup makes slow: a sample is then at most SAMPLE_S long.
    count = max(1, math.ceil(SAMPLE_S / max(clock.stop(), 1e-9)))
    rates = []
    for _ in range(SAMPLES):
        clock.start()
        for _ in range(count):
            torch.matmul(a, b, out=out)
            step_boundary(device)  # each product its own graph on xla (see peak._time_matmuls)
        rates.append(2.0 * n**3 * count / clock.stop())
    return statistics.median(rates)
