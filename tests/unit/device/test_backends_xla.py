"""The torch_xla adapter (`device/backends/xla.py`) and its wiring, against a fake torch_xla: runs
in any environment (tests/e2e/test_xla.py runs the real one where torch_xla is installed)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from trainready import api
from trainready.core.config import ConfigError
from trainready.device import backends, default_compile_backend, runtime
from trainready.device.backends import xla
from trainready.device.capabilities import ABSENT, NATIVE, SUBSTITUTE, Capability
from trainready.probes.compile import CompileProbe


class FakeXla:
    """The parts of torch_xla the adapter calls, recording each call in `calls`."""

    def __init__(self, pjrt: str = "CPU", memory_error: str | None = "UNIMPLEMENTED"):
        self.calls: list[str] = []
        self.counters = {"UncachedCompile": 2, "CachedCompile": 1, "ExecuteComputation": 3}
        self.times = {"CompileTime": (2, 3e9, []), "ExecuteTime": (3, 1.5e9, [])}
        self.pjrt = pjrt
        self.memory_error = memory_error

    def modules(self, with_sync: bool = True) -> dict[str, types.ModuleType]:
        top = types.ModuleType("torch_xla")
        top.__version__ = "2.9.0"
        top.device_count = lambda: 1
        if with_sync:
            top.sync = lambda: self.calls.append("sync")
        xm = types.ModuleType("torch_xla.core.xla_model")
        xm.mark_step = lambda: self.calls.append("mark_step")
        xm.wait_device_ops = lambda: self.calls.append("wait_device_ops")
        xm.xla_device_hw = lambda dev: self.pjrt
        xm.get_memory_info = self._memory_info
        met = types.ModuleType("torch_xla.debug.metrics")
        met.counter_names = lambda: list(self.counters)
        met.counter_value = lambda name: self.counters.get(name)
        met.metric_names = lambda: list(self.times)
        met.metric_data = lambda name: self.times.get(name)
        rt = types.ModuleType("torch_xla.runtime")
        rt.device_type = lambda: self.pjrt
        pg = types.ModuleType("torch_xla.distributed.xla_backend")
        return {
            "torch_xla": top,
            "torch_xla.core.xla_model": xm,
            "torch_xla.debug.metrics": met,
            "torch_xla.runtime": rt,
            "torch_xla.distributed.xla_backend": pg,
        }

    def _memory_info(self, dev: Any) -> dict[str, int]:
        if self.memory_error:
            raise RuntimeError(f"Bad StatusOr access: {self.memory_error}")
        return {"bytes_used": 1, "bytes_limit": 2}


@pytest.fixture
def fresh_adapters(monkeypatch):
    """Adapters made anew: one per type and process otherwise, with capabilities probed once."""
    monkeypatch.setattr(backends, "_instances", {})


def _install(monkeypatch, fake: FakeXla, with_sync: bool = True) -> FakeXla:
    for name, module in fake.modules(with_sync).items():
        monkeypatch.setitem(sys.modules, name, module)
    return fake


@pytest.fixture
def fake_xla(monkeypatch, fresh_adapters) -> FakeXla:
    return _install(monkeypatch, FakeXla())


# -- registry and discovery -----------------------------------------------------------------------
def test_xla_has_its_adapter_and_registering_module(fresh_adapters):
    assert isinstance(backends.adapter("xla"), xla.XlaBackend)
    assert backends.registering_module("xla:1") == "torch_xla"
    assert backends.registering_module("XLA") == "torch_xla"
    assert backends.registering_module("cuda:0") is None


def test_no_xla_device_until_torch_xla_is_imported(monkeypatch, fresh_adapters):
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    assert backends.adapter("xla").device_count() == 0
    assert backends.adapter("xla").counters() == {}
    assert "xla" not in runtime._backend_types()


def test_xla_is_listed_and_resolved_once_imported(fake_xla):
    assert "xla:0" in runtime.available_devices()
    assert runtime.resolve("xla") == "xla:0"


def test_naming_xla_imports_torch_xla_first(monkeypatch):
    imported: list[list[str]] = []
    monkeypatch.setattr("trainready.core.imports.import_modules", imported.append)
    monkeypatch.delenv("TRAINREADY_IMPORT", raising=False)
    assert api._import_requested(["my_kernels"], "xla") == ["torch_xla", "my_kernels"]
    assert api._import_requested(["my_kernels", "torch_xla"], "xla:0") == [
        "my_kernels",
        "torch_xla",
    ]  # the user's order stands where they named it
    assert api._import_requested(None, "cpu") == []
    assert imported[0] == ["torch_xla", "my_kernels"]


def test_importing_torch_xla_starts_its_runtime(monkeypatch, fake_xla):
    """Every process that imports it through the run's list (core.imports) starts PJRT at once:
    torch_xla 2.9 reports no device to autograd until then (see XlaBackend.on_import)."""
    from trainready.core.imports import import_modules

    started: list[str] = []
    monkeypatch.setattr(sys.modules["torch_xla"], "device_count", lambda: started.append("pjrt"))
    import_modules(["torch_xla"])
    assert started == ["pjrt"]


# -- lazy execution -------------------------------------------------------------------------------
def test_step_is_a_sync_and_synchronize_also_waits(fake_xla):
    backend = backends.adapter("xla")
    runtime.step_boundary("xla:0")
    assert fake_xla.calls == ["sync"]
    fake_xla.calls.clear()
    runtime.synchronize("xla:0")
    assert fake_xla.calls == ["sync", "wait_device_ops"]
    assert backend.lazy


def test_step_falls_back_to_mark_step_without_sync(monkeypatch, fresh_adapters):
    fake = _install(monkeypatch, FakeXla(), with_sync=False)
    runtime.step_boundary("xla:0")
    assert fake.calls == ["mark_step"]


def test_counters_read_torch_xla_metrics(fake_xla):
    assert backends.adapter("xla").counters() == {
        "xla_compiles": 2,
        "xla_cached_compiles": 1,
        "xla_executions": 3,
        "xla_step_boundaries": 0,  # a counter torch_xla has not created yet reads 0
        "xla_compile_s": 3.0,
        "xla_execute_s": 1.5,
    }


def test_counted_gives_the_rise_in_a_block(fake_xla):
    with backends.counted("xla:0") as rose:
        fake_xla.counters["UncachedCompile"] += 4
        fake_xla.counters["ExecuteComputation"] += 7
    assert rose["xla_compiles"] == 4
    assert rose["xla_executions"] == 7
    assert rose["xla_cached_compiles"] == 0
    with backends.counted("xla:0") as after_reset:  # openxla clears torch_xla's metrics
        fake_xla.counters["UncachedCompile"] = 1
    assert after_reset["xla_compiles"] == 1
    with backends.counted("cpu") as on_cpu:
        pass
    assert on_cpu == {}


def test_compile_probe_reports_the_backend_graphs(fake_xla):
    with CompileProbe("xla:0") as probe:
        fake_xla.counters["UncachedCompile"] += 1
    assert probe.report.backend_counters["xla_compiles"] == 1
    assert probe.report.metrics()["xla_compiles"] == 1
    assert probe.report.to_json()["backend_counters"]["xla_compiles"] == 1
    with CompileProbe() as plain:
        pass
    assert "backend_counters" not in plain.report.to_json()  # additive: absent where unknown


# -- capabilities ---------------------------------------------------------------------------------
_GENERIC = [
    Capability(name, ABSENT, "generic probe", "generic")
    for name in ("accelerator", "synchronize", "events", "memory_stats", "generator")
] + [Capability("autocast", NATIVE), Capability("device_guard", NATIVE)]


def test_capabilities_answered_by_torch_xla(monkeypatch, fake_xla):
    monkeypatch.setattr(xla, "generic_checks", lambda device_type: list(_GENERIC))
    caps = {c.name: c for c in backends.adapter("xla").probe()}
    assert [c.name for c in backends.adapter("xla").probe()] == [c.name for c in _GENERIC]
    assert caps["synchronize"].status == NATIVE
    assert caps["events"].status == SUBSTITUTE
    assert caps["accelerator"].status == SUBSTITUTE
    assert caps["device_guard"].status == SUBSTITUTE  # torch.accelerator's index is not xla's
    assert caps["autocast"].status == NATIVE  # the generic answer stands
    assert caps["memory_stats"].status == ABSENT
    assert "UNIMPLEMENTED" in caps["memory_stats"].why


def test_memory_stats_native_where_torch_xla_has_them(monkeypatch, fresh_adapters):
    _install(monkeypatch, FakeXla(pjrt="TPU", memory_error=None))
    monkeypatch.setattr(xla, "generic_checks", lambda device_type: list(_GENERIC))
    caps = {c.name: c for c in backends.adapter("xla").probe()}
    assert caps["memory_stats"].status == NATIVE


# -- identity, compile, distributed ---------------------------------------------------------------
def test_the_name_says_xla_on_the_cpu(fake_xla):
    props = backends.adapter("xla").properties(__import__("torch").device("xla", 0))
    assert props["name"].startswith("XLA (PJRT CPU) on ")
    assert props["xla_version"] == "2.9.0"


def test_compiled_cases_default_to_openxla(fresh_adapters):
    assert default_compile_backend("xla:0") == "openxla"
    assert default_compile_backend("cpu") == "inductor"


def test_no_process_group_on_pjrt_cpu(fake_xla):
    from trainready.device import default_pg_backend

    with pytest.raises(ConfigError, match="does not run across processes on PJRT's CPU"):
        default_pg_backend("xla:0")


def test_the_xla_process_group_elsewhere(monkeypatch, fresh_adapters):
    _install(monkeypatch, FakeXla(pjrt="TPU"))
    from trainready.device import default_pg_backend

    assert default_pg_backend("xla:0") == "xla"
