"""Planted faults in the dist suite's reductions, to put its numerics rule under test.

The dist suite judges what the ranks compute against float64, its noise the same computation in
one process at the same dtype (docs/suites/dist.md). Where that rule decides -- `avg` on a
world that is not a power of two, DDP and FSDP2 training -- a wrong reduction must fail and a
correct one done another way must pass. Each fault here patches the rank side of one case for the
duration of that case (the ranks outlive it), in the place a real bug would sit:

- `avg_drops_rank`: `all_reduce(AVG)` without rank 1's contribution (a rank that joins the
  collective with an empty buffer).
- `avg_scaled_1pct`: the average 1% too large (a wrong 1/n folded into the reduction).
- `ddp_grad_scaled_1pct`, `ddp_drops_rank`: DDP's gradient all-reduce, through a comm hook
  (`register_comm_hook`, where compression and custom reductions plug in), 1% too large, or without
  rank 1's gradients.
- `fsdp2_reduce_scatter_2pct`: FSDP2's gradient reduce-scatter 2% too large, through
  `set_custom_reduce_scatter` (FSDP2's hook for a custom communication).

Correct-but-different (must pass):

- `avg_divided_first`: each rank's input divided by n, then summed (`all_reduce(SUM)`): the other
  order backends use.
- `ddp_gathered_sum`: DDP's all-reduce as an all-gather of every rank's bucket, summed in reverse
  rank order, divided by n (another algorithm; on the 2 ranks the catch table runs, a + b = b + a,
  so the sum is the all-reduce's bit for bit and the row checks the hook path only).
- `fsdp2_reduce_scatter_by_all_reduce`: FSDP2's reduce-scatter as an all-reduce of the whole
  input, each rank keeping its chunk (another algorithm).

`run_case` is the rank target that plants `options["dist_fault"]` (`execute` runs a case through
it); every rank's diagnostics carry `fault_hits`, how often the planted code acted there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist

from trainready.core.case import Case, Outcome
from trainready.core.context import CaseContext
from trainready.core.launch import RankEnv
from trainready.testing.faults import catch_required, patched

OPTION = "dist_fault"
TARGET = "trainready.testing.dist_faults:run_case"
AVG_CASES = ("coll/all_reduce_avg/fp32/16KiB", "coll/all_reduce_avg/bf16/16KiB")
AVG_NPROC = 3  # the average is inexact (judged by the rule) only off a power of two


def nproc_for(case: str) -> int:
    """The ranks a planted-fault case runs on: 3 for the average, else the suite's 2."""
    return AVG_NPROC if case.startswith("coll/all_reduce_avg/") else 2


_hits = [0]


def _hit() -> None:
    _hits[0] += 1


@dataclass(frozen=True)
class DistFault:
    """A planted dist fault: `plant(env)` is a context manager that patches the rank side."""

    name: str
    expect: str  # "catch" | "pass"
    imitates: str
    size: float | None
    cases: dict[str, tuple[str, ...]] = field(repr=False)  # dtype -> dist case names
    plant: Callable[[RankEnv], contextlib.AbstractContextManager] = field(repr=False)

    def required(self, dtype: str) -> bool:
        """Whether the catch goal requires this fault caught at `dtype` (`catch_required`)."""
        return catch_required(self.expect, self.size, dtype)


# --- all_reduce(AVG) ------------------------------------------------------------------------------


def _avg_fault(wrap: Callable[[RankEnv, Any], Callable[[], None]]) -> Callable:
    """Replace the `all_reduce_avg` op's call by `wrap(env, prepared)`."""

    @contextlib.contextmanager
    def plant(env: RankEnv) -> Iterator[None]:
        from trainready.suites.dist import collectives

        op = collectives.OPS["all_reduce_avg"]

        def prepare(env: RankEnv, numel: int, dtype: torch.dtype) -> Any:
            prepared = op.prepare(env, numel, dtype)
            return replace(prepared, call=wrap(env, prepared))

        with patched(
            collectives, "OPS", {**collectives.OPS, "all_reduce_avg": replace(op, prepare=prepare)}
        ):
            yield

    return plant


def _drops_rank(env: RankEnv, prepared: Any) -> Callable[[], None]:
    def call() -> None:
        if env.rank == 1:
            _hit()
            prepared.result().zero_()  # the buffer all_reduce reduces in place
        prepared.call()

    return call


def _scaled(scale: float) -> Callable[[RankEnv, Any], Callable[[], None]]:
    def wrap(env: RankEnv, prepared: Any) -> Callable[[], None]:
        def call() -> None:
            prepared.call()
            _hit()
            prepared.result().mul_(scale)

        return call

    return wrap


def _divided_first(env: RankEnv, prepared: Any) -> Callable[[], None]:
    buffer = prepared.result()

    def call() -> None:
        _hit()
        buffer.div_(env.world_size)
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)

    return call


# --- DDP ------------------------------------------------------------------------------------------


def _ddp_hook(hook: Callable[[RankEnv, torch.Tensor], torch.Tensor]) -> Callable:
    """DDP with a comm hook whose bucket reduction is `hook(env, buffer)` (synchronous)."""

    @contextlib.contextmanager
    def plant(env: RankEnv) -> Iterator[None]:
        from trainready.suites.dist import training

        original = training._ddp

        def ddp(env: RankEnv, model: torch.nn.Module) -> torch.nn.Module:
            wrapped = original(env, model)

            def comm_hook(state, bucket):  # unannotated: DDP rejects a string annotation
                _hit()
                fut: torch.futures.Future = torch.futures.Future()
                fut.set_result(hook(env, bucket.buffer()))
                return fut

            wrapped.register_comm_hook(None, comm_hook)
            return wrapped

        with patched(training, "_ddp", ddp):
            yield

    return plant


def _allreduce_mean(
    env: RankEnv, t: torch.Tensor, scale: float = 1.0, drop: int = -1
) -> torch.Tensor:
    if env.rank == drop:
        t.zero_()
    dist.all_reduce(t)
    return t.mul_(scale / env.world_size)


def _gathered_sum(env: RankEnv, t: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(t) for _ in range(env.world_size)]
    dist.all_gather(parts, t)
    total = parts[-1].clone()
    for part in reversed(parts[:-1]):
        total += part
    return total.div_(env.world_size)


# --- FSDP2 ----------------------------------------------------------------------------------------


def _fsdp2_reduce_scatter(
    reduce_scatter: Callable[[RankEnv, Any, Any, Any, Any], None],
) -> Callable:
    """FSDP2 whose gradient reduce-scatter is `reduce_scatter(env, output, input, group, op)`
    (`set_custom_reduce_scatter`, FSDP2's hook for a custom communication), run synchronously."""

    @contextlib.contextmanager
    def plant(env: RankEnv) -> Iterator[None]:
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

        from trainready.suites.dist import training

        class Planted(DefaultReduceScatter):
            def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
                _hit()
                reduce_scatter(env, output_tensor, input_tensor, group, op)

        original = training._fsdp2

        def fsdp2(model: torch.nn.Module, mp: str | None) -> torch.nn.Module:
            sharded = original(model, mp)
            for module in sharded.modules():
                if isinstance(module, FSDPModule):
                    module.set_custom_reduce_scatter(Planted())
            return sharded

        with patched(training, "_fsdp2", fsdp2):
            yield

    return plant


def _reduce_scatter_scaled(scale: float) -> Callable[[RankEnv, Any, Any, Any, Any], None]:
    def reduce_scatter(env: RankEnv, output: Any, input_: Any, group: Any, op: Any) -> None:
        dist.reduce_scatter_tensor(output, input_, op=op, group=group)
        output.mul_(scale)

    return reduce_scatter


def _reduce_scatter_by_all_reduce(
    env: RankEnv, output: Any, input_: Any, group: Any, op: Any
) -> None:
    """Another algorithm: all-reduce the whole input, keep this rank's chunk."""
    whole = input_.clone()
    dist.all_reduce(whole, op=op, group=group)
    output.copy_(whole.view(env.world_size, -1)[env.rank].view_as(output))


_AVG = {"fp32": AVG_CASES[:1], "bf16": AVG_CASES[1:]}
_DDP = {"fp32": ("ddp/fp32",)}
_FSDP2 = {"fp32": ("fsdp2/fp32",), "bf16": ("fsdp2/bf16_mixed",)}

DIST_FAULTS: dict[str, DistFault] = {
    f.name: f
    for f in (
        DistFault("avg_drops_rank", "catch", "all_reduce(AVG) without rank 1's contribution",
                  None, _AVG, _avg_fault(_drops_rank)),
        DistFault("avg_scaled_1pct", "catch", "all_reduce(AVG) 1% too large (a wrong 1/n)",
                  0.01, _AVG, _avg_fault(_scaled(1.01))),
        DistFault("avg_divided_first", "pass", "all_reduce(AVG) as inputs divided by n, then "
                  "summed (the other order)", None, _AVG, _avg_fault(_divided_first)),
        DistFault("ddp_grad_scaled_1pct", "catch", "DDP's gradient all-reduce 1% too large "
                  "(comm hook)", 0.01, _DDP,
                  _ddp_hook(lambda env, t: _allreduce_mean(env, t, scale=1.01))),
        DistFault("ddp_drops_rank", "catch", "DDP's gradient all-reduce without rank 1's "
                  "gradients (comm hook)", None, _DDP,
                  _ddp_hook(lambda env, t: _allreduce_mean(env, t, drop=1))),
        DistFault("ddp_gathered_sum", "pass", "DDP's all-reduce as an all-gather summed in "
                  "reverse rank order (comm hook)", None, _DDP, _ddp_hook(_gathered_sum)),
        DistFault("fsdp2_reduce_scatter_2pct", "catch", "FSDP2's gradient reduce-scatter 2% too "
                  "large (custom reduce-scatter)", 0.02, _FSDP2,
                  _fsdp2_reduce_scatter(_reduce_scatter_scaled(1.02))),
        DistFault("fsdp2_reduce_scatter_by_all_reduce", "pass", "FSDP2's reduce-scatter as an "
                  "all-reduce of the whole input, this rank's chunk kept", None, _FSDP2,
                  _fsdp2_reduce_scatter(_reduce_scatter_by_all_reduce)),
    )
}  # fmt: skip


def run_case(env: RankEnv, case: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The rank target: the real case with `options["dist_fault"]` planted (none: as it is)."""
    from trainready.suites.dist.rank import run_case as real_run_case

    name = options.get(OPTION)
    plant = DIST_FAULTS[name].plant(env) if name else contextlib.nullcontext()
    _hits[0] = 0
    with plant:
        result = real_run_case(env, case, options)
    result.setdefault("diagnostics", {})["fault_hits"] = _hits[0]
    return result


def execute(case: Case, ctx: CaseContext) -> Outcome:
    """The dist suite's execute, through `run_case` (plant with `ctx.options["dist_fault"]`)."""
    from trainready.suites.dist import suite as dist

    return dist.execute(case, ctx, target=TARGET)


__all__ = [
    "AVG_NPROC",
    "DIST_FAULTS",
    "nproc_for",
    "OPTION",
    "TARGET",
    "DistFault",
    "execute",
    "run_case",
]
