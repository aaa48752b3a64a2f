"""Shared timing probe: warm-ups, individually timed repeats, L2 flush, median and spread.

Each repeat is timed on its own with the device Timer (device events where the backend has
them), so the timed region holds exactly `fn()`: the cache flush before a repeat is enqueued
ahead of the start event and never billed. The median is the headline; the IQR over the median
(`spread`) says how far to trust it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainready.device import Timer, flush_cache, synchronize


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

    @classmethod
    def from_samples(cls, samples: Sequence[float], clock: str) -> TimingStats:
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
        )

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.02 = the middle half within 2%)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else 0.0


def _out_of_time(started: float, max_time_s: float | None, next_cost_s: float) -> bool:
    """Whether another step of `next_cost_s` would end past the time cap."""
    return max_time_s is not None and time.perf_counter() - started + next_cost_s > max_time_s


def benchmark(
    fn: Callable[[], Any],
    device: str,
    *,
    warmup: int = 3,
    repeats: int = 10,
    flush_l2: bool = True,
    min_run_s: float | None = None,
    max_time_s: float | None = None,
) -> TimingStats:
    """Time `fn()` on `device`: `warmup` untimed calls, then `repeats` individually timed ones.
    What `fn` returns is kept until its call's wait has returned.

    `flush_l2` evicts the device cache before each timed repeat (outside the timed region), so
    every repeat reads its inputs from memory as a cold call would. `min_run_s` keeps repeating
    past `repeats` until the timed samples add up to that much. `max_time_s` caps the whole call
    (warm-ups included): warm-ups and repeats stop once the next one would overrun it, but at
    least one repeat is always timed.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    started = time.perf_counter()
    clock = Timer(device)

    last_s = 0.0
    for _ in range(warmup):
        if _out_of_time(started, max_time_s, last_s):
            break
        t0 = time.perf_counter()
        result = fn()  # held until the wait: see the timed loop
        synchronize(device)
        del result
        last_s = time.perf_counter() - t0

    samples: list[float] = []
    timed_total = 0.0
    while len(samples) < repeats or timed_total < (min_run_s or 0.0):
        # A repeat costs its flush and synchronisation too: judge by the last one's wall time.
        if samples and _out_of_time(started, max_time_s, last_s):
            break
        t0 = time.perf_counter()
        if flush_l2:
            flush_cache(device)
        clock.start()
        # Held until the clock stops: a lazy backend (xla) runs only the graphs of tensors still
        # alive at its step boundary, so a result dropped here would never be computed.
        result = fn()
        samples.append(clock.stop())
        del result
        timed_total += samples[-1]
        last_s = time.perf_counter() - t0
    return TimingStats.from_samples(samples, clock.clock)
