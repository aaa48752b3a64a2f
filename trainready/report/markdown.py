"""The scorecard as GitHub-flavoured Markdown (for PRs, issues, CI summaries)."""

from __future__ import annotations

from trainready.report import document
from trainready.report.blocks import Block, Chart, Section, Stats, Table, Text
from trainready.report.model import Report


def render(report: Report) -> str:
    return page(document.title(report), document.build(report))


def page(title: str, sections: list[Section]) -> str:
    parts = [f"# {title}"]
    for section in sections:
        parts.append(f"## {section.title}")
        parts += [_block(b) for b in section.blocks]
    return "\n\n".join(parts) + "\n"


def _escape(text: str) -> str:
    # "<" would open raw HTML on GitHub; a pipe would end a table cell.
    return text.replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


def _block(block: Block) -> str:
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Stats):
        return "\n".join(
            f"- **{_escape(s.label)}**: {_escape(s.text)}"
            + (f" — {_escape(s.note)}" if s.note else "")
            for s in block.items
        )
    if isinstance(block, Chart):
        return f"_Chart: {_escape(block.caption)} (in the HTML report)._"
    assert isinstance(block, Text)
    return "\n\n".join(_escape(line) for line in block.text.splitlines())


def _table(t: Table) -> str:
    lines = [
        "| " + " | ".join(_escape(c.name) for c in t.columns) + " |",
        "|" + "|".join("---:" if c.kind == "num" else "---" for c in t.columns) + "|",
        *(
            "| "
            + " | ".join(_escape(c.cell(v)) for c, v in zip(t.columns, row, strict=True))
            + " |"
            for row in t.rows
        ),
    ]
    body = "\n".join(lines)
    if t.drill_down:
        # Long tables fold away so the summary stays readable; GitHub renders <details>.
        summary = f"{_escape(t.caption)} ({len(t.rows)} rows)"
        return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"
    return f"**{_escape(t.caption)}**\n\n{body}" if t.caption else body
