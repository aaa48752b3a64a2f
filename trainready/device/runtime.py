"""Which devices exist, what they are called, and how to wait for and time their work.

Everything goes through `torch.accelerator` / `torch.Event` where PyTorch offers a generic API,
so CUDA, ROCm, XPU, MPS and PrivateUse1 backends (e.g. Neuron) share one code path.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from pathlib import Path

import torch

from trainready.core.config import DTYPES, ConfigError
from trainready.device.backends import REGISTERING_MODULES, adapter
from trainready.device.capabilities import MissingCapability, not_native

MiB = 1 << 20
GiB = 1 << 30

_TORCH_DTYPES = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp64": torch.float64,
}
assert tuple(_TORCH_DTYPES) == DTYPES, "dtype names must match trainready.core.config.DTYPES"

# Backends with a single device, addressed without an index.
_SINGLE_DEVICE = frozenset({"mps"})

_DEVICE_SPEC = re.compile(r"([a-z_][a-z0-9_]*)(?::(\d+))?")

# Larger than any current accelerator's last-level cache (L2: H200 50 MB, B200 126 MB; the
# memory-side Infinity Cache of MI300X/MI325X/MI355X: 256 MB), so writing it evicts whatever
# a previous repeat left cached.
_ACCEL_FLUSH_BYTES = 512 * MiB
_CPU_FLUSH_FALLBACK_BYTES = 64 * MiB
_flush_buffers: dict[str, torch.Tensor] = {}


class DeviceError(ConfigError):
    """A device the user asked for that does not exist here; the message names valid choices."""


def torch_dtype(name: str) -> torch.dtype:
    """'fp32' | 'bf16' | 'fp16' | 'fp64' -> the torch dtype."""
    if name not in _TORCH_DTYPES:
        raise ConfigError(f"unknown dtype {name!r}; valid: {', '.join(_TORCH_DTYPES)}")
    return _TORCH_DTYPES[name]


# -- discovery ------------------------------------------------------------------------------------
def _backend_types() -> list[str]:
    """Device types worth probing: the built-in ones, PrivateUse1's name, and the accelerator."""
    types = ["cuda", "xpu", "mps"]
    # PrivateUse1 counts once a backend has registered its module (e.g. torch.neuron).
    privateuse1 = torch._C._get_privateuse1_backend_name()
    acc = torch.accelerator.current_accelerator()
    for extra in (privateuse1 if hasattr(torch, privateuse1) else None, acc.type if acc else None):
        if extra and extra not in types:
            types.append(extra)
    # A type whose adapter names the module registering it counts once that is imported
    # (torch_xla: "xla" has neither a torch.xla module nor torch.accelerator).
    types += [t for t, m in REGISTERING_MODULES.items() if m in sys.modules and t not in types]
    return types


def _device_count(dev_type: str) -> int:
    """How many devices of a type this process can use; 0 when its backend is absent."""
    try:
        if dev_type == "mps":
            return int(torch.backends.mps.is_available())
        return adapter(dev_type).device_count()
    except Exception:  # a half-installed vendor stack must not take the whole tool down
        return 0


def available_devices() -> list[str]:
    """'cpu' first, then every accelerator device this process can use, e.g. 'cuda:0', 'mps'."""
    devices = ["cpu"]
    for dev_type in _backend_types():
        count = _device_count(dev_type)
        if dev_type in _SINGLE_DEVICE:
            devices += [dev_type] if count else []
        else:
            devices += [f"{dev_type}:{i}" for i in range(count)]
    return devices


def resolve(spec: str) -> str:
    """A user's device spec -> a canonical, available device string ('cpu', 'cuda:0', 'mps').

    'auto' picks the first device of the current accelerator, else the cpu; 'cuda' means
    'cuda:0'. Unknown or unavailable devices raise DeviceError naming what is available.
    """
    text = spec.strip().lower()
    available = available_devices()
    if text == "auto":
        acc = torch.accelerator.current_accelerator(check_available=True)
        if acc is None:
            return "cpu"
        return acc.type if acc.type in _SINGLE_DEVICE else f"{acc.type}:0"
    m = _DEVICE_SPEC.fullmatch(text)
    if m is None or m.group(1) not in ("cpu", *_backend_types()):
        raise DeviceError(f"unknown device {spec!r}; valid: {', '.join(available)}, auto")
    dev_type, index = m.group(1), int(m.group(2) or 0)
    if dev_type == "cpu" or dev_type in _SINGLE_DEVICE:
        canonical = dev_type if index == 0 else f"{dev_type}:{index}"
    else:
        canonical = f"{dev_type}:{index}"
    if canonical not in available:
        raise DeviceError(
            f"device {canonical!r} is not available on this machine; "
            f"available: {', '.join(available)}"
        )
    return canonical


def device_type(device: str) -> str:
    """'cuda:1' -> 'cuda'."""
    return torch.device(device).type


def synchronize(device: str) -> None:
    """Wait for all queued work on the device; a no-op on the cpu, whose ops are synchronous.

    Through the device's adapter: `torch.accelerator.synchronize` where the backend has it, a
    device-to-host copy of a scalar where it does not (`device/capabilities.py`), the stack's own
    wait on a lazy backend (torch_xla)."""
    dev = torch.device(device)
    if dev.type != "cpu":
        adapter(dev.type).synchronize(dev)


def device_capabilities(device: str) -> list[dict[str, str]]:
    """What the device's backend lacks of the instruments trainready uses, and what stands in for
    each (JSON records; device/capabilities.py). Empty on the CPU and where nothing is missing."""
    dev = torch.device(device)
    return [] if dev.type == "cpu" else not_native(adapter(dev.type).probe())


def autocast(device: str, dtype: str) -> contextlib.AbstractContextManager:
    """`torch.autocast` on the device to `dtype` ('bf16', 'fp16'); MissingCapability (the case is
    unsupported) where the backend has no autocast."""
    dev_type = device_type(device)
    if not adapter(dev_type).has("autocast"):
        raise MissingCapability(f"the {dev_type} backend has no autocast (bf16/fp16 autocast)")
    return torch.autocast(dev_type, dtype=torch_dtype(dtype))


def step_boundary(device: str) -> None:
    """End of a training step: a lazy backend (torch_xla) compiles and runs the step's graph
    here; an eager one has nothing to do."""
    dev = torch.device(device)
    if dev.type != "cpu":
        adapter(dev.type).step(dev)


# -- timing ---------------------------------------------------------------------------------------
def _stream(dev: torch.device) -> torch.Stream:
    """The stream work for `dev` is queued on now (its device's, not the current device's)."""
    return torch.accelerator.current_stream(dev)


def _timing_events(device: str) -> tuple[torch.Event, torch.Event] | None:
    """A start/end pair of timing events, or None when the backend cannot time with events.

    Probed once by recording and reading an interval, since some backends accept the
    constructor but fail at `record` or `elapsed_time`.
    """
    dev = torch.device(device)
    if dev.type == "cpu" or not adapter(dev.type).has("events"):
        return None
    try:
        start = torch.Event(device=dev, enable_timing=True)
        end = torch.Event(device=dev, enable_timing=True)
        start.record(_stream(dev))
        end.record(_stream(dev))
        end.synchronize()
        start.elapsed_time(end)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, AttributeError):
        return None
    return start, end


class Timer:
    """Times a region of device work: `start()`, enqueue work, `stop()` -> seconds.

    With device events (`clock == "events"`) the interval is measured on the device stream, so
    it covers exactly the work enqueued between the calls, and work queued before `start()`
    (an L2 flush, say) is not billed. Otherwise (`clock == "wall"`) the device is synchronised
    on both ends around `time.perf_counter`.
    """

    def __init__(self, device: str):
        self.device = device
        self._dev = torch.device(device)
        self._events = _timing_events(device)
        self.clock = "events" if self._events else "wall"
        self._running = False
        self._t0 = 0.0

    def start(self) -> None:
        self._running = True
        if self._events:
            self._events[0].record(_stream(self._dev))
        else:
            synchronize(self.device)
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if not self._running:
            raise RuntimeError("Timer.stop() called before start()")
        self._running = False
        if self._events:
            start, end = self._events
            end.record(_stream(self._dev))
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        synchronize(self.device)
        return time.perf_counter() - self._t0


def timer(device: str) -> Timer:
    """A Timer for `device` (events where the backend has them, else the wall clock)."""
    return Timer(device)


# -- cache flush ----------------------------------------------------------------------------------
def _parse_size(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": MiB, "G": GiB}[m.group(2)]


def _cpu_last_level_cache_bytes() -> int | None:
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            size = _parse_size(f.read_text())
        except OSError:
            continue
        if size:
            sizes.append(size)
    return max(sizes) if sizes else None


def _flush_bytes(device: str) -> int:
    if device_type(device) != "cpu":
        return _ACCEL_FLUSH_BYTES
    llc = _cpu_last_level_cache_bytes()
    # Twice the size, since caches replace only approximately least-recently-used lines.
    return 2 * llc if llc else _CPU_FLUSH_FALLBACK_BYTES


# On the CPU the last-level cache can be hundreds of MiB (480 MiB on the 2-core Intel Xeon VM of
# 2026-12-06), and writing twice that before every timed repeat took 73 ms there, against 1-5 ms
# for a small GEMM: most of a sampling budget went to flushing. There a timed loop cycles through
# copies of its inputs instead (rotating buffers, as nvbench and tritonbench do): by a copy's
# next use, twice the cache's size of other copies has been read since. Up to this much memory.
MAX_ROTATION_BYTES = 2 * GiB
MAX_ROTATION_COPIES = 4096  # inputs smaller than twice the cache over this: flushed instead


def rotation_copies(device: str, nbytes: int) -> int | None:
    """How many copies of inputs of `nbytes` a timed loop should cycle through instead of
    flushing the cache before each repeat (`flush_cache`): enough to cover twice the cache;
    None where flushing is the way (an accelerator, whose flush is a fast memset and whose
    memory is the model's; or more than MAX_ROTATION_COPIES copies, or extra copies over
    MAX_ROTATION_BYTES)."""
    if device_type(device) != "cpu" or nbytes <= 0:
        return None
    copies = max(1, -(-_flush_bytes(device) // nbytes))
    if copies > MAX_ROTATION_COPIES or (copies - 1) * nbytes > MAX_ROTATION_BYTES:
        return None
    return copies


def flush_cache(device: str) -> None:
    """Evict the device's last-level cache by writing a buffer larger than it.

    For microbenchmarks, so a repeat does not read inputs the previous one left cached. The
    buffer is allocated once per device and reused.
    """
    buf = _flush_buffers.get(device)
    if buf is None:
        buf = torch.empty(_flush_bytes(device) // 4, dtype=torch.int32, device=device)
        _flush_buffers[device] = buf
    buf.zero_()
