"""Kinks: decisions of piecewise-linear activations that honest runs may take either way.

ReLU, ReLU6 and Hardtanh decide per element which piece applies: the linear one (the gradient
passes) or the flat one (it stops). Where an element's input sits within rounding of the kink,
an honest run at a lower precision may decide it the other way than float64, as a top-k router
may flip a near-tie (`probes/routing.py`) -- and one element that opens or closes its gradient
path moves every gradient upstream of it at once (measured cases: docs/numerics.md, "Kinks").

`near_kinks(rel_tol, found, limit)`, around a run of the model (the float64 reference's first
step), appends to `found` every element of a kink module's input within `rel_tol` of its input's
rms from a kink, as a `Kink` (module, call, element, value, kink): the nearest, at most one past
`limit`, so the caller can tell there were more. An input exactly at the kink is left out: a
structural zero (an earlier ReLU's, padding) that every run computes alike. `flipping(kink)`
takes that one decision the other way in a run: the flat piece's constant becomes the input
itself (its gradient passes), or the linear piece's input becomes the constant (its gradient
stops); the forward value moves by less than `rel_tol` of the rms. Both find the modules by the names `name_kinks` gives them, which survive the deep
copy a run makes of the model.

Only modules are seen (`nn.ReLU`, `nn.ReLU6`, `nn.Hardtanh`: HF's ACT2FN and timm's layers
are modules); a functional `F.relu` call is not.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

KINK_MODULES = (nn.ReLU, nn.Hardtanh)  # nn.ReLU6 is a Hardtanh
NAME = "_trainready_kink_name"


@dataclass(frozen=True)
class Kink:
    """One element's decision: `value` is its input, `at` the kink, `flat_below` whether the
    flat piece is below the kink (ReLU, Hardtanh's min) or above it (Hardtanh's max)."""

    module: str
    call: int
    index: int
    value: float
    at: float
    flat_below: bool
    rms: float

    @property
    def distance(self) -> float:
        """How far the input is from the kink, in its input's rms."""
        return abs(self.value - self.at) / self.rms if self.rms else float("inf")

    def to_json(self) -> dict:
        return {
            "module": self.module,
            "call": self.call,
            "element": self.index,
            "value": self.value,
            "kink": self.at,
            "distance_rms": self.distance,
        }


def _kinks(module: nn.Module) -> list[tuple[float, bool]]:
    """(kink, flat piece below it) of a kink module."""
    if isinstance(module, nn.Hardtanh):
        return [(float(module.min_val), True), (float(module.max_val), False)]
    return [(0.0, True)]


def name_kinks(model: nn.Module) -> int:
    """Names every kink module of `model` by its path (kept by deep copies); how many."""
    n = 0
    for name, module in model.named_modules():
        if isinstance(module, KINK_MODULES):
            setattr(module, NAME, name)
            n += 1
    return n


class _Calls:
    """Counts each named kink module's calls in a run (a module may be called several times)."""

    def __init__(self) -> None:
        self.count: dict[str, int] = defaultdict(int)

    def next(self, module: nn.Module) -> tuple[str, int] | None:
        name = getattr(module, NAME, None)
        if name is None or not isinstance(module, KINK_MODULES):
            return None
        call = self.count[name]
        self.count[name] += 1
        return name, call


@contextlib.contextmanager
def near_kinks(rel_tol: float, found: list[Kink], limit: int) -> Iterator[None]:
    """Within the block, appends to `found` every element of a named kink module's input within
    `rel_tol` of the input's rms from a kink (the nearest `limit` of them, by distance)."""
    calls = _Calls()

    def hook(module: nn.Module, args: tuple) -> None:
        where = calls.next(module)
        if where is None or not args or not isinstance(args[0], torch.Tensor):
            return
        x = args[0].detach()
        rms = float(x.double().pow(2).mean().sqrt()) if x.numel() else 0.0
        for at, flat_below in _kinks(module):
            gap = (x.double() - at).abs()
            near = ((gap <= rel_tol * rms) & (gap > 0)).flatten().nonzero().flatten()
            for i in near[: limit + 1].tolist():
                value = float(x.flatten()[i])
                found.append(Kink(*where, int(i), value, at, flat_below, rms))

    handle = nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()
        found.sort(key=lambda k: k.distance)
        del found[limit + 1 :]  # one past the limit: the caller can tell there were more


@contextlib.contextmanager
def flipping(kink: Kink) -> Iterator[None]:
    """Within the block, `kink`'s decision is taken the other way (module docstring)."""
    calls = _Calls()
    inputs: dict[int, torch.Tensor] = {}

    def pre(module: nn.Module, args: tuple) -> None:
        where = calls.next(module)
        if where == (kink.module, kink.call):
            inputs[id(module)] = args[0].clone()  # before an in-place ReLU overwrites it

    def post(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor | None:
        x = inputs.pop(id(module), None)
        if x is None:
            return None
        flat = x <= kink.at if kink.flat_below else x >= kink.at
        other = torch.where(flat, x, torch.full_like(x, kink.at))
        mask = torch.zeros(x.numel(), dtype=torch.bool, device=x.device)
        mask[kink.index] = True
        return torch.where(mask.view_as(x), other, out)

    handles = [
        nn.modules.module.register_module_forward_pre_hook(pre),
        nn.modules.module.register_module_forward_hook(post),
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
