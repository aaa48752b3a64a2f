"""emu: a reference out-of-tree PrivateUse1 device, registered by importing this package.

    import torch, trainready.testing.emu
    x = torch.ones(2, device="emu")          # or "emu:1": there are two devices

What it is for: a test device for trainready itself, and a way for backend authors to see what
trainready reports on a foreign (PrivateUse1) device, without that device. It is built the way
PyTorch's reference backend torch_openreg is: a C++ library (csrc/, compiled on first import and
cached, see build.py) that registers for PrivateUse1 an allocator with memory statistics, a
DeviceGuard (two devices, one synchronous stream each, events timed with the host clock),
accelerator hooks with per-device generators, a few native kernels (`native_kernels()`: tensor
creation, views, copies, fill, resize, one matmul, aten::bmm, and convolution: the
convolution_overrideable hooks, see csrc/conv.cpp) and PyTorch's boxed CPU fallback
for every other op, counted per op (`fallback_counts()`), silent as PyTorch's own cpu_fallback is
(TRAINREADY_EMU_FALLBACK_WARN=1 makes it warn once per op, in the words MPS and Ascend NPU use).
aten::mm is deliberately not native: F.linear's GEMM and a peak calibration then run on the host,
which trainready must say; inject a native one through torch.library to see the other side. Autocast uses CUDA's op lists; `torch.emu` is its device module
(module.py); `emugloo` is its process-group backend (dist.py).

Profiles (TRAINREADY_EMU_PROFILE, read once at import; `profile()` says which is loaded):
- "full" (the default): everything above.
- "minimal": only what a young backend has, to see what trainready says of one. A library of
  its own (built with -DTRAINREADY_EMU_MINIMAL, cached beside the full one) registers the
  allocator (no memory statistics: torch.accelerator.memory_* raise, it is no
  c10::DeviceAllocator), a DeviceGuard with only what c10 makes a guard implement (devices, the
  count, getStream/exchangeStream: synchronize, events and new streams raise c10's own "Backend
  doesn't support ..."), hooks with only hasPrimaryContext (registered, since without hooks
  every backward fails; generators and pinned memory raise c10's "implement `getNewGenerator`"
  and the like), the empty/view/copy/resize/set_ kernels, and the counted CPU fallback for
  everything else (no native fill, item, bmm or convolution: conv nets do not run; random ops
  draw from the CPU's generator). No autocast, no `emugloo`; `torch.emu` has only
  module.MINIMAL_API. Small models still train, every op on the host.
`trainready.testing.emu.roundtrip.plant_host_roundtrip` plants, in either profile, a "native"
kernel that secretly computes on the host, for testing what detects that.

What it is not: a performance device. Device memory is host memory and every kernel is a CPU
kernel, with a copy in and out on every fallback; its timings say nothing about any hardware.

Importing it takes PrivateUse1 for the process (there is one per process) and, where no CUDA,
XPU or MPS device outranks it, makes emu torch's current accelerator, so `auto` resolves to
emu:0: import it only where that is wanted. Environment: TRAINREADY_EMU_CACHE (where builds are
cached, default ~/.cache/trainready), TRAINREADY_EMU_MEMORY_GIB (each device's capacity, default
16; allocating past it raises torch.OutOfMemoryError), TRAINREADY_EMU_VERBOSE=1 (show the build).
"""

from __future__ import annotations

import os

import torch

from trainready.testing.emu import build, dist, module
from trainready.testing.emu.module import DEVICE_NAME, NAME

ENV_PROFILE = "TRAINREADY_EMU_PROFILE"
PROFILES = ("full", "minimal")

# Each profile is a library of its own (name, sources, flags), so both builds cache side by
# side. The minimal one compiles the shared sources with TRAINREADY_EMU_MINIMAL and leaves out
# the files that are all extra: generators, pinned host memory, convolution, autocast.
_MINIMAL_DEFINE = "-DTRAINREADY_EMU_MINIMAL"
_MINIMAL_SOURCES = ("runtime.cpp", "allocator.cpp", "kernels.cpp", "fallback.cpp", "ops.cpp")
# The full library: every source but the distributed wrapper, which dist.py builds on demand.
SOURCES = (
    "runtime.cpp",
    "allocator.cpp",
    "host_allocator.cpp",
    "generator.cpp",
    "kernels.cpp",
    "conv.cpp",
    "fallback.cpp",
    "autocast.cpp",
    "ops.cpp",
)
LIBRARY = "trainready_emu"
_LIBRARIES = {
    "full": (LIBRARY, SOURCES, ()),
    "minimal": ("trainready_emu_minimal", _MINIMAL_SOURCES, (_MINIMAL_DEFINE,)),
}


def _chosen_profile() -> str:
    """The profile TRAINREADY_EMU_PROFILE names ("full" when unset); any other value raises."""
    chosen = os.environ.get(ENV_PROFILE, "").strip() or "full"
    if chosen not in PROFILES:
        raise ValueError(f"{ENV_PROFILE}={chosen!r}: expected one of {', '.join(PROFILES)}")
    return chosen


def _register() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", NAME):
        raise RuntimeError(
            f"PrivateUse1 is already the {current!r} backend; emu needs it and a process can "
            "have only one PrivateUse1 backend"
        )
    chosen = _chosen_profile()
    loaded = _loaded_profile()
    if loaded is None:
        name, sources, cflags = _LIBRARIES[chosen]
        build.load(name, sources, cflags=cflags)
    elif loaded != chosen:  # both libraries define the same ops: one per process
        raise RuntimeError(
            f"emu's {loaded} profile is already loaded in this process; {ENV_PROFILE}={chosen} "
            "needs a fresh process"
        )
    if current != NAME:
        torch.utils.rename_privateuse1_backend(NAME)
    if not hasattr(torch, NAME):
        device_module = module if chosen == "full" else module.minimal_module()
        torch._register_device_module(NAME, device_module)
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    if chosen == "full":  # a young backend has no process-group backend
        dist.register()


def _loaded_profile() -> str | None:
    """The profile of the emu library already in the process, None when there is none."""
    try:
        return str(torch.ops.trainready_emu.profile())
    except (AttributeError, RuntimeError):
        return None


def profile() -> str:
    """ "full" or "minimal": the profile of the emu library loaded in this process (chosen by
    TRAINREADY_EMU_PROFILE when emu was first imported)."""
    return str(torch.ops.trainready_emu.profile())


_register()


def native_kernels() -> frozenset[str]:
    """The ops emu has kernels of its own for, e.g. "aten::bmm", as the C++ library registered
    them (and as the dispatcher confirms: see tests/e2e/test_emu.py)."""
    return frozenset(torch.ops.trainready_emu.native_kernels())


def fallback_counts() -> dict[str, int]:
    """Op ("aten::add.out") -> how many times it ran through the CPU fallback since the last
    `reset_fallback_counts()`."""
    names, calls = torch.ops.trainready_emu.fallback_counts()
    return dict(zip(names, calls, strict=True))


def reset_fallback_counts() -> None:
    torch.ops.trainready_emu.reset_fallback_counts()


__all__ = [
    "DEVICE_NAME",
    "ENV_PROFILE",
    "NAME",
    "PROFILES",
    "fallback_counts",
    "native_kernels",
    "profile",
    "reset_fallback_counts",
]
