"""Distributed checkpoint on one rank: save an FSDP2 model and its optimizer, load them into a
differently initialised one, and compare bitwise.

`dcp/fsdp2`: the small model, sharded with `fully_shard`, takes one AdamW step (so the optimizer
has state), then `torch.distributed.checkpoint.save` writes model and optimizer state dicts
(`get_state_dict`) to a directory rank 0 creates. A second model, seeded differently and sharded
the same way, loads them (`load` + `set_state_dict`). Every local shard of every parameter and
optimizer-state tensor must then equal the saved one bit for bit.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from trainready.core.launch import RankEnv
from trainready.suites.dist import models


def _sharded(env: RankEnv, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = models.tiny_net(torch.float32, env.device)
    if seed != models.SEED:
        torch.manual_seed(seed)
        for p in model.parameters():
            torch.nn.init.normal_(p)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _step(env: RankEnv, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    x, y = models.global_batch(env.world_size, 0)
    xs = models.local_slice(x, env.rank).float().to(env.device)
    ys = models.local_slice(y, env.rank).float().to(env.device)
    models.loss_fn(model(xs), ys).backward()
    opt.step()
    opt.zero_grad()


def _local_tensors(tree: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in a (nested) state dict, by path, as this rank's local shard on the CPU."""
    out: dict[str, torch.Tensor] = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_local_tensors(v, f"{prefix}{k}/"))
    elif isinstance(tree, torch.Tensor):
        local = tree.to_local() if isinstance(tree, DTensor) else tree
        out[prefix.rstrip("/")] = local.detach().cpu().clone()
    return out


def _shared_dir(env: RankEnv) -> str:
    path = [tempfile.mkdtemp(prefix="trainready-dcp-") if env.rank == 0 else ""]
    dist.broadcast_object_list(path, src=0)
    return path[0]


def run_case(env: RankEnv, name: str, params: dict[str, Any], options: dict[str, Any]) -> dict:
    env.phase("train a step")
    model, opt = _sharded(env, models.SEED)
    _step(env, model, opt)
    msd, osd = get_state_dict(model, opt)
    saved = _local_tensors({"model": msd, "optim": osd})
    path = _shared_dir(env)
    try:
        env.phase("save")
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
        other, other_opt = _sharded(env, models.SEED + 1)
        _step(env, other, other_opt)  # so its optimizer has state of the same structure
        msd2, osd2 = get_state_dict(other, other_opt)
        before = _local_tensors({"model": msd2})
        state = {"model": msd2, "optim": osd2}
        env.phase("load")
        dcp.load(state, checkpoint_id=path)
        set_state_dict(
            other, other_opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        msd3, osd3 = get_state_dict(other, other_opt)
        loaded = _local_tensors({"model": msd3, "optim": osd3})
    finally:
        dist.barrier()
        if env.rank == 0:
            shutil.rmtree(path, ignore_errors=True)
    # The second model must have started elsewhere, or a load that does nothing would pass.
    differs_before = sum(not torch.equal(before[k], saved[k]) for k in before)
    mismatched = sorted(k for k in saved if k not in loaded or not torch.equal(saved[k], loaded[k]))
    return {
        "ok": not mismatched and differs_before > 0,
        "metrics": {
            "tensors": float(len(saved)),
            "bytes": float(sum(t.numel() * t.element_size() for t in saved.values())),
        },
        "diagnostics": {
            "rule": "bitwise",
            "mismatched": mismatched[:20],
            "differed_before_load": differs_before,
        },
    }
