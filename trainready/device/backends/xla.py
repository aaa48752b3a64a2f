"""The torch_xla adapter: device type "xla", a lazy-tensor stack (PJRT: CPU, TPU, GPU, Neuron).

torch_xla records ops into a graph and compiles and runs it at a step boundary (`torch_xla.sync()`),
so what an eager backend does per op happens here per step: the training loops call
`runtime.step_boundary` once per step, and `synchronize` ends the pending graph and then waits for
the device (`xm.wait_device_ops()`). Neither is torch's generic API: xla is not
`torch.accelerator`'s device type, has no `torch.xla` module, no `torch.Event`s and no
`torch.Generator`, so each capability is answered from torch_xla itself (`_checks`).

torch_xla is imported only when an xla device is used: it is heavy (seconds), it picks a PJRT
device when imported without PJRT_DEVICE, and this module must load in a process without it (the
adapter registry names it as a string). docs/devices.md, "torch_xla", maps each method to the
torch_xla API behind it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import torch

from trainready.device.backends.base import Backend
from trainready.device.capabilities import (
    ABSENT,
    NATIVE,
    SUBSTITUTE,
    Capability,
    _attempt,
    generic_checks,
)

MODULE = "torch_xla"

# torch_xla.debug.metrics names -> the keys `counters()` reports them under. Counters count events;
# a metric's sample count is how many times it was timed.
_COUNTERS = {
    "UncachedCompile": "xla_compiles",  # graphs XLA compiled (a new graph: the lazy "recompile")
    "CachedCompile": "xla_cached_compiles",  # graphs found in torch_xla's compilation cache
    "ExecuteComputation": "xla_executions",  # compiled graphs run on the device
    "MarkStep": "xla_step_boundaries",  # torch_xla.sync() / xm.mark_step() calls
}
_TIMES = {"CompileTime": "xla_compile_s", "ExecuteTime": "xla_execute_s"}  # nanoseconds summed

# Measured with torch_xla 2.9.0, two processes under torchrun, PJRT_DEVICE=CPU (docs/devices.md,
# "torch_xla"): each process's PJRT CPU client addresses its own device only, so the collectives
# reduce over one replica. With init_method "xla://" every rank is rank 0 of 1; with "env://" the
# ranks are right but all_reduce returns each rank's own tensor, a silently wrong result.
PJRT_CPU_PG_WHY = (
    "torch_xla's 'xla' process group does not run across processes on PJRT's CPU device: each "
    "process's PJRT CPU client addresses only its own device, so init_method xla:// makes every "
    "rank rank 0 of 1, and under env:// all_reduce returns each rank's own tensor unreduced "
    "(measured with torch_xla 2.9.0); name another with --pg-backend to test the host's"
)


def _xla() -> Any:
    """torch_xla, imported on first use (never at module load: see the module docstring)."""
    return importlib.import_module(MODULE)


def _xm() -> Any:
    return importlib.import_module("torch_xla.core.xla_model")


def _metrics() -> Any:
    return importlib.import_module("torch_xla.debug.metrics")


def mark_step() -> None:
    """End the pending lazy graph: compile it (or find it in the cache) and launch it.

    `torch_xla.sync()` since torch_xla 2.6; `xm.mark_step()` before (still there, deprecated)."""
    sync = getattr(_xla(), "sync", None)
    if callable(sync):
        sync()
    else:
        _xm().mark_step()


def pjrt_device() -> str:
    """The PJRT device torch_xla runs on ("CPU", "TPU", "CUDA", "NEURON"), as it chose it: from
    PJRT_DEVICE, or its own default (TPU, then Neuron, then CPU) when that is unset."""
    runtime = importlib.import_module("torch_xla.runtime")
    return str(runtime.device_type() or "unknown")


class XlaBackend(Backend):
    """The adapter for torch_xla's "xla" devices. `module` makes `--device xla` import torch_xla
    in every process of a run, so `--import torch_xla` is optional."""

    module = MODULE
    lazy = True
    # torch.compile's backend that hands the traced graph to XLA (torch/_dynamo/backends/
    # torchxla.py; registered by torch itself, needs torch_xla to run). Inductor has no xla codegen.
    default_compile_backend = "openxla"

    # -- discovery ------------------------------------------------------------------------------
    def device_count(self) -> int:
        """The addressable PJRT devices, once torch_xla is imported (asking earlier would import
        it, and with it pick a PJRT device, in processes that never use xla)."""
        if MODULE not in sys.modules:
            return 0
        return int(_xla().device_count())

    def on_import(self) -> None:
        """Start torch_xla's runtime (its PJRT client) as soon as torch_xla is imported, in every
        process of a run. Until then torch_xla reports no xla device to torch's autograd engine,
        which sizes its per-device queues at the process's first backward: a backward on the CPU
        first (parity's float64 reference) leaves no queue for xla:0, and every xla backward after
        it fails an internal assert (engine.cpp, device_ready_queues_), torch_xla 2.9.0."""
        _xla().device_count()

    def properties(self, dev: torch.device) -> dict[str, Any]:
        """The device's name, e.g. "XLA (PJRT CPU) on AMD EPYC 9654", its hardware kind and the
        torch_xla version: the peak cache keys on the name, so XLA's measured peak on the CPU
        never mixes with the CPU's own."""
        from trainready.device.identity import _cpu_name  # noqa: PLC0415 - identity imports us

        hw = str(_xm().xla_device_hw(dev))
        name = f"XLA (PJRT {pjrt_device()})"
        if hw == "CPU":
            name += f" on {_cpu_name()}"
        return {"name": name, "xla_hw": hw, "xla_version": str(_xla().__version__)}

    # -- execution ------------------------------------------------------------------------------
    def step(self, dev: torch.device) -> None:
        """A step boundary: the step's ops become one graph, compiled once and then cached."""
        mark_step()

    def synchronize(self, dev: torch.device) -> None:
        """Run the pending graph, then wait until the device has run everything launched."""
        mark_step()
        _xm().wait_device_ops()

    def pg_backend(self) -> str:
        """torch_xla's "xla" process group (torch_xla.distributed.xla_backend), which torch's
        pairing cannot name: torch_xla 2.9 registers it with `devices='xla'`, a string, so torch
        pairs it with device types "x", "l" and "a". A ConfigError on PJRT's CPU device, where
        it cannot run across processes (`PJRT_CPU_PG_WHY`)."""
        from trainready.core.config import ConfigError  # noqa: PLC0415 - the device layer's base

        if pjrt_device() == "CPU":
            raise ConfigError(PJRT_CPU_PG_WHY)
        importlib.import_module("torch_xla.distributed.xla_backend")  # registers "xla"
        return "xla"

    def counters(self) -> dict[str, Any]:
        """Graph compilations (new and cached), executions, step boundaries and the seconds
        compiling and executing took, from torch_xla.debug.metrics: cumulative for the process;
        callers take differences around the region they measure (`counter_delta`)."""
        if MODULE not in sys.modules:
            return {}
        met = _metrics()
        names = set(met.counter_names())
        out: dict[str, Any] = {
            key: int(met.counter_value(name) or 0) if name in names else 0
            for name, key in _COUNTERS.items()
        }
        metrics = set(met.metric_names())
        for name, key in _TIMES.items():
            # metric_data: (samples, accumulator, [(time, value)...]); accumulator in ns.
            data = met.metric_data(name) if name in metrics else None
            out[key] = float(data[1]) / 1e9 if data else 0.0
        return out

    # -- capabilities ---------------------------------------------------------------------------
    def _checks(self) -> list[Capability]:
        """torch's generic probe where it applies to xla (pinned host memory, autocast), and
        torch_xla's own answer for the rest: the generic probe would ask torch.accelerator,
        which is another device type's (cuda in a CUDA build) or none."""
        dev = torch.device(self.type, 0)
        own = {c.name: c for c in (*_xla_checks(dev), *_memory_check(dev))}
        return [own.get(c.name, c) for c in generic_checks(self.type)]


def _xla_checks(dev: torch.device) -> list[Capability]:
    """The capabilities torch_xla answers itself, whatever torch.accelerator says."""
    return [
        Capability(
            "accelerator",
            SUBSTITUTE,
            why="xla is not torch.accelerator's device type (torch_xla registers no torch.xla)",
            how="found through torch_xla (adapter device/backends/xla.py); `auto` does not pick "
            "it, `--device xla` does",
        ),
        Capability(
            "synchronize",
            NATIVE,
            how="torch_xla.sync() (runs the pending graph), then xm.wait_device_ops()",
        ),
        Capability(
            "events",
            SUBSTITUTE,
            why="torch_xla has no device events (torch.Event)",
            how="wall clock around torch_xla's synchronize (includes graph launch, and the "
            "graph's compile the first time it is seen)",
        ),
        Capability(
            "generator",
            SUBSTITUTE,
            why="torch.Generator has no xla device; torch_xla keeps its own RNG state",
            how="random data drawn on the CPU generator and copied (trainready does so anyway); "
            "device-side random ops (dropout) use torch_xla's RNG (xm.set_rng_state)",
        ),
        Capability(
            "device_guard",
            SUBSTITUTE,
            why="torch.accelerator.set_device_index does not reach torch_xla",
            how="tensors carry their device explicitly (xla:N); the current device is not set",
        ),
    ]


def _memory_check(dev: torch.device) -> list[Capability]:
    """torch_xla's memory query: PJRT CPU has none ("GetAllocatorStats is not supported")."""
    why = _attempt(lambda: _xm().get_memory_info(dev))
    if why is None:
        return [Capability("memory_stats", NATIVE, how="xm.get_memory_info")]
    return [
        Capability(
            "memory_stats",
            ABSENT,
            why=f"xm.get_memory_info: {why}",
            how="device memory (allocated, reserved, peak) is not measured",
        )
    ]
