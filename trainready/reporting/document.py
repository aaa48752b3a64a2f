"""The scorecard's content, once, as sections of neutral blocks (terminal, Markdown and HTML draw it)."""

from __future__ import annotations

from trainready.core.case import STATUSES
from trainready.reporting import fmt, verdict
from trainready.reporting.blocks import (
    STATUS,
    Block,
    Column,
    Section,
    Stat,
    Stats,
    Table,
    Text,
    num,
)
from trainready.reporting.model import (
    NOT_RUN,
    Comparison,
    Report,
    RunView,
    StatusChange,
    clip,
    finite,
)
from trainready.reporting.sections import headlines, suite_section

# Where the readiness criteria are written down (the thresholds: trainready/reporting/verdict.toml).
CRITERIA = "README, 'The readiness verdict'"


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
    """What a reader needs first: is the device ready, how each run did, by suite, why cases
    failed, what was not supported or not run, what changed."""
    return [
        readiness(report),
        overview(report),
        by_suite(report),
        causes(report),
        gaps(report),
        *capabilities(report),
        *(comparison(c) for c in report.comparisons),
    ]


def readiness(report: Report) -> Section:
    """The verdict, one line per dimension, with the reason that decides it and where to look."""
    verdicts = [(run, verdict.judge(run, report.rules)) for run in report.runs]
    tiles = [
        Stat(
            f"{run.label}: {v.overall.name}" if report.multi else v.overall.name,
            v.overall.status,
            note=v.overall.reason,
            level=v.overall.status,
        )
        for run, v in verdicts
    ]
    primary = verdicts[0][1]
    titles = {line.section: line.section_title for _, v in verdicts for line in v.lines}
    columns = [
        Column("dimension"),
        *(Column(run.label if report.multi else "verdict", "verdict") for run, _ in verdicts),
        Column(f"why ({report.primary.label})" if report.multi else "why"),
        Column("evidence", "link", lambda anchor: titles.get(anchor) or str(anchor)),
    ]
    rows = [
        [line.name, *(v.lines[i].status for _, v in verdicts), line.reason, line.section]
        for i, line in enumerate(primary.lines)
    ]
    source = primary.source
    caption = f"Readiness by dimension (criteria: {CRITERIA}; thresholds: {source})"
    return Section("Readiness", [Stats(tiles), Table(columns, rows, caption)], "readiness")


def _tiles(run: RunView) -> list[Stat]:
    t = run.total
    planned = fmt.plural(t.total, "planned case")
    note = f"{t.passed} of {planned} {'passes' if t.passed == 1 else 'pass'}, {t.failed} fail, "
    note += f"{t.not_run} not run"
    return [Stat("pass rate", t.pass_rate, _percent_or_none, note), *headlines(run)]


def overview(report: Report) -> Section:
    """The primary run's headline numbers; with runs compared, each tile also says what every
    other run measured and the difference (points for percentages, a ratio otherwise)."""
    stats = _tiles(report.primary)
    if report.multi:
        others = [(run, {s.label: s for s in _tiles(run)}) for run in report.runs[1:]]
        for s in stats:
            s.delta = "; ".join(_delta(s, by_label.get(s.label), run) for run, by_label in others)
    runs = Text(
        "\n".join(
            f"{r.label}: run {r.run_id}, {r.record.preset} preset, suites {fmt.text(r.record.suites)},"
            f" {fmt.run_state(r.state)}{_partial_note(r.record.env)}{_peak_note(r.record.config)}"
            for r in report.runs
        )
    )
    blocks: list[Block] = [Stats(stats), runs]
    if report.multi:
        mine = {s.label for s in stats}
        extra = sorted(
            {s.label for run in report.runs[1:] for s in _tiles(run)} - mine, key=str.lower
        )
        line = f"Tiles: {report.primary.label}, each against {_names(report.runs[1:])}"
        if extra:
            line += f"; measured only there: {', '.join(extra)}"
        unlike = _unlike_cases(report)
        if unlike:
            line += f". {unlike}"
        blocks.insert(0, Text(line))
    return Section("Overview", blocks, "overview")


def _unlike_cases(report: Report) -> str:
    """Where a compared run planned other cases (another preset, other suites, a filter), the
    tiles' counts and rates are each over its own cases: said once, with where the like-for-like
    comparison is ('' when every run planned the same cases)."""
    unlike = [c for c in report.comparisons if c.only_primary or c.only_reference]
    if not unlike:
        return ""
    common = "; ".join(f"{c.reference.label}: {fmt.plural(c.compared, 'case')}" for c in unlike)
    return (
        "The runs planned different cases, so each tile's counts and rates are over that run's "
        f"own cases, not like for like; cases both planned ({common}) are compared one by one "
        "in 'Compared with …' below"
    )


def _names(runs: list[RunView]) -> str:
    return ", ".join(run.label for run in runs)


def _delta(mine: Stat, theirs: Stat | None, run: RunView) -> str:
    """'cpu 97.6%: -2.1 pts', 'cpu 1.2×: ×1.5', 'cpu: not measured'."""
    if theirs is None:
        return f"{run.label}: not measured"
    text = f"{run.label} {theirs.text}"
    a, b = mine.value, theirs.value
    if not (finite(a) and finite(b)):
        return text
    if mine.text.endswith("%") and theirs.text.endswith("%"):
        return f"{text}: {fmt.points(a - b)}"
    if b:
        return f"{text}: ×{fmt.ratio(a / b).removesuffix('×')}"
    return text


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


def _cause_rows(report: Report, failing: bool) -> list[list]:
    return [
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
        if c.failing == failing
    ]


def _cause_columns(report: Report) -> list[Column]:
    return [
        *([Column("run")] if report.multi else []),
        STATUS,
        Column("phase"),
        Column("reason"),
        num("cases"),
        Column("examples"),
    ]


def causes(report: Report) -> Section:
    """The cases that failed (wrong numbers, compile errors, raised, timed out, crashed, out of
    memory), grouped by status, phase and reason."""
    rows = _cause_rows(report, failing=True)
    caption = "Failing cases grouped by status, phase and reason, the most cases first"
    table = Table(_cause_columns(report), rows, caption, empty="No case failed.")
    return Section("Failures by cause", [table], "causes")


def gaps(report: Report) -> Section:
    """What did not fail but did not pass either: unsupported (the backend says it cannot),
    skipped (not the device's) and planned cases without a result."""
    rows = _cause_rows(report, failing=False)
    caption = "Cases that did not run to a verdict, grouped by status, phase and reason"
    empty = "Every planned case ran: none unsupported, skipped or not run."
    table = Table(_cause_columns(report), rows, caption, empty=empty)
    return Section("Not supported / skipped", [table], "gaps")


def capabilities(report: Report) -> list[Section]:
    """What each run's device backend lacks of the instruments trainready uses, and what stood in
    (a substitute) or went unmeasured: shown only where something is missing. Runs stored before
    the probe existed have no record, and are not listed. The backend's message is cut to a line
    here; the environment section has it whole."""
    rows = [
        [run.label, c.get("name"), c.get("status"), c.get("how"), clip(c.get("why") or "", 90)]
        for run in report.runs
        for c in run.record.env.get("device_capabilities") or ()
    ]
    if not rows:
        return []
    columns = [Column("run"), Column("capability"), Column("status"), Column("instead"),
               Column("backend said")]  # fmt: skip
    if not report.multi:
        columns, rows = columns[1:], [row[1:] for row in rows]
    caption = (
        "Capabilities the backend lacks: trainready used the stated substitute, or did not "
        "measure what needed it; no case fails for these (docs/devices.md)"
    )
    return [Section("Device capabilities", [Table(columns, rows, caption)], "capabilities")]


def _left_out(by_suite: dict[str, int], run: RunView) -> str:
    total = sum(by_suite.values())
    per = ", ".join(f"{suite} {n}" for suite, n in sorted(by_suite.items()))
    return f"{fmt.plural(total, 'case')} only {run.label} planned ({per})"


def comparison(c: Comparison) -> Section:
    primary, ref = c.primary.label, c.reference.label
    scope = f"Compared over the {fmt.plural(c.compared, 'case')} both runs planned"
    left = [
        _left_out(by, run)
        for by, run in ((c.only_primary, c.primary), (c.only_reference, c.reference))
        if by
    ]
    scope += f"; left out: {'; '.join(left)}." if left else "."
    blocks: list[Block] = [
        Text(scope),
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
        ),
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
        values = {
            **record,
            **fmt.flatten(run.record.env, "env"),
            **fmt.flatten(run.record.config, "config"),
        }
        flat.append({k: fmt.keyed(k, v) for k, v in values.items()})
    keys = list(dict.fromkeys(k for d in flat for k in d))
    columns = [Column("key"), *(Column(run.label) for run in report.runs)]
    rows = [[k, *(d.get(k) for d in flat)] for k in keys]
    table = Table(columns, rows, "Run record, environment and configuration")
    return Section("Environment", [table], "environment")
