"""Keeping a float64 reference float64 through library code that upcasts to float32.

Model libraries (diffusers, timm, transformers) write "compute this in at least float32" as
`.float()`, `.to(torch.float32)` or `dtype=torch.float32` (timestep embeddings, norms, attention
scores), and make constants with no dtype at all (`torch.full(shape, float("-inf"))`,
`torch.arange(n).float()`, `torch.tensor(0.5)`), which the default dtype makes float32. In a
float64 run either drops the reference to float32 there. `float32_as_float64()` is a
torch-function mode under which those casts and factory dtypes give float64 instead, and the
default dtype is float64; a task model enters it when its parameters are float64, so other runs
execute the library's code unchanged.
`float_dtypes(fn)` lists the floating dtypes every aten op produced while `fn` ran (forward and
backward): what a test asserts is {float64} for the reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_NARROW = (torch.float32,)


def _widen(value: Any) -> Any:
    return torch.float64 if value in _NARROW else value


class _Float32AsFloat64(TorchFunctionMode):
    """`.float()`, float32 dtype arguments (positional or keyword) -> float64; tensors made
    with no dtype (the default dtype) -> float64."""

    def __enter__(self):
        self._default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        return super().__enter__()

    def __exit__(self, *exc):
        torch.set_default_dtype(self._default)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.float:
            return args[0].to(torch.float64)
        args = tuple(_widen(a) for a in args)
        kwargs = {k: _widen(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def float32_as_float64(active: bool = True) -> contextlib.AbstractContextManager:
    """The mode when `active` (the model's parameters are float64), else a no-op context."""
    return _Float32AsFloat64() if active else contextlib.nullcontext()


def is_float64(module: torch.nn.Module) -> bool:
    """Whether the module's first floating parameter is float64 (the reference run)."""
    p = next((p for p in module.parameters() if p.is_floating_point()), None)
    return p is not None and p.dtype == torch.float64


class _DtypeRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.dtypes: dict[torch.dtype, str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.dtypes.setdefault(t.dtype, str(func))  # the first op that made it
        return out


@contextlib.contextmanager
def recording_dtypes() -> Iterator[dict[torch.dtype, str]]:
    """Records {floating dtype: first aten op that produced it} for every op run inside."""
    mode = _DtypeRecorder()
    with mode:
        yield mode.dtypes


def float_dtypes(fn: Callable[[], Any]) -> dict[torch.dtype, str]:
    """{floating dtype: first aten op that produced it} over everything `fn` runs."""
    with recording_dtypes() as dtypes:
        fn()
    return dtypes
