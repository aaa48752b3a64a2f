"""Where in the compiler stack a compiled case's failure lives: the failing run again with backends
that each stop one stage earlier.

`torch.compile` is dynamo's capture, then AOT autograd (the joint graph, partitioned into forward
and backward), then a backend's decompositions and code generation. A case that fails compiled
with backend B runs again with each backend of STAGES below B, in order, judged by the same rule
against the same reference; the first that passes bounds the difference to the stage it leaves out.
Every one failing puts it in dynamo's capture or in the model's own compiled path (code that
branches on `torch.compiler.is_compiling`). Only failing compiled cases pay for it: one compile
and run per backend tried, while they fit BUDGET_S (estimated from the failing run's own time), so
a slow model's verdict is never lost to a case timeout; a backend left out is recorded as not run,
and the stage is then unknown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trainready.core.case import Outcome
from trainready.suites.parity.engine import Trace

# (backend, what it leaves out of the stack above it), from the most of the stack to the least.
STAGES = (
    (
        "aot_eager_decomp_partition",
        "the backend's lowering or code generation (AOT autograd with inductor's decompositions "
        "and partitioner, run eagerly, passes)",
    ),
    (
        "aot_eager",
        "the decompositions or the partitioner (AOT autograd alone, run eagerly, passes)",
    ),
    ("eager", "AOT autograd (dynamo's graph run eagerly passes)"),
)
BUDGET_S = 120.0  # the bisection's runs together
NONE_PASS = (
    "dynamo's capture or the model's compiled path (it fails with every backend down to eager)"
)


def below(backend: str | None) -> list[str]:
    """The STAGES backends below `backend` (all of them for inductor or a vendor's backend)."""
    names = [name for name, _ in STAGES]
    if backend in names:
        return names[names.index(backend) + 1 :]
    return names


def bisect(
    backend: str | None,
    judged: Callable[[str], tuple[str, str | None]],
    out: Outcome,
    estimate_s: float,
) -> str | None:
    """Run `judged(backend)` -> (status, error) for each backend below `backend` until one
    passes, each while its estimated `estimate_s` still fits BUDGET_S; record every verdict in
    `compile_bisect` and return where the difference arises (None when there is no backend below
    to try, or the budget left one out before any passed)."""
    tried = below(backend)
    if not tried:
        return None
    report: dict[str, Any] = {"backend": backend, "runs": {}}
    out.diagnostics["compile_bisect"] = report
    spent = 0.0
    for name in tried:
        if spent + estimate_s > BUDGET_S:
            report["runs"][name] = {
                "status": "not run",
                "why": f"about {estimate_s:.0f} s more, over the bisection's {BUDGET_S:.0f} s",
            }
            report["arises_in"] = None
            return None
        t0 = time.perf_counter()
        status, error = judged(name)
        spent += time.perf_counter() - t0
        report["runs"][name] = {"status": status, **({"error": error} if error else {})}
        if status == "pass":
            report["arises_in"] = dict(STAGES)[name]
            return report["arises_in"]
    report["arises_in"] = NONE_PASS
    return NONE_PASS


def judge_run(
    run: Callable[[], Trace], check: Callable[[Trace, Outcome], list[str]]
) -> tuple[str, str | None]:
    """(status, error) of one bisect run: `check`'s verdict on the trace `run` returns, or the
    exception that stopped it."""
    scratch = Outcome("pass")
    try:
        problems = check(run(), scratch)
    except Exception as e:  # noqa: BLE001 - a backend that cannot run the model says so
        return "fail_run", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    return ("fail_numerics", " | ".join(problems)[:300]) if problems else ("pass", None)
