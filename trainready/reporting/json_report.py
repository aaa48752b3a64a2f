"""The scorecard as one JSON document: runs, every result, summaries and comparisons.

Strict JSON (no NaN/Infinity, which many parsers reject): non-finite numbers become null. A record
(a dataclass, such as a headline's value) becomes an object of its fields, in their order.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, is_dataclass
from typing import Any

from trainready.core.case import Result
from trainready.reporting import fmt, verdict
from trainready.reporting.model import Comparison, Report, RunView, SuiteSummary
from trainready.reporting.sections import details, headlines

SCHEMA = "trainready.reporting/1"


def render(report: Report) -> str:
    return json.dumps(_strict(to_dict(report)), indent=2, allow_nan=False) + "\n"


def to_dict(report: Report) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "primary": report.primary.run_id,
        "runs": [_run(run, report) for run in report.runs],
        "comparisons": [_comparison(c) for c in report.comparisons],
    }


def _summary(s: SuiteSummary) -> dict[str, Any]:
    return {
        "counts": s.counts,
        "not_run": s.not_run,
        "done": s.done,
        "total": s.total,
        "passed": s.passed,
        "failed": s.failed,
        "pass_rate": s.pass_rate,
    }


def _result(r: Result) -> dict[str, Any]:
    return {
        "case_id": r.case_id,
        **r.case.to_json(),
        "status": r.status,
        "phase": r.phase,
        "metrics": r.metrics,
        "diagnostics": r.diagnostics,
        "started_at": r.started_at,
        "duration_s": r.duration_s,
    }


def _run(run: RunView, report: Report) -> dict[str, Any]:
    return {
        "run": run.record.to_json(),
        "label": run.label,
        "state": {**asdict(run.state), "text": fmt.run_state(run.state)},
        # For CI: verdict.overall.status, and each dimension's status and reason.
        "verdict": verdict.judge(run, report.rules).to_json(),
        "summary": {
            "all": _summary(run.total),
            "suites": {name: _summary(s) for name, s in run.suites.items()},
        },
        "headlines": [{"label": s.label, "value": s.value, "note": s.note} for s in headlines(run)],
        "causes": [
            {"status": c.status, "phase": c.phase, "reason": c.reason, "cases": c.case_ids}
            for c in run.causes
        ],
        "results": [_result(r) for r in run.results],
        # What a suite's section computes over its results (the ops suite's coverage by entry,
        # its blockers ...), field by field.
        "sections": details(run),
    }


def _comparison(c: Comparison) -> dict[str, Any]:
    return {
        "primary": c.primary.run_id,
        "reference": c.reference.run_id,
        "compared": c.compared,
        "left_out": {"only_primary": c.only_primary, "only_reference": c.only_reference},
        "newly_failing": [ch.case_id for ch in c.newly_failing],
        "newly_passing": [ch.case_id for ch in c.newly_passing],
        "changes": [asdict(ch) for ch in c.changes],
        "ratios": [asdict(r) for r in c.ratios()],
        "deltas": [{**asdict(d), "ratio": d.ratio} for d in c.deltas],
    }


def _strict(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):  # a record (a headline's value)
        return _strict(asdict(value))
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value
