"""Device choices for torch.distributed: the process-group backend and each rank's device."""

from __future__ import annotations

import torch

from trainready.core.config import ConfigError
from trainready.device.backends import adapter
from trainready.device.runtime import _SINGLE_DEVICE, device_type


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
    own = adapter(dev_type).pg_backend() if dev_type != "cpu" else None
    if own is not None:
        return own
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
    # A backend without a device guard has one current device: tensors name theirs anyway.
    if dev.type != "cpu" and dev.index is not None and adapter(dev.type).has("device_guard"):
        torch.accelerator.set_device_index(dev.index)
