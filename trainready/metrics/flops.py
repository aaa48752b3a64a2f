"""FLOP counts and MFU, as the field computes them.

Op level: a GEMM of [M, K] by [K, N] is 2*M*N*K FLOPs (one multiply and one add per
multiply-accumulate); scaled-dot-product attention is two such GEMMs per head.

Model level (PaLM appendix B; TorchTitan's get_nparams_and_flops): training FLOPs per token are

    6 * N + 6 * L * H * (Q_qk + Q_v) * T      (= 6 * N + 12 * L * H * Q * T when Q_qk = Q_v = Q)

with N the parameters taking part in matmuls, L layers, H attention heads, Q head dims and T the
sequence length. 6 = 2 FLOPs per multiply-accumulate * 3 GEMMs per weight (forward, grad-input,
grad-weight). The attention term counts q @ k^T and scores @ v with the same factor; causal masking
is not discounted and flash attention's backward recompute is not counted, both by convention.

N follows TorchTitan's get_nparams_and_active_nparams: every parameter (norms and biases included,
as it sums model.parameters()), routed experts weighted by top_k / num_experts, and the input
embedding left out unless it is tied to the output projection. See ModelSpec.matmul_params.

MFU = flops_per_token * tokens_per_s_per_device / peak_flops_per_device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainready.models.specs import ModelSpec


def linear_flops(m: int, n: int, k: int) -> int:
    """Forward F.linear: y[M, N] = x[M, K] @ W[N, K]^T (bias add ignored)."""
    return 2 * m * n * k


def linear_grad_input_flops(m: int, n: int, k: int) -> int:
    """Backward GEMM for the input: dX[M, K] = dY[M, N] @ W[N, K]."""
    return 2 * m * n * k


def linear_grad_weight_flops(m: int, n: int, k: int) -> int:
    """Backward GEMM for the weight: dW[N, K] = dY[M, N]^T @ X[M, K]."""
    return 2 * m * n * k


def linear_training_flops(m: int, n: int, k: int) -> int:
    """Forward plus both backward GEMMs of one F.linear: 6 * M * N * K."""
    return (
        linear_flops(m, n, k) + linear_grad_input_flops(m, n, k) + linear_grad_weight_flops(m, n, k)
    )


def _attended_pairs(seq_q: int, seq_kv: int, causal: bool) -> int:
    if not causal:
        return seq_q * seq_kv
    # PyTorch's is_causal mask is top-left aligned: query i sees keys 0..i.
    full_rows = min(seq_q, seq_kv)
    return full_rows * (full_rows + 1) // 2 + (seq_q - full_rows) * seq_kv


def attention_flops(
    batch: int,
    heads: int,
    seq_q: int,
    seq_kv: int,
    qk_head_dim: int,
    v_head_dim: int | None = None,
    *,
    causal: bool = False,
) -> int:
    """Forward FLOPs of scaled_dot_product_attention: q @ k^T and scores @ v over the attended
    (query, key) pairs; softmax and scaling are not counted. `causal` counts only the pairs the
    is_causal mask keeps, i.e. what a kernel that skips masked blocks must do."""
    v_head_dim = qk_head_dim if v_head_dim is None else v_head_dim
    return 2 * batch * heads * _attended_pairs(seq_q, seq_kv, causal) * (qk_head_dim + v_head_dim)


def attention_backward_flops(
    batch: int,
    heads: int,
    seq_q: int,
    seq_kv: int,
    qk_head_dim: int,
    v_head_dim: int | None = None,
    *,
    causal: bool = False,
) -> int:
    """Backward FLOPs of SDPA without recompute: dV, dP, dQ and dK, twice the forward GEMMs."""
    return 2 * attention_flops(batch, heads, seq_q, seq_kv, qk_head_dim, v_head_dim, causal=causal)


def attention_flops_per_token(
    layers: int, heads: int, qk_head_dim: int, seq_len: int, v_head_dim: int | None = None
) -> int:
    """The attention term of the training FLOPs per token: 6 * L * H * (Q_qk + Q_v) * T."""
    v_head_dim = qk_head_dim if v_head_dim is None else v_head_dim
    return 6 * layers * heads * (qk_head_dim + v_head_dim) * seq_len


def training_flops_per_token(
    params: int,
    layers: int,
    heads: int,
    head_dim: int,
    seq_len: int,
    v_head_dim: int | None = None,
) -> int:
    """6 * N + 12 * L * H * Q * T (or 6 * L * H * (Q + Q_v) * T when v_head_dim differs)."""
    return 6 * params + attention_flops_per_token(layers, heads, head_dim, seq_len, v_head_dim)


@dataclass(frozen=True)
class TokenFlops:
    """Training FLOPs per token of a model at one sequence length, and its two terms."""

    params: int  # N
    dense: int  # 6 * N
    attention: int  # 6 * L * H * (Q_qk + Q_v) * T

    @property
    def total(self) -> int:
        return self.dense + self.attention


def model_flops_per_token(spec: ModelSpec, seq_len: int) -> TokenFlops:
    """Training FLOPs per token of `spec` at sequence length `seq_len` (MoE: active experts)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    params = spec.matmul_params(active=True)
    attention = attention_flops_per_token(
        spec.num_layers, spec.num_heads, spec.attention_qk_dim, seq_len, spec.attention_v_dim
    )
    return TokenFlops(params=params, dense=6 * params, attention=attention)


def mfu(flops_per_token: float, tokens_per_s_per_device: float, peak_flops: float) -> float:
    """Model FLOPs utilization, a fraction: achieved FLOP/s over the device's peak FLOP/s."""
    if not (math.isfinite(peak_flops) and peak_flops > 0):
        raise ValueError(f"peak_flops must be a positive number, got {peak_flops}")
    return flops_per_token * tokens_per_s_per_device / peak_flops


def host_fallback_text(ops: dict[str, int], what: str) -> str:
    """'{what} ran through the host fallback (aten::mm ×3): not the device's'."""
    named = ", ".join(f"{op} ×{n}" for op, n in sorted(ops.items())[:4])
    return f"{what} ran through the host fallback ({named}): not the device's"


def peak_diagnostics(
    peak: dict[str, Any] | None,
    dtype: str,
    mfu: float | None = None,
    fell_back: dict[str, int] | None = None,
) -> dict[str, Any]:
    """What a result says about the peak its MFU is against (or that there is none), so a
    measured-peak MFU is never read as a datasheet one; a warning when the MFU is above 1,
    which no real peak allows: the peak is wrong, most often a calibration taken under load;
    and `host_fallback` when the measured work (`fell_back`: ops that left the device) or the
    peak's own calibration ran on the host, which the label then says first."""
    notes = []
    if fell_back:
        notes.append(host_fallback_text(fell_back, "the measured work"))
    if peak and peak.get("host_fallback"):
        notes.append(host_fallback_text(peak["host_fallback"], "the peak calibration"))
    out: dict[str, Any] = {"host_fallback": "; ".join(notes)} if notes else {}
    if not (peak and peak.get("flops")):
        return out | {"peak_label": f"no peak FLOP/s known for {dtype}: MFU not computed"}
    label = peak.get("label", "")
    if notes:
        label = f"host fallback, not the device's MFU — {label}"
    out |= {"peak_label": label, "peak_source": peak.get("source", "")}
    if mfu is not None and mfu > 1:
        fix = (
            "the calibration ran slower than this case (a busy machine?): "
            "re-measure with `trainready devices --recalibrate` on an idle machine"
            if peak.get("source") == "measured"
            else "the table's peak is too low for this device: check its kind"
        )
        out["peak_warning"] = f"MFU {mfu:.0%} is above the peak; {fix}"
    return out
