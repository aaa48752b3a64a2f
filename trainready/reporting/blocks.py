"""Format-neutral document blocks: sections build these once; terminal, Markdown and HTML draw them.

Cells keep raw values (numbers stay numbers, so HTML can sort them); a column says how its values
read as text, so every format shows the same digits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainready.reporting import fmt

Cell = str | int | float | None


@dataclass(frozen=True)
class Column:
    name: str
    # "text", "num" (right-aligned, sorts numerically), "status" (a case's status; a list of them
    # where a row stands for several cases), "verdict" (a readiness level: ready, partial, not
    # ready, not tested) or "link" (the value is a section's anchor, `show` gives its title: HTML
    # and Markdown link to it)
    kind: str = "text"
    show: Callable[[Any], str] = fmt.text
    # A drill-down's HTML offers a menu of this column's values and shows the rows holding the
    # one picked (as it does for a status column). One value per cell: the text it shows.
    facet: bool = False

    def cell(self, value: Cell) -> str:
        return "" if value is None else self.show(value)


def num(name: str, show: Callable[[Any], str] = fmt.number) -> Column:
    return Column(name, "num", show)


STATUS = Column("status", "status", fmt.status)


@dataclass
class Table:
    columns: list[Column]
    rows: list[list[Cell]]
    caption: str = ""
    # A drill-down: sortable and filterable in HTML, folded away in Markdown.
    drill_down: bool = False
    empty: str = ""  # the sentence every format shows instead of a table without rows

    @property
    def empty_text(self) -> str:
        if self.empty:
            return self.empty
        return f"{self.caption}: none." if self.caption else "Nothing to show."

    def status_index(self) -> int | None:
        return next((i for i, c in enumerate(self.columns) if c.kind == "status"), None)


@dataclass
class Stat:
    """A headline number: value stays raw for JSON, `show` makes it read right."""

    label: str
    value: Any
    show: Callable[[Any], str] = fmt.text
    note: str = ""
    delta: str = ""  # against the runs compared with, e.g. "cpu 97.6%: -2.1 pts"
    level: str = ""  # a readiness level (fmt.VERDICT_COLORS): the tile takes its colour

    @property
    def text(self) -> str:
        return self.show(self.value)


@dataclass
class Stats:
    items: list[Stat]


@dataclass
class Text:
    text: str


@dataclass
class Chart:
    svg: str  # self-contained inline SVG
    caption: str = ""


Block = Table | Stats | Text | Chart


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    anchor: str = ""
