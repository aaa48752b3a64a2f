"""DTensor and tensor parallelism on one rank, against the same tensors on a single process.

- `dtensor/distribute`: `distribute_tensor` with Shard(0), Shard(1), Replicate; each local shard
  and the `full_tensor()` against the full tensor.
- `dtensor/redistribute`: Shard(0)->Replicate, Replicate->Shard(1), Shard(0)->Shard(1),
  Partial->Replicate, Partial->Shard(0); `full_tensor()` (and the local shard) against the answer.
  Replicate->Partial too, by the routes torch makes public (its `redistribute` refuses a Partial
  target as "for internal use only"): `distribute_tensor(t, mesh, [Partial()])`, whose local
  values must be t / n, and `Partial + Replicate`, where sharding propagation turns the
  Replicate operand into a Partial one; each then back to Replicate.
- `dtensor/shard_to_partial`: Shard(0)->Partial with `redistribute`, checked by redistributing
  back to Replicate. Where torch refuses the move (torch 2.13: internal use only, and its planner
  has no such step) the case is `skipped` with torch's message: a gap of torch, not the device.
- `dtensor/matmul`: Shard(0) @ Replicate, Replicate @ Shard(1), Shard(1) @ Shard(0) (a Partial
  result); the product against the full one.
These use small integers (multiples of the world size where a Partial splits them by n), so every
value and sum is exact in fp32: the checks are bitwise.
- `tp/colwise_rowwise`: `parallelize_module` with ColwiseParallel (fc1) and RowwiseParallel (fc2)
  against the unsharded module: output and every gradient, judged by the numerics rule at fp32
  (noise: the unsharded module's fp32 run, `models.judge_against`).
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from trainready.core.launch import RankEnv
from trainready.suites.dist.rank import skipped
from trainready.suites.dist.models import judge_against

ROWS, COLS, INNER = 8, 12, 16
# How torch says that it, not the device, does not redistribute to a Partial placement.
_TORCH_REFUSES_PARTIAL = re.compile(r"for internal use only|not supported yet")


def _ints(*shape: int, salt: int = 0) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 5 + salt * 3 + i // 7) % 9 - 4).to(torch.float32).reshape(shape)


def _mesh(env: RankEnv):
    return init_device_mesh(torch.device(env.device).type, (env.world_size,))


class Checks:
    """Named bitwise checks of one rank."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.count = 0

    def equal(self, name: str, got: torch.Tensor, want: torch.Tensor) -> None:
        self.count += 1
        got = got.detach().cpu()
        if got.shape != want.shape or not torch.equal(got, want):
            self.failed.append(name)

    def result(self) -> dict:
        return {
            "ok": not self.failed,
            "metrics": {"checks": float(self.count)},
            "diagnostics": {"rule": "bitwise", "failed": self.failed},
        }


def _distribute(env: RankEnv, checks: Checks) -> None:
    mesh, full = _mesh(env), _ints(ROWS * env.world_size, COLS * env.world_size)
    for placement, dim in ((Shard(0), 0), (Shard(1), 1), (Replicate(), None)):
        env.phase(f"distribute {placement}")
        d = distribute_tensor(full.to(env.device), mesh, [placement])
        want = full if dim is None else full.chunk(env.world_size, dim)[env.rank]
        checks.equal(f"{placement}/local", d.to_local(), want)
        checks.equal(f"{placement}/full", d.full_tensor(), full)


def _redistribute(env: RankEnv, checks: Checks) -> None:
    mesh, w = _mesh(env), env.world_size
    full = _ints(ROWS * w, COLS * w)
    moves = ((Shard(0), Replicate()), (Replicate(), Shard(1)), (Shard(0), Shard(1)))
    for src, dst in moves:
        env.phase(f"{src} -> {dst}")
        d = distribute_tensor(full.to(env.device), mesh, [src]).redistribute(mesh, [dst])
        checks.equal(f"{src}->{dst}/full", d.full_tensor(), full)
        want = full if isinstance(dst, Replicate) else full.chunk(w, dst.dim)[env.rank]
        checks.equal(f"{src}->{dst}/local", d.to_local(), want)
    # Partial: each rank holds an addend; the sum over ranks is the tensor.
    parts = [_ints(ROWS * w, COLS, salt=r) for r in range(w)]
    total = torch.stack(parts).sum(0)
    for dst in (Replicate(), Shard(0)):
        env.phase(f"Partial() -> {dst}")
        d = _partial(env, parts[env.rank]).redistribute(mesh, [dst])
        want = total if isinstance(dst, Replicate) else total.chunk(w, 0)[env.rank]
        checks.equal(f"Partial->{dst}/local", d.to_local(), want)
        checks.equal(f"Partial->{dst}/full", d.full_tensor(), total)
    _replicate_to_partial(env, checks, parts[env.rank], total)


def _partial(env: RankEnv, local: torch.Tensor) -> DTensor:
    return DTensor.from_local(local.to(env.device), _mesh(env), [Partial()], run_check=False)


def _replicate_to_partial(
    env: RankEnv, checks: Checks, part: torch.Tensor, total: torch.Tensor
) -> None:
    """Replicate -> Partial(sum) by torch's public routes; a sum split is v / n on every rank."""
    mesh, w = _mesh(env), env.world_size
    full = _ints(*part.shape, salt=5) * w  # multiples of w: v / w is exact
    env.phase("distribute_tensor(Partial())")
    d = distribute_tensor(full.to(env.device), mesh, [Partial()])
    checks.equal("Replicate->Partial/local", d.to_local(), full / w)
    back = d.redistribute(mesh, [Replicate()]).to_local()
    checks.equal("Replicate->Partial->Replicate", back, full)
    env.phase("Partial + Replicate")
    out = _partial(env, part) + distribute_tensor(full.to(env.device), mesh, [Replicate()])
    # Partial output: the Replicate operand went Partial (v / n added to each addend).
    to_partial = out.placements[0].is_partial()
    want = part + full / w if to_partial else total + full
    checks.equal(f"Partial+Replicate->{out.placements[0]}/local", out.to_local(), want)
    checks.equal("Partial+Replicate/full", out.full_tensor(), total + full)


def _shard_to_partial(env: RankEnv, checks: Checks) -> str | None:
    """Shard(0) -> Partial -> Replicate; the reason to skip when torch refuses the move."""
    mesh, w = _mesh(env), env.world_size
    full = _ints(ROWS * w, COLS, salt=6) * w
    d = distribute_tensor(full.to(env.device), mesh, [Shard(0)])
    env.phase("Shard(0) -> Partial()")
    try:
        p = d.redistribute(mesh, [Partial()])
    except RuntimeError as e:
        if _TORCH_REFUSES_PARTIAL.search(str(e)):
            return f"torch {torch.__version__} does not redistribute Shard -> Partial: {e}"
        raise
    back = p.redistribute(mesh, [Replicate()]).to_local()
    checks.equal("Shard(0)->Partial->Replicate", back, full)
    return None


def _matmul(env: RankEnv, checks: Checks) -> None:
    mesh, w = _mesh(env), env.world_size
    a, b = _ints(ROWS * w, INNER * w, salt=1), _ints(INNER * w, COLS * w, salt=2)
    want = a @ b
    for pa, pb in ((Shard(0), Replicate()), (Replicate(), Shard(1)), (Shard(1), Shard(0))):
        env.phase(f"{pa} @ {pb}")
        da = distribute_tensor(a.to(env.device), mesh, [pa])
        db = distribute_tensor(b.to(env.device), mesh, [pb])
        out = da @ db
        checks.equal(f"{pa}@{pb}->{out.placements[0]}", out.full_tensor(), want)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def _mlp(dim: int, hidden: int, dtype: torch.dtype, device: str = "cpu") -> MLP:
    torch.manual_seed(0)
    return MLP(dim, hidden).to(device=device, dtype=dtype)


def _tp_record(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    out = model(x)
    out.square().mean().backward()
    full = {"output": out}
    for name, p in model.named_parameters():
        g = p.grad
        full[f"grad/{name}"] = g.full_tensor() if isinstance(g, DTensor) else g
    full["grad/input"] = x.grad
    return {k: v.detach().cpu() for k, v in full.items()}


def _tensor_parallel(env: RankEnv) -> dict:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    dim, hidden = 16, 16 * env.world_size
    gen = torch.Generator().manual_seed(1)
    x64 = torch.randn(6, dim, generator=gen, dtype=torch.float64)
    env.phase("parallelize_module")
    model = parallelize_module(
        _mlp(dim, hidden, torch.float32, env.device),
        _mesh(env),
        {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()},
    )
    env.phase("forward/backward")
    got = _tp_record(model, x64.float().to(env.device).requires_grad_())
    ref = _tp_record(_mlp(dim, hidden, torch.float64), x64.clone().requires_grad_())
    base = _tp_record(_mlp(dim, hidden, torch.float32), x64.float().requires_grad_())
    ok, worst, verdicts = judge_against(ref, got, base, "fp32")
    return {
        "ok": ok,
        "metrics": {"tensors": float(len(verdicts))},
        "diagnostics": {
            "worst": worst,
            "worst_verdict": verdicts[worst].to_json() if worst else None,
            "failed": [k for k, v in verdicts.items() if not v.ok],
        },
    }


# what -> the checks of that case; one that returns a reason is skipped for it.
LAYOUT_CHECKS = {
    "distribute": _distribute,
    "redistribute": _redistribute,
    "shard_to_partial": _shard_to_partial,
    "matmul": _matmul,
}


def run_case(env: RankEnv, name: str, params: dict[str, Any], options: dict[str, Any]) -> dict:
    if params["family"] == "tp":
        return _tensor_parallel(env)
    checks = Checks()
    reason = LAYOUT_CHECKS[params["what"]](env, checks)
    return skipped(reason) if reason else checks.result()
