"""Kernels registered as emu's own (PrivateUse1) that do their work on the host, and one that does
not, for the tests of the dispatch watch's round-trip rule (`trainready/device/dispatch.py`).

`plant(kind)` registers one of `KERNELS` for PrivateUse1 through `torch.library`; it stays until
`remove(lib)`. The dispatcher calls each the backend's own kernel (`kind` kernel), so only the
calls it makes give the host work away:

- `mul_via_host`: aten::mul.Tensor as `(a.cpu() * b.cpu()).to(a.device)` (emu's planted
  round-trip, `trainready.testing.emu.roundtrip`);
- `mul_copied_back`: aten::mul.Tensor computed on the host and copied into a device buffer
  (`empty_like(a).copy_(host)`);
- `bmm_via_host`: aten::bmm, one of emu's native kernels, replaced by the same round-trip;
- `mul_on_device` (correct, different): aten::mul.Tensor through emu's native bmm on 1x1
  matrices, never leaving the device. It must pass.

`step()` is the small training step they are judged on (every kernel above is reached).
Imported with `TRAINREADY_ROUNDTRIP_KERNEL=kind` set (a run's `--import
tests.support.roundtrip_kernel`), it plants that kind; `gated_lm` is a parity model whose MLP
gates with aten::mul.Tensor.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn

from tests.support.parity_faults import TinyLM
from trainready.testing.emu.roundtrip import HostRoundtrip, plant_host_roundtrip

ENV = "TRAINREADY_ROUNDTRIP_KERNEL"

FAULTS = {
    "mul_via_host": "mul.Tensor",
    "mul_copied_back": "mul.Tensor",
    "bmm_via_host": "bmm",
}
CORRECT = {"mul_on_device": "mul.Tensor"}


def _host(t: torch.Tensor | float) -> torch.Tensor | float:
    return t.cpu() if isinstance(t, torch.Tensor) else t


def _mul_copied_back(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    host = a.cpu() * _host(b)
    return torch.empty(host.shape, dtype=host.dtype, device=a.device).copy_(host)


def _mul_on_device(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a * b as a batch of 1x1 matrix products (emu's native bmm): no copy leaves the device. A
    0-dim host operand is read as a scalar and filled in on the device."""
    if not isinstance(b, torch.Tensor) or b.device != a.device:
        b = torch.empty((), dtype=a.dtype, device=a.device).fill_(_scalar(b))
    dtype = torch.promote_types(a.dtype, b.dtype)
    x, y = torch.broadcast_tensors(a.to(dtype), b.to(dtype))
    flat = [t.contiguous().view(-1, 1, 1) for t in (x, y)]
    return torch.bmm(*flat).view(x.shape)


def _scalar(b: torch.Tensor | float) -> float:
    return b.item() if isinstance(b, torch.Tensor) else b


# The kinds written here; the others are emu's planted round-trip (`.cpu()`, the CPU kernel,
# `.to(device)`: trainready.testing.emu.roundtrip).
KERNELS: dict[str, Callable[..., torch.Tensor]] = {
    "mul_copied_back": _mul_copied_back,
    "mul_on_device": _mul_on_device,
}


def plant(kind: str) -> HostRoundtrip:
    """Register `kind`'s kernel for PrivateUse1 (the op in FAULTS or CORRECT); the handle's
    `remove()` unregisters it."""
    op = {**FAULTS, **CORRECT}[kind]
    if kind not in KERNELS:
        return plant_host_roundtrip(f"aten::{op}")
    lib = torch.library.Library("aten", "IMPL")
    lib.impl(op, KERNELS[kind], "PrivateUse1")
    return HostRoundtrip(f"aten::{op}", lib)


def remove(planted: HostRoundtrip) -> None:
    planted.remove()


def step(device: str, seed: int = 0) -> Callable[[], torch.Tensor]:
    """A small training step on `device`: linear layers (emu: GEMMs through the CPU fallback), a
    layer norm, a gate (aten::mul.Tensor), attention scores (aten::bmm, native on emu), AdamW."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 8)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(4, 8, device=device)

    def run() -> torch.Tensor:
        h = model(x)
        gated = h * torch.sigmoid(h)  # aten::mul.Tensor
        scores = torch.bmm(gated.unsqueeze(0), gated.T.unsqueeze(0))  # aten::bmm
        loss = scores.softmax(-1).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return run


class GatedLM(TinyLM):
    traits = {"mlp": "swish-gated", "moe": "dense"}

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        u = self.up(h)
        return self.down(u * torch.sigmoid(u))  # aten::mul.Tensor on the device


def gated_lm(seed: int) -> nn.Module:
    return GatedLM(seed)


_LIB = plant(os.environ[ENV]) if os.environ.get(ENV) else None
