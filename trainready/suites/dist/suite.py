"""Dist suite: which torch.distributed APIs work on the device, checked against a single process.

`trainready run dist --device D --nproc N [--pg-backend B]` runs every case on N ranks started by
torch's own launcher (`trainready.core.launch`: torchrun, the process-group backend the device pairs
with -- gloo on the cpu, nccl on CUDA, xccl on XPU, a vendor's own -- unless `--pg-backend` says
otherwise). The ranks stay up from case to case (one start-up per run), and each case is one call
on them with its own budget: a case whose ranks do not all answer in time is `timeout`, its ranks
are killed, and the next case starts fresh ones. The rank-side code is `rank.py` and one module per
family beside it; every rank checks its own result against a single-process reference it computes
itself, and the case passes when every rank does.

Families (case names):
- `coll/{op}/{dtype}/{size}` and `coll/barrier`: the collectives of `collectives.OPS`
  (c10d and functional forms), bitwise-checked, timed; algbw and busbw as nccl-tests define them.
- `ddp/...`, `fsdp2/...`: a few training steps; losses and gradients against one process; FSDP2
  plain, with a bf16 mixed-precision policy, and each of those compiled (with dynamo's counts).
- `dtensor/...`, `tp/...`: DTensor layouts and redistribution, tensor parallelism.
- `moe/...`: expert-parallel dispatch/combine with all_to_all_single and autograd; the
  `torch.distributed._token_switch` API where this torch has it.
- `dcp/...`: distributed checkpoint save/load of an FSDP2 model, bitwise.

Statuses: `pass`; `fail_numerics` (some rank's result is wrong: which ranks, and each rank's
check); `fail_run` (a rank raised; `unsupported` when every rank raised a missing-feature error,
or the device has no process-group backend, or a compiled case's backend cannot generate
code for it -- inductor without a code generator for the device type, said before the ranks
start, as parity and train say it); `timeout` (some rank did not answer within the
budget: which, and in which phase); `crash` (ranks died); `skipped` when the case cannot be judged
for a reason that is not the device's -- an op that needs more ranks than the run has, or an API
this torch build does not have (`torch.distributed._token_switch`, DTensor's Shard -> Partial).

Options: `nproc` (default 2; on an accelerator at most the devices there are), `pg_backend`,
`compile_backend` (the compiled FSDP2 cases; default the device's: inductor, openxla on xla),
`timing_s` (a timed collective's sampling budget per rank: `collectives.TIMING_S`).

Metrics of collectives: size_bytes, time_us (the slowest rank's median), algbw_gbps, busbw_gbps
(GB/s, 1e9 bytes; 0 on one rank for all but broadcast and point-to-point, where nccl-tests'
factor is 0), repeats, spread, and the adaptive sampler's verdict on the least settled rank:
concluded, half_width, needed_s (diagnostics' `sampling`: `least_settled`); every case: nranks,
start_s (ranks started by this case); every diagnostics: backend (the process group's).
"""

from __future__ import annotations

import atexit
from collections.abc import Iterable
from typing import Any

import torch

from trainready.core.case import Case, Outcome
from trainready.core.config import ConfigError, RunConfig
from trainready.core.context import CaseContext
from trainready.core.launch import LaunchError, LaunchResult, RankPool
from trainready.device import (
    available_devices,
    default_compile_backend,
    default_pg_backend,
    device_type,
)
from trainready.probes.compile import backend_unsupported
from trainready.probes.timing import TIMING_OPTION
from trainready.suites.dist.collectives import OPS, busbw_factor

NAME = "dist"
DEFAULT_DTYPE = None  # each case names its tensor dtypes; none needs a peak FLOP/s
DEFAULT_BUDGET_S = 180.0  # start-up of the ranks and a compile included
DEFAULT_NPROC = 2
USES_PEAK = False  # bandwidth and correctness, no MFU
# The --set options this suite reads, checked before a run starts (see core/options.py).
OPTIONS = {
    "nproc": range(1, 1025),
    "pg_backend": str,
    "compile_backend": str,
    TIMING_OPTION: float,  # a timed collective's sampling budget per rank (collectives.TIMING_S)
}
RANK_TARGET = "trainready.suites.dist.rank:run_case"

KiB, MiB = 1 << 10, 1 << 20
# preset -> (sizes, dtypes, warmup, repeats) of the collective sweep
SWEEPS: dict[str, tuple[tuple[int, ...], tuple[str, ...], int, int]] = {
    "smoke": ((64 * KiB,), ("fp32",), 1, 3),
    "quick": ((16 * KiB, 1 * MiB), ("fp32", "bf16"), 2, 5),
    "standard": ((4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB), ("fp32", "bf16"), 3, 10),
    "full": (tuple(KiB * 4**i for i in range(11)), ("fp32", "bf16", "fp16"), 5, 20),
}
# Of a case budget, what is kept back from the call on the ranks: time to kill them and report
# before the runner's own deadline would kill this worker (and lose the per-rank diagnosis).
RESERVE_S, RESERVE_SHARE = 2.0, 0.05
# name -> params of every case beyond the collective sweep; `api` is what the report calls it.
API_CASES: dict[str, dict[str, Any]] = {
    "ddp/fp32": {"family": "ddp", "api": "DistributedDataParallel"},
    "fsdp2/fp32": {"family": "fsdp2", "api": "fully_shard"},
    "fsdp2/bf16_mixed": {
        "family": "fsdp2",
        "mp": "bf16",
        "api": "fully_shard + bf16 MixedPrecisionPolicy",
    },
    "fsdp2/fp32/compile": {"family": "fsdp2", "compile": True, "api": "torch.compile(fully_shard)"},
    "fsdp2/bf16_mixed/compile": {
        "family": "fsdp2",
        "mp": "bf16",
        "compile": True,
        "api": "torch.compile(fully_shard + bf16 MixedPrecisionPolicy)",
    },
    "dtensor/distribute": {"family": "dtensor", "what": "distribute", "api": "distribute_tensor"},
    "dtensor/redistribute": {
        "family": "dtensor",
        "what": "redistribute",
        "api": "DTensor.redistribute",
    },
    "dtensor/shard_to_partial": {
        "family": "dtensor",
        "what": "shard_to_partial",
        "api": "DTensor.redistribute (Shard -> Partial)",
    },
    "dtensor/matmul": {"family": "dtensor", "what": "matmul", "api": "DTensor matmul"},
    "tp/colwise_rowwise": {"family": "tp", "api": "parallelize_module (Colwise/RowwiseParallel)"},
    "moe/all_to_all": {
        "family": "moe",
        "what": "all_to_all",
        "api": "MoE dispatch/combine (all_to_all_single_autograd)",
    },
    "moe/token_switch": {
        "family": "moe",
        "what": "token_switch",
        "api": "torch.distributed._token_switch",
    },
    "dcp/fsdp2": {"family": "dcp", "api": "torch.distributed.checkpoint (FSDP2)"},
}


# How the report names each collective (the c10d call, or the functional one).
COLLECTIVE_APIS = {
    "all_reduce_sum": "all_reduce (SUM)",
    "all_reduce_avg": "all_reduce (AVG)",
    "all_reduce_max": "all_reduce (MAX)",
    "broadcast": "broadcast",
    "all_gather": "all_gather_into_tensor",
    "all_gather_list": "all_gather (list)",
    "reduce_scatter": "reduce_scatter_tensor",
    "all_to_all": "all_to_all_single (even)",
    "all_to_all_uneven": "all_to_all_single (uneven)",
    "send_recv": "send/recv",
    "barrier": "barrier",
    "funcol_all_reduce": "funcol.all_reduce (SUM)",
    "funcol_all_reduce_avg": "funcol.all_reduce (AVG)",
    "funcol_all_reduce_max": "funcol.all_reduce (MAX)",
    "funcol_all_gather": "funcol.all_gather_tensor",
    "funcol_reduce_scatter": "funcol.reduce_scatter_tensor",
    "funcol_all_to_all": "funcol.all_to_all_single (even)",
    "funcol_all_to_all_uneven": "funcol.all_to_all_single (uneven)",
    "funcol_broadcast": "funcol.broadcast",
    "funcol_permute": "funcol.permute_tensor",
}
assert set(COLLECTIVE_APIS) == set(OPS), "every collective needs a report name"


def size_label(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def collective_cases(cfg: RunConfig) -> list[Case]:
    sizes, dtypes, warmup, repeats = SWEEPS[cfg.preset]
    if cfg.dtype:
        dtypes = (cfg.dtype,)
    out = []
    for op, spec in OPS.items():
        timing = {"family": "coll", "op": op, "api": COLLECTIVE_APIS[op]}
        timing.update(warmup=warmup, repeats=repeats)
        if not spec.sized:
            out.append(Case(NAME, f"coll/{op}", {**timing, "tensor_dtype": dtypes[0]}))
            continue
        for dtype in dtypes:
            for size in sizes:
                params = {**timing, "tensor_dtype": dtype, "size_bytes": size}
                out.append(Case(NAME, f"coll/{op}/{dtype}/{size_label(size)}", params))
    return out


# smoke: one case per API family beyond the collectives.
SMOKE_API_CASES = ("ddp/fp32", "fsdp2/fp32", "dtensor/redistribute", "moe/all_to_all")


def cases(cfg: RunConfig) -> list[Case]:
    names = SMOKE_API_CASES if cfg.preset == "smoke" else tuple(API_CASES)
    return collective_cases(cfg) + [Case(NAME, name, dict(API_CASES[name])) for name in names]


# --- the ranks --------------------------------------------------------------------------------------

_pool: RankPool | None = None
# Ranks that could not start for these settings (torchrun gave up): later cases say so at once
# instead of paying the start-up again to fail the same way.
_start_failure: dict[tuple[int, str, str], str] = {}


def _nproc(ctx: CaseContext) -> int:
    """--nproc, else 2 ranks (on an accelerator: as many as there are devices, up to 2)."""
    if ctx.options.get("nproc"):
        return int(ctx.options["nproc"])
    if device_type(ctx.device) == "cpu":
        return DEFAULT_NPROC
    dev = torch.device(ctx.device)
    same = [torch.device(d) for d in available_devices() if device_type(d) == dev.type]
    return max(1, min(DEFAULT_NPROC, sum((d.index or 0) >= (dev.index or 0) for d in same)))


def pool_for(ctx: CaseContext) -> RankPool:
    """The worker's ranks for this run's settings (kept between cases; killed at worker exit)."""
    global _pool
    backend = ctx.options.get("pg_backend") or default_pg_backend(ctx.device)
    key = (_nproc(ctx), ctx.device, backend)
    if _pool is not None and (_pool.nproc, _pool.device, _pool.backend) != key:
        _pool.close()
        _pool = None
    if _pool is None:
        _pool = RankPool(key[0], device=ctx.device, backend=backend)
        atexit.register(_pool.close)
    return _pool


def run_on_ranks(case: Case, ctx: CaseContext, target: str = RANK_TARGET) -> LaunchResult:
    """One call of `target` for `case` on the ranks, within the case budget (start-up included)."""
    pool = pool_for(ctx)
    budget = ctx.budget_s - max(RESERVE_S, RESERVE_SHARE * ctx.budget_s)
    start_s = 0.0
    if not pool.up:
        ctx.set_phase("start ranks")
        key = (pool.nproc, pool.device, pool.backend)
        if key in _start_failure:
            raise LaunchError(_start_failure[key], timed_out=False)
        try:
            start_s = pool.start(budget)
        except LaunchError as e:
            if not e.timed_out:
                head, _, output = str(e).partition("\n")
                _start_failure[key] = f"{head} (first seen by {case.name})\n{output}"
            raise
    ctx.set_phase(f"run on {pool.nproc} rank{'s' if pool.nproc > 1 else ''}")
    res = pool.run(
        target, {"case": case.to_json(), "options": ctx.options}, timeout_s=budget - start_s
    )
    res.start_s = start_s
    return res


# --- verdicts --------------------------------------------------------------------------------------


def _failure(res: LaunchResult, budget_s: float) -> Outcome | None:
    """The outcome when some rank did not return a result: raised, hung or died."""
    tails = {f"rank{r}": t[-1500:] for r, t in enumerate(res.stderr_tails) if t}
    if res.timed_out:
        lost = [r for r, s in enumerate(res.status) if s == "lost"]
        where = "; ".join(f"rank {r} in {res.phases[r]!r}" for r in lost if res.phases[r])
        return Outcome(
            "timeout",
            diagnostics={
                "error": f"ranks {lost} did not answer within the case budget ({budget_s:g} s)"
                + (f" ({where})" if where else "")
                + "; all ranks were killed",
                "rank_status": res.status,
                "rank_phases": res.phases,
                **tails,
            },
        )
    if "error" in res.status:
        kinds = {k for k in res.kinds if k}
        rank, error = res.first_error or (0, "")
        status = "unsupported" if kinds == {"unsupported"} else "oom" if "oom" in kinds else None
        diagnostics: dict[str, Any] = {"rank_status": res.status, **tails}
        if status == "unsupported":
            diagnostics["reason"] = error.removeprefix("Unsupported: ")
        else:
            diagnostics["error"] = f"rank {rank}: {error}"
            diagnostics["traceback"] = res.tracebacks[rank] or ""
        return Outcome(status or "fail_run", diagnostics=diagnostics)
    if not res.ok:
        return Outcome(
            "crash",
            diagnostics={
                "error": "ranks died during the case",
                "rank_status": res.status,
                "launcher_tail": res.launcher_tail[-1500:],
                **tails,
            },
        )
    return None


def _collective_metrics(case: Case, per_rank: list[dict[str, Any]]) -> dict[str, float]:
    p = case.params
    world = len(per_rank)
    slowest = max(r["metrics"]["median_s"] for r in per_rank)
    metrics = {
        "time_us": slowest * 1e6,
        "repeats": per_rank[0]["metrics"]["repeats"],
        "spread": max(r["metrics"]["spread"] for r in per_rank),
    }
    # The sampler's verdict, the least settled rank's: a case concludes when every rank did.
    metrics.update(
        {
            k: pick(r["metrics"][k] for r in per_rank if k in r["metrics"])
            for k, pick in (("concluded", min), ("half_width", max), ("needed_s", max))
            if any(k in r["metrics"] for r in per_rank)
        }
    )
    if OPS[p["op"]].sized:
        size = per_rank[0]["metrics"]["bytes"]
        algbw = size / slowest / 1e9
        metrics.update(
            size_bytes=size,
            algbw_gbps=algbw,
            busbw_gbps=algbw * busbw_factor(p["op"], world),
        )
    return metrics


def least_settled(records: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Of the ranks' sampler verdicts, the one that says least: unconcluded before concluded,
    then the one needing the most time, then the widest; None when no rank sampled."""
    found = [r for r in records if r]
    if not found:
        return None
    return max(
        found,
        key=lambda r: (not r.get("concluded"), r.get("needed_s") or 0.0, r.get("half_width", 0)),
    )


def outcome_of(case: Case, res: LaunchResult, budget_s: float) -> Outcome:
    """The case's outcome from every rank's answer (or the lack of one)."""
    outcome = _failure(res, budget_s)
    if outcome is None:
        per_rank = [r for r in res.per_rank if r is not None]
        skipped = next((r["skipped"] for r in per_rank if r.get("skipped")), None)
        if skipped:
            return Outcome("skipped", {"nranks": float(len(per_rank))}, {"reason": skipped})
        wrong = [r for r, out in enumerate(per_rank) if not out["ok"]]
        if case.params["family"] == "coll":
            metrics = _collective_metrics(case, per_rank)
        else:
            metrics = dict(per_rank[0]["metrics"])
        diagnostics: dict[str, Any] = {
            "ranks": {r: out["diagnostics"] for r, out in enumerate(per_rank)}
        }
        sampled = least_settled(out["diagnostics"].get("sampling") for out in per_rank)
        if sampled:
            diagnostics["sampling"] = sampled
        if wrong:
            diagnostics["error"] = f"wrong result on ranks {wrong}"
        outcome = Outcome("fail_numerics" if wrong else "pass", metrics, diagnostics)
    outcome.metrics["nranks"] = float(len(res.status))
    if res.start_s:
        outcome.metrics["start_s"] = res.start_s
    return outcome


def execute(case: Case, ctx: CaseContext, target: str = RANK_TARGET) -> Outcome:
    """Run `case` on the ranks (`target` is the rank-side entry; tests plant faults through it)."""
    try:
        backend = pool_for(ctx).backend
    except ConfigError as e:  # no process-group backend for this device
        return Outcome("unsupported", diagnostics={"reason": str(e)})
    if case.params.get("compile"):  # known before the ranks try (as parity and train say it)
        chosen = ctx.options.get("compile_backend") or default_compile_backend(ctx.device)
        why = backend_unsupported(chosen, ctx.device)
        if why:
            return Outcome("unsupported", diagnostics={"reason": why, "backend": backend})
    try:
        res = run_on_ranks(case, ctx, target)
    except LaunchError as e:
        # Still starting at the deadline: a timeout (phase "start ranks"); torchrun gave up: the
        # ranks cannot run here at all.
        head, _, output = str(e).partition("\n")
        status = "timeout" if e.timed_out else "fail_run"
        return Outcome(
            status,
            diagnostics={
                "error": f"ranks did not start: {head}",
                "output": output[-3000:],
                "backend": backend,
            },
        )
    outcome = outcome_of(case, res, ctx.budget_s)
    stuck = {res.phases[r] for r, s in enumerate(res.status) if s == "lost" and res.phases[r]}
    if res.timed_out and len(stuck) == 1:
        ctx.set_phase(f"{ctx.current_phase}: {stuck.pop()}")  # e.g. "run on 2 ranks: check"
    outcome.diagnostics.setdefault("backend", backend)
    return outcome
