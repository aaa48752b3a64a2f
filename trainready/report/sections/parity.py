"""The parity scorecard: pass rates by mode, dtype and architecture trait, why cases fail, the
graph-break reasons, the ops that went to the host and who hit them, the slowest compiles, and
every case with its worst tensor. Nothing is left out: a case without traits (it did not build)
counts under "?"."""

from __future__ import annotations

from collections import Counter, defaultdict

from trainready.core.case import Result
from trainready.report import fmt
from trainready.report.blocks import STATUS, Block, Column, Stat, Stats, Table, num
from trainready.report.model import Report, RunView, finite, reason

SUITE = "parity"
KEY_METRICS = ("worst_ratio", "curve_max_rel_dev", "graph_breaks", "compile_s")
METRIC_GOALS = {"compile_s": "lower"}  # numerics are judged by status, not by the gate
TRAITS = ("attention", "moe", "norm", "mlp", "position")
TOP = 15
MODELS_SHOWN = 6


def _combo(r: Result) -> str:
    p = r.case.params
    return f"{p.get('mode', '?')} {p.get('dtype', '?')}"


def _rate(results: list[Result]) -> str:
    passed = sum(r.status == "pass" for r in results)
    return f"{passed}/{len(results)}"


def _model(r: Result) -> str:
    p = r.case.params
    return f"{p.get('source', '?')}/{p.get('model', '?')}"


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
    breaks = sum(
        n
        for r in results
        for n in ((r.diagnostics.get("compile") or {}).get("break_reasons") or {}).values()
    )
    fallbacks = {
        op for r in results for op in ((r.diagnostics.get("ops") or {}).get("fallbacks") or {})
    }
    stats += [
        Stat("parity numerics failures", numerics, fmt.number, "cases wrong against float64"),
        Stat("graph breaks", breaks, fmt.number, "over every compiled case"),
        Stat("host-fallback ops", len(fallbacks), fmt.number, ", ".join(sorted(fallbacks)[:4])),
    ]
    return stats


def section(report: Report, suite: str) -> list[Block]:
    blocks: list[Block] = []
    for run in report.runs:
        results = run.in_suite(SUITE)
        if not results:
            continue
        prefix = f"{run.label}: " if report.multi else ""
        blocks += [
            _rates(results, prefix),
            _by_trait(results, prefix),
            _failures(results, prefix),
            _graph_breaks(results, prefix),
            _host(results, prefix),
            _slowest_compiles(results, prefix),
            _cases(results, prefix),
        ]
    return blocks


def _rates(results: list[Result], prefix: str) -> Stats:
    by: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by[_combo(r)].append(r)
        by[f"{r.case.params.get('source', '?')} {_combo(r)}"].append(r)
    stats = [Stat(f"{prefix}parity {k}", _rate(v)) for k, v in sorted(by.items())]
    return Stats([Stat(f"{prefix}parity pass", _rate(results)), *stats])


def _by_trait(results: list[Result], prefix: str) -> Table:
    combos = sorted({_combo(r) for r in results})
    groups: dict[tuple[str, str], dict[str, list[Result]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        traits = r.diagnostics.get("traits") or {}
        for t in TRAITS:
            groups[(t, str(traits.get(t, "?")))][_combo(r)].append(r)
    rows = [
        [trait, value, *(_rate(per[c]) if per.get(c) else None for c in combos)]
        for (trait, value), per in sorted(groups.items())
    ]
    columns = [Column("trait"), Column("value"), *(Column(c) for c in combos)]
    return Table(columns, rows, f"{prefix}Parity pass rate by architecture trait (passed/cases)")


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
    return Table(columns, rows, f"{prefix}Parity failure categories")


def _graph_breaks(results: list[Result], prefix: str) -> Table:
    count: Counter = Counter()
    models: dict[str, set[str]] = defaultdict(set)
    for r in results:
        for why, n in ((r.diagnostics.get("compile") or {}).get("break_reasons") or {}).items():
            count[why] += n
            models[why].add(_model(r))
    rows = [[why, n, len(models[why]), _names(models[why])] for why, n in count.most_common(TOP)]
    columns = [Column("reason"), num("breaks"), num("models"), Column("e.g.")]
    return Table(columns, rows, f"{prefix}Most common graph-break reasons")


def _host(results: list[Result], prefix: str) -> Table:
    """Everything that left the device: the backend's fallbacks, ops run on host tensors while
    testing an accelerator, copies to the host, and Python calls that read device data."""
    models: dict[tuple[str, str], set[str]] = defaultdict(set)
    count: Counter = Counter()
    for r in results:
        ops = r.diagnostics.get("ops") or {}
        entries = [("backend fallback", op, n) for op, n in (ops.get("fallbacks") or {}).items()]
        entries += [("ran on host", op, n) for op, n in (ops.get("host_ops") or {}).items()]
        entries += [("copy", op, n) for op, n in (ops.get("host_copies") or {}).items()]
        entries += [
            ("host read", f"{c['op']} at {c['site']}", c["count"])
            for c in ops.get("host_calls") or []
        ]
        for kind, op, n in entries:
            models[(kind, op)].add(_model(r))
            count[(kind, op)] += n
    rows = [
        [kind, op, n, len(models[(kind, op)]), _names(models[(kind, op)])]
        for (kind, op), n in count.most_common(TOP * 2)
    ]
    columns = [Column("kind"), Column("op"), num("calls"), num("models"), Column("e.g.")]
    return Table(
        columns, rows, f"{prefix}Host round-trips and CPU fallbacks (first eager step)", True
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
