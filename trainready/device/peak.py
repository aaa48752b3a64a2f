"""The peak FLOP/s that MFU is computed against: the datasheet table, else a matmul calibration.

A measured peak is cached by whoever calls `resolve_peak` (the run's store), through the small
`PeakCache` interface, so this package never imports the storage layer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainready.device import settle
from trainready.device.dispatch import DispatchWatch
from trainready.device.fallback import fallback_watch
from trainready.device.identity import device_info, device_key
from trainready.device.memory import is_oom
from trainready.device.reference import read_reference
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


def _timed(ops: tuple[torch.Tensor, ...], clock: Timer) -> settle.Timed:
    """`count` back-to-back products of `ops` -> seconds, as `settle` times a workload."""
    return lambda count: _time_matmuls(*ops, count, clock)


def _grow_size(
    device: str,
    tdtype: torch.dtype,
    sizes: tuple[int, int],
    rule: settle.Rule,
    deadline: float,
    clock: Timer,
) -> tuple[int, tuple[torch.Tensor, ...], list[float]]:
    """Double n from sizes[0] to sizes[1]; return the size to sample, its operands and the times of
    its warm-up calls.

    Each size is warmed up as the reference is (`settle.warm_up`: one product at a time until two
    consecutive calls agree), so neither a first call's setup nor one disturbed call decides the
    growth. Growth goes on while a product is shorter than `rule.sample_s` (too short to time well)
    or the throughput still rises by 5% (BLAS efficiency climbs with size), as long as the next
    size, warmed up and sampled, fits before `deadline`. A size that runs out of memory ends the
    growth, and so does one slower than the size before by more than `rule.tolerance` after a
    second warm-up (a bigger product is not slower on a steady machine: the smaller one is
    sampled).
    """
    n, max_n = sizes
    best: tuple[int, tuple[torch.Tensor, ...], list[float]] | None = None
    while True:
        try:
            ops = _operands(n, tdtype, device)
            warm = settle.warm_up(_timed(ops, clock), rule, deadline)
        except (RuntimeError, MemoryError) as e:
            if best is None or not is_oom(e):
                raise
            return best
        t = settle.warm_time(warm)
        gain = None  # rate(n) / rate(n / 2)
        if best is not None:
            before = settle.warm_time(best[2])
            gain = before * 8 / t
            if gain * (1 + rule.tolerance) < 1:
                # slower than the size before: warmed up again, so one disturbed call ends nothing
                warm += settle.warm_up(_timed(ops, clock), rule, deadline)
                t = settle.warm_time(warm)
                gain = before * 8 / t
                if gain * (1 + rule.tolerance) < 1:
                    return best
        improving = gain is None or gain >= 1.05
        best = (n, ops, warm)
        # the next size: two warm-up calls of 8t, then `window` samples of at least 8t each
        next_cost = 16 * t + rule.window * max(rule.sample_s, 8 * t)
        if (
            2 * n > max_n
            or (t >= rule.sample_s and not improving)
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
    repeats: int = settle.DEFAULT.max_samples,
    budget_s: float | None = None,
) -> dict[str, Any]:
    """Measure the achievable matmul peak: {"peak_flops", "n", "tflops_samples", "clock",
    "agreement", "reference_flops", "reference", ...}.

    Square matmuls grow by doubling from `start_n` up to `max_n` (see `_grow_size`) until a
    product takes at least `target_s` and bigger ones stop paying; then samples, each
    `products_per_sample` back-to-back products lasting about `target_s`, by `device.settle`'s
    rule: taken until 3 consecutive ones agree within 10%, at most `repeats` (3 at least). The
    peak is the fastest sample (other work only ever slows one); `agreement` says whether they
    agreed (else the peak is unconfirmed: `resolve_peak` labels it and does not cache it).
    Sampling stops early once `budget_s` is spent (at least one sample is always taken). What no
    rule inside a calibration can see is other work slowing all of it evenly: the drift
    reference read with it (`reference_flops`) then reads slow too, and later runs' readings show
    the move against it.

    Defaults: 1024..8192 and 30 s on accelerators; 256..4096 and 5 s on the cpu, where some
    dtypes (fp16 without native support) run a hundred times slower than others.
    """
    on_cpu = device_type(device) == "cpu"
    sizes = (start_n or (256 if on_cpu else 1024), max_n or (4096 if on_cpu else 8192))
    budget_s = budget_s if budget_s is not None else (5.0 if on_cpu else 30.0)
    rule = settle.Rule(sample_s=target_s, max_samples=max(settle.DEFAULT.window, repeats))
    clock = Timer(device)
    deadline = time.perf_counter() + budget_s
    # The drift reference's speed at calibration, within the budget: a later run reading another
    # speed shows how far the machine moved since this peak was measured (`reference`).
    reference = read_reference(device, dtype)
    n, ops, warm = _grow_size(device, torch_dtype(dtype), sizes, rule, deadline, clock)

    fell_back = _host_fallbacks(device, torch_dtype(dtype))
    settled = settle.measure(_timed(ops, clock), 2.0 * n**3, rule, warm=warm, deadline=deadline)
    agreement = settled.to_json()
    del agreement["samples_rate"]  # kept as tflops_samples
    return {
        "peak_flops": max(settled.samples),
        "n": n,
        "dtype": dtype,
        "products_per_sample": settled.per_sample,
        "tflops_samples": [x / 1e12 for x in settled.samples],
        "clock": clock.clock,
        # ops of the calibration product that ran on the host: then the peak is not the device's
        "host_fallback": fell_back,
        # whether the samples agreed, how many were taken and re-measured (`settle.Settled`)
        "agreement": agreement,
        "reference_flops": reference.flops,  # None: the reference's reading was unstable
        "reference": reference.to_json(),
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
    agreement = calib.get("agreement")  # absent from calibrations stored before it was kept
    if agreement and not agreement.get("agreed"):
        label += f"; unconfirmed: {unconfirmed_why(agreement)}"
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
        "agreement": agreement,
        "reference": calib.get("reference"),
    }


def unconfirmed_why(agreement: dict[str, Any]) -> str:
    """Why a calibration's samples did not confirm its peak (its `agreement` record)."""
    taken, window = agreement.get("samples", 0), agreement.get("window", settle.DEFAULT.window)
    within = f"within {agreement.get('tolerance', settle.DEFAULT.tolerance):.0%}"
    if agreement.get("stopped") == "budget":
        return f"its budget ended after {taken} of the {window} samples that must agree {within}"
    return f"its {taken} samples never had {window} in a row agree {within}"


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
    replaces the cached figure). Never another device's peak. A calibration whose samples never
    agreed (`calibrate_peak`'s `agreement`) is used for this run, labelled unconfirmed, and not
    cached: the next run measures again.
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
    if cache is not None and (calib.get("agreement") or {}).get("agreed", True):
        details = {k: v for k, v in calib.items() if k != "peak_flops"}
        cache.put(key, dtype, calib["peak_flops"], details)
        calib = cache.get(key, dtype) or calib  # as stored, with its measured_at
    return _measured_record(kind, dtype, calib, key)
