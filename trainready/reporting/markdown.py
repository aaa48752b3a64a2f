"""The scorecard as GitHub-flavoured Markdown (for PRs, issues, CI summaries)."""

from __future__ import annotations

from trainready.reporting import document
from trainready.reporting.blocks import Block, Chart, Column, Section, Stats, Table, Text
from trainready.reporting.fmt import plural
from trainready.reporting.model import Report

# What a chart reads as where it cannot be drawn: the scorecard's HTML file has it.
CHART_NOTE = "in the HTML report"


def render(report: Report) -> str:
    return page(document.title(report), document.build(report))


def page(title: str, sections: list[Section], chart_note: str = CHART_NOTE) -> str:
    """`chart_note` says where a chart can be seen (the HTML report; for the history, the
    command that draws it)."""
    parts = [f"# {title}"]
    for section in sections:
        parts.append(f"## {section.title}")
        parts += [_block(b, chart_note) for b in section.blocks]
    return "\n\n".join(parts) + "\n"


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: 'Suite: parity' -> 'suite-parity'."""
    kept = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def _escape(text: str) -> str:
    # "<" would open raw HTML on GitHub; a pipe would end a table cell.
    return text.replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


def _block(block: Block, chart_note: str = CHART_NOTE) -> str:
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Stats):
        return "\n".join(
            f"- **{_escape(s.label)}**: {_escape(s.text)}"
            + (f" — {_escape(s.note)}" if s.note else "")
            + (f" (vs {_escape(s.delta)})" if s.delta else "")
            for s in block.items
        )
    if isinstance(block, Chart):
        return f"_Chart: {_escape(block.caption)} ({_escape(chart_note)})._"
    assert isinstance(block, Text)
    return "\n\n".join(_escape(line) for line in block.text.splitlines())


def _cell(c: Column, value: object) -> str:
    text = _escape(c.cell(value))
    if c.kind == "link" and value is not None:
        return f"[{text}](#{slug(c.cell(value))})"
    return text


def _table(t: Table) -> str:
    if not t.rows:
        return _escape(t.empty_text)
    lines = [
        "| " + " | ".join(_escape(c.name) for c in t.columns) + " |",
        "|" + "|".join("---:" if c.kind == "num" else "---" for c in t.columns) + "|",
        *(
            "| " + " | ".join(_cell(c, v) for c, v in zip(t.columns, row, strict=True)) + " |"
            for row in t.rows
        ),
    ]
    body = "\n".join(lines)
    if t.drill_down:
        # Long tables fold away so the summary stays readable; GitHub renders <details>.
        summary = f"{_escape(t.caption)} ({plural(len(t.rows), 'row')})"
        return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"
    return f"**{_escape(t.caption)}**\n\n{body}" if t.caption else body
