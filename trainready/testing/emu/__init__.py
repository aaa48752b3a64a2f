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

What it is not: a performance device. Device memory is host memory and every kernel is a CPU
kernel, with a copy in and out on every fallback; its timings say nothing about any hardware.

Importing it takes PrivateUse1 for the process (there is one per process) and, where no CUDA,
XPU or MPS device outranks it, makes emu torch's current accelerator, so `auto` resolves to
emu:0: import it only where that is wanted. Environment: TRAINREADY_EMU_CACHE (where builds are
cached, default ~/.cache/trainready), TRAINREADY_EMU_MEMORY_GIB (each device's capacity, default
16; allocating past it raises torch.OutOfMemoryError), TRAINREADY_EMU_VERBOSE=1 (show the build).
"""

from __future__ import annotations

import torch

from trainready.testing.emu import build, dist, module
from trainready.testing.emu.module import DEVICE_NAME, NAME

# The core library: every source but the distributed wrapper, which dist.py builds on demand.
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


def _register() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", NAME):
        raise RuntimeError(
            f"PrivateUse1 is already the {current!r} backend; emu needs it and a process can "
            "have only one PrivateUse1 backend"
        )
    build.load(LIBRARY, SOURCES)
    if current != NAME:
        torch.utils.rename_privateuse1_backend(NAME)
    if not hasattr(torch, NAME):
        torch._register_device_module(NAME, module)
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    dist.register()


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
    "NAME",
    "fallback_counts",
    "native_kernels",
    "reset_fallback_counts",
]
