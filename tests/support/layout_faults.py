"""A device kernel that returns another output layout than PyTorch's meta kernel says, for the
layout check's tests (`trainready/probes/layouts.py`).

Imported with `TRAINREADY_LAYOUT_FAULT` set (a run's `--import tests.support.layout_faults`), it registers,
for the PrivateUse1 key (emu's), an `aten::silu` that computes right but returns its result in
another layout:

- `transposed`: the last two dimensions column-major, a layout a device kernel may prefer; the
  meta kernel says row-major. Eager code that reshapes copies and is right; a compiled graph,
  traced with the meta layout, turned that reshape into a view, which fails on the device.
- `size_one`: row-major, with another stride on a dimension of length 1 (which no view depends
  on): different, and correct; the layout check must not name it.

`silu_then_reshape` is the model for them: TinyLM whose MLP is silu, then a reshape.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from tests.support.parity_faults import TinyLM

ENV = "TRAINREADY_LAYOUT_FAULT"


def _strides(shape: tuple[int, ...], kind: str) -> tuple[int, ...]:
    """Row-major strides, with the kind's change."""
    strides, step = [0] * len(shape), 1
    order = list(range(len(shape)))[::-1]
    if kind == "transposed" and len(shape) >= 2:
        order[0], order[1] = order[1], order[0]  # the last two dims column-major
    for d in order:
        strides[d] = step
        step *= shape[d]
    if kind == "size_one":
        strides = [s * 7 if n == 1 else s for s, n in zip(strides, shape, strict=True)]
    return tuple(strides)


def laid_out(result: torch.Tensor, device: torch.device, kind: str) -> torch.Tensor:
    """`result` on `device` in the kind's layout."""
    out = torch.empty_strided(
        result.shape, _strides(tuple(result.shape), kind), dtype=result.dtype, device=device
    )
    return out.copy_(result)


def plant(kind: str) -> torch.library.Library:
    """Register the kind's `aten::silu` for PrivateUse1; kept alive by the returned library."""
    lib = torch.library.Library("aten", "IMPL")

    def silu(x: torch.Tensor) -> torch.Tensor:
        return laid_out(torch.nn.functional.silu(x.cpu()), x.device, kind)

    lib.impl("silu", silu, "PrivateUse1")
    return lib


class SiluThenReshape(TinyLM):
    traits = {"mlp": "silu", "moe": "dense"}

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        a = torch.nn.functional.silu(self.up(h))
        rows = a.reshape(-1, a.shape[-1])  # a copy in eager where the layout needs one
        return self.down(rows).reshape(h.shape)


def silu_then_reshape(seed: int) -> nn.Module:
    return SiluThenReshape(seed)


_LIB = plant(os.environ[ENV]) if os.environ.get(ENV) else None
