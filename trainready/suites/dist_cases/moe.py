"""Mixture-of-experts expert parallelism on one rank, against a local MoE layer.

`moe/all_to_all`: 2 experts per rank, top-2 softmax routing by a replicated router, an uneven
number of tokens per rank (5 + 3 * rank). Dispatch as TorchTitan does it: sort token copies by
expert, exchange per-expert counts with `all_to_all_single`, send tokens with the autograd-aware
`all_to_all_single_autograd`, run the local experts, send results back the same way, and combine
weighted by the router. Forward output, the input's gradient, the router's (summed over ranks) and
the local experts' gradients are judged by the numerics probe at fp32 against the same layer run
on one process over every rank's tokens (float64 reference, fp32 baseline).

`moe/token_switch`: PyTorch's MoE dispatch/combine API, `torch.distributed._token_switch`. Where
this torch has no such module the case is `unsupported`, saying so; where it has one the case is
`skipped` (this trainready does not know that API yet), never a guess.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from trainready.core.context import Unsupported
from trainready.launch import RankEnv
from trainready.probes.numerics import compare_many

DIM, HIDDEN, TOP_K, EXPERTS_PER_RANK = 8, 16, 2, 2
TOKEN_SWITCH = "torch.distributed._token_switch"


def tokens_per_rank(world: int) -> list[int]:
    return [5 + 3 * r for r in range(world)]


def weights(world: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Router and expert weights, the same on every rank (seeded), in `dtype` on the CPU."""
    experts = EXPERTS_PER_RANK * world
    gen = torch.Generator().manual_seed(7)
    w = {
        "router": torch.randn(experts, DIM, generator=gen, dtype=torch.float64),
        "w1": torch.randn(experts, DIM, HIDDEN, generator=gen, dtype=torch.float64) / DIM**0.5,
        "w2": torch.randn(experts, HIDDEN, DIM, generator=gen, dtype=torch.float64) / HIDDEN**0.5,
    }
    return {k: v.to(dtype) for k, v in w.items()}


def tokens(world: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, loss weights) for every rank's tokens, concatenated in rank order."""
    gen = torch.Generator().manual_seed(8)
    n = sum(tokens_per_rank(world))
    x = torch.randn(n, DIM, generator=gen, dtype=torch.float64)
    target = torch.randn(n, DIM, generator=gen, dtype=torch.float64)
    return x.to(dtype), target.to(dtype)


def expert(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.gelu(x @ w1) @ w2


def route(x: torch.Tensor, router: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k experts of each token and their weights (softmax over all experts, then top-k)."""
    probs = torch.softmax(x @ router.t(), dim=-1)
    return probs.topk(TOP_K, dim=-1)


def local_moe(x: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    """The single-process layer: every expert here, tokens sent to their top-k experts."""
    top_w, top_e = route(x, w["router"])
    out = torch.zeros_like(x)
    for e in range(w["w1"].shape[0]):
        tok, slot = (top_e == e).nonzero(as_tuple=True)
        if tok.numel():
            y = expert(x[tok], w["w1"][e], w["w2"][e]) * top_w[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, y)
    return out


def ep_moe(env: RankEnv, x: torch.Tensor, router: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor):
    """The expert-parallel layer on this rank: `w1`, `w2` hold this rank's experts only."""
    world, group = env.world_size, dist.group.WORLD
    experts = EXPERTS_PER_RANK * world
    top_w, top_e = route(x, router)
    flat_e = top_e.flatten()
    order = torch.argsort(flat_e, stable=True)
    token_of = order // TOP_K
    per_expert = torch.bincount(flat_e, minlength=experts)
    # How many tokens each rank sends this rank, per local expert: [src, local expert].
    recv_per_expert = torch.empty_like(per_expert)
    dist.all_to_all_single(recv_per_expert, per_expert)
    recv_counts = recv_per_expert.view(world, EXPERTS_PER_RANK).cpu()
    input_splits = per_expert.view(world, EXPERTS_PER_RANK).sum(1).tolist()
    output_splits = recv_counts.sum(1).tolist()

    routed = funcol.all_to_all_single_autograd(x[token_of], output_splits, input_splits, group)
    # What arrived: by source rank, and within each source by (global, hence local) expert.
    pieces = routed.split(recv_counts.flatten().tolist())
    outs = [
        expert(piece, w1[i % EXPERTS_PER_RANK], w2[i % EXPERTS_PER_RANK])
        for i, piece in enumerate(pieces)
    ]
    back = funcol.all_to_all_single_autograd(torch.cat(outs), input_splits, output_splits, group)
    weighted = back * top_w.flatten()[order].unsqueeze(-1)
    return torch.zeros_like(x).index_add(0, token_of, weighted)


def _record(env: RankEnv, dtype: torch.dtype, distributed: bool) -> dict[str, torch.Tensor]:
    """Forward output and gradients of this rank's part of the layer."""
    world, rank = env.world_size, env.rank
    counts = tokens_per_rank(world)
    lo, hi = sum(counts[:rank]), sum(counts[: rank + 1])
    mine = slice(rank * EXPERTS_PER_RANK, (rank + 1) * EXPERTS_PER_RANK)
    device = env.device if distributed else "cpu"
    w = {k: v.to(device).requires_grad_() for k, v in weights(world, dtype).items()}
    x_all, target_all = tokens(world, dtype)
    if distributed:
        x = x_all[lo:hi].to(device).requires_grad_()
        w1, w2 = w["w1"][mine].detach().requires_grad_(), w["w2"][mine].detach().requires_grad_()
        out = ep_moe(env, x, w["router"], w1, w2)
        (out * target_all[lo:hi].to(device)).sum().backward()
        router_grad = w["router"].grad.clone()
        dist.all_reduce(router_grad)
        rec = {"output": out, "grad/input": x.grad, "grad/router": router_grad}
        rec.update({"grad/w1": w1.grad, "grad/w2": w2.grad})
    else:
        x = x_all.clone().requires_grad_()
        out = local_moe(x, w)
        (out * target_all).sum().backward()
        rec = {"output": out[lo:hi], "grad/input": x.grad[lo:hi], "grad/router": w["router"].grad}
        rec.update({"grad/w1": w["w1"].grad[mine], "grad/w2": w["w2"].grad[mine]})
    return {k: v.detach().cpu() for k, v in rec.items()}


def _all_to_all_case(env: RankEnv) -> dict:
    env.phase("expert parallel forward/backward")
    got = _record(env, torch.float32, distributed=True)
    env.phase("single-process reference")
    ref = _record(env, torch.float64, distributed=False)
    base = _record(env, torch.float32, distributed=False)
    ok, worst, verdicts = compare_many({k: (ref[k], got[k], base[k]) for k in ref}, "fp32")
    counts = tokens_per_rank(env.world_size)
    return {
        "ok": ok,
        "metrics": {
            "tokens": float(sum(counts)),
            "experts": float(EXPERTS_PER_RANK * env.world_size),
        },
        "diagnostics": {
            "tokens_per_rank": counts,
            "worst": worst,
            "worst_verdict": verdicts[worst].to_json() if worst else None,
            "failed": [k for k, v in verdicts.items() if not v.ok],
        },
    }


def run_case(env: RankEnv, name: str, params: dict[str, Any], options: dict[str, Any]) -> dict:
    if params["what"] == "token_switch":
        if importlib.util.find_spec(TOKEN_SWITCH) is None:
            raise Unsupported(f"{TOKEN_SWITCH} is not in torch {torch.__version__}")
        # Present, but its API is newer than this check: say so instead of guessing at it.
        return {
            "ok": True,
            "skipped": f"{TOKEN_SWITCH} is present in torch {torch.__version__}; "
            "this trainready has no check of its API yet",
            "metrics": {},
            "diagnostics": {},
        }
    return _all_to_all_case(env)
