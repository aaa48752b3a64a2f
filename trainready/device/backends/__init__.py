"""Device backend adapters, one per device type: `adapter("cuda")` -> the `Backend` for it.

Every type gets the generic adapter (`base.Backend`, torch's generic APIs) unless a module here
registers its own (`xla`). One adapter per type and process, so capabilities are probed once.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Iterator

from trainready.device.backends.base import Backend, sync_by_copy

# device type -> "module:Class" of its adapter, imported on first use (torch_xla is heavy).
_ADAPTERS: dict[str, str] = {"xla": "trainready.device.backends.xla:XlaBackend"}
# device type -> the module that registers it, imported when the user names the type.
REGISTERING_MODULES: dict[str, str] = {"xla": "torch_xla"}
_instances: dict[str, Backend] = {}


def adapter(device_type: str) -> Backend:
    """The adapter for a device type, made once per process."""
    found = _instances.get(device_type)
    if found is None:
        spec = _ADAPTERS.get(device_type)
        if spec is None:
            found = Backend(device_type)
        else:
            module, _, cls = spec.partition(":")
            found = getattr(importlib.import_module(module), cls)(device_type)
        _instances[device_type] = found
    return found


def registering_module(device: str) -> str | None:
    """The module to import before `device` ("xla", "xla:1") can be resolved, in every process
    of a run ("torch_xla"); None where torch itself or the user's --import registers the type."""
    return REGISTERING_MODULES.get(device.strip().lower().partition(":")[0])


def imported(module: str) -> None:
    """Tell the adapters whose device type `module` registers that it was just imported in this
    process (`Backend.on_import`; `core.imports` calls it after each module it imports)."""
    for device_type, name in REGISTERING_MODULES.items():
        if name == module:
            adapter(device_type).on_import()


def installed_registering_modules() -> list[str]:
    """The registering modules installed here (found, not imported): `trainready devices`
    imports them to list their devices."""
    return [m for m in REGISTERING_MODULES.values() if importlib.util.find_spec(m) is not None]


def default_compile_backend(device: str) -> str:
    """The torch.compile backend for `device`'s compiled cases where the user chose none
    (`--compile-backend`): its adapter's, inductor but on xla (openxla)."""
    return adapter(device.partition(":")[0]).default_compile_backend


@contextlib.contextmanager
def counted(device: str) -> Iterator[dict[str, float]]:
    """`with counted(device) as rose: ...`; after the block, `rose` holds how far each of the
    backend's own counters (`Backend.counters`: torch_xla's graph compilations and executions,
    the lazy analogue of recompiles) rose in it; empty for a backend that keeps none (the CPU,
    eager backends). Filled only when the block ends without raising. A counter reset inside the
    block counts from its reset (`_rise`)."""
    dev_type = device.partition(":")[0]
    backend = adapter(dev_type) if dev_type != "cpu" else None
    before = backend.counters() if backend else {}
    rose: dict[str, float] = {}
    yield rose
    after = backend.counters() if backend else {}
    rose.update({k: _rise(float(before.get(k, 0)), float(v)) for k, v in after.items()})


def _rise(before: float, after: float) -> float:
    """How far a counter rose; where it fell, it was reset in the block (torch_xla's dynamo
    bridge clears its metrics when `openxla` compiles), and what it counted since is the rise
    (a lower bound)."""
    return after - before if after >= before else after


__all__ = [
    "REGISTERING_MODULES",
    "Backend",
    "adapter",
    "counted",
    "default_compile_backend",
    "imported",
    "installed_registering_modules",
    "registering_module",
    "sync_by_copy",
]
