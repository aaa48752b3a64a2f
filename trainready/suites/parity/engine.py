"""One parity run of a model: a training step with everything recorded, then a short training run.

`train(model, data, spec)` copies the model onto a device in a dtype, optionally compiles it,
and runs `spec.steps` AdamW steps on one fixed batch: `Data` (token ids and next-token targets) for
a causal LM, `TaskData` (a batch dict, `models/task.py`) for a task model, which computes its own
loss. From the first step it keeps the loss, the
logits, every gradient and every parameter after the optimizer step; from every step the loss
(the loss curve). The same function makes the float64 CPU reference, the device run and the
CPU run at the case dtype, so the three differ only in where and how they run.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from trainready.device import autocast, step_boundary, synchronize
from trainready.models.task import cast_batch
from trainready.probes import ties
from trainready.suites.parity.models import after_step, aux_loss

LR = 1e-3
BATCH = 2


@dataclass(frozen=True)
class Spec:
    device: str
    dtype: str  # "fp64" for the reference; "fp32"; "bf16"/"fp16" run under autocast on fp32
    steps: int
    compile_backend: str | None = None  # None: eager


@dataclass
class Trace:
    """What a run produced, every tensor on the CPU."""

    loss: torch.Tensor
    logits: torch.Tensor
    grads: dict[str, torch.Tensor]
    params: dict[str, torch.Tensor]  # after the first optimizer step
    curve: list[float]
    first_step_s: float = 0.0
    step_s: float = 0.0  # median of the later steps
    aux: torch.Tensor | None = None  # the model's auxiliary (MoE balancing) loss, if it trains one
    broken_ties: list[tuple[str, ...]] = field(default_factory=list)  # by the move to the device
    # Where the move broke ties: None if the run trained the model moved with its ties kept
    # (`ties.move_keeping_ties`), else why it could not (then it trained the untied model).
    ties_not_kept: str | None = None

    @property
    def untied(self) -> bool:
        """Whether the run trained a model whose ties the move broke (not the model built)."""
        return bool(self.broken_ties) and self.ties_not_kept is not None

    def named(self, after_step: bool = True) -> dict[str, torch.Tensor]:
        """Every compared tensor under the name a report shows."""
        out = {"loss": self.loss, "logits": self.logits}
        if self.aux is not None:
            out["aux_loss"] = self.aux
        out |= {f"{n}.grad": g for n, g in self.grads.items()}
        if after_step:
            out |= {f"{n}.after_step": p for n, p in self.params.items()}
        return out


@dataclass
class Data:
    ids: torch.Tensor  # [B, T] on the CPU
    targets: torch.Tensor  # [B, T]: the next token

    @classmethod
    def fixed(cls, vocab: int, seq_len: int, seed: int = 0) -> Data:
        gen = torch.Generator().manual_seed(seed)
        seq = torch.randint(0, vocab, (BATCH, seq_len + 1), generator=gen)
        return cls(seq[:, :-1].contiguous(), seq[:, 1:].contiguous())


@dataclass
class TaskData:
    batch: dict[str, torch.Tensor]  # a task model's inputs and labels, on the CPU


def _autocast(spec: Spec) -> contextlib.AbstractContextManager:
    if spec.dtype in ("bf16", "fp16"):
        return autocast(spec.device, spec.dtype)
    return contextlib.nullcontext()


def forward_loss(fn: Callable, model: nn.Module, data: Data | TaskData, spec: Spec):
    """(loss, logits, aux): cross-entropy over the vocabulary plus the model's auxiliary loss
    (MoE load balancing), which is also returned on its own when it is a trained term (a tensor
    with a gradient), else None. A task model computes its own loss: (loss, output, None)."""
    if isinstance(data, TaskData):
        with _autocast(spec):
            out = fn(**data.batch)
        return out.loss, out.output, None
    # (A task model keeps its float64 reference float64 itself, `models/zoo/float64.py`; a causal
    # LM does not yet: under that mode the Qwen3.5 family's gated delta rule, a cumsum over the
    # sequence that `IndependentRounding` does not reorder, fails against the exact reference.)
    with _autocast(spec):
        logits = fn(data.ids)
        vocab = logits.shape[-1]
        # In at least fp32: `.float()` would compute the float64 reference's loss in float32.
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        loss = F.cross_entropy(wide.reshape(-1, vocab), data.targets.reshape(-1))
        aux = aux_loss(model)
        loss = loss + aux
    trained = isinstance(aux, torch.Tensor) and aux.requires_grad
    return loss, logits, aux if trained else None


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


def param_dtype(spec: Spec) -> torch.dtype:
    """fp64 parameters for the reference, else fp32 (autocast lowers the compute)."""
    return torch.float64 if spec.dtype == "fp64" else torch.float32


@dataclass
class Placed:
    """A model on the device: `module`, the ties the move as a user writes it broke
    (`probes/ties.py`), and where it broke any, why they could not be kept (None: `module` is
    the model moved with its ties kept)."""

    module: nn.Module
    broken_ties: list[tuple[str, ...]]
    ties_not_kept: str | None = None


def place(model: nn.Module, spec: Spec) -> Placed:
    """A copy of `model` on the spec's device in the spec's parameter dtype, moved as a user
    moves it; where that move breaks ties, a copy moved with its ties kept instead (the model
    built, whose numerics the run then judges), else the untied one with the reason."""
    build = lambda: copy.deepcopy(model)  # noqa: E731 - a fresh copy per move
    return Placed(*ties.move_as_built(build, device=spec.device, dtype=param_dtype(spec)))


def on_device(data: Data | TaskData, spec: Spec) -> Data | TaskData:
    """The data on the spec's device; a task batch's floating inputs in the parameter dtype."""
    if isinstance(data, TaskData):
        return TaskData(cast_batch(data.batch, spec.device, param_dtype(spec)))
    return Data(data.ids.to(spec.device), data.targets.to(spec.device))


def compiled(model: nn.Module, backend: str) -> Callable:
    return torch.compile(model, backend=backend)


def make_optimizer(params: list[nn.Parameter], spec: Spec) -> torch.optim.Optimizer:
    """The optimizer of a run (a module-level seam: the planted optimizer faults replace it for
    the runs they act in, `trainready.testing.faults`)."""
    return torch.optim.AdamW(params, lr=LR)


def train(
    model: nn.Module,
    data: Data | TaskData,
    spec: Spec,
    on_first_step: Callable[[], None] | None = None,
) -> Trace:
    """Run `spec.steps` steps; `on_first_step` is called once the first step is done (phases)."""
    placed = place(model, spec)
    m = placed.module
    fn = compiled(m, spec.compile_backend) if spec.compile_backend else m
    d = on_device(data, spec)
    opt = make_optimizer(list(m.parameters()), spec)
    curve: list[float] = []
    times: list[float] = []
    first: dict = {}
    for step in range(spec.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss, logits, aux = forward_loss(fn, m, d, spec)
        loss.backward()
        if step == 0:
            # A lazy backend (xla) runs forward and backward here, so the reads below take
            # values rather than compiling a graph per tensor read.
            step_boundary(spec.device)
            first["loss"], first["logits"] = _cpu(loss), _cpu(logits)
            first["aux"] = None if aux is None else _cpu(aux)
            first["grads"] = {
                n: _cpu(p.grad) for n, p in m.named_parameters() if p.grad is not None
            }
        opt.step()
        after_step(m)
        step_boundary(spec.device)  # the step's graph runs here on a lazy backend (xla)
        synchronize(spec.device)
        times.append(time.perf_counter() - t0)
        curve.append(float(loss.detach().double().cpu()))
        if step == 0:
            first["params"] = {n: _cpu(p) for n, p in m.named_parameters()}
            if on_first_step:
                on_first_step()
    return Trace(
        loss=first["loss"],
        logits=first["logits"],
        grads=first["grads"],
        params=first["params"],
        curve=curve,
        first_step_s=times[0],
        step_s=statistics.median(times[1:]) if len(times) > 1 else times[0],
        aux=first["aux"],
        broken_ties=placed.broken_ties,
        ties_not_kept=placed.ties_not_kept,
    )


def optimizer_step_reference(
    model: nn.Module, grads: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The first AdamW step in float64 on the CPU, from the model's initial weights, applied to
    the given gradients (a device's own): what that device's step should have produced.

    The step is judged on its own, given the device's gradients, because Adam divides each
    gradient by its own magnitude: the float32 rounding noise of a gradient that is zero in exact
    arithmetic becomes a step of about `lr`, the same on any correct device. The gradients
    themselves are judged against the float64 reference separately.
    """
    return _adamw_step(model, grads, torch.float64)


def optimizer_step_baseline(
    model: nn.Module, grads: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """The same first AdamW step in the dtype the parameters are kept in (fp32 under autocast),
    by the CPU's fused AdamW -- another implementation than the device's (the CPU's own runs use
    the single-tensor one, a PrivateUse1 device the foreach one): the honest same-dtype baseline
    of the optimizer step, free of any fault in the device's optimizer."""
    return _adamw_step(model, grads, dtype, fused=dtype != torch.float64)


def _adamw_step(
    model: nn.Module, grads: dict[str, torch.Tensor], dtype: torch.dtype, fused: bool = False
) -> dict[str, torch.Tensor]:
    params = {n: p.detach().to("cpu", dtype).clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(list(params.values()), lr=LR, fused=fused or None)
    for n, p in params.items():
        g = grads.get(n)
        p.grad = None if g is None else g.to("cpu", dtype)
    opt.step()
    return {f"{n}.after_step": p for n, p in params.items()}


def first_step(
    model: nn.Module,
    data: Data | TaskData,
    spec: Spec,
    around: contextlib.AbstractContextManager | None = None,
) -> Trace:
    """Forward and backward of the first step only (no optimizer step): loss, logits, grads.
    `around` wraps exactly the forward and backward (a probe), not the copies around them."""
    placed = place(model, spec)
    m = placed.module
    d = on_device(data, spec)
    with around or contextlib.nullcontext():
        loss, logits, aux = forward_loss(m, m, d, spec)
        loss.backward()
        synchronize(spec.device)
    grads = {n: _cpu(p.grad) for n, p in m.named_parameters() if p.grad is not None}
    curve = [float(loss.detach().double().cpu())]
    aux = None if aux is None else _cpu(aux)
    ties_seen = {"broken_ties": placed.broken_ties, "ties_not_kept": placed.ties_not_kept}
    return Trace(_cpu(loss), _cpu(logits), grads, {}, curve, aux=aux, **ties_seen)


@dataclass
class Determinism:
    """Two eager first steps on the device, bit for bit."""

    identical: bool
    max_abs_diff: float
    differing: list[str] = field(default_factory=list)


def determinism(a: Trace, b: Trace) -> Determinism:
    ta, tb = a.named(), b.named()
    differing, worst = [], 0.0
    for name, x in ta.items():
        y = tb.get(name)
        if y is None or x.shape != y.shape or not torch.equal(x, y):
            differing.append(name)
            if y is not None and x.shape == y.shape:
                diff = (x.double() - y.double()).abs().nan_to_num(nan=float("inf")).max().item()
                worst = max(worst, diff)
    return Determinism(not differing, worst, differing[:10])
