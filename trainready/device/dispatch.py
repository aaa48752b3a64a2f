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

Host work hidden in a kernel of the backend's own (`kind` kernel): one that copies its inputs to
the host, computes there and copies back is invisible to that rule. A kernel-kind call runs with
the watch pushed again too, so the calls its kernel makes come back here; a copy across the host
boundary (`TRANSFERS`, one side on the device, the other on the CPU) made while such a call runs
marks it, and `roundtrips` counts the calls of each op so marked: "host round-trip inside
aten::X". Not counted: copies the region makes itself (no kernel encloses them), a composite's
(`.to()` is one over `_to_copy`) unless a kernel called the composite, the boxed CPU fallback's
(it runs without the watch: already a `fallback`), and a copy kernel's own work (copies are not
entered). A kernel called for a tensor subclass or a non-strided layout runs as before, unwatched
inside.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_push_mode, _pop_mode = torch._C._push_on_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack
KERNEL, COMPOSITE, FALLBACK, MISSING = "kernel", "composite", "fallback", "missing"
# Ops whose job is to move data. One that crosses the host boundary inside another op's kernel is
# that kernel's host round-trip; a copy's own kernel is not entered (moving data is its work).
TRANSFERS = frozenset(
    {"aten::to", "aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"}
)
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


def roundtrip_label(op: str) -> str:
    """How reports name an op whose kernel copied to and from the host."""
    return f"host round-trip inside {op}"


@functools.cache
def is_transfer(op: str) -> bool:
    return op.partition(".")[0] in TRANSFERS


def _on_device(obj: Any, dev_type: str) -> torch.Tensor | None:
    """The first tensor of `obj` (a tensor, or lists, tuples and dicts of them) on `dev_type`."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.device.type == dev_type else None
    if isinstance(obj, dict):
        obj = obj.values()
    elif not isinstance(obj, (list, tuple)):
        return None
    for o in obj:  # a loop, not a generator: this runs on every call of every case
        if (t := _on_device(o, dev_type)) is not None:
            return t
    return None


def device_types(obj: Any, out: set[str]) -> set[str]:
    """`out` with the device types of every tensor in `obj` (tensors, lists, tuples, dicts)."""
    if isinstance(obj, torch.Tensor):
        out.add(obj.device.type)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            device_types(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            device_types(o, out)
    return out


def crosses_host(args: tuple, kwargs: dict[str, Any], dev_type: str) -> bool:
    """Whether a transfer's operands (and its target `device=`) span the host and `dev_type`."""
    types = device_types((args, kwargs), set())
    if (target := _factory_device(kwargs)) is not None:
        types.add(target)
    return "cpu" in types and dev_type in types


def _plain(tensor: torch.Tensor | None, kwargs: dict[str, Any]) -> bool:
    """Whether the dense backend key's kernel is the one a call gets: strided tensors (a factory:
    a strided layout). A sparse, quantized or nested call has another key; calling the dense
    kernel for it directly would be wrong."""
    if tensor is None:
        return kwargs.get("layout") in (None, torch.strided)
    return tensor.layout == torch.strided and not (tensor.is_quantized or tensor.is_nested)


_NUMBERS = (bool, int, float, complex)
# The ops whose Python bindings take a number for a Tensor (torch's own list).
_ALLOWS_NUMBERS = getattr(torch._C, "_should_allow_numbers_as_tensors", lambda name: False)


def _number_for_tensor(func: torch._ops.OpOverload, args: tuple) -> bool:
    """Whether a Python number sits in a Tensor argument's place: a composite that wraps a scalar
    (remainder.Scalar calls remainder.Tensor with a wrapped number) hands the mode the number,
    and no Python call of the op accepts it back."""
    if not any(type(a) in _NUMBERS for a in args):
        return False
    if _ALLOWS_NUMBERS(func._schema.name.rpartition("::")[2]):
        return False  # add, mul, sub, div...: their kernels take the number (as a wrapped one)
    schema = func._schema.arguments
    return any(
        type(a) in _NUMBERS and i < len(schema) and isinstance(schema[i].type, torch.TensorType)
        for i, a in enumerate(args)
    )


def _scalar_sibling(func: torch._ops.OpOverload, args: tuple) -> torch._ops.OpOverload | None:
    """The overload of the same op that takes a Scalar where `func` takes the Tensor that a
    number was given for (remainder.Tensor -> remainder.Scalar), the rest alike; None if none."""
    want = func._schema.arguments
    packet = func.overloadpacket
    for name in packet.overloads():
        sibling = getattr(packet, name)
        have = sibling._schema.arguments
        if sibling is func or len(have) != len(want):
            continue
        if all(
            str(h.type) == str(w.type)
            or (
                i < len(args) and type(args[i]) in _NUMBERS and isinstance(h.type, torch.NumberType)
            )
            for i, (h, w) in enumerate(zip(have, want, strict=True))
        ):
            return sibling
    return None


# The dtype a wrapped number of each Python type has (c10's scalar_to_tensor).
_WRAPPED = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


def _as_tensors(func: torch._ops.OpOverload, args: tuple) -> tuple:
    """`args` with each number in a Tensor's place made a 0-dim CPU tensor of its wrapped
    dtype: right but for type promotion against other 0-dim tensors (a wrapped number defers)."""
    schema = func._schema.arguments
    return tuple(
        torch.tensor(a, dtype=_WRAPPED[type(a)])
        if type(a) in _NUMBERS and i < len(schema) and isinstance(schema[i].type, torch.TensorType)
        else a
        for i, a in enumerate(args)
    )


def _factory_device(kwargs: dict[str, Any]) -> str | None:
    dev = kwargs.get("device")
    return torch.device(dev).type if isinstance(dev, (str, torch.device)) else None


class DispatchWatch(TorchDispatchMode):
    """`with DispatchWatch(device) as w: ...` then `w.fallbacks` ({op: calls that took the
    backend fallback}), `w.kinds` ({kind: calls}), `w.calls` ({(op, kind): calls}), `w.missing`, `w.roundtrips` ({op: calls whose
    own kernel copied across the host boundary}) and `w.key` (None where the dispatcher cannot
    tell: the CPU, or a device type with no backend key; then nothing is measured)."""

    def __init__(self, device: str):
        super().__init__()
        self.dev_type = torch.device(device).type
        self.key = None if self.dev_type == "cpu" else backend_key(self.dev_type)
        self.kinds: Counter = Counter()
        self.fallbacks: Counter = Counter()
        self.missing: Counter = Counter()
        self.roundtrips: Counter = Counter()
        self.calls: Counter = Counter()  # (op, kind) -> calls: what each op dispatched to
        self.nested = 0  # calls on the device made inside a kernel of its own
        self._running: tuple | None = None  # the call whose kernel runs under the watch, if any
        self._frames: list[list] = []  # [op, crossed the host] of each enclosing kernel-kind call
        if self.key is not None:
            self._backend = getattr(torch._C.DispatchKey, self.key)
            classify.cache_clear()  # kernels registered since the last watch (torch.library)
            composite_alias.cache_clear()

    @property
    def source(self) -> str:
        """What the record covers, or why there is none."""
        if self.key is None:
            return "none: " + ("the device is the CPU" if self.dev_type == "cpu" else "no key")
        return f"dispatcher, {self.key} key, {sum(self.kinds.values())} aten calls on the device"

    @property
    def roundtrip_source(self) -> str:
        """What measured `roundtrips`, or "not measured: why"."""
        if self.key is None:
            return "not measured: " + self.source.removeprefix("none: ")
        calls = sum(self.kinds.values())
        return f"dispatcher nesting, {calls} aten calls on the device, {self.nested} inside its kernels"

    def left_device(self) -> dict[str, int]:
        """Calls that left the device by this record: fallbacks by op, round-trips by label."""
        out = dict(self.fallbacks)
        out.update((roundtrip_label(op), n) for op, n in self.roundtrips.items())
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        tensor = _on_device(args, self.dev_type)
        if tensor is None:
            tensor = _on_device(kwargs, self.dev_type)
        if self.key is None or (tensor is None and _factory_device(kwargs) != self.dev_type):
            return func(*args, **kwargs)
        name = op_name(func)
        kind = classify(name, self.key)
        self.kinds[kind] += 1
        self.calls[(name, kind)] += 1
        if _number_for_tensor(func, args):
            # Called as the Scalar overload, unwatched inside: the number keeps its wrapped-
            # number semantics (type promotion, precision), which no tensor made here has.
            sibling = _scalar_sibling(func, args)
            if sibling is not None:
                return sibling(*args, **kwargs)
            args = _as_tensors(func, args)  # no Scalar overload: a 0-dim tensor of its kind
        if self._frames:
            self._inside_kernel(name, args, kwargs)
        if kind == FALLBACK:
            self.fallbacks[name] += 1
        elif kind == MISSING:
            self.missing[name] += 1
        elif kind == COMPOSITE:
            # The composite's kernel, called by its alias key (asking for the backend key would
            # get the backend fallback: torch's callBoxedForDispatchKey skips the computed
            # table), with this watch pushed again so the composite's own calls come back here.
            alias = getattr(torch._C.DispatchKey, composite_alias(name) or "")
            return self._watched(func, args, kwargs, alias)
        elif kind == KERNEL and not types and not is_transfer(name) and _plain(tensor, kwargs):
            return self._watched(func, args, kwargs, self._backend, name)
        return func(*args, **kwargs)

    def _inside_kernel(self, name: str, args: tuple, kwargs: dict[str, Any]) -> None:
        """A call made while a kernel of the device's own runs: a copy across the host boundary
        marks the innermost such kernel."""
        self.nested += 1
        if is_transfer(name) and crosses_host(args, kwargs, self.dev_type):
            self._frames[-1][1] = True

    def _watched(self, func, args: tuple, kwargs: dict, key: Any, kernel: str | None = None):  # noqa: ANN001
        """`func`'s kernel for `key`, run with this watch pushed again so the calls it makes come
        back here; `kernel` (an op name) opens a frame for a kernel-kind call, counted in
        `roundtrips` if a host copy marked it."""
        call = (func, tuple(map(id, args)))
        if call == self._running:  # the kernel handed its own call back (aten::detach)
            return func(*args, **kwargs)
        outer, self._running = self._running, call
        frame = [kernel, False]
        if kernel is not None:
            self._frames.append(frame)
        # Pushed straight onto the stack: `with self` would redo the mode flags the outer entry
        # set, a cost on every kernel and composite call.
        _push_mode(self)
        try:
            return func._op_dk(key, *args, **kwargs)
        finally:
            _pop_mode(None)
            self._running = outer
            if kernel is not None:
                self._frames.pop()
                if frame[1]:
                    self.roundtrips[kernel] += 1
