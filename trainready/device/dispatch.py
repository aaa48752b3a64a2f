"""Which kernel the dispatcher picks for an aten op on a device: the vendor-free fallback record.

A backend registers kernels per dispatch key. For an op called with tensors of a device whose
backend key is K (`CUDA`, `XPU`, `PrivateUse1`...), the dispatcher's computed table picks, in this
order (c10/core/impl/OperatorEntry.cpp, `computeDispatchTableEntryWithDebug`):

1. a kernel registered for K itself -> `kernel` (the backend's own);
2. a CompositeExplicitAutogradNonFunctional or CompositeExplicitAutograd kernel -> `composite`
   (written once for every backend; it calls other ops, each dispatched again);
3. a CompositeImplicitAutograd kernel -> `composite` (a decomposition; it normally runs above
   autograd, so its ops are what reach the backend);
4. the backend fallback registered for K with `m.fallback(...)` -> `fallback`: for an
   out-of-tree backend that is PyTorch's boxed CPU fallback (copy to the host, run the CPU
   kernel, copy back), the default for PrivateUse1 plugins, silent unless the vendor logs it;
5. nothing -> `missing` (the call raises NotImplementedError).

`classify` applies these rules through the dispatcher's own queries; a test checks them against
the computed table (`torch._C._dispatch_dump_table`) for every aten op. `DispatchWatch` applies
them to every aten call a region makes with the device's tensors: the vendor-free record of which
ops fell back to the host, counted per call. A composite runs with the watch pushed again, so the
ops it calls are judged too (a structured op such as add.Tensor reaches a backend without kernels
as add.out). It cannot see a fallback a backend makes inside its own kernel (TorchNeuron retrying
a failed kernel on the CPU) or what compiled code runs: the backend's own record
(`device/fallback.py`) is the second source.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

KERNEL, COMPOSITE, FALLBACK, MISSING = "kernel", "composite", "fallback", "missing"
_COMPOSITES = (
    "CompositeExplicitAutogradNonFunctional",
    "CompositeExplicitAutograd",
    "CompositeImplicitAutograd",
)


def backend_key(device_type: str) -> str | None:
    """The dispatch key of a device type's backend ('PrivateUse1' for a renamed PrivateUse1
    backend such as `emu`), or None where torch maps the type to no backend key."""
    if device_type == torch._C._get_privateuse1_backend_name():
        return "PrivateUse1"
    try:
        key = torch._C._dispatch_key_for_device(device_type)
    except RuntimeError:
        return None
    name = str(key).rpartition(".")[2]
    return None if name in ("Undefined", "") else name


def has_backend_fallback(key: str) -> bool:
    return torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, key))


@functools.cache
def classify(op_name: str, key: str) -> str:
    """`kernel`, `composite`, `fallback` or `missing`: what the dispatcher runs for `op_name`
    (`aten::add.Tensor`) on the backend key `key`. Cached: registrations made after a call
    (`torch.library`) need `classify.cache_clear()`, which the ops probe does on entry."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(op_name, key):
        return KERNEL
    if composite_alias(op_name) is not None:
        return COMPOSITE
    return FALLBACK if has_backend_fallback(key) else MISSING


@functools.cache
def composite_alias(op_name: str) -> str | None:
    """The composite alias key whose kernel a backend without its own kernel gets, if any."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return next((alias for alias in _COMPOSITES if has(op_name, alias)), None)


def op_name(func: torch._ops.OpOverload) -> str:
    """`aten::add.Tensor` (the overload's schema name, as fallback logs and counters name it)."""
    schema = func._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _on_device(obj: Any, dev_type: str) -> bool:
    if isinstance(obj, torch.Tensor):
        return obj.device.type == dev_type
    if isinstance(obj, (list, tuple)):
        return any(_on_device(o, dev_type) for o in obj)
    if isinstance(obj, dict):
        return any(_on_device(o, dev_type) for o in obj.values())
    return False


def _factory_device(kwargs: dict[str, Any]) -> str | None:
    dev = kwargs.get("device")
    return torch.device(dev).type if isinstance(dev, (str, torch.device)) else None


class DispatchWatch(TorchDispatchMode):
    """`with DispatchWatch(device) as w: ...` then `w.fallbacks` ({op: calls that took the
    backend fallback}), `w.kinds` ({kind: calls}), `w.missing` and `w.key` (None where the
    dispatcher cannot tell: the CPU, or a device type with no backend key)."""

    def __init__(self, device: str):
        super().__init__()
        self.dev_type = torch.device(device).type
        self.key = None if self.dev_type == "cpu" else backend_key(self.dev_type)
        self.kinds: Counter = Counter()
        self.fallbacks: Counter = Counter()
        self.missing: Counter = Counter()
        self._composite: tuple | None = None  # the composite call being run, if any
        if self.key is not None:
            classify.cache_clear()  # kernels registered since the last watch (torch.library)
            composite_alias.cache_clear()

    @property
    def source(self) -> str:
        """What the record covers, or why there is none."""
        if self.key is None:
            return "none: " + ("the device is the CPU" if self.dev_type == "cpu" else "no key")
        return f"dispatcher, {self.key} key, {sum(self.kinds.values())} aten calls on the device"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        on_device = _on_device(args, self.dev_type) or _on_device(kwargs, self.dev_type)
        if self.key is None or not (on_device or _factory_device(kwargs) == self.dev_type):
            return func(*args, **kwargs)
        name = op_name(func)
        kind = classify(name, self.key)
        self.kinds[kind] += 1
        if kind == FALLBACK:
            self.fallbacks[name] += 1
        elif kind == MISSING:
            self.missing[name] += 1
        elif kind == COMPOSITE:
            # The composite's kernel, called by its alias key (asking for the backend key would
            # get the backend fallback: torch's callBoxedForDispatchKey skips the computed
            # table), with this watch pushed again so the composite's own calls come back here.
            call = (func, tuple(map(id, args)))
            if call == self._composite:  # the composite handed its own call back (aten::detach)
                return func(*args, **kwargs)
            alias = getattr(torch._C.DispatchKey, composite_alias(name) or "")
            outer, self._composite = self._composite, call
            try:
                with self:
                    return func._op_dk(alias, *args, **kwargs)
            finally:
                self._composite = outer
        return func(*args, **kwargs)
