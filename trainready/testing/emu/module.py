"""`torch.emu`: the device module of emu, shaped like `torch.cuda` where trainready and torch
look (device count and selection, memory statistics, random state, device name, autocast dtypes).

Everything reaches the C++ library through `torch.ops.trainready_emu`, so it answers for emu even
on a machine whose current accelerator is another one (where `torch.accelerator` means that one).

The minimal profile registers `minimal_module()` instead: only the names in MINIMAL_API.
"""

from __future__ import annotations

import collections
import dataclasses
import types
from typing import Any

import torch

NAME = "emu"
DEVICE_NAME = "trainready emu (reference PrivateUse1 device, not for performance)"

# The minimal profile's device module: finding and choosing devices and naming them, as a young
# backend's module has. torch needs a registered module before it makes a tensor on the device,
# and `is_available` in it: without it a process that ran a backward on the device aborts at
# exit ("terminate called without an active exception", torch 2.13).
MINIMAL_API = (
    "is_available",
    "is_initialized",
    "init",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "get_device_name",
)

_Device = torch.device | str | int | None


def _ops() -> Any:
    return torch.ops.trainready_emu


def _index(device: _Device = None) -> int:
    """A device argument as torch.cuda takes them (None: the current device) -> its index."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    if dev.type != NAME:
        raise ValueError(f"expected an {NAME} device, got {dev}")
    return current_device() if dev.index is None else dev.index


# -- devices ---------------------------------------------------------------------------------------
def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True  # nothing to initialise lazily: the library registered everything when loaded


def init() -> None:
    """Nothing to do; here because torch calls it on device modules."""


def _is_in_bad_fork() -> bool:
    return False  # no driver state that a fork could break


def device_count() -> int:
    return int(_ops().device_count())


def current_device() -> int:
    return int(_ops().current_device())


def set_device(device: _Device) -> None:
    _ops().set_device(_index(device))


class device:  # lower case, like torch.cuda.device
    """Context manager that makes `device` the current emu device."""

    def __init__(self, device: _Device):
        self.index = _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.previous)


def synchronize(device: _Device = None) -> None:
    """Returns at once: emu finishes every op before the op returns."""
    _ops().synchronize(_index(device))


def Event(enable_timing: bool = False, device: _Device = None) -> torch.Event:
    """A `torch.Event` on an emu device (a plain one: torch's own methods accept only those);
    timing events stamp the host clock when recorded."""
    return torch.Event(device=torch.device(NAME, _index(device)), enable_timing=enable_timing)


# -- memory ----------------------------------------------------------------------------------------
# Streams: one synchronous stream per device (the guard's), so a "new" stream is that one and
# switching streams changes nothing; FSDP2 and other stream-aware code only need the calls.
def Stream(device: _Device = None, priority: int = 0) -> torch.Stream:  # noqa: N802 - torch's name
    return torch.Stream(device=torch.device(NAME, _index(device)), priority=priority)


def current_stream(device: _Device = None) -> torch.Stream:
    return Stream(device)


def default_stream(device: _Device = None) -> torch.Stream:
    return Stream(device)


class stream:  # noqa: N801 - torch's name: `with torch.emu.stream(s):`
    def __init__(self, s: torch.Stream | None):
        self.s = s

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def memory_stats(device: _Device = None) -> collections.OrderedDict[str, int]:
    """Allocator statistics under torch.cuda.memory_stats' keys ("allocated_bytes.all.current",
    "reserved_bytes.all.peak", "allocation.all.allocated", "num_alloc_retries", ...)."""
    stats = _ops().memory_stats(_index(device))
    return collections.OrderedDict(sorted(stats.items()))


def memory_allocated(device: _Device = None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: _Device = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: _Device = None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: _Device = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: _Device = None) -> None:
    _ops().reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _Device = None) -> None:
    _ops().reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: _Device = None) -> tuple[int, int]:
    """(free, total) bytes: total is the capacity TRAINREADY_EMU_MEMORY_GIB sets (default 16)."""
    free, total = _ops().mem_get_info(_index(device))
    return int(free), int(total)


def empty_cache() -> None:
    """Nothing to release: emu's allocator frees each block when its tensor dies."""


# -- random numbers --------------------------------------------------------------------------------
def _generator(device: _Device = None) -> torch.Generator:
    return _ops().default_generator(_index(device))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    for i in range(device_count()):
        _generator(i).seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _Device = NAME) -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _Device = NAME) -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# -- identity and dtypes ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    name: str
    total_memory: int
    index: int


def get_device_name(device: _Device = None) -> str:
    _index(device)
    return DEVICE_NAME


def get_device_properties(device: _Device = None) -> DeviceProperties:
    index = _index(device)
    return DeviceProperties(DEVICE_NAME, mem_get_info(index)[1], index)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True  # kernels are CPU kernels, which have every dtype


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes torch.autocast("emu") accepts."""
    return [torch.bfloat16, torch.float16]


def minimal_module() -> types.ModuleType:
    """A module holding this module's MINIMAL_API and nothing else: torch and trainready find no
    synchronize, streams, events, memory statistics, random state or autocast dtypes in it
    (torch.manual_seed then warns that it cannot seed emu, as it does for a young backend)."""
    module = types.ModuleType(f"torch.{NAME}", __doc__)
    for name in MINIMAL_API:
        setattr(module, name, globals()[name])
    return module
