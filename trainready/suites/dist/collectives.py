"""Collectives on one rank: run the op once on known data and check the exact result, then time it.

Every rank builds its input from (rank, index) alone, so each can compute the single-process answer
itself: the reduction or permutation done in float64 on the CPU over every rank's input, cast to
the case dtype. Inputs are small integers (0..15), so sums over up to 16 ranks are exact in fp32,
bf16 and fp16, and the check is `torch.equal` -- bitwise. The one exception is `avg` with a world
size that is not a power of two (1/world is inexact, and backends scale before or after summing):
there the numerics rule decides (rule `noise_vs_single_process`): the distance from the float64
average against the noise of the same average computed in one process at the dtype, in each of
the two orders backends use (sum then divide; divide then sum, the rounded quotients added rank
by rank), the larger of the two -- either order is correct. An op that needs more ranks than the run has (send/recv
and its functional form, `permute_tensor`, on one rank) is `skipped`, saying so: a limit of the
run's settings, not of the device.

Timing: `warmup` untimed calls, then individually timed ones (the shared timing probe), as many as
the adaptive sampler (`metrics.sampler`) asks: at least `repeats`, then more until the median's
95% interval is within ±5%, for at most `--set timing_s` seconds more (TIMING_S). The ranks agree on
each batch's count (`agree`: one all_reduce MIN per check, outside the timed region), so every
rank makes the same calls and none waits in a collective the others skipped. A rank reports its
median and the sampler's verdict; the host takes the slowest rank's median.

Sizes and bandwidth as nccl-tests define them (PERFORMANCE.md): `size` is the per-rank full buffer
(all_reduce/broadcast/send: the buffer; all_gather: the output; reduce_scatter: the input;
all_to_all: the send buffer; permute: the buffer each rank sends); algbw = size / time; busbw =
algbw * factor, factor 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and
all_to_all, 1 for broadcast, send/recv and permute. On one rank the factor is 0 for every
collective but broadcast: busbw is 0 by definition there, and the report shows algbw instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from trainready.core.launch import RankEnv
from trainready.device import torch_dtype
from trainready.probes.numerics import judge, noise_rmse
from trainready.probes.timing import (
    agree_over_ranks,
    benchmark,
    sampling_record,
    timing_budget,
    timing_option,
)
from trainready.suites.dist.models import NOISE_RULE
from trainready.suites.dist.rank import skipped

VALUES = 16  # inputs are integers in [0, VALUES): exact in every float dtype we test


def busbw_factor(op: str, world: int) -> float:
    """nccl-tests' bus-bandwidth factor of a collective on `world` ranks."""
    family = OPS[op].family
    if family == "all_reduce":
        return 2 * (world - 1) / world
    if family in ("all_gather", "reduce_scatter", "all_to_all"):
        return (world - 1) / world
    return 1.0


def data(rank: int, numel: int, dtype: torch.dtype, device: str = "cpu") -> torch.Tensor:
    """Rank `rank`'s input: small integers, different on every rank and every position."""
    i = torch.arange(numel, dtype=torch.int64)
    return ((i * 7 + rank * 5 + i // 13) % VALUES).to(dtype).to(device)


def _all(world: int, numel: int) -> list[torch.Tensor]:
    return [data(r, numel, torch.float64) for r in range(world)]


def uneven_splits(world: int, chunk: int) -> list[list[int]]:
    """splits[src][dst]: elements rank src sends rank dst. Uneven (a half chunk to itself, one and
    a half to the next rank) while every row and column still adds up to world * chunk."""
    half = chunk // 2
    splits = [[chunk] * world for _ in range(world)]
    if world > 1:
        for src in range(world):
            splits[src][src] -= half
            splits[src][(src + 1) % world] += half
    return splits


@dataclass
class Prepared:
    """One rank's op: `call()` runs it; `result()` is what it produced; `expected` the answer."""

    call: Callable[[], None]
    result: Callable[[], torch.Tensor]
    expected: torch.Tensor  # bitwise: the answer in the dtype; else: in float64
    exact: bool = True
    honest: tuple[torch.Tensor, ...] = ()  # not exact: correct results at the dtype (the noise)


@dataclass(frozen=True)
class Op:
    family: str  # for the bus-bandwidth factor
    prepare: Callable[[RankEnv, int, torch.dtype], Prepared]
    min_world: int = 1
    sized: bool = True


def _group() -> dist.ProcessGroup:
    return dist.group.WORLD


def _all_reduce(reduce: str, functional: bool) -> Callable[[RankEnv, int, torch.dtype], Prepared]:
    def prepare(env: RankEnv, numel: int, dtype: torch.dtype) -> Prepared:
        x = data(env.rank, numel, dtype, env.device)
        stacked = torch.stack(_all(env.world_size, numel))
        ref = {
            "sum": stacked.sum(0),
            "avg": stacked.sum(0) / env.world_size,
            "max": stacked.max(0).values,
        }[reduce]
        out: list[torch.Tensor] = [x]
        if functional:

            def call() -> None:
                out[0] = funcol.all_reduce(x, reduce, _group()).wait()
        else:
            op = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX}

            def call() -> None:
                dist.all_reduce(x, op=op[reduce])

        power_of_two = env.world_size & (env.world_size - 1) == 0
        if reduce != "avg" or power_of_two:
            return Prepared(call, lambda: out[0], ref.to(dtype))
        return Prepared(call, lambda: out[0], ref, exact=False, honest=_averages(env, numel, dtype))

    return prepare


def _averages(env: RankEnv, numel: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """The ranks' average at `dtype` in one process, in the two orders backends use: the sum (exact
    here) divided by n; each input divided by n, the quotients added rank by rank."""
    inputs = [data(r, numel, dtype) for r in range(env.world_size)]
    summed_first = torch.stack(inputs).sum(0) / env.world_size
    divided_first = torch.zeros(numel, dtype=dtype)
    for x in inputs:
        divided_first = divided_first + x / env.world_size
    return summed_first, divided_first


def _broadcast(functional: bool) -> Callable[[RankEnv, int, torch.dtype], Prepared]:
    def prepare(env: RankEnv, numel: int, dtype: torch.dtype) -> Prepared:
        src = env.world_size - 1  # not rank 0: a backend that ignores `src` is caught
        x = data(env.rank, numel, dtype, env.device)
        out = [x]
        if functional:

            def call() -> None:
                out[0] = funcol.broadcast(x, src, _group()).wait()
        else:

            def call() -> None:
                dist.broadcast(x, src)

        return Prepared(call, lambda: out[0], data(src, numel, dtype))

    return prepare


def _all_gather(form: str) -> Callable[[RankEnv, int, torch.dtype], Prepared]:
    def prepare(env: RankEnv, numel: int, dtype: torch.dtype) -> Prepared:
        chunk = numel // env.world_size
        x = data(env.rank, chunk, dtype, env.device)
        ref = torch.cat([data(r, chunk, dtype) for r in range(env.world_size)])
        out = torch.empty(chunk * env.world_size, dtype=dtype, device=env.device)
        got = [out]
        if form == "tensor":

            def call() -> None:
                dist.all_gather_into_tensor(out, x)
        elif form == "list":
            parts = [
                torch.empty(chunk, dtype=dtype, device=env.device) for _ in range(env.world_size)
            ]

            def call() -> None:
                dist.all_gather(parts, x)
                got[0] = torch.cat(parts)
        else:

            def call() -> None:
                got[0] = funcol.all_gather_tensor(x, 0, _group()).wait()

        return Prepared(call, lambda: got[0], ref)

    return prepare


def _reduce_scatter(functional: bool) -> Callable[[RankEnv, int, torch.dtype], Prepared]:
    def prepare(env: RankEnv, numel: int, dtype: torch.dtype) -> Prepared:
        chunk = numel // env.world_size
        x = data(env.rank, chunk * env.world_size, dtype, env.device)
        total = torch.stack(_all(env.world_size, chunk * env.world_size)).sum(0)
        ref = total[env.rank * chunk : (env.rank + 1) * chunk].to(dtype)
        out = [torch.empty(chunk, dtype=dtype, device=env.device)]
        if functional:

            def call() -> None:
                out[0] = funcol.reduce_scatter_tensor(x, "sum", 0, _group()).wait()
        else:

            def call() -> None:
                dist.reduce_scatter_tensor(out[0], x)

        return Prepared(call, lambda: out[0], ref)

    return prepare


def _all_to_all(uneven: bool, functional: bool) -> Callable[[RankEnv, int, torch.dtype], Prepared]:
    def prepare(env: RankEnv, numel: int, dtype: torch.dtype) -> Prepared:
        world, rank = env.world_size, env.rank
        chunk = numel // world
        splits = uneven_splits(world, chunk) if uneven else [[chunk] * world] * world
        send = splits[rank]
        recv = [splits[src][rank] for src in range(world)]
        x = data(rank, sum(send), dtype, env.device)
        pieces = []
        for src in range(world):
            start = sum(splits[src][:rank])
            pieces.append(data(src, sum(splits[src]), dtype)[start : start + splits[src][rank]])
        ref = torch.cat(pieces)
        out = [torch.empty(sum(recv), dtype=dtype, device=env.device)]
        if functional:

            def call() -> None:
                out[0] = funcol.all_to_all_single(x, recv, send, _group()).wait()
        else:

            def call() -> None:
                dist.all_to_all_single(out[0], x, recv, send)

        return Prepared(call, lambda: out[0], ref)

    return prepare


def _send_recv(env: RankEnv, numel: int, dtype: torch.dtype) -> Prepared:
    """The first rank sends to the last (the farthest pair), which receives; the others idle."""
    first, last = 0, env.world_size - 1
    x = data(first, numel, dtype, env.device)
    buf = torch.empty(numel, dtype=dtype, device=env.device)

    def call() -> None:
        if env.rank == first:
            dist.send(x, last)
        elif env.rank == last:
            dist.recv(buf, first)

    if env.rank == last:
        return Prepared(call, lambda: buf, data(first, numel, dtype))
    # Ranks that only send, or idle, have nothing to check beyond returning.
    return Prepared(call, lambda: x, x.cpu())


def _permute(env: RankEnv, numel: int, dtype: torch.dtype) -> Prepared:
    """funcol.permute_tensor, the functional point-to-point: every rank sends its buffer to the
    next rank (a ring shift), so each receives the previous rank's."""
    world = env.world_size
    x = data(env.rank, numel, dtype, env.device)
    out = [x]

    def call() -> None:
        out[0] = funcol.permute_tensor(x, [(r + 1) % world for r in range(world)], _group()).wait()

    return Prepared(call, lambda: out[0], data((env.rank - 1) % world, numel, dtype))


def _barrier(env: RankEnv, numel: int, dtype: torch.dtype) -> Prepared:
    done = torch.zeros(1)

    def call() -> None:
        dist.barrier()
        done.fill_(1)

    return Prepared(call, lambda: done, torch.ones(1))


OPS: dict[str, Op] = {
    "all_reduce_sum": Op("all_reduce", _all_reduce("sum", functional=False)),
    "all_reduce_avg": Op("all_reduce", _all_reduce("avg", functional=False)),
    "all_reduce_max": Op("all_reduce", _all_reduce("max", functional=False)),
    "broadcast": Op("broadcast", _broadcast(functional=False)),
    "all_gather": Op("all_gather", _all_gather("tensor")),
    "all_gather_list": Op("all_gather", _all_gather("list")),
    "reduce_scatter": Op("reduce_scatter", _reduce_scatter(functional=False)),
    "all_to_all": Op("all_to_all", _all_to_all(uneven=False, functional=False)),
    "all_to_all_uneven": Op("all_to_all", _all_to_all(uneven=True, functional=False)),
    "send_recv": Op("send_recv", _send_recv, min_world=2),
    "barrier": Op("barrier", _barrier, sized=False),
    "funcol_all_reduce": Op("all_reduce", _all_reduce("sum", functional=True)),
    "funcol_all_reduce_avg": Op("all_reduce", _all_reduce("avg", functional=True)),
    "funcol_all_reduce_max": Op("all_reduce", _all_reduce("max", functional=True)),
    "funcol_all_gather": Op("all_gather", _all_gather("functional")),
    "funcol_reduce_scatter": Op("reduce_scatter", _reduce_scatter(functional=True)),
    "funcol_all_to_all": Op("all_to_all", _all_to_all(uneven=False, functional=True)),
    "funcol_all_to_all_uneven": Op("all_to_all", _all_to_all(uneven=True, functional=True)),
    "funcol_broadcast": Op("broadcast", _broadcast(functional=True)),
    "funcol_permute": Op("send_recv", _permute, min_world=2),
}


def numel_for(size_bytes: int, dtype: torch.dtype, world: int) -> int:
    """Elements of a `size_bytes` buffer, rounded down so it splits into 2 * world equal parts."""
    step = 2 * world
    return max(step, size_bytes // dtype.itemsize // step * step)


def _bitwise(got: torch.Tensor, expected: torch.Tensor) -> tuple[bool, dict]:
    if got.shape != expected.shape:
        return False, {"rule": "shape", "shape": list(got.shape), "expected": list(expected.shape)}
    diff = (got.double() - expected.double()).abs()
    wrong = ~(got == expected)
    return not bool(wrong.any()), {
        "rule": "bitwise",
        "mismatched": int(wrong.sum()),
        "numel": got.numel(),
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
    }


# A timed collective's sampling budget on each rank, in seconds (`--set timing_s`): sizes the
# quick sweep's 40-odd timed cases to well under a minute of timing at worst.
TIMING_S = 1.0


def run(
    env: RankEnv,
    op: str,
    size_bytes: int,
    dtype: str,
    warmup: int,
    repeats: int,
    timing_s: float = TIMING_S,
) -> dict:
    """Check and time `op` on this rank -> {"ok", "check", "median_s", "bytes", "sampling", ...}."""
    spec = OPS[op]
    tdtype = torch_dtype(dtype)
    numel = numel_for(size_bytes, tdtype, env.world_size) if spec.sized else 0
    env.phase("prepare")
    prepared = spec.prepare(env, numel, tdtype)
    env.phase("check")
    prepared.call()
    got = prepared.result().cpu()
    if prepared.exact:
        ok, check = _bitwise(got, prepared.expected)
    else:
        ref64 = prepared.expected
        noise = max(noise_rmse(ref64, h) for h in prepared.honest)
        verdict = judge(ref64, got, noise, dtype, NOISE_RULE)
        ok, check = verdict.ok, verdict.to_json()
    env.phase("time")
    stats = benchmark(
        prepared.call,
        env.device,
        warmup=warmup,
        repeats=repeats,
        flush_l2=False,
        extra_s=timing_s,
        agree=agree_over_ranks(env.device) if env.world_size > 1 else None,
    )
    return {
        "ok": ok,
        "check": check,
        "median_s": stats.median_s,
        "min_s": stats.min_s,
        "spread": stats.spread,
        "repeats": stats.repeats,
        "clock": stats.clock,
        "bytes": numel * tdtype.itemsize,
        "sampling": sampling_record(stats, lambda total: timing_option(total, 1.0, math.inf)),
        "sampling_metrics": stats.sampling_metrics(),
    }


def too_few_ranks(op: str, world: int) -> str | None:
    """Why `op` cannot run on `world` ranks (a setting of the run, not a gap of the device)."""
    need = OPS[op].min_world
    return f"{op} needs at least {need} ranks, the run has {world}" if world < need else None


def run_case(env: RankEnv, name: str, params: dict, options: dict) -> dict:
    reason = too_few_ranks(params["op"], env.world_size)
    if reason:
        return skipped(reason)
    r = run(
        env,
        params["op"],
        params.get("size_bytes", 0),
        params["tensor_dtype"],
        params["warmup"],
        params["repeats"],
        timing_budget(options, TIMING_S),
    )
    metrics = {k: float(r[k]) for k in ("median_s", "min_s", "spread", "repeats", "bytes")}
    return {
        "ok": r["ok"],
        "metrics": {**metrics, **r["sampling_metrics"]},
        "diagnostics": {"check": r["check"], "clock": r["clock"], "sampling": r["sampling"]},
    }
