"""Planted device faults: wrong (and correct-but-different) kernels for a PrivateUse1 device, to put
the device path of the numerics rule under test.

trainready judges a device by comparing what it computes with a float64 CPU reference, allowing
it m times the error of the CPU at the same dtype (`trainready/probes/numerics.py`). Whether that
rule catches what real device kernels get wrong can only be shown on a device whose kernels are
wrong on purpose. Each fault here is a kernel for one aten op, registered for the PrivateUse1
dispatch key (the key of `trainready.testing.emu`, or of any other PrivateUse1 backend) through
`torch.library`, the way a backend author injects a kernel. A kernel copies its inputs to the CPU,
computes there (correctly but for its planted bug), and returns tensors on the input's device.

    lib = faults.plant("softmax_scale_2pct")   # from now on emu's _softmax is 2% off
    ...                                        # run a case
    faults.remove(lib)                         # emu's own (fallback) kernel again

or, for a whole CLI run (every worker inherits the environment and imports the module):

    TRAINREADY_FAULTS=softmax_scale_2pct trainready run parity --device emu \\
        --import trainready.testing.emu --import trainready.testing.faults

The faults, each a class of bug that device kernels really have:

- `softmax_scale_2pct`: softmax of its input scaled by 1.02 (`aten::_softmax`, behind F.softmax and
  the math SDPA's `_safe_softmax`). Imitates a wrong constant folded into a fused exp (a softmax
  scale or log2(e) off by a little, a temperature applied twice): every row still sums to 1, so
  nothing looks broken, but attention is slightly too sharp.
- `gemm_contiguous_only`: a GEMM (`aten::mm`, behind F.linear without a bias and its backward)
  that reads every operand as if it were row-major. The classic stride bug: right for the
  contiguous inputs the kernel was tested with, wrong for a transposed view such as F.linear's
  `W.t()` or the weight gradient's `grad_y.t()`. (A linear with a bias runs `aten::addmm`, which
  no fault here replaces.)
- `norm_backward_1pct`: LayerNorm's backward (`aten::native_layer_norm_backward`) returns an input
  gradient 1% too large. Imitates a wrong normalisation constant in the hand-written backward
  reduction (N-1 for N is 1.6% at N = 64). The forward is right, so only gradients show it.
  (The synthetic RMSNorm is written out as mul/rsqrt/mean, and F.rms_norm has no fused kernel on a
  PrivateUse1 device in torch 2.13, so the `norm=layernorm` variant is the case that runs it.)
- `attention_mask_dropped`: the boolean `aten::tril` that builds the causal mask of the math SDPA
  path (`is_causal=True`) returns the mask unmasked: every query sees the future. Imitates an
  attention kernel that ignores `is_causal` or the mask it is given for some shapes or layouts.
- `adamw_bias_correction`: the foreach division of sqrt(v) by sqrt(1 - beta2^t)
  (`aten::_foreach_div_.ScalarList`, used by AdamW's foreach step) does nothing: the second-moment
  bias correction is skipped, a classic bug of fused optimizer kernels (31.6x too large a step at
  t = 1 with the default betas).

Correct-but-different: a device may compute the same mathematics in another order, and the rule
must not fail it for that.

- `split_k_gemm`: `aten::mm` as two halves of the reduction dimension, each accumulated in fp32,
  added, then rounded to the output dtype: the split-K schedule GPU GEMMs use for tall-K shapes.
- `sum_reordered`: `aten::sum.dim_IntList` over the input reversed along the reduced dims, so the
  additions happen in another order (as a tree reduction on a device would).

`hits()` counts, per fault and op, how often a planted bug acted (a wrong kernel: only the calls
its bug changes, e.g. a GEMM with a non-contiguous operand; a correct-but-different one: every
call), so a test can tell a fault that was caught from one that never ran. Everything here is for testing trainready; none of it
belongs in a real run.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

ENV_VAR = "TRAINREADY_FAULTS"
DISPATCH_KEY = "PrivateUse1"

SOFTMAX_SCALE = 1.02
NORM_BACKWARD_SCALE = 1.01

_HITS: Counter[str] = Counter()  # "fault:op" -> calls in which the planted bug acted
_HOLDER: dict[str, str] = {}  # op -> the planted fault whose kernel it runs now
_LIB_OPS: dict[int, list[str]] = {}  # id(library) -> the ops it holds


@dataclass(frozen=True)
class Fault:
    """A named fault: the kernels it plants (aten op overload -> kernel) and where it shows.

    `expect` is "catch" for a wrong kernel and "pass" for a correct-but-different one.
    `parity_case` is the synthetic parity variant whose model runs the op (`base`, or a one-axis
    variant like `norm=layernorm`); `matmul` says whether the matmul suite's GEMMs run it.
    """

    name: str
    expect: str
    imitates: str
    kernels: dict[str, Callable] = field(repr=False)
    parity_case: str = "base"
    matmul: bool = False


# --- helpers --------------------------------------------------------------------------------------


def _hit(fault: str, op: str) -> None:
    _HITS[f"{fault}:{op}"] += 1


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().to("cpu")


def _row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _as_row_major(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """`t`'s memory read as if it were row-major (contiguous) in `t`'s shape, on the CPU: what a
    kernel that ignores strides sees; and whether that read differs from `t`'s layout. A view
    whose row-major read would run past its storage (a broadcast, stride 0) is read correctly
    instead: the bug here is the layout, not a wild read."""
    if t.is_contiguous():
        return _cpu(t), False
    end = t.storage_offset() + t.numel()
    if end * t.element_size() > t.untyped_storage().nbytes():
        return _cpu(t), False
    return _cpu(t.as_strided(t.shape, _row_major_strides(t.shape), t.storage_offset())), True


# --- softmax_scale_2pct ---------------------------------------------------------------------------


def _softmax_scaled(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    _hit("softmax_scale_2pct", "aten::_softmax")
    out_dtype = torch.float32 if half_to_float else x.dtype
    acc = torch.promote_types(x.dtype, torch.float32)
    y = torch.softmax(_cpu(x).to(acc) * SOFTMAX_SCALE, dim)
    return y.to(out_dtype).to(x.device)


# --- GEMMs ----------------------------------------------------------------------------------------


def _mm_contiguous_only(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    (a_read, a_wrong), (b_read, b_wrong) = _as_row_major(a), _as_row_major(b)
    if a_wrong or b_wrong:  # counted only where the stride bug changes what is read
        _hit("gemm_contiguous_only", "aten::mm")
    return (a_read @ b_read).to(a.device)


def _mm_split_k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _hit("split_k_gemm", "aten::mm")
    acc = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
    a32, b32 = _cpu(a).to(acc), _cpu(b).to(acc)
    half = a.shape[1] // 2
    out = a32[:, :half] @ b32[:half] + a32[:, half:] @ b32[half:]
    return out.to(torch.promote_types(a.dtype, b.dtype)).to(a.device)


def _out_variant(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable:
    """The `.out` overload of a two-operand op from its functional kernel."""

    def kernel(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        result = fn(a, b)
        if out.shape != result.shape:
            out.resize_(result.shape)
        return out.copy_(result)

    return kernel


# --- norm_backward_1pct ---------------------------------------------------------------------------


def _layer_norm_backward_skewed(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    output_mask: Sequence[bool],
) -> tuple[torch.Tensor | None, ...]:
    _hit("norm_backward_1pct", "aten::native_layer_norm_backward")
    grads = torch.ops.aten.native_layer_norm_backward(
        _cpu(grad_out),
        _cpu(x),
        list(normalized_shape),
        _cpu(mean),
        _cpu(rstd),
        _cpu(weight),
        _cpu(bias),
        list(output_mask),
    )
    grad_input, grad_weight, grad_bias = grads
    if grad_input is not None:
        grad_input = grad_input * NORM_BACKWARD_SCALE
    return tuple(
        None if g is None else g.to(x.device) for g in (grad_input, grad_weight, grad_bias)
    )


# --- attention_mask_dropped -----------------------------------------------------------------------


def _tril_dropping_masks(x: torch.Tensor, diagonal: int = 0) -> torch.Tensor:
    if x.dtype != torch.bool:  # numeric tril stays right: only the mask builder is broken
        return torch.tril(_cpu(x), diagonal).to(x.device)
    _hit("attention_mask_dropped", "aten::tril")
    return _cpu(x).clone().to(x.device)


# --- adamw_bias_correction ------------------------------------------------------------------------


def _foreach_div_skipped(tensors: list[torch.Tensor], scalars: list[float]) -> None:
    """AdamW's `_foreach_div_(sqrt(exp_avg_sq), bias_correction2_sqrt)`, left undone."""
    _hit("adamw_bias_correction", "aten::_foreach_div_.ScalarList")


# --- sum_reordered --------------------------------------------------------------------------------


def _sum_reordered(
    x: torch.Tensor,
    dim: Sequence[int] | None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    _hit("sum_reordered", "aten::sum.dim_IntList")
    dims = list(dim) if dim else list(range(x.dim()))  # None or [] reduces every dim
    c = _cpu(x).flip(dims) if dims else _cpu(x)
    return torch.sum(c, dims, keepdim, dtype=dtype).to(x.device)


# --- the registry ---------------------------------------------------------------------------------

FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            "softmax_scale_2pct",
            "catch",
            "softmax input scaled by 1.02 (a wrong constant in a fused exp)",
            {"_softmax": _softmax_scaled},
        ),
        Fault(
            "gemm_contiguous_only",
            "catch",
            "GEMM that reads transposed operands as row-major (the stride bug)",
            {"mm": _mm_contiguous_only, "mm.out": _out_variant(_mm_contiguous_only)},
            matmul=True,
        ),
        Fault(
            "norm_backward_1pct",
            "catch",
            "LayerNorm backward's input gradient 1% too large (a wrong 1/N)",
            {"native_layer_norm_backward": _layer_norm_backward_skewed},
            parity_case="norm=layernorm",
        ),
        Fault(
            "attention_mask_dropped",
            "catch",
            "SDPA's causal mask dropped (every query sees the future)",
            {"tril": _tril_dropping_masks},
        ),
        Fault(
            "adamw_bias_correction",
            "catch",
            "AdamW's second-moment bias correction skipped",
            {"_foreach_div_.ScalarList": _foreach_div_skipped},
        ),
        Fault(
            "split_k_gemm",
            "pass",
            "GEMM as two K-halves accumulated in fp32 (split-K: another order)",
            {"mm": _mm_split_k, "mm.out": _out_variant(_mm_split_k)},
            matmul=True,
        ),
        Fault(
            "sum_reordered",
            "pass",
            "sum over the reduced dims in reverse order (another reduction order)",
            {"sum.dim_IntList": _sum_reordered},
        ),
    )
}


def _fault(name: str) -> Fault:
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; valid: {', '.join(FAULTS)}")
    return FAULTS[name]


def plant(name: str) -> torch.library.Library:
    """Register fault `name`'s kernels for PrivateUse1; they stay until `remove` of the returned
    library (or until it is garbage-collected: keep it). Two faults that replace the same op
    (the two GEMMs) cannot be planted together: ValueError naming the one planted."""
    fault = _fault(name)
    for op in fault.kernels:
        if op in _HOLDER:
            raise ValueError(
                f"fault {name!r} replaces aten::{op}, which fault {_HOLDER[op]!r} has planted: "
                "remove that one first"
            )
    lib = torch.library.Library("aten", "IMPL")
    try:
        for op, kernel in fault.kernels.items():
            lib.impl(op, kernel, DISPATCH_KEY)
    except Exception:
        lib._destroy()
        raise
    _HOLDER.update(dict.fromkeys(fault.kernels, name))
    _LIB_OPS[id(lib)] = list(fault.kernels)
    return lib


def remove(lib: torch.library.Library) -> None:
    """Undo `plant`: the device's own kernels (for emu, the CPU fallback) run again."""
    for op in _LIB_OPS.pop(id(lib), []):
        _HOLDER.pop(op, None)
    lib._destroy()


def hits(fault: str | None = None) -> dict[str, int]:
    """ "fault:op" -> how many times that planted kernel ran since `reset_hits()` (one fault's
    entries, keyed by op, if `fault` is given)."""
    if fault is None:
        return dict(_HITS)
    prefix = f"{fault}:"
    return {k[len(prefix) :]: v for k, v in _HITS.items() if k.startswith(prefix)}


def reset_hits() -> None:
    _HITS.clear()


def requested() -> list[str]:
    """The faults TRAINREADY_FAULTS names (comma-separated), each once, in order."""
    names = os.environ.get(ENV_VAR, "").split(",")
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


# Faults planted from the environment at import: kept alive for the life of the process.
PLANTED: dict[str, torch.library.Library] = {}


def plant_from_env() -> list[str]:
    """Plant every fault TRAINREADY_FAULTS names that is not planted yet; returns the names."""
    names = requested()
    for name in names:
        _fault(name)  # every name checked before any is planted
    for name in names:
        if name not in PLANTED:
            PLANTED[name] = plant(name)
    return names


plant_from_env()

__all__ = [
    "DISPATCH_KEY",
    "ENV_VAR",
    "FAULTS",
    "Fault",
    "hits",
    "plant",
    "plant_from_env",
    "remove",
    "requested",
    "reset_hits",
]
