"""Timed readings that settle: the rule the drift reference and the peak calibration share.

One fixed workload (a GEMM, repeated) read as the machine runs it when nothing else does, so that a
reading's number is the machine's speed, not the cost of a first call or of a moment of other work:

1. **Warm-up.** Calls of one product each, timed but never a reading, until two consecutive calls
   agree within `warmup_tolerance` (25%): the first call pays library and kernel selection,
   allocation, a thread pool waking up (2-3x a warm 512³ call on an idle 2-core CPU, far more on
   a loaded one). At least two calls; at most `warmup_calls` (20) or `warmup_s` (0.5 s).
2. **Sizing.** The products per sample come from the fastest warm call after the first, so a
   sample lasts at least `sample_s`. A sample that still ran under half `sample_s` (its warm calls
   were slow: a loaded moment; on an accelerator, a call's launch and sync) is dropped, the count
   sized again from it (`short`; at most MAX_SHORT times).
3. **Agreement.** Samples are taken until the last `window` (3) consecutive ones agree within
   `tolerance` (fastest / slowest - 1 <= 10%), at most `max_samples` (9). The samples before that
   window are `remeasured`: each disagreed with the ones after it and was taken again, never
   reported. A reading whose samples never agree is "unstable" and has no rate: it is no figure
   of the machine's drift. A `deadline` (the peak calibration's budget) stops sampling too, after
   at least one sample ("budget").

Why these numbers. `sample_s`: the drift reference's 20 ms is over 10^5 times perf_counter's
resolution and ~10^3 times a device's event resolution and launch overhead, and spans about five
of the Linux scheduler's slices (~3-4 ms): a sample that lost one slice to other work reads ~15%
slow, past the tolerance, so it disagrees and is re-measured instead of moving the reading. (The
peak calibration samples for 50 ms, its `target_s`.) `tolerance`: a reading is the median of a
window spanning at most 10%, so two readings of an unchanged machine differ by less than
`metrics.stats.MAX_DRIFT` (25%), above which a timing headline is inconclusive. `window` 3: the
fewest that give a median and show that a sample's neighbours on both sides agree with it.
`max_samples` 9: a disturbance may spoil up to six samples (~120 ms at 20 ms) and the reading
still settle; past that the machine is not steady enough to read. The cost: a drift reading takes
at least 3 x 20 ms and its warm-up (57-70 ms on 2 idle CPU cores, 2026-12-05; ~12 ms before), so
about 0.13 s per matmul case, which reads two.

The timed workload is passed in (`Timed`: runs `count` back-to-back products, synchronised, and
returns seconds), so the rule is tested with planted timings, never the test machine's.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Runs `count` back-to-back products of the workload, synchronised; returns the seconds taken.
Timed = Callable[[int], float]

MAX_SHORT = 3  # samples too short to time that are sized again, at most, per reading


@dataclass(frozen=True)
class Rule:
    """The numbers of the rule (module docstring)."""

    sample_s: float = 0.02
    tolerance: float = 0.10
    window: int = 3
    max_samples: int = 9
    warmup_tolerance: float = 0.25
    warmup_calls: int = 20
    warmup_s: float = 0.5


DEFAULT = Rule()


def agree(values: Sequence[float], tolerance: float) -> bool:
    """Whether these positive values lie within `tolerance` of each other (max / min - 1)."""
    return bool(values) and min(values) > 0 and max(values) <= min(values) * (1 + tolerance)


@dataclass
class Settled:
    """What one reading took and found."""

    rate: float | None  # work per second, the median of the agreeing window; None unless agreed
    stopped: str  # "agreed", "unstable" (max_samples without agreement), "budget" (the deadline)
    samples: list[float]  # every full-length sample's rate (work per second), in the order taken
    kept: list[int]  # indices in `samples` of the agreeing window ([] unless agreed)
    remeasured: list[int]  # samples that disagreed with the ones after them, and were taken again
    per_sample: int  # products per sample (the last count, after any resizing)
    warmup_s: list[float] = field(default_factory=list)  # each warm-up call's seconds
    short: int = 0  # samples under half sample_s, dropped and sized again
    rule: Rule = DEFAULT

    @property
    def agreed(self) -> bool:
        return self.stopped == "agreed"

    def to_json(self) -> dict[str, Any]:
        """The record a result keeps: how many samples were taken, which were re-measured, and
        whether they agreed (within what)."""
        return {
            "agreed": self.agreed,
            "stopped": self.stopped,
            "samples": len(self.samples),
            "samples_rate": self.samples,
            "kept": self.kept,
            "remeasured": self.remeasured,
            "products_per_sample": self.per_sample,
            "warmup_calls": len(self.warmup_s),
            "short_samples": self.short,
            "tolerance": self.rule.tolerance,
            "window": self.rule.window,
            "sample_s": self.rule.sample_s,
        }


def warm_up(
    timed: Timed,
    rule: Rule = DEFAULT,
    deadline: float | None = None,
    now: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """One product at a time until two consecutive calls agree within rule.warmup_tolerance (at
    least two calls; at most rule.warmup_calls, rule.warmup_s or the `deadline`): their times."""
    start = now()
    times = [timed(1)]
    while True:
        times.append(timed(1))
        if agree(times[-2:], rule.warmup_tolerance):
            return times
        t = now()
        if (
            len(times) >= rule.warmup_calls
            or t - start >= rule.warmup_s
            or (deadline is not None and t >= deadline)
        ):
            return times


def warm_time(times: Sequence[float]) -> float:
    """A warm product's seconds from warm-up times: the fastest after the first (which paid the
    setup), or the only one."""
    return max(min(times[1:] or times), 1e-12)


def per_sample(sample_s: float, product_s: float) -> int:
    """Products per sample so that a sample lasts at least `sample_s`."""
    return max(1, math.ceil(sample_s / max(product_s, 1e-12)))


def measure(
    timed: Timed,
    work: float,
    rule: Rule = DEFAULT,
    *,
    warm: Sequence[float] | None = None,
    deadline: float | None = None,
    now: Callable[[], float] = time.perf_counter,
) -> Settled:
    """Warm up (unless `warm`, the warm-up times of a caller that already did), size the samples,
    and take them until `rule.window` consecutive ones agree (module docstring). `work` is what
    one product does (e.g. its FLOPs): rates are work per second."""
    warm = list(warm) if warm is not None else warm_up(timed, rule, deadline, now)
    count = per_sample(rule.sample_s, warm_time(warm))
    samples: list[float] = []
    short = 0
    stopped = "unstable"
    while len(samples) < rule.max_samples:
        if deadline is not None and samples and now() >= deadline:
            stopped = "budget"
            break
        seconds = max(timed(count), 1e-12)
        if seconds < rule.sample_s / 2 and short < MAX_SHORT:
            short += 1
            count = per_sample(rule.sample_s, seconds / count)
            continue
        samples.append(work * count / seconds)
        if len(samples) >= rule.window and agree(samples[-rule.window :], rule.tolerance):
            stopped = "agreed"
            break
    first = max(0, len(samples) - rule.window)
    kept = list(range(first, len(samples))) if stopped == "agreed" else []
    return Settled(
        rate=statistics.median(samples[first:]) if kept else None,
        stopped=stopped,
        samples=samples,
        kept=kept,
        remeasured=list(range(first)),
        per_sample=count,
        warmup_s=warm,
        short=short,
        rule=rule,
    )
