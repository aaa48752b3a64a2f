"""The only module that knows device APIs: naming, timing, memory, identity and peak FLOP/s.

Everything goes through `torch.accelerator` / `torch.Event` where PyTorch offers a generic API,
so CUDA, ROCm, XPU, MPS and PrivateUse1 backends (e.g. Neuron) share one code path; the few
vendor calls left (device properties for `device_info`) are confined to small helpers here.
"""

from __future__ import annotations

import importlib
import math
import os
import platform
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainready.config import DTYPES, ConfigError
from trainready.peaks import PEAKS, match_kind

if TYPE_CHECKING:
    from trainready.core.store import Store

MiB = 1 << 20
GiB = 1 << 30

_TORCH_DTYPES = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp64": torch.float64,
}
assert tuple(_TORCH_DTYPES) == DTYPES, "dtype names must match trainready.config.DTYPES"

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
    return types


def _device_count(dev_type: str) -> int:
    """How many devices of a type this process can use; 0 when its backend is absent."""
    try:
        if dev_type == "mps":
            return int(torch.backends.mps.is_available())
        acc = torch.accelerator.current_accelerator()
        if acc is not None and acc.type == dev_type:
            return torch.accelerator.device_count() if torch.accelerator.is_available() else 0
        module = getattr(torch, dev_type, None)
        if module is None or not module.is_available():
            return 0
        return int(module.device_count())
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
    """Wait for all queued work on the device; a no-op on the cpu, whose ops are synchronous."""
    dev = torch.device(device)
    if dev.type != "cpu":
        torch.accelerator.synchronize(dev)


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
    if dev.type == "cpu":
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


# -- memory ---------------------------------------------------------------------------------------
def _proc_status_bytes(field: str) -> int | None:
    """A 'kB' field of /proc/self/status (Linux), in bytes."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{field}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _peak_rss_bytes() -> int:
    # VmHWM honours reset_peak_memory (clear_refs); ru_maxrss is the lifetime peak.
    hwm = _proc_status_bytes("VmHWM")
    if hwm is not None:
        return hwm
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, KiB on Linux


def _total_ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    try:
        m = re.search(r"^MemTotal:\s+(\d+)\s+kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def _optional(fn: Any, *args: Any) -> Any:
    """Call a backend query that a given backend may not implement; None when it does not."""
    try:
        return fn(*args)
    except (RuntimeError, NotImplementedError, AttributeError, ValueError, TypeError):
        return None


def memory_stats(device: str) -> dict[str, Any] | None:
    """Bytes in use on the device: allocated, reserved, peak_allocated, total (those known).

    `source` says what the numbers are: "allocator" (the backend's caching allocator) on
    accelerators, "process-rss" (resident set of this process) on the cpu. None if nothing is
    known.
    """
    dev = torch.device(device)
    if dev.type == "cpu":
        stats = {
            "allocated": _proc_status_bytes("VmRSS"),
            "peak_allocated": _peak_rss_bytes(),
            "total": _total_ram_bytes(),
        }
        source = "process-rss"
    else:
        mem_info = _optional(torch.accelerator.get_memory_info, dev)
        stats = {
            "allocated": _optional(torch.accelerator.memory_allocated, dev),
            "reserved": _optional(torch.accelerator.memory_reserved, dev),
            "peak_allocated": _optional(torch.accelerator.max_memory_allocated, dev),
            "total": mem_info[1] if mem_info else None,
        }
        source = "allocator"
    known = {k: int(v) for k, v in stats.items() if v is not None}
    return {**known, "source": source} if known else None


def reset_peak_memory(device: str) -> bool:
    """Start a new peak-memory window; False when the device cannot reset its peak."""
    dev = torch.device(device)
    if dev.type != "cpu":
        try:
            torch.accelerator.reset_peak_memory_stats(dev)
        except (RuntimeError, NotImplementedError, AttributeError, ValueError):
            return False
        return True
    try:
        # Linux >= 4.0: writing 5 resets VmHWM (the peak RSS) to the current RSS.
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def is_oom(exc: BaseException) -> bool:
    """Whether an exception means the device or host ran out of memory."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc).lower()
        return any(
            s in text for s in ("can't allocate memory", "not enough memory", "out of memory")
        )
    return False


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


# -- identity -------------------------------------------------------------------------------------
def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _runtime_versions() -> dict[str, str]:
    versions = {"torch": torch.__version__}
    for name in ("cuda", "hip", "xpu"):
        value = getattr(torch.version, name, None)
        if value:
            versions[name] = str(value)
    if torch.backends.cudnn.is_available():
        versions["cudnn"] = str(torch.backends.cudnn.version())
    return versions


def _cuda_properties(index: int) -> dict[str, Any]:
    p = torch.cuda.get_device_properties(index)
    props: dict[str, Any] = {
        "name": p.name,
        "total_memory": p.total_memory,
        "capability": f"{p.major}.{p.minor}",
        "multi_processor_count": p.multi_processor_count,
    }
    for attr in ("gcnArchName", "L2_cache_size", "uuid"):
        value = getattr(p, attr, None)
        if value:
            props[attr.lower()] = str(value) if attr == "uuid" else value
    return props


def _xpu_properties(index: int) -> dict[str, Any]:
    p = torch.xpu.get_device_properties(index)
    props: dict[str, Any] = {"name": p.name, "total_memory": p.total_memory}
    for attr in ("driver_version", "max_compute_units", "gpu_subslice_count"):
        value = getattr(p, attr, None)
        if value:
            props[attr] = value
    return props


def _accelerator_properties(dev: torch.device) -> dict[str, Any]:
    """Name and memory through the generic API, plus what the backend module offers."""
    module = getattr(torch, dev.type, None)
    get_name = getattr(module, "get_device_name", None)
    name = _optional(get_name, dev.index or 0) if get_name else None
    if name is None and dev.type == "mps":
        name = f"{_cpu_name()} (MPS)"  # the GPU is part of the Apple SoC the cpu names
    props: dict[str, Any] = {"name": name or dev.type}
    mem_info = _optional(torch.accelerator.get_memory_info, dev)
    if mem_info:
        props["total_memory"] = int(mem_info[1])
    caps = _optional(torch.accelerator.get_device_capability, dev)
    if caps and "supported_dtypes" in caps:
        props["supported_dtypes"] = sorted(
            str(d).removeprefix("torch.") for d in caps["supported_dtypes"]
        )
    version = getattr(module, "__version__", None)
    if version:
        props[f"{dev.type}_version"] = str(version)
    return props


def device_info(device: str) -> dict[str, Any]:
    """What this device is: name, type, index, total_memory, properties, runtime versions."""
    dev = torch.device(device)
    info: dict[str, Any] = {"device": device, "type": dev.type, "index": dev.index}
    if dev.type == "cpu":
        info.update(
            name=_cpu_name(),
            total_memory=_total_ram_bytes(),
            threads=torch.get_num_threads(),
            logical_cpus=os.cpu_count(),
            machine=platform.machine(),
        )
    elif dev.type == "cuda":
        info.update(_cuda_properties(dev.index or 0))
    elif dev.type == "xpu":
        info.update(_xpu_properties(dev.index or 0))
    else:
        info.update(_accelerator_properties(dev))
    info["runtime"] = _runtime_versions()
    return info


def device_key(device: str) -> str:
    """A stable identity for a measured peak: same hardware, thread count and torch, same key.

    e.g. 'cpu|AMD EPYC 9654|threads=2|torch=2.13.0' or 'cuda|NVIDIA H200|mem=140GiB|torch=2.13.0'.
    Memory separates MIG slices and board variants; the torch version is in the key because a
    new BLAS can move the achievable peak, and a stale calibration would skew MFU.
    """
    info = device_info(device)
    parts = [info["type"], info["name"]]
    if info["type"] == "cpu":
        parts.append(f"threads={info['threads']}")
    elif info.get("total_memory"):
        parts.append(f"mem={round(info['total_memory'] / GiB)}GiB")
    parts.append(f"torch={torch.__version__.split('+')[0]}")
    return "|".join(parts)


# -- vendor stack ---------------------------------------------------------------------------------
# What sits under torch on a device: the kernel driver, the collective library (NCCL; RCCL under
# the same API on ROCm) and, on ROCm, the HIP runtime and the ROCm install. Read once per run for
# its environment snapshot, never by device_info (tools such as nvidia-smi take a while). Each
# entry is {"version", "source"}, or {"version": None, "why"}: a missing tool or library must
# never fail a run over a version string.
VENDOR_TOOL_TIMEOUT_S = 5.0
# The amdgpu kernel module's version; only a DKMS-installed driver has it (not the in-tree one).
AMDGPU_VERSION_FILE = Path("/sys/module/amdgpu/version")


class _Unknown(Exception):
    """Why a version cannot be read here (a missing tool, a library not installed)."""


Reader = Callable[[], str]


def _probe(*sources: tuple[str, Reader]) -> dict[str, str | None]:
    """The version the first source that answers gives, with its name; else why none did."""
    why = []
    for name, read in sources:
        try:
            return {"version": read(), "source": name}
        except Exception as e:  # noqa: BLE001 - a half-installed stack is a finding, not a crash
            reason = str(e) if isinstance(e, _Unknown) else f"{type(e).__name__}: {e}"
            why.append(f"{name}: {reason}")
    return {"version": None, "why": "; ".join(why)}


def _run_tool(*cmd: str) -> str:
    """The stdout of a vendor command-line tool, bounded by VENDOR_TOOL_TIMEOUT_S."""
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=VENDOR_TOOL_TIMEOUT_S, check=True
        )
    except FileNotFoundError:
        raise _Unknown("not installed") from None
    except subprocess.TimeoutExpired:
        raise _Unknown(f"no answer within {VENDOR_TOOL_TIMEOUT_S:g} s") from None
    except subprocess.CalledProcessError as e:
        said = " ".join((e.stderr or e.stdout or "").split())[:200]  # one line in the snapshot
        raise _Unknown(f"exit code {e.returncode}: {said}") from None
    return done.stdout


def _import_vendor(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise _Unknown("not installed") from None


def _nccl_version() -> str:
    if not torch.cuda.is_available():
        raise _Unknown("CUDA is not available")
    major, minor, patch, *suffix = torch.cuda.nccl.version()
    return f"{major}.{minor}.{patch}{''.join(suffix)}"


def _nvml_driver() -> str:
    # torch 2.13 has no driver-version API of its own (torch.cuda only uses NVML to count devices).
    nvml = _import_vendor("pynvml")
    nvml.nvmlInit()
    try:
        version = nvml.nvmlSystemGetDriverVersion()
    finally:
        nvml.nvmlShutdown()
    return version.decode() if isinstance(version, bytes) else str(version)


def _nvidia_smi_driver() -> str:
    out = _run_tool("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    per_gpu = out.split()  # one line per GPU, all the same driver
    if not per_gpu:
        raise _Unknown("printed no driver version")
    return per_gpu[0]


def _amdsmi_driver() -> str:
    smi = _import_vendor("amdsmi")
    smi.amdsmi_init()
    try:
        handle = smi.amdsmi_get_processor_handles()[0]
        return str(smi.amdsmi_get_gpu_driver_info(handle)["driver_version"])
    finally:
        smi.amdsmi_shut_down()


def _read_version_file(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        raise _Unknown(f"no {path}") from None


def _rocm_smi_driver() -> str:
    m = re.search(r"Driver version:\s*(\S+)", _run_tool("rocm-smi", "--showdriverversion"))
    if m is None:
        raise _Unknown("printed no driver version")
    return m.group(1)


def _hip_runtime_version() -> str:
    # As torch.utils.collect_env reads it: the build configuration names the HIP runtime.
    m = re.search(r"HIP Runtime\s+(\S+)", torch._C._show_config())
    if m is None:
        raise _Unknown("names no HIP runtime")
    return m.group(1)


def _rocm_path() -> Path:
    return Path(os.environ.get("ROCM_PATH", "/opt/rocm"))


def _nvidia_stack() -> dict[str, Any]:
    return {
        "vendor": "nvidia",
        "driver": _probe(("pynvml", _nvml_driver), ("nvidia-smi", _nvidia_smi_driver)),
        "nccl": _probe(("torch.cuda.nccl", _nccl_version)),
    }


def _amd_stack() -> dict[str, Any]:
    return {
        "vendor": "amd",
        "driver": _probe(
            ("amdsmi", _amdsmi_driver),
            ("sysfs", lambda: _read_version_file(AMDGPU_VERSION_FILE)),
            ("rocm-smi", _rocm_smi_driver),
        ),
        "nccl": _probe(("torch.cuda.nccl (RCCL)", _nccl_version)),
        "hip_runtime": _probe(("torch build config", _hip_runtime_version)),
        "rocm": _probe(("ROCM_PATH", lambda: _read_version_file(_rocm_path() / ".info/version"))),
    }


def _intel_stack(index: int) -> dict[str, Any]:
    def driver() -> str:
        return str(torch.xpu.get_device_properties(index).driver_version)

    return {"vendor": "intel", "driver": _probe(("torch.xpu device properties", driver))}


def vendor_stack(device: str) -> dict[str, Any]:
    """The driver and library versions under torch for `device` (see the section comment).

    NVIDIA: driver from pynvml, else nvidia-smi; NCCL. AMD (a ROCm build's "cuda" device):
    driver from amdsmi, else the amdgpu module's sysfs version, else rocm-smi; RCCL; HIP runtime;
    the ROCm install. Intel XPU: the driver its device properties name. Others: why none.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        return _amd_stack() if torch.version.hip else _nvidia_stack()
    if dev.type == "xpu":
        return _intel_stack(dev.index or 0)
    if dev.type == "cpu":
        why = "the cpu has no device driver"
    else:
        why = f"trainready reads no driver version for {dev.type!r} devices"
    return {"vendor": None, "driver": {"version": None, "why": why}}


# -- peak FLOP/s ----------------------------------------------------------------------------------
def _time_matmuls(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, count: int, clock: Timer
) -> float:
    clock.start()
    for _ in range(count):
        torch.matmul(a, b, out=out)
    return clock.stop()


def _operands(n: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    # Random normal inputs, not zeros: tensor-core power, and hence clocks, depend on the bits.
    # Drawn in fp32 because not every backend has a random kernel for every dtype.
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return a, b, torch.empty(n, n, device=device, dtype=dtype)


def _grow_size(
    device: str,
    tdtype: torch.dtype,
    sizes: tuple[int, int],
    target_s: float,
    repeats: int,
    deadline: float,
    clock: Timer,
) -> tuple[int, tuple[torch.Tensor, ...], float]:
    """Double n from sizes[0] to sizes[1]; return the size to sample, its operands, one time.

    Growth goes on while a product is shorter than `target_s` (too short to time well) or the
    throughput still rises by 5% (BLAS efficiency climbs with size), as long as the next size,
    probed and sampled, fits before `deadline`. A size that runs out of memory ends the growth.
    """
    n, max_n = sizes
    best: tuple[int, tuple[torch.Tensor, ...], float] | None = None
    while True:
        try:
            ops = _operands(n, tdtype, device)
            if best is None:
                _time_matmuls(*ops, 1, clock)  # the first call pays library and kernel setup
            t = _time_matmuls(*ops, 1, clock)
        except (RuntimeError, MemoryError) as e:
            if best is None or not is_oom(e):
                raise
            return best
        improving = best is None or best[2] * 8 / t >= 1.05  # rate(2n) / rate(n)
        best = (n, ops, t)
        next_cost = 8 * t * (1 + repeats)
        if (
            2 * n > max_n
            or (t >= target_s and not improving)
            or time.perf_counter() + next_cost > deadline
        ):
            return best
        n *= 2


def calibrate_peak(
    device: str,
    dtype: str,
    *,
    start_n: int | None = None,
    max_n: int | None = None,
    target_s: float = 0.05,
    repeats: int = 5,
    budget_s: float | None = None,
) -> dict[str, Any]:
    """Measure the achievable matmul peak: {"peak_flops", "n", "tflops_samples", "clock", ...}.

    Square matmuls grow by doubling from `start_n` up to `max_n` (see `_grow_size`) until a
    product takes at least `target_s` and bigger ones stop paying; then the best of `repeats`
    samples, each `products_per_sample` back-to-back products lasting about `target_s`, so
    launch overhead and timer resolution do not matter. Sampling stops early once `budget_s` is
    spent (at least one sample is always taken).

    Defaults: 1024..8192 and 30 s on accelerators; 256..4096 and 5 s on the cpu, where some
    dtypes (fp16 without native support) run a hundred times slower than others.
    """
    on_cpu = device_type(device) == "cpu"
    sizes = (start_n or (256 if on_cpu else 1024), max_n or (4096 if on_cpu else 8192))
    budget_s = budget_s if budget_s is not None else (5.0 if on_cpu else 30.0)
    clock = Timer(device)
    deadline = time.perf_counter() + budget_s
    n, ops, t_one = _grow_size(
        device, torch_dtype(dtype), sizes, target_s, repeats, deadline, clock
    )

    per_sample = max(1, math.ceil(target_s / max(t_one, 1e-9)))
    flops = 2.0 * n**3 * per_sample
    samples: list[float] = []
    for _ in range(repeats):
        samples.append(flops / _time_matmuls(*ops, per_sample, clock) / 1e12)
        if time.perf_counter() >= deadline:
            break
    return {
        "peak_flops": max(samples) * 1e12,
        "n": n,
        "dtype": dtype,
        "products_per_sample": per_sample,
        "tflops_samples": samples,
        "clock": clock.clock,
    }


def _measured_record(
    kind: str | None, dtype: str, calib: dict[str, Any], key: str
) -> dict[str, Any]:
    n = calib["n"]
    return {
        "flops": float(calib["peak_flops"]),
        "source": "measured",
        "kind": kind,
        "label": f"vs measured peak ({dtype} matmul calibration, {n}³)",
        "device_key": key,
        "n": n,
        "measured_at": calib.get("measured_at"),
    }


def resolve_peak(
    device: str, dtype: str, store: Store | None = None, *, recalibrate: bool = False
) -> dict[str, Any]:
    """The peak FLOP/s to compute MFU against: {"flops", "source", "kind", "label", ...}.

    From the peak table when the device's name is a known kind with a figure for `dtype`;
    otherwise measured by `calibrate_peak` (the cpu always is), and cached in `store` under
    `device_key` so a later run on the same machine reuses it (`recalibrate` measures afresh and
    replaces the cached figure). Never another device's peak.
    """
    torch_dtype(dtype)
    info = device_info(device)
    kind = None if info["type"] == "cpu" else match_kind(str(info["name"]))
    if kind is not None and dtype in PEAKS[kind]:
        return {
            "flops": PEAKS[kind][dtype],
            "source": "table",
            "kind": kind,
            "label": f"{kind.upper()} {dtype} dense peak (table)",
        }
    key = device_key(device)
    cached = store.get_calibration(key, dtype) if store is not None and not recalibrate else None
    if cached is not None:
        return _measured_record(kind, dtype, cached, key)
    calib = calibrate_peak(device, dtype)
    if store is not None:
        details = {k: v for k, v in calib.items() if k != "peak_flops"}
        store.put_calibration(key, dtype, calib["peak_flops"], details)
        calib = store.get_calibration(key, dtype) or calib
    return _measured_record(kind, dtype, calib, key)


# -- distributed ----------------------------------------------------------------------------------
def default_pg_backend(device: str) -> str:
    """The process-group backend torch pairs with the device type: gloo on the cpu, nccl on
    CUDA/ROCm, xccl on XPU, and whatever a vendor registered for its device
    (`torch.distributed.Backend.register_backend(..., devices=[...])`). A device torch does not
    know, or one no backend is registered for, is a ConfigError that says to name one."""
    import torch.distributed as dist

    try:
        dev_type = device_type(device)
    except RuntimeError as e:  # torch.device("foo"): not a device type torch knows
        first = str(e).splitlines()[0]
        raise ConfigError(
            f"unknown device {device!r} ({first}); no process-group backend to pick for it"
        ) from None
    try:
        backend = dist.get_default_backend_for_device(dev_type)
    except (ValueError, RuntimeError) as e:
        reason = str(e)
    else:
        # torch's testing backend claims cpu/cuda/hpu/xpu devices nobody else has claimed as soon
        # as FSDP is imported (torch/testing/_internal/distributed/fake_pg.py); it moves no data.
        if backend != "fake":
            return backend
        reason = "only torch's non-communicating 'fake' test backend is registered for it"
    raise ConfigError(
        f"no process-group backend is registered for {dev_type!r} ({reason}); "
        "name one with --pg-backend"
    )


def rank_device(device: str, local_rank: int) -> str:
    """The device a rank drives: the cpu for every rank, else one device per local rank, counted
    from the index the user gave ('cuda:2' with 2 ranks -> 'cuda:2', 'cuda:3')."""
    dev = torch.device(device)
    if dev.type == "cpu" or dev.type in _SINGLE_DEVICE:
        return device
    return f"{dev.type}:{(dev.index or 0) + local_rank}"


def set_current_device(device: str) -> None:
    """Make `device` the current one of its type, so collectives and default allocations use it."""
    dev = torch.device(device)
    if dev.type != "cpu" and dev.index is not None:
        torch.accelerator.set_device_index(dev.index)


# -- compile caches -------------------------------------------------------------------------------
# On-disk compile caches by device type, beyond Inductor's own (which every device uses): the
# environment variable each stack reads, and the subdirectory it gets under a cache root.
_VENDOR_COMPILE_CACHES: dict[str, dict[str, str]] = {
    # torch-neuronx: the torch.compile backend's NEFF cache, and the Neuron Persistent Cache of the
    # XLA path (neuronx-cc artifacts; default /var/tmp/neuron-compile-cache).
    "neuron": {"TORCH_NEURONX_NEFF_CACHE_DIR": "neff", "NEURON_COMPILE_CACHE_URL": "neuron-cc"},
    # torch-neuronx 2.9 and older run on torch_xla (device "xla"): neuronx-cc's Neuron Persistent
    # Cache (aws-neuron-sdk general/arch/neuron-features/neuron-caching.rst); other XLA devices
    # (TPU) never read it. A `--cache_dir` in NEURON_CC_FLAGS would still take priority.
    "xla": {"NEURON_COMPILE_CACHE_URL": "neuron-cc"},
}


def compile_cache_env(device: str, root: str | Path) -> dict[str, str]:
    """Environment variables that put every on-disk compile cache for `device` under `root`.

    A process started with them compiles cold when `root` is empty and reuses what an earlier
    process left there: Inductor's FX-graph, AOTAutograd and kernel caches
    (TORCHINDUCTOR_CACHE_DIR), Triton's kernel cache (TRITON_CACHE_DIR, which otherwise defaults
    to the user's home and would outlive a "cold" run), and the vendor's caches where the device
    has them.
    """
    root = Path(root)
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
    }
    for var, sub in _VENDOR_COMPILE_CACHES.get(device_type(device), {}).items():
        env[var] = str(root / sub)
    return env


# -- CPU fallbacks, as each backend records them ----------------------------------------------------
# Each backend's own record of the ops it ran on the CPU, as its source writes it (read June 2026;
# tests/data/fallbacks/README.md has recorded examples of every format and where they come from):
# - torch_xla, and torch-neuronx 2.9 and older (which run on it, device "xla"): the boxed fallback
#   bumps a metrics counter named after the op, `aten::nonzero`; lowered ops count as `xla::...`
#   (https://github.com/pytorch/xla/blob/master/torch_xla/csrc/aten_cpu_fallback.cpp).
# - Neuron native (TorchNeuron, torch-neuronx 2.10+, device "neuron"): `torch_neuronx.get_fallback_ops()`
#   is the *set* of op names that fell back since `clear_op_tracking()` (no counts); the matching
#   log line is dropped by its logger, so there is no warning to parse (torch_neuronx/neuron.py,
#   csrc/core/NeuronOpTracking.cpp and NeuronLogging.h of https://github.com/aws-neuron/torch-neuronx,
#   read in the public mirror github.com/parmoham-aws/test-repo-parmoham). Ops with no Neuron kernel
#   always fall back; TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1 makes a failing Neuron kernel
#   raise instead of retrying on the CPU.
# - MPS (https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/mps/MPSFallback.mm): "The operator
#   'aten::foo' is not currently supported on the MPS backend and will fall back to run on the CPU."
#   through TORCH_WARN_ONCE, which warn-always turns into one warning per call. Ops without an MPS
#   kernel fall back only with PYTORCH_ENABLE_MPS_FALLBACK=1 (else NotImplementedError); a short list
#   of ops always does.
# - XPU (https://github.com/intel/torch-xpu-ops/blob/main/src/ATen/native/xpu/XPUFallback.template):
#   ops on its fallback list always fall back, other missing ops only with PYTORCH_ENABLE_XPU_FALLBACK=1
#   (PYTORCH_XPU_FALLBACK_OP forces named ops). By default one warning that names no op ("Aten Op
#   fallback from XPU to CPU happens."); with PYTORCH_DEBUG_XPU_FALLBACK=1 one per call, "The operator
#   'aten::foo on the XPU backend is falling back to run on the CPU." (no closing quote). Builds of
#   early 2024 used the MPS wording.
# - Ascend NPU (torch_npu/csrc/aten/VariableFallbackKernel.cpp and core/npu/NPUException.cpp of
#   https://gitcode.com/Ascend/pytorch): the MPS wording after "CAUTION: ", once per op per process,
#   through c10's base warning handler, i.e. straight to stderr and never a Python warning; only on
#   rank 0 and not with TORCH_NPU_DISABLED_WARNING=1. TORCH_NPU_FALLBACK_CPU_DISABLE=1 (Ascend/pytorch
#   pull request 44801, 2026) raises instead of falling back.
# The watch reports these switches and never sets them: the backends read them once, when they load,
# and they change what a case measures. An op that is missing while its switch is off raises, and the
# suites already report that case as unsupported or failed.
_FALLBACK_WARNING = re.compile(
    r"operator '(?P<op>[\w:.]+)'?[^'\n]*?(?:will fall ?back|is falling back) to run on the CPU"
)
_XPU_UNNAMED_WARNING = re.compile(r"Aten Op fallback from XPU to CPU happen")
XPU_UNNAMED_FALLBACK = "<unnamed XPU fallback: PYTORCH_DEBUG_XPU_FALLBACK=1 names the ops>"

# device type -> (variable, what it does) for the switches that decide or reveal CPU fallbacks.
FALLBACK_SWITCHES: dict[str, tuple[tuple[str, str], ...]] = {
    "mps": (
        ("PYTORCH_ENABLE_MPS_FALLBACK", "1: ops without an MPS kernel run on the CPU, else raise"),
    ),
    "xpu": (
        ("PYTORCH_ENABLE_XPU_FALLBACK", "1: ops without an XPU kernel run on the CPU, else raise"),
        ("PYTORCH_DEBUG_XPU_FALLBACK", "1: each fallback warning names its op"),
        ("PYTORCH_XPU_FALLBACK_OP", "ops forced onto the CPU"),
    ),
    "npu": (
        ("TORCH_NPU_FALLBACK_CPU_DISABLE", "1: a fallback raises instead of running on the CPU"),
        ("TORCH_NPU_DISABLED_WARNING", "1: torch_npu prints no warnings, fallbacks included"),
    ),
    "neuron": (
        (
            "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS",
            "1: a failing Neuron kernel raises instead of rerunning on the CPU",
        ),
    ),
}


def fallback_switches(device_type: str) -> dict[str, str | None]:
    """The fallback switches of a device type, as this process's environment sets them."""
    return {name: os.environ.get(name) for name, _ in FALLBACK_SWITCHES.get(device_type, ())}


def _switches_text(device_type: str) -> str:
    return "; ".join(
        f"{name}={os.environ.get(name) or 'unset'} ({what})"
        for name, what in FALLBACK_SWITCHES.get(device_type, ())
    )


def parse_fallback_warnings(messages: list[str]) -> dict[str, int]:
    """Ops named by CPU-fallback warnings or log lines -> how many times each was named.

    Reads the MPS / NPU / early-XPU wording and XPU's debug wording; XPU's default warning, which
    names no op, counts under XPU_UNNAMED_FALLBACK.
    """
    found: dict[str, int] = {}
    for text in messages:
        for m in _FALLBACK_WARNING.finditer(text):
            found[m.group("op")] = found.get(m.group("op"), 0) + 1
        unnamed = len(_XPU_UNNAMED_WARNING.findall(text))
        if unnamed:
            found[XPU_UNNAMED_FALLBACK] = found.get(XPU_UNNAMED_FALLBACK, 0) + unnamed
    return found


def xla_fallback_counts(counters: dict[str, int]) -> dict[str, int]:
    """torch_xla metrics counters -> the `aten::` ones (ops that ran on the CPU), non-zero."""
    return {k: int(v) for k, v in counters.items() if k.startswith("aten::") and v}


def _xla_counters() -> dict[str, int]:
    import torch_xla.debug.metrics as met  # noqa: PLC0415 - only on XLA devices

    return {name: int(met.counter_value(name) or 0) for name in met.counter_names()}


def neuron_fallback_ops(names: list[str] | set[str]) -> dict[str, int]:
    """`torch_neuronx.get_fallback_ops()` -> {op: 1}: it keeps a set, so 1 means "at least once".

    Its C++ fallback records `aten::name.overload`; its Python ops may record a bare name, which gets
    the `aten::` namespace so the same op reads the same on every backend.
    """
    return {(n if "::" in n else f"aten::{n}"): 1 for n in (str(x) for x in names) if n}


def _neuron_op_tracking() -> Any:
    """The torch_neuronx module if it has the op-tracking API (TorchNeuron), else None."""
    try:
        import torch_neuronx  # noqa: PLC0415 - only on Neuron devices
    except ImportError:
        return None
    api = ("get_fallback_ops", "clear_op_tracking")
    return torch_neuronx if all(callable(getattr(torch_neuronx, a, None)) for a in api) else None


class _StderrSpan:
    """What this process writes to file descriptor 2 from now until `read()`, where that is a
    regular file, as in a runner worker (core/worker.py sends both streams to its log). torch_npu's
    fallback warnings go there and nowhere else. Nothing is redirected; Linux only (/proc)."""

    MAX_BYTES = 8 * MiB

    def __init__(self) -> None:
        self.start: int | None = None
        if os.path.isfile("/proc/self/fd/2"):
            try:
                self.start = os.fstat(2).st_size
            except OSError:
                self.start = None

    def read(self) -> str | None:
        if self.start is None:
            return None
        sys.stderr.flush()
        try:
            with open("/proc/self/fd/2", "rb") as f:
                end = os.fstat(f.fileno()).st_size
                start = max(min(self.start, end), end - self.MAX_BYTES)
                f.seek(start)
                return f.read(end - start).decode("utf-8", errors="replace")
        except OSError:
            return None


class FallbackWatch:
    """`with fallback_watch(device) as w: ...` then `w.ops` ({op: count}), `w.source` and
    `w.switches`.

    On the CPU there is nothing to fall back from (`source` says so). XLA: the difference of its
    `aten::` counters. Neuron: TorchNeuron's op tracking, cleared on entry (a set: each op counts 1).
    Other accelerators: the CPU-fallback warnings, with warn-always on so a warning given once in an
    earlier case is given again; for NPU also what the process wrote to stderr meanwhile. `source`
    says which record was read, its limits, and the state of the backend's fallback switches.
    """

    def __init__(self, device: str):
        self.device = str(device)
        self.device_type = self.device.partition(":")[0]
        self.ops: dict[str, int] = {}
        self.switches = fallback_switches(self.device_type)
        self.source = "none: the device is the CPU" if self.device_type == "cpu" else ""
        self._mode = "none" if self.device_type == "cpu" else "warnings"
        self._neuron: Any = None
        self._stderr: _StderrSpan | None = None

    def _sync(self) -> None:
        import contextlib

        with contextlib.suppress(Exception):  # best effort: the record is read either way
            synchronize(self.device)

    def _describe(self, how: str) -> str:
        switches = _switches_text(self.device_type)
        return f"{how}; {switches}" if switches else how

    def __enter__(self) -> FallbackWatch:
        import warnings

        if self._mode == "none":
            return self
        if self.device_type == "xla":
            self._mode = "xla"
            self.source = "torch_xla metrics aten:: counters"
            self._before = xla_fallback_counts(_xla_counters())
            return self
        if self.device_type == "neuron":
            self._neuron = _neuron_op_tracking()
        if self._neuron is not None:
            self._mode = "neuron"
            self.source = self._describe(
                "torch_neuronx.get_fallback_ops() (op tracking cleared at the start; a set, so "
                "each op counts once)"
            )
            self._sync()
            self._neuron.clear_op_tracking()
            return self
        if self.device_type == "neuron":
            how = (
                "CPU-fallback warnings (warn-always); torch_neuronx has no get_fallback_ops() here "
                "and TorchNeuron prints no fallback warnings, so its fallbacks may go unseen"
            )
        elif self.device_type == "npu":
            self._stderr = _StderrSpan()
            how = "torch_npu CPU-fallback warnings on stderr and Python warnings (torch_npu names "
            how += "each op once per process: ops that fell back in an earlier case are not named"
            if self._stderr.start is None:
                how += "; stderr is not a file here, so only Python warnings are read"
            how += ")"
        elif self.device_type == "xpu":
            how = "CPU-fallback warnings (warn-always)"
            if os.environ.get("PYTORCH_DEBUG_XPU_FALLBACK", "0") in ("", "0"):
                how += (
                    f"; without PYTORCH_DEBUG_XPU_FALLBACK=1 they count as {XPU_UNNAMED_FALLBACK}"
                )
        else:
            how = "CPU-fallback warnings (warn-always)"
        self.source = self._describe(how)
        self._warn_always = torch.is_warn_always_enabled()
        torch.set_warn_always(True)
        self._catch = warnings.catch_warnings(record=True)
        self._records = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mode == "none":
            return
        if self._mode == "xla":
            after = xla_fallback_counts(_xla_counters())
            self.ops = {k: v - self._before.get(k, 0) for k, v in after.items()}
            self.ops = {k: v for k, v in self.ops.items() if v > 0}
            return
        if self._mode == "neuron":
            self._sync()
            self.ops = neuron_fallback_ops(self._neuron.get_fallback_ops())
            return
        self._catch.__exit__(*exc)
        torch.set_warn_always(self._warn_always)
        texts = [str(w.message) for w in self._records]
        if self._stderr is not None:
            texts.append(self._stderr.read() or "")
        self.ops = parse_fallback_warnings(texts)


def fallback_watch(device: str) -> FallbackWatch:
    return FallbackWatch(device)
