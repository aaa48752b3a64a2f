"""The parity scorecard: pass rates by mode, dtype, modality and architecture trait, why cases
fail, the graph-break reasons, the ops that went to the host and who hit them, the slowest
compiles, every case with its worst tensor, and the loss curves of the failing cases against the
float64 reference. Nothing is hidden: a case without traits (its model was not built) is counted
beside the trait table instead of under a value, and one without a modality (a run stored before
modalities were recorded) is counted and named under "unknown"."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import cached_property

from trainready.core.case import FAILING, Result
from trainready.models.zoo.families import MODALITIES
from trainready.reporting import fmt
from trainready.reporting.blocks import STATUS, Block, Chart, Column, Stat, Stats, Table, num
from trainready.reporting.charts import PALETTE, Axis, Panel, Point, Series, small_multiples
from trainready.reporting.model import Report, RunView, compile_note, finite, reason
from trainready.reporting.sections import host

SUITE = "parity"
KEY_METRICS = ("worst_ratio", "curve_max_rel_dev", "graph_breaks", "compile_s")
METRIC_GOALS = {"compile_s": "lower"}  # numerics are judged by status, not by the gate
TRAITS = (
    *("attention", "moe", "norm", "mlp", "position"),  # hf.traits
    *("mixer", "mla", "sliding_window", "cross_attention", "conv"),  # families.extra_traits
)
UNKNOWN = "unknown"  # the modality of a case that recorded none
MODE_NAMES = {"eager": "eager", "compile": "compiled"}
TOP = 15
MODELS_SHOWN = 6
CURVES_SHOWN = 12  # failing cases whose loss curves are drawn; the rest are counted
CURVE_IDS_NAMED = 5  # of the cases not drawn, how many are named
REFERENCE_COLOR, TOLERANCE_COLOR, BASELINE_COLOR = "#24292f", "#cf222e", "#8250df"
_TINY = 1e-30  # as probes.numerics


# The mode of a case that stands for a zoo whose library is missing (no mode or dtype ran).
UNAVAILABLE = "zoo unavailable"


def _combo(r: Result) -> str:
    p = r.case.params
    if p.get("source") == "unavailable":
        return UNAVAILABLE
    return f"{p.get('mode', '?')} {p.get('dtype', '?')}"


def _rate(results: list[Result]) -> str:
    passed = sum(r.status == "pass" for r in results)
    return f"{passed}/{len(results)}"


def _model(r: Result) -> str:
    p = r.case.params
    return f"{p.get('source', '?')}/{p.get('model', '?')}"


def _mode(r: Result) -> str:
    if r.case.params.get("source") == "unavailable":
        return UNAVAILABLE
    return str(r.case.params.get("mode", "?"))


def _modality(r: Result) -> str:
    """The case's recorded modality, else the one it was planned with (a case that raised or
    crashed records none); the synthetic matrix is decoders, anything else without one (stored
    before modalities were kept) is unknown."""
    recorded = r.diagnostics.get("modality") or r.case.params.get("modality")
    if recorded:
        return str(recorded)
    return "text-decoder" if r.case.params.get("source") == "synthetic" else UNKNOWN


def _modality_order(name: str) -> tuple[int, str]:
    return (MODALITIES.index(name) if name in MODALITIES else len(MODALITIES), name)


def _by_modality_groups(results: list[Result]) -> dict[str, list[Result]]:
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        groups[_modality(r)].append(r)
    return dict(sorted(groups.items(), key=lambda kv: _modality_order(kv[0])))


@dataclass(frozen=True)
class Counted:
    """How many of a set of parity cases passed."""

    passed: int
    cases: int


@dataclass(frozen=True)
class ModalityCount:
    """One modality's parity cases: passed of all, unsupported, and passed per mode."""

    passed: int
    cases: int
    unsupported: int
    modes: dict[str, Counted]  # mode -> its cases


def modality_counts(results: list[Result]) -> dict[str, ModalityCount]:
    """Per modality: passed and cases in all, per mode, and how many were unsupported (JSON:
    `dataclasses.asdict` of each)."""
    counts = {}
    for name, rs in _by_modality_groups(results).items():
        modes: dict[str, list[Result]] = defaultdict(list)
        for r in rs:
            modes[_mode(r)].append(r)
        total = _counted(rs)
        counts[name] = ModalityCount(
            passed=total.passed,
            cases=total.cases,
            unsupported=sum(r.status == "unsupported" for r in rs),
            modes={m: _counted(v) for m, v in sorted(modes.items())},
        )
    return counts


def _counted(results: list[Result]) -> Counted:
    return Counted(passed=sum(r.status == "pass" for r in results), cases=len(results))


def _fraction(counted: Counted | ModalityCount) -> str:
    return f"{counted.passed}/{counted.cases}"


def _modality_text(counts: dict[str, ModalityCount]) -> str:
    return ", ".join(f"{m} {_fraction(c)}" for m, c in counts.items())


def _names(models: set[str]) -> str:
    shown = sorted(models)[:MODELS_SHOWN]
    more = len(models) - len(shown)
    return ", ".join(shown) + (f" (+{more})" if more > 0 else "")


def headlines(run: RunView) -> list[Stat]:
    results = run.in_suite(SUITE)
    if not results:
        return []
    summary = run.suites[SUITE]
    note = f"{summary.passed}/{summary.total} cases"
    stats = [Stat("parity pass rate", summary.pass_rate or 0.0, fmt.percent, note)]
    by_combo: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_combo[_combo(r)].append(r)
    if len(by_combo) > 1:  # eager / compiled, fp32 / bf16 side by side
        stats += [Stat(f"parity {k}", _rate(v)) for k, v in sorted(by_combo.items())]
    numerics = sum(r.status == "fail_numerics" for r in results)
    stats += [
        Stat(
            "parity by modality",
            modality_counts(results),
            _modality_text,
            "passed/cases per modality",
        ),
        Stat("parity numerics failures", numerics, fmt.number, "cases wrong against float64"),
        graph_breaks_stat(results),
        *host.host_stats(host.collect(results, _model)),
    ]
    return stats


def graph_breaks_stat(results: list[Result]) -> Stat:
    """Graph breaks over the compiled cases that ran; a count only where something compiled."""
    compiled = [r for r in results if isinstance(r.diagnostics.get("compile"), dict)]
    if not compiled:
        return Stat("graph breaks", "no compiled case ran", fmt.text)
    breaks = sum(
        n for r in compiled for n in (r.diagnostics["compile"].get("break_reasons") or {}).values()
    )
    return Stat(
        "graph breaks", breaks, fmt.number, f"over {fmt.plural(len(compiled), 'compiled case')}"
    )


def section(report: Report, suite: str) -> list[Block]:
    blocks: list[Block] = []
    for run in report.runs:
        results = run.in_suite(SUITE)
        if not results:
            continue
        prefix = f"{run.label}: " if report.multi else ""
        blocks += [
            _rates(results, prefix),
            _by_modality(results, prefix),
            _by_trait(results, prefix),
            _failures(results, prefix),
            _graph_breaks(results, prefix),
            _host(results, prefix),
            _slowest_compiles(results, prefix),
            _cases(results, prefix),
        ]
    return blocks + curves(report)


def _rates(results: list[Result], prefix: str) -> Stats:
    by: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by[_combo(r)].append(r)
        if r.case.params.get("source") != "unavailable":
            by[f"{r.case.params.get('source', '?')} {_combo(r)}"].append(r)
    stats = [Stat(f"{prefix}parity {k}", _rate(v)) for k, v in sorted(by.items())]
    return Stats([Stat(f"{prefix}parity pass", _rate(results)), *stats])


def _by_modality(results: list[Result], prefix: str) -> Table:
    """Pass rates per modality and mode; unsupported cases count in the cases (as in every pass
    rate) and again in their own column. Cases with no recorded modality are a row, named."""
    modes = sorted({_mode(r) for r in results})
    rows = [
        [
            name,
            *(_fraction(c.modes[m]) if m in c.modes else None for m in modes),
            c.unsupported,
        ]
        for name, c in modality_counts(results).items()
    ]
    columns = [
        Column("modality"),
        *(Column(MODE_NAMES.get(m, m)) for m in modes),
        num("unsupported"),
    ]
    caption = f"{prefix}Parity pass rate by modality (passed/cases)"
    if unknown := [r for r in results if _modality(r) == UNKNOWN]:
        caption += (
            f"; {fmt.plural(len(unknown), 'case')} recorded no modality (stored before"
            f" modalities were kept, or a factory's model): {_names({_model(r) for r in unknown})}"
        )
    return Table(columns, rows, caption, empty=f"{prefix}No parity case ran.")


def _by_trait(results: list[Result], prefix: str) -> Table:
    """Pass rates per trait value. A case that recorded no traits (its model was never built:
    unsupported, or failed before) says nothing about any trait: it is left out, and counted in
    the caption, rather than shown as a row of failures under an unnamed value."""
    groups: dict[tuple[str, str], dict[str, list[Result]]] = defaultdict(lambda: defaultdict(list))
    without = 0
    for r in results:
        traits = r.diagnostics.get("traits") or {}
        without += not any(t in traits for t in TRAITS)
        for t in TRAITS:
            if t in traits:
                groups[(t, str(traits[t]))][_combo(r)].append(r)
    combos = sorted({c for per in groups.values() for c in per})
    rows = [
        [trait, value, *(_rate(per[c]) if per.get(c) else None for c in combos)]
        for (trait, value), per in sorted(groups.items())
    ]
    columns = [Column("trait"), Column("value"), *(Column(c) for c in combos)]
    caption = f"{prefix}Parity pass rate by architecture trait (passed/cases)"
    if without:
        caption += (
            f"; {fmt.plural(without, 'case')} left out: no traits recorded (the model was not"
            " built: unsupported, or failed first)"
        )
    empty = f"{prefix}No parity case recorded its architecture traits."
    return Table(columns, rows, caption, empty=empty)


def _failures(results: list[Result], prefix: str) -> Table:
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        if r.status != "pass":
            groups[(r.status, r.phase or "")].append(r)
    rows = [
        [status, phase, len(rs), _names({_model(r) for r in rs}), reason(rs[0])]
        for (status, phase), rs in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    ]
    columns = [STATUS, Column("phase"), num("cases"), Column("models"), Column("e.g.")]
    empty = f"{prefix}Every parity case passed."
    return Table(columns, rows, f"{prefix}Parity failure categories", empty=empty)


def _graph_breaks(results: list[Result], prefix: str) -> Table:
    count: Counter = Counter()
    models: dict[str, set[str]] = defaultdict(set)
    for r in results:
        for why, n in ((r.diagnostics.get("compile") or {}).get("break_reasons") or {}).items():
            count[why] += n
            models[why].add(_model(r))
    rows = [[why, n, len(models[why]), _names(models[why])] for why, n in count.most_common(TOP)]
    columns = [Column("reason"), num("breaks"), num("models"), Column("e.g.")]
    over = graph_breaks_stat(results)
    scope = over.note or over.text  # "over N compiled cases", or "no compiled case ran"
    caption = f"{prefix}Most common graph-break reasons ({scope})"
    return Table(columns, rows, caption, empty=f"{prefix}No graph breaks ({scope}).")


def _host(results: list[Result], prefix: str) -> Table:
    return host.table(
        host.collect(results, _model),
        f"{prefix}Host round-trips and CPU fallbacks (first eager step)",
    )


def _slowest_compiles(results: list[Result], prefix: str) -> Table:
    compiled = [r for r in results if finite(r.metrics.get("compile_s"))]
    compiled.sort(key=lambda r: -r.metrics["compile_s"])
    rows = [
        [
            _model(r),
            r.case.params.get("dtype"),
            r.case.params.get("compile_backend"),
            r.metrics.get("compile_s"),
            r.metrics.get("dynamo_compile_s"),
            r.metrics.get("graph_breaks"),
            r.metrics.get("recompiles"),
            r.status,
            compile_note(r),
        ]
        for r in compiled[:TOP]
    ]
    columns = [
        Column("model"),
        Column("dtype"),
        Column("backend"),
        num("compile s"),
        num("dynamo s"),
        num("graph breaks"),
        num("recompiles"),
        STATUS,
        Column("note"),
    ]
    return Table(columns, rows, f"{prefix}Slowest compiles (first step minus a steady step)")


def _worst(r: Result) -> str:
    worst = r.diagnostics.get("worst") or []
    if not worst:
        return ""
    w = worst[0]
    ratio = w.get("ratio")
    return f"{w['tensor']} ({w['rule']}, {fmt.number(ratio)}×)" if finite(ratio) else w["tensor"]


def _cases(results: list[Result], prefix: str) -> Table:
    rows = []
    for r in sorted(results, key=lambda r: r.case_id):
        p, m = r.case.params, r.metrics
        traits = r.diagnostics.get("traits") or {}
        rows.append(
            [
                p.get("source"),
                p.get("model"),
                _modality(r),
                p.get("mode"),
                p.get("dtype"),
                *(traits.get(t) for t in TRAITS),
                r.status,
                _worst(r),
                m.get("curve_max_rel_dev"),
                m.get("graph_breaks"),
                m.get("host_round_trips"),
                m.get("compile_s"),
                reason(r),
            ]
        )
    columns = [
        Column("source"),
        Column("model"),
        Column("modality"),
        Column("mode"),
        Column("dtype"),
        *(Column(t) for t in TRAITS),
        STATUS,
        Column("worst tensor (rule, × allowed)"),
        num("curve max rel dev"),
        num("graph breaks"),
        num("host round-trips"),
        num("compile s"),
        Column("reason"),
    ]
    return Table(columns, rows, f"{prefix}Every parity case", drill_down=True)


# -- Loss curves of failing cases --------------------------------------------------------------


def _rel_dev(ref: float, dev: float) -> float:
    # The suite's per-step deviation (probes.numerics._rel_dev), restated so that the report does
    # not import torch; tests check that both give the same maximum.
    if not math.isfinite(ref) or not math.isfinite(dev):
        same = ref == dev or (math.isnan(ref) and math.isnan(dev))
        return 0.0 if same else math.inf
    return abs(dev - ref) / max(abs(ref), _TINY)


@dataclass
class _Curve:
    """One run's loss curve of a case, as the suite stored it (diagnostics["curve"])."""

    label: str  # the run's
    color: str  # the run's, the same in every panel
    result: Result
    reference: list[float]
    device: list[float]
    rel_tol: float | None

    @cached_property
    def devs(self) -> list[float]:
        # A step missing from either curve diverges there, as in the suite's verdict.
        n = max(len(self.reference), len(self.device))
        return [
            _rel_dev(self.reference[i], self.device[i])
            if i < len(self.reference) and i < len(self.device)
            else math.inf
            for i in range(n)
        ]

    @property
    def worst(self) -> tuple[float, int]:
        """(max relative deviation, its step)."""
        devs = self.devs
        i = max(range(len(devs)), key=devs.__getitem__, default=0)
        return (devs[i] if devs else 0.0), i


def _floats(values: object) -> list[float] | None:
    if not isinstance(values, list):
        return None
    return [float(v) if isinstance(v, (int, float)) else math.nan for v in values]


def _curve(r: Result | None, label: str, color: str) -> _Curve | None:
    c = (r.diagnostics.get("curve") if r else None) or {}
    ref, dev = _floats(c.get("reference")), _floats(c.get("device"))
    if r is None or ref is None or dev is None or not (ref or dev):
        return None  # did not train (fail_compile, crash...) or stored before curves were kept
    tol = c.get("rel_tol")
    return _Curve(label, color, r, ref, dev, float(tol) if finite(tol) else None)


def _failing_curves(report: Report) -> list[tuple[str, list[_Curve]]]:
    """Every case id failing in some run with a loss curve, each run's curve of it (passing runs
    included, to overlay), numerics failures first, then by the largest deviation."""
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(report.runs))]
    found = []
    for cid, per_run in report.aligned(SUITE):
        curves = [
            c
            for run, r, color in zip(report.runs, per_run, colors, strict=True)
            if (c := _curve(r, run.label, color)) is not None
        ]
        failing = [c for c in curves if c.result.status in FAILING]
        if failing:
            numerics = any(c.result.status == "fail_numerics" for c in failing)
            found.append(((not numerics, -max(c.worst[0] for c in failing), cid), cid, curves))
    found.sort(key=lambda f: f[0])
    return [(cid, curves) for _, cid, curves in found]


def _references(curves: list[_Curve], split: bool) -> list[tuple[str, str, list[float]]]:
    """(name, colour, values) of the reference curves to draw: one when the runs agree on it."""
    if not split:
        return [("float64 reference", REFERENCE_COLOR, curves[0].reference)]
    return [(f"reference ({c.label})", c.color, c.reference) for c in curves]


def _named_points(name: str, values: list[float]) -> list[Point]:
    return [Point(i, v, f"{name}, step {i}: loss {v:.6g}") for i, v in enumerate(values)]


def _baselines(curves: list[_Curve]) -> list[tuple[str, list[float]]]:
    """(name, values) of the --baseline runs' curves the case was compared with (another device's
    run of the same case), one per baseline run."""
    found: dict[str, list[float]] = {}
    for c in curves:
        b = c.result.diagnostics.get("baseline") or {}
        if b.get("baseline_curve"):
            found.setdefault(f"baseline: {b.get('device') or b.get('run_id')}", b["baseline_curve"])
    return list(found.items())


def curves(report: Report) -> list[Block]:
    """Per failing case: the device's loss curve over the float64 reference (every run's, overlaid)
    and the relative deviation per step against the tolerance. Nothing when no case fails."""
    cases = _failing_curves(report)
    if not cases:
        return []
    shown, rest = cases[:CURVES_SHOWN], cases[CURVES_SHOWN:]
    # Runs that disagree on the float64 reference (other steps, other torch) get their own
    # (compared as text: NaN equals NaN there).
    split = any(len({repr(c.reference) for c in curves}) > 1 for _, curves in shown)
    panels = []
    for cid, curves in shown:
        # Devices with the primary run last, then the reference's small dots on top of them: a
        # dot inside each marker reads as agreement.
        series = [Series(c.label, _loss_points(c), c.color, line=True) for c in curves[::-1]]
        series += [
            Series(
                name,
                _named_points(name, values),
                color,
                "dot",
                line=True,
                dash=True,
            )
            for name, color, values in _references(curves, split)
        ]
        series += [
            Series(name, _named_points(name, values), BASELINE_COLOR, "none", line=True, dash=True)
            for name, values in _baselines(curves)
        ]
        title = cid.removeprefix(f"{SUITE}/")  # the section says which suite; keep the room
        panels.append(Panel(series, Axis("step"), Axis("loss"), title))
        panels.append(_deviation_panel(curves, report.multi))
    labels = list(dict.fromkeys(c.label for _, curves in shown for c in curves))
    colors = {c.label: c.color for _, curves in shown for c in curves}
    legend = [Series(f"device: {label}", [], colors[label], line=True) for label in labels]
    refs = [(f"reference ({label})", colors[label]) for label in labels] if split else []
    for name, color in refs or [("float64 reference", REFERENCE_COLOR)]:
        legend.append(Series(name, [], color, "dot", line=True, dash=True))
    if any(_baselines(curves) for _, curves in shown):
        legend.append(Series("--baseline run", [], BASELINE_COLOR, "none", line=True, dash=True))
    legend.append(Series("tolerance", [], TOLERANCE_COLOR, "none", line=True, dash=True))
    if any(math.inf in c.devs for _, curves in shown for c in curves):
        legend.append(Series("loss not finite or missing", [], REFERENCE_COLOR, "triangle"))
    caption = (
        f"Loss curves of {len(shown)} failing parity case{'s' if len(shown) != 1 else ''} on the"
        " device against the float64 CPU reference (left), and their relative deviation per step"
        " against the suite's tolerance (right, log scale); numerics failures first, then the"
        " largest deviation"
    )
    if rest:
        named = ", ".join(cid for cid, _ in rest[:CURVE_IDS_NAMED])
        caption += (
            f". {len(rest)} more failing case{'s' if len(rest) != 1 else ''} not drawn: {named}"
            + (", …" if len(rest) > CURVE_IDS_NAMED else "")
        )
    svg = small_multiples(panels, legend, columns=4, label="Loss curves of failing parity cases")
    return [Chart(svg, caption), _worst_curve_table(*shown[0], split)]


def _loss_points(c: _Curve) -> list[Point]:
    devs = c.devs
    return [
        Point(
            i,
            v,
            f"{c.label}, step {i}: loss {v:.6g}"
            + (
                f", reference {c.reference[i]:.6g}, rel dev {fmt.number(devs[i])}"
                if i < len(c.reference)
                else ""
            ),
        )
        for i, v in enumerate(c.device)
    ]


def _deviation_panel(curves: list[_Curve], multi: bool) -> Panel:
    tols = [c.rel_tol for c in curves if c.rel_tol is not None]
    positive = [d for c in curves for d in c.devs if 0 < d < math.inf]
    # A log axis has no place for 0 (identical losses) or infinity (a NaN or missing loss): 0 is
    # drawn on the bottom edge, a decade below the rest, and infinity as a triangle on the top
    # edge, a decade above, each saying so in its tooltip, rather than left out.
    low, high = min(positive + tols, default=1.0), max(positive + tols, default=1.0)
    floor = 10.0 ** (math.floor(math.log10(low)) - 1)
    ceiling = 10.0 ** (math.ceil(math.log10(high)) + 1)
    series = []
    for c in curves:
        tol = f" (tolerance {c.rel_tol:g})" if c.rel_tol is not None else ""
        tips = [f"{c.label}, step {i}: rel dev {fmt.number(d)}{tol}" for i, d in enumerate(c.devs)]
        points = [
            Point(i, d, tips[i])
            if d > 0
            else Point(i, floor, tips[i] + ", drawn on the bottom edge")
            for i, d in enumerate(c.devs)
            if d < math.inf
        ]
        series.append(Series(c.label, points, c.color, line=True))
        lost = [
            Point(i, ceiling, tips[i] + ": loss not finite or missing")
            for i, d in enumerate(c.devs)
            if d == math.inf
        ]
        if lost:
            series.append(Series(f"{c.label} not finite", lost, c.color, "triangle"))
    if tols:
        last = max(len(c.devs) for c in curves) - 1
        points = [Point(0, max(tols)), Point(max(last, 1), max(tols))]
        series.append(Series("tolerance", points, TOLERANCE_COLOR, "none", line=True, dash=True))
    worst = max(curves, key=lambda c: c.worst[0])
    dev, step = worst.worst
    title = f"max {fmt.number(dev)} at step {step}" + (f" ({worst.label})" if multi else "")
    return Panel(series, Axis("step"), Axis("relative deviation", log=True), title)


def _worst_curve_table(cid: str, curves: list[_Curve], split: bool) -> Table:
    """The first charted case's curves as numbers: what Markdown shows instead of the chart."""
    refs = _references(curves, split)
    columns = [num("step")]
    columns += [num(name, _loss) for name, _, _ in refs]
    for c in curves:
        columns += [num(f"{c.label} loss", _loss), num(f"{c.label} rel dev", _dev)]
    rows = []
    for i in range(max(len(v) for c in curves for v in (c.reference, c.device))):
        row: list = [i, *(_at(values, i) for _, _, values in refs)]
        for c in curves:
            devs = c.devs
            row += [_at(c.device, i), _at(devs, i)]
        rows.append(row)
    caption = f"Loss curve of the worst failing parity case, {cid}, against the float64 reference"
    return Table(columns, rows, caption)


def _at(values: list[float], i: int) -> float | None:
    return values[i] if i < len(values) else None


def _loss(v: float) -> str:
    return f"{v:.6g}"  # enough digits to see a deviation of 1e-4


def _dev(v: float) -> str:
    return fmt.number(v)
