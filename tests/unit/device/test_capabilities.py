"""The capability probe and what stands in for a missing capability (device/capabilities.py,
device/backends/base.py): each instrument asks the adapter, never the backend directly."""

from __future__ import annotations

import pytest
import torch

from trainready.core.case import Case
from trainready.core.context import CaseContext
from trainready.core.worker import execute_case
from trainready.device import runtime
from trainready.device.backends import base
from trainready.device.capabilities import (
    ABSENT,
    NATIVE,
    SUBSTITUTE,
    Capability,
    MissingCapability,
    _check,
    not_native,
)

SYNC_REFUSAL = "Backend doesn't support synchronizing all streams on device"


class Scripted(base.Backend):
    """An adapter whose capabilities are given, counting how often it is probed."""

    def __init__(self, caps: list[Capability]):
        super().__init__("fakedev")
        self.caps = caps
        self.probes = 0

    def _checks(self) -> list[Capability]:
        self.probes += 1
        return self.caps


def _refuse() -> None:
    raise RuntimeError(SYNC_REFUSAL + "\nsecond line")


def test_a_check_is_native_substitute_or_absent_with_the_backends_own_words() -> None:
    assert _check("x", lambda: None, substitute="s") == Capability("x", NATIVE)
    sub = _check("synchronize", _refuse, substitute="copy")
    assert (sub.status, sub.how) == (SUBSTITUTE, "copy")
    assert sub.why == f"RuntimeError: {SYNC_REFUSAL}"  # one line, the backend's message
    gone = _check("memory_stats", _refuse, unmeasured="memory not measured")
    assert (gone.status, gone.how) == (ABSENT, "memory not measured")


def test_the_probe_runs_once_per_adapter_and_unknown_names_count_as_native() -> None:
    backend = Scripted([Capability("events", ABSENT, "no", "wall")])
    assert not backend.has("events")
    assert not backend.has("events")
    assert backend.has("pinned_memory")  # not probed: nothing said it is missing
    assert backend.probes == 1


def test_only_capabilities_that_are_not_native_are_recorded() -> None:
    caps = (Capability("events", NATIVE), Capability("synchronize", SUBSTITUTE, "w", "copy"))
    assert not_native(caps) == [
        {"name": "synchronize", "status": SUBSTITUTE, "why": "w", "how": "copy"}
    ]


def test_the_cpu_is_not_probed_and_lacks_nothing() -> None:
    assert base.Backend("cpu").probe() == ()
    assert runtime.device_capabilities("cpu") == []


def test_synchronize_uses_the_copy_where_the_backend_cannot(monkeypatch) -> None:
    backend = Scripted([Capability("synchronize", SUBSTITUTE, SYNC_REFUSAL, "copy")])
    copied: list[torch.device] = []
    monkeypatch.setattr(base, "sync_by_copy", copied.append)
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda dev: _refuse())
    backend.synchronize(torch.device("cpu"))  # the accelerator's own would raise
    assert copied == [torch.device("cpu")]


def test_sync_by_copy_reads_a_scalar_back() -> None:
    base.sync_by_copy(torch.device("cpu"))  # the CPU stands in for an in-order device queue
    assert base._sync_scalars[torch.device("cpu")].item() == 1.0


def _no_autocast(monkeypatch) -> None:
    backend = Scripted([Capability("autocast", ABSENT, "no autocast", "unsupported")])
    monkeypatch.setattr(runtime, "adapter", lambda dev_type: backend)


def test_autocast_without_the_capability_is_a_missing_capability(monkeypatch) -> None:
    _no_autocast(monkeypatch)
    with pytest.raises(MissingCapability, match="has no autocast"):
        runtime.autocast("cpu", "bf16")


def test_autocast_with_the_capability_is_torchs(monkeypatch) -> None:
    with runtime.autocast("cpu", "bf16"):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16


class _NeedsAutocast:
    """A suite whose one case enters autocast, as a bf16 parity or train case does."""

    def execute(self, case: Case, ctx: CaseContext):
        with runtime.autocast(ctx.device, "bf16"):
            raise AssertionError("unreachable: the backend has no autocast")


class _Fails:
    def execute(self, case: Case, ctx: CaseContext):
        raise RuntimeError(SYNC_REFUSAL)


def _case() -> Case:
    return Case(suite="s", name="c")


def _ctx() -> CaseContext:
    return CaseContext(device="cpu", dtype="bf16", budget_s=10.0)


def test_a_case_needing_a_missing_capability_is_unsupported_not_failed(monkeypatch) -> None:
    _no_autocast(monkeypatch)
    outcome = execute_case(_NeedsAutocast(), _case(), _ctx())
    assert outcome.status == "unsupported"
    assert "has no autocast" in outcome.diagnostics["reason"]


def test_any_other_error_still_fails_the_case() -> None:
    outcome = execute_case(_Fails(), _case(), _ctx())
    assert outcome.status == "fail_run"
    assert SYNC_REFUSAL in outcome.diagnostics["error"]
