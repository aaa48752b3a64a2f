"""The dist suite with real planted faults on rank 1, for tests (loaded as suite `tests.support.dist_faults`).

- `coll/all_reduce_sum/...`: rank 1 adds 1 to its result (a wrong reduction).
- `ddp/fp32`: rank 1 trains on rank 0's slice of the batch (a sampler bug): wrong gradients.
- `coll/broadcast/...`: rank 1 never joins (rank 0 waits for it), with a short budget.
- anything else runs as in the real suite.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainready.core.case import Case, Outcome
from trainready.core.config import RunConfig
from trainready.core.context import CaseContext
from trainready.core.launch import RankEnv
from trainready.suites.dist import collectives, models
from trainready.suites.dist import suite as dist
from trainready.suites.dist.rank import run_case as real_run_case

NAME = "dist"
DEFAULT_DTYPE = dist.DEFAULT_DTYPE
DEFAULT_BUDGET_S = dist.DEFAULT_BUDGET_S
HANG_BUDGET_S = 5.0
PICKED = (
    "dist/coll/all_reduce_sum/fp32/16KiB",
    "dist/ddp/fp32",
    "dist/coll/broadcast/fp32/16KiB",
    "dist/coll/all_gather/fp32/16KiB",
)


def cases(cfg: RunConfig) -> list[Case]:
    by_id = {c.id: c for c in dist.cases(cfg)}
    picked = [by_id[i] for i in PICKED]
    hang = picked[2]
    picked[2] = Case(hang.suite, hang.name, {**hang.params, "budget_s": HANG_BUDGET_S})
    return picked


def execute(case: Case, ctx: CaseContext) -> Outcome:
    return dist.execute(case, ctx, target="tests.support.dist_faults:faulty_rank")


def _adds_one(prepare):
    def planted(env, numel, dtype):
        p = prepare(env, numel, dtype)

        def call() -> None:
            p.call()
            p.result().add_(1)

        return replace(p, call=call)

    return planted


def _never_joins(prepare):
    def planted(env, numel, dtype):
        return replace(prepare(env, numel, dtype), call=lambda: None)

    return planted


_ORIGINAL = {name: op.prepare for name, op in collectives.OPS.items()}
_LOCAL_SLICE = models.local_slice


def faulty_rank(env: RankEnv, case: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    if env.rank == 1:
        ops = collectives.OPS
        ops["all_reduce_sum"] = replace(
            ops["all_reduce_sum"], prepare=_adds_one(_ORIGINAL["all_reduce_sum"])
        )
        ops["broadcast"] = replace(ops["broadcast"], prepare=_never_joins(_ORIGINAL["broadcast"]))
        models.local_slice = lambda t, rank: _LOCAL_SLICE(t, 0)
    return real_run_case(env, case, options)
