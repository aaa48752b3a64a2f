"""A report's view model read from a store: the runs, their labels, comparisons and thresholds.

Above the view model (model.py), the suites' sections (which name each suite's key metrics) and
the thresholds (rules.py); every renderer gets its `Report` from `build_report`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from trainready.core.config import ConfigError
from trainready.core.store import RunRecord, Store
from trainready.reporting.model import Report, build_run, compare
from trainready.reporting.rules import load_rules
from trainready.reporting.sections import key_metrics

# A report is made to be shared: values under keys like these never reach it, whatever the
# environment snapshot captured.
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "CREDENTIAL")
REDACTED = "(redacted)"


def redacted(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {
        k: REDACTED if any(m in str(k).upper() for m in SECRET_MARKERS) else redacted(v)
        for k, v in value.items()
    }


def _labels(records: list[RunRecord]) -> list[str]:
    def name(rec: RunRecord) -> str:
        device = rec.env.get("device")
        given = device.get("name") if isinstance(device, dict) else None
        return str(given or rec.device)

    names = [name(r) for r in records]
    # Two runs on one device (two versions, two days) need the run id to tell them apart.
    return [
        n if names.count(n) == 1 else f"{n} ({r.run_id})"
        for n, r in zip(names, records, strict=True)
    ]


def build_report(
    store: Store, run_ids: list[str], verdict_config: str | Path | None = None
) -> Report:
    """The primary run first, then the runs it is compared against; `verdict_config`: a TOML file
    of readiness thresholds in place of the built-in ones (trainready/reporting/verdict.toml)."""
    if not run_ids:
        raise ConfigError("no run to report on; give at least one run id")
    rules = load_rules(verdict_config)
    records = [store.get_run(rid) for rid in run_ids]
    records = [replace(r, env=redacted(r.env), config=redacted(r.config)) for r in records]
    runs = [
        build_run(rec, store.results(rec.run_id), label, store.planned(rec.run_id))
        for rec, label in zip(records, _labels(records), strict=True)
    ]
    return Report(runs, [compare(runs[0], ref, key_metrics) for ref in runs[1:]], rules)
