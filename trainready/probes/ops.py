"""Ops probe: which aten ops a region executes and on which device, its host round-trips, and the
ops a backend ran on the CPU as a fallback.

Two generic layers, active together inside `with OpsProbe(device) as probe:`:

- a TorchDispatchMode sees every aten op with its tensors: op counts per device type, copies that
  cross devices (`_to_copy`/`copy_` between the device and the CPU), scalar reads
  (`_local_scalar_dense`: `.item()`, `if tensor:`), ops whose output shape depends on data (they
  sync an accelerator), and ops run with only CPU tensors while the device under test is another
  (work that ran on the host);
- a TorchFunctionMode sees the Python calls that ask for host data (`.item()`, `.cpu()`,
  `.to("cpu")`, `.tolist()`, `.numpy()`, `bool()`/`int()`/`float()` of a tensor) with the line of
  user code that made them. On the CPU those calls cost nothing; on an accelerator each is a
  device-to-host copy and a sync, so they are reported on every device.

CPU fallbacks come from two sources, kept apart:

- the dispatcher (`device.dispatch.DispatchWatch`), for every aten call with the device's
  tensors: the device's own kernel, a composite, or the backend fallback, counted per call. It
  needs no vendor and sees the silent boxed CPU fallback of PrivateUse1 plugins;
- the backend's own record, where it keeps one (`device.fallback_watch`: Neuron, XLA, the MPS /
  XPU / NPU warnings), which also sees fallbacks made inside a backend's own kernels.

Apart from both: the ops whose own kernel copied to or from the host while it ran
(`dispatch_roundtrips`, "host round-trip inside aten::X"), seen by the dispatcher watch's nesting.
"""

from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from trainready.device import fallback_watch
from trainready.device.dispatch import DispatchWatch, device_types, roundtrip_label

# Python-level calls that read device data on the host.
HOST_CALLS = {
    torch.Tensor.item: "Tensor.item",
    torch.Tensor.cpu: "Tensor.cpu",
    torch.Tensor.tolist: "Tensor.tolist",
    torch.Tensor.numpy: "Tensor.numpy",
    torch.Tensor.__bool__: "bool(tensor)",
    torch.Tensor.__int__: "int(tensor)",
    torch.Tensor.__float__: "float(tensor)",
}
# aten ops whose output size depends on the data: an accelerator must sync to size the output.
DATA_DEPENDENT = frozenset(
    {
        "aten.nonzero",
        "aten.masked_select",
        "aten.unique_dim",
        "aten._unique2",
        "aten.repeat_interleave",
    }
)
COPIES = frozenset({"aten._to_copy", "aten.copy_", "aten.to"})
SCALAR_READ = "aten._local_scalar_dense"
_SKIP_DIRS = (str(Path(torch.__file__).parent), str(Path(__file__).parent))


def user_site() -> str:
    """file:line of the innermost frame outside torch and this probe; an installed package's
    file is named from the package down (`transformers/masking_utils.py:761`)."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not frame.filename.startswith(_SKIP_DIRS) and "<frozen" not in frame.filename:
            path = frame.filename.rpartition("site-packages/")[2]
            return f"{path}:{frame.lineno}"
    return "?"


def fell_back(record: dict[str, Any] | None) -> dict[str, int]:
    """Every op an `OpsReport.to_json()` record says fell back to the host, by either source,
    with the larger of the two counts, and each op whose own kernel made a host round-trip (by
    its label, "host round-trip inside aten::X")."""
    record = record or {}
    both = dict(record.get("dispatch_fallbacks") or {})
    for op, n in (record.get("fallbacks") or {}).items():
        both[op] = max(n, both.get(op, 0))
    for op, n in (record.get("dispatch_roundtrips") or {}).items():
        both[roundtrip_label(op)] = n
    return both


@dataclass
class OpsReport:
    device: str
    ops: Counter = field(default_factory=Counter)  # "aten.mm@cuda" -> count
    host_calls: Counter = field(default_factory=Counter)  # ("Tensor.item", "file:line") -> n
    host_copies: Counter = field(default_factory=Counter)  # "aten._to_copy cuda->cpu" -> n
    scalar_reads: int = 0
    data_dependent: Counter = field(default_factory=Counter)
    host_ops: Counter = field(default_factory=Counter)  # ops on CPU tensors only, device != cpu
    fallbacks: dict[str, int] = field(default_factory=dict)  # from the backend's own record
    fallback_source: str = ""
    fallback_complete: bool = False  # an empty backend record means nothing fell back
    # The dispatcher's record: None where it cannot tell (the CPU, a device with no backend key).
    dispatch_key: str | None = None
    dispatch_kinds: Counter = field(default_factory=Counter)  # kernel/composite/... -> calls
    dispatch_fallbacks: Counter = field(default_factory=Counter)  # "aten::add.out" -> calls
    dispatch_missing: Counter = field(default_factory=Counter)  # ops with no kernel at all
    dispatch_source: str = ""
    # Calls of each op whose own kernel copied across the host boundary (dispatcher nesting).
    dispatch_roundtrips: Counter = field(default_factory=Counter)
    roundtrip_source: str = "not measured: the ops probe did not run"
    recorded: bool = True  # False: the probe could not watch the region (`unrecorded`)

    @classmethod
    def unrecorded(cls, device: str, why: str) -> OpsReport:
        """The report of a region the probe could not watch: no source measured it (`why`)."""
        return cls(
            device,
            fallback_source=f"none: {why}",
            dispatch_source=f"none: {why}",
            roundtrip_source=f"not measured: {why}",
            recorded=False,
        )

    @property
    def host_round_trips(self) -> int:
        return sum(self.host_calls.values()) + sum(self.host_copies.values()) + self.scalar_reads

    def metrics(self) -> dict[str, float]:
        """Counts, only where the probe watched the region (no count is a claim otherwise)."""
        if not self.recorded:
            return {}
        out = {
            "aten_ops": float(sum(self.ops.values())),
            "unique_aten_ops": float(len({k.split("@")[0] for k in self.ops})),
            "host_round_trips": float(self.host_round_trips),
            "fallback_ops": float(
                len(self.fallbacks.keys() | self.dispatch_fallbacks.keys()) + len(self.host_ops)
            ),
        }
        if self.dispatch_key is not None:  # measured only where the dispatcher watched
            out["kernel_roundtrip_ops"] = float(len(self.dispatch_roundtrips))
        return out

    def fell_back(self) -> dict[str, int]:
        return fell_back(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "ops": dict(self.ops.most_common()),
            "host_calls": [
                {"op": op, "site": site, "count": n}
                for (op, site), n in self.host_calls.most_common()
            ],
            "host_copies": dict(self.host_copies),
            "scalar_reads": self.scalar_reads,
            "data_dependent": dict(self.data_dependent),
            "host_ops": dict(self.host_ops.most_common()),
            "fallbacks": self.fallbacks,
            "fallback_source": self.fallback_source,
            "fallback_complete": self.fallback_complete,
            "dispatch_key": self.dispatch_key,
            "dispatch_kinds": dict(self.dispatch_kinds),
            "dispatch_fallbacks": dict(self.dispatch_fallbacks.most_common()),
            "dispatch_missing": dict(self.dispatch_missing),
            "dispatch_source": self.dispatch_source,
            "dispatch_roundtrips": dict(self.dispatch_roundtrips.most_common()),
            "roundtrip_source": self.roundtrip_source,
            "recorded": self.recorded,
        }


class _Dispatch(TorchDispatchMode):
    def __init__(self, report: OpsReport):
        super().__init__()
        self.r = report
        self.dev_type = torch.device(report.device).type

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        ins = device_types((args, kwargs), set())
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        outs = device_types(out, set())
        r = self.r
        for d in sorted(ins | outs) or ["none"]:
            r.ops[f"{name}@{d}"] += 1
        if name == SCALAR_READ:
            r.scalar_reads += 1
        if name in DATA_DEPENDENT:
            r.data_dependent[name] += 1
        if name in COPIES and ins and outs and ins != outs:
            r.host_copies[f"{name} {'/'.join(sorted(ins))}->{'/'.join(sorted(outs))}"] += 1
        elif self.dev_type != "cpu" and (ins | outs) == {"cpu"} and name not in COPIES:
            r.host_ops[name] += 1
        return out


class _Functions(TorchFunctionMode):
    def __init__(self, report: OpsReport):
        super().__init__()
        self.r = report

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        label = HOST_CALLS.get(func)
        if label is None and func is torch.Tensor.to:
            target = kwargs.get("device", args[1] if len(args) > 1 else None)
            if isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu":
                label = "Tensor.to(cpu)"
        if label is not None:
            self.r.host_calls[(label, user_site())] += 1
        return func(*args, **kwargs)


class OpsProbe:
    """`with OpsProbe(device) as probe: ...` then `probe.report` (an OpsReport)."""

    def __init__(self, device: str):
        self.report = OpsReport(device)

    def __enter__(self) -> OpsProbe:
        self._watch = fallback_watch(self.report.device)
        self._watch.__enter__()
        self._functions = _Functions(self.report)
        self._dispatch = _Dispatch(self.report)
        # Outermost of the dispatch modes, so it is called last, after the counting mode saw the
        # call: it runs composite and kernel-kind calls itself (skipping the modes above it) to
        # see the calls they make.
        self._kernels = DispatchWatch(self.report.device)
        self._functions.__enter__()
        self._kernels.__enter__()
        self._dispatch.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._dispatch.__exit__(*exc)
        self._kernels.__exit__(*exc)
        self._functions.__exit__(*exc)
        self._watch.__exit__(*exc)
        r, k = self.report, self._kernels
        r.fallbacks, r.fallback_source = dict(self._watch.ops), self._watch.source
        r.fallback_complete = self._watch.complete
        r.dispatch_key, r.dispatch_source = k.key, k.source
        r.dispatch_kinds, r.dispatch_fallbacks, r.dispatch_missing = k.kinds, k.fallbacks, k.missing
        r.dispatch_roundtrips, r.roundtrip_source = k.roundtrips, k.roundtrip_source
