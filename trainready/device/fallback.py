"""Ops a backend ran on the CPU instead of the device, read from each backend's own record."""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import torch

from trainready.device.runtime import MiB, synchronize

# -- CPU fallbacks, as each backend records them ----------------------------------------------------
# Each backend's own record of the ops it ran on the CPU, as its source writes it (read June 2026;
# tests/data/fallbacks/README.md has recorded examples of every format and where they come from):
# - torch_xla, and torch-neuronx 2.9 and older (which run on it, device "xla"): the boxed fallback
#   bumps a metrics counter named after the op, `aten::nonzero`; lowered ops count as `xla::...`
#   (https://github.com/pytorch/xla/blob/master/torch_xla/csrc/aten_cpu_fallback.cpp).
# - Neuron native (TorchNeuron, torch-neuronx 2.10+, device "neuron"): `torch_neuronx.get_fallback_ops()`
#   is the *set* of op names that fell back since `clear_op_tracking()` (no counts); the matching
#   log line is dropped by its logger, so there is no warning to parse (torch_neuronx/neuron.py,
#   csrc/core/NeuronOpTracking.cpp and NeuronLogging.h of https://github.com/aws-neuron/torch-neuronx,
#   read in the public mirror github.com/parmoham-aws/test-repo-parmoham). Ops with no Neuron kernel
#   always fall back; TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1 makes a failing Neuron kernel
#   raise instead of retrying on the CPU.
# - MPS (https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/mps/MPSFallback.mm): "The operator
#   'aten::foo' is not currently supported on the MPS backend and will fall back to run on the CPU."
#   through TORCH_WARN_ONCE, which warn-always turns into one warning per call. Ops without an MPS
#   kernel fall back only with PYTORCH_ENABLE_MPS_FALLBACK=1 (else NotImplementedError); a short list
#   of ops always does.
# - XPU (https://github.com/intel/torch-xpu-ops/blob/main/src/ATen/native/xpu/XPUFallback.template):
#   ops on its fallback list always fall back, other missing ops only with PYTORCH_ENABLE_XPU_FALLBACK=1
#   (PYTORCH_XPU_FALLBACK_OP forces named ops). By default one warning that names no op ("Aten Op
#   fallback from XPU to CPU happens."); with PYTORCH_DEBUG_XPU_FALLBACK=1 one per call, "The operator
#   'aten::foo on the XPU backend is falling back to run on the CPU." (no closing quote). Builds of
#   early 2024 used the MPS wording.
# - Ascend NPU (torch_npu/csrc/aten/VariableFallbackKernel.cpp and core/npu/NPUException.cpp of
#   https://gitcode.com/Ascend/pytorch): the MPS wording after "CAUTION: ", once per op per process,
#   through c10's base warning handler, i.e. straight to stderr and never a Python warning; only on
#   rank 0 and not with TORCH_NPU_DISABLED_WARNING=1. TORCH_NPU_FALLBACK_CPU_DISABLE=1 (Ascend/pytorch
#   pull request 44801, 2026) raises instead of falling back.
# The watch reports these switches and never sets them: the backends read them once, when they load,
# and they change what a case measures. An op that is missing while its switch is off raises, and the
# suites already report that case as unsupported or failed.
_FALLBACK_WARNING = re.compile(
    r"operator '(?P<op>[\w:.]+)'?[^'\n]*?(?:will fall ?back|is falling back) to run on the CPU"
)
_XPU_UNNAMED_WARNING = re.compile(r"Aten Op fallback from XPU to CPU happen")
XPU_UNNAMED_FALLBACK = "<unnamed XPU fallback: PYTORCH_DEBUG_XPU_FALLBACK=1 names the ops>"

# device type -> (variable, what it does) for the switches that decide or reveal CPU fallbacks.
FALLBACK_SWITCHES: dict[str, tuple[tuple[str, str], ...]] = {
    "mps": (
        ("PYTORCH_ENABLE_MPS_FALLBACK", "1: ops without an MPS kernel run on the CPU, else raise"),
    ),
    "xpu": (
        ("PYTORCH_ENABLE_XPU_FALLBACK", "1: ops without an XPU kernel run on the CPU, else raise"),
        ("PYTORCH_DEBUG_XPU_FALLBACK", "1: each fallback warning names its op"),
        ("PYTORCH_XPU_FALLBACK_OP", "ops forced onto the CPU"),
    ),
    "npu": (
        ("TORCH_NPU_FALLBACK_CPU_DISABLE", "1: a fallback raises instead of running on the CPU"),
        ("TORCH_NPU_DISABLED_WARNING", "1: torch_npu prints no warnings, fallbacks included"),
    ),
    "neuron": (
        (
            "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS",
            "1: a failing Neuron kernel raises instead of rerunning on the CPU",
        ),
    ),
}


def fallback_switches(device_type: str) -> dict[str, str | None]:
    """The fallback switches of a device type, as this process's environment sets them."""
    return {name: os.environ.get(name) for name, _ in FALLBACK_SWITCHES.get(device_type, ())}


def _switches_text(device_type: str) -> str:
    return "; ".join(
        f"{name}={os.environ.get(name) or 'unset'} ({what})"
        for name, what in FALLBACK_SWITCHES.get(device_type, ())
    )


def parse_fallback_warnings(messages: list[str]) -> dict[str, int]:
    """Ops named by CPU-fallback warnings or log lines -> how many times each was named.

    Reads the MPS / NPU / early-XPU wording and XPU's debug wording; XPU's default warning, which
    names no op, counts under XPU_UNNAMED_FALLBACK.
    """
    found: dict[str, int] = {}
    for text in messages:
        for m in _FALLBACK_WARNING.finditer(text):
            found[m.group("op")] = found.get(m.group("op"), 0) + 1
        unnamed = len(_XPU_UNNAMED_WARNING.findall(text))
        if unnamed:
            found[XPU_UNNAMED_FALLBACK] = found.get(XPU_UNNAMED_FALLBACK, 0) + unnamed
    return found


# torch_xla reads a scalar to the host (`.item()`, `bool(t)`) through its CPU fallback, so it
# counts `aten::_local_scalar_dense`: a host read on every device, which the ops probe reports as
# a host round-trip, not an op that should have run on the device.
XLA_SCALAR_READ = "aten::_local_scalar_dense"


def xla_fallback_counts(counters: dict[str, int]) -> dict[str, int]:
    """torch_xla metrics counters -> the `aten::` ones (ops that ran on the CPU), non-zero; the
    scalar read (`XLA_SCALAR_READ`) left out."""
    return {
        k: int(v)
        for k, v in counters.items()
        if k.startswith("aten::") and v and k != XLA_SCALAR_READ
    }


def _xla_counters() -> dict[str, int]:
    import torch_xla.debug.metrics as met  # noqa: PLC0415 - only on XLA devices

    return {name: int(met.counter_value(name) or 0) for name in met.counter_names()}


def neuron_fallback_ops(names: list[str] | set[str]) -> dict[str, int]:
    """`torch_neuronx.get_fallback_ops()` -> {op: 1}: it keeps a set, so 1 means "at least once".

    Its C++ fallback records `aten::name.overload`; its Python ops may record a bare name, which gets
    the `aten::` namespace so the same op reads the same on every backend.
    """
    return {(n if "::" in n else f"aten::{n}"): 1 for n in (str(x) for x in names) if n}


def _neuron_op_tracking() -> Any:
    """The torch_neuronx module if it has the op-tracking API (TorchNeuron), else None."""
    try:
        import torch_neuronx  # noqa: PLC0415 - only on Neuron devices
    except ImportError:
        return None
    api = ("get_fallback_ops", "clear_op_tracking")
    return torch_neuronx if all(callable(getattr(torch_neuronx, a, None)) for a in api) else None


class _StderrSpan:
    """What this process writes to file descriptor 2 from now until `read()`, where that is a
    regular file, as in a runner worker (core/worker.py sends both streams to its log). torch_npu's
    fallback warnings go there and nowhere else. Nothing is redirected; Linux only (/proc)."""

    MAX_BYTES = 8 * MiB

    def __init__(self) -> None:
        self.start: int | None = None
        if os.path.isfile("/proc/self/fd/2"):
            try:
                self.start = os.fstat(2).st_size
            except OSError:
                self.start = None

    def read(self) -> str | None:
        if self.start is None:
            return None
        sys.stderr.flush()
        try:
            with open("/proc/self/fd/2", "rb") as f:
                end = os.fstat(f.fileno()).st_size
                start = max(min(self.start, end), end - self.MAX_BYTES)
                f.seek(start)
                return f.read(end - start).decode("utf-8", errors="replace")
        except OSError:
            return None


class FallbackWatch:
    """`with fallback_watch(device) as w: ...` then `w.ops` ({op: count}), `w.source` and
    `w.switches`.

    On the CPU there is nothing to fall back from (`source` says so). XLA: the difference of its
    `aten::` counters. Neuron: TorchNeuron's op tracking, cleared on entry (a set: each op counts 1).
    Other accelerators: the CPU-fallback warnings, with warn-always on so a warning given once in an
    earlier case is given again; for NPU also what the process wrote to stderr meanwhile. `source`
    says which record was read, its limits, and the state of the backend's fallback switches.
    `complete` says whether an empty record means that nothing fell back: true for the counters
    (XLA, TorchNeuron) and for backends known to warn on every fallback (MPS, XPU); false where a
    fallback can leave no trace (torch_npu names an op once per process; a PrivateUse1 plugin's
    fallback is silent unless its vendor made it warn).
    """

    def __init__(self, device: str):
        self.device = str(device)
        self.device_type = self.device.partition(":")[0]
        self.ops: dict[str, int] = {}
        self.switches = fallback_switches(self.device_type)
        self.source = "none: the device is the CPU" if self.device_type == "cpu" else ""
        self._mode = "none" if self.device_type == "cpu" else "warnings"
        self._neuron: Any = None
        self._stderr: _StderrSpan | None = None
        self.complete = self.device_type in ("xla", "mps", "xpu")

    def _sync(self) -> None:
        import contextlib

        with contextlib.suppress(Exception):  # best effort: the record is read either way
            synchronize(self.device)

    def _describe(self, how: str) -> str:
        switches = _switches_text(self.device_type)
        return f"{how}; {switches}" if switches else how

    def __enter__(self) -> FallbackWatch:
        import warnings

        if self._mode == "none":
            return self
        if self.device_type == "xla":
            self._mode = "xla"
            self.source = (
                "torch_xla metrics aten:: counters (ops its CPU fallback ran; scalar reads, "
                f"{XLA_SCALAR_READ}, are host round-trips and counted as such)"
            )
            self._before = xla_fallback_counts(_xla_counters())
            return self
        if self.device_type == "neuron":
            self._neuron = _neuron_op_tracking()
        if self._neuron is not None:
            self._mode = "neuron"
            self.source = self._describe(
                "torch_neuronx.get_fallback_ops() (op tracking cleared at the start; a set, so "
                "each op counts once)"
            )
            self._sync()
            self._neuron.clear_op_tracking()
            self.complete = True
            return self
        if self.device_type == "neuron":
            how = (
                "CPU-fallback warnings (warn-always); torch_neuronx has no get_fallback_ops() here "
                "and TorchNeuron prints no fallback warnings, so its fallbacks may go unseen"
            )
        elif self.device_type == "npu":
            self._stderr = _StderrSpan()
            how = "torch_npu CPU-fallback warnings on stderr and Python warnings (torch_npu names "
            how += "each op once per process: ops that fell back in an earlier case are not named"
            if self._stderr.start is None:
                how += "; stderr is not a file here, so only Python warnings are read"
            how += ")"
        elif self.device_type == "xpu":
            how = "CPU-fallback warnings (warn-always)"
            if os.environ.get("PYTORCH_DEBUG_XPU_FALLBACK", "0") in ("", "0"):
                how += (
                    f"; without PYTORCH_DEBUG_XPU_FALLBACK=1 they count as {XPU_UNNAMED_FALLBACK}"
                )
        elif self.device_type == "mps":
            how = "CPU-fallback warnings (warn-always)"
        else:
            how = (
                "CPU-fallback warnings (warn-always), if the backend gives any: PyTorch's own "
                "cpu_fallback is silent, so their absence proves nothing"
            )
        self.source = self._describe(how)
        self._warn_always = torch.is_warn_always_enabled()
        torch.set_warn_always(True)
        self._catch = warnings.catch_warnings(record=True)
        self._records = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mode == "none":
            return
        if self._mode == "xla":
            after = xla_fallback_counts(_xla_counters())
            self.ops = {k: v - self._before.get(k, 0) for k, v in after.items()}
            self.ops = {k: v for k, v in self.ops.items() if v > 0}
            return
        if self._mode == "neuron":
            self._sync()
            self.ops = neuron_fallback_ops(self._neuron.get_fallback_ops())
            return
        self._catch.__exit__(*exc)
        torch.set_warn_always(self._warn_always)
        texts = [str(w.message) for w in self._records]
        if self._stderr is not None:
            texts.append(self._stderr.read() or "")
        self.ops = parse_fallback_warnings(texts)


def fallback_watch(device: str) -> FallbackWatch:
    return FallbackWatch(device)
