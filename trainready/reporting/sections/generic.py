"""What every suite gets: its counts, and drill-down tables of every case (per run, side by side)."""

from __future__ import annotations

from trainready.reporting import fmt
from trainready.reporting.blocks import STATUS, Block, Column, Table, Text, num
from trainready.reporting.model import NOT_RUN, NOT_RUN_REASON, Report, reason


def counts(report: Report, suite: str) -> Text:
    lines = []
    for run in report.runs:
        summary = run.suites.get(suite)
        if summary is None:
            lines.append(f"{run.label}: suite not in this run")
            continue
        parts = [f"{n} {fmt.status(s)}" for s, n in summary.counts.items() if n]
        if summary.not_run:
            parts.append(f"{summary.not_run} {fmt.status(NOT_RUN)}")
        rate = (
            f" — pass rate {fmt.percent(summary.pass_rate)}"
            if summary.pass_rate is not None
            else ""
        )
        lines.append(f"{run.label}: {', '.join(parts) or 'no cases'}{rate}")
    return Text("\n".join(lines))


def drill_down(report: Report, suite: str, metrics: tuple[str, ...]) -> list[Block]:
    """Every case of `suite`, with its `metrics` (the suite's key metrics), per run and side by
    side."""
    run_col = [Column("run")] if report.multi else []
    columns = [
        *run_col,
        Column("case"),
        STATUS,
        Column("phase"),
        num("time s"),
        *(num(m, fmt.metric(m)) for m in metrics),
        Column("reason"),
    ]
    rows = [
        [
            *([run.label] if report.multi else []),
            r.case_id,
            r.status,
            r.phase,
            r.duration_s,
            *(r.metrics.get(m) for m in metrics),
            reason(r),
        ]
        for run in report.runs
        for r in run.in_suite(suite)
    ]
    rows += [  # planned cases without a result: listed, never hidden
        [*([run.label] if report.multi else []), c.id, NOT_RUN, None, None]
        + [None] * len(metrics)
        + [NOT_RUN_REASON]
        for run in report.runs
        for c in run.not_run_in(suite)
    ]
    blocks: list[Block] = [Table(columns, rows, f"All {suite} cases", drill_down=True)]
    if report.multi:
        blocks.append(side_by_side(report, suite, metrics[:1]))
    return blocks


def side_by_side(report: Report, suite: str, metrics: tuple[str, ...]) -> Table:
    """One row per case id, a status (and key metric) column per run: where the runs differ."""
    ratios = [{(d.case_id, d.metric): d.ratio for d in c.deltas} for c in report.comparisons]
    columns = [Column("case")]
    columns += [Column(run.label, "status", fmt.status) for run in report.runs]
    for m in metrics:
        columns += [num(f"{m} {run.label}", fmt.metric(m)) for run in report.runs]
        columns += [num(f"{m} ratio vs {c.reference.label}", fmt.ratio) for c in report.comparisons]
    rows = []
    for cid, per_run in report.aligned(suite):
        row: list = [cid, *(r.status if r else NOT_RUN for r in per_run)]
        for m in metrics:
            row += [r.metrics.get(m) if r else None for r in per_run]
            row += [by_case.get((cid, m)) for by_case in ratios]
        rows.append(row)
    caption = f"{suite} side by side (ratio = {report.primary.label} / reference)"
    return Table(columns, rows, caption, drill_down=True)
