"""What a device is: its name and properties (`device_info`), the key a measured peak is cached
under (`device_key`), and the driver and library versions under torch (`vendor_stack`).

The few vendor calls (device properties, driver tools) are confined to small helpers here.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainready.device.backends import adapter
from trainready.device.compat import accelerator_api
from trainready.device.memory import _optional, _total_ram_bytes
from trainready.device.runtime import GiB


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
    get_memory_info = accelerator_api("get_memory_info")
    mem_info = _optional(get_memory_info, dev) if get_memory_info else None
    if mem_info:
        props["total_memory"] = int(mem_info[1])
    get_capability = accelerator_api("get_device_capability")
    caps = _optional(get_capability, dev) if get_capability else None
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
        own = adapter(dev.type).properties(dev)
        info.update(_accelerator_properties(dev) if own is None else own)
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
