"""The matmul sweep as an evaluator publishes it: MFU against GFLOP per M, and the shape table.

MFU is a fraction of a peak that is either a datasheet number or a measured one; the suite says
which in diagnostics["peak_label"], and every MFU shown here carries that label. The MFU headlines'
intervals cover timing noise and the machine's drift over the run (the drift reference each case
read, `run_drift`), or read "inconclusive" when the machine moved too far, or when a case's
adaptive sampling (`metrics.sampler`) ran out of budget before its median's 95% interval came
within ±5%: then with about how much more time would likely conclude it, and the option.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from trainready.core.case import Result
from trainready.metrics.sampler import TARGET, budget_why, estimate, median_of_intervals
from trainready.metrics.stats import (
    DRIFT_CENTRAL_MIN,
    drift,
    drift_band,
    drift_why,
    hull,
    spread_why,
    unstable_why,
    widen,
    without_transients,
)
from trainready.reporting import fmt
from trainready.reporting.blocks import STATUS, Block, Chart, Column, Stat, Stats, Table, Text, num
from trainready.reporting.charts import MARKERS, PALETTE, Axis, Point, Series, xy_chart
from trainready.reporting.model import Report, RunView, finite
from trainready.reporting.sections import host

SUITE = "matmul"
KEY_METRICS = ("tflops", "mfu", "time_ms")
METRIC_GOALS = {"tflops": "higher", "mfu": "higher", "time_ms": "lower"}
PASS_ORDER = {"fwd": 0, "dX": 1, "dW": 2}
INCONCLUSIVE = "inconclusive"


def _gflop(r: Result) -> float | None:
    if finite(r.metrics.get("gflop")):
        return r.metrics["gflop"]
    p = r.case.params
    if all(isinstance(p.get(k), int) for k in "MNK"):
        return 2 * p["M"] * p["N"] * p["K"] / 1e9
    return None


def _sort_key(r: Result) -> tuple:
    p = r.case.params
    return (
        str(p.get("model", "")),
        str(p.get("op", "")),
        p.get("M", 0),
        PASS_ORDER.get(p.get("pass"), 9),
    )


def _measured(run: RunView, metric: str) -> list[Result]:
    """Passing cases with the metric: a wrong or failed matmul has no speed worth plotting."""
    return [r for r in run.in_suite(SUITE) if r.status == "pass" and finite(r.metrics.get(metric))]


def _ms(results: list[Result]) -> list:
    return sorted({r.case.params.get("M") for r in results}, key=lambda m: (m is None, m or 0))


def peak_label(results: list[Result]) -> str:
    labels = {r.diagnostics.get("peak_label") for r in results if "mfu" in r.metrics}
    return "; ".join(sorted(str(label) for label in labels if label))


@dataclass(frozen=True)
class RunDrift:
    """How far the machine's speed moved over a run's matmul cases, from their drift reference."""

    workload: str  # the drift reference's workload ("" when no case recorded one)
    readings: list[float]  # this run's readings, FLOP/s
    calibration: float | None  # the reading at the peak's calibration, FLOP/s
    moved: float | None  # `stats.drift` over all of them; None when fewer than two
    unstable: int = 0  # readings whose samples never agreed: no speed, left out of `readings`
    taken: int = 0  # readings taken, unstable ones included (0: a record from before it was kept)
    transient: int = 0  # readings both neighbours contradicted, set aside (`stats.transients`)


@dataclass(frozen=True)
class MfuAtM:
    """The MFU headline of the passing cases at one M: median, intervals, drift, range and why."""

    value: float  # the cases' median MFU
    noise_interval: list[float]  # how far timing noise moves the median
    interval: list[float]  # noise_interval widened each way by the drift
    drift: float | None  # how far the machine's speed moved (`RunDrift.moved`)
    range: list[float]  # the cases' lowest and highest MFU
    cases: int
    spread: float  # the cases' median timing spread
    why: str  # why the headline is inconclusive ("" when it is not)


def run_drift(results: list[Result]) -> RunDrift:
    """How far the machine's speed moved while the run timed its matmul cases, from the drift
    reference every case read just before and after its timed loop, and (a measured peak) the
    reading taken with the peak's calibration, which every MFU is a share of."""
    timed = sorted(
        (r for r in results if r.diagnostics.get("drift_reference")), key=lambda r: r.started_at
    )
    refs = [r.diagnostics["drift_reference"] for r in timed]
    taken = [x for ref in refs for x in ref.get("readings_flops") or [] if finite(x)]
    # In the order taken (cases by start time): a reading that both neighbours contradict is
    # a transient, not the machine's drift (`stats.transients`).
    readings, transient = without_transients(taken)
    calibration = next(
        (ref["calibration_flops"] for ref in refs if ref.get("calibration_flops")), None
    )
    return RunDrift(
        workload=refs[0].get("workload", "") if refs else "",
        readings=readings,
        calibration=calibration,
        moved=drift(readings, calibration),
        unstable=sum(int(ref.get("unstable") or 0) for ref in refs),
        taken=sum(len(ref.get("readings") or []) for ref in refs),
        transient=transient,
    )


def run_unstable_why(d: RunDrift) -> str | None:
    """`stats.unstable_why` over the run's drift readings."""
    return unstable_why(d.unstable, d.taken)


def readings_text(readings: list[float]) -> str:
    """The drift reference's readings as a note reads them: their range in GFLOP/s, and the
    central 80% the drift counts where there are enough of them (`stats.drift`)."""
    text = f"{_gflops(min(readings))}–{_gflops(max(readings))} GFLOP/s"
    if len(readings) >= DRIFT_CENTRAL_MIN:
        a, b = drift_band(readings) or (min(readings), max(readings))
        text += f" (central 80% of {len(readings)} readings {_gflops(a)}–{_gflops(b)})"
    return text


def drift_text(d: RunDrift) -> str:
    """The drift reference as a note reads it: its workload, its range and the move."""
    if not d.readings:
        if d.unstable:
            return f"drift reference {d.workload}: unstable in all {d.unstable} readings"
        return "machine drift unknown (no drift reference recorded)"
    text = f"drift reference {d.workload}: {readings_text(d.readings)} this run"
    if d.calibration:
        text += f", {_gflops(d.calibration)} at the peak's calibration"
    unstable = f"; unstable in {d.unstable} of {d.taken} readings" if d.unstable else ""
    if d.transient:
        unstable += (
            f"; {fmt.plural(d.transient, 'transient reading', 'transient readings')} set aside "
            "(each contradicted by both neighbours, which agreed)"
        )
    if d.moved is None:
        return text + "; drift unknown (one reading)" + unstable
    return f"{text}: moved {fmt.percent(d.moved)}{unstable}"


def _when(machine: RunDrift) -> str:
    return "during the run" + (" and since the peak's calibration" if machine.calibration else "")


def _gflops(flops: float) -> str:
    return fmt.number(flops / 1e9)


def mfu_at_m(results: list[Result], machine: RunDrift | None = None) -> MfuAtM:
    """The MFU of the passing cases at one M as a headline reads it: their median, the cases'
    range, how far timing noise moves the median (`noise_interval`: the median of each case's
    MFU at the two ends of its repeats' interquartile range, taken symmetric about its median),
    and `interval`, that widened each way by how far the machine's speed moved (`machine`:
    `run_drift` over the run's cases; these results' own when not given). `why` says why it is
    inconclusive: a case above 100% MFU (the measured peak is too low, so no MFU against it
    means much), a drift over stats.MAX_DRIFT or an unstable drift reading, a case whose
    sampling budget ran out (`sampler.budget_why`: with the time and the option that would
    likely conclude it), or the cases' median timing spread over stats.MAX_SPREAD.

    Per M, because M=1 (matrix-vector, memory-bound) and M >= 128 (compute-bound) form separate
    clusters: one median over both is the midpoint between them, and moves with the mix."""
    machine = machine if machine is not None else run_drift(results)
    mfus = [r.metrics["mfu"] for r in results]
    spreads = [r.metrics["spread"] for r in results if finite(r.metrics.get("spread"))]
    spread = statistics.median(spreads) if spreads else 0.0
    # The IQR, wider than the sampler's 95% interval of the median: a rerun's cases land within
    # it (tests/e2e/test_headline_stability.py); the sampler's verdict says when to stop.
    half = [min(r.metrics.get("spread") or 0.0, 1.9) / 2 for r in results]  # < 1: times stay > 0
    above = sum(m > 1 for m in mfus)
    why = (
        f"{fmt.plural(above, 'case')} above 100% MFU: the measured peak is too low "
        "(trainready devices --recalibrate)"
        if above
        # The drift before the spread, as in the train suite: a machine that moved spreads too.
        else drift_why(machine.moved, _when(machine))
        or run_unstable_why(machine)
        or _sampling_why(results)
        or spread_why("timed repeats (median over the cases)", spread)
    )
    noise = hull(
        [
            statistics.median(m / (1 + h) for m, h in zip(mfus, half, strict=True)),
            statistics.median(m / (1 - h) for m, h in zip(mfus, half, strict=True)),
        ],
        _sampled(results),
    )
    return MfuAtM(
        value=statistics.median(mfus),
        noise_interval=noise,
        interval=widen(noise, machine.moved),
        drift=machine.moved,
        range=[min(mfus), max(mfus)],
        cases=len(mfus),
        spread=spread,
        why=why or "",
    )


def _case_bounds(r: Result) -> list[float]:
    """A case's MFU interval from its sampled timing's (MFU is work over time: the time's
    interval turned over); its MFU alone for a record from before the sampler."""
    mfu, v = r.metrics["mfu"], r.diagnostics.get("sampling") or {}
    t, (lo, hi) = v.get("value"), v.get("interval") or (None, None)
    if not (t and lo and hi and lo > 0):
        return [mfu, mfu]
    return [mfu * t / hi, mfu * t / lo]


def _sampled(results: list[Result]) -> list[float]:
    """The interval the cases' sampled timings give their median MFU
    (`sampler.median_of_intervals` over `_case_bounds`)."""
    return median_of_intervals([_case_bounds(r) for r in results])


def _sampling_why(results: list[Result]) -> str | None:
    """Why the headline is inconclusive for its sampling: the interval its cases' timings give
    the median (`_sampled`) is wider than the sampler's target and some cases' budgets ran out
    (`sampler.budget_why`: the time and the option that would likely conclude them). A few
    cases that ran out do not hold up a median the rest pin down."""
    median = statistics.median(r.metrics["mfu"] for r in results)
    if estimate(median, _sampled(results)) <= TARGET:
        return None
    return budget_why([r.diagnostics.get("sampling") for r in results])


def _mfu_stat(label: str, results: list[Result], machine: RunDrift) -> Stat:
    e = mfu_at_m(results, machine)
    cases = fmt.plural(e.cases, "passing case")
    peak = f"; {peak_label(results)}" if peak_label(results) else ""
    if e.why:
        measured = f"measured {fmt.percent(e.value)}, median of {cases}"
        note = f"{e.why}; {measured}; {drift_text(machine)}{peak}"
        return Stat(label, INCONCLUSIVE, fmt.text, note)
    lo, hi = e.interval
    note = (
        f"median of {cases} ({fmt.percent(e.range[0])}–{fmt.percent(e.range[1])}); "
        f"interval {fmt.percent(lo)}–{fmt.percent(hi)}: timing noise "
        f"{fmt.percent(e.noise_interval[0])}–{fmt.percent(e.noise_interval[1])} "
        f"(repeats' spread {fmt.percent(e.spread)}), "
        + ("widened by the drift; " if e.drift else "")
        + f"{drift_text(machine)}{peak}"
    )
    return Stat(label, e.value, fmt.percent, note)


def mfu_stats(run: RunView, prefix: str = "") -> list[Stat]:
    """One MFU per M (never one median over all M), each with its sample, its spread and the
    machine's drift over the run."""
    measured = _measured(run, "mfu")
    machine = run_drift(run.in_suite(SUITE))
    return [
        _mfu_stat(
            f"{prefix}matmul MFU at M={m}",
            [r for r in measured if r.case.params.get("M") == m],
            machine,
        )
        for m in _ms(measured)
    ]


def headlines(run: RunView) -> list[Stat]:
    stats = mfu_stats(run)
    fallbacks = host.collect(run.in_suite(SUITE), _case_id)
    if not fallbacks.on_cpu:
        stats.append(fallbacks.stat("matmul host-fallback ops"))
        stats.append(fallbacks.roundtrip_stat("matmul host round-trips inside kernels"))
    return stats


def _case_id(r: Result) -> str:
    return r.case.id


def section(report: Report, suite: str) -> list[Block]:
    blocks: list[Block] = []
    stats = []
    for run in report.runs:
        stats += mfu_stats(run, f"{run.label}: " if report.multi else "")
    if stats:
        blocks.append(Stats(stats))
    blocks.extend(_peak_warnings(report))
    blocks.append(chart(report))
    blocks.append(table(report))
    for run in report.runs:
        fallbacks = host.collect(run.in_suite(SUITE), _case_id)
        if fallbacks.ops or (fallbacks.measured and not fallbacks.on_cpu):
            prefix = f"{run.label}: " if report.multi else ""
            blocks.append(host.table(fallbacks, f"{prefix}Ops that left the device (first call)"))
    return blocks


def _peak_warnings(report: Report) -> list[Text]:
    """MFU above 100% means the peak is wrong, not the device fast: say so above the numbers."""
    texts = []
    for run in report.runs:
        fell_back = [r for r in run.in_suite(SUITE) if r.diagnostics.get("host_fallback")]
        if fell_back:
            prefix = f"{run.label}: " if report.multi else ""
            texts.append(
                Text(
                    f"{prefix}{len(fell_back)} of {len(run.in_suite(SUITE))} cases' MFU is not "
                    f"the device's: {fell_back[0].diagnostics['host_fallback']}"
                )
            )
        warned = [r for r in _measured(run, "mfu") if r.diagnostics.get("peak_warning")]
        if warned:
            worst = max(warned, key=lambda r: r.metrics["mfu"])
            prefix = f"{run.label}: " if report.multi else ""
            texts.append(
                Text(
                    f"{prefix}{len(warned)} of {len(_measured(run, 'mfu'))} cases are above 100% "
                    f"MFU, worst {worst.case.id}: {worst.diagnostics['peak_warning']}"
                )
            )
    return texts


def chart(report: Report) -> Chart:
    # MFU when every run knows its peak; otherwise TFLOP/s, which needs no peak.
    metric = "mfu" if all(_measured(run, "mfu") for run in report.runs) else "tflops"
    y_label = "MFU %" if metric == "mfu" else "TFLOP/s"
    measured = [_measured(run, metric) for run in report.runs]
    ms = _ms([r for results in measured for r in results])
    series = []
    for i, (run, results) in enumerate(zip(report.runs, measured, strict=True)):
        for j, m in enumerate(ms):
            at_m = [r for r in results if r.case.params.get("M") == m]
            points = [p for r in at_m if (p := _point(r, metric)) is not None]
            if points:
                name = f"{run.label} M={m}" if report.multi else f"M={m}"
                # Colour says M, marker says device: same-M series of two devices sit side by side.
                color, marker = PALETTE[j % len(PALETTE)], MARKERS[i % len(MARKERS)]
                series.append(Series(name, points, color, marker))
    peaks = [(run.label, peak_label(_measured(run, "mfu"))) for run in report.runs]
    peaks_text = ", ".join(f"{p} ({name})" if report.multi else p for name, p in peaks if p)
    title = f"Matmul {y_label} against problem size"
    caption = f"{title}, one series per M, passing cases only"
    if metric == "mfu" and peaks_text:
        caption += f"; MFU {peaks_text}"
    without = [run.label for run in report.runs if not _measured(run, "mfu")]
    if metric == "tflops" and without:
        caption += f"; no MFU: no peak FLOP/s known for {', '.join(without)}"
    svg = xy_chart(
        series, Axis("GFLOP per matmul", log=True), Axis(y_label, zero=True), title=title
    )
    return Chart(svg, caption)


def _point(r: Result, metric: str) -> Point | None:
    gflop = _gflop(r)
    if gflop is None:
        return None
    p, value = r.case.params, r.metrics[metric]
    shown = fmt.percent(value) + " MFU" if metric == "mfu" else f"{fmt.number(value)} TFLOP/s"
    tip = (
        f"{p.get('model')} {p.get('op')} {p.get('pass')} M={p.get('M')} N={p.get('N')} K={p.get('K')}: "
        f"{fmt.number(gflop)} GFLOP, {shown}"
    )
    return Point(gflop, value * 100 if metric == "mfu" else value, tip)


def table(report: Report) -> Table:
    rows_by_run = [(run, sorted(run.in_suite(SUITE), key=_sort_key)) for run in report.runs]
    labels = {peak_label([r]) for _, results in rows_by_run for r in results if "mfu" in r.metrics}
    # One label for every MFU: say it in the header; several: a column, so no cell is ambiguous.
    per_row_peak = len(labels) > 1
    single = next(iter(labels), "")
    columns = [
        *([Column("run")] if report.multi else []),
        Column("model"),
        Column("op"),
        num("M"),
        num("N"),
        num("K"),
        Column("pass"),
        num("GFLOP"),
        num("time ms"),
        num("TFLOP/s"),
        num(f"MFU % ({single})" if single and not per_row_peak else "MFU %", _mfu_percent),
        *([Column("peak")] if per_row_peak else []),
        STATUS,
    ]
    rows = []
    for run, results in rows_by_run:
        for r in results:
            p, m = r.case.params, r.metrics
            rows.append(
                [
                    *([run.label] if report.multi else []),
                    p.get("model"),
                    p.get("op"),
                    p.get("M"),
                    p.get("N"),
                    p.get("K"),
                    p.get("pass"),
                    _gflop(r),
                    m.get("time_ms"),
                    m.get("tflops"),
                    m.get("mfu"),
                    *([peak_label([r]) or None] if per_row_peak else []),
                    r.status,
                ]
            )
    dtypes = sorted(
        {
            str(r.case.params["dtype"])
            for _, rs in rows_by_run
            for r in rs
            if "dtype" in r.case.params
        }
    )
    caption = "Matmul shapes" + (f" ({', '.join(dtypes)})" if dtypes else "")
    return Table(columns, rows, caption, drill_down=True)


def _mfu_percent(fraction: float) -> str:
    return f"{fraction * 100:.1f}"
