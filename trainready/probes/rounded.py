"""The float64 code path with the case dtype's numerics: one more honest run, for what every run at
the dtype shares.

The independently rounded runs (`probes/perturb.py`) measure rounding noise as their spread, so
what every run at the dtype does alike cancels out of it: a value that underflows the dtype's
range, an output rounded the same way from the same inputs (measured cases: docs/numerics.md,
"Judging a failure again").

`RoundedOutputs` runs the model *in float64* -- the float64 code path, none of the model's
dtype-dependent code (a fault in its low-precision path is not in this run) -- and rounds every
op's float64 output to the dtype, range included (to 0, a subnormal or inf where the dtype's
would be): the dtype's output roundings and range on the reference's own code. Its distance from
the float64 reference is one sample of the error an honest computation at the dtype makes,
shared parts included (`suites/parity/rejudge.py`, `escalated`, adds it to the noise of a case
still failing); a fault in the model's fp32 path therefore stays caught
(`tests/unit/probes/test_rounded.py`).

fp32 only: under autocast (bf16, fp16) which ops run low is autocast's choice, and rounding every
op would round what autocast keeps in fp32 (softmax, norms, losses): too much noise. Accumulation
inside an op stays float64 (the spread measures that part). A view is left as it is (its base
was rounded); an op that writes into its arguments is rounded in place, so aliasing holds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

# The dtypes a float64 run can be rounded to, op by op (see the module docstring: fp32 only).
ROUNDED_TO = {"fp32": torch.float32}


class RoundedOutputs(TorchDispatchMode):
    """Every op's float64 output rounded to `dtype` (module docstring); `counts["rounded"]` the
    ops whose outputs it rounded."""

    def __init__(self, dtype: str):
        super().__init__()
        if dtype not in ROUNDED_TO:
            raise ValueError(f"a float64 run is rounded op by op to fp32 only; got {dtype!r}")
        self.low = ROUNDED_TO[dtype]
        self.counts: Counter[str] = Counter()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # eager only, as IndependentRounding (no dynamo wrapper per op)

    def _round(self, t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
            return t.to(self.low).to(torch.float64)
        return t

    def _round_in_place(self, t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
            with torch.no_grad():
                t.copy_(t.to(self.low))
        return t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or torch.Tag.inplace_view in func.tags:
            return out  # an alias of a rounded tensor: nothing new to round
        self.counts["rounded"] += 1
        if func._schema.is_mutable:  # in place or out=: the written tensors themselves
            return tree_map(self._round_in_place, out)
        return tree_map(self._round, out)
