"""Robust statistics the suites and the report share: how sure a median is, and when it is none.

Timings are skewed (a hiccup is slow, never fast) and often few, so intervals are bootstrap
percentile intervals of the median, with no assumption about the distribution's shape:
`median_interval` for one sample (`order_interval`, its closed-form order-statistic twin, is
what the adaptive sampler checks as it goes), `ratio_interval` for the ratio of two samples' medians (a
speedup). `MAX_SPREAD` is the one rule for when a set of timings is too spread out to stand for
a single number: a headline built on it is then shown as inconclusive, with `spread_why` as the
reason, as it is with fewer than `MIN_SAMPLES` timings.

Drift: a timing interval measured within a run says nothing about the machine's speed moving
under it (another job starting, clocks throttling). `drift` is how far a fixed reference workload's
speed moved over the readings a run took of it; `widen` stretches an interval by that much each
way, and over `MAX_DRIFT` a headline is inconclusive (`drift_why`). Pure Python (the report
imports it without torch).

Processes: timings taken in one process share its state (where its threads landed, its allocator,
its compiled graphs, the machine's speed while it ran), so a rerun's new processes land elsewhere
by more than one process's timing noise says. Where a figure pools several processes' timings,
the process, not the timing, is the unit that is sampled: `between_processes` pools the scatter
of each process's median around its group's mean (log scale) into one standard deviation, and
`level_interval` is Student's t interval of a group's mean over its processes (`t_quantile`).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

# A 95% percentile interval from 2000 resamples (its ends then move by well under 1% between
# seeds); the fixed seed keeps a stored run's report the same every time it is rendered.
CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0

# The interquartile range over the median above which timings do not share one value: the middle
# half of them spans over a quarter of the median. A quiet machine keeps step and kernel timings
# to a few percent; one busy for a good share of the repeats (another job, thermal throttling, a
# noisy clock) lands far above, and then a median, a rate or a ratio of them means little.
MAX_SPREAD = 0.25
# Fewer timings than this and a median is one or two of them: a single hiccup moves it, and a
# bootstrap of so few has too few distinct resamples to mean much.
MIN_SAMPLES = 5
# How far the machine's speed may move (fastest reading of the reference over the slowest, minus
# 1) before a timing headline stands for no single machine: past a quarter, as with MAX_SPREAD,
# widening its interval by the drift would leave a range, not a figure.
MAX_DRIFT = 0.25


def _bootstrap_medians(samples: Sequence[float], seed: int) -> list[float]:
    """The medians of RESAMPLES resamples (with replacement): the median's sampling distribution."""
    rng, xs = random.Random(seed), [float(x) for x in samples]
    return [statistics.median(rng.choices(xs, k=len(xs))) for _ in range(RESAMPLES)]


def _percentiles(values: list[float], confidence: float) -> tuple[float, float]:
    xs, tail = sorted(values), (1 - confidence) / 2
    return xs[round(tail * (len(xs) - 1))], xs[round((1 - tail) * (len(xs) - 1))]


def median_interval(
    samples: Sequence[float], confidence: float = CONFIDENCE, seed: int = SEED
) -> tuple[float, float]:
    """Bootstrap percentile interval of the median of `samples`."""
    if not samples:
        raise ValueError("median_interval needs at least one sample")
    return _percentiles(_bootstrap_medians(samples, seed), confidence)


def order_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free `confidence` interval of the median from two order statistics: the
    ranks j and n + 1 - j where Binomial(n, 1/2) puts at most (1 - confidence) / 2 below j
    (normal approximation, continuity-corrected). No resampling: one sort, so the adaptive
    sampler (`metrics.sampler`) can afford it at every check. Its coverage is at least
    `confidence` from 6 samples on (exact binomial: 95.3-99% at 95%); below that even the whole
    range, which it then is, covers less (1 - 2^(1-n))."""
    if not samples:
        raise ValueError("order_interval needs at least one sample")
    xs, n = sorted(float(x) for x in samples), len(samples)
    z = statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    j = math.floor(n / 2 - 0.5 - z * math.sqrt(n) / 2)  # 0-based rank of the lower end
    j = max(0, min(j, (n - 1) // 2))
    return xs[j], xs[n - 1 - j]


def ratio_interval(
    numerator: Sequence[float],
    denominator: Sequence[float],
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> tuple[float, float]:
    """Bootstrap percentile interval of median(numerator) / median(denominator), the two samples
    resampled independently (eager over compiled step times: the speedup)."""
    if not numerator or not denominator:
        raise ValueError("ratio_interval needs samples on both sides")
    tops = _bootstrap_medians(numerator, seed)
    bottoms = _bootstrap_medians(denominator, seed + 1)
    return _percentiles([a / b for a, b in zip(tops, bottoms, strict=True)], confidence)


def spread_why(what: str, spread: float, samples: int | None = None) -> str | None:
    """Why `samples` timings with this spread (IQR / median) stand for no single number (too
    few, or too spread out); None if they do."""
    if samples is not None and samples < MIN_SAMPLES:
        return f"only {samples} {what} (a conclusion needs {MIN_SAMPLES})"
    if spread > MAX_SPREAD:
        return f"{what} spread {spread:.0%} (IQR / median, over {MAX_SPREAD:.0%})"
    return None


# From this many readings on, the drift is the range of the central (1 - 2 * DRIFT_TAIL) of them:
# on a shared host the reference's speed wanders, and the range of all readings grows with their
# number, so a run that read the reference more (the train suite's repeat processes) would look
# as if the machine moved more. A quiet quick run of 2026-12-06: 28 of a train case's 32 readings
# at 718-831 GFLOP/s, and one process read 871 and 897 (a burst of a few seconds): a headline
# over many cases or processes moves with the bulk, not with a tenth of its readings.
DRIFT_CENTRAL_MIN = 10
DRIFT_TAIL = 0.10


def _nearest_rank(xs: list[float], q: float) -> float:
    """The q-quantile of sorted `xs` by nearest rank (no interpolation: a reading taken)."""
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def drift(speeds: Sequence[float], anchor: float | None = None) -> float | None:
    """How far the speed moved over these readings of one reference workload (any unit of
    speed): fastest over slowest, minus 1 (0.2 = the fastest reading ran 20% faster than the
    slowest); from DRIFT_CENTRAL_MIN readings on, the fastest and slowest of the central 80%
    (nearest rank). `anchor`, a reading every figure is a share of (the peak's calibration),
    always counts whole: the range is stretched to include it. None with fewer than two
    readings: a single reading shows no movement."""
    xs = [float(x) for x in speeds if x and x > 0]
    lo, hi = drift_band(xs) or (math.inf, 0.0)
    if anchor and anchor > 0:
        lo, hi = min(lo, anchor), max(hi, anchor)
    if len(xs) + bool(anchor and anchor > 0) < 2:
        return None
    return hi / lo - 1


def drift_band(speeds: Sequence[float]) -> tuple[float, float] | None:
    """The slowest and fastest readings `drift` counts: all of them, or the central 80% from
    DRIFT_CENTRAL_MIN readings on; None without a reading."""
    xs = sorted(float(x) for x in speeds if x and x > 0)
    if not xs:
        return None
    if len(xs) < DRIFT_CENTRAL_MIN:
        return xs[0], xs[-1]
    return _nearest_rank(xs, DRIFT_TAIL), _nearest_rank(xs, 1 - DRIFT_TAIL)


# Two readings of one reference agree within this (the settle rule's tolerance,
# `device/settle.py`): a reading further from both its neighbours, which agree, is a transient.
NEIGHBOUR_TOLERANCE = 0.10


def transients(speeds: Sequence[float], tolerance: float = NEIGHBOUR_TOLERANCE) -> list[int]:
    """The readings (indices, in the order taken) that disagree with both their neighbours
    (more than `tolerance` apart, either way) while those neighbours agree with each other: a
    burst of speed or a busy neighbour caught by one reading, which the readings before and
    after it do not show. The machine's drift is computed without them (issue #39: re-measure a
    reading that disagrees with its neighbours, never take it as the host's drift; between
    cases, the neighbours are the re-measurement). A move that lasts (two readings or more on
    the new level) is no transient, and neither the first nor the last reading is judged (one
    neighbour only)."""

    def apart(a: float, b: float) -> bool:
        return max(a, b) / min(a, b) - 1 > tolerance

    xs = [float(x) for x in speeds]
    return [
        i
        for i in range(1, len(xs) - 1)
        if min(xs[i - 1 : i + 2]) > 0
        and apart(xs[i], xs[i - 1])
        and apart(xs[i], xs[i + 1])
        and not apart(xs[i - 1], xs[i + 1])
    ]


def without_transients(speeds: Sequence[float]) -> tuple[list[float], int]:
    """The readings with `transients` set aside, and how many were."""
    gone = set(transients(speeds))
    return [x for i, x in enumerate(speeds) if i not in gone], len(gone)


def widen(interval: Sequence[float], moved: float | None) -> list[float]:
    """`interval` (of a time, a rate or a ratio: any positive quantity) stretched by the drift
    each way: [lo / (1 + moved), hi * (1 + moved)]; as it was when the drift is unknown."""
    lo, hi = interval
    if not moved:
        return [lo, hi]
    return [lo / (1 + moved), hi * (1 + moved)]


def drift_why(moved: float | None, where: str) -> str | None:
    """Why a timing headline is inconclusive because the machine's speed moved more than
    MAX_DRIFT `where` (e.g. "during the run"); None if it did not (or is unknown)."""
    if moved is None or moved <= MAX_DRIFT:
        return None
    return f"the machine's speed moved {moved:.0%} {where} (drift reference; over {MAX_DRIFT:.0%})"


# The share of drift readings that may fail to settle before a headline is inconclusive: one
# unsteady moment among many readings (1 of 88 in a quiet quick run, 2026-12-06) says nothing of
# the run's drift, which the settled readings around it measure; a machine unsteady more often
# than this is not steady enough to time on.
MAX_UNSTABLE = 0.10


def unstable_why(unstable: int, taken: int, where: str = "") -> str | None:
    """Why a timing headline is inconclusive when drift readings never settled: their samples
    never agreed (`device/settle.py`), so the machine was not steady enough then to say how
    fast it ran, let alone how far its speed moved. None when none did, or no more than
    MAX_UNSTABLE of the readings taken (the note still counts them)."""
    if not unstable or unstable <= MAX_UNSTABLE * (taken or unstable):
        return None
    return (
        f"the drift reference was unstable in {unstable} of {taken or unstable} readings{where} "
        "(their samples never agreed: the machine was not steady)"
    )


# Student's t two-sided 95% quantiles by degrees of freedom (few processes: few df, and the
# normal's 1.96 would claim far more than two or three processes can support).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228}  # fmt: skip


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided `confidence` quantile of Student's t with `df` degrees of freedom: exact
    (to 3 decimals) at 95% for df <= 10, else the Cornish-Fisher expansion about the normal's
    (within 1% from df 5 on)."""
    if df < 1:
        raise ValueError("t_quantile needs at least one degree of freedom")
    if confidence == 0.95 and df in _T95:
        return _T95[df]
    z = statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def between_processes(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(sd, df): the standard deviation of a process's median time about its group's mean, on the
    log scale (a fraction: 0.05 = processes scatter by about 5%), pooled over `groups` (each a list
    of per-process medians: e.g. one per mode, so that eager and compiled processes together
    estimate one scatter), with its degrees of freedom, sum(len(group) - 1). (0.0, 0) when no
    group has two processes: then nothing in the run measured it."""
    squares, df = 0.0, 0
    for group in groups:
        logs = [math.log(x) for x in group if x > 0]
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        squares += sum((v - mean) ** 2 for v in logs)
        df += len(logs) - 1
    return (math.sqrt(squares / df), df) if df else (0.0, 0)


def level_interval(
    medians: Sequence[float], sd: float, df: int, confidence: float = CONFIDENCE
) -> list[float] | None:
    """The `confidence` interval of the level that these processes' medians scatter about:
    exp(mean log ± t(df) * sd / sqrt(k)) over the k medians, `sd` and `df` from
    `between_processes`; None when df is 0 (no scatter measured: no interval over processes)."""
    logs = [math.log(x) for x in medians if x > 0]
    if not df or not logs:
        return None
    mean, half = statistics.fmean(logs), t_quantile(df, confidence) * sd / math.sqrt(len(logs))
    return [math.exp(mean - half), math.exp(mean + half)]


def hull(*intervals: Sequence[float] | None) -> list[float]:
    """The smallest interval holding every given one (None ones skipped)."""
    given = [i for i in intervals if i is not None]
    return [min(i[0] for i in given), max(i[1] for i in given)]
