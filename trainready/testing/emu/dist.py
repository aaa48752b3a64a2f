"""`emugloo`: the process-group backend torch.distributed pairs with emu devices.

Registered with `torch.distributed.Backend.register_backend("emugloo", ..., devices=["emu"])`, so
`dist.get_default_backend_for_device("emu")` names it and `init_process_group()` on an emu
machine picks it, as it would a vendor's backend. Its creator builds a gloo backend over the same
store and wraps it in C++ (csrc/dist.cpp): each collective copies emu tensors to the host, runs
on gloo, and copies the results back when its work completes. The wrapper is a pybind module of
its own, compiled on the first process group made (not on import), since plain emu users never
need it.
"""

from __future__ import annotations

from datetime import timedelta
from types import ModuleType
from typing import Any

BACKEND = "emugloo"
DEVICE = "emu"
_LIBRARY = "trainready_emu_dist"


def _library() -> ModuleType:
    from trainready.testing.emu import build

    module = build.load(_LIBRARY, ["dist.cpp"], python_module=True)
    assert module is not None
    return module


def create_backend(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    """The backend creator torch.distributed calls: gloo over `store`, behind emu's staging."""
    from torch.distributed import ProcessGroupGloo

    gloo = ProcessGroupGloo(store, rank, size, timeout)
    return _library().wrap_gloo(gloo)


def register() -> bool:
    """Register emugloo for the emu device type; False when torch has no distributed package."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        return False
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create_backend, devices=[DEVICE])
    return True


def prebuild() -> None:
    """Compile the wrapper now (e.g. once before starting ranks, so they do not all wait)."""
    _library()
