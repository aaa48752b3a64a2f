"""Per-suite report sections. Every suite gets the generic one; a suite may add its own.

To give a suite its own section, register two callables (both optional):
    SECTIONS[name](report, suite) -> list[Block]   blocks shown above the generic drill-downs
    HEADLINES[name](run) -> list[Stat]              headline numbers for the overview
"""

from __future__ import annotations

from collections.abc import Callable

from trainready.report.blocks import Block, Section, Stat
from trainready.report.model import Report, RunView
from trainready.report.sections import generic, matmul

SECTIONS: dict[str, Callable[[Report, str], list[Block]]] = {
    matmul.SUITE: matmul.section,
}
HEADLINES: dict[str, Callable[[RunView], list[Stat]]] = {
    matmul.SUITE: matmul.headlines,
}


def suite_section(report: Report, suite: str) -> Section:
    extra = SECTIONS.get(suite)
    blocks = [
        generic.counts(report, suite),
        *(extra(report, suite) if extra else []),
        *generic.drill_down(report, suite),
    ]
    return Section(f"Suite: {suite}", blocks, f"suite-{suite}")


def headlines(run: RunView) -> list[Stat]:
    return [stat for suite in run.suites if suite in HEADLINES for stat in HEADLINES[suite](run)]
