"""moe/token_switch on 2 gloo ranks, whatever this torch has: with the module absent (skipped), with
a module that has no implementation for the backend (unsupported) or one that cannot load in this
build (skipped), and -- through a gloo stand-in for the upstream API (pytorch/pytorch#178712:
create_routing -> Routing -> dispatch / combine, autograd-aware, flat layout) installed in the
ranks -- judged like the all_to_all MoE case: right (pass), misrouting or miscounting
(fail_numerics)."""

from __future__ import annotations

import abc
import sys
import types
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from trainready.core.config import RunConfig
from trainready.core.launch import RankEnv, RankPool
from trainready.suites.dist import moe
from trainready.suites.dist import suite as dist_suite
from trainready.suites.dist.rank import run_case as real_run_case

BUDGET_S = 120.0

# -- a stand-in for torch.distributed._token_switch, on gloo --------------------------------------


@dataclass(frozen=True)
class Routing:
    handle: Any
    topk_idx: torch.Tensor
    layout: str = "flat"


class TokenSwitch(abc.ABC):
    """The upstream abstract API (the parts the case calls)."""

    @abc.abstractmethod
    def create_routing(self, topk_idx, per_expert_token_counts=None, *, layout: str) -> Routing: ...

    @abc.abstractmethod
    def dispatch(self, routing, tokens, topk_weights, max_recv_tokens=None, *, out=None): ...

    @abc.abstractmethod
    def combine(self, routing, expert_tokens, *, out=None) -> torch.Tensor: ...


@dataclass(frozen=True)
class _Plan:
    rows: torch.Tensor  # the token of each row this rank sends, grouped by destination rank
    send: list[int]  # rows to each rank
    recv: list[int]  # rows from each rank


class TokenSwitchGloo(TokenSwitch):
    """The documented flat layout on all_to_all_single: one row per (token, destination rank),
    what arrived first (by source rank), zeros after; combine sums each token's rows back."""

    def __init__(self, group, num_experts, max_dispatch_tokens_per_rank, max_recv, token_bytes):
        self.group, self.world = group, dist.get_world_size(group)
        self.local = num_experts // self.world

    def create_routing(self, topk_idx, per_expert_token_counts=None, *, layout: str) -> Routing:
        assert layout == "flat"
        dest = topk_idx // self.local
        rows = [torch.nonzero((dest == r).any(1)).flatten() for r in range(self.world)]
        send = torch.tensor([len(r) for r in rows])
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        if per_expert_token_counts is not None:
            per_expert = torch.bincount(topk_idx.flatten(), minlength=self.local * self.world)
            arrived = torch.empty_like(per_expert)
            dist.all_to_all_single(arrived, per_expert, group=self.group)
            per_expert_token_counts.copy_(arrived.view(self.world, self.local).sum(0))
        plan = _Plan(torch.cat(rows), send.tolist(), recv.tolist())
        return Routing(plan, topk_idx, layout)

    def dispatch(self, routing, tokens, topk_weights, max_recv_tokens=None, *, out=None):
        assert out is None and max_recv_tokens is not None  # the case's (autograd) form
        plan = routing.handle
        got = funcol.all_to_all_single_autograd(tokens[plan.rows], plan.recv, plan.send, self.group)
        # The case reads only the tokens; upstream also returns per-row weights and indices.
        return F.pad(got, (0, 0, 0, max_recv_tokens - got.shape[0])), None, None

    def combine(self, routing, expert_tokens, *, out=None) -> torch.Tensor:
        plan = routing.handle
        arrived = expert_tokens[: sum(plan.recv)]
        back = funcol.all_to_all_single_autograd(arrived, plan.send, plan.recv, self.group)
        n = routing.topk_idx.shape[0]
        return back.new_zeros(n, back.shape[1]).index_add(0, plan.rows, back)


class MisroutingSwitch(TokenSwitchGloo):
    """Hands every token the result of the next one."""

    def combine(self, routing, expert_tokens, *, out=None) -> torch.Tensor:
        return super().combine(routing, expert_tokens, out=out).roll(1, 0)


class MiscountingSwitch(TokenSwitchGloo):
    """Says one token more arrived than did."""

    def create_routing(self, topk_idx, per_expert_token_counts=None, *, layout: str) -> Routing:
        routing = super().create_routing(topk_idx, per_expert_token_counts, layout=layout)
        per_expert_token_counts.add_(1)
        return routing


class UnbuildableSwitch(TokenSwitchGloo):
    """What TokenSwitchNCCL does in a torch built without NCCL EP."""

    def __init__(self, *args: Any) -> None:
        raise ImportError("TokenSwitchNCCL requires PyTorch built with USE_NCCL_EP=1")


STAND_INS = (TokenSwitchGloo, MisroutingSwitch, MiscountingSwitch, UnbuildableSwitch)


def with_token_switch(
    env: RankEnv, case: dict, options: dict, module: bool, impl: str | None
) -> dict:
    """The real rank entry, with torch.distributed._token_switch replaced by the stand-ins
    (`module`) or made absent, and `impl` as the gloo backend's implementation."""
    if module:
        fake = types.ModuleType(moe.TOKEN_SWITCH)
        fake.TokenSwitch, fake.Routing = TokenSwitch, Routing
        for cls in STAND_INS:
            setattr(fake, cls.__name__, cls)
        sys.modules[moe.TOKEN_SWITCH] = fake
    else:
        sys.modules[moe.TOKEN_SWITCH] = None  # absent, whatever this torch has
    moe.TOKEN_SWITCH_IMPLS = {"gloo": impl} if impl else {"nccl": "TokenSwitchNCCL"}
    return real_run_case(env, case, options)


# -- the tests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool():
    with RankPool(2, device="cpu") as ranks:
        yield ranks


def _outcome(pool: RankPool, module: bool, impl: str | None = None):
    case = next(c for c in dist_suite.cases(RunConfig(["dist"])) if c.name == "moe/token_switch")
    args = {"case": case.to_json(), "options": {}, "module": module, "impl": impl}
    res = pool.run("tests.unit.suites.dist.test_moe:with_token_switch", args, timeout_s=BUDGET_S)
    return dist_suite.outcome_of(case, res, BUDGET_S)


@pytest.mark.slow
def test_absent_is_skipped_as_a_gap_of_the_torch_build(pool) -> None:
    out = _outcome(pool, module=False)
    assert out.status == "skipped"
    assert out.diagnostics["reason"].startswith(
        f"torch {torch.__version__} has no torch.distributed._token_switch"
    )
    assert "not of the device" in out.diagnostics["reason"]


@pytest.mark.slow
def test_no_implementation_for_the_backend_is_unsupported(pool) -> None:
    out = _outcome(pool, module=True)
    assert out.status == "unsupported"
    assert out.diagnostics["reason"] == (
        "torch.distributed._token_switch has no implementation for gloo (it has: "
        "MiscountingSwitch, MisroutingSwitch, TokenSwitchGloo, UnbuildableSwitch)"
    )


@pytest.mark.slow
def test_an_implementation_this_build_cannot_load_is_skipped(pool) -> None:
    out = _outcome(pool, module=True, impl="UnbuildableSwitch")
    assert out.status == "skipped"
    assert out.diagnostics["reason"] == (
        "UnbuildableSwitch cannot load in this torch build: "
        "TokenSwitchNCCL requires PyTorch built with USE_NCCL_EP=1"
    )


@pytest.mark.slow
def test_a_working_token_switch_matches_the_local_moe_layer(pool) -> None:
    out = _outcome(pool, module=True, impl="TokenSwitchGloo")
    assert out.status == "pass", out.diagnostics
    assert out.metrics["experts"] == 2.0 and out.metrics["tokens"] == 5 + 8
    for diag in out.diagnostics["ranks"].values():
        said, routed = diag["recv_counts"][0]
        assert said == routed > 0  # the switch ran, and every token found its rank
        assert diag["worst_verdict"]["ok"]


@pytest.mark.slow
def test_a_misrouting_or_miscounting_switch_is_caught(pool) -> None:
    wrong = _outcome(pool, module=True, impl="MisroutingSwitch")
    assert wrong.status == "fail_numerics"
    assert "output" in wrong.diagnostics["ranks"][0]["failed"]
    counted = _outcome(pool, module=True, impl="MiscountingSwitch")
    assert counted.status == "fail_numerics"
    failed = counted.diagnostics["ranks"][0]["failed"]
    assert any(f.startswith("create_routing recv counts") for f in failed)


def test_the_backend_for_the_device_in_a_per_device_string() -> None:
    env = RankEnv(0, 2, 0, "cuda:0", "cpu:gloo,cuda:nccl")
    assert moe._device_backend(env) == "nccl"
    assert moe._device_backend(RankEnv(0, 2, 0, "cpu", "gloo")) == "gloo"
