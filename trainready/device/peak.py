"""The peak FLOP/s that MFU is computed against: the datasheet table, else a matmul calibration.

A measured peak is cached by whoever calls `resolve_peak` (the run's store), through the small
`PeakCache` interface, so this package never imports the storage layer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainready.device.dispatch import DispatchWatch
from trainready.device.fallback import fallback_watch
from trainready.device.identity import device_info, device_key
from trainready.device.memory import is_oom
from trainready.device.reference import reference_rate
from trainready.device.runtime import Timer, device_type, step_boundary, torch_dtype
from trainready.metrics.peaks import PEAKS, match_kind


# -- peak FLOP/s ----------------------------------------------------------------------------------
def _time_matmuls(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, count: int, clock: Timer
) -> float:
    clock.start()
    for _ in range(count):
        torch.matmul(a, b, out=out)
        # A lazy backend (xla) runs each product as its own graph: one graph of `count`
        # products into one `out` would keep the last only (the others are dead code).
        step_boundary(clock.device)
    return clock.stop()


def _operands(n: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    # Random normal inputs, not zeros: tensor-core power, and hence clocks, depend on the bits.
    # Drawn in fp32 because not every backend has a random kernel for every dtype.
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return a, b, torch.empty(n, n, device=device, dtype=dtype)


def _grow_size(
    device: str,
    tdtype: torch.dtype,
    sizes: tuple[int, int],
    target_s: float,
    repeats: int,
    deadline: float,
    clock: Timer,
) -> tuple[int, tuple[torch.Tensor, ...], float]:
    """Double n from sizes[0] to sizes[1]; return the size to sample, its operands, one time.

    Growth goes on while a product is shorter than `target_s` (too short to time well) or the
    throughput still rises by 5% (BLAS efficiency climbs with size), as long as the next size,
    probed and sampled, fits before `deadline`. A size that runs out of memory ends the growth.
    """
    n, max_n = sizes
    best: tuple[int, tuple[torch.Tensor, ...], float] | None = None
    while True:
        try:
            ops = _operands(n, tdtype, device)
            if best is None:
                _time_matmuls(*ops, 1, clock)  # the first call pays library and kernel setup
            t = _time_matmuls(*ops, 1, clock)
        except (RuntimeError, MemoryError) as e:
            if best is None or not is_oom(e):
                raise
            return best
        improving = best is None or best[2] * 8 / t >= 1.05  # rate(2n) / rate(n)
        best = (n, ops, t)
        next_cost = 8 * t * (1 + repeats)
        if (
            2 * n > max_n
            or (t >= target_s and not improving)
            or time.perf_counter() + next_cost > deadline
        ):
            return best
        n *= 2


def calibrate_peak(
    device: str,
    dtype: str,
    *,
    start_n: int | None = None,
    max_n: int | None = None,
    target_s: float = 0.05,
    repeats: int = 5,
    budget_s: float | None = None,
) -> dict[str, Any]:
    """Measure the achievable matmul peak: {"peak_flops", "n", "tflops_samples", "clock", ...}.

    Square matmuls grow by doubling from `start_n` up to `max_n` (see `_grow_size`) until a
    product takes at least `target_s` and bigger ones stop paying; then the best of `repeats`
    samples, each `products_per_sample` back-to-back products lasting about `target_s`, so
    launch overhead and timer resolution do not matter. Sampling stops early once `budget_s` is
    spent (at least one sample is always taken).

    Defaults: 1024..8192 and 30 s on accelerators; 256..4096 and 5 s on the cpu, where some
    dtypes (fp16 without native support) run a hundred times slower than others.
    """
    on_cpu = device_type(device) == "cpu"
    sizes = (start_n or (256 if on_cpu else 1024), max_n or (4096 if on_cpu else 8192))
    budget_s = budget_s if budget_s is not None else (5.0 if on_cpu else 30.0)
    clock = Timer(device)
    deadline = time.perf_counter() + budget_s
    # The drift reference's speed at calibration, within the budget: a later run reading another
    # speed shows how far the machine moved since this peak was measured (`reference`).
    reference = reference_rate(device, dtype)
    n, ops, t_one = _grow_size(
        device, torch_dtype(dtype), sizes, target_s, repeats, deadline, clock
    )

    fell_back = _host_fallbacks(device, torch_dtype(dtype))
    per_sample = max(1, math.ceil(target_s / max(t_one, 1e-9)))
    flops = 2.0 * n**3 * per_sample
    samples: list[float] = []
    for _ in range(repeats):
        samples.append(flops / _time_matmuls(*ops, per_sample, clock) / 1e12)
        if time.perf_counter() >= deadline:
            break
    return {
        "peak_flops": max(samples) * 1e12,
        "n": n,
        "dtype": dtype,
        "products_per_sample": per_sample,
        "tflops_samples": samples,
        "clock": clock.clock,
        # ops of the calibration product that ran on the host: then the peak is not the device's
        "host_fallback": fell_back,
        "reference_flops": reference,
    }


def _host_fallbacks(device: str, dtype: torch.dtype) -> dict[str, int]:
    """One small product, as the calibration runs it, under both fallback records: {op: calls}
    that left the device. Small, because the ops dispatched do not depend on the size and the
    calibration's budget should not pay for a large extra product."""
    ops = _operands(64, dtype, device)
    with DispatchWatch(device) as kernels, fallback_watch(device) as vendor:
        _time_matmuls(*ops, 1, Timer(device))
    both = kernels.left_device()  # fallbacks, and round-trips inside the device's kernels
    for op, n in vendor.ops.items():  # as probes.ops.fell_back, which the device layer can't use
        both[op] = max(n, both.get(op, 0))
    return both


def _measured_record(
    kind: str | None, dtype: str, calib: dict[str, Any], key: str
) -> dict[str, Any]:
    n = calib["n"]
    label = f"vs measured peak ({dtype} matmul calibration, {n}³)"
    fell_back = calib.get("host_fallback") or {}
    if fell_back:
        label += f"; the calibration ran through the host fallback ({', '.join(sorted(fell_back))})"
    return {
        "flops": float(calib["peak_flops"]),
        "source": "measured",
        "kind": kind,
        "label": label,
        "host_fallback": fell_back,
        "device_key": key,
        "n": n,
        "measured_at": calib.get("measured_at"),
        "reference_flops": calib.get("reference_flops"),
    }


@dataclass(frozen=True)
class PeakCache:
    """Where measured peaks outlive a run, by `device_key` and dtype: the caller's storage (a run's
    store passes `PeakCache(store.get_calibration, store.put_calibration)`).

    `get(key, dtype)` -> the stored calibration ({"peak_flops", "measured_at", ...details}) or None;
    `put(key, dtype, peak_flops, details)` stores one, replacing any.
    """

    get: Callable[[str, str], dict[str, Any] | None]
    put: Callable[[str, str, float, dict[str, Any]], None]


def resolve_peak(
    device: str, dtype: str, cache: PeakCache | None = None, *, recalibrate: bool = False
) -> dict[str, Any]:
    """The peak FLOP/s to compute MFU against: {"flops", "source", "kind", "label", ...}.

    From the peak table when the device's name is a known kind with a figure for `dtype`;
    otherwise measured by `calibrate_peak` (the cpu always is), and kept in `cache` under
    `device_key` so a later run on the same machine reuses it (`recalibrate` measures afresh and
    replaces the cached figure). Never another device's peak.
    """
    torch_dtype(dtype)
    info = device_info(device)
    kind = None if info["type"] == "cpu" else match_kind(str(info["name"]))
    if kind is not None and dtype in PEAKS[kind]:
        return {
            "flops": PEAKS[kind][dtype],
            "source": "table",
            "kind": kind,
            "label": f"{kind.upper()} {dtype} dense peak (table)",
        }
    key = device_key(device)
    cached = cache.get(key, dtype) if cache is not None and not recalibrate else None
    if cached is not None:
        return _measured_record(kind, dtype, cached, key)
    calib = calibrate_peak(device, dtype)
    if cache is not None:
        details = {k: v for k, v in calib.items() if k != "peak_flops"}
        cache.put(key, dtype, calib["peak_flops"], details)
        calib = cache.get(key, dtype) or calib  # as stored, with its measured_at
    return _measured_record(kind, dtype, calib, key)
