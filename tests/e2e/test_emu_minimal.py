"""emu's minimal profile (TRAINREADY_EMU_PROFILE=minimal): a backend that registers only what a
young one has -- allocator, copies, empty/view ops, the CPU fallback -- and c10's defaults for
the rest. Each missing piece must fail the way an unimplemented backend fails (c10's own
messages), training must still work through the fallback, and the full profile is unchanged.

A process holds one PrivateUse1 backend and emu picks its profile at import, so nothing here
imports emu in the pytest process: each profile runs its checks in one fresh interpreter
(`sys.executable -c`, the variable set), which prints its findings as JSON; the tests judge
them. The first run may compile a profile's library (about a minute on two cores; cached).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support import paths

BUILD_TIMEOUT_S = 900  # a cold build of emu's library, with margin for a busy machine
ENV = "TRAINREADY_EMU_PROFILE"

# Run in the child: every call that a young backend cannot serve is recorded as its first error
# line (or None where it worked), so the tests below can say which piece misbehaved.
_PROBE = r"""
import json, warnings
import torch

warnings.simplefilter("ignore")
import trainready.testing.emu as emu
from trainready.testing.emu.roundtrip import plant_host_roundtrip


def error(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the message is the finding
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return None


def train(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = (torch.arange(32.0).reshape(4, 8) / 10).to(device)
    target = torch.linspace(-1, 1, 16).reshape(4, 4).to(device)
    losses = []
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def autocast():
    with torch.autocast("emu"):  # left at once: the training below runs in fp32
        pass


def conv():
    w = torch.ones(1, 1, 3, 3, device="emu")
    return torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4, device="emu"), w).cpu()


out = {
    "profile": emu.profile(),
    "accelerator": str(torch.accelerator.current_accelerator()),
    "device_count": torch.accelerator.device_count(),
    "native": sorted(emu.native_kernels()),
    "device_module": sorted(n for n in vars(torch.emu) if not n.startswith("_")),
    "emugloo": "EMUGLOO" in torch.distributed.Backend._plugins,
    "on_emu1": str(torch.ones(2, device="emu:1").device),
    "errors": {
        "synchronize": error(torch.accelerator.synchronize),
        "event": error(lambda: torch.Event(device="emu", enable_timing=True).record()),
        "new_stream": error(lambda: torch.Stream(device="emu")),
        "memory_stats": error(torch.accelerator.memory_stats),
        "max_memory_allocated": error(torch.accelerator.max_memory_allocated),
        "memory_allocated": error(torch.accelerator.memory_allocated),
        "generator": error(lambda: torch.Generator(device="emu")),
        "pin_memory": error(lambda: torch.ones(2).pin_memory()),
        "empty_pinned": error(lambda: torch.empty(2, pin_memory=True)),
        "autocast": error(autocast),
        "conv": error(conv),
        "randn": error(lambda: torch.randn(3, device="emu").cpu()),
    },
    "is_pinned": torch.ones(2).is_pinned(),
}

cpu_losses, cpu_params = train("cpu")
emu.reset_fallback_counts()
emu_losses, emu_params = train("emu")
out["losses"] = {"cpu": cpu_losses, "emu": emu_losses}
out["param_max_diff"] = max(
    (a - b).abs().max().item() for a, b in zip(cpu_params, emu_params, strict=True)
)
out["fallback_counts"] = emu.fallback_counts()

a, b = torch.randn(3, 5), torch.randn(3, 5)
with plant_host_roundtrip("aten::mul.Tensor") as planted:
    product = a.to("emu") * b.to("emu")
    out["roundtrip"] = {
        "registered": torch._C._dispatch_has_kernel_for_dispatch_key(
            "aten::mul.Tensor", "PrivateUse1"),
        "device": str(product.device),
        "equal": torch.equal(product.cpu(), a * b),
        "calls": planted.calls,
    }
print(json.dumps(out))
"""


def _probe(profile: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if profile is not None:
        env[ENV] = profile
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        cwd=paths.ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def minimal() -> dict[str, Any]:
    return _probe("minimal")


@pytest.fixture(scope="module")
def full() -> dict[str, Any]:
    return _probe(None)  # the default


# -- what minimal emu has --------------------------------------------------------------------------
@pytest.mark.slow
def test_the_profile_is_reported_and_the_device_is_found(minimal) -> None:
    assert minimal["profile"] == "minimal"
    assert minimal["accelerator"] == "emu" and minimal["device_count"] == 2
    assert minimal["on_emu1"] == "emu:1"


@pytest.mark.slow
def test_only_empty_view_copy_and_resize_kernels_are_native(minimal) -> None:
    native = set(minimal["native"])
    assert {"aten::empty.memory_format", "aten::_copy_from", "aten::view"} <= native
    compute = {"aten::bmm", "aten::bmm.out", "aten::fill_.Scalar", "aten::_local_scalar_dense"}
    assert not native & compute
    assert not any("convolution" in op or op.startswith("aten::mm") for op in native)


@pytest.mark.slow
def test_the_device_module_finds_and_names_devices_only(minimal) -> None:
    assert set(minimal["device_module"]) >= {"is_available", "device_count", "get_device_name"}
    for extra in ("synchronize", "memory_stats", "manual_seed_all", "get_amp_supported_dtype"):
        assert extra not in minimal["device_module"]
    assert not minimal["emugloo"]  # a young backend has no process-group backend


# -- what it lacks, failing as c10's defaults fail ---------------------------------------------------
@pytest.mark.slow
def test_synchronize_raises_c10s_default_message(minimal) -> None:
    assert minimal["errors"]["synchronize"] == (
        "RuntimeError: Backend doesn't support synchronizing all streams on device."
    )


@pytest.mark.slow
def test_events_and_new_streams_are_unsupported(minimal) -> None:
    assert minimal["errors"]["event"] == "RuntimeError: Backend doesn't support events."
    assert minimal["errors"]["new_stream"] == (
        "RuntimeError: Backend doesn't support create a new Stream."
    )


@pytest.mark.slow
@pytest.mark.parametrize("call", ["memory_stats", "max_memory_allocated", "memory_allocated"])
def test_memory_statistics_are_absent(minimal, call: str) -> None:
    assert "is not a DeviceAllocator" in minimal["errors"][call]


@pytest.mark.slow
def test_generators_pinned_memory_autocast_and_conv_fail(minimal) -> None:
    errors = minimal["errors"]
    assert "implement `getNewGenerator`" in errors["generator"]
    assert "implement `getPinnedMemoryAllocator`" in errors["pin_memory"]
    assert "implement `getPinnedMemoryAllocator`" in errors["empty_pinned"]
    assert errors["autocast"].startswith("AssertionError: Tried to use AMP with the `emu`")
    assert "convolution_overrideable not implemented" in errors["conv"]
    assert errors["randn"] is None  # random ops fall back, drawing from the CPU's generator
    assert minimal["is_pinned"] is False


# -- training through the fallback -----------------------------------------------------------------
@pytest.mark.slow
def test_a_small_mlp_trains_three_steps_like_the_cpu(minimal) -> None:
    losses = minimal["losses"]
    assert losses["emu"] == pytest.approx(losses["cpu"], rel=1e-6)
    assert losses["emu"][-1] < losses["emu"][0]
    assert minimal["param_max_diff"] < 1e-6


@pytest.mark.slow
def test_the_fallback_counts_every_compute_op(minimal) -> None:
    counts = minimal["fallback_counts"]
    # Linear's GEMMs, AdamW's update and reading the loss all ran on the host.
    for op in ("aten::addmm.out", "aten::mm.out", "aten::addcdiv.out", "aten::_local_scalar_dense"):
        assert counts.get(op, 0) > 0, op
    assert not set(counts) & set(minimal["native"])


@pytest.mark.slow
def test_the_planted_host_roundtrip_works_on_minimal(minimal) -> None:
    assert minimal["roundtrip"] == {
        "registered": True,
        "device": "emu:0",
        "equal": True,
        "calls": 1,
    }


# -- the full profile is unchanged -----------------------------------------------------------------
@pytest.mark.slow
def test_the_full_profile_keeps_everything(full) -> None:
    assert full["profile"] == "full" and full["emugloo"]
    assert {"aten::bmm", "aten::convolution_overrideable"} <= set(full["native"])
    assert {"synchronize", "memory_stats", "manual_seed_all"} <= set(full["device_module"])
    unsupported = {k: v for k, v in full["errors"].items() if v is not None}
    assert unsupported == {}
    assert full["losses"]["emu"] == pytest.approx(full["losses"]["cpu"], rel=1e-6)
    assert full["roundtrip"]["equal"] and full["roundtrip"]["calls"] == 1


def test_an_unknown_profile_is_refused() -> None:
    env = {**os.environ, ENV: "tiny"}
    done = subprocess.run(
        [sys.executable, "-c", "import trainready.testing.emu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=paths.ROOT,
        check=False,
    )
    assert done.returncode != 0
    assert "TRAINREADY_EMU_PROFILE='tiny': expected one of full, minimal" in done.stderr
