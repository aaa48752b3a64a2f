"""Per-suite report sections. Every suite gets the generic one; a suite may add its own.

To give a suite its own section, add a module here that defines SUITE (the suite's name) and
either or both of:
    section(report, suite) -> list[Block]   blocks shown above the generic drill-downs
    headlines(run) -> list[Stat]            headline numbers for the overview
    KEY_METRICS: tuple[str, ...]            metrics shown in tables and compared across runs
    METRIC_GOALS: dict[str, str]            metric -> "higher" or "lower" is better (for `gate`)
    details(run) -> dict                    the section's own fields, for the JSON report
Modules are found by listing this package, so a new suite's section needs no edit elsewhere.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from typing import Any

from trainready.core.case import Result
from trainready.reporting.blocks import Block, Section, Stat
from trainready.reporting.model import Report, RunView
from trainready.reporting.sections import generic

# Metrics worth a column and a cross-run delta, per suite. Suites without an entry get the first
# few metrics their results carry.
DEFAULT_KEY_METRICS = 4

SECTIONS: dict[str, Callable[[Report, str], list[Block]]] = {}
HEADLINES: dict[str, Callable[[RunView], list[Stat]]] = {}
KEY_METRICS: dict[str, tuple[str, ...]] = {}
METRIC_GOALS: dict[str, dict[str, str]] = {}
DETAILS: dict[str, Callable[[RunView], dict[str, Any]]] = {}

for _info in pkgutil.iter_modules(__path__):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    if hasattr(_module, "SUITE"):
        if hasattr(_module, "section"):
            SECTIONS[_module.SUITE] = _module.section
        if hasattr(_module, "headlines"):
            HEADLINES[_module.SUITE] = _module.headlines
        if hasattr(_module, "KEY_METRICS"):
            KEY_METRICS[_module.SUITE] = tuple(_module.KEY_METRICS)
        if hasattr(_module, "METRIC_GOALS"):
            METRIC_GOALS[_module.SUITE] = dict(_module.METRIC_GOALS)
        if hasattr(_module, "details"):
            DETAILS[_module.SUITE] = _module.details


def key_metrics(suite: str, results: Iterable[Result]) -> tuple[str, ...]:
    """A suite's section module names its key metrics; otherwise the first few it recorded."""
    if suite in KEY_METRICS:
        return KEY_METRICS[suite]
    seen = dict.fromkeys(m for r in results for m in r.metrics)
    return tuple(seen)[:DEFAULT_KEY_METRICS]


def suite_section(report: Report, suite: str) -> Section:
    extra = SECTIONS.get(suite)
    metrics = key_metrics(suite, [r for run in report.runs for r in run.in_suite(suite)])
    blocks = [
        generic.counts(report, suite),
        *(extra(report, suite) if extra else []),
        *generic.drill_down(report, suite, metrics),
    ]
    return Section(f"Suite: {suite}", blocks, f"suite-{suite}")


def headlines(run: RunView) -> list[Stat]:
    return [stat for suite in run.suites if suite in HEADLINES for stat in HEADLINES[suite](run)]


def details(run: RunView) -> dict[str, dict[str, Any]]:
    """Each suite of the run whose section has its own fields: those fields (for the JSON)."""
    return {suite: DETAILS[suite](run) for suite in run.suites if suite in DETAILS}
