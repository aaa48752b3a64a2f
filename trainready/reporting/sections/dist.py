"""The dist suite as a reader wants it: which torch.distributed APIs work (and why not), and the
bus bandwidth of each collective against message size.

First the process group each run used (backend, ranks). Then one row per API (a collective over
all its sizes and dtypes counts as one API): how many of its cases pass, the worst status, and the
reason of the first case with that status. Bandwidth is nccl-tests' bus bandwidth (algbw x the
collective's factor), passing cases only -- except where a run had one rank, whose factor is 0
for nearly every collective: there the chart and headline show algbw, and say so. The bandwidth
headline reads "inconclusive" when its case's adaptive sampling (`metrics.sampler`) ran out of
budget on some rank, with the time and the option (`--set timing_s`) that would likely conclude it.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainready.core.case import Result
from trainready.metrics.sampler import budget_why
from trainready.reporting import fmt
from trainready.reporting.blocks import STATUS, Block, Chart, Column, Stat, Table, Text, num
from trainready.reporting.charts import MARKERS, PALETTE, Axis, Point, Series, xy_chart
from trainready.reporting.model import NOT_RUN, Report, RunView, finite, reason

SUITE = "dist"
KEY_METRICS = ("time_us", "algbw_gbps", "busbw_gbps")
METRIC_GOALS = {"time_us": "lower", "algbw_gbps": "higher", "busbw_gbps": "higher"}
# Worst first: what a row shows when an API's cases end differently.
SEVERITY = (
    "crash",
    "oom",
    "timeout",
    "fail_run",
    "fail_compile",
    "fail_numerics",
    "unsupported",
    "skipped",
    NOT_RUN,
    "pass",
)


def _api(params: dict) -> str:
    return str(params.get("api") or params.get("op") or params.get("family") or "?")


def api_rows(run: RunView) -> list[tuple[str, int, int, str, str]]:
    """(api, cases, passed, worst status, reason) per API, in suite order."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for r in run.in_suite(SUITE):
        groups.setdefault(_api(r.case.params), []).append((r.status, r.case.name, reason(r)))
    for case in run.not_run_in(SUITE):
        groups.setdefault(_api(case.params), []).append((NOT_RUN, case.name, "not run"))
    rows = []
    for api, entries in groups.items():
        worst = min(entries, key=lambda e: SEVERITY.index(e[0]) if e[0] in SEVERITY else 0)
        passed = sum(status == "pass" for status, _, _ in entries)
        why = "" if worst[0] == "pass" else f"{worst[1]}: {worst[2]}" if worst[2] else worst[1]
        rows.append((api, len(entries), passed, worst[0], why))
    return rows


def table(report: Report) -> Table:
    columns = [
        *([Column("run")] if report.multi else []),
        Column("API"),
        num("cases"),
        num("pass"),
        STATUS,
        Column("reason"),
    ]
    rows = [
        [*([run.label] if report.multi else []), api, n, passed, status, why]
        for run in report.runs
        for api, n, passed, status, why in api_rows(run)
    ]
    return Table(columns, rows, "torch.distributed APIs: status (worst case of each) and why")


def _ranks(counts: Iterable[int]) -> str:
    """'1 rank', '2 ranks', '2/4 ranks' (runs side by side)."""
    seen = sorted(set(counts))
    return f"{'/'.join(map(str, seen)) or '?'} rank{'' if seen == [1] else 's'}"


def process_group(report: Report) -> Text:
    """Which process-group backend and how many ranks each run's dist cases ran on."""
    lines = []
    for run in report.runs:
        results = run.in_suite(SUITE)
        backends = sorted(
            {str(r.diagnostics["backend"]) for r in results if "backend" in r.diagnostics}
        )
        ranks = _ranks(int(r.metrics["nranks"]) for r in results if finite(r.metrics.get("nranks")))
        line = (
            f"Process group: {', '.join(backends)} backend, {ranks} (started with "
            "torch.distributed.run)"
            if backends
            else "Process group: no ranks started"
        )
        lines.append(f"{run.label}: {line}" if report.multi else line)
    return Text("\n".join(lines))


# (metric, axis label, what the caption and headline call it)
BUSBW = ("busbw_gbps", "bus bandwidth (GB/s)", "bus bandwidth")
ALGBW = ("algbw_gbps", "algorithm bandwidth (GB/s)", "algorithm bandwidth")


def best_all_reduce(results: list[Result]) -> tuple[Result, str, str] | None:
    """The bandwidth headline's case: the all_reduce with the highest bandwidth, the metric it
    is judged by and what the headline calls it (`_bandwidth`); None without one."""
    all_reduce = [r for r in _measured(results) if r.case.params.get("op") == "all_reduce_sum"]
    if not all_reduce:
        return None
    metric, _, called = _bandwidth(all_reduce)
    return max(all_reduce, key=lambda r: r.metrics[metric]), metric, called


def _bandwidth_results(run: RunView) -> list[Result]:
    return _measured(run.in_suite(SUITE))


def _measured(results: list[Result]) -> list[Result]:
    return [
        r
        for r in results
        if r.status == "pass"
        and r.case.params.get("family") == "coll"
        and finite(r.metrics.get("busbw_gbps"))
        and finite(r.metrics.get("algbw_gbps"))
        and finite(r.metrics.get("size_bytes"))
    ]


def _bandwidth(results: list[Result]) -> tuple[str, str, str]:
    """busbw, unless a result comes from one rank: nccl-tests' factor is then 0 (for all but
    broadcast and point-to-point) and busbw says nothing, so algbw, labelled."""
    return ALGBW if any(r.metrics.get("nranks") == 1 for r in results) else BUSBW


def _point(r: Result, metric: str) -> Point:
    m, p = r.metrics, r.case.params
    tip = (
        f"{p.get('op')} {p.get('tensor_dtype')} {fmt.number(int(m['size_bytes']))} B: "
        f"{fmt.number(m.get('time_us', float('nan')))} µs, algbw {fmt.number(m['algbw_gbps'])}"
        f" GB/s, busbw {fmt.number(m['busbw_gbps'])} GB/s"
    )
    return Point(m["size_bytes"], m[metric], tip)


def bandwidth_charts(report: Report) -> list[Chart]:
    measured = [(run, _bandwidth_results(run)) for run in report.runs]
    ops = list(dict.fromkeys(r.case.params["op"] for _, rs in measured for r in rs))
    dtypes = sorted({str(r.case.params.get("tensor_dtype")) for _, rs in measured for r in rs})
    charts = []
    for op in ops:
        of_op = [(run, [r for r in rs if r.case.params["op"] == op]) for run, rs in measured]
        metric, axis, called = _bandwidth([r for _, rs in of_op for r in rs])
        series = []
        for i, (run, results) in enumerate(of_op):
            for j, dtype in enumerate(dtypes):
                points = [
                    _point(r, metric) for r in results if r.case.params.get("tensor_dtype") == dtype
                ]
                if points:
                    name = f"{run.label} {dtype}" if report.multi else dtype
                    color, marker = PALETTE[j % len(PALETTE)], MARKERS[i % len(MARKERS)]
                    points.sort(key=lambda p: p.x)
                    series.append(Series(name, points, color, marker, line=True))
        title = f"{op}: {called} against message size"
        ranks = _ranks(
            int(r.metrics["nranks"]) for _, rs in of_op for r in rs if "nranks" in r.metrics
        )
        svg = xy_chart(
            series,
            Axis("message size (bytes per rank)", log=True),
            Axis(axis, zero=True),
            title=title,
            width=640,
            height=320,
        )
        why = (
            "busbw = algbw x the nccl-tests factor of the collective"
            if metric == BUSBW[0]
            else "algbw = bytes / time (on one rank nccl-tests' busbw factor is 0 for every "
            "collective but broadcast and point-to-point)"
        )
        caption = f"{title}, {ranks}; {why}; passing cases only"
        charts.append(Chart(svg, caption))
    return charts


def section(report: Report, suite: str) -> list[Block]:
    return [process_group(report), table(report), *bandwidth_charts(report)]


def headlines(run: RunView) -> list[Stat]:
    rows = api_rows(run)
    judged = [status for _, _, _, status, _ in rows if status != "skipped"]
    skipped = len(rows) - len(judged)
    note = "every case of the API passes"
    if skipped:
        note += f"; {skipped} skipped (not the device's: too few ranks, or not in this torch)"
    stats = [
        Stat(
            "torch.distributed APIs working",
            f"{judged.count('pass')} of {len(judged)}",
            note=note,
        )
    ]
    found = best_all_reduce(run.in_suite(SUITE))
    if found:
        best, metric, called = found
        size = fmt.number(int(best.metrics["size_bytes"]))
        ranks = _ranks([int(best.metrics.get("nranks", 0))])
        why = "" if metric == BUSBW[0] else " (one rank: busbw is 0 by definition)"
        note = f"{best.case.params.get('tensor_dtype')}, {size} B, {ranks}{why}"
        # Its timing's adaptive sampling ran out of budget: no figure, the time it would need.
        short = budget_why([best.diagnostics.get("sampling")])
        label = f"best all_reduce {called}"
        if short:
            measured = f"measured {fmt.number(best.metrics[metric])} GB/s"
            stats.append(Stat(label, "inconclusive", fmt.text, f"{short}; {measured}, {note}"))
        else:
            stats.append(Stat(label, best.metrics[metric], lambda v: f"{fmt.number(v)} GB/s", note))
    return stats
