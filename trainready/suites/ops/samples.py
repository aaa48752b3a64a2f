"""An entry's sample inputs, made reproducible, and copied to the three places a case runs them.

A case's samples come from `op.sample_inputs("cpu", dtype, requires_grad)` after
`torch.manual_seed(seed)`, the first `limit` with more than one element (`first`): sample
`index` of seed `seed` is all a repro needs. Each
run gets its own copy (an op may write into its inputs): `on_cpu` at the case dtype, `reference`
with every floating tensor (and each dtype argument equal to the case dtype) promoted to float64,
and `on_device`. Copies of tensors that required grad are new leaves that require grad.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten


def case_seed(case_name: str) -> int:
    """A stable seed per case (the same on every device and day)."""
    return zlib.crc32(case_name.encode()) & 0x7FFFFFFF


def generate(op: Any, dtype: torch.dtype, requires_grad: bool, seed: int) -> Iterator[Any]:
    """The entry's samples on the CPU, in order, after seeding torch's generator with `seed`."""
    torch.manual_seed(seed)
    return iter(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))


# How far past the first `limit` samples a case looks for ones with more than one element.
SCAN_FACTOR = 8


def _trivial(sample: Any) -> bool:
    """Whether every tensor of the sample has at most one element (a reduction over it reduces
    nothing, an index kernel indexes one place)."""
    flat, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return all(t.numel() <= 1 for t in flat if isinstance(t, torch.Tensor))


def first(
    op: Any, dtype: torch.dtype, requires_grad: bool, seed: int, limit: int | None
) -> list[tuple[int, Any]]:
    """(index, sample) of the first `limit` samples (all: None), preferring samples with more
    than one element: op_db often starts an entry with 0-dim and one-element inputs, where a
    reduction that drops an element, or a stride bug, cannot show. The first SCAN_FACTOR x limit
    samples are looked at; trivial ones fill up what is missing. `index` is the position in
    the generator's order, which a repro replays."""
    gen = generate(op, dtype, requires_grad, seed)
    if limit is None:
        return list(enumerate(gen))
    seen = list(enumerate(itertools.islice(gen, limit * SCAN_FACTOR)))
    chosen = [(i, s) for i, s in seen if not _trivial(s)][:limit]
    if len(chosen) < limit:
        picked = {i for i, _ in chosen}
        chosen += [(i, s) for i, s in seen if i not in picked][: limit - len(chosen)]
    return sorted(chosen, key=lambda pair: pair[0])


def _copy(sample: Any, f: Callable[[torch.Tensor], torch.Tensor], device: str | None) -> Any:
    """`sample` with every tensor replaced by f(tensor) as a new leaf (requiring grad where the
    original did), and a `device=` keyword (factory entries) pointed at `device`."""

    def leaf(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            out = f(t.detach())
            if out is t:  # keep the copy independent: an op may write into its input
                out = out.clone()
            return out.requires_grad_(t.requires_grad) if out.is_leaf else out
        return t

    copied = sample.transform(leaf)
    if device is not None and "device" in copied.kwargs:
        copied.kwargs["device"] = device
    return copied


def on_cpu(sample: Any) -> Any:
    return _copy(sample, lambda t: t.clone(), None)


def on_device(sample: Any, device: str, only_input: bool = False) -> Any:
    """The sample on `device`; `only_input`: its other tensors stay on the CPU (for the ops that
    require some arguments there: tensor_split's indices)."""
    moved = _copy(sample, lambda t: t.to(device), device)
    if only_input:
        kept = on_cpu(sample)
        moved.args, moved.kwargs = (
            kept.args,
            {**kept.kwargs, **{k: v for k, v in moved.kwargs.items() if k == "device"}},
        )
    return moved


def reference(sample: Any, dtype: torch.dtype, target: torch.dtype = torch.float64) -> Any:
    """The sample with every floating tensor in `target` (complex ones in its complex dtype):
    the reference's inputs, the case dtype's values exactly when `target` is wider. A dtype
    argument equal to the case dtype (`sum(dtype=...)`) becomes `target` too."""
    complex_target = torch.complex128 if target == torch.float64 else torch.complex64

    def promote(t: Any) -> Any:
        if isinstance(t, torch.dtype):
            return target if t == dtype else t
        if t.is_floating_point():
            return t.to(target)
        if t.is_complex():
            return t.to(complex_target)
        return t.clone()

    copied = _copy(sample, promote, None)
    copied.args = _dtypes(copied.args, promote)
    copied.kwargs = {k: _dtypes(v, promote) for k, v in copied.kwargs.items()}
    return copied


def _dtypes(obj: Any, promote: Callable[[Any], Any]) -> Any:
    if isinstance(obj, torch.dtype):
        return promote(obj)
    if isinstance(obj, tuple):
        return tuple(_dtypes(o, promote) for o in obj)
    if isinstance(obj, list):
        return [_dtypes(o, promote) for o in obj]
    return obj


def call(fn: Callable[..., Any], sample: Any, **extra: Any) -> Any:
    return fn(sample.input, *sample.args, **sample.kwargs, **extra)


def leaves(sample: Any) -> list[torch.Tensor]:
    """The sample's tensors that require grad, in a fixed order (input, args, kwargs)."""
    flat, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]


def outputs(out: Any) -> list[Any]:
    """An op's result flattened to its leaves (tensors, numbers, None), in a fixed order."""
    flat, _ = tree_flatten(out)
    return flat


def summary(sample: Any) -> str:
    """A short description of a sample for reports: its tensors' shapes and dtypes."""

    def describe(obj: Any) -> str:
        if isinstance(obj, torch.Tensor):
            return f"Tensor{list(obj.shape)}:{str(obj.dtype).removeprefix('torch.')}"
        if isinstance(obj, (list, tuple)):
            return "(" + ", ".join(describe(o) for o in obj) + ")"
        return repr(obj)[:40]

    parts = [describe(sample.input), *(describe(a) for a in sample.args)]
    parts += [f"{k}={describe(v)}" for k, v in sample.kwargs.items()]
    return ", ".join(parts)[:200]
