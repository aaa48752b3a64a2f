"""The one adaptive sampler: take samples until their interval is tight enough or time runs out.

As pyperf and Google Benchmark do it: rather than a fixed number of repeats, a timing is
sampled until its `confidence` (95%) interval's half-width is at most `target` (5%) of its
value, or until the next samples would overrun its budget. Every timed figure of the suites
goes through it (`probes.timing.benchmark`: matmul, flex, the dist collectives; the train
suite's steady steps within a training process, and its processes over a case), so a figure is
"inconclusive" for its sampling only when its budget ran out, and then the verdict says how much
more time would likely have concluded it.

The stopping rule. Samples come in batches whose ends are the checks: at least `min_samples`,
then counts growing by `growth` (5, 8, 12, 18, 27, ...), so the interval is computed about
log(n) times, never after every sample. At a check the interval is

- "median" (samples of one process: timings): the median's distribution-free order-statistic
  interval (`stats.order_interval`: no resampling, so a check costs one sort);
- "level" (one figure per process: the process is the unit sampled): Student's t interval of
  the processes' geometric mean (`stats.between_processes`, `stats.level_interval`).

It concludes when n >= `min_samples`, the samples add up to `min_total` seconds, and the
half-width over the value is <= `target`. Otherwise the next batch is cut to what fits in what
is left of the budgets at the mean cost of a sample so far (its wall time, overheads included):
`budget_s`, a cap on all of it (counted from `started`), and `extra_s`, the time for samples past
the minimum (counted from the minimum's end: what sampling may add to a fixed count's cost);
none fits: it stops, "budget". `max_samples` caps a call with no budget ("cap"). The first
sample is always taken: it is what prices the others.

Time needed. When it stops unconcluded, the half-width h at n samples is extrapolated as
h * (n / m)^b to the m samples that reach the target: m = n * (h / target)^(1/b), with b the
shrink rate fitted (least squares, log-log) over the last four checks, clamped to [0.4, 1]
(0.5, the 1/sqrt(n) of independent samples, with fewer than four checks). `needed_s` is
(m - n) samples at the mean cost of one: an estimate, which a stream whose noise grows defeats.

Several ranks timing one collective must take the same samples, or one waits forever in a
collective the others never join: `agree` maps this rank's proposal (how many more samples; ALL
once concluded) to the one every rank takes (`dist.collectives`: the minimum over ranks, one
all_reduce per check, outside the timed region).

Pure Python: the report imports it without torch.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainready.metrics.stats import (
    CONFIDENCE,
    MIN_SAMPLES,
    between_processes,
    level_interval,
    order_interval,
)

# The target: a 95% interval within ±5% of the value (issue #39: what pyperf's and Google
# Benchmark's users read as a settled figure).
TARGET = 0.05
GROWTH = 1.5  # each check's count over the last: about log_1.5(n) checks in all
# A proposal meaning "as many as the others want": this rank has concluded.
ALL = 1 << 30
SHRINK = 0.5  # independent samples: the half-width shrinks as 1/sqrt(n)
# A fit over a few noisy checks wanders: kept within these, and to 1/sqrt(n) under four checks.
SHRINK_BOUNDS = (0.4, 1.0)
FIT_CHECKS = 4  # the last checks the shrink rate is fitted over

KINDS = ("median", "level")


@dataclass(frozen=True)
class Rule:
    """When to stop sampling (module docstring)."""

    target: float = TARGET
    confidence: float = CONFIDENCE
    min_samples: int = MIN_SAMPLES
    budget_s: float | None = None
    max_samples: int = 100_000
    min_total: float = 0.0  # the samples' sum before a conclusion (e.g. seconds timed)
    kind: str = "median"
    # Seconds for samples past the minimum, counted from the minimum's end (None: no limit but
    # `budget_s`): what adaptive sampling may add to a fixed count's cost.
    extra_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.min_samples < 1 or self.max_samples < self.min_samples:
            raise ValueError("need 1 <= min_samples <= max_samples")


@dataclass(frozen=True)
class Verdict:
    """What sampling concluded: the value, its interval, and whether it is settled.

    `half_width` is relative: (hi - lo) / 2 / value. `stopped`: "concluded", "budget" or "cap".
    `needed_s` and `needed_samples`: the estimate of what more would likely have concluded it
    (None when it concluded). `spent_s`: wall time from the first sample's start to the last
    one's end (what the samples cost, checks included; `budget_s` counts from `started`)."""

    samples: int
    value: float
    interval: list[float]
    half_width: float
    concluded: bool
    stopped: str
    spent_s: float
    budget_s: float | None
    target: float = TARGET
    extra_s: float | None = None  # the rule's time for samples past the minimum
    needed_s: float | None = None
    needed_samples: int | None = None
    shrink: float | None = None  # the half-width's fitted shrink rate b (h ~ n^-b)
    kind: str = "median"

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Verdict:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def estimate(value: float, interval: Sequence[float]) -> float:
    """The relative half-width of `interval` about `value` (inf when value is not positive)."""
    return (interval[1] - interval[0]) / 2 / value if value > 0 else math.inf


def value_and_interval(samples: Sequence[float], rule: Rule) -> tuple[float, list[float]]:
    """The figure the samples stand for and its interval, as `rule.kind` computes them."""
    if rule.kind == "median":
        return statistics.median(samples), list(order_interval(samples, rule.confidence))
    positive = [x for x in samples if x > 0]
    if not positive:
        return 0.0, [0.0, 0.0]
    centre = math.exp(statistics.fmean(math.log(x) for x in positive))
    sd, df = between_processes([positive])
    found = level_interval(positive, sd, df, rule.confidence)
    return centre, found if found is not None else [min(positive), max(positive)]


def shrink_rate(checks: Sequence[tuple[int, float]]) -> float:
    """b in h ~ n^-b, fitted over the last FIT_CHECKS checks (n, half-width), clamped to
    SHRINK_BOUNDS; SHRINK (1/sqrt(n)) with fewer usable checks."""
    pts = [
        (math.log(n), math.log(h)) for n, h in checks[-FIT_CHECKS:] if n > 1 and 0 < h < math.inf
    ]
    if len({x for x, _ in pts}) < FIT_CHECKS:
        return SHRINK
    mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    lo, hi = SHRINK_BOUNDS
    return min(hi, max(lo, -slope))


def needed_count(n: int, half: float, rule: Rule, b: float) -> int:
    """How many samples would likely bring the half-width `half` at `n` down to the target."""
    if half <= rule.target or not math.isfinite(half):
        reach = n if math.isfinite(half) else 4 * n  # an interval of nothing yet: a guess
    else:
        reach = math.ceil(n * (half / rule.target) ** (1 / b))
    return max(reach, rule.min_samples, n + 1)


class Sampler:
    """Incremental form, for loops that take their own samples (a training loop's steps):
    `while (k := s.more()): <take k samples, s.add(each)>`, then `s.verdict()`."""

    def __init__(
        self,
        rule: Rule,
        *,
        clock: Callable[[], float] | None = None,
        started: float | None = None,
        agree: Callable[[int], int] | None = None,
        prior: Sequence[float] = (),
    ) -> None:
        # time.perf_counter looked up per call, not bound here: tests plant a clock through it.
        self.clock = clock if clock is not None else (lambda: time.perf_counter())
        self.rule, self.agree = rule, agree
        self.began = self.clock()  # the samples' own time starts here: it prices a sample
        self.started = self.began if started is None else started  # the budget's starts here
        # `prior`: samples taken before sampling began (a train case's planned processes). They
        # count in the interval, not in a sample's price, which the ones taken here set.
        self.samples: list[float] = [float(x) for x in prior]
        self._unpriced = len(self.samples)
        self.checks: list[tuple[int, float]] = []  # (n, relative half-width) at each check
        self._next = rule.min_samples
        self._last_at = self.began
        # When the minimum was reached (with enough prior samples: when sampling began).
        self._min_at: float | None = self.began if self._unpriced >= rule.min_samples else None
        self._concluded = False
        self._stopped = ""

    def add(self, sample: float) -> None:
        self.samples.append(float(sample))
        self._last_at = self.clock()
        if self._min_at is None and len(self.samples) >= self.rule.min_samples:
            self._min_at = self._last_at

    def _check(self) -> bool:
        """Compute the interval now; whether it concludes."""
        n, rule = len(self.samples), self.rule
        value, interval = value_and_interval(self.samples, rule)
        half = estimate(value, interval)
        self.checks.append((n, half))
        self._next = max(n + 1, math.ceil(n * GROWTH))
        return n >= rule.min_samples and sum(self.samples) >= rule.min_total and half <= rule.target

    def _fits(self) -> int:
        """Samples that fit in what is left of the budgets, at the mean cost of one so far."""
        rule, now = self.rule, self.clock()
        lefts = []
        if rule.budget_s is not None:
            lefts.append(rule.budget_s - (now - self.started))
        if rule.extra_s is not None and self._min_at is not None:
            lefts.append(rule.extra_s - (now - self._min_at))
        if not lefts:
            return ALL
        left, spent = min(lefts), self._last_at - self.began
        priced = len(self.samples) - self._unpriced
        per = spent / priced if spent > 0 and priced > 0 else 0.0
        if left <= 0:
            return 0
        return ALL if per <= 0 else int(left // per)

    def more(self) -> int:
        """How many samples to take next; 0: stop (then `verdict()`)."""
        n, rule = len(self.samples), self.rule
        local_done = n >= rule.min_samples and self._check()
        # The first sample is always taken: it prices the rest.
        first = n == self._unpriced
        want = 1 if first else max(0, min(self._next - n, rule.max_samples - n, self._fits()))
        proposal = ALL if local_done else want
        agreed = self.agree(proposal) if self.agree is not None else proposal
        if agreed >= ALL:
            self._concluded, self._stopped = True, "concluded"
            return 0
        if agreed <= 0:
            self._concluded = local_done
            if local_done:
                self._stopped = "concluded"
            else:
                self._stopped = "cap" if n >= rule.max_samples else "budget"
            return 0
        return agreed

    def verdict(self) -> Verdict:
        """The verdict on the samples taken (module docstring: time needed)."""
        if not self.samples:
            raise ValueError("no samples taken")
        n, rule = len(self.samples), self.rule
        value, interval = value_and_interval(self.samples, rule)
        half = estimate(value, interval)
        if not self.checks or self.checks[-1][0] != n:
            self.checks.append((n, half))
        concluded = self._concluded or (
            n >= rule.min_samples and sum(self.samples) >= rule.min_total and half <= rule.target
        )
        spent = self._last_at - self.began
        needed_s = needed = b = None
        priced = n - self._unpriced
        if not concluded:
            b = shrink_rate(self.checks)
            needed = needed_count(n, half, rule, b) - n
            needed_s = needed * spent / priced if priced else None
        return Verdict(
            samples=n,
            value=value,
            interval=interval,
            half_width=half,
            concluded=concluded,
            stopped="concluded" if concluded else (self._stopped or "budget"),
            spent_s=spent,
            budget_s=rule.budget_s,
            target=rule.target,
            extra_s=rule.extra_s,
            needed_s=needed_s,
            needed_samples=needed,
            shrink=b,
            kind=rule.kind,
        )


def sample(
    take: Callable[[], float],
    rule: Rule,
    *,
    clock: Callable[[], float] | None = None,
    started: float | None = None,
    agree: Callable[[int], int] | None = None,
) -> tuple[list[float], Verdict]:
    """Call `take()` for one sample at a time until `rule` stops: (the samples, the verdict)."""
    s = Sampler(rule, clock=clock, started=started, agree=agree)
    while k := s.more():
        for _ in range(k):
            s.add(take())
    return s.samples, s.verdict()


def median_of_intervals(intervals: Sequence[Sequence[float]]) -> list[float]:
    """An interval for the median of several figures, each known to lie in its own interval:
    [the median of the lower ends, the median of the upper ends]. The median rises with each
    figure, so where every figure lies in its interval their median lies in this one: a
    headline over many sampled cases settles when this is tight, whether or not each case's
    own interval reached the target."""
    if not intervals:
        raise ValueError("no intervals")
    return [statistics.median(i[0] for i in intervals), statistics.median(i[1] for i in intervals)]


def time_to_give(v: Verdict | dict[str, Any]) -> float:
    """The time a budget option would have to give for a verdict to likely conclude: what its
    rule gave (`extra_s` where set, else `budget_s`, else what it spent) plus `needed_s`."""
    d = v.to_json() if isinstance(v, Verdict) else v
    extra = d.get("extra_s")
    given = extra if extra is not None else (d.get("budget_s") or d.get("spent_s") or 0.0)
    return given + (d.get("needed_s") or 0.0)


def inconclusive_text(v: Verdict | dict[str, Any] | None, option: str) -> str | None:
    """The report's words for a verdict whose budget ran out: what it reached, about how much
    more time would likely conclude it, and `option`, the setting that gives it that time
    (e.g. "--set timing_s=12"). None when it concluded, or for a record from before the
    sampler (no verdict)."""
    d = v.to_json() if isinstance(v, Verdict) else v
    if not d or d.get("concluded", True):
        return None
    more = d.get("needed_s")
    head = (
        f"budget ran out: {d.get('samples')} samples in {fmt_s(d.get('spent_s') or 0.0)} reached "
        f"±{d.get('half_width', math.inf):.1%} (target ±{d.get('target', TARGET):.0%})"
    )
    if more is None or not math.isfinite(more):
        return f"{head}; {option}"
    return f"{head}; about {fmt_s(more)} more would likely conclude it ({option})"


def budget_why(records: Sequence[dict[str, Any] | None], what: str = "cases") -> str | None:
    """Why a figure over several sampled timings is inconclusive for its sampling: the budget
    ran out in some (each record a verdict's JSON with the "option" that gives it more time,
    as `probes.timing.sampling_record` keeps it); how much more time all of them would likely
    need, and the option of the one that needs the most. None when every one concluded (or
    none was sampled adaptively: records from before the sampler)."""
    known = [r for r in records if r]
    short = [r for r in known if not r.get("concluded", True)]
    if not short:
        return None
    worst = max(short, key=lambda r: r.get("needed_s") or 0.0)
    if len(known) == 1:
        return inconclusive_text(worst, worst.get("option", "a larger time budget"))
    more = sum(r.get("needed_s") or 0.0 for r in short)
    return (
        f"budget ran out in {len(short)} of {len(known)} {what} (a median's 95% interval not "
        f"within ±{worst.get('target', TARGET):.0%}); about {fmt_s(more)} more in all would "
        f"likely conclude them ({worst.get('option', 'a larger time budget')})"
    )


def fmt_s(seconds: float) -> str:
    """Seconds as the inconclusive text shows them: 3 significant digits."""
    return f"{seconds:.3g} s"
