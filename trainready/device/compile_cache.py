"""Where a process keeps its on-disk compile caches, so a run can start them cold or warm."""

from __future__ import annotations

from pathlib import Path

from trainready.device.runtime import device_type

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
    to the user's home and would outlive a "cold" run), the vendor's caches where the device
    has them, and the process's temporary directory (TMPDIR, made here: tempfile ignores one
    that does not exist). Inductor keeps its precompiled C++ headers (CPU kernels, cpp_wrapper)
    in `<tempdir>/torchinductor_<user>/precompiled_headers` whatever TORCHINDUCTOR_CACHE_DIR says,
    meant to outlive every cache reset; a fresh machine or container has none, and on the CPU
    building it costs seconds of the first compile.
    """
    root = Path(root)
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "TMPDIR": str(root / "tmp"),
    }
    for var, sub in _VENDOR_COMPILE_CACHES.get(device_type(device), {}).items():
        env[var] = str(root / sub)
    return env
