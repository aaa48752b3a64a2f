"""Tiny models with faults planted on purpose, for the parity suite's tests (model factories:
`tests.support.parity_faults:NAME`, each called as NAME(seed) -> nn.Module)."""

from __future__ import annotations

import math

import torch
from torch import nn

from trainready.testing.kink_branch import NearKinkBranch, split_k

VOCAB = 64
DIM = 32
SEQ = 16


class TinyLM(nn.Module):
    """Embedding -> one residual MLP block -> norm -> head: forward(ids [B,T]) -> logits."""

    vocab_size = VOCAB
    seq_len = SEQ
    traits = {"mlp": "gelu", "moe": "dense"}

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, DIM)
        self.up = nn.Linear(DIM, 2 * DIM)
        self.down = nn.Linear(2 * DIM, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(h)))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = h + self.mlp(h)
        return self.head(self.norm(h))


class _SkewedLinear(torch.autograd.Function):
    """y = x W^T + b, whose backward returns the weight gradient 2% too large below float64: a
    low-precision kernel bug that the float64 reference does not share. Under autocast the
    forward's product runs in the autocast dtype (as F.linear's); the backward, which autocast
    does not cover, casts what it multiplies to the gradient's dtype and returns each gradient
    in its input's dtype."""

    @staticmethod
    def forward(ctx, x, weight, bias, factor=1.02):  # noqa: ANN001
        ctx.save_for_backward(x, weight)
        ctx.factor = factor
        return x @ weight.t() + bias

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        x, weight = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1])
        grad_w = rows.t() @ x.reshape(-1, x.shape[-1]).to(grad.dtype)
        if grad_w.dtype != torch.float64:
            grad_w = grad_w * ctx.factor
        grad_x = (grad @ weight.to(grad.dtype)).to(x.dtype)
        return grad_x, grad_w.to(weight.dtype), rows.sum(0).to(weight.dtype), None


class WrongBackward(TinyLM):
    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.up(h))
        return _SkewedLinear.apply(hidden, self.down.weight, self.down.bias)


class NudgedWhenCompiled(TinyLM):
    """Compiled, `down`'s weight gradient is `factor` too large below float64: a fault just
    past the allowance, which pooling more honest runs must not explain away."""

    seq_len = 256
    factor = 1 + 2e-6

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.up(h))
        if not torch.compiler.is_compiling():
            return self.down(hidden)
        return _SkewedLinear.apply(hidden, self.down.weight, self.down.bias, self.factor)


class UnderflowsInFp32(TinyLM):
    """Correct but different: a gate exp(q - 120) * exp(80) on the first logit, 4e-18 in float64
    and exactly 0 in every fp32 run (exp(-120) is below fp32's smallest subnormal), so q's
    gradient is 0 in fp32 wherever it is computed: an honest range effect every fp32 run shares,
    which the independently rounded runs' spread cannot see (HF zoedepth, jev)."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.q = nn.Parameter(torch.zeros(256))  # not a small tensor (SMALL_NUMEL)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = super().forward(ids)
        gate = (torch.exp(self.q - 120.0) * math.exp(80.0)).sum()
        return torch.cat([logits[..., :1] + gate, logits[..., 1:]], dim=-1)


class SkewedBelowFloat64(TinyLM):
    """`down`'s weight gradient 1e-5 too large in every run below float64 (a fault in the
    model's low-precision path, much smaller than WrongBackward's 2%)."""

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.up(h))
        return _SkewedLinear.apply(hidden, self.down.weight, self.down.bias, 1 + 1e-5)


class ItemInForward(TinyLM):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        scale = h.detach().abs().max().item()  # a host sync, and a graph break when compiled
        h = h / scale
        return self.head(self.norm(h + self.mlp(h)))


class CpuRoundTrip(TinyLM):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = h.cpu().to(ids.device)  # to the host and back
        return self.head(self.norm(h + self.mlp(h)))


class CrashWhenCompiled(TinyLM):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        if torch.compiler.is_compiling():  # only the compiled trace takes this branch
            h = h @ torch.ones(DIM + 1, DIM, device=h.device)  # shapes do not agree
        return self.head(self.norm(h + self.mlp(h)))


class NanInFloat64(TinyLM):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        if h.dtype == torch.float64:  # e.g. a float32-only constant overflowing in float64 code
            h = h * float("nan")
        return self.head(self.norm(h + self.mlp(h)))


class RaisesUnderADispatchMode(TinyLM):
    """Raises while a Python dispatch mode is on, as PyTorch's ops that check
    `areAnyTensorSubclassLike` take another code path then (ctc_loss dividing device losses by
    host lengths): the ops probe's mode, not the model, makes the step fail."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if torch.utils._python_dispatch._get_current_dispatch_mode() is not None:
            raise RuntimeError("Expected all tensors to be on the same device (planted)")
        return super().forward(ids)


class RaisesInForward(TinyLM):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("planted: the forward raises")


class _ZeroBackward(torch.autograd.Function):
    """The identity, whose backward returns zeros: a gradient that never arrives."""

    @staticmethod
    def forward(ctx, x):  # noqa: ANN001
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        return torch.zeros_like(grad)


class ZeroedWhenCompiled(TinyLM):
    """Compiled (`torch.compiler.is_compiling`), the MLP's input gets no gradient through the
    MLP: `up` and `down` still get theirs, the embedding gets only the residual's (inductor on
    the CPU zeroed whole blocks of HF CHMv2 and diffusers' UNet2DCondition like this)."""

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            h = _ZeroBackward.apply(h)
        return super().mlp(h)


class ZeroedUpstream(TinyLM):
    """Compiled, the whole block's output passes no gradient back: every parameter before the
    norm gets an exact zero gradient."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = h + self.mlp(h)
        if torch.compiler.is_compiling():
            h = _ZeroBackward.apply(h)
        return self.head(self.norm(h))


class KeyBiasCancelledOnTheCpu(TinyLM):
    """Correct but different: attention whose keys share a learned bias. Its gradient is zero in
    exact arithmetic (softmax ignores a shift every key shares): float64 leaves a residue of
    ~1e-19, and every other honest run one of its own dtype's size -- except the CPU's plain
    eager run below float64, whose kernels here cancel it exactly (planted: the bias passes no
    gradient there, as the CPU's kernels cancel DETR's key-projection bias's). Independently
    rounded runs (a dispatch mode over every op in bf16) and the compiled model leave their
    residues."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.key_bias = nn.Parameter(torch.randn(DIM) * 0.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        b, t, _ = h.shape
        bias = self.key_bias
        plain_cpu = (
            h.dtype != torch.float64
            and not torch.compiler.is_compiling()
            and torch.utils._python_dispatch._get_current_dispatch_mode() is None
        )
        if plain_cpu:
            bias = _ZeroBackward.apply(bias)

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, t, 4, DIM // 4).transpose(1, 2)

        q, k, v = heads(self.wq(h)), heads(self.wk(h) + bias), heads(self.wv(h))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + a.transpose(1, 2).reshape(b, t, DIM)
        h = h + self.mlp(h)
        return self.head(self.norm(h))


class ExactlyZeroGradient(TinyLM):
    """Correct but different: a parameter whose gradient is exactly zero in every precision (it
    enters the output times 0), on the reference as on the device."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.unused = nn.Parameter(torch.ones(VOCAB))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return super().forward(ids) + 0.0 * self.unused


class NearKink(TinyLM):
    """A ReLU whose input p[0] = -1e-9 sits within rounding of the kink (an honest run may take
    that decision either way); compiled (`torch.compiler.is_compiling`), p is shifted by
    `shift` first: +2e-9 at p[0] is an honest flip, +1.4 at p[2] (-0.7) a wrong one."""

    shift: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)

    def __init__(self, seed: int):
        super().__init__(seed)
        self.p = nn.Parameter(torch.tensor([-1e-9, 0.5, -0.7, 0.9]))
        self.v = nn.Parameter(torch.randn(4, VOCAB) * 0.1)
        self.kink = nn.ReLU()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        p = self.p
        if any(self.shift) and torch.compiler.is_compiling():
            p = p + torch.tensor(self.shift, dtype=p.dtype, device=p.device)
        return super().forward(ids) + self.kink(p) @ self.v


class NearKinkFlippedWhenCompiled(NearKink):
    shift = (2e-9, 0.0, 0.0, 0.0)


class FarKinkFlippedWhenCompiled(NearKink):
    shift = (0.0, 0.0, 1.4, 0.0)


class NearKinkWrongBackward(NearKink, WrongBackward):
    """The near kink and WrongBackward's 2% weight-gradient skew below float64."""


class ManyNearKinks(TinyLM):
    """A branch of 16 ReLU decisions within rounding of the kink, more than `kink_flips` tries
    one by one (as depth_pro's head has): the CPU's plain fp32 run takes every one as float64
    does, the compiled model sums their product in another order (`kink_branch.split_k`,
    honest), which takes three of them the other way (`trainready.testing.kink_branch`)."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.branch = NearKinkBranch(VOCAB, seed)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        a, b = self.branch.a, self.branch.b
        p = split_k(a, b) if torch.compiler.is_compiling() else None
        return super().forward(ids) + self.branch(p)


class ManyNearKinksNudgedWhenCompiled(ManyNearKinks):
    """ManyNearKinks, and compiled, `down`'s weight gradient 2% too large below float64: a
    fault where pooling the honest runs (which flip the near-kink decisions too) must not
    explain it away."""

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.up(h))
        if not torch.compiler.is_compiling():
            return self.down(hidden)
        return _SkewedLinear.apply(hidden, self.down.weight, self.down.bias)


def clean(seed: int) -> nn.Module:
    return TinyLM(seed)


def wrong_backward(seed: int) -> nn.Module:
    return WrongBackward(seed)


def item_in_forward(seed: int) -> nn.Module:
    return ItemInForward(seed)


def cpu_round_trip(seed: int) -> nn.Module:
    return CpuRoundTrip(seed)


def crash_when_compiled(seed: int) -> nn.Module:
    return CrashWhenCompiled(seed)


def nan_in_float64(seed: int) -> nn.Module:
    return NanInFloat64(seed)


def raises_under_a_dispatch_mode(seed: int) -> nn.Module:
    return RaisesUnderADispatchMode(seed)


def raises_in_forward(seed: int) -> nn.Module:
    return RaisesInForward(seed)


def zeroed_when_compiled(seed: int) -> nn.Module:
    return ZeroedWhenCompiled(seed)


def zeroed_upstream(seed: int) -> nn.Module:
    return ZeroedUpstream(seed)


def exactly_zero_gradient(seed: int) -> nn.Module:
    return ExactlyZeroGradient(seed)


def key_bias_cancelled_on_the_cpu(seed: int) -> nn.Module:
    return KeyBiasCancelledOnTheCpu(seed)


def near_kink(seed: int) -> nn.Module:
    return NearKink(seed)


def near_kink_flipped_when_compiled(seed: int) -> nn.Module:
    return NearKinkFlippedWhenCompiled(seed)


def far_kink_flipped_when_compiled(seed: int) -> nn.Module:
    return FarKinkFlippedWhenCompiled(seed)


def near_kink_wrong_backward(seed: int) -> nn.Module:
    return NearKinkWrongBackward(seed)


def nudged_when_compiled(seed: int) -> nn.Module:
    return NudgedWhenCompiled(seed)


def underflows_in_fp32(seed: int) -> nn.Module:
    return UnderflowsInFp32(seed)


def skewed_below_float64(seed: int) -> nn.Module:
    return SkewedBelowFloat64(seed)


def many_near_kinks(seed: int) -> nn.Module:
    return ManyNearKinks(seed)


def many_near_kinks_nudged_when_compiled(seed: int) -> nn.Module:
    return ManyNearKinksNudgedWhenCompiled(seed)
