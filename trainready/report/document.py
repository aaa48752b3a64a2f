"""The scorecard's content, once, as sections of neutral blocks (terminal, Markdown and HTML draw it)."""

from __future__ import annotations

from trainready.core.case import STATUSES
from trainready.report import fmt
from trainready.report.blocks import STATUS, Block, Column, Section, Stat, Stats, Table, Text, num
from trainready.report.model import NOT_RUN, Comparison, Report, StatusChange
from trainready.report.sections import headlines, suite_section


def title(report: Report) -> str:
    labels = [run.label for run in report.runs]
    return (
        "trainready scorecard: "
        + labels[0]
        + (f" vs {', '.join(labels[1:])}" if report.multi else "")
    )


def build(report: Report) -> list[Section]:
    return [
        *summary(report),
        *(suite_section(report, s) for s in report.suites),
        environment(report),
    ]


def summary(report: Report) -> list[Section]:
    """What a reader needs first: how each run did, by suite, why cases failed, what changed."""
    return [
        overview(report),
        by_suite(report),
        causes(report),
        *(comparison(c) for c in report.comparisons),
    ]


def overview(report: Report) -> Section:
    stats = []
    for run in report.runs:
        t = run.total
        prefix = f"{run.label}: " if report.multi else ""
        note = f"{t.passed} of {t.total} planned cases pass, {t.failed} fail, {t.not_run} not run"
        stats.append(Stat(f"{prefix}pass rate", t.pass_rate, _percent_or_none, note))
        stats += [Stat(prefix + s.label, s.value, s.show, s.note) for s in headlines(run)]
    runs = Text(
        "\n".join(
            f"{r.label}: run {r.run_id}, {r.record.preset} preset, suites {fmt.text(r.record.suites)},"
            f" {fmt.run_state(r.state)}{_partial_note(r.record.env)}{_peak_note(r.record.config)}"
            for r in report.runs
        )
    )
    return Section("Overview", [Stats(stats), runs], "overview")


def _partial_note(env: dict) -> str:
    """A partial merge says so where the run is named: its counts cover only the given shards."""
    partial = env.get("partial_merge")
    if not partial:
        return ""
    missing = ", ".join(partial.get("missing_shards", []))
    return f" — a partial merge: shards {missing} missing, their cases are not counted"


def _peak_note(config: dict) -> str:
    """A peak calibrated through the host fallback makes every MFU against it the host's."""
    peaks = (config or {}).get("peaks") or {}
    fell = {d: p["host_fallback"] for d, p in peaks.items() if (p or {}).get("host_fallback")}
    if not fell:
        return ""
    named = "; ".join(f"{d}: {', '.join(sorted(ops))}" for d, ops in sorted(fell.items()))
    return (
        f" — the peak calibration ran through the host fallback ({named}): MFU against it is "
        "not the device's"
    )


def _percent_or_none(value: float | None) -> str:
    return "n/a" if value is None else fmt.percent(value)


def by_suite(report: Report) -> Section:
    summaries = [
        (run, s)
        for run in report.runs
        for s in [*run.suites.values(), *([run.total] if len(run.suites) > 1 else [])]
    ]
    seen = {status for _, s in summaries for status, n in s.counts.items() if n}
    shown = [s for s in STATUSES if s == "pass" or s in seen] + sorted(seen - set(STATUSES))
    columns = [
        *([Column("run")] if report.multi else []),
        Column("suite"),
        *(num(fmt.status(s)) for s in shown),
        num(fmt.status(NOT_RUN)),
        num("total"),
        num("pass rate", fmt.percent),
    ]
    rows = [
        [
            *([run.label] if report.multi else []),
            s.suite,
            *(s.counts.get(status, 0) for status in shown),
            s.not_run,
            s.total,
            s.pass_rate,
        ]
        for run, s in summaries
    ]
    caption = "Cases by status (pass rate = passed / planned)"
    if any(s.not_run is None for _, s in summaries):
        caption += "; a run over several suites counts its not-run cases in its 'all' row only"
    return Section("Results by suite", [Table(columns, rows, caption)], "by-suite")


def causes(report: Report) -> Section:
    rows = [
        [
            *([run.label] if report.multi else []),
            c.status,
            c.phase,
            c.reason or "(no reason recorded)",
            len(c.case_ids),
            c.case_ids[:3] + (["…"] if len(c.case_ids) > 3 else []),
        ]
        for run in report.runs
        for c in run.causes
    ]
    if not rows:
        return Section("Failures by cause", [Text("Every finished case passed.")], "causes")
    columns = [
        *([Column("run")] if report.multi else []),
        STATUS,
        Column("phase"),
        Column("reason"),
        num("cases"),
        Column("examples"),
    ]
    caption = "Non-passing cases grouped by status, phase and reason; failures first"
    return Section("Failures by cause", [Table(columns, rows, caption)], "causes")


def comparison(c: Comparison) -> Section:
    primary, ref = c.primary.label, c.reference.label
    blocks: list[Block] = [
        Stats(
            [
                Stat(
                    "newly failing", len(c.newly_failing), note=f"fail on {primary}, not on {ref}"
                ),
                Stat(
                    "newly passing", len(c.newly_passing), note=f"pass on {primary}, not on {ref}"
                ),
                Stat("status changes", len(c.changes), note="cases whose status differs"),
            ]
        )
    ]
    for title, changes in (
        ("Newly failing", c.newly_failing),
        ("Newly passing", c.newly_passing),
    ):
        if changes:
            blocks.append(_changes_table(c, changes, title, drill_down=False))
    if c.changes:
        blocks.append(_changes_table(c, c.changes, "All status changes", drill_down=True))
    ratios = c.ratios()
    if ratios:
        columns = [
            Column("suite"),
            Column("metric"),
            num("cases"),
            num("median", fmt.ratio),
            num("min", fmt.ratio),
            num("max", fmt.ratio),
        ]
        rows = [[r.suite, r.metric, r.cases, r.median, r.low, r.high] for r in ratios]
        caption = f"Key metrics of cases passing on both, as {primary} / {ref}"
        blocks.append(Table(columns, rows, caption))
    return Section(f"Compared with {ref}", blocks, f"compare-{c.reference.run_id}")


def _changes_table(
    c: Comparison, changes: list[StatusChange], title: str, drill_down: bool
) -> Table:
    columns = [
        Column("case"),
        Column(c.reference.label, "status", fmt.status),
        Column(c.primary.label, "status", fmt.status),
        Column("reason"),
    ]
    rows = [[ch.case_id, ch.reference, ch.status, ch.reason] for ch in changes]
    return Table(columns, rows, title, drill_down=drill_down)


def environment(report: Report) -> Section:
    """Every run's record, environment and configuration, aligned by key: the receipts."""
    flat = []
    for run in report.runs:
        record = {
            k: v
            for k, v in run.record.to_json().items()
            if k not in ("env", "config", "created_at", "finished_at")
        }
        record["started"] = fmt.timestamp(run.record.created_at)
        record["finished"] = fmt.timestamp(run.record.finished_at)
        flat.append(
            {
                **record,
                **fmt.flatten(run.record.env, "env"),
                **fmt.flatten(run.record.config, "config"),
            }
        )
    keys = list(dict.fromkeys(k for d in flat for k in d))
    columns = [Column("key"), *(Column(run.label) for run in report.runs)]
    rows = [[k, *(d.get(k) for d in flat)] for k in keys]
    table = Table(columns, rows, "Run record, environment and configuration")
    return Section("Environment", [table], "environment")
