"""The run summary in a terminal (rich): overview, a row per suite, failures by cause."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text as RichText

from trainready.core.store import Store
from trainready.report import document, fmt
from trainready.report.blocks import Block, Chart, Section, Stats, Table, Text
from trainready.report.model import build_report

# A terminal is for the gist; drill-downs longer than this point at the files.
MAX_ROWS = 20


def print_summary(console: Console, store: Store, run_id: str) -> None:
    """Print one run's summary: pass rate and headlines, counts per suite, failures by cause."""
    print_sections(console, document.summary(build_report(store, [run_id])))


def print_sections(console: Console, sections: list[Section]) -> None:
    for section in sections:
        console.rule(RichText(section.title, style="bold"), align="left")
        for block in section.blocks:
            console.print(_block(block))


def _block(block: Block) -> RichTable | RichText:
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Stats):
        out = RichText()
        for s in block.items:
            out.append(f"{s.label}: ", style="bold").append(s.text, style="bold cyan")
            out.append(f"  {s.note}\n" if s.note else "\n", style="dim")
        return out
    if isinstance(block, Chart):
        return RichText(f"(chart: {block.caption}; see the HTML report)", style="dim")
    assert isinstance(block, Text)
    return RichText(block.text)


def _table(t: Table) -> RichTable:
    out = RichTable(title=t.caption or None, title_justify="left", title_style="dim")
    for c in t.columns:
        out.add_column(c.name, justify="right" if c.kind == "num" else "left")
    for row in t.rows[:MAX_ROWS]:
        out.add_row(*(_cell(c.kind, c.cell(v), v) for c, v in zip(t.columns, row, strict=True)))
    if len(t.rows) > MAX_ROWS:
        out.caption = f"… {len(t.rows) - MAX_ROWS} more rows in the Markdown and HTML reports"
    return out


def _cell(kind: str, text: str, value: object) -> RichText:
    color = fmt.STATUS_COLORS.get(str(value)) if kind == "status" else None
    return RichText(text, style=color or "")
