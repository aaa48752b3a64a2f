"""A suite whose cases say whether tests.support.import_probe_mod was imported where they run: in the case
worker, and in a rank the worker starts with trainready.core.launch (as the dist suite does)."""

from __future__ import annotations

import os
import sys

from trainready.core.case import Case, Outcome

NAME = "import_probe"
DEFAULT_DTYPE = None
DEFAULT_BUDGET_S = 120.0
PROBE = "tests.support.import_probe_mod"


def cases(cfg) -> list[Case]:
    return [Case(NAME, where, {"where": where}) for where in ("worker", "rank")]


def seen(env=None) -> dict:
    """`trainready.core.launch` target too: what this process knows of the probe module."""
    return {"imported": PROBE in sys.modules, "pid": os.getpid()}


def execute(case: Case, ctx) -> Outcome:
    if case.params["where"] == "worker":
        here = seen()
    else:
        from trainready.core.launch import launch

        res = launch(f"{__name__}:seen", 1, device="cpu", timeout_s=100)
        if not res.ok:
            return Outcome("fail_run", diagnostics={"error": str(res.errors)})
        here = res.per_rank[0]
    return Outcome(
        "pass",
        metrics={"imported": float(here["imported"]), "pid": float(here["pid"])},
        diagnostics={"env": os.environ.get("TRAINREADY_IMPORT")},
    )
