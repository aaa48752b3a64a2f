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
- `topk_next_best`: `aten::topk` (the MoE router's) returns, for every fourth row, the
  (k+1)-th best expert as its k-th pick: a wrong top-k kernel that misroutes some tokens. The
  parity suite replays the device's routing in every run, so the tensors agree; the decisions,
  judged on their own against float64's scores, must show it (`moe=topk`).
- `adamw_bias_correction`: the foreach division of sqrt(v) by sqrt(1 - beta2^t)
  (`aten::_foreach_div_.ScalarList`, used by AdamW's foreach step) does nothing: the second-moment
  bias correction is skipped, a classic bug of fused optimizer kernels (31.6x too large a step at
  t = 1 with the default betas).
- `exp_1pct`: `aten::exp` 1% too large for floating inputs (computed at fp32 or wider, rounded
  once). Imitates a wrong constant in a fast exp (the range reduction's ln 2, a polynomial
  coefficient): every output off by the same small factor, well inside bf16's elementwise rtol.
- `sum_drops_last`: `aten::sum.dim_IntList` leaves out the last element of every reduced run
  (index -1 along each reduced dim). Imitates a vectorised reduction whose remainder loop stops
  one short. It also shows in the gradient of a broadcast operand, which autograd sums back to
  the operand's shape.
- `gelu_backward_2pct`: `aten::gelu_backward` (both forms, exact and tanh) returns an input
  gradient 2% too large: a hand-written backward with a wrong constant, the forward right.

Correct-but-different: a device may compute the same mathematics in another order, and the rule
must not fail it for that.

- `split_k_gemm`: `aten::mm` as two halves of the reduction dimension, each accumulated in fp32,
  added, then rounded to the output dtype: the split-K schedule GPU GEMMs use for tall-K shapes.
- `sum_reordered`: `aten::sum.dim_IntList` over the input reversed along the reduced dims, so the
  additions happen in another order (as a tree reduction on a device would).
- `addbmm_float64`: `aten::addbmm` computed in float64 and rounded once to its dtype: more
  accurate than the CPU, whose kernel adds each batch's product into the output at the output's
  dtype (in bf16, about twice one rounding's error on op_db's first addbmm sample). Closer to
  float64 than the CPU is never a failure.

The ops suite (`trainready/suites/ops`) runs op_db's entries one op at a time: `Fault.ops` names
the entries (and forms, dtypes) whose cases run a fault's kernel, and `ops_cases(name)` makes
those cases (the quick preset's dtypes and samples). `adamw_bias_correction` has none (op_db
holds no `_foreach_*` entry); `attention_mask_dropped`'s only one, SDPA, runs the broken mask
builder but is judged by shape and dtype alone (op_db marks the entry non-deterministic, for
its dropout samples), so the ops suite cannot see that fault (benchmarks/results/
planted-faults.md, "The ops suite on emu").

Where the model has many ReLU decisions within rounding of the kink, another order flips some of
them, and the rule then pools independently rounded runs (`suites.parity.rejudge.pooled`): the GEMM,
optimizer and mask faults, both orders and three model faults also run on such a model
(`kink_branch.FACTORY`, the base model with a branch of 16 such decisions, three of which the
split-K order flips), to show that this pooling passes the one and still catches the others.

Model-level faults (`MODEL_FAULTS`, planted with `planted(name, where)`, a context manager): bugs
in the model's own code or its optimizer -- attention scores 2% / 10% too large, a 1% weight-
gradient error in one Linear, a 1% input-gradient error in one layer, `wq`'s gradient 5% / 10%
off, AdamW's learning rate 3% high, weight decay dropped, bias correction missing, RoPE pairing
interleaved dims, the causal mask dropped or one future token visible -- and correct-but-different
code (an explicit attention kernel, split-K Linears, RMSNorm summed in another order, AdamW written
out). Each acts only `where` the code under test runs ("lowp": below float64; "device": off the
CPU; "compile": in what torch.compile traces), so the float64 reference, and the CPU baseline where
one is used, stay right. See the section below.

`hits()` counts, per fault and op, how often a planted bug acted (a wrong kernel: only the calls
its bug changes, e.g. a GEMM with a non-contiguous operand; a correct-but-different one: every
call), so a test can tell a fault that was caught from one that never ran. Everything here is for testing trainready; none of it
belongs in a real run.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from trainready.testing.kink_branch import FACTORY as NEAR_KINKS
from trainready.testing.kink_branch import split_k

ENV_VAR = "TRAINREADY_FAULTS"
DISPATCH_KEY = "PrivateUse1"

SOFTMAX_SCALE = 1.02
NORM_BACKWARD_SCALE = 1.01
EXP_SCALE = 1.01
GELU_BACKWARD_SCALE = 1.02
BF16_GOAL = 0.02  # faults of this relative size or more must be caught in bf16 (and fp16) too


def catch_required(expect: str, size: float | None, dtype: str) -> bool:
    """Whether the catch goal requires a fault caught at `dtype`: every one in fp32; in bf16 and
    fp16 those of BF16_GOAL or more, and the structural ones (no size)."""
    return expect == "catch" and (dtype == "fp32" or size is None or size >= BF16_GOAL)


_HITS: Counter[str] = Counter()  # "fault:op" -> calls in which the planted bug acted
_HOLDER: dict[str, str] = {}  # op -> the planted fault whose kernel it runs now
_LIB_OPS: dict[int, list[str]] = {}  # id(library) -> the ops it holds


@dataclass(frozen=True)
class Fault:
    """A named fault: the kernels it plants (aten op overload -> kernel) and where it shows.

    `expect` is "catch" for a wrong kernel and "pass" for a correct-but-different one.
    `parity_case` is the synthetic parity variant whose model runs the op (`base`, or a one-axis
    variant like `norm=layernorm`), `custom/<factory>` for a model factory (SHARP_ATTENTION), or
    None where no synthetic model runs it (the ops suite alone does);
    `matmul` says whether the matmul suite's GEMMs run it. `ops` names the ops suite's cases
    that run the replaced kernels, each "entry" (every case the preset plans for that op_db
    entry), "entry/form" (its `fwd`, `bwd`, `inplace` or `out` cases) or "entry/dtype/form" (one
    case): `ops_cases` makes them.
    """

    name: str
    expect: str
    imitates: str
    kernels: dict[str, Callable] = field(repr=False)
    parity_case: str | None = "base"
    matmul: bool = False
    size: float | None = None  # the relative size of the error, where it is one (0.02: 2%)
    also_on: tuple[str, ...] = ()  # further synthetic variants the catch table runs it on
    # Cases on which the fault, though of BF16_GOAL or more where it acts, moves the model by
    # less (its fp32 row measures by how much): there bf16 is not required to catch it. A
    # synthetic variant, a `custom/` factory, or "ops/<op_db entry>" for the ops column.
    weak_on: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()  # the ops suite's cases that run it (see above)

    def required(self, dtype: str) -> bool:
        """Whether the catch goal requires this fault caught at `dtype` (`catch_required`)."""
        return catch_required(self.expect, self.size, dtype)


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
    return split_k(a32, b32).to(torch.promote_types(a.dtype, b.dtype)).to(a.device)


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


# --- topk_next_best -------------------------------------------------------------------------------


def _topk_next_best(
    x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """topk whose k-th pick is the (k+1)-th best in every TOPK_EVERY-th row: a router kernel
    that routes some tokens to the wrong expert."""
    xc = _cpu(x).movedim(dim, -1)
    n = xc.shape[-1]
    # One sorted top-(k+1): its first k are the right picks, its last the next-best one.
    best_v, best_i = torch.topk(xc, min(k + 1, n), -1, largest, True)
    values, indices = best_v[..., :k].clone(), best_i[..., :k].clone()
    if k < n:
        _hit("topk_next_best", "aten::topk")
        every = slice(None, None, TOPK_EVERY)
        values.view(-1, k)[every, -1] = best_v.reshape(-1, k + 1)[every, k]
        indices.view(-1, k)[every, -1] = best_i.reshape(-1, k + 1)[every, k]
    return values.movedim(-1, dim).to(x.device), indices.movedim(-1, dim).to(x.device)


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


# --- exp_1pct -------------------------------------------------------------------------------------


def _exp_off(x: torch.Tensor) -> torch.Tensor:
    """exp, EXP_SCALE too large for floating inputs (computed at fp32 or wider, rounded once)."""
    c = _cpu(x)
    if not c.is_floating_point():  # exp of an integer: right (only the float path is broken)
        return torch.exp(c).to(x.device)
    _hit("exp_1pct", "aten::exp")
    acc = torch.promote_types(c.dtype, torch.float32)
    return (torch.exp(c.to(acc)) * EXP_SCALE).to(c.dtype).to(x.device)


# --- sum_drops_last -------------------------------------------------------------------------------


def _sum_drops_last(
    x: torch.Tensor,
    dim: Sequence[int] | None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """sum.dim_IntList that leaves out the last element of every reduced run: the entry at index
    -1 along each reduced dim (all of them for `dim` None or []; the only one of a 0-dim input)."""
    c = _cpu(x)
    dims = [d % c.dim() for d in dim] if dim and c.dim() else list(range(c.dim()))
    kept = c.clone()
    if kept.numel():  # an empty reduction has no last element to drop
        _hit("sum_drops_last", "aten::sum.dim_IntList")
        index = [slice(None)] * c.dim()
        for d in dims:
            index[d] = -1
        kept[tuple(index)] = 0
    return torch.sum(kept, dims, keepdim, dtype=dtype).to(x.device)


# --- gelu_backward_2pct ---------------------------------------------------------------------------


def _gelu_backward_skewed(
    grad_output: torch.Tensor, x: torch.Tensor, *, approximate: str = "none"
) -> torch.Tensor:
    """GELU's backward GELU_BACKWARD_SCALE too large, either form (computed at fp32 or wider and
    rounded once, as the CPU's kernel does)."""
    _hit("gelu_backward_2pct", "aten::gelu_backward")
    acc = torch.promote_types(grad_output.dtype, torch.float32)
    g, xc = _cpu(grad_output).to(acc), _cpu(x).to(acc)
    grad = torch.ops.aten.gelu_backward(g, xc, approximate=approximate) * GELU_BACKWARD_SCALE
    return grad.to(grad_output.dtype).to(grad_output.device)


# --- addbmm_float64 -------------------------------------------------------------------------------


def _addbmm_float64(
    x: torch.Tensor,
    batch1: torch.Tensor,
    batch2: torch.Tensor,
    *,
    beta: float = 1,
    alpha: float = 1,
) -> torch.Tensor:
    """addbmm computed in float64 (complex128) and rounded once to its dtype."""
    _hit("addbmm_float64", "aten::addbmm")
    dtype = batch1.dtype
    wide = {True: torch.complex128, False: torch.float64}[dtype.is_complex]
    args = [_cpu(t) for t in (x, batch1, batch2)]
    if dtype.is_floating_point or dtype.is_complex:
        args = [t.to(wide) for t in args]
    out = torch.addbmm(*args, beta=beta, alpha=alpha)
    return out.to(dtype).to(batch1.device)


# --- a model whose attention a 2% scale moves ---------------------------------------------------

# A 2% scale of the softmax's input is not a 2% error in what parity judges: the output moves by
# 0.02 x Cov_p(score, v), so it matters only where the scores spread under the softmax. The
# synthetic base model's attention at init is nearly uniform (wq, wk ~ N(0, 0.02): a score spread
# of 0.02), and emu's forward-only `softmax_scale_2pct` moves its tensors by 0.05% of their rms.
# With wq and wk QK_GAIN times larger the spread is about 1 and the top probability about 0.6, as
# in a trained model; measured in float64, gains of 1, 4, 8, 10 and 12 move the most affected
# gradient (wq's, wk's) by 0.05%, 0.7%, 1.6%, 1.9% and 2.0%. bf16's own noise grows with the
# scores too (a rounded q or k errs in proportion to them): on this model emu's bf16 run errs by
# 1.27% of wk's gradient, so the fault, 1.9% there, stays within twice the noise -- under what
# bf16 can resolve (`weak_on`). Measured on 11 models (QK gains 1-10, wo and wv gains 1-4, ALiBi
# over 32-128 tokens), the fault never moved a tensor by more than 2.5 times bf16's noise on it.
QK_GAIN = 10.0
TOPK_EVERY = 4  # topk_next_best: the rows it misroutes
SHARP_ATTENTION = "trainready.testing.faults:sharp_attention"


def sharp_attention(seed: int = 0) -> torch.nn.Module:
    """The synthetic base model with wq and wk QK_GAIN times larger: attention as sharp as a
    trained model's (a parity model factory: `--set models=trainready.testing.faults:
    sharp_attention`)."""
    from trainready.models import synthetic

    model = synthetic.build({}, seed)
    with torch.no_grad():
        for layer in model.layers:
            layer.attention.wq.weight.mul_(QK_GAIN)
            layer.attention.wk.weight.mul_(QK_GAIN)
    model.vocab_size, model.seq_len = synthetic.VOCAB_SIZE, synthetic.SEQ_LEN
    model.traits = synthetic.traits({})
    return model


# --- the registry ---------------------------------------------------------------------------------

# The ops suite's cases that run aten::mm (bwd: the transposed operands of its gradients) and
# aten::sum.dim_IntList (sum itself; sum_to_size; the reduction of a broadcast operand's gradient).
GEMM_OPS = ("mm", "matmul", "nn.functional.linear")
# On op_db's softmax samples (logits uniform in [-9, 9]: a peaked softmax), a 2% input scale moves
# the bf16 outputs by 0.27-0.73% of their rms, measured in float64 (tests/unit/testing/
# test_faults_weak.py keeps that true): under two bf16 roundings (2 x 2^-8), what bf16 cannot
# resolve, so the ops column does not require the catch there (`weak_on`, as for the models).
SOFTMAX_OPS = ("softmax", "softmax(with_dtype)", "torch.ops.aten._safe_softmax.default")


def _ops(entries: tuple[str, ...]) -> tuple[str, ...]:
    """`weak_on` names for op_db entries: "ops/<entry>"."""
    return tuple(f"ops/{e}" for e in entries)


SUM_OPS = ("sum", "sum_to_size", "mul/bwd")

FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            "softmax_scale_2pct",
            "catch",
            "softmax input scaled by 1.02 (a wrong constant in a fused exp)",
            {"_softmax": _softmax_scaled},
            size=SOFTMAX_SCALE - 1,
            also_on=("position=alibi", f"custom/{SHARP_ATTENTION}"),
            weak_on=("base", "position=alibi", f"custom/{SHARP_ATTENTION}", *_ops(SOFTMAX_OPS)),
            ops=SOFTMAX_OPS,
        ),
        Fault(
            "gemm_contiguous_only",
            "catch",
            "GEMM that reads transposed operands as row-major (the stride bug)",
            {"mm": _mm_contiguous_only, "mm.out": _out_variant(_mm_contiguous_only)},
            matmul=True,
            also_on=(f"custom/{NEAR_KINKS}",),
            ops=GEMM_OPS,
        ),
        Fault(
            "norm_backward_1pct",
            "catch",
            "LayerNorm backward's input gradient 1% too large (a wrong 1/N)",
            {"native_layer_norm_backward": _layer_norm_backward_skewed},
            parity_case="norm=layernorm",
            size=NORM_BACKWARD_SCALE - 1,
            ops=("native_layer_norm/bwd", "nn.functional.layer_norm/bwd"),
        ),
        Fault(
            "attention_mask_dropped",
            "catch",
            "SDPA's causal mask dropped (every query sees the future)",
            {"tril": _tril_dropping_masks},
            also_on=(f"custom/{NEAR_KINKS}",),
            ops=("nn.functional.scaled_dot_product_attention",),
        ),
        Fault(
            "adamw_bias_correction",
            "catch",
            "AdamW's second-moment bias correction skipped",
            {"_foreach_div_.ScalarList": _foreach_div_skipped},
            also_on=(f"custom/{NEAR_KINKS}",),
        ),
        Fault(
            "topk_next_best",
            "catch",
            "top-k that routes every 4th token's last pick to the next-best expert",
            {"topk": _topk_next_best},
            parity_case="moe=topk",
            ops=("topk",),
        ),
        Fault(
            "split_k_gemm",
            "pass",
            "GEMM as two K-halves accumulated in fp32 (split-K: another order)",
            {"mm": _mm_split_k, "mm.out": _out_variant(_mm_split_k)},
            matmul=True,
            also_on=(f"custom/{NEAR_KINKS}",),
            ops=GEMM_OPS,
        ),
        Fault(
            "sum_reordered",
            "pass",
            "sum over the reduced dims in reverse order (another reduction order)",
            {"sum.dim_IntList": _sum_reordered},
            also_on=(f"custom/{NEAR_KINKS}",),
            ops=SUM_OPS,
        ),
        Fault(
            "exp_1pct",
            "catch",
            "exp 1% too large (a wrong constant in a fast exp's range reduction or polynomial)",
            {"exp": _exp_off},
            parity_case=None,
            size=EXP_SCALE - 1,
            ops=("exp",),
        ),
        Fault(
            "sum_drops_last",
            "catch",
            "sum whose tail loop stops one short (the last element of every reduced run dropped)",
            {"sum.dim_IntList": _sum_drops_last},
            ops=SUM_OPS,
        ),
        Fault(
            "gelu_backward_2pct",
            "catch",
            "GELU's backward 2% too large (a wrong constant in a hand-written backward)",
            {"gelu_backward": _gelu_backward_skewed},
            parity_case="mlp=gelu",
            size=GELU_BACKWARD_SCALE - 1,
            ops=("nn.functional.gelu/bwd",),
        ),
        Fault(
            "addbmm_float64",
            "pass",
            "addbmm accumulated in float64 and rounded once (more accurate than the CPU's, "
            "which rounds after every batch)",
            {"addbmm": _addbmm_float64},
            parity_case=None,
            ops=("addbmm",),
        ),
    )
}


def _fault(name: str) -> Fault:
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; valid: {', '.join(FAULTS)}")
    return FAULTS[name]


def ops_cases(name: str, preset: str = "quick") -> list:
    """The ops suite's cases (trainready.core.case.Case) that fault `name`'s `ops` names, in that
    order: an entry's cases as `preset` plans them; a form `preset` does not plan (in-place,
    out=) in the dtypes the standard preset plans it in, with `preset`'s samples. ValueError for
    an entry this torch's op_db lacks."""
    from trainready.suites.ops import catalog, plan

    entries = catalog.entries()
    known = {e["entry"] for e in entries}
    spec = plan.PRESETS[preset]
    planned_forms = {form for _, form in spec.forms}
    out: dict[str, object] = {}
    for item in _fault(name).ops:
        entry, *rest = item.split("/")
        if entry not in known:
            raise ValueError(f"fault {name!r}: op_db has no entry {entry!r}")
        dtype, form = rest if len(rest) == 2 else (None, rest[0] if rest else None)
        source = preset if form is None or form in planned_forms else "standard"
        for case in plan.plan("ops", entries, source, dtype, [entry], spec.samples):
            if case.params["entry"] == entry and form in (None, case.name.rsplit("/", 1)[1]):
                out.setdefault(case.name, case)
    return list(out.values())


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


# --- model-level faults -----------------------------------------------------------------------------
#
# Bugs in the model's own code (or its optimizer) rather than in a device kernel: a wrong constant
# in an attention written for one device, a hand-written backward off by a little, a fused
# optimizer that skips a term. Each acts only `where` the code under test runs, so the float64
# CPU reference -- and, on a device or compiled, the CPU's same-dtype eager baseline -- stays
# right, as a real device path or compiler bug would leave them:
#
# - "lowp": below float64 (the CPU eager column: the CPU's own low-precision run is under test);
# - "device": on tensors that are not on the CPU (the emu column: a device-only code path);
# - "compile": while torch.compile traces (the compiled column: a miscompile).
#
# `planted(name, where)` is a context manager that patches trainready.models.blocks, the
# synthetic model builder and the parity engine's optimizer factory for its duration; a case run
# inside it (parity on a synthetic model) runs the faulty code wherever `where` says.

WHERE = ("lowp", "device", "compile")


def _acts(where: str, t: torch.Tensor) -> bool:
    if where == "lowp":
        return t.dtype != torch.float64
    if where == "device":
        return t.device.type != "cpu"
    if where == "compile":
        return torch.compiler.is_compiling()
    raise ValueError(f"unknown where {where!r}; valid: {', '.join(WHERE)}")


def _acts_spec(where: str, spec: object) -> bool:
    """For the optimizer, which is never compiled: does `where` cover the run `spec` describes?"""
    if where == "lowp":
        return spec.dtype != "fp64"
    if where == "device":
        return torch.device(spec.device).type != "cpu"
    if where == "compile":
        return spec.compile_backend is not None
    raise ValueError(f"unknown where {where!r}; valid: {', '.join(WHERE)}")


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient multiplied by `scale` on the way back."""

    @staticmethod
    def forward(ctx, x, scale):  # noqa: ANN001
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        return grad * ctx.scale, None


def _count_trace(ctx) -> None:  # noqa: ANN001 - dynamo's ComptimeContext
    _HITS[ctx.get_local("key").as_python_constant()] += 1


def _model_hit(name: str, what: str) -> None:
    """Count a call in which the fault acted; while compiling, count the trace that holds it, at
    trace time (`comptime`: compiled code runs without calling back into Python, and a counter
    touched in traced code would be a guarded side effect, recompiling at every count)."""
    if torch.compiler.is_compiling():
        key = f"{name}:{what} (traced)"  # noqa: F841 - read by _count_trace through ctx
        from torch._dynamo.comptime import comptime

        comptime(_count_trace)
    else:
        _hit(name, what)


class _GradScaledLinear(torch.nn.Linear):
    """nn.Linear whose weight gradient is `_fault_scale` times too large where the fault acts."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if _acts(self._fault_where, w):
            _model_hit(self._fault_name, "weight grad")
            w = _ScaleGrad.apply(w, self._fault_scale)
        return torch.nn.functional.linear(x, w, self.bias)


def _block_class():
    from trainready.models.blocks import Block

    class _GradScaledBlock(Block):
        """A decoder layer whose input gradient is `_fault_scale` times too large."""

        def forward(self, x, rope=None):  # noqa: ANN001
            if _acts(self._fault_where, x):
                _model_hit(self._fault_name, "input grad")
                x = _ScaleGrad.apply(x, self._fault_scale)
            return super().forward(x, rope)

    return _GradScaledBlock


class _SplitKLinear(torch.nn.Linear):
    """nn.Linear as a split-K GEMM where the fault acts: two halves of the reduction dimension in
    the GEMM's dtype, accumulated in fp32, added, rounded once (correct, another order)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _acts(self._fault_where, x):
            return super().forward(x)
        _model_hit(self._fault_name, "linear")
        kind = x.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype
        with torch.autocast(kind, enabled=False):
            a, w = x.to(dtype), self.weight.to(dtype)
            acc = torch.promote_types(dtype, torch.float32)
            y = split_k(a.to(acc), w.t().to(acc)).to(dtype)
            return y if self.bias is None else y + self.bias.to(dtype)


def _swap(modules, cls, name: str, where: str, scale: float = 1.0) -> None:
    for m in modules:
        m.__class__ = cls
        m._fault_name, m._fault_where, m._fault_scale = name, where, scale


class FaultyAdamW(torch.optim.Optimizer):
    """AdamW written out (one tensor at a time), with switches for the bugs fused optimizers
    have had: a learning rate off by `lr_scale`, weight decay dropped, bias correction skipped.
    With none set it is a correct AdamW (torch.optim.AdamW's defaults)."""

    def __init__(
        self,
        params,  # noqa: ANN001
        lr: float,
        *,
        lr_scale: float = 1.0,
        weight_decay: float = 1e-2,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        fault: str = "",
    ):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "wd": weight_decay})
        self.lr_scale, self.bias_correction, self.fault = lr_scale, bias_correction, fault

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001
        if self.fault:
            _hit(self.fault, "optimizer step")
        for group in self.param_groups:
            lr, (b1, b2), eps = group["lr"] * self.lr_scale, group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                p.mul_(1 - lr * group["wd"])
                m.lerp_(p.grad, 1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                bc1 = 1 - b1**t if self.bias_correction else 1.0
                bc2 = 1 - b2**t if self.bias_correction else 1.0
                denom = (v.sqrt() / bc2**0.5).add_(eps)
                p.addcdiv_(m, denom, value=-lr / bc1)


@dataclass(frozen=True)
class ModelFault:
    """A model-level fault: `plant(where)` is the context manager that plants it.

    `size` is the relative size of the error it plants where it is a size (0.02: 2%), None for a
    structural bug (a mask, a pairing); the goal is every fault caught in fp32, and in bf16 every
    one of 2% or more (`required("bf16")`). `expect` "pass": correct-but-different code."""

    name: str
    expect: str
    imitates: str
    size: float | None
    plant: Callable[[str], contextlib.AbstractContextManager] = field(repr=False)
    parity_case: str = "base"
    also_on: tuple[str, ...] = ()  # further synthetic variants the catch table runs it on

    def required(self, dtype: str) -> bool:
        """Whether the catch goal requires this fault caught at `dtype` (`catch_required`)."""
        return catch_required(self.expect, self.size, dtype)


@contextlib.contextmanager
def patched(obj: object, attr: str, value: object) -> Iterator[None]:
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


def _attend_fault(
    name: str, faulty: Callable
) -> Callable[[str], contextlib.AbstractContextManager]:
    """A fault in `blocks.attend`: `faulty(original, q, k, v, **options)` where it acts."""

    @contextlib.contextmanager
    def plant(where: str) -> Iterator[None]:
        from trainready.models import blocks

        original = blocks.attend

        def attend(q, k, v, **options):  # noqa: ANN001
            if not _acts(where, q):
                return original(q, k, v, **options)
            _model_hit(name, "attention")
            return faulty(original, q, k, v, **options)

        with patched(blocks, "attend", attend):
            yield

    return plant


def _scaled_scores(scale: float) -> Callable:
    def faulty(original, q, k, v, **options):  # noqa: ANN001
        return original(q * scale, k, v, **options)  # scores (and their gradients) `scale` off

    return faulty


def _sdpa_mask(offset: int | None) -> Callable:
    """Causal attention that lets each query see `offset` future keys (None: all of them)."""

    def faulty(original, q, k, v, **options):  # noqa: ANN001
        if offset is None:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False)
        n = q.shape[-2]
        i = torch.arange(n, device=q.device)[:, None]
        j = torch.arange(n, device=q.device)[None, :]
        mask = j <= i + offset
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return faulty


def _explicit_attention(original, q, k, v, **options):  # noqa: ANN001
    """Another attention kernel: the scores, the causal mask and the softmax written out, the
    softmax in at least fp32 (correct; another order and other rounding points than SDPA)."""
    if any(options.get(o) for o in ("window", "sinks", "softcap", "alibi")):
        return original(q, k, v, **options)
    acc = torch.promote_types(q.dtype, torch.float32)
    scores = (q @ k.transpose(-2, -1)).to(acc) / math.sqrt(q.shape[-1])
    n = q.shape[-2]
    keep = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    probs = scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)
    return probs.to(v.dtype) @ v


def _rope_interleaved(name: str) -> Callable[[str], contextlib.AbstractContextManager]:
    @contextlib.contextmanager
    def plant(where: str) -> Iterator[None]:
        from trainready.models import blocks

        original = blocks.apply_rope

        def apply_rope(x, rope):  # noqa: ANN001
            if not _acts(where, x):
                return original(x, rope)
            _model_hit(name, "rope")
            cos, sin = rope
            rot = 2 * cos.shape[-1]
            x_rot, x_pass = x[..., :rot], x[..., rot:]
            wide = x_rot.to(torch.promote_types(x.dtype, torch.float32))
            even, odd = wide[..., 0::2], wide[..., 1::2]  # pairs (0, 1), (2, 3): interleaved
            rotated = torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1)
            return torch.cat([rotated.flatten(-2).to(x.dtype), x_pass], dim=-1)

        with patched(blocks, "apply_rope", apply_rope):
            yield

    return plant


def _norm_reordered(name: str) -> Callable[[str], contextlib.AbstractContextManager]:
    """RMSNorm's mean of squares summed sequentially (cumsum) instead of by the vectorised sum."""

    @contextlib.contextmanager
    def plant(where: str) -> Iterator[None]:
        from trainready.models import blocks

        original = blocks.RMSNorm.forward

        def forward(self, x):  # noqa: ANN001
            if not _acts(where, x):
                return original(self, x)
            _model_hit(name, "norm")
            h = x.to(torch.promote_types(x.dtype, torch.float32))
            mean_sq = h.pow(2).cumsum(-1)[..., -1:] / h.shape[-1]
            h = h * torch.rsqrt(mean_sq + self.eps)
            return self.weight * h.to(x.dtype)

        with patched(blocks.RMSNorm, "forward", forward):
            yield

    return plant


def _model_patch(
    name: str, select: Callable[[torch.nn.Module], list], cls: Callable[[], type], scale: float
) -> Callable[[str], contextlib.AbstractContextManager]:
    """A fault planted by swapping the class of the modules `select` picks in every synthetic
    model built while it is planted."""

    @contextlib.contextmanager
    def plant(where: str) -> Iterator[None]:
        from trainready.models import synthetic

        original = synthetic.build

        def build(config, seed=0):  # noqa: ANN001
            model = original(config, seed)
            _swap(select(model), cls(), name, where, scale)
            return model

        with patched(synthetic, "build", build):
            yield

    return plant


def _optimizer_fault(
    name: str, **switches: object
) -> Callable[[str], contextlib.AbstractContextManager]:
    @contextlib.contextmanager
    def plant(where: str) -> Iterator[None]:
        from trainready.suites.parity import engine as parity_engine

        original = parity_engine.make_optimizer

        def make_optimizer(params, spec):  # noqa: ANN001
            if not _acts_spec(where, spec):
                return original(params, spec)
            return FaultyAdamW(params, parity_engine.LR, fault=name, **switches)

        with patched(parity_engine, "make_optimizer", make_optimizer):
            yield

    return plant


def _wq(model) -> list:  # noqa: ANN001
    return [layer.attention.wq for layer in model.layers]


MODEL_FAULTS: dict[str, ModelFault] = {
    f.name: f
    for f in (
        ModelFault("attn_scale_2pct", "catch", "attention scores 2% too large (a wrong "
                   "softmax scale)", 0.02, _attend_fault("attn_scale_2pct",
                                                          _scaled_scores(1.02))),
        ModelFault("attn_scale_10pct", "catch", "attention scores 10% too large", 0.10,
                   _attend_fault("attn_scale_10pct", _scaled_scores(1.10))),
        ModelFault("linear_wgrad_1pct", "catch", "one Linear's weight gradient 1% too large "
                   "(layers.0 w2)", 0.01, _model_patch(
                       "linear_wgrad_1pct", lambda m: [m.layers[0].feed_forward.w2],
                       lambda: _GradScaledLinear, 1.01),
                   also_on=(f"custom/{NEAR_KINKS}",)),
        ModelFault("layer_dgrad_1pct", "catch", "one layer's input gradient 1% too large "
                   "(layers.1)", 0.01, _model_patch(
                       "layer_dgrad_1pct", lambda m: [m.layers[1]], _block_class, 1.01)),
        ModelFault("wq_grad_5pct", "catch", "wq's weight gradient 5% too large (every layer)",
                   0.05, _model_patch("wq_grad_5pct", _wq, lambda: _GradScaledLinear, 1.05),
                   also_on=(f"custom/{NEAR_KINKS}",)),
        ModelFault("wq_grad_10pct", "catch", "wq's weight gradient 10% too large (every layer)",
                   0.10, _model_patch("wq_grad_10pct", _wq, lambda: _GradScaledLinear, 1.10)),
        ModelFault("adamw_lr_3pct", "catch", "AdamW's learning rate 3% too high", 0.03,
                   _optimizer_fault("adamw_lr_3pct", lr_scale=1.03),
                   also_on=(f"custom/{NEAR_KINKS}",)),
        ModelFault("adamw_no_weight_decay", "catch", "AdamW's weight decay dropped", None,
                   _optimizer_fault("adamw_no_weight_decay", weight_decay=0.0)),
        ModelFault("adamw_no_bias_correction", "catch", "AdamW's bias correction missing", None,
                   _optimizer_fault("adamw_no_bias_correction", bias_correction=False)),
        ModelFault("rope_interleaved", "catch", "RoPE pairs interleaved dims instead of "
                   "rotating halves", None, _rope_interleaved("rope_interleaved")),
        ModelFault("causal_mask_dropped", "catch", "the causal mask dropped (every query sees "
                   "the future)", None, _attend_fault("causal_mask_dropped", _sdpa_mask(None))),
        ModelFault("future_token_visible", "catch", "each query sees one future token", None,
                   _attend_fault("future_token_visible", _sdpa_mask(1))),
        ModelFault("attention_explicit", "pass", "another attention kernel: scores, mask and "
                   "softmax written out", None, _attend_fault("attention_explicit",
                                                              _explicit_attention)),
        ModelFault("linear_split_k", "pass", "every Linear as a split-K GEMM accumulated in fp32",
                   None, _model_patch("linear_split_k", lambda m: [
                       x for x in m.modules() if type(x) is torch.nn.Linear
                   ], lambda: _SplitKLinear, 1.0)),
        ModelFault("norm_reordered", "pass", "RMSNorm's mean of squares summed in another order",
                   None, _norm_reordered("norm_reordered")),
        ModelFault("adamw_reimplemented", "pass", "AdamW written out one tensor at a time", None,
                   _optimizer_fault("adamw_reimplemented")),
    )
}  # fmt: skip


def planted(name: str, where: str) -> contextlib.AbstractContextManager:
    """Plant model-level fault `name` acting `where` ("lowp", "device", "compile") for the
    duration of the `with` block."""
    if name not in MODEL_FAULTS:
        raise ValueError(f"unknown model fault {name!r}; valid: {', '.join(MODEL_FAULTS)}")
    if where not in WHERE:
        raise ValueError(f"unknown where {where!r}; valid: {', '.join(WHERE)}")
    return MODEL_FAULTS[name].plant(where)


__all__ = [
    "DISPATCH_KEY",
    "ENV_VAR",
    "FAULTS",
    "MODEL_FAULTS",
    "WHERE",
    "Fault",
    "FaultyAdamW",
    "ModelFault",
    "planted",
    "hits",
    "ops_cases",
    "plant",
    "plant_from_env",
    "remove",
    "requested",
    "reset_hits",
]
