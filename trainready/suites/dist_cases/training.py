"""DDP and FSDP2 on one rank: a few SGD steps of a small model, against the single process.

- `ddp`: `DistributedDataParallel`; losses, every gradient and the final parameters.
- `fsdp2`: `fully_shard` on every block and the root; gradients and parameters gathered with
  `full_tensor()`. `mp: "bf16"` adds `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`,
  judged at bf16 against a single process computing in bf16; `compile: true` wraps the sharded
  model in `torch.compile` (backend from the run's `compile_backend`, default inductor).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from trainready.launch import RankEnv
from trainready.suites.dist_cases import models

STEPS = 3


def _avg(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _ddp(env: RankEnv, model: torch.nn.Module) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    on_cpu = torch.device(env.device).type == "cpu"
    return DistributedDataParallel(model, device_ids=None if on_cpu else [torch.device(env.device)])


def _fsdp2(model: torch.nn.Module, mp: str | None) -> torch.nn.Module:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if mp == "bf16"
        else MixedPrecisionPolicy()
    )
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def run_case(env: RankEnv, name: str, params: dict[str, Any], options: dict[str, Any]) -> dict:
    family, mp = params["family"], params.get("mp")
    model = models.tiny_net(torch.float32, env.device)
    wrapped = _ddp(env, model) if family == "ddp" else _fsdp2(model, mp)
    if params.get("compile"):
        wrapped = torch.compile(wrapped, backend=options.get("compile_backend") or "inductor")
    env.phase("train (first step compiles)" if params.get("compile") else "train")
    record = models.train(
        wrapped,
        env.rank,
        env.world_size,
        STEPS,
        env.device,
        in_dtype=torch.float32,
        full=_full,
        loss_avg=_avg,
    )
    dtype, baseline = ("bf16", torch.bfloat16) if mp == "bf16" else ("fp32", torch.float32)
    env.phase("single-process reference")
    verdict = models.judge(record, env.world_size, STEPS, dtype, baseline)
    metrics = {"steps": float(STEPS), "tensors": float(len(verdict["verdicts"]))}
    worst = verdict["verdicts"].get(verdict["worst"]) if verdict["worst"] else None
    if worst:
        metrics["worst_max_abs"] = float(worst.get("max_abs", 0.0))
    return {
        "ok": verdict["ok"],
        "metrics": metrics,
        "diagnostics": {
            "worst": verdict["worst"],
            "worst_verdict": worst,
            "failed": [k for k, v in verdict["verdicts"].items() if not v["ok"]][:20],
            **({"error": verdict["error"]} if "error" in verdict else {}),
        },
    }
