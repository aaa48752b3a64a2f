"""Mixture-of-experts expert parallelism on one rank, against a local MoE layer.

`moe/all_to_all`: 2 experts per rank, top-2 softmax routing by a replicated router, an uneven
number of tokens per rank (5 + 3 * rank). Dispatch as TorchTitan does it: sort token copies by
expert, exchange per-expert counts with `all_to_all_single`, send tokens with the autograd-aware
`all_to_all_single_autograd`, run the local experts, send results back the same way, and combine
weighted by the router. Forward output, the input's gradient, the router's (summed over ranks) and
the local experts' gradients are judged by the numerics rule at fp32 against the same layer run
on one process over every rank's tokens (float64 reference; noise: the one-process fp32 run's).

`moe/token_switch`: the same judgement of PyTorch's MoE dispatch/combine API,
`torch.distributed._token_switch` (pytorch/pytorch#178712: `TokenSwitch.create_routing()` returns
a `Routing` that `dispatch()` and `combine()` take, both autograd-aware; `TokenSwitchNCCL`, on NCCL
EP, is its one implementation). The layer is the one the API's documented flat layout pins down
without guessing at slot order: one expert per rank and top-1 routing, so every token a rank
receives goes to its expert; `dispatch` sends each token to its expert's rank, the expert runs on
the whole receive buffer (rows past what arrived are zeros, and the expert maps zero to zero),
`combine` brings the results back, and the gate weights them at the source, so the router gets its
gradient (dispatch's `topk_weights` carry none). Tokens are bf16 and 64 wide, what upstream's
tests dispatch; the numerics rule judges at bf16. `create_routing`'s per-expert receive count must
equal the tokens the ranks routed here (exact).

Where this torch has no such module the case is `skipped`: the API came after this torch build, a
gap of the build and not of the device. So is an implementation that cannot load in this build
(TokenSwitchNCCL without a USE_NCCL_EP build). Where the module is there but has no implementation
for the process group's backend, the device has no such API: `unsupported`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from trainready.core.context import Unsupported
from trainready.device import torch_dtype
from trainready.core.launch import RankEnv
from trainready.suites.dist.rank import skipped
from trainready.suites.dist.models import judge_against

TOKEN_SWITCH = "torch.distributed._token_switch"
# process-group backend -> the TokenSwitch implementation that runs on it
TOKEN_SWITCH_IMPLS = {"nccl": "TokenSwitchNCCL"}
HIDDEN = 16  # experts' inner width


@dataclass(frozen=True)
class Layer:
    """An MoE layer's shape: token width, experts on each rank, experts per token."""

    dim: int
    experts_per_rank: int
    top_k: int


ALL_TO_ALL = Layer(dim=8, experts_per_rank=2, top_k=2)
SWITCHED = Layer(dim=64, experts_per_rank=1, top_k=1)
SWITCH_DTYPE = "bf16"

# (env, x, router, w1, w2) -> the layer's output for this rank's tokens; w1/w2 are its experts only
Forward = Callable[[RankEnv, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def tokens_per_rank(world: int) -> list[int]:
    return [5 + 3 * r for r in range(world)]


def weights(world: int, dtype: torch.dtype, layer: Layer) -> dict[str, torch.Tensor]:
    """Router and expert weights, the same on every rank (seeded), in `dtype` on the CPU."""
    experts, dim = layer.experts_per_rank * world, layer.dim
    gen = torch.Generator().manual_seed(7)
    w = {
        "router": torch.randn(experts, dim, generator=gen, dtype=torch.float64),
        "w1": torch.randn(experts, dim, HIDDEN, generator=gen, dtype=torch.float64) / dim**0.5,
        "w2": torch.randn(experts, HIDDEN, dim, generator=gen, dtype=torch.float64) / HIDDEN**0.5,
    }
    return {k: v.to(dtype) for k, v in w.items()}


def tokens(world: int, dtype: torch.dtype, layer: Layer) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, loss weights) for every rank's tokens, concatenated in rank order."""
    gen = torch.Generator().manual_seed(8)
    n = sum(tokens_per_rank(world))
    x = torch.randn(n, layer.dim, generator=gen, dtype=torch.float64)
    target = torch.randn(n, layer.dim, generator=gen, dtype=torch.float64)
    return x.to(dtype), target.to(dtype)


def expert(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.gelu(x @ w1) @ w2


def route(x: torch.Tensor, router: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k experts of each token and their weights (softmax over all experts, then top-k)."""
    probs = torch.softmax(x @ router.t(), dim=-1)
    return probs.topk(top_k, dim=-1)


def local_moe(x: torch.Tensor, w: dict[str, torch.Tensor], top_k: int) -> torch.Tensor:
    """The single-process layer: every expert here, tokens sent to their top-k experts."""
    top_w, top_e = route(x, w["router"], top_k)
    out = torch.zeros_like(x)
    for e in range(w["w1"].shape[0]):
        tok, slot = (top_e == e).nonzero(as_tuple=True)
        if tok.numel():
            y = expert(x[tok], w["w1"][e], w["w2"][e]) * top_w[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, y)
    return out


def ep_moe(env: RankEnv, x: torch.Tensor, router: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor):
    """The expert-parallel layer on this rank with all_to_all_single: `w1`, `w2` hold this rank's
    experts only."""
    world, group = env.world_size, dist.group.WORLD
    per_rank, top_k = ALL_TO_ALL.experts_per_rank, ALL_TO_ALL.top_k
    top_w, top_e = route(x, router, top_k)
    flat_e = top_e.flatten()
    order = torch.argsort(flat_e, stable=True)
    token_of = order // top_k
    per_expert = torch.bincount(flat_e, minlength=per_rank * world)
    # How many tokens each rank sends this rank, per local expert: [src, local expert].
    recv_per_expert = torch.empty_like(per_expert)
    dist.all_to_all_single(recv_per_expert, per_expert)
    recv_counts = recv_per_expert.view(world, per_rank).cpu()
    input_splits = per_expert.view(world, per_rank).sum(1).tolist()
    output_splits = recv_counts.sum(1).tolist()

    routed = funcol.all_to_all_single_autograd(x[token_of], output_splits, input_splits, group)
    # What arrived: by source rank, and within each source by (global, hence local) expert.
    pieces = routed.split(recv_counts.flatten().tolist())
    outs = [expert(piece, w1[i % per_rank], w2[i % per_rank]) for i, piece in enumerate(pieces)]
    back = funcol.all_to_all_single_autograd(torch.cat(outs), input_splits, output_splits, group)
    weighted = back * top_w.flatten()[order].unsqueeze(-1)
    return torch.zeros_like(x).index_add(0, token_of, weighted)


def _record(
    env: RankEnv, dtype: torch.dtype, layer: Layer, forward: Forward | None
) -> dict[str, torch.Tensor]:
    """Forward output and gradients of this rank's part of the layer: expert-parallel through
    `forward`, or (None) the single-process layer on the CPU over every rank's tokens."""
    world, rank = env.world_size, env.rank
    counts = tokens_per_rank(world)
    lo, hi = sum(counts[:rank]), sum(counts[: rank + 1])
    per_rank = layer.experts_per_rank
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    device = env.device if forward is not None else "cpu"
    w = {k: v.to(device).requires_grad_() for k, v in weights(world, dtype, layer).items()}
    x_all, target_all = tokens(world, dtype, layer)
    if forward is not None:
        x = x_all[lo:hi].to(device).requires_grad_()
        w1, w2 = w["w1"][mine].detach().requires_grad_(), w["w2"][mine].detach().requires_grad_()
        out = forward(env, x, w["router"], w1, w2)
        (out * target_all[lo:hi].to(device)).sum().backward()
        router_grad = w["router"].grad.clone()
        dist.all_reduce(router_grad)
        rec = {"output": out, "grad/input": x.grad, "grad/router": router_grad}
        rec.update({"grad/w1": w1.grad, "grad/w2": w2.grad})
    else:
        x = x_all.clone().requires_grad_()
        out = local_moe(x, w, layer.top_k)
        (out * target_all).sum().backward()
        rec = {"output": out[lo:hi], "grad/input": x.grad[lo:hi], "grad/router": w["router"].grad}
        rec.update({"grad/w1": w["w1"].grad[mine], "grad/w2": w["w2"].grad[mine]})
    return {k: v.detach().cpu() for k, v in rec.items()}


def _judge(env: RankEnv, layer: Layer, dtype: str, forward: Forward) -> dict:
    """Run `forward` and judge it against the single-process layer (float64 reference, the same
    dtype on the CPU as the baseline)."""
    env.phase("expert parallel forward/backward")
    got = _record(env, torch_dtype(dtype), layer, forward)
    env.phase("single-process reference")
    ref = _record(env, torch.float64, layer, None)
    base = _record(env, torch_dtype(dtype), layer, None)
    ok, worst, verdicts = judge_against(ref, got, base, dtype)
    counts = tokens_per_rank(env.world_size)
    return {
        "ok": ok,
        "metrics": {
            "tokens": float(sum(counts)),
            "experts": float(layer.experts_per_rank * env.world_size),
        },
        "diagnostics": {
            "tokens_per_rank": counts,
            "worst": worst,
            "worst_verdict": verdicts[worst].to_json() if worst else None,
            "failed": [k for k, v in verdicts.items() if not v.ok],
        },
    }


# -- torch.distributed._token_switch -------------------------------------------------------------


def _device_backend(env: RankEnv) -> str:
    """The process group's backend for this rank's device: 'nccl' from 'nccl' or from a per-device
    string such as 'cpu:gloo,cuda:nccl'."""
    if ":" not in env.backend:
        return env.backend
    per_device = dict(part.split(":", 1) for part in env.backend.split(","))
    return per_device.get(torch.device(env.device).type, env.backend)


def _implementations(module: Any) -> list[str]:
    base = getattr(module, "TokenSwitch", None)
    return sorted(
        name
        for name, obj in vars(module).items()
        if isinstance(obj, type) and base and issubclass(obj, base) and obj is not base
    )


class SwitchedLayer:
    """The top-1 layer through a TokenSwitch (a `Forward`), keeping each call's per-expert receive
    count next to what the ranks routed here."""

    def __init__(self, switch: Any, max_recv: int):
        self.switch, self.max_recv = switch, max_recv
        self.recv_counts: list[tuple[int, int]] = []  # (create_routing said, ranks routed here)

    def _routing(self, env: RankEnv, top_e: torch.Tensor) -> Any:
        counts = torch.zeros(SWITCHED.experts_per_rank, dtype=torch.int32, device=top_e.device)
        create = self.switch.create_routing
        # `layout` came with pytorch/pytorch#187784 and is then a required keyword.
        if "layout" in inspect.signature(create).parameters:
            routing = create(top_e, counts, layout="flat")
        else:
            routing = create(top_e, counts)
        # One expert per rank: a token's expert id is its destination rank.
        routed_here = torch.bincount(top_e.flatten(), minlength=env.world_size)
        dist.all_reduce(routed_here)
        self.recv_counts.append((int(counts.sum()), int(routed_here[env.rank])))
        return routing

    def __call__(
        self,
        env: RankEnv,
        x: torch.Tensor,
        router: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
    ) -> torch.Tensor:
        gate, top_e = route(x, router, SWITCHED.top_k)
        routing = self._routing(env, top_e)
        received, _, _ = self.switch.dispatch(routing, x, gate.detach().float(), self.max_recv)
        back = self.switch.combine(routing, expert(received, w1[0], w2[0]))
        return back * gate


def _token_switch(env: RankEnv) -> SwitchedLayer | str:
    """This torch's TokenSwitch for the process group, or the reason (str) to skip the case."""
    try:
        module = importlib.import_module(TOKEN_SWITCH)
    except ModuleNotFoundError as e:
        if e.name != TOKEN_SWITCH:
            raise  # the module is there but something it needs is not: an error to show
        return (
            f"torch {torch.__version__} has no {TOKEN_SWITCH} (it came later: "
            "pytorch/pytorch#178712): a gap of this torch build, not of the device"
        )
    backend = _device_backend(env)
    impl = getattr(module, TOKEN_SWITCH_IMPLS.get(backend, ""), None)
    if impl is None:
        have = ", ".join(_implementations(module)) or "none"
        raise Unsupported(f"{TOKEN_SWITCH} has no implementation for {backend} (it has: {have})")
    world, per_rank = env.world_size, max(tokens_per_rank(env.world_size))
    token_bytes = SWITCHED.dim * torch_dtype(SWITCH_DTYPE).itemsize
    try:
        switch = impl(dist.group.WORLD, world, per_rank, world * per_rank, token_bytes)
    except ImportError as e:  # e.g. TokenSwitchNCCL in a torch built without USE_NCCL_EP
        return f"{impl.__name__} cannot load in this torch build: {e}"
    return SwitchedLayer(switch, world * per_rank)


def _token_switch_case(env: RankEnv) -> dict:
    env.phase("TokenSwitch")
    layer = _token_switch(env)
    if isinstance(layer, str):
        return skipped(layer)
    out = _judge(env, SWITCHED, SWITCH_DTYPE, layer)
    wrong = [(said, want) for said, want in layer.recv_counts if said != want]
    out["diagnostics"]["recv_counts"] = layer.recv_counts
    if wrong:
        out["ok"] = False
        out["diagnostics"]["failed"].append(f"create_routing recv counts {wrong} (said, routed)")
    return out


def run_case(env: RankEnv, name: str, params: dict[str, Any], options: dict[str, Any]) -> dict:
    if params["what"] == "token_switch":
        return _token_switch_case(env)
    return _judge(env, ALL_TO_ALL, "fp32", ep_moe)
