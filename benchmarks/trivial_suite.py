"""A suite whose cases do nothing: what remains is the runner's own cost."""

from __future__ import annotations

from trainready.core.case import Case, Outcome

NAME = "trivial"
DEFAULT_DTYPE = None
DEFAULT_BUDGET_S = 60.0


def cases(cfg) -> list[Case]:
    return [Case(NAME, f"case-{i:04d}", {"i": i}) for i in range(int(cfg.options.get("n", 200)))]


def execute(case: Case, ctx) -> Outcome:
    return Outcome("pass", metrics={"i": float(case.params["i"])})
