"""The only package that knows device APIs, one module per concern:

- runtime: device names (resolve, available_devices, device_type, torch_dtype), synchronize,
  step_boundary, Timer, last-level cache flush
- backends: one adapter per device type (`adapter`): discovery, synchronize, step boundaries,
  compile backend, the capabilities the instruments may use (capabilities: probed once, with
  stated substitutes), the backend's own counters
- memory: memory_stats, reset_peak_memory, is_oom
- identity: device_info, device_key, vendor_stack (driver and library versions)
- peak: calibrate_peak, resolve_peak (the caller's PeakCache keeps measured peaks)
- reference: the drift reference, a fixed GEMM (read_reference, reference_rate, reference_workload)
- settle: the rule readings of a timed workload follow (warm-up, sizing, agreement), which the
  reference and the peak calibration share
- fallback: the ops each backend records as run on the CPU (FallbackWatch)
- distributed: default_pg_backend, rank_device, set_current_device
- compile_cache: compile_cache_env

Everything goes through `torch.accelerator` / `torch.Event` where PyTorch offers a generic API,
so CUDA, ROCm, XPU, MPS and PrivateUse1 backends (e.g. Neuron) share one code path. Nothing here
imports `trainready.core` beyond its base, `core.config`. Callers import from the package; tests that patch a name patch the
module it lives in.
"""

from trainready.device.backends import counted, default_compile_backend
from trainready.device.capabilities import MissingCapability
from trainready.device.compile_cache import compile_cache_env
from trainready.device.distributed import default_pg_backend, rank_device, set_current_device
from trainready.device.fallback import (
    FALLBACK_SWITCHES,
    XPU_UNNAMED_FALLBACK,
    FallbackWatch,
    fallback_switches,
    fallback_watch,
    neuron_fallback_ops,
    parse_fallback_warnings,
    xla_fallback_counts,
)
from trainready.device.identity import (
    AMDGPU_VERSION_FILE,
    VENDOR_TOOL_TIMEOUT_S,
    device_info,
    device_key,
    vendor_stack,
)
from trainready.device.memory import is_oom, memory_stats, reset_peak_memory
from trainready.device.peak import PeakCache, calibrate_peak, resolve_peak
from trainready.device.reference import Reading, read_reference, reference_rate, reference_workload
from trainready.device.runtime import (
    DeviceError,
    GiB,
    MiB,
    Timer,
    autocast,
    available_devices,
    device_capabilities,
    device_type,
    flush_cache,
    resolve,
    rotation_copies,
    step_boundary,
    synchronize,
    timer,
    torch_dtype,
)

__all__ = [
    "AMDGPU_VERSION_FILE",
    "FALLBACK_SWITCHES",
    "VENDOR_TOOL_TIMEOUT_S",
    "XPU_UNNAMED_FALLBACK",
    "DeviceError",
    "FallbackWatch",
    "GiB",
    "MiB",
    "MissingCapability",
    "PeakCache",
    "Reading",
    "Timer",
    "autocast",
    "available_devices",
    "calibrate_peak",
    "compile_cache_env",
    "default_pg_backend",
    "device_capabilities",
    "device_info",
    "device_key",
    "device_type",
    "fallback_switches",
    "fallback_watch",
    "counted",
    "default_compile_backend",
    "flush_cache",
    "rotation_copies",
    "is_oom",
    "memory_stats",
    "neuron_fallback_ops",
    "parse_fallback_warnings",
    "rank_device",
    "read_reference",
    "reference_rate",
    "reference_workload",
    "reset_peak_memory",
    "resolve",
    "resolve_peak",
    "set_current_device",
    "step_boundary",
    "synchronize",
    "timer",
    "torch_dtype",
    "vendor_stack",
    "xla_fallback_counts",
]
