"""DDP and FSDP2 on one rank: a few SGD steps of a small model, against the single process.

- `ddp`: `DistributedDataParallel`; losses, every gradient and the final parameters.
- `fsdp2`: `fully_shard` on every block and the root; gradients and parameters gathered with
  `full_tensor()`. `mp: "bf16"` adds `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`,
  judged at bf16 against a single process computing in bf16; `compile: true` wraps the sharded
  model in `torch.compile` (backend from the run's `compile_backend`, default the device's), with or
  without the bf16 policy. A compiled case records what dynamo did (graphs, frames, graph breaks,
  recompiles, compile time: the compile probe) and is `fail_run` when it compiled no graph at all,
  since it would then have tested eager FSDP2 under another name.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from trainready.core.launch import RankEnv
from trainready.device import default_compile_backend
from trainready.probes.compile import CompileProbe, CompileReport
from trainready.suites.dist import models

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


def _train(env: RankEnv, model: torch.nn.Module) -> models.Record:
    return models.train(
        model,
        env.rank,
        env.world_size,
        STEPS,
        env.device,
        in_dtype=torch.float32,
        full=_full,
        loss_avg=_avg,
    )


def _train_compiled(
    env: RankEnv, model: torch.nn.Module, backend: str
) -> tuple[models.Record, CompileReport]:
    """Train `torch.compile(model)`; also what dynamo did, which must include a graph."""
    # The ranks outlive the case: forget frames earlier cases compiled, so this one compiles (and
    # counts) its own instead of meeting their guards.
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    with CompileProbe(env.device) as probe:
        record = _train(env, compiled)
    report = probe.report
    if report.graphs == 0:
        raise RuntimeError(
            f"torch.compile ({backend}) compiled no graph: {report.frames} frames, "
            f"{report.eager_frames} left to eager, breaks {report.break_reasons}"
        )
    return record, report


def run_case(env: RankEnv, name: str, params: dict[str, Any], options: dict[str, Any]) -> dict:
    family, mp = params["family"], params.get("mp")
    model = models.tiny_net(torch.float32, env.device)
    wrapped = _ddp(env, model) if family == "ddp" else _fsdp2(model, mp)
    compiled: CompileReport | None = None
    if params.get("compile"):
        env.phase("train (first step compiles)")
        backend = options.get("compile_backend") or default_compile_backend(env.device)
        record, compiled = _train_compiled(env, wrapped, backend)
    else:
        env.phase("train")
        record = _train(env, wrapped)
    dtype, baseline = ("bf16", torch.bfloat16) if mp == "bf16" else ("fp32", torch.float32)
    env.phase("single-process reference")
    verdict = models.judge(record, env.world_size, STEPS, dtype, baseline)
    metrics = {"steps": float(STEPS), "tensors": float(len(verdict["verdicts"]))}
    worst = verdict["verdicts"].get(verdict["worst"]) if verdict["worst"] else None
    if worst:
        metrics["worst_max_abs"] = float(worst.get("max_abs", 0.0))
    if compiled is not None:
        metrics.update(compiled.metrics(), frames=float(compiled.frames))
    return {
        "ok": verdict["ok"],
        "metrics": metrics,
        "diagnostics": {
            "worst": verdict["worst"],
            "worst_verdict": worst,
            "failed": [k for k, v in verdict["verdicts"].items() if not v["ok"]][:20],
            **({"compile": compiled.to_json()} if compiled is not None else {}),
            **({"error": verdict["error"]} if "error" in verdict else {}),
        },
    }
