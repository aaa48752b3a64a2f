"""What ran where: every aten overload a case dispatched on the device, and its dispatch class.

Three records, active together around the device's runs (`AtenWatch`):

- a recording dispatch mode: every aten overload that reached the device's dispatch (after
  autograd and the decompositions above it), on every device, the CPU included;
- the dispatcher rule (device/dispatch.py `DispatchWatch`): per overload, the backend's own
  `kernel`, a `composite`, the backend `fallback` (host) or `missing`, and the kernels that made
  a host round-trip (`roundtrip`). None on the CPU: there every class is "unknown";
- the backend's own fallback record (device/fallback.py), where it keeps one (torch_xla): an op
  it names is a `fallback` whatever the dispatcher said.

`classes()` merges them: {"aten::add.Tensor": class}, the worst class seen for each overload.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainready.device import fallback_watch
from trainready.device.dispatch import DispatchWatch, op_name

# Worst first: the class a report gives an entry is the worst of its overloads'.
CLASSES = ("missing", "fallback", "roundtrip", "composite", "kernel", "unknown")


def worst(classes: list[str]) -> str:
    """The worst of dispatch classes ("unknown" for none)."""
    return min(classes, key=CLASSES.index, default="unknown")


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.seeded: set[str] = set()  # ops that draw random numbers, since `AtenWatch.clear`

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.names.add(op_name(func))
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.seeded.add(op_name(func))
        return func(*args, **(kwargs or {}))


class _Bare(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return func(*args, **(kwargs or {}))


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(
                torch.nan_to_num(a.detach()) if a.is_floating_point() else a.detach(),
                torch.nan_to_num(b.detach()) if b.is_floating_point() else b.detach(),
            )
        )
    return a == b


def mode_changes(run: Callable[[], list], expected: list) -> bool:
    """Whether `run` (a CPU run that gave `expected` unwatched) gives another result under a
    dispatch mode that only calls through. torch 2.13's `linalg.matrix_rank(out=)` leaves `out`
    unwritten under any mode: a watched device run would be blamed for the watch."""
    with _Bare():
        got = run()
    return len(got) != len(expected) or not all(map(_same, got, expected))


class AtenWatch:
    """`with AtenWatch(device) as w: ...` (as many times as wanted), then `w.classes()`."""

    def __init__(self, device: str):
        self.device = device
        self.recorder = _Recorder()
        self.dispatch = DispatchWatch(device)
        self.vendor: dict[str, int] = {}
        self.vendor_source = ""

    def __enter__(self) -> AtenWatch:
        self._vendor = fallback_watch(self.device)
        self._vendor.__enter__()
        self.dispatch.__enter__()  # outermost of the two modes: it sees what the recorder passes
        self.recorder.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.recorder.__exit__(*exc)
        self.dispatch.__exit__(*exc)
        self._vendor.__exit__(*exc)
        for op, n in self._vendor.ops.items():
            self.vendor[op] = self.vendor.get(op, 0) + n
        self.vendor_source = self._vendor.source

    def take_seeded(self) -> list[str]:
        """The random-number ops run since the last call (aten's `nondeterministic_seeded`
        tag): their outputs differ from the CPU's by design."""
        seeded, self.recorder.seeded = sorted(self.recorder.seeded), set()
        return seeded

    @property
    def measured(self) -> bool:
        """Whether the dispatcher could tell classes on this device (not on the CPU)."""
        return self.dispatch.key is not None

    def classes(self) -> dict[str, str]:
        seen: dict[str, list[str]] = {name: [] for name in self.recorder.names}
        for (name, kind), _ in self.dispatch.calls.items():
            seen.setdefault(name, []).append(kind)
        for name in self.dispatch.roundtrips:
            seen.setdefault(name, []).append("roundtrip")
        for op in self.vendor:
            seen.setdefault(op if op.startswith("aten::") else f"aten::{op}", []).append("fallback")
        out = {}
        for name in sorted(seen):
            kinds = seen[name]
            out[name] = worst(kinds) if kinds or self.measured else "unknown"
        return out

    def source(self) -> str:
        text = self.dispatch.source
        if self.vendor_source and not self.vendor_source.startswith("none"):
            text += f"; the backend's record: {self.vendor_source}"
        return text

    def counts(self, classes: dict[str, str]) -> dict[str, float]:
        """Metrics: distinct overloads, and per class where the dispatcher measured classes."""
        out = {"aten_ops": float(len(classes))}
        if self.measured:
            for kind, key in (("fallback", "fallback_ops"), ("missing", "missing_ops")):
                out[key] = float(sum(c == kind for c in classes.values()))
            out["roundtrip_ops"] = float(sum(c == "roundtrip" for c in classes.values()))
        return out
