"""The one view model every renderer reads: runs, their results, summaries, causes, comparisons.

Nothing here formats text; renderers decide how things look, this module decides what they are.
Nothing here reads a store's runs into a report either: that is `build.build_report`, above the
suites' sections (which name the metrics `compare` compares).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from trainready.core.case import FAILING, STATUSES, Case, Result
from trainready.core.store import RunRecord
from trainready.probes.compile import FIRST_COMPILE_KEY
from trainready.reporting.rules import Rules

# Pseudo-status for cases a run planned but never finished: counted and shown, never hidden.
NOT_RUN = "not_run"

# Where suites put the human-readable why of a non-pass result, most specific first.
REASON_KEYS = ("error", "reason", "message")
REASON_MAX_CHARS = 200


def compile_note(result: Result | None) -> str:
    """What a reader must know next to a case's compile time: "" unless the compile was its
    process's first, whose time includes the compiler's one-time start-up (not the model's)."""
    if result is not None and result.diagnostics.get(FIRST_COMPILE_KEY):
        return "its process's first compile: includes the compiler's one-time start-up"
    return ""


def reason(result: Result) -> str:
    """One line saying why a case ended as it did ("" when the suite recorded none)."""
    for key in REASON_KEYS:
        lines = [ln.strip() for ln in str(result.diagnostics.get(key) or "").splitlines()]
        lines = [ln for ln in lines if ln]
        if not lines:
            continue
        # A traceback's first line says nothing; the exception is on its last.
        line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
        return clip(line, REASON_MAX_CHARS)
    return ""


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the last an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _by_suite(counts: Counter) -> dict[str, int]:
    # Sorted: the counter was built from a set difference, whose order varies with the hash seed.
    return dict(sorted(counts.items()))


def finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class SuiteSummary:
    """Status counts of one suite in one run (suite "all" for the whole run)."""

    suite: str
    counts: dict[str, int]  # every status in STATUSES, zeros included, in STATUSES order
    # Planned cases without a result. None: the run planned several suites and the store does not
    # say which of them the missing cases belong to (the run total still counts them).
    not_run: int | None = 0

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    @property
    def total(self) -> int:
        return self.done + (self.not_run or 0)

    @property
    def passed(self) -> int:
        return self.counts.get("pass", 0)

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.counts.items() if s in FAILING)

    @property
    def pass_rate(self) -> float | None:
        """Passed over planned: a case that did not run counts against the rate."""
        return self.passed / self.total if self.total else None


@dataclass
class Cause:
    """Non-pass results that ended the same way: same status, phase and reason."""

    status: str
    phase: str | None
    reason: str
    case_ids: list[str]

    @property
    def failing(self) -> bool:
        return self.status in FAILING


@dataclass(frozen=True)
class RunState:
    """Where a run stands. `finished` (at its end), `interrupted` (a signal stopped it: which and
    when, recorded by the run), or `in_progress`: no end recorded, so still running, or killed
    without a chance to record it (SIGKILL, power loss). Counts are of the run's results."""

    kind: str  # "finished" | "interrupted" | "in_progress"
    done: int
    planned: int
    at: float | None = None
    signal: str | None = None


@dataclass
class RunView:
    record: RunRecord
    results: list[Result]
    label: str  # how people call this run: the device name, unique within a report
    suites: dict[str, SuiteSummary]
    total: SuiteSummary
    causes: list[Cause]
    not_run: list[Case] = field(default_factory=list)  # planned cases without a result, by name

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def state(self) -> RunState:
        done, planned = self.total.done, self.total.total
        if self.record.finished_at is not None:
            return RunState("finished", done, planned, at=self.record.finished_at)
        stop = self.record.env.get("interrupted")
        if isinstance(stop, dict):
            return RunState("interrupted", done, planned, stop.get("at"), stop.get("signal"))
        return RunState("in_progress", done, planned)

    @cached_property
    def by_id(self) -> dict[str, Result]:
        return {r.case_id: r for r in self.results}

    def in_suite(self, suite: str) -> list[Result]:
        return [r for r in self.results if r.case.suite == suite]

    def not_run_in(self, suite: str) -> list[Case]:
        return [c for c in self.not_run if c.suite == suite]


@dataclass
class StatusChange:
    case_id: str
    suite: str
    reference: str  # status in the reference run, or NOT_RUN
    status: str  # status in the primary run, or NOT_RUN
    reason: str  # why the primary run's case ended so


@dataclass
class MetricDelta:
    case_id: str
    suite: str
    metric: str
    reference: float
    value: float

    @property
    def ratio(self) -> float | None:
        return self.value / self.reference if self.reference else None


@dataclass
class RatioSummary:
    suite: str
    metric: str
    cases: int
    median: float
    low: float
    high: float


@dataclass
class Comparison:
    """The primary run against one reference run, case by case (ratios are primary/reference),
    over the cases both runs planned: a case only one of them set out to run (another suite,
    another preset) is left out, and counted per suite in `only_primary` / `only_reference`."""

    primary: RunView
    reference: RunView
    changes: list[StatusChange]
    deltas: list[MetricDelta]
    compared: int = 0  # cases both runs planned
    only_primary: dict[str, int] = field(default_factory=dict)  # suite -> cases left out
    only_reference: dict[str, int] = field(default_factory=dict)

    @property
    def newly_failing(self) -> list[StatusChange]:
        """Fails in the primary run; ran in the reference and did not fail there."""
        return [
            c
            for c in self.changes
            if c.status in FAILING and c.reference not in FAILING and c.reference != NOT_RUN
        ]

    @property
    def newly_passing(self) -> list[StatusChange]:
        """Passes in the primary run; ran in the reference and did not pass there."""
        return [
            c for c in self.changes if c.status == "pass" and c.reference not in ("pass", NOT_RUN)
        ]

    def ratios(self) -> list[RatioSummary]:
        groups: dict[tuple[str, str], list[float]] = {}
        for d in self.deltas:
            if d.ratio is not None:
                groups.setdefault((d.suite, d.metric), []).append(d.ratio)
        return [
            RatioSummary(suite, metric, len(rs), statistics.median(rs), min(rs), max(rs))
            for (suite, metric), rs in groups.items()
        ]


@dataclass
class Report:
    runs: list[RunView]  # the first is the primary; the others are references
    comparisons: list[Comparison] = field(default_factory=list)
    rules: Rules | None = None  # the readiness verdict's thresholds (None: the built-in ones)

    @property
    def primary(self) -> RunView:
        return self.runs[0]

    @property
    def multi(self) -> bool:
        return len(self.runs) > 1

    @cached_property
    def suites(self) -> list[str]:
        return list(dict.fromkeys(s for run in self.runs for s in run.suites))

    def aligned(self, suite: str) -> list[tuple[str, list[Result | None]]]:
        """Every case id of `suite` in any run, with each run's result (None: not run there)."""
        ids = sorted(
            {r.case_id for run in self.runs for r in run.in_suite(suite)}
            | {c.id for run in self.runs for c in run.not_run_in(suite)}
        )
        return [(cid, [run.by_id.get(cid) for run in self.runs]) for cid in ids]


def _counts(results: Iterable[Result]) -> dict[str, int]:
    found = Counter(r.status for r in results)
    # Known statuses in their report order, then anything unexpected rather than dropping it.
    return {s: found.get(s, 0) for s in STATUSES} | {
        s: n for s, n in found.items() if s not in STATUSES
    }


def _causes(results: Iterable[Result]) -> list[Cause]:
    groups: dict[tuple[str, str | None, str], list[str]] = {}
    for r in results:
        if r.status != "pass":
            groups.setdefault((r.status, r.phase, reason(r)), []).append(r.case_id)
    causes = [Cause(s, p, why, ids) for (s, p, why), ids in groups.items()]
    rank = {s: i for i, s in enumerate(STATUSES)}
    # Failures before gaps, then the cause that costs most cases first.
    causes.sort(key=lambda c: (not c.failing, -len(c.case_ids), rank.get(c.status, 99), c.reason))
    return causes


NOT_RUN_REASON = "planned, but no result (interrupted run? finish it with --resume)"


def build_run(
    record: RunRecord, results: list[Result], label: str, planned: list[Case] | None = None
) -> RunView:
    """`planned`: the cases the run set out to do; without it (older stores) gaps are a count."""
    done = {r.case_id for r in results}
    not_run = [c for c in planned or [] if c.id not in done]
    # Named by their cases where the plan is known: a suite given by module path
    # (`benchmarks.trivial_suite`) names its cases by its NAME ("trivial"). Older stores keep no
    # plan, and there the run's own list names the suites nothing ran for.
    named = [*(c.suite for c in planned or []), *(r.case.suite for r in results)]
    suites = list(dict.fromkeys(named if planned else [*record.suites, *named]))
    missing = len(not_run) if planned else max((record.planned or 0) - len(results), 0)

    def missing_in(suite: str) -> int | None:
        if planned:
            return sum(c.suite == suite for c in not_run)
        return missing if len(suites) == 1 else None

    per_suite = {
        s: SuiteSummary(s, _counts(r for r in results if r.case.suite == s), missing_in(s))
        for s in suites
    }
    total = SuiteSummary("all", _counts(results), missing)
    causes = _causes(results)
    if not_run:
        causes.append(Cause(NOT_RUN, None, NOT_RUN_REASON, [c.id for c in not_run]))
    return RunView(record, results, label, per_suite, total, causes, not_run)


def _planned_ids(run: RunView) -> dict[str, str]:
    """Case id -> suite of every case the run set out to do (with a result or not)."""
    return {r.case_id: r.case.suite for r in run.results} | {c.id: c.suite for c in run.not_run}


def compare(
    primary: RunView,
    reference: RunView,
    key_metrics: Callable[[str, list[Result]], tuple[str, ...]],
) -> Comparison:
    """`key_metrics(suite, results)`: the metrics whose deltas are compared (`sections.key_metrics`)."""
    metrics = {
        s: key_metrics(s, primary.in_suite(s) + reference.in_suite(s))
        for s in {**primary.suites, **reference.suites}
    }
    mine_ids, ref_ids = _planned_ids(primary), _planned_ids(reference)
    shared = mine_ids.keys() & ref_ids.keys()
    only_primary = Counter(mine_ids[c] for c in mine_ids.keys() - shared)
    only_reference = Counter(ref_ids[c] for c in ref_ids.keys() - shared)
    changes, deltas = [], []
    for cid in sorted(shared):
        mine, ref = primary.by_id.get(cid), reference.by_id.get(cid)
        status = mine.status if mine else NOT_RUN
        ref_status = ref.status if ref else NOT_RUN
        suite = (mine or ref).case.suite
        if status != ref_status:
            changes.append(
                StatusChange(cid, suite, ref_status, status, reason(mine) if mine else "")
            )
        # Speed of a wrong or broken case means nothing: deltas compare passes only.
        if status == ref_status == "pass":
            for m in metrics[suite]:
                a, b = mine.metrics.get(m), ref.metrics.get(m)
                if finite(a) and finite(b):
                    deltas.append(MetricDelta(cid, suite, m, float(b), float(a)))
    return Comparison(
        primary,
        reference,
        changes,
        deltas,
        len(shared),
        _by_suite(only_primary),
        _by_suite(only_reference),
    )
