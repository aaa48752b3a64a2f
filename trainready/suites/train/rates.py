"""The numbers of a train case from its scenarios' records: one steady rate per mode and pool,
its interval over processes widened by the machine's drift, tokens/s, MFU, the compiled speedup,
and the ledger (total time after N steps, break-even step) per scenario.

See `train.py` for the rules; `stats.py` for the intervals; `trainready.metrics.ledger` for total(N).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Any

from trainready.metrics import ledger
from trainready.metrics.sampler import (
    SHRINK,
    TARGET,
    Rule,
    budget_why,
    estimate,
    needed_count,
    time_to_give,
    value_and_interval,
)
from trainready.metrics.stats import (
    CONFIDENCE,
    MAX_DRIFT,
    between_processes,
    drift,
    drift_why,
    hull,
    level_interval,
    median_interval,
    ratio_interval,
    spread_why,
    unstable_why,
    widen,
    without_transients,
)
from trainready.probes.numerics import accepted_losses
from trainready.probes.timing import TimingStats
from trainready.suites.train.plan import MODES
from trainready.suites.train.scenario import Scenario

# One steady rate per mode. The scenarios at the configured shape (cold, warm, arch_change) differ
# in what their first step pays, not in what a steady step costs, so their steady steps are pooled
# into one rate; shape_change trains another sequence length and gets its own. (Measured apart,
# each scenario's rate carried its own noise, and the conclusions flipped between scenarios.)
MAIN_POOL = "main"
OWN_POOL = {"shape_change": "shape_change"}  # scenario -> its pool; every other: MAIN_POOL

# A rate supports a conclusion (else it, the speedup and the break-even steps read
# "inconclusive") when the drift reference moved at most stats.MAX_DRIFT during the case and since
# the peak's calibration, the mode's processes' steady medians differ by at most as much, with at
# least stats.MIN_SAMPLES steady steps per mode, a spread (IQR / median of the pooled steps) of at
# most stats.MAX_SPREAD (above it the steps do not share one rate: a busy machine, a noisy clock,
# scenarios running at different speeds) and, for the speedup, when its stats.CONFIDENCE interval
# lies on one side of 1: otherwise either mode could be the faster per step, so whether compiled
# ever breaks even is not known.


def pool_of(scenario: str) -> str:
    return OWN_POOL.get(scenario, MAIN_POOL)


# What a rerun's intervals must meet, and what one case can measure of it. The steps of one
# process share its state (where its threads landed, its allocator, its compiled graphs, the
# machine's speed while it ran): a rerun starts new processes, whose steps can sit apart from
# this run's by far more than the steps' own noise (on a quiet 2-core CI machine the compiled
# rate moved from 7171-11488 to 5528-6321 tokens/s between two runs, each interval a bootstrap
# over steps). Every scenario is a fresh process, so a case with several scenarios per mode
# measures that scatter itself: the process is the unit sampled (`stats.between_processes`).
#
# And the machine itself: every training process reads the drift reference (a fixed GEMM,
# `device.reference`) after its first step and after its last, and a measured peak carries the
# reading taken with its calibration; how far those readings moved (`stats.drift`) is how far the
# machine's speed moved during the case and since the calibration, which every MFU is a share of.
#
# The cold and warm steady medians (the same model, shape and kernels; the modes take turns) are
# kept as the case's first drift figure, as before: they move with the machine too.
SAME_WORK = ("cold", "warm")
DRIFT_WORKLOAD = (
    "the steady steps of cold, warm and their repeats (the same model, shape and kernels), per mode"
)
# Repeat processes: the main configuration on warm caches, run after the planned scenarios
# while the rate's interval over processes is wider than the sampler's target
# (`processes.add_repeats`, `--set process_timing_s`): "repeat2", "repeat3", ...
REPEAT = "repeat"


def repeat_name(k: int) -> str:
    return f"{REPEAT}{k}"


def is_repeat(scenario: str) -> bool:
    return scenario.startswith(REPEAT)


def same_work(scenario: str) -> bool:
    """Whether a scenario trains the main configuration as cold does (its steady steps re-time
    the same work): cold, warm and the repeats."""
    return scenario in SAME_WORK or is_repeat(scenario)


# One mode's processes more than stats.MAX_DRIFT apart make the rates inconclusive only while
# the mode has fewer processes than this: two or three say nothing of where a rerun's would land,
# while from four on (the repeats, `processes.add_repeats`) their scatter is measured and the t
# interval over them carries it (a quiet quick run of 2026-12-06: 7 compiled processes at
# 9.7-12.2 ms, 8% scatter over 12 df, read "differ by 25%"; the widest of n processes only grows
# with n).
APART_FEW = 4


def _moved(speeds: list[float]) -> float | None:
    """How far the same-work processes' speeds (in the order run) moved, as the reference's
    readings are judged: one process both its neighbours contradict is a transient, set aside
    (`stats.drift`, `stats.transients`); it stretches the ledger's first steps
    (`case_drift`'s `process_moved`)."""
    return drift(without_transients(speeds)[0])


def _reference(runs: dict[str, list[Scenario]] | None) -> list[float]:
    """The drift reference's readings (FLOP/s) of every process of the case, in the order run."""
    if not runs:
        return []
    turns = max((len(ss) for ss in runs.values()), default=0)
    order = [ss[i] for i in range(turns) for ss in (runs.get(m, []) for m in MODES) if i < len(ss)]
    return [float(x) for s in order if s.record for x in s.record.get("reference_flops") or [] if x]


def case_drift(
    summaries: dict[str, dict[str, Any]],
    runs: dict[str, list[Scenario]] | None = None,
    peak: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """How far the machine's speed moved over the case: {"workload", "readings_s" (per mode, the
    steady median of each SAME_WORK scenario in the order run), "process_moved" (the largest
    `stats.drift` of a mode's readings_s; None where no mode has two), "reference" (the drift
    reference read in the training processes: {"workload", "readings_flops", "calibration_flops",
    "moved_in_case" (over its readings), "moved" (and the calibration's), "unstable" (readings
    whose samples never agreed), "transient" (readings both neighbours contradicted, set aside:
    `stats.transients`), "taken" (readings in all)}, None if no process read it), "moved" (the largest of process_moved and the reference's moved: the first steps, one
    sample each, may have run that much faster or slower)}."""
    readings = {
        mode: [x["step_s"] for n, x in by.items() if same_work(n) and x]
        for mode, by in summaries.items()
    }
    moved = [d for xs in readings.values() if (d := _moved([1 / x for x in xs if x > 0]))]
    known = any(len(xs) > 1 for xs in readings.values())
    process_moved = max(moved, default=0.0) if known else None
    # A reading both its neighbours contradict is a transient, not the machine's drift.
    found, transient = without_transients(_reference(runs))
    records = [s.record for ss in (runs or {}).values() for s in ss if s.record]
    unstable = sum(int(r.get("reference_unstable") or 0) for r in records)
    reference = None
    if found or unstable:
        calibration = (peak or {}).get("reference_flops")
        reference = {
            "workload": next(
                r.get("reference_workload") for r in records if r.get("reference_flops")
            ),
            "readings_flops": found,
            "calibration_flops": calibration,
            "moved_in_case": drift(found),
            "moved": drift(found, calibration),
            # Readings whose samples never agreed: no speed, so not among readings_flops.
            "unstable": unstable,
            "transient": transient,
            "taken": sum(len(r.get("reference_flops") or []) for r in records),
        }
    figures = [x for x in (process_moved, reference and reference["moved"]) if x is not None]
    return {
        "workload": DRIFT_WORKLOAD,
        "readings_s": readings,
        "process_moved": process_moved,
        "reference": reference,
        "moved": max(figures) if figures else None,
    }


def _with_option(sampling: dict[str, Any] | None) -> dict[str, Any] | None:
    """A process's steady-step verdict, naming `--set step_timing_s` where its budget ran out."""
    if not sampling or sampling.get("concluded", True):
        return sampling
    return {**sampling, "option": f"--set step_timing_s={math.ceil(time_to_give(sampling))}"}


def steps_short(by_scenario: dict[str, Any], found: list[str], half: float) -> str | None:
    """Why the pooled steady steps settle nothing for their sampling: their median's interval
    is wider than the sampler's target (`half`, relative) and some process's steady-step budget
    ran out (`sampler.budget_why`: the time and the `--set step_timing_s` that would likely
    conclude them). None when the pooled interval is tight enough or every process concluded."""
    if half <= TARGET:
        return None
    return budget_why([by_scenario[n].get("sampling") for n in found], "processes' steady steps")


def processes_needed(
    medians: list[float], interval: list[float] | None, process_s: float
) -> dict[str, Any] | None:
    """Where the process is the unit sampled: how far the t interval over the processes'
    medians is from ±5% of their level, and, when wider, about how many more processes (and
    seconds of them, at `process_s` each) would likely bring it there (`sampler.needed_count`
    at 1/sqrt(k)). None without an interval (fewer than two processes: no scatter measured)."""
    if not interval or not medians:
        return None
    rule = Rule(kind="level", min_samples=2)
    centre, _ = value_and_interval(medians, rule)
    half = estimate(centre, interval)
    found = {"half_width": half, "processes": len(medians), "process_s": process_s}
    if half <= rule.target:
        return {**found, "concluded": True}
    more = needed_count(len(medians), half, rule, SHRINK) - len(medians)
    return {**found, "concluded": False, "more": more, "more_s": more * process_s}


def price_repeats(rates: dict[str, Any], repeat_s: float | None) -> None:
    """Each mode's `processes` estimate priced as repeats come (one process per mode each:
    `more` of them cost `more` times a pair), with the option that gives that time on top of the
    case's repeat budget `repeat_s` (`--set process_timing_s`; None: not known)."""
    found = {m: e for m in MODES if (e := (rates.get(m) or {}).get("processes"))}
    pair_s = sum(e.get("process_s", 0.0) for e in found.values())
    for e in found.values():
        if e["concluded"]:
            continue
        e["more_s"] = e["more"] * pair_s
        if repeat_s is not None:
            e["option"] = f"--set process_timing_s={math.ceil(repeat_s + e['more_s'])}"


def steady(record: dict[str, Any], warmup: int) -> TimingStats:
    """The steps after the first and `warmup` more: the steady state."""
    return TimingStats.from_samples(record["step_times_s"][warmup:], record["clock"])


def scenario_summary(s: Scenario, warmup: int) -> dict[str, Any] | None:
    """What one scenario measured. Its own steady steps are kept as observed (`step_s`,
    `spread`, `steady_times_s`), but the mode's rate pools them with its pool's other scenarios'."""
    if s.record is None:
        return None
    r = s.record
    stats = steady(r, warmup)
    return {
        "first_step_s": r["first_step_s"],
        "first_step_phases": r["first_step_phases"],
        "step_s": stats.median_s,
        "spread": stats.spread,
        "steady_steps": stats.repeats,
        "steady_times_s": stats.samples,
        "reference_flops": r.get("reference_flops"),
        "tokens_per_step": r["tokens_per_step"],
        "clock": stats.clock,
        "losses": r["losses"],
        "flops_per_token": r["flops_per_token"],
        "params": r["params"],
        "moe_dispatch": r.get("moe_dispatch"),
        "world_size": r["world_size"],
        "peak_memory_bytes": r.get("peak_memory_bytes"),
        "memory_source": r.get("memory_source"),
        "memory_unavailable": r.get("memory_unavailable"),
        "process_s": s.process_s,
        # The sampler's verdict on this process's steady steps, with the option that gives more.
        "sampling": _with_option(r.get("sampling")),
        "compile": _compile_summary(r.get("compile") or {}),
    }


def add_first_valid(
    summaries: dict[str, dict[str, Any]], runs: dict[str, list[Scenario]], rel_tol: float
) -> None:
    """Each scenario's first valid result, into its summary: `first_valid_step`, the first step
    (0-based) whose loss the case's numerics check accepts (`probes.numerics.accepted_losses`:
    finite; a compiled loss also within `rel_tol` of eager's at that step in the same scenario,
    the parity rule, where eager has a curve to compare with), and `first_valid_s`, the time to
    the end of it on the ledger's clocks (`ledger.first_valid`: the first step, plus the timed
    steps up to it); both None when no loss was accepted. Step 0 when its loss passed: then
    `first_valid_s` is the first step's own time."""
    for mode, scenarios in runs.items():
        for s in scenarios:
            summary = summaries.get(mode, {}).get(s.name)
            if summary is None or s.record is None:
                continue
            eager = summaries.get("eager", {}).get(s.name)
            reference = eager["losses"] if eager and mode != "eager" else summary["losses"]
            accepted = accepted_losses(reference, summary["losses"], rel_tol)
            found = ledger.first_valid(summary["first_step_s"], s.record["step_times_s"], accepted)
            summary["first_valid_step"], summary["first_valid_s"] = found or (None, None)


def first_valid_s(summary: dict[str, Any]) -> float | None:
    """The time to a scenario's first valid result: `first_valid_s` (None: no loss accepted);
    a summary stored before the check was recorded: its first step."""
    if "first_valid_step" in summary:
        return summary["first_valid_s"]
    return summary["first_step_s"]


def _steady_samples(by_scenario: dict[str, Any], names: list[str]) -> list[float]:
    return [x for n in names if by_scenario.get(n) for x in by_scenario[n]["steady_times_s"]]


def _process_medians(by_scenario: dict[str, Any], names: list[str]) -> list[float]:
    return [by_scenario[n]["step_s"] for n in names if by_scenario.get(n)]


@dataclass(frozen=True)
class Scatter:
    """What a case measured of how far its processes sit apart, and how far the machine moved:
    `sd` and `df` of the processes' steady medians (`stats.between_processes`, over every mode
    and pool), `apart` the widest disagreement of one mode's processes in one pool (max over min
    median, minus 1) and `apart_what` whose, `moved` the drift reference's move during the case
    and since the peak's calibration (rates, MFU), `moved_in_case` during the case alone (the
    speedup: a ratio of modes timed in turn on the machine as it is), and where it moved."""

    sd: float = 0.0
    df: int = 0
    apart: float | None = None
    apart_what: str = ""
    moved: float | None = None
    moved_in_case: float | None = None
    where: str = "during the case"
    unstable: int = 0  # drift readings in the training processes that never settled
    taken: int = 0  # drift readings taken in all

    @classmethod
    def of(
        cls, p: dict[str, Any], summaries: dict[str, dict[str, Any]], machine: dict[str, Any]
    ) -> Scatter:
        groups = {
            (pool, mode): _process_medians(summaries.get(mode, {}), names)
            for pool, names in _pools(p, summaries).items()
            for mode in MODES
        }
        sd, df = between_processes(list(groups.values()))
        aparts = {
            key: d
            for key, xs in groups.items()
            if len(xs) < APART_FEW and (d := drift([1 / x for x in xs if x > 0]))
        }
        worst = max(aparts, key=aparts.__getitem__, default=None)
        what = ""
        if worst is not None:
            pool, mode = worst
            what = f"{len(groups[worst])} {mode} processes'" + (
                f" ({pool})" if pool != MAIN_POOL else ""
            )
        ref = machine.get("reference") or {}
        where = "during the case" + (
            " and since the peak's calibration" if ref.get("calibration_flops") else ""
        )
        apart = aparts[worst] if worst is not None else None
        return cls(
            sd,
            df,
            apart,
            what,
            ref.get("moved"),
            ref.get("moved_in_case"),
            where,
            int(ref.get("unstable") or 0),
            int(ref.get("taken") or 0),
        )

    def why(self) -> str | None:
        """Why the case's rates stand for no single figure: the machine moved more than
        stats.MAX_DRIFT, or a drift reading never settled (the machine was not steady enough to
        say how far it moved), or one mode's processes differ by more than MAX_DRIFT (a rerun's
        processes could land anywhere in that range, in either mode: the scatter is the case's);
        None if none of these."""
        if moved := drift_why(self.moved, self.where):
            return moved
        if shaky := unstable_why(self.unstable, self.taken, " in the training processes"):
            return shaky
        if self.apart is None or self.apart <= MAX_DRIFT:
            return None
        return (
            f"the {self.apart_what} steady medians differ by {self.apart:.0%} "
            f"(over {MAX_DRIFT:.0%}): a rerun's processes could land anywhere in that range"
        )


def steady_rate(
    mode: str,
    by_scenario: dict[str, Any],
    names: list[str],
    peak: dict[str, Any] | None,
    scatter: Scatter | None = None,
) -> dict[str, Any] | None:
    """One mode's steady rate over the scenarios `names` (one process each): the median of all
    their steady steps; its interval (`step_s_interval`) is the hull of the bootstrap interval of
    that median (`step_s_noise_interval`: the steps' noise) and the t interval of the level the
    processes' medians scatter about (`step_s_process_interval`, `stats.level_interval` with the
    case's scatter: what a rerun's new processes may land on), widened by the drift reference's
    move during the case and since the peak's calibration; tokens/s and MFU from them; why it is
    inconclusive, if it is (the machine moved too far, the processes disagree, too few steps,
    too wide a spread)."""
    scatter = scatter or Scatter()
    found = [n for n in names if by_scenario.get(n)]
    if not found:
        return None
    first = by_scenario[found[0]]
    samples = _steady_samples(by_scenario, found)
    stats = TimingStats.from_samples(samples, first["clock"])
    noise = list(median_interval(samples))
    medians = _process_medians(by_scenario, found)
    processes = level_interval(medians, scatter.sd, scatter.df)
    lo, hi = widen(hull(noise, processes), scatter.moved)
    k = first["tokens_per_step"]
    # Too few steps first (no machine makes them enough); then the machine's move and the
    # processes' disagreement (a machine that moved also spreads the pooled steps: the cause).
    what = f"steady {mode} steps"
    why = (
        spread_why(what, 0.0, stats.repeats)
        or scatter.why()
        or steps_short(by_scenario, found, estimate(stats.median_s, noise))
        or spread_why(what, stats.spread, stats.repeats)
    )
    rate = {
        "scenarios": found,
        "steady_steps": stats.repeats,
        "step_s": stats.median_s,
        "step_s_noise_interval": noise,
        "process_step_s": medians,
        "step_s_process_interval": processes,
        "step_s_interval": [lo, hi],
        "spread": stats.spread,
        "tokens_per_step": k,
        "tokens_per_s": k / stats.median_s,
        "tokens_per_s_interval": [k / hi, k / lo],
        "clock": stats.clock,
        "why": why or "",
        "processes": processes_needed(
            medians, processes, statistics.fmean(by_scenario[n]["process_s"] for n in found)
        ),
    }
    if peak and peak.get("flops"):
        per_token = first["flops_per_token"] / first["world_size"] / peak["flops"]
        rate["mfu"] = per_token * rate["tokens_per_s"]
        rate["mfu_interval"] = [per_token * v for v in rate["tokens_per_s_interval"]]
    return rate


def inconclusive_why(
    rates: dict[str, dict[str, Any]], interval: list[float], scatter: Scatter | None = None
) -> str | None:
    """Why the rates support no conclusion about which mode is faster per step; None if they do.
    As a rate's reasons, but with the machine's move within the case only: one slower now than
    at the peak's calibration slowed both modes alike, which leaves their ratio as it was."""
    scatter = scatter or Scatter()
    in_case = dataclasses.replace(scatter, moved=scatter.moved_in_case, where="during the case")
    few = (spread_why(f"steady {m} steps", 0.0, r["steady_steps"]) for m, r in rates.items())
    spread = (spread_why(f"steady {m} steps", r["spread"], None) for m, r in rates.items())
    why = next((w for w in few if w), None) or in_case.why() or next((w for w in spread if w), None)
    if why:
        return why
    lo, hi = interval
    if lo <= 1 <= hi:
        narrower = next((w for r in rates.values() if (w := _what_narrows(r))), None)
        return (
            f"the speedup's {CONFIDENCE:.0%} interval {lo:.3g}–{hi:.3g}× includes 1: "
            "either mode could be the faster per step"
        ) + (f"; {narrower}" if narrower else "")
    return None


def _what_narrows(rate: dict[str, Any]) -> str | None:
    """What more sampling would likely narrow a rate whose sampling was cut short: more repeat
    processes (`price_repeats`' option) or more steady steps (`steps_short`'s reason); None
    where both concluded."""
    found = rate.get("processes") or {}
    if not found.get("concluded", True) and "option" in found:
        return (
            f"about {found['more']} more processes per mode (~{found['more_s']:.3g} s) would "
            f"likely narrow the rates ({found['option']})"
        )
    why = rate.get("why") or ""
    return why if why.startswith("budget ran out") else None


def speedup(
    by_mode: dict[str, dict[str, Any]],
    names: list[str],
    rates: dict[str, dict[str, Any]],
    scatter: Scatter | None = None,
) -> dict[str, Any]:
    """Compiled over eager steady speed: the ratio of the pooled medians; its interval the hull
    of the bootstrap interval of the ratio (the steps' noise) and the t interval over processes
    (`process_interval`: the scenarios' eager over compiled medians, each a ratio of two
    processes, so its scatter is the case's per-process scatter times sqrt 2), widened by the
    drift reference's move during the case (a mode timed while the machine ran faster gains by as
    much; a machine that moved since the calibration moved both modes alike); conclusive or why
    not."""
    scatter = scatter or Scatter()
    samples = {mode: _steady_samples(by_mode[mode], names) for mode in MODES}
    noise = list(ratio_interval(samples["eager"], samples["compiled"]))
    paired = [n for n in names if all(by_mode[m].get(n) for m in MODES)]
    ratios = [by_mode["eager"][n]["step_s"] / by_mode["compiled"][n]["step_s"] for n in paired]
    processes = level_interval(ratios, scatter.sd * math.sqrt(2), scatter.df)
    lo, hi = widen(hull(noise, processes), scatter.moved_in_case)
    why = inconclusive_why(rates, [lo, hi], scatter)
    return {
        "value": rates["eager"]["step_s"] / rates["compiled"]["step_s"],
        "noise_interval": noise,
        "process_interval": processes,
        "interval": [lo, hi],
        "conclusive": why is None,
        "why": why or "",
    }


def _pools(p: dict[str, Any], summaries: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """{pool: scenario names}: the planned scenarios, then the repeats any mode ran."""
    repeats = dict.fromkeys(n for by in summaries.values() for n in by if is_repeat(n))
    pools: dict[str, list[str]] = {}
    for name in [*p["scenarios"], *repeats]:
        pools.setdefault(pool_of(name), []).append(name)
    return pools


def pooled_rates(
    p: dict[str, Any],
    summaries: dict[str, dict[str, Any]],
    peak: dict[str, Any] | None,
    scatter: Scatter | None = None,
    repeat_s: float | None = None,
) -> dict[str, dict[str, Any]]:
    """{pool: {"eager": rate, "compiled": rate, "speedup": ...}}: each mode's rate per pool, and
    the speedup where both modes have one, every interval over the case's `scatter`; how many
    more processes each would likely need, priced by `price_repeats` (`repeat_s`: the case's
    repeat budget)."""
    out: dict[str, dict[str, Any]] = {}
    for pool, names in _pools(p, summaries).items():
        by_mode = {mode: summaries.get(mode, {}) for mode in MODES}
        rates = {
            m: r
            for m in MODES
            if (r := steady_rate(m, by_mode[m], names, peak, scatter)) is not None
        }
        price_repeats(rates, repeat_s)  # before the speedup, whose reason may name the option
        if len(rates) == len(MODES):
            rates["speedup"] = speedup(by_mode, names, rates, scatter)
        if rates:
            out[pool] = rates
    return out


def scenario_ledger(
    eager: dict[str, Any],
    compiled: dict[str, Any],
    pool: str,
    rates: dict[str, Any],
    moved: float | None = None,
) -> dict[str, Any]:
    """A scenario's ledger: its own first valid results (`first_valid_s`: the first step whose
    loss the numerics check accepted, the steps before it on its clock), its pool's steady
    rates. The break-even range is the break-even at the two ends of the speedup's interval,
    each first step (one sample, taken at one moment) allowed to have run as much faster or
    slower as the machine `moved`. A mode with no accepted loss has no first valid result: the
    entry says so, with no totals and no break-even."""
    k = rates["eager"]["tokens_per_step"]
    firsts = {"eager": first_valid_s(eager), "compiled": first_valid_s(compiled)}
    steps = {
        "eager": eager.get("first_valid_step", 0),
        "compiled": compiled.get("first_valid_step", 0),
    }
    invalid = [mode for mode, t in firsts.items() if t is None]
    if invalid:
        return {
            "rate": pool,
            "tokens_per_step": k,
            "first_step_s": {"eager": eager["first_step_s"], "compiled": compiled["first_step_s"]},
            "first_valid_step": steps,
            "first_valid_s": firsts,
            "break_even_step": None,
            "ahead_until_step": None,
            "break_even_range": [None, None],
            "conclusive": False,
            "why": f"no valid result in {' or '.join(invalid)}: the numerics check accepted "
            "none of its losses",
        }
    e = ledger.Mode("eager", firsts["eager"], rates["eager"]["tokens_per_s"])
    c = ledger.Mode("compiled", firsts["compiled"], rates["compiled"]["tokens_per_s"])
    sp = rates["speedup"]
    f = 1 + (moved or 0.0)

    def scaled(eager_by: float, compiled_by: float) -> tuple[ledger.Mode, ledger.Mode]:
        return (
            ledger.Mode(e.name, e.first_step_s * eager_by, e.tokens_per_s),
            ledger.Mode(c.name, c.first_step_s * compiled_by, c.tokens_per_s),
        )

    earliest = ledger.break_even_range(*scaled(f, 1 / f), k, sp["interval"])[0]
    latest = ledger.break_even_range(*scaled(1 / f, f), k, sp["interval"])[1]
    return {
        "rate": pool,
        "tokens_per_step": k,
        "first_step_s": {"eager": eager["first_step_s"], "compiled": compiled["first_step_s"]},
        "first_valid_step": steps,
        "first_valid_s": {"eager": e.first_step_s, "compiled": c.first_step_s},
        "tokens_per_s": {"eager": e.tokens_per_s, "compiled": c.tokens_per_s},
        "break_even_step": ledger.break_even_step(e, c, k),
        "ahead_until_step": ledger.ahead_until_step(e, c, k),
        "break_even_range": [earliest, latest],
        "conclusive": sp["conclusive"],
        "why": sp["why"],
    }


def _compile_summary(c: dict[str, Any]) -> dict[str, Any]:
    """What the compile probe saw over the whole run, and the compile seconds by phase."""
    phases = c.get("phases", {})
    summary = {k: c[k] for k in ("graph_breaks", "recompiles", "graphs", "break_reasons") if k in c}
    summary["recompile_reasons"] = c.get("recompile_reasons", [])[:5]
    summary["phases"] = phases
    if "cache" in c:  # the process's compile-cache lookups (probes/compile.py: cache_counts)
        summary["cache"] = c["cache"]
    if "dynamo_s" in phases:
        # Dynamo's frame compiles include the forward backend compile; the backward graph is
        # compiled at the first backward, outside them.
        summary["compile_s"] = phases["dynamo_s"] + phases.get("backend_backward_s", 0.0)
    return summary
