"""Small seeded models and data the training-style dist cases share, and how their results are judged.

Every rank builds the same model from the same seed, and the same global batch; rank r trains on
its slice. The single-process reference is the same model trained on the whole global batch, once
in float64 (the reference) and once in the case dtype (the CPU baseline), on the CPU, computed by
every rank itself. Each distributed tensor is judged by the numerics rule (`probes.numerics.judge_
many`, rule `noise_vs_single_process`): its distance from float64 against the noise the single
process makes on that tensor at the same dtype -- the same mathematics with the batch reduced in
one process instead of across ranks, an honest computation that no collective touches, so a
collective's fault cannot raise its own bar.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainready.device import step_boundary
from trainready.probes.numerics import Verdict, judge_many, noise_rmse

SEED = 0
DIM, HIDDEN, BLOCKS = 16, 32, 2
LOCAL_BATCH = 4
LR = 0.1


class Block(nn.Module):
    def __init__(self, dim: int = DIM, hidden: int = HIDDEN):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(x)))


class TinyNet(nn.Module):
    """Residual MLP blocks and a head: enough structure for DDP buckets and per-block FSDP2."""

    def __init__(self, dim: int = DIM, blocks: int = BLOCKS):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(blocks))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x).squeeze(-1)


def tiny_net(dtype: torch.dtype = torch.float32, device: str = "cpu") -> TinyNet:
    torch.manual_seed(SEED)
    return TinyNet().to(device=device, dtype=dtype)


def global_batch(world: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of the whole batch at `step`, in float64 on the CPU."""
    gen = torch.Generator().manual_seed(SEED + 1000 + step)
    x = torch.randn(world * LOCAL_BATCH, DIM, generator=gen, dtype=torch.float64)
    y = torch.randn(world * LOCAL_BATCH, generator=gen, dtype=torch.float64)
    return x, y


def local_slice(t: torch.Tensor, rank: int) -> torch.Tensor:
    return t[rank * LOCAL_BATCH : (rank + 1) * LOCAL_BATCH]


def loss_fn(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(pred.float() if pred.dtype != torch.float64 else pred, target)


Record = dict[str, torch.Tensor]


def reference_run(
    world: int, steps: int, dtype: torch.dtype, compute: torch.dtype | None = None
) -> Record:
    """The single-process run: `steps` SGD steps on the global batch, on the CPU, parameters in
    `dtype`; with `compute`, forward and backward run on a copy cast to it (mixed precision, as
    FSDP2's param_dtype does) and the gradients update the `dtype` parameters.
    Returns {"step{i}/loss", "step{i}/grad/{name}", "final/{name}"}."""
    master = tiny_net(dtype)
    out: Record = {}
    for step in range(steps):
        model = master if compute in (None, dtype) else copy.deepcopy(master).to(compute)
        x, y = global_batch(world, step)
        loss = loss_fn(model(x.to(compute or dtype)), y.to(loss_dtype(dtype)))
        loss.backward()
        out[f"step{step}/loss"] = loss.detach()
        with torch.no_grad():
            for (name, p), q in zip(master.named_parameters(), model.parameters(), strict=True):
                grad = q.grad.to(dtype)
                out[f"step{step}/grad/{name}"] = grad.clone()
                p.add_(grad, alpha=-LR)
                q.grad = None
    for name, p in master.named_parameters():
        out[f"final/{name}"] = p.detach().clone()
    return out


def loss_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def judge(got: Record, world: int, steps: int, dtype: str, compute: torch.dtype) -> dict:
    """Compare a distributed run's record with the single process: {"ok", "worst", "verdicts"}.
    The baseline is the single process with fp32 parameters computing in `compute`."""
    ref64 = reference_run(world, steps, torch.float64)
    base = reference_run(world, steps, torch.float32, compute)
    missing = sorted(set(ref64) - set(got))
    if missing:
        return {"ok": False, "worst": None, "error": f"no result for {missing[:5]}", "verdicts": {}}
    ok, worst, verdicts = judge_against(ref64, got, base, dtype)
    return {"ok": ok, "worst": worst, "verdicts": {k: _short(v) for k, v in verdicts.items()}}


NOISE_RULE = "noise_vs_single_process"


def judge_against(
    ref64: Record, got: Record, base: Record, dtype: str
) -> tuple[bool, str | None, dict[str, Verdict]]:
    """Every tensor of `ref64` judged in `got`, its noise the same-dtype single process's
    (`base`) distance from float64 -> (all passed, the worst tensor, verdict per tensor)."""
    named = {k: (ref64[k], got[k], noise_rmse(ref64[k], base[k])) for k in ref64}
    return judge_many(named, dtype, NOISE_RULE)


def _short(v: Verdict) -> dict:
    keys = ("ok", "rule", "max_abs", "rmse", "threshold", "noise_rmse", "ref_rms")
    return {k: v for k, v in v.to_json().items() if k in keys}


def train(
    model: nn.Module,
    rank: int,
    world: int,
    steps: int,
    device: str,
    *,
    in_dtype: torch.dtype,
    full: Callable[[torch.Tensor], torch.Tensor],
    loss_avg: Callable[[torch.Tensor], torch.Tensor],
) -> Record:
    """`steps` SGD steps of a wrapped model on this rank's slice; the record of what it saw.

    `full(t)` turns a parameter or gradient into the whole unsharded tensor (identity for DDP,
    `full_tensor()` for DTensors); `loss_avg` averages the local loss over ranks, so the record's
    loss is the global-batch loss the single process computes.
    """
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    out: Record = {}
    for step in range(steps):
        x, y = global_batch(world, step)
        xs = local_slice(x, rank).to(device=device, dtype=in_dtype)
        ys = local_slice(y, rank).to(device=device, dtype=torch.float32)
        loss = loss_fn(model(xs), ys)
        loss.backward()
        step_boundary(device)  # a lazy backend (xla) runs forward and backward before the reads
        out[f"step{step}/loss"] = loss_avg(loss.detach()).cpu()
        for name, p in model.named_parameters():
            out[f"step{step}/grad/{_plain(name)}"] = full(p.grad).detach().cpu()
        opt.step()
        opt.zero_grad()
        step_boundary(device)
    for name, p in model.named_parameters():
        out[f"final/{_plain(name)}"] = full(p).detach().cpu()
    return out


def _plain(name: str) -> str:
    """A wrapped model's parameter name as the plain model names it."""
    for prefix in ("module.", "_orig_mod."):
        name = name.replace(prefix, "")
    return name.replace("_checkpoint_wrapped_module.", "")
