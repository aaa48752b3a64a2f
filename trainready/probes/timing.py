"""Shared timing probe: warm-ups, individually timed repeats, L2 flush, median and spread.

Cold inputs: `benchmark` flushes the device cache before each repeat, or the call cycles
through copies of its inputs (`rotating`, where the device layer says a flush costs too much).

Each repeat is timed on its own with the device Timer (device events where the backend has
them), so the timed region holds exactly `fn()`: the cache flush before a repeat is enqueued
ahead of the start event and never billed. The median is the headline; the IQR over the median
(`spread`) says how far to trust it.

How many repeats: the adaptive sampler's (`metrics.sampler`) -- at least `repeats`, then more
until the median's 95% interval is within ±5% or the time for extra repeats (`extra_s`) or the
cap on all of it (`max_time_s`) would be overrun. `TimingStats.sampling` carries its verdict: concluded or not, the interval, and, when
the budget ran out, about how much more time would likely have concluded it.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trainready.device import Timer, flush_cache, rotation_copies, synchronize
from trainready.metrics.sampler import Rule, Verdict, sample, time_to_give


@dataclass(frozen=True)
class TimingStats:
    median_s: float
    min_s: float
    max_s: float
    mean_s: float
    stdev_s: float
    iqr_s: float
    repeats: int
    clock: str  # "events" (device-side) or "wall" (synchronised host clock)
    samples: list[float] = field(default_factory=list)
    sampling: Verdict | None = None  # the adaptive sampler's verdict (None: fixed samples given)

    @classmethod
    def from_samples(
        cls, samples: Sequence[float], clock: str, sampling: Verdict | None = None
    ) -> TimingStats:
        if not samples:
            raise ValueError("TimingStats needs at least one sample")
        xs = [float(x) for x in samples]
        many = len(xs) > 1
        if many:
            q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        return cls(
            median_s=statistics.median(xs),
            min_s=min(xs),
            max_s=max(xs),
            mean_s=statistics.fmean(xs),
            stdev_s=statistics.stdev(xs) if many else 0.0,
            iqr_s=q3 - q1 if many else 0.0,
            repeats=len(xs),
            clock=clock,
            samples=xs,
            sampling=sampling,
        )

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.02 = the middle half within 2%)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else 0.0

    def sampling_metrics(self) -> dict[str, float]:
        """The sampler's verdict as case metrics: `concluded` (1 or 0), `half_width` (the
        median's 95% interval's half-width over the median), `timing_s` (time sampled) and,
        when the budget ran out, `needed_s` (about how much more would likely conclude it)."""
        v = self.sampling
        if v is None:
            return {}
        out = {"concluded": float(v.concluded), "half_width": v.half_width, "timing_s": v.spent_s}
        if v.needed_s is not None:
            out["needed_s"] = v.needed_s
        return out


# The `--set` option that sets a timed case's sampling budget, in seconds (matmul, flex, dist).
TIMING_OPTION = "timing_s"


def timing_budget(options: dict[str, Any], default_s: float) -> float:
    """A timed loop's time for repeats past its minimum (`benchmark`'s `extra_s`): `--set
    timing_s` or the suite's `default_s`."""
    return float(options.get(TIMING_OPTION) or default_s)


def timing_option(total_s: float, share: float, case_budget_s: float) -> str:
    """The settings that give a timed loop `total_s` seconds past its minimum: `--set
    timing_s=N`, and `--budget-s M` where the case budget's `share` for timing would cap it
    below that."""
    text = f"--set {TIMING_OPTION}={math.ceil(total_s)}"
    if total_s > share * case_budget_s:
        text += f" and --budget-s {math.ceil(total_s / share)}"
    return text


def agree_over_ranks(device: str) -> Callable[[int], int]:
    """The sampler's `agree` for ranks that must take the same samples (a collective, a
    data-parallel step): the smallest proposal of all ranks (one all_reduce MIN on the default
    process group), so all take the same count and stop together."""
    import torch  # here: only ranks of a process group need torch.distributed loaded
    import torch.distributed as dist

    def agree(proposal: int) -> int:
        t = torch.tensor([proposal], dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t.item())

    return agree


def sampling_record(stats: TimingStats, option: Callable[[float], str]) -> dict[str, Any] | None:
    """The sampler's verdict as a case's diagnostics keep it (`metrics.sampler.Verdict` JSON);
    one whose budget ran out carries "option": `option(total_s)`, the setting that would give
    the timing `total_s` seconds (past its minimum, where `extra_s` bounded it), its budget plus
    about what more would likely conclude it (read by `metrics.sampler.budget_why`). None
    without a verdict."""
    v = stats.sampling
    if v is None:
        return None
    record = v.to_json()
    if not v.concluded:
        record["option"] = option(time_to_give(v))
    return record


def _out_of_time(started: float, max_time_s: float | None, next_cost_s: float) -> bool:
    """Whether another step of `next_cost_s` would end past the time cap."""
    return max_time_s is not None and time.perf_counter() - started + next_cost_s > max_time_s


@dataclass(frozen=True)
class ColdInputs:
    """A timed call whose inputs each repeat reads cold (`rotating`): `call`, and `flush`,
    whether `benchmark` must flush the cache before each repeat (False: the call cycles
    through `copies` copies of its inputs, which evicts them between uses)."""

    call: Callable[[], Any]
    flush: bool
    copies: int = 1

    def describe(self) -> str:
        """How the repeats read their inputs cold, as the case's diagnostics say it."""
        if self.flush:
            return "the cache flushed before each repeat"
        return f"{self.copies} copies of the inputs in turn (rotating buffers; no flush)"


def rotating(fn: Callable[..., Any], operands: Sequence[torch.Tensor], device: str) -> ColdInputs:
    """`fn(*operands)` as a timed loop should call it so that every repeat reads its inputs
    from memory: over copies of the operands in turn where the device layer says so
    (`rotation_copies`: on the CPU, whose cache flush can cost tens of times a small GEMM),
    each call the next copy; else over the operands themselves, with the cache flushed."""
    nbytes = sum(t.numel() * t.element_size() for t in operands)
    copies = rotation_copies(device, nbytes)
    if copies is None:
        return ColdInputs(lambda: fn(*operands), flush=True)
    extra = [_copies(t, copies - 1) for t in operands]
    ring = [tuple(operands), *zip(*extra, strict=True)]
    turn = itertools.cycle(ring)
    return ColdInputs(lambda: fn(*next(turn)), flush=False, copies=copies)


def _copies(t: torch.Tensor, n: int) -> list[torch.Tensor]:
    """`n` copies of `t`: views into one block where `t` is contiguous (one allocation, handed
    back whole when the copies go: many freed blocks of a few MiB would stay in the process's
    heap and count in its resident memory), else clones that keep its strides."""
    if n == 0:
        return []
    if not t.is_contiguous():
        return [t.clone(memory_format=torch.preserve_format) for _ in range(n)]
    block = t.unsqueeze(0).expand(n, *t.shape).contiguous()
    return list(block.unbind(0))


def benchmark(
    fn: Callable[[], Any],
    device: str,
    *,
    warmup: int = 3,
    repeats: int = 10,
    flush_l2: bool = True,
    min_run_s: float | None = None,
    max_time_s: float | None = None,
    extra_s: float | None = None,
    max_repeats: int | None = None,
    agree: Callable[[int], int] | None = None,
) -> TimingStats:
    """Time `fn()` on `device`: `warmup` untimed calls, then individually timed ones, as many as
    the adaptive sampler (`metrics.sampler`) asks: at least `repeats`, then more until the
    median's 95% interval is within ±5%, or until the next ones would overrun `max_time_s`.
    What `fn` returns is kept until its call's wait has returned.

    `flush_l2` evicts the device cache before each timed repeat (outside the timed region), so
    every repeat reads its inputs from memory as a cold call would. `min_run_s`: no conclusion
    before the timed samples add up to that much. `max_time_s` caps the whole call (warm-ups
    included): warm-ups and repeats stop once the next one would overrun it, but at least one
    repeat is always timed. `extra_s` bounds only the repeats past `repeats` (counted from the
    end of those): what adaptive sampling may add to the fixed count's cost. With none of
    `max_time_s`, `extra_s` and `min_run_s`, nothing bounds the sampling: it takes at most
    `max_repeats` (default: exactly `repeats`). `agree`: ranks timing one collective agree on
    each batch's count (`metrics.sampler`).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    started = time.perf_counter()
    clock = Timer(device)

    last_s = 0.0
    for _ in range(warmup):
        # Ranks that agree make the same calls: no rank may cut its warm-ups short alone.
        if agree is None and _out_of_time(started, max_time_s, last_s):
            break
        t0 = time.perf_counter()
        result = fn()  # held until the wait: see the timed loop
        synchronize(device)
        del result
        last_s = time.perf_counter() - t0

    def timed() -> float:
        if flush_l2:
            flush_cache(device)
        clock.start()
        # Held until the clock stops: a lazy backend (xla) runs only the graphs of tensors still
        # alive at its step boundary, so a result dropped here would never be computed.
        result = fn()
        took = clock.stop()
        del result
        return took

    bounded = max_time_s is not None or extra_s is not None or min_run_s
    cap = max_repeats or (Rule.max_samples if bounded else repeats)
    rule = Rule(
        min_samples=repeats,
        max_samples=max(cap, repeats),
        budget_s=max_time_s,
        extra_s=extra_s,
        min_total=min_run_s or 0.0,
    )
    samples, verdict = sample(timed, rule, started=started, agree=agree)
    return TimingStats.from_samples(samples, clock.clock, verdict)
