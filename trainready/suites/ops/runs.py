"""One sample, run the way a case's form asks: forward (function, in-place, `out=`) or backward.

`run(form, op, sample, grads)` returns the flattened results a judge compares: the outputs, or
for backward the gradients of the sample's leaves from `torch.autograd.grad` with the given
`grads` as grad_outputs and `allow_unused=True` (an unused leaf's gradient is None on both sides,
or judged as a mismatch). `grad_outputs_for` makes those grads once, from the CPU's outputs and a
seeded generator, so the CPU, the reference and the device are given the same ones.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._pytree import tree_map

from trainready.suites.ops.samples import call, leaves, outputs


class NothingToJudge(Exception):  # noqa: N818 - a condition, not an error
    """The sample has nothing this form can judge (no differentiable output, a broadcast input
    for an in-place op)."""


def _differentiable(out: Any) -> list[torch.Tensor]:
    return [t for t in outputs(out) if isinstance(t, torch.Tensor) and t.requires_grad]


def forward(op: Any, sample: Any) -> Any:
    return call(op, sample)


def grad_outputs_for(op: Any, sample: Any, seed: int) -> list[torch.Tensor]:
    """Seeded random grad_outputs shaped like the differentiable outputs of `sample` (a CPU
    copy), in their dtypes."""
    out = sample.output_process_fn_grad(forward(op, sample))
    gen = torch.Generator().manual_seed(seed)
    diff = _differentiable(out)
    if not diff:
        raise NothingToJudge("no output requires grad")
    return [torch.randn(t.shape, dtype=t.dtype, generator=gen) for t in diff]


def backward(op: Any, sample: Any, grads: list[torch.Tensor]) -> list[Any]:
    """Gradients of the sample's leaves; `grads` are cast to each output's dtype and device."""
    out = sample.output_process_fn_grad(forward(op, sample))
    diff = _differentiable(out)
    inputs = leaves(sample)
    if not diff or not inputs or len(diff) != len(grads):
        raise NothingToJudge("no differentiable output or input")
    given = [g.to(device=t.device, dtype=t.dtype) for g, t in zip(grads, diff, strict=True)]
    return list(torch.autograd.grad(diff, inputs, given, allow_unused=True))


def inplace(op: Any, sample: Any) -> Any:
    if sample.broadcasts_input:
        raise NothingToJudge("the sample broadcasts its input: invalid in place")
    call(op.inplace_variant, sample)
    return sample.input


def out_form(op: Any, sample: Any, like: Any) -> Any:
    """The op with `out=` tensors shaped like `like` (the CPU function form's result), on the
    sample's device, filled with a value the op would not write (`_unwritten`): an op that
    leaves `out` alone fails every time, not only where the memory held something else."""
    device = sample.input.device if isinstance(sample.input, torch.Tensor) else None
    if not isinstance(like, (torch.Tensor, tuple)):
        raise NothingToJudge("the op returns no tensor to write out=")
    out = tree_map(lambda t: _unwritten(t, device) if isinstance(t, torch.Tensor) else t, like)
    call(op.op, sample, out=out)
    return out


def _unwritten(like: torch.Tensor, device: Any) -> torch.Tensor:
    if like.is_floating_point() or like.is_complex():
        fill: Any = math.nan
    elif like.dtype == torch.bool or like.layout != torch.strided or like.is_quantized:
        return torch.empty_like(like, device=device)  # no value an op could not write
    else:
        fill = torch.iinfo(like.dtype).max
    return torch.full_like(like, fill, device=device)


def run(form: str, op: Any, sample: Any, grads: list | None = None, like: Any = None) -> list:
    """The flattened results of one sample in `form` ("fwd", "bwd", "inplace", "out")."""
    with torch.no_grad() if form in ("inplace", "out") else torch.enable_grad():
        if form == "bwd":
            return backward(op, sample, grads or [])
        if form == "inplace":
            return outputs(inplace(op, sample))
        if form == "out":
            return outputs(out_form(op, sample, like))
        return outputs(forward(op, sample))
