"""Tied parameters that a move to the device comes apart.

`Module.to(device)` keeps a parameter object (and so every tie: an embedding shared with the LM
head, T5's one embedding for encoder and decoder) only when the device's tensors are
shallow-copy compatible with the CPU's (`torch._has_compatible_shallow_copy_type`: dense CPU,
CUDA, HIP, XPU, MPS, HPU and MTIA tensors are). A PrivateUse1 backend's are not, unless the
backend says otherwise, so `Module._apply` wraps each module's moved tensor in a new Parameter:
the tied names become separate parameters that train apart, silently. torch_npu patches this; a
user of a backend that does not gets a model that is no longer the one they built. The fixes a
backend team or a user can apply: `torch.__future__.set_swap_module_params_on_conversion(True)`
(the move swaps tensors into the same Parameter objects), or re-tying after the move
(transformers' `model.tie_weights()`).

    tied_groups(module)            -> [(name, name, ...)]: names sharing one parameter
    broken_ties(groups, module)    -> the groups no longer one parameter in `module`
    describe(broken, device)       -> one line for a case's reason
    move(module, *args, **kwargs)  -> (module.to(*args, **kwargs), the ties it broke)
    move_keeping_ties(module, ...) -> module.to(...) under the first fix, every tie kept (or
                                      the error why not)
    move_as_built(build, ...)      -> (a model `build()` moved with its ties kept where the
                                      user's move breaks them, the ties it broke, why not kept)

The parity suite names a broken tie as the case's failure and then judges the device's numerics
on the model moved with its ties kept: the vendor learns both that the move breaks the model and
whether the device computes the intended one right.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

KEEP_TIES = "torch.__future__.set_swap_module_params_on_conversion(True)"


def tied_groups(module: nn.Module) -> list[tuple[str, ...]]:
    """Every set of two or more parameter names that are one parameter object."""
    by_id: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [tuple(names) for names in by_id.values() if len(names) > 1]


def broken_ties(groups: list[tuple[str, ...]], module: nn.Module) -> list[tuple[str, ...]]:
    """The groups (from `tied_groups` before a move) whose names are no longer one object."""
    params = dict(module.named_parameters(remove_duplicate=False))
    broken = []
    for names in groups:
        present = [n for n in names if n in params]
        if len({id(params[n]) for n in present}) > 1:
            broken.append(tuple(present))
    return broken


def move(module: nn.Module, *args, **kwargs) -> tuple[nn.Module, list[tuple[str, ...]]]:
    """`module.to(*args, **kwargs)` as a user writes it, and the ties that move broke."""
    groups = tied_groups(module)
    moved = module.to(*args, **kwargs)
    return moved, broken_ties(groups, moved)


@contextlib.contextmanager
def _swapping() -> Iterator[None]:
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        yield
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)


def move_keeping_ties(module: nn.Module, *args, **kwargs) -> nn.Module:
    """`module.to(*args, **kwargs)` with the move swapping the moved tensors into the same
    Parameter objects (KEEP_TIES), so every tie holds; RuntimeError where one still breaks, and
    whatever the swap raises where the device's tensors cannot be swapped."""
    groups = tied_groups(module)
    with _swapping():
        moved = module.to(*args, **kwargs)
    broken = broken_ties(groups, moved)
    if broken:
        raise RuntimeError(f"{' = '.join(broken[0])} still separate after the move")
    return moved


def move_as_built(
    build: Callable[[], nn.Module], *args, **kwargs
) -> tuple[nn.Module, list[tuple[str, ...]], str | None]:
    """A fresh model from `build()` moved as a user moves it (`move`); where that breaks ties,
    dropped and another moved with its ties kept (`move_keeping_ties`: the model built, which
    the caller then trains), or, where they cannot be kept, another moved as the user moves it.
    (The model, the ties the user's move broke, and None or why the ties were not kept.)"""
    model, broken = move(build(), *args, **kwargs)
    if not broken:
        return model, broken, None
    del model  # off the device before the next copy goes there
    try:
        return move_keeping_ties(build(), *args, **kwargs), broken, None
    except Exception as e:  # noqa: BLE001 - the untied model is used, the reason kept
        return move(build(), *args, **kwargs)[0], broken, f"{type(e).__name__}: {e}"


def describe(broken: list[tuple[str, ...]], device: str) -> str:
    """One line: which ties came apart on the move, and the fixes."""
    shown = "; ".join(" = ".join(g) for g in broken[:3])
    more = f" (+{len(broken) - 3} more)" if len(broken) > 3 else ""
    return (
        f"tied parameters came apart on .to({device!r}): {shown}{more} are separate on the "
        "device (its tensors are not shallow-copy compatible with the CPU's, so Module.to made "
        f"new Parameters); they train apart. Fix: {KEEP_TIES}, or re-tie after the move"
    )
