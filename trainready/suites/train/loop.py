"""A training loop as TorchTitan runs it, timed the way a researcher lives it.

One process (or one rank of a data-parallel group) trains a Qwen3 model on synthetic tokens:
AdamW (TorchTitan's defaults: lr 8e-4, betas 0.9/0.95, weight decay 0.1, eps 1e-8) with the
gradient norm clipped to 1; bf16 as autocast over fp32 parameters (TorchTitan on one device), or as
bf16 parameters with fp32 master weights and optimizer state; optional activation checkpointing of
every block; compile per block (TorchTitan's way) or of the whole model; and, on several ranks,
FSDP2 (`fully_shard` of every block, then the root), with bf16 parameters through FSDP's mixed
precision policy.

It measures two clocks:
- the first step: from the model on the device (built, initialised, synchronised) to the first
  step's loss read back after its optimizer update; so it carries the setup (checkpoint and
  compile wrappers, sharding, optimizer) and every compile, split into setup, forward, backward
  and optimizer (synchronised between them). Process start-up is not on this clock, in either
  mode: torch and torch._dynamo (which the compile probe needs) are imported before it starts;
  the train suite records the whole process's time apart (`process_s`);
- steady steps: every later step, timed on the device (events where the backend has them): the
  spec's `warmup` ones, then as many as the adaptive sampler asks (`steady_sampler`: at least
  the planned ones, then more until their median is within ±5% or `timing_s` has run).

Around the steady steps it reads the drift reference (`device.reference`: a fixed GEMM), after the
first step (off its clock) and after the last (`reference_flops`): how fast the machine ran for
this process, which the train suite compares across its processes and with the peak's calibration.
A reading whose samples never agreed is no speed (None) and is counted in `reference_unstable`.

MoE sizes dispatch routed (each token through its k experts only, `models.moe`), so the
FLOPs per token (active parameters only) are the FLOPs the step does; the record says which
grouped GEMM ran (`moe_dispatch`).

`train(spec)` returns a JSON-able record (losses of every step included). `python -m
trainready.suites.train.loop SPEC.json OUT.json` runs one in a fresh process, which is how the train suite
gets cold and warm compile caches; `rank_train` is the same for `trainready.core.launch` ranks.

Synthetic data: every sequence is an arithmetic progression modulo the vocabulary with a random
start and stride, drawn on the CPU from a seed and the step. The next token follows from the last
two, so there is something to learn (random tokens would pin the loss at log(vocab)), and the
global batch is the same whatever the number of ranks (each rank takes its slice).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainready.core.config import ConfigError, check_choice
from trainready.device import (
    Timer,
    autocast,
    device_type,
    memory_stats,
    read_reference,
    reference_workload,
    reset_peak_memory,
    step_boundary,
    synchronize,
)
from trainready.metrics.flops import training_flops_per_token
from trainready.metrics.sampler import Rule, Sampler
from trainready.models.moe import implementation as moe_implementation
from trainready.models.qwen3 import Qwen3, num_params, qwen3_config
from trainready.probes import ties
from trainready.probes.compile import CompileProbe, cache_counts
from trainready.probes.ops import OpsProbe
from trainready.probes.timing import agree_over_ranks

PRECISIONS = ("autocast", "bf16_params")
COMPILE_MODES = ("none", "blocks", "model")
TRAIN_DTYPES = ("fp32", "bf16")

LR = 8e-4
BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1
EPS = 1e-8
MAX_GRAD_NORM = 1.0

# Compile time by phase, as torch records it (torch._dynamo.utils.compilation_time_metrics): the
# forward graph's backend compile (run inside Dynamo's frame compile), the backward graph's
# (run at the first backward) and, within both, Inductor's wait for kernel compilation.
COMPILE_PHASES = {
    "dynamo_s": "_compile.compile_inner",
    "backend_forward_s": "compile_fx.<locals>.fw_compiler_base",
    "backend_backward_s": "compile_fx.<locals>.bw_compiler",
    "kernel_compile_wait_s": "async_compile.wait",
}


@dataclass(frozen=True)
class TrainSpec:
    """What one training run does. JSON-able: it crosses process boundaries."""

    device: str = "cpu"
    model: str = "debug"  # a Qwen3 size (trainready.models.qwen3.qwen3_sizes)
    model_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. mlp_activation="gelu"
    seq_len: int = 64
    batch_size: int = 4  # global: split evenly over the ranks
    steps: int = 8
    dtype: str = "bf16"
    precision: str = "autocast"  # with dtype bf16: "autocast" or "bf16_params"
    compile: str = "none"  # "none" (eager), "blocks" (each transformer block), "model"
    compile_backend: str = "inductor"
    activation_checkpointing: bool = False
    lr: float = LR
    seed: int = 0
    # Steady-step sampling (`metrics.sampler`): the first `warmup` timed steps are not samples;
    # past the planned `steps`, steady steps go on until their median's 95% interval is within
    # ±5% or `timing_s` seconds of steady steps have run (0: exactly the planned steps).
    warmup: int = 0
    timing_s: float = 0.0

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, TRAIN_DTYPES)
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("compile", self.compile, COMPILE_MODES)
        for name in ("seq_len", "batch_size", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.steps < 2:
            raise ConfigError(
                f"steps must be >= 2 (a first step and a steady one), got {self.steps}"
            )
        if not 0 <= self.warmup <= self.steps - 2 or not 0 <= self.timing_s < math.inf:
            raise ConfigError(
                f"warmup must leave a steady step and timing_s be >= 0, got {self.warmup}, "
                f"{self.timing_s}"
            )
        qwen3_config(self.model, **self.model_overrides)  # a bad size or field fails here

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrainSpec:
        return cls(**d)


# --- data ------------------------------------------------------------------------------------------


def synthetic_tokens(seed: int, step: int, batch: int, seq_len: int, vocab: int) -> torch.Tensor:
    """[batch, seq_len + 1] int64 on the CPU: arithmetic progressions modulo `vocab`."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    start = torch.randint(vocab, (batch, 1), generator=gen)
    stride = torch.randint(1, min(vocab, 17), (batch, 1), generator=gen)
    return (start + stride * torch.arange(seq_len + 1)) % vocab


def rank_slice(tokens: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    if tokens.shape[0] % world:
        raise ConfigError(f"batch size {tokens.shape[0]} does not split over {world} ranks")
    per_rank = tokens.shape[0] // world
    return tokens[rank * per_rank : (rank + 1) * per_rank]


# --- model preparation (TorchTitan's order: activation checkpointing, compile, FSDP) ---------------


def build_model(spec: TrainSpec, device: str) -> tuple[Qwen3, list[tuple[str, ...]], str | None]:
    """The model initialised from the seed (drawn on the CPU, so every device and rank agrees),
    moved to the device as a user moves it; the tied parameters that move broke apart; and
    where it broke any, None if the model returned is a fresh one moved with its ties kept (the
    model built, which the process then trains and times: `ties.move_as_built`), else why not
    (the untied model returned)."""

    def built() -> Qwen3:
        model = Qwen3(qwen3_config(spec.model, **spec.model_overrides))
        model.init_weights(seed=spec.seed)
        if spec.dtype == "bf16" and spec.precision == "bf16_params" and not _distributed():
            model = model.to(torch.bfloat16)
        return model

    return ties.move_as_built(built, device)


def apply_activation_checkpointing(model: Qwen3) -> None:
    """Recompute each block's activations in backward (TorchTitan's full AC)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for i, block in enumerate(model.layers):
        model.layers[i] = checkpoint_wrapper(block, preserve_rng_state=False)


def compile_blocks(model: Qwen3, backend: str) -> None:
    """Compile each transformer block as its own graph (fullgraph, as TorchTitan does): the
    blocks share one graph's code, and the embedding, final norm and output stay eager."""
    for i, block in enumerate(model.layers):
        model.layers[i] = torch.compile(block, backend=backend, fullgraph=True)


def apply_fsdp(model: Qwen3, spec: TrainSpec, device: str) -> None:
    """FSDP2 over all ranks: each block its own unit, then the root (embeddings, norm, output)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device_type(device), (dist.get_world_size(),))
    mp = None
    if spec.dtype == "bf16" and spec.precision == "bf16_params":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs = {"mesh": mesh, **({"mp_policy": mp} if mp else {})}
    for block in model.layers:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)


class Fp32Master:
    """bf16 parameters for compute; fp32 copies that AdamW updates (so its state is fp32 too)."""

    def __init__(self, params: list[nn.Parameter]):
        self.params = params
        self.master = [nn.Parameter(p.detach().float().clone()) for p in params]

    def load_grads(self) -> None:
        for p, m in zip(self.params, self.master, strict=True):
            m.grad = None if p.grad is None else p.grad.float()

    @torch.no_grad()
    def store(self) -> None:
        for p, m in zip(self.params, self.master, strict=True):
            p.copy_(m)


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


# --- the step ------------------------------------------------------------------------------------


@dataclass
class Step:
    """One training step's callables, so the first step can be timed part by part."""

    forward: Callable[[torch.Tensor], torch.Tensor]  # tokens -> loss
    backward: Callable[[torch.Tensor], None]
    update: Callable[[], None]

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        loss = self.forward(tokens)
        self.backward(loss)
        self.update()
        return loss.detach()


def _autocast(spec: TrainSpec, device: str) -> contextlib.AbstractContextManager:
    if spec.dtype == "bf16" and spec.precision == "autocast":
        return autocast(device, "bf16")
    return contextlib.nullcontext()


def make_step(model: nn.Module, spec: TrainSpec, device: str) -> Step:
    params = [p for p in model.parameters() if p.requires_grad]
    master = None
    if spec.dtype == "bf16" and spec.precision == "bf16_params" and not _distributed():
        master = Fp32Master(params)
    optimizer = torch.optim.AdamW(
        master.master if master else params,
        lr=spec.lr,
        betas=BETAS,
        weight_decay=WEIGHT_DECAY,
        eps=EPS,
    )
    aux_loss = getattr(model, "aux_loss", None)
    is_moe = bool(getattr(getattr(model, "config", None), "is_moe", False))

    def forward(tokens: torch.Tensor) -> torch.Tensor:
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        with _autocast(spec, device):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
        if is_moe and aux_loss is not None:
            loss = loss + aux_loss()
        return loss

    def backward(loss: torch.Tensor) -> None:
        loss.backward()

    def update() -> None:
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        if master:
            master.load_grads()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if master:
            master.store()
            for p in params:
                p.grad = None

    return Step(forward, backward, update)


def compile_phases() -> dict[str, float]:
    """Seconds per compile phase spent so far in this process (phases torch did not record are
    left out: names differ between torch versions and backends)."""
    from torch._dynamo.utils import compilation_time_metrics

    return {
        name: float(sum(compilation_time_metrics[key]))
        for name, key in COMPILE_PHASES.items()
        if compilation_time_metrics.get(key)
    }


@contextlib.contextmanager
def _stopwatch(device: str, into: dict[str, float], name: str) -> Iterator[None]:
    synchronize(device)
    t0 = time.perf_counter()
    yield
    synchronize(device)
    into[name] = time.perf_counter() - t0


def first_step(
    model: Qwen3, spec: TrainSpec, device: str, batch: Callable[[int], torch.Tensor], world: int
) -> tuple[Step, float, float, dict[str, float]]:
    """Prepare the model and run step 0: (step, its loss, seconds, seconds per part)."""
    parts: dict[str, float] = {}
    t0 = time.perf_counter()
    with _stopwatch(device, parts, "setup_s"):
        if spec.activation_checkpointing:
            apply_activation_checkpointing(model)
        if spec.compile == "blocks":
            compile_blocks(model, spec.compile_backend)
        if world > 1:
            apply_fsdp(model, spec, device)
        module: nn.Module = model
        if spec.compile == "model":
            module = torch.compile(model, backend=spec.compile_backend)
        step = make_step(module, spec, device)
    tokens = batch(0)
    with _stopwatch(device, parts, "forward_s"):
        loss = step.forward(tokens)
    with _stopwatch(device, parts, "backward_s"):
        step.backward(loss)
    with _stopwatch(device, parts, "optimizer_s"):
        step.update()
    value = loss.item()
    return step, value, time.perf_counter() - t0, parts


def moe_dispatch(model: Qwen3, spec: TrainSpec, device: str) -> str | None:
    """How the MoE layers dispatch tokens in this run (None for a dense model): "routed:
    grouped_mm", "routed: loop over experts" or "dense: ...". Called before the clock starts, so
    trying torch's grouped GEMM on the device once is not billed to the first step."""
    config = model.config
    if not config.is_moe:
        return None
    if config.moe_dispatch == "dense":
        return "dense: every expert on every token"
    dtype = torch.bfloat16 if spec.dtype == "bf16" else torch.float32
    how = moe_implementation(torch.device(device), dtype, compiling=spec.compile != "none")
    return f"routed: {how}"


OPS_KEPT = 40  # aten ops kept in the record, most called first


def _ops_step(step: Step, tokens: torch.Tensor, device: str) -> dict[str, Any]:
    """One more eager step, untimed, under the ops probe: which ops left the device, by source.

    After the timed steps, so the probe's dispatch overhead touches no figure."""
    with OpsProbe(device) as probe:
        step(tokens)
        step_boundary(device)
    record = probe.report.to_json()
    record["ops"] = dict(list(record["ops"].items())[:OPS_KEPT])
    return record


def _reference_reading(device: str, dtype: str) -> tuple[float | None, bool]:
    """One reading of the drift reference (`device.reference`): (its FLOP/s, whether it was
    unstable). FLOP/s None where it was unstable (its samples never agreed: no speed of the
    machine) or cannot be read: it is evidence about the machine, never a reason for the
    training run to fail."""
    try:
        rate = read_reference(device, dtype).flops
    except Exception:  # noqa: BLE001 - an unreadable reference is an unknown drift
        return None, False
    return rate, rate is None


def steady_sampler(spec: TrainSpec, world: int, device: str) -> Sampler:
    """The sampler of a process's steady steps: at least the planned ones (steps - 1 - warmup),
    then more until their median is within ±5% or `spec.timing_s` of them has run; the ranks of
    a data-parallel group take the same steps (`agree_over_ranks`: FSDP's collectives would
    wait forever for a rank that stopped)."""
    planned = spec.steps - 1 - spec.warmup
    rule = Rule(
        min_samples=planned,
        extra_s=spec.timing_s,  # the planned steps run whatever it is: it bounds the extra ones
        max_samples=Rule.max_samples if spec.timing_s else planned,
    )
    return Sampler(rule, agree=agree_over_ranks(device) if world > 1 else None)


def train(spec: TrainSpec, rank: int = 0, world: int = 1, device: str | None = None) -> dict:
    """Run `spec` on this process's device and return what was measured (see the module doc)."""
    device = device or spec.device
    torch.manual_seed(spec.seed)
    model, broken_ties, ties_not_kept = build_model(spec, device)
    config = model.config
    # N as TorchTitan counts it: input embedding out unless tied, routed experts at top_k / E.
    params = num_params(model, exclude_embedding=True, active=True)

    def batch(i: int) -> torch.Tensor:
        tokens = synthetic_tokens(spec.seed, i, spec.batch_size, spec.seq_len, config.vocab_size)
        return rank_slice(tokens, rank, world).to(device)

    dispatch = moe_dispatch(model, spec, device)
    synchronize(device)
    reset_peak_memory(device)
    timer = Timer(device)
    step_times: list[float] = []
    pending: list[torch.Tensor] = []
    with CompileProbe(device) as probe:
        step, loss0, first_step_s, parts = first_step(model, spec, device, batch, world)
        # The drift reference, read after the first step (off its clock; step 1 is warm-up when
        # warmup >= 1) and after the last: the machine's speed around this process's steps.
        readings = [_reference_reading(device, spec.dtype)]

        def timed_step() -> float:
            tokens = batch(len(step_times) + 1)
            timer.start()
            pending.append(step(tokens))
            step_boundary(device)  # a lazy backend (xla) compiles and runs the step here
            step_times.append(timer.stop())
            return step_times[-1]

        for _ in range(spec.warmup):
            timed_step()
        steady = steady_sampler(spec, world, device)
        while k := steady.more():
            for _ in range(k):
                steady.add(timed_step())
        readings.append(_reference_reading(device, spec.dtype))
    # The planned steps' losses: what the eager and compiled curves compare, step by step.
    all_losses = [loss0, *(x.item() for x in pending)]
    losses = all_losses[: spec.steps]
    memory = memory_stats(device) or {}
    ops = _ops_step(step, batch(len(all_losses)), device) if spec.compile == "none" else None
    return {
        "ops": ops,
        "rank": rank,
        "world_size": world,
        "device": device,
        "first_step_s": first_step_s,
        "first_step_phases": parts,
        "step_times_s": step_times,
        "sampling": steady.verdict().to_json(),
        "clock": timer.clock,
        "reference_flops": [rate for rate, _ in readings],
        # Readings whose samples never agreed (their FLOP/s is None): the report says so.
        "reference_unstable": sum(unstable for _, unstable in readings),
        "reference_workload": reference_workload(device, spec.dtype),
        "broken_ties": [list(g) for g in broken_ties],
        "ties_not_kept": ties_not_kept,
        "losses": losses,
        "tokens_per_step": spec.tokens_per_step,
        "params": params,
        "moe_dispatch": dispatch,
        "flops_per_token": training_flops_per_token(
            params, config.num_layers, config.num_heads, config.head_dim, spec.seq_len
        ),
        "peak_memory_bytes": memory.get("peak_allocated"),
        "memory_source": memory.get("source"),
        # metrics this torch or backend cannot give, with the reason (never dropped silently)
        "memory_unavailable": memory.get("unavailable"),
        "finite": all(math.isfinite(x) for x in all_losses),
        "compile": {**probe.report.to_json(), "phases": compile_phases(), "cache": cache_counts()},
    }


# --- running in a fresh process ------------------------------------------------------------------


class CompileFailure(RuntimeError):
    """torch.compile (Dynamo, AOTAutograd, the backend) failed: the message names the original."""


def failure_kind(exc: BaseException) -> str:
    """ "compile" (raised by Dynamo or Inductor, or a backend they wrapped), "oom", "unsupported"
    (the backend lacks what the run needs: autocast) or "run"."""
    from trainready.core.context import is_unsupported
    from trainready.device import is_oom

    if is_unsupported(exc):
        return "unsupported"
    if isinstance(exc, CompileFailure):
        return "compile"
    if is_oom(exc):
        return "oom"
    module = type(exc).__module__
    return "compile" if module.startswith(("torch._dynamo", "torch._inductor")) else "run"


def _error_head(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:500]


def rank_train(env: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """`trainready.core.launch` target: `train` on this rank (`env` is a launch.RankEnv). A compile
    error is re-raised as CompileFailure, so the host can tell it from a failure to run."""
    try:
        return train(TrainSpec.from_json(spec), env.rank, env.world_size, env.device)
    except Exception as e:
        if failure_kind(e) == "compile" and not isinstance(e, CompileFailure):
            raise CompileFailure(_error_head(e)) from e
        raise


def main(argv: list[str]) -> int:
    """python -m trainready.suites.train.loop SPEC.json OUT.json: one run in this (fresh) process.

    OUT.json gets the record, or {"error", "kind", "traceback"} when the run raised (exit 1).
    """
    import traceback

    from trainready.core.imports import import_from_env

    spec_path, out_path = Path(argv[0]), Path(argv[1])
    try:
        import_from_env()  # the run's --import modules (TRAINREADY_IMPORT, set by the worker)
        record = train(TrainSpec.from_json(json.loads(spec_path.read_text())))
    except Exception as e:  # noqa: BLE001 - the parent decides what a failure means
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        out_path.write_text(
            json.dumps({"error": _error_head(e), "kind": failure_kind(e), "traceback": tb[-4000:]})
        )
        return 1
    out_path.write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
