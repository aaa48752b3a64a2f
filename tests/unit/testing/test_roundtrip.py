"""The planted host round-trip kernel (`trainready.testing.emu.roundtrip`): registered as the
backend's own PrivateUse1 kernel, removed by its handle, and right where it computes.

Registration needs no device, so it is checked here (nothing is left registered). Computing needs
emu, which is never imported in the pytest process (it would make `auto` resolve to emu in every
later test): that check runs in a fresh interpreter, on the full profile; the minimal profile's
is in tests/e2e/test_emu_minimal.py.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support import paths

BUILD_TIMEOUT_S = 900  # a cold build of emu's library, with margin for a busy machine
OP = "aten::mul.Tensor"

# roundtrip.py by its path: importing it as trainready.testing.emu.roundtrip would import emu.
_spec = importlib.util.spec_from_file_location(
    "_emu_roundtrip", paths.ROOT / "trainready" / "testing" / "emu" / "roundtrip.py"
)
assert _spec is not None and _spec.loader is not None
roundtrip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(roundtrip)


def _registered(op: str = OP) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")


def test_planting_registers_a_privateuse1_kernel_that_remove_takes_back() -> None:
    assert not _registered()
    planted = roundtrip.plant_host_roundtrip(OP)
    try:
        assert planted.active and _registered()
    finally:
        planted.remove()
    assert not planted.active and not _registered()
    planted.remove()  # twice is harmless


def test_the_handle_is_a_context_manager() -> None:
    with roundtrip.plant_host_roundtrip("aten::add.Tensor") as planted:
        assert planted.op == "aten::add.Tensor" and _registered("aten::add.Tensor")
    assert not _registered("aten::add.Tensor")


@pytest.mark.parametrize("op", ["aten::mul_.Tensor", "aten::mul.out", "mul", "aten::"])
def test_mutating_or_malformed_ops_are_refused(op: str) -> None:
    with pytest.raises(ValueError):
        roundtrip.plant_host_roundtrip(op)
    assert not _registered()


_COMPUTE = """
import json, torch
import trainready.testing.emu as emu
from trainready.testing.emu.roundtrip import plant_host_roundtrip

a = torch.randn(4, 3)
b = torch.randn(4, 3)
x, y = a.to("emu:1"), b.to("emu:1")
emu.reset_fallback_counts()
with plant_host_roundtrip("aten::mul.Tensor") as planted:
    out = x * y
    kernel = torch._C._dispatch_has_kernel_for_dispatch_key("aten::mul.Tensor", "PrivateUse1")
    counts = emu.fallback_counts()
after = x * y
print(json.dumps({
    "kernel": kernel,
    "device": str(out.device),
    "equal": torch.equal(out.cpu(), a * b),
    "calls": planted.calls,
    "fell_back_while_planted": sorted(counts),
    "removed": not torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::mul.Tensor", "PrivateUse1"),
    "after_equal": torch.equal(after.cpu(), a * b),
}))
"""


@pytest.mark.slow
def test_the_planted_kernel_computes_on_the_host_and_returns_on_the_device() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COMPUTE],
        capture_output=True,
        text=True,
        cwd=Path(paths.ROOT),
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kernel"] and got["removed"]
    assert got["device"] == "emu:1" and got["equal"] and got["after_equal"]
    assert got["calls"] == 1
    # The backend's own kernel, as the dispatcher sees it: mul never reached the fallback.
    assert not [op for op in got["fell_back_while_planted"] if op.startswith("aten::mul")]
