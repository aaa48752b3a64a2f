"""`--import MODULE` / TRAINREADY_IMPORT: user modules imported in every process of a run.

A module imported this way can register a device backend (a PrivateUse1 plugin, `torch_npu`,
`torch_neuronx`, `trainready.testing.emu`) or kernels for one (`torch.library` impls), so it must be
imported before the device is resolved, and again in each process that touches the device: the
CLI or API process, every case worker (core/worker.py, the list travels in the spawn arguments),
and the processes workers start (launch.py's ranks, `python -m trainready.suites.train.loop`), which learn
the list from TRAINREADY_IMPORT in the environment they inherit (`export`).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from trainready.core.config import ConfigError

ENV_VAR = "TRAINREADY_IMPORT"


class ImportFailed(ConfigError):
    """A requested module raised while importing; the message is one line naming it."""


def requested(extra: Iterable[str] | None = None) -> list[str]:
    """The modules TRAINREADY_IMPORT names (comma-separated), then `extra` (the --import options),
    each once, in order: order matters when one module needs another (a backend, then its
    kernels)."""
    names = os.environ.get(ENV_VAR, "").split(",") + list(extra or [])
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


def import_modules(names: Sequence[str]) -> None:
    """Import each module in order; the first that raises is an ImportFailed naming it."""
    for name in names:
        try:
            importlib.import_module(name)
            _started(name)
        except Exception as e:  # noqa: BLE001 - whatever a user's module raises, name the module
            error = f"{type(e).__name__}: {e}".strip().splitlines()[0][:300]
            raise ImportFailed(f"--import {name}: {error}") from e


def _started(name: str) -> None:
    """A device type's registering module may need its runtime started before anything else
    touches torch (torch_xla: `device/backends/xla.py`, `on_import`); here, since this is where
    every process of a run imports it."""
    from trainready.device.backends import REGISTERING_MODULES, imported  # noqa: PLC0415 - torch

    if name in REGISTERING_MODULES.values():
        imported(name)


def export(names: Sequence[str]) -> None:
    """Make `names` the list the processes this one starts will import (they inherit the
    environment); an empty list removes the variable."""
    if names:
        os.environ[ENV_VAR] = ",".join(names)
    else:
        os.environ.pop(ENV_VAR, None)


def import_from_env() -> list[str]:
    """For a process a run started (a rank, a training process): import what TRAINREADY_IMPORT
    names; returns the names. Raises ImportFailed."""
    names = requested()
    import_modules(names)
    return names


def describe(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """What each imported module is, for the environment snapshot: its version and file."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        out[name] = {
            "version": str(version) if version is not None else None,
            "file": getattr(module, "__file__", None),
        }
    return out
