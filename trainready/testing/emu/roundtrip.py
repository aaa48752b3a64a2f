"""A planted "native" kernel that secretly works on the host, for testing what detects host work.

`plant_host_roundtrip("aten::mul.Tensor")` registers, through `torch.library`, a kernel for the op
under PrivateUse1 itself. To the dispatcher it is the backend's own kernel (the first rule of
docs/devices.md, "Host fallbacks"): no fallback counter and no dispatcher record of fallbacks
sees it. Yet each call copies its device inputs to the host (`x.cpu()`), runs the CPU kernel
and copies the result back (`.to(device)`): the round trip a detector of hidden host work must
find. Works with emu's full and minimal profiles (and any PrivateUse1 backend).

    with plant_host_roundtrip("aten::mul.Tensor") as planted:
        y = x * 2          # x on emu: computed on the host, returned on emu
    planted.calls          # how many times the planted kernel ran
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

DISPATCH_KEY = "PrivateUse1"


class HostRoundtrip:
    """A planted kernel. It stays registered until `remove()` (or the end of its `with` block),
    even if the handle is dropped (the dispatcher holds the kernel, which counts into the
    handle); then the op's previous kernel for the backend (on emu, the CPU fallback) runs."""

    def __init__(self, op: str, library: torch.library.Library) -> None:
        self.op = op
        self.calls = 0
        self._library: torch.library.Library | None = library

    @property
    def active(self) -> bool:
        return self._library is not None

    def remove(self) -> None:
        """Unregister the kernel; calling it again does nothing."""
        if self._library is not None:
            self._library._destroy()
            self._library = None

    def __enter__(self) -> HostRoundtrip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _overload(op: str) -> torch._ops.OpOverload:
    """ "aten::mul.Tensor" (or "aten::relu", the default overload) -> torch.ops' overload."""
    namespace, sep, rest = op.partition("::")
    if not sep or not rest:
        raise ValueError(f"op {op!r}: expected 'namespace::name[.overload]'")
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace), name)
    return getattr(packet, overload or "default")


def _device_of(args: Any) -> torch.device:
    """The backend device of the first PrivateUse1 tensor among `args`."""
    backend = torch._C._get_privateuse1_backend_name()
    for v in tree_leaves(args):
        if isinstance(v, torch.Tensor) and v.device.type == backend:
            return v.device
    raise RuntimeError("the planted host round-trip kernel got no device tensor")


def _host_kernel(overload: torch._ops.OpOverload, planted: list[HostRoundtrip]) -> Callable:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        device = _device_of((args, kwargs))
        planted[0].calls += 1
        to_host = lambda v: v.cpu() if isinstance(v, torch.Tensor) else v  # noqa: E731
        back = lambda v: v.to(device) if isinstance(v, torch.Tensor) else v  # noqa: E731
        # On CPU tensors the call dispatches to the CPU kernel, never back here.
        result = overload(*tree_map(to_host, args), **tree_map(to_host, kwargs))
        return tree_map(back, result)

    return kernel


def plant_host_roundtrip(op: str = "aten::mul.Tensor") -> HostRoundtrip:
    """Register a PrivateUse1 kernel for `op` ("namespace::name.overload") that computes on the
    host: inputs copied with `.cpu()`, the CPU kernel, outputs copied back with `.to(device)`.

    Only functional overloads (new outputs, no mutated argument) can be planted: an in-place or
    `out=` overload raises ValueError, since copies back could not alias the caller's tensors.
    An unknown op raises AttributeError. Returns the handle that removes the kernel."""
    overload = _overload(op)
    if overload._schema.is_mutable:
        raise ValueError(f"{op} mutates its arguments: plant a functional overload")
    namespace, _, name = op.partition("::")
    library = torch.library.Library(namespace, "IMPL")
    planted: list[HostRoundtrip] = []
    try:
        library.impl(name, _host_kernel(overload, planted), DISPATCH_KEY)
    except Exception:
        library._destroy()
        raise
    planted.append(HostRoundtrip(op, library))
    return planted[0]
