"""The vendor hooks of `device.fallback.FallbackWatch`, driven by recorded outputs of backends this CPU-only
machine lacks (tests/data/fallbacks/README.md says where each record comes from)."""

import json
import os
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch

from tests.support import paths
from trainready.device import (
    XPU_UNNAMED_FALLBACK,
    FallbackWatch,
    fallback,
    fallback_switches,
    fallback_watch,
    neuron_fallback_ops,
    parse_fallback_warnings,
    xla_fallback_counts,
)

DATA = paths.DATA / "fallbacks"


def _text(name: str) -> str:
    return (DATA / name).read_text()


# -- the parsers, on each vendor's own wording ------------------------------------------------------
def test_mps_recorded_warnings_name_each_op_and_count_repeats():
    assert parse_fallback_warnings([_text("mps_warnings.txt")]) == {
        "aten::sgn.out": 1,
        "aten::_upsample_bilinear2d_aa.out": 2,
        "aten::nonzero": 1,
    }


def test_npu_recorded_stderr_names_each_op():
    """The "CAUTION: " prefix and c10's "[W file:line] Warning:" framing; the sparse error raises and
    is not a fallback."""
    assert parse_fallback_warnings([_text("npu_stderr.txt")]) == {
        "aten::_linalg_eigh.eigenvalues": 1,
        "aten::_transformer_encoder_layer_fwd": 1,
        "aten::fmax.out": 1,
    }


def test_xpu_debug_wording_without_closing_quote():
    """PYTORCH_DEBUG_XPU_FALLBACK=1: "The operator 'aten::dot on the XPU backend is falling back"
    (no quote after the name); the forced-op registration notice is not a fallback."""
    assert parse_fallback_warnings([_text("xpu_debug_warnings.txt")]) == {
        "aten::_linalg_eigh.eigenvalues": 1,
        "aten::dot": 2,
    }


def test_xpu_default_wording_counts_unnamed_fallbacks():
    assert parse_fallback_warnings([_text("xpu_default_warnings.txt")]) == {
        XPU_UNNAMED_FALLBACK: 2,
        "aten::_cdist_forward": 1,
    }


def test_a_message_never_pairs_an_op_with_a_later_line():
    text = "The operator 'aten::mm' is deprecated\nsomething will fall back to run on the CPU"
    assert parse_fallback_warnings([text]) == {}


def test_neuron_names_get_the_aten_namespace():
    record = json.loads(_text("neuron_fallback_ops.json"))
    assert neuron_fallback_ops(record["fallback_ops"]) == record["expected"]


def test_xla_counters_keep_the_aten_ones_only():
    record = json.loads(_text("xla_counters.json"))
    assert xla_fallback_counts(record["after"]) == {  # scalar reads left out: host round-trips
        "aten::silu_out": 64,
        "aten::nonzero": 2,
    }


# -- the watch, with the vendor module or record monkeypatched --------------------------------------
def test_xla_watch_reports_the_counter_difference(monkeypatch):
    record = json.loads(_text("xla_counters.json"))
    reads = iter([record["before"], record["after"]])
    monkeypatch.setattr(fallback, "_xla_counters", lambda: next(reads))
    with fallback_watch("xla:0") as w:
        pass
    assert w.ops == record["expected"]
    assert "aten:: counters" in w.source


class _FakeTorchNeuronx(types.ModuleType):
    """torch_neuronx's op-tracking API: a set of names, emptied by clear_op_tracking()."""

    def __init__(self, names: list[str]):
        super().__init__("torch_neuronx")
        self.tracked: set[str] = {"aten::stale_from_an_earlier_case"}
        self.names = names
        self.clears = 0

    def clear_op_tracking(self) -> None:
        self.clears += 1
        self.tracked.clear()

    def get_fallback_ops(self) -> list:
        return list(self.tracked)

    def run_case(self) -> None:
        self.tracked.update(self.names)


def test_neuron_watch_reads_op_tracking_cleared_at_the_start(monkeypatch):
    record = json.loads(_text("neuron_fallback_ops.json"))
    fake = _FakeTorchNeuronx(record["fallback_ops"])
    monkeypatch.setitem(sys.modules, "torch_neuronx", fake)
    monkeypatch.setenv("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", "1")
    with fallback_watch("neuron:0") as w:
        fake.run_case()
    assert fake.clears == 1
    assert w.ops == record["expected"]
    assert "get_fallback_ops" in w.source
    assert "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1" in w.source
    assert w.switches == {"TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": "1"}


@pytest.mark.parametrize("module", [None, types.ModuleType("torch_neuronx")])
def test_neuron_without_op_tracking_falls_back_to_warnings(monkeypatch, module):
    """torch_neuronx missing (None in sys.modules makes the import fail) or without the API."""
    monkeypatch.setitem(sys.modules, "torch_neuronx", module)
    with fallback_watch("neuron") as w:
        warnings.warn(
            "The operator 'aten::nonzero' is not currently supported on the neuron backend and will "
            "fall back to run on the CPU.",
            UserWarning,
            stacklevel=1,
        )
    assert w.ops == {"aten::nonzero": 1}
    assert "no get_fallback_ops" in w.source


def _write_to_fd2(path: Path, before: str, during: str, watch: FallbackWatch) -> None:
    """Point fd 2 at `path` (a worker's log) and write to it before and inside the watch."""
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        os.write(2, before.encode())
        with watch:
            os.write(2, during.encode())
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads stderr through /proc")
def test_npu_watch_reads_what_the_process_wrote_to_stderr(tmp_path, monkeypatch):
    """torch_npu's warnings bypass Python: only the span of the log written inside the watch counts."""
    monkeypatch.delenv("TORCH_NPU_FALLBACK_CPU_DISABLE", raising=False)
    earlier = (
        "[W compiler_depend.ts:51] Warning: CAUTION: The operator 'aten::earlier' is not currently "
        "supported on the NPU backend and will fall back to run on the CPU. (function npu_cpu_fallback)\n"
    )
    watch = fallback_watch("npu:0")
    _write_to_fd2(tmp_path / "worker.log", earlier, _text("npu_stderr.txt"), watch)
    assert watch.ops == {
        "aten::_linalg_eigh.eigenvalues": 1,
        "aten::_transformer_encoder_layer_fwd": 1,
        "aten::fmax.out": 1,
    }
    assert "once per process" in watch.source
    assert "TORCH_NPU_FALLBACK_CPU_DISABLE=unset" in watch.source


def test_npu_watch_says_when_stderr_cannot_be_read(monkeypatch):
    monkeypatch.setattr(fallback._StderrSpan, "__init__", lambda self: setattr(self, "start", None))
    with fallback_watch("npu") as w:
        pass
    assert w.ops == {} and "only Python warnings" in w.source


@pytest.mark.parametrize(
    ("device", "switch", "value"),
    [("mps", "PYTORCH_ENABLE_MPS_FALLBACK", "1"), ("xpu:0", "PYTORCH_ENABLE_XPU_FALLBACK", None)],
)
def test_watch_reports_the_switch_and_never_sets_it(monkeypatch, device, switch, value):
    if value is None:
        monkeypatch.delenv(switch, raising=False)
    else:
        monkeypatch.setenv(switch, value)
    with fallback_watch(device) as w:
        pass
    assert f"{switch}={value or 'unset'}" in w.source
    assert fallback_switches(device.partition(":")[0])[switch] == value
    assert os.environ.get(switch) == value


def test_mps_watch_parses_recorded_warnings_and_restores_warn_always():
    before = torch.is_warn_always_enabled()
    lines = [ln for ln in _text("mps_warnings.txt").splitlines() if "UserWarning: " in ln]
    with fallback_watch("mps") as w:
        assert torch.is_warn_always_enabled()
        for line in lines:
            warnings.warn(line.split("UserWarning: ", 1)[1], UserWarning, stacklevel=1)
    assert torch.is_warn_always_enabled() == before
    assert w.ops == {
        "aten::sgn.out": 1,
        "aten::_upsample_bilinear2d_aa.out": 2,
        "aten::nonzero": 1,
    }


def test_xpu_watch_without_debug_switch_says_ops_are_unnamed(monkeypatch):
    monkeypatch.delenv("PYTORCH_DEBUG_XPU_FALLBACK", raising=False)
    with fallback_watch("xpu") as w:
        warnings.warn(_text("xpu_default_warnings.txt").splitlines()[0], UserWarning, stacklevel=1)
    assert w.ops == {XPU_UNNAMED_FALLBACK: 1}
    assert "PYTORCH_DEBUG_XPU_FALLBACK=1" in w.source
