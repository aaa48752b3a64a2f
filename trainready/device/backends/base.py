"""The generic backend adapter: what trainready needs of a device, through torch's generic APIs.

An adapter answers, for one device type: how many devices there are, how to wait for queued work
(`synchronize`), where a training step ends (`step`; a lazy backend runs its graph there), which
`torch.compile` backend to use, which module registers the device (imported when the user names
the device), the capabilities the instruments may use (`capabilities`, probed once) and the
backend's own counters (`counters`: compilations, executions). `Backend` is the generic one:
CUDA, ROCm, XPU, MPS and PrivateUse1 plugins share it; a stack that needs more subclasses it
(`backends/xla.py`). docs/devices.md says how to write one.
"""

from __future__ import annotations

from typing import Any

import torch

from trainready.device.capabilities import NATIVE, Capability, generic_checks


class Backend:
    """The adapter for devices torch's generic APIs drive. Stateless but for the capability
    probe, which runs once per adapter (one adapter per device type and process)."""

    # The module that registers the device type, imported when the user names it ("torch_xla");
    # None where torch itself, or a user's --import, registers it.
    module: str | None = None
    # Lazy backends record ops and run them as a graph at a step boundary (`step`).
    lazy: bool = False
    default_compile_backend = "inductor"

    def __init__(self, device_type: str):
        self.type = device_type
        self._capabilities: tuple[Capability, ...] | None = None

    # -- capabilities ---------------------------------------------------------------------------
    def probe(self) -> tuple[Capability, ...]:
        """The backend's capabilities (see `trainready.device.capabilities`), checked once."""
        if self._capabilities is None:
            self._capabilities = tuple(self._checks())
        return self._capabilities

    def _checks(self) -> list[Capability]:
        # The CPU has every capability (its ops are synchronous); it is not probed.
        return [] if self.type == "cpu" else generic_checks(self.type)

    def has(self, name: str) -> bool:
        found = next((c for c in self.probe() if c.name == name), None)
        return found is None or found.status == NATIVE

    # -- discovery ------------------------------------------------------------------------------
    def device_count(self) -> int:
        """How many devices of this type the process can use; 0 when the backend is absent."""
        acc = torch.accelerator.current_accelerator()
        if acc is not None and acc.type == self.type:
            return torch.accelerator.device_count() if torch.accelerator.is_available() else 0
        module = getattr(torch, self.type, None)
        if module is None or not module.is_available():
            return 0
        return int(module.device_count())

    # -- execution ------------------------------------------------------------------------------
    def synchronize(self, dev: torch.device) -> None:
        """Return once all work queued on `dev` has run."""
        if self.has("synchronize"):
            torch.accelerator.synchronize(dev)
        else:
            sync_by_copy(dev)

    def step(self, dev: torch.device) -> None:
        """A training step ends here: an eager backend has nothing to do."""

    def counters(self) -> dict[str, Any]:
        """The backend's own counters (graph compilations, executions), where it keeps any."""
        return {}

    def on_import(self) -> None:
        """`module` was just imported in this process (`core.imports`): start what must run
        before the device's first use; nothing for most backends."""

    def pg_backend(self) -> str | None:
        """The process-group backend for this device type where the adapter decides it (a
        ConfigError says why none can run); None: torch's pairing decides
        (`torch.distributed.get_default_backend_for_device`)."""
        return None

    def properties(self, dev: torch.device) -> dict[str, Any] | None:
        """The device's name and properties where the adapter knows them better than torch's
        generic API (`identity.device_info`); None: read them through the generic API."""
        return None


_sync_scalars: dict[torch.device, torch.Tensor] = {}


def sync_by_copy(dev: torch.device) -> None:
    """Wait for `dev` by a blocking device-to-host copy of a scalar written after the queued work
    (`capabilities.SYNC_BY_COPY`): the substitute where the backend cannot synchronize."""
    scalar = _sync_scalars.get(dev)
    if scalar is None:
        scalar = _sync_scalars[dev] = torch.zeros((), device=dev)
    scalar.fill_(1.0)
    scalar.to("cpu")
