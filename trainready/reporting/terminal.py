"""The run summary in a terminal (rich): overview, a row per suite, failures by cause."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text as RichText

from trainready.core.store import Store
from trainready.reporting import document, fmt
from trainready.reporting.blocks import Block, Chart, Section, Stats, Table, Text
from trainready.reporting.build import build_report

# A terminal is for the gist; drill-downs longer than this point at the files.
MAX_ROWS = 20


# Where a chart can be seen instead (the terminal draws none).
CHART_NOTE = "see the HTML report"


def print_summary(
    console: Console, store: Store, run_id: str, verdict_config: str | Path | None = None
) -> None:
    """Print one run's summary: the readiness verdict, pass rate and headlines, counts per suite,
    failures by cause, what was not supported or not run."""
    report = build_report(store, [run_id], verdict_config)
    print_sections(console, document.summary(report))


def print_sections(console: Console, sections: list[Section], chart_note: str = CHART_NOTE) -> None:
    for section in sections:
        console.rule(RichText(section.title, style="bold"), align="left")
        for block in section.blocks:
            console.print(_block(block, chart_note))


def _block(block: Block, chart_note: str = CHART_NOTE) -> RichTable | RichText:
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Stats):
        out = RichText()
        for s in block.items:
            value_style = f"bold {fmt.VERDICT_COLORS[s.level]}" if s.level else "bold cyan"
            out.append(f"{s.label}: ", style="bold").append(s.text, style=value_style)
            out.append(f"  {s.note}" if s.note else "", style="dim")
            out.append(f"  (vs {s.delta})" if s.delta else "", style="dim")
            out.append("\n")
        return out
    if isinstance(block, Chart):
        return RichText(f"(chart: {block.caption}; {chart_note})", style="dim")
    assert isinstance(block, Text)
    return RichText(block.text)


def _table(t: Table) -> RichTable | RichText:
    if not t.rows:
        return RichText(t.empty_text)
    out = RichTable(title=t.caption or None, title_justify="left", title_style="dim")
    # Links go to sections of the report files, which a terminal summary does not hold.
    shown = [i for i, c in enumerate(t.columns) if c.kind != "link"]
    for i in shown:
        c = t.columns[i]
        out.add_column(c.name, justify="right" if c.kind == "num" else "left")
    for row in t.rows[:MAX_ROWS]:
        out.add_row(*(_cell(t.columns[i].kind, t.columns[i].cell(row[i]), row[i]) for i in shown))
    if len(t.rows) > MAX_ROWS:
        more = fmt.plural(len(t.rows) - MAX_ROWS, "more row")
        out.caption = f"… {more} in the Markdown and HTML reports"
    return out


def _cell(kind: str, text: str, value: object) -> RichText:
    if kind == "verdict":
        return RichText(text, style=f"bold {fmt.VERDICT_COLORS.get(str(value), '')}".strip())
    color = fmt.STATUS_COLORS.get(str(value)) if kind == "status" else None
    return RichText(text, style=color or "")
