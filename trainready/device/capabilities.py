"""What a device backend implements of the instruments trainready uses, probed once per process.

A young backend registers an allocator, copies and the CPU fallback, and little else: no
synchronize, no events or streams, no memory statistics, no generator, no pinned memory. Training
needs none of those; trainready's instruments do. So each instrument asks here first, and where a
capability is missing it uses the stated substitute, or says "not measured" with the reason. A case
then fails only for what training itself needs, never for what the tool wanted.

Each `Capability` is `native` (the backend has it), `substitute` (missing; `how` says what is
used instead) or `absent` (missing, nothing stands in; `how` says what is not measured). A
device's backend adapter (`device/backends/`) runs the checks once per process and may answer
some itself (torch_xla synchronizes through its own API); the report lists every capability that
is not native.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

NATIVE, SUBSTITUTE, ABSENT = "native", "substitute", "absent"

# The substitute for a missing synchronize: a blocking device-to-host copy of a scalar. It returns
# only once the device's queue has run up to it, which is a full wait on a backend with one
# in-order queue per device (what a backend without streams has).
SYNC_BY_COPY = "device-to-host copy of a scalar (waits for the device's single in-order queue)"


class MissingCapability(RuntimeError):
    """A case needs, for training itself, something the backend lacks (autocast for a bf16
    autocast case): the case is `unsupported`, with this message, not failed."""


@dataclass(frozen=True)
class Capability:
    """One instrument's dependency: `status` is native | substitute | absent; `why` is the
    backend's own message where it refused; `how` is the substitute, or what goes unmeasured."""

    name: str
    status: str
    why: str = ""
    how: str = ""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200]}" if text else type(e).__name__


def _attempt(fn: Any) -> str | None:
    """None when `fn()` works, else the one-line reason it did not."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - a backend may raise anything for a missing piece
        return _first_line(e)
    return None


def _check(name: str, fn: Any, *, substitute: str = "", unmeasured: str = "") -> Capability:
    why = _attempt(fn)
    if why is None:
        return Capability(name, NATIVE)
    if substitute:
        return Capability(name, SUBSTITUTE, why, substitute)
    return Capability(name, ABSENT, why, unmeasured)


def _is_accelerator(dev: torch.device) -> None:
    acc = torch.accelerator.current_accelerator()
    if acc is None or acc.type != dev.type:
        raise RuntimeError(f"torch.accelerator's current accelerator is {acc}, not {dev.type}")


def _events(dev: torch.device) -> None:
    start = torch.Event(device=dev, enable_timing=True)
    end = torch.Event(device=dev, enable_timing=True)
    stream = torch.accelerator.current_stream(dev)
    start.record(stream)
    end.record(stream)
    end.synchronize()
    start.elapsed_time(end)


def _generator(dev: torch.device) -> None:
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    torch.empty(4, device=dev).uniform_(generator=gen)


def _pinned_memory(dev: torch.device) -> None:
    pinned = torch.empty(4).pin_memory()
    if not pinned.is_pinned():
        raise RuntimeError("pin_memory() returned unpinned memory")


def _autocast(dev: torch.device) -> None:
    if not torch.amp.is_autocast_available(dev.type):
        raise RuntimeError(f"torch.amp.is_autocast_available({dev.type!r}) is False")
    # Entering is the test: a PrivateUse1 module without get_amp_supported_dtype passes the
    # availability query and fails here.
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        pass


def _device_guard(dev: torch.device) -> None:
    index = torch.accelerator.current_device_index()
    torch.accelerator.set_device_index(index)


def _memory_stats(dev: torch.device) -> None:
    torch.accelerator.memory_allocated(dev)
    torch.accelerator.max_memory_allocated(dev)


def _synchronize(dev: torch.device) -> None:
    # With work queued first: torch skips the wait on a device nothing has touched yet (no
    # primary context), which would pass the probe on a backend that cannot synchronize.
    torch.ones(1, device=dev).add_(1)
    torch.accelerator.synchronize(dev)


def _checks(dev: torch.device) -> list[Capability]:
    """Every capability, in the order the report lists them."""
    return [
        _check(
            "accelerator",
            lambda: _is_accelerator(dev),
            substitute="found as torch's PrivateUse1 / device module; `auto` does not pick it",
        ),
        _check(
            "synchronize",
            lambda: _synchronize(dev),
            substitute=SYNC_BY_COPY,
        ),
        _check(
            "events",
            lambda: _events(dev),
            substitute="wall clock around a synchronize (host time, includes launch latency)",
        ),
        _check(
            "memory_stats",
            lambda: _memory_stats(dev),
            unmeasured="device memory (allocated, reserved, peak) is not measured",
        ),
        _check(
            "generator",
            lambda: _generator(dev),
            substitute="random data drawn on the CPU generator and copied (trainready does so "
            "anyway); device-side random ops (dropout) fail as training would",
        ),
        _check(
            "pinned_memory",
            lambda: _pinned_memory(dev),
            unmeasured="pinned host memory: trainready does not use it; not measured",
        ),
        _check(
            "device_guard",
            lambda: _device_guard(dev),
            substitute="tensors carry their device explicitly; the current device is not set",
        ),
        _check(
            "autocast",
            lambda: _autocast(dev),
            unmeasured="bf16/fp16 autocast cases are unsupported: the backend has no autocast",
        ),
    ]


def generic_checks(device_type: str) -> list[Capability]:
    """Every capability of a backend reached through torch's generic APIs (`torch.accelerator`,
    `torch.Event`, `torch.Generator`, `torch.amp`), in the order the report lists them."""
    dev = torch.device(device_type, 0) if device_type != "mps" else torch.device("mps")
    return _checks(dev)


def not_native(capabilities: tuple[Capability, ...]) -> list[dict[str, str]]:
    """The capabilities that are not native, as JSON records for the run's environment."""
    return [asdict(c) for c in capabilities if c.status != NATIVE]
