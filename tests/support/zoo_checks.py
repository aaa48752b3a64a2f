"""The checks every library-zoo model passes (tests/unit/models/zoo/test_timm.py, test_models_diffusers.py):
it builds; one training step in float32 and in float64 on the CPU gives a finite loss and a finite
gradient for every trainable parameter; the float64 step is float64 end to end (every aten op of
forward and backward); two builds with one seed are identical, another seed differs, and one batch
gives one loss and one gradient (nothing random in the step: a dropout after a zero-initialised
layer changes no loss, only gradients)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable

import torch

from trainready.models.task import TaskModel, TaskOutput, cast_batch
from trainready.models.zoo.float64 import recording_dtypes


def step(
    model: TaskModel, batch: dict[str, torch.Tensor], dtype: torch.dtype, record: bool = False
) -> tuple[TaskOutput, TaskModel, dict[torch.dtype, str]]:
    """Forward and backward of a copy of `model` in `dtype`: the output, the copy and, when
    `record`, {floating dtype: first aten op that produced it} over forward and backward."""
    m = copy.deepcopy(model).to(dtype)
    batch = cast_batch(batch, "cpu", dtype)
    with recording_dtypes() if record else contextlib.nullcontext({}) as dtypes:
        out = m(**batch)
        out.loss.backward()
    return out, m, dtypes


def assert_trains(
    model: TaskModel, batch: dict[str, torch.Tensor], dtype: torch.dtype
) -> tuple[TaskOutput, TaskModel]:
    """A finite loss, output and gradient for every trainable parameter in `dtype`; in float64,
    no aten op of the step computes in another floating dtype. Returns the step's output and
    trained copy."""
    out, m, dtypes = step(model, batch, dtype, record=dtype == torch.float64)
    narrow = {str(k): op for k, op in dtypes.items() if k != dtype}
    assert not narrow, f"the float64 step computes in other dtypes (first op): {narrow}"
    assert out.loss.dim() == 0 and torch.isfinite(out.loss), out.loss
    assert out.loss.dtype == dtype and out.output.dtype == dtype
    assert torch.isfinite(out.output).all()
    bad = [
        name
        for name, p in m.named_parameters()
        if p.requires_grad and (p.grad is None or not torch.isfinite(p.grad).all())
    ]
    assert not bad, f"no finite gradient in {dtype}: {bad[:5]} ({len(bad)} parameters)"
    return out, m


def check_model(build: Callable[[str, int], TaskModel], name: str) -> None:
    """Every check of the module docstring, for one model of a zoo."""
    a, b, other = build(name, 3), build(name, 3), build(name, 4)
    sa, sb, so = a.state_dict(), b.state_dict(), other.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), "two builds with one seed differ"
    assert not all(torch.equal(sa[k], so[k]) for k in sa), "the seed does not reach the weights"
    batch, again = a.make_batch(5), b.make_batch(5)
    assert batch.keys() == again.keys()
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    assert all(v.dtype == torch.float32 for v in batch.values() if v.is_floating_point())
    first, m1 = assert_trains(a, batch, torch.float32)
    second, m2, _ = step(a, batch, torch.float32)
    assert torch.equal(first.loss, second.loss), "one batch, two losses: the step is random"
    g1, g2 = dict(m1.named_parameters()), dict(m2.named_parameters())
    random = [k for k in g1 if g1[k].grad is not None and not torch.equal(g1[k].grad, g2[k].grad)]
    assert not random, f"one batch, two gradients: the step is random ({random[:3]})"
    assert_trains(a, batch, torch.float64)


def run_task_type(model_type: str, steps: int = 2):
    """The parity case of one transformers task type (eager fp32 on the CPU): its Outcome."""
    from trainready.core.case import Case
    from trainready.core.context import CaseContext
    from trainready.core.worker import execute_case
    from trainready.suites.parity import suite as parity

    params = {"source": "hf_task", "model": model_type, "mode": "eager", "dtype": "fp32"}
    case = Case("parity", f"hf/{model_type}/eager/fp32", {**params, "steps": steps})
    return execute_case(parity, case, CaseContext("cpu", "fp32", 300.0))
