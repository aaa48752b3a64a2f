"""Environment snapshot stored with every run: enough to reproduce it, or to explain a difference."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Variables that change what torch, compilers, collectives or vendor stacks do.
ENV_PREFIXES = (
    "TORCH",
    "PYTORCH",
    "TORCHINDUCTOR",
    "CUDA",
    "CUBLAS",
    "CUDNN",
    "NCCL",
    "NVIDIA",
    "HIP",
    "ROCM",
    "HSA",
    "MIOPEN",
    "RCCL",
    "NEURON",
    "XLA",
    "PJRT",
    "TPU",
    "ZE_",
    "ONEAPI",
    "SYCL",
    "CCL",
    "OMP",
    "MKL",
    "KMP",
    "OPENBLAS",
    "HF_",
    "TRANSFORMERS",
    "TRAINREADY",
)

# Vendor stack packages whose versions matter when present.
PACKAGES = (
    "torch",
    "transformers",
    "triton",
    "pytorch-triton-rocm",
    "torch-neuronx",
    "neuronx-cc",
    "torch-xla",
    "intel-extension-for-pytorch",
    "torchtitan",
    "numpy",
    "trainready",
)


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


# Never store credentials (HF_TOKEN and friends): runs and their reports get shared.
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "CREDENTIAL")


def relevant_env_vars() -> dict[str, str]:
    return {
        k: "(redacted)" if any(m in k.upper() for m in SECRET_MARKERS) else v
        for k, v in sorted(os.environ.items())
        if k.startswith(ENV_PREFIXES)
    }


def _git(*args: str) -> str:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=True
    )
    return done.stdout.strip()


def git_sha() -> str | None:
    """The project's own commit ("-dirty" with uncommitted changes), when it runs from a checkout."""
    try:
        sha = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("-dirty" if dirty else "")


def snapshot(device: str, imports: Sequence[str] = ()) -> dict[str, Any]:
    """The snapshot for a run on `device`; `imports`: the run's --import modules (already
    imported), recorded with their version and file."""
    import torch

    from trainready.core.imports import describe
    from trainready.device import device_capabilities, device_info, vendor_stack

    return {
        "python": sys.version.split()[0],
        "os": f"{platform.system()} {platform.release()}",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": getattr(torch.version, "hip", None),
        "torch_git": getattr(torch.version, "git_version", None),
        "packages": package_versions(),
        "env_vars": relevant_env_vars(),
        "device": device_info(device),
        "vendor_stack": vendor_stack(device),
        # What the backend lacks of the instruments, and what stood in (device/capabilities.py).
        "device_capabilities": device_capabilities(device),
        "git_sha": git_sha(),
        # Quoted as a shell would need it, so the run can be repeated by pasting it.
        "command": shlex.join(sys.argv),
        **({"imports": describe(imports)} if imports else {}),
    }
