"""Where PyTorch's meta kernels and the device's kernels disagree on an op's output layout.

torch.compile traces a graph on fake tensors, whose sizes and strides come from each op's meta
kernel, and then runs the graph (aot_eager) or generates code for it trusting those layouts. Where
the device's kernel returns another layout than the meta kernel says, a traced `view` fails at run
time ("view size is not compatible with input tensor's size and stride", the aot_eager failure of
pytorch/pytorch#120035), and a code generator that reads memory by the traced strides reads it
wrong. The CPU has such ops too, and a new backend has its own (found so far: docs/devices.md,
"What else a device's kernels are checked for").

`LayoutCheck` is a dispatch mode: within it every op runs as it is and, where PyTorch has a meta
kernel for it, once more on fake tensors; it records each op whose outputs' sizes or significant
strides (those of dimensions longer than 1, the ones a view depends on) differ. What cannot be run
fake (an op without a meta kernel, data-dependent output shapes, a fake run that raises) is
counted as unchecked, never as a match. It costs a fake run of every op (milliseconds each), so
the parity suite runs it once, on a failed compile's eager first step, to name the ops behind it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._prims_common import check_significant_strides
from torch._subclasses.fake_impls import has_meta
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map_only

aten = torch.ops.aten
# Ops whose fake run says nothing about a layout: the fake-tensor machinery's own (lift_fresh),
# views that change their input in place, and outputs whose shape depends on the data.
_SKIP = frozenset({aten.lift_fresh.default, aten.lift_fresh_copy.default})
_SKIP_TAGS = (
    torch.Tag.dynamic_output_shape,
    torch.Tag.data_dependent_output,
    torch.Tag.inplace_view,
)
MAX_OPS_NAMED = 5  # in the one-line sentence; every mismatch is in the JSON


@dataclass
class Mismatch:
    """The first call of an op whose output differs from the meta kernel's, and how many did."""

    op: str
    output: int  # which output of the op
    shape: list[int]
    device_strides: list[int]
    meta_strides: list[int]
    meta_shape: list[int]
    calls: int = 1

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class LayoutReport:
    checked_calls: int = 0
    checked_ops: set[str] = field(default_factory=set)
    unchecked_calls: int = 0
    mismatches: dict[str, Mismatch] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "checked_calls": self.checked_calls,
            "checked_ops": len(self.checked_ops),
            "unchecked_calls": self.unchecked_calls,
            "mismatches": [m.to_json() for _, m in sorted(self.mismatches.items())],
        }

    def sentence(self) -> str:
        """One line for an error: the ops that disagree, or what was checked and found none."""
        what = f"{self.checked_calls} calls of {len(self.checked_ops)} ops checked"
        if not self.mismatches:
            return f"the device's output layouts match PyTorch's meta kernels ({what})"
        named = sorted(self.mismatches.values(), key=lambda m: m.op)[:MAX_OPS_NAMED]
        parts = [
            f"{m.op} (shape {tuple(m.shape)}: strides {tuple(m.device_strides)} on the device, "
            f"{tuple(m.meta_strides)} by its meta kernel)"
            if m.shape == m.meta_shape
            else f"{m.op} (shape {tuple(m.shape)} on the device, {tuple(m.meta_shape)} by its meta "
            "kernel)"
            for m in named
        ]
        more = len(self.mismatches) - len(named)
        tail = f" and {more} more" if more > 0 else ""
        return (
            f"output layouts that differ from PyTorch's meta kernels, which compiled graphs are "
            f"traced with: {'; '.join(parts)}{tail} ({what})"
        )


def _checkable(func: torch._ops.OpOverload) -> bool:
    if func in _SKIP or any(tag in func.tags for tag in _SKIP_TAGS):
        return False
    return has_meta(func)


class LayoutCheck(TorchDispatchMode):
    """Runs every op as is and, where it can, on fake tensors; collects where the outputs' layouts
    differ (module docstring). `report` holds what was found."""

    def __init__(self) -> None:
        super().__init__()
        self.report = LayoutReport()
        self._fake = FakeTensorMode(allow_non_fake_inputs=False)

    def _fake_run(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
        def fake(t: torch.Tensor) -> torch.Tensor:
            return self._fake.from_tensor(t, static_shapes=True)

        with self._fake:
            fake_args, fake_kwargs = tree_map_only(torch.Tensor, fake, (args, kwargs))
            return func(*fake_args, **fake_kwargs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        fake_out = None
        if _checkable(func):
            # A fake run that fails says nothing of the device: unchecked, and the op runs as is.
            with contextlib.suppress(Exception):
                fake_out = self._fake_run(func, args, kwargs)
        out = func(*args, **kwargs)
        self._compare(func, out, fake_out)
        return out

    def _compare(self, func: torch._ops.OpOverload, out: Any, fake_out: Any) -> None:
        real, fake = tree_leaves(out), tree_leaves(fake_out)
        if fake_out is None or len(real) != len(fake):
            self.report.unchecked_calls += 1
            return
        name = str(func)
        self.report.checked_calls += 1
        self.report.checked_ops.add(name)
        for i, (r, f) in enumerate(zip(real, fake, strict=True)):
            if not (isinstance(r, torch.Tensor) and isinstance(f, torch.Tensor)):
                continue
            same_shape = tuple(r.shape) == tuple(f.shape)
            if same_shape and check_significant_strides(r, f, only_cuda=False)[0]:
                continue
            seen = self.report.mismatches.get(name)
            if seen is not None:
                seen.calls += 1
            else:
                self.report.mismatches[name] = Mismatch(
                    name, i, list(r.shape), list(r.stride()), list(f.stride()), list(f.shape)
                )
            break
