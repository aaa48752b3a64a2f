"""Python kernels for a few aten ops, for the length of a with-block: every other op runs as is.

A TorchDispatchMode sees every op, so it costs its Python round trip (~5 us) on every op: on the
tiny models parity trains, that doubles a run even when the mode changes one op in ten.
`intercept` sees only the ops it is given, through Python kernels registered for them alone
(a scoped `torch.library` registration, removed on exit); every other op passes in C++.

Where the handler runs matters for autograd. A call that autograd records (grad mode on, an
input requiring grad) is handled just below autograd, at the `ADInplaceOrView` key, as a dispatch
mode would be: autograd records the op itself (its usual backward), not the handler's own ops.
Any other call -- a backward's ops, a call on tensors that need no grad -- is handled at the
`PreDispatch` key (above autograd, put in the thread's include set for the block), because some
ops' autograd kernels (the boxed fallback of native_group_norm_backward) skip `ADInplaceOrView`.
A handler runs with both keys excluded: the ops it calls, the intercepted op included, run
plainly.

The registration holds for the whole process while the block runs (a worker runs one case at a
time); blocks do not nest. Not seen: a recorded call of an op whose autograd kernel skips
`ADInplaceOrView` (native_group_norm_backward under double backward), and tensors made under
inference mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

Handler = Callable[[Any, tuple, dict], Any]  # (op, args, kwargs) -> the op's result

_ABOVE, _BELOW = DispatchKey.PreDispatch, DispatchKey.ADInplaceOrView
_PAST_BOTH = DispatchKeySet(_ABOVE) | DispatchKeySet(_BELOW)
_PAST_ABOVE = DispatchKeySet(_ABOVE)


def _qualified(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    name = schema.name.split("::")[1]
    return f"{name}.{schema.overload_name}" if schema.overload_name else name


def _recorded(args: tuple) -> bool:
    """Whether autograd records a call on `args` (grad mode on, a tensor requiring grad)."""
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    )


def _kernels(op: torch._ops.OpOverload, handler: Handler) -> tuple[Callable, Callable]:
    """(above autograd, below it): each call is handled by exactly one of them."""

    def above(*args: Any, **kwargs: Any) -> Any:
        if _recorded(args):  # on through autograd, to `below`
            with torch._C._ExcludeDispatchKeyGuard(_PAST_ABOVE):
                return op(*args, **kwargs)
        with torch._C._ExcludeDispatchKeyGuard(_PAST_BOTH):
            return handler(op, args, kwargs)

    def below(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_PAST_BOTH):
            return handler(op, args, kwargs)

    return above, below


@contextlib.contextmanager
def intercept(handlers: dict[torch._ops.OpOverload, Handler]) -> Iterator[None]:
    """Within the block, each op of `handlers` runs its handler instead (module docstring). The
    aten ops only: a handler is registered under the op's own namespace."""
    with torch.library._scoped_library("aten", "IMPL") as lib:
        for op, handler in handlers.items():
            above, below = _kernels(op, handler)
            lib.impl(_qualified(op), above, _ABOVE.name)
            lib.impl(_qualified(op), below, _BELOW.name)
        with torch._C._IncludeDispatchKeyGuard(_ABOVE):
            yield
