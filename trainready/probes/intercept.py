"""Python kernels for a few aten ops, for the length of a with-block: every other op runs as is.

A TorchDispatchMode sees every op, so it costs its Python round trip (~5 us) on every op: on the
tiny models parity trains, that doubles a run even when the mode changes one op in ten.
`intercept` sees only the ops it is given, through Python kernels registered for them alone
(a scoped `torch.library` registration, removed on exit); every other op passes in C++.

The kernels sit just below autograd, at the `ADInplaceOrView` key, as a dispatch mode does:
autograd records the op itself (its usual backward), not the handler's own ops, and the
backward's ops are dispatched the same way, so they are intercepted in turn. A handler runs with
the key excluded: the ops it calls, the intercepted op included, run plainly.

Some ops' autograd kernel is PyTorch's boxed fallback, which redispatches past `ADInplaceOrView`
(`SKIP_AD_INPLACE_OR_VIEW`: native_group_norm_backward, called only by group norm's backward).
Those are intercepted at the CPU's autograd key instead, in place of that fallback: a call of
them is then never recorded (no double backward through them), which first-order training never
needs. (Putting a key above autograd in the thread's include set instead breaks higher-order
operators, which find no kernel for it.) `tests/unit/probes/test_perturb_conv.py` calls every op the CPU's
baseline intercepts on its own, so an op that a PyTorch version routes past the kernel is seen.

The registration holds for the whole process while the block runs (a worker runs one case at a
time); blocks may be active together for different ops, not for the same one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

Handler = Callable[[Any, tuple, dict], Any]  # (op, args, kwargs) -> the op's result

aten = torch.ops.aten
SKIP_AD_INPLACE_OR_VIEW = frozenset({aten.native_group_norm_backward.default})
_BELOW = DispatchKey.ADInplaceOrView
# While a handler runs: past autograd and the kernels themselves.
_PAST = DispatchKeySet(DispatchKey.AutogradCPU) | DispatchKeySet(_BELOW)


def _qualified(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    name = schema.name.split("::")[1]
    return f"{name}.{schema.overload_name}" if schema.overload_name else name


def _kernel(op: torch._ops.OpOverload, handler: Handler) -> Callable:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_PAST):
            return handler(op, args, kwargs)

    return kernel


@contextlib.contextmanager
def intercept(handlers: dict[torch._ops.OpOverload, Handler]) -> Iterator[None]:
    """Within the block, each op of `handlers` runs its handler instead (module docstring). The
    aten ops only: a handler is registered under the op's own namespace."""
    with torch.library._scoped_library("aten", "IMPL") as lib:
        for op, handler in handlers.items():
            key = "AutogradCPU" if op in SKIP_AD_INPLACE_OR_VIEW else _BELOW.name
            lib.impl(_qualified(op), _kernel(op, handler), key)
        yield
