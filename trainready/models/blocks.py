"""Interchangeable decoder blocks, and one decoder-only transformer built from them.

Plain PyTorch in the nanoGPT / gpt-fast school: one dataclass (`DecoderConfig`) says which norm,
MLP, mixture of experts, attention and position scheme each layer uses; `Decoder` is the model.
The Qwen3 family (qwen3.py) and the synthetic architecture matrix (synthetic.py) are both just
configs of this decoder.

Three properties every variant keeps, because the suites rely on them:

- float64 works end to end (the parity reference runs the same model in float64 on the CPU):
  reductions that models do in fp32 (norms, softmax, router, RoPE) upcast to *at least* fp32,
  never down from float64;
- bf16 autocast and torch.compile work: no host syncs and no data-dependent Python control flow in
  forward (MoE dispatch uses dense combine weights, not `.nonzero()`), and no side effects inside a
  block (a trainer compiles and activation-checkpoints each block on its own);
- initialisation is deterministic from a seed and independent of the device (weights are drawn on
  the CPU and copied), so a device model and its CPU reference start from the same weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainready.core.config import ConfigError, check_choice

NORMS = ("rmsnorm", "layernorm")
NORM_PLACEMENTS = ("pre", "post", "sandwich")
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "relu2": lambda x: F.relu(x).square(),  # Primer / modded-nanoGPT
}
MOE_BALANCING = ("aux_loss", "bias", "none")
POSITIONS = ("rope", "alibi", "none", "learned")


@dataclass
class DecoderConfig:
    """Every architectural choice of a decoder-only transformer; zero means "not present"."""

    vocab_size: int = 256
    dim: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 0  # 0: as many as num_heads (MHA); 1: MQA; in between: GQA
    head_dim: int = 0  # 0: dim // num_heads
    intermediate_size: int = 256
    # norms
    norm: str = "rmsnorm"
    norm_eps: float = 1e-6
    norm_placement: str = "pre"
    qk_norm: bool = False  # RMSNorm over each query and key head (Qwen3, OLMo 2, Gemma 3)
    # MLP: activation(w1 x) [* w3 x when gated] -> w2
    activation: str = "silu"
    gated_mlp: bool = True
    # mixture of experts (num_experts 0: a dense MLP)
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    moe_balancing: str = "aux_loss"
    aux_loss_coef: float = 0.01
    norm_topk_prob: bool = True  # renormalise the k routing weights to sum to 1 (Qwen3-MoE)
    # attention
    sliding_window: int = 0  # keys further back than this many positions are masked
    global_every: int = 0  # with sliding_window: every n-th layer attends globally (Gemma 2)
    attention_sinks: bool = False  # a learned per-head logit that absorbs probability (gpt-oss)
    attn_softcap: float = 0.0  # scores -> cap * tanh(scores / cap) (Gemma 2)
    # MLA (DeepSeek-V2/V3), on when kv_lora_rank > 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # positions
    position: str = "rope"
    rope_theta: float = 10000.0
    rope_fraction: float = 1.0  # partial RoPE: rotate this fraction of each head's dims
    max_seq_len: int = 2048  # length of the learned position table
    tie_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check_choice("norm", self.norm, NORMS)
        check_choice("norm_placement", self.norm_placement, NORM_PLACEMENTS)
        check_choice("activation", self.activation, tuple(ACTIVATIONS))
        check_choice("moe_balancing", self.moe_balancing, MOE_BALANCING)
        check_choice("position", self.position, POSITIONS)
        for name in ("vocab_size", "dim", "num_layers", "num_heads", "intermediate_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        self.num_kv_heads = self.num_kv_heads or self.num_heads
        self.head_dim = self.head_dim or self.dim // self.num_heads
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.num_experts and not 1 <= self.experts_per_token <= self.num_experts:
            raise ConfigError(f"experts_per_token must be in 1..{self.num_experts}")
        if self.num_experts and self.moe_intermediate_size < 1:
            raise ConfigError("moe_intermediate_size must be >= 1 with experts")
        if self.is_mla and min(self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim) < 1:
            raise ConfigError("MLA needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim >= 1")
        if self.is_mla and self.qk_rope_head_dim % 2:
            raise ConfigError("qk_rope_head_dim must be even")
        if not 0.0 < self.rope_fraction <= 1.0:
            raise ConfigError(f"rope_fraction must be in (0, 1], got {self.rope_fraction}")

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def rope_dim(self) -> int:
        """Dims of each query/key head that RoPE rotates (even), 0 without RoPE."""
        if self.position != "rope":
            return 0
        if self.is_mla:
            return self.qk_rope_head_dim
        return int(self.head_dim * self.rope_fraction) // 2 * 2

    def window(self, layer_id: int) -> int:
        """The sliding window of one layer (0: global)."""
        is_global = self.global_every and layer_id % self.global_every == self.global_every - 1
        return 0 if is_global else self.sliding_window


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """x in at least fp32: bf16/fp16 go up, float64 stays float64 (the parity reference)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


# --- norms ---------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """RMSNorm with the statistics in fp32, scaled after casting back (as Qwen3 and Llama do)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = _upcast(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class LayerNorm(nn.Module):
    """LayerNorm (with bias) computed in at least fp32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = _upcast(x)
        h = F.layer_norm(h, h.shape[-1:], _upcast(self.weight), _upcast(self.bias), self.eps)
        return h.to(x.dtype)


def make_norm(cfg: DecoderConfig) -> nn.Module:
    """The model-width norm the config names (QK-norm and MLA's latent norms are always RMSNorm)."""
    return (RMSNorm if cfg.norm == "rmsnorm" else LayerNorm)(cfg.dim, cfg.norm_eps)


# --- positions -----------------------------------------------------------------------------------


def rope_cache(
    seq_len: int, rope_dim: int, theta: float, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [seq_len, rope_dim / 2]. Built each forward in at least fp32 rather than
    kept as a buffer, so a float64 model gets exact angles and casting a model never rounds them."""
    dtype = torch.promote_types(dtype, torch.float32)
    inv_freq = theta ** (-torch.arange(0, rope_dim, 2, device=device, dtype=dtype) / rope_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=dtype), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate the first rope_dim dims of each head of x [B, H, T, D] ("rotate half" pairing, as HF
    Qwen3/Llama); the remaining dims (partial RoPE, MLA's no-position part) pass through."""
    cos, sin = rope
    rot = 2 * cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    x1, x2 = _upcast(x_rot).chunk(2, dim=-1)
    rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return torch.cat([rotated.to(x.dtype), x_pass], dim=-1)


def alibi_slopes(num_heads: int, device: torch.device) -> torch.Tensor:
    """ALiBi's geometric head slopes 2^(-8 i / H), i = 1..H (Press et al.)."""
    return 2.0 ** (-8.0 * torch.arange(1, num_heads + 1, device=device) / num_heads)


def alibi_bias(
    num_heads: int, seq_len: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """[H, T, T]: -slope_h * (i - j), a penalty growing with the distance back to key j."""
    pos = torch.arange(seq_len, device=device)
    distance = (pos[:, None] - pos[None, :]).to(dtype)
    return -alibi_slopes(num_heads, device).to(dtype)[:, None, None] * distance


# --- attention -----------------------------------------------------------------------------------


def attention_mask(seq_len: int, window: int, device: torch.device) -> torch.Tensor:
    """Boolean [T, T], True where query i may attend key j: causal, and within `window` positions
    when window > 0 (the one place masks are built)."""
    i = torch.arange(seq_len, device=device)[:, None]
    j = torch.arange(seq_len, device=device)[None, :]
    allowed = j <= i
    if window:
        allowed = allowed & (i - j < window)
    return allowed


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    window: int = 0,
    sinks: torch.Tensor | None = None,
    softcap: float = 0.0,
    alibi: bool = False,
) -> torch.Tensor:
    """Causal attention of q, k [B, H, T, Dqk] and v [B, H, T, Dv] -> [B, H, T, Dv].

    SDPA where a mask says it all; an explicit masked softmax (in at least fp32) for what SDPA
    cannot express: sink logits, tanh soft-capping of scores, ALiBi's distance bias."""
    seq_len = q.shape[-2]
    if sinks is None and not softcap and not alibi:
        if not window:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mask = attention_mask(seq_len, window, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    scores = _upcast(q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi:
        scores = scores + alibi_bias(q.shape[1], seq_len, q.device, scores.dtype)
    scores = scores.masked_fill(~attention_mask(seq_len, window, q.device), float("-inf"))
    if sinks is not None:
        # One extra logit per head joins the softmax and is then dropped: a head may put
        # probability "nowhere" instead of on some token.
        sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]
    else:
        probs = scores.softmax(dim=-1)
    return probs.to(v.dtype) @ v


class _AttentionBase(nn.Module):
    """What every attention kind shares: how its scores are shaped (sinks, window, soft-cap,
    ALiBi) and the one `attend` that applies them."""

    def _init_score_options(self, cfg: DecoderConfig, layer_id: int) -> None:
        self.sinks = nn.Parameter(torch.zeros(cfg.num_heads)) if cfg.attention_sinks else None
        self.window = cfg.window(layer_id)
        self.softcap = cfg.attn_softcap
        self.alibi = cfg.position == "alibi"

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return attend(
            q, k, v, window=self.window, sinks=self.sinks, softcap=self.softcap, alibi=self.alibi
        )


class Attention(_AttentionBase):
    """Multi-head attention with num_kv_heads key/value heads: MHA, GQA or MQA."""

    def __init__(self, cfg: DecoderConfig, layer_id: int):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        q_width, kv_width = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.wq = nn.Linear(cfg.dim, q_width, bias=False)
        self.wk = nn.Linear(cfg.dim, kv_width, bias=False)
        self.wv = nn.Linear(cfg.dim, kv_width, bias=False)
        self.wo = nn.Linear(q_width, cfg.dim, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self._init_score_options(cfg, layer_id)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None):
        bsz, seq_len, _ = x.shape
        q = self.wq(x).view(bsz, seq_len, self.num_heads, self.head_dim)
        k = self.wk(x).view(bsz, seq_len, self.num_kv_heads, self.head_dim)
        v = self.wv(x).view(bsz, seq_len, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        # GQA/MQA: each key/value head serves num_heads / num_kv_heads query heads.
        repeats = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)
        out = self._attend(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(bsz, seq_len, -1))


class MLAttention(_AttentionBase):
    """DeepSeek-style multi-head latent attention: queries (optionally) and keys/values pass
    through low-rank latents; RoPE acts only on separate "decoupled" dims, whose key part is one
    head shared by all heads."""

    def __init__(self, cfg: DecoderConfig, layer_id: int):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.nope_dim = cfg.qk_nope_head_dim
        self.rope_dim = cfg.qk_rope_head_dim
        self.v_dim = cfg.v_head_dim
        self.kv_lora_rank = cfg.kv_lora_rank
        q_width = cfg.num_heads * (self.nope_dim + self.rope_dim)
        self.q_lora = cfg.q_lora_rank > 0
        if self.q_lora:
            self.wq_a = nn.Linear(cfg.dim, cfg.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.norm_eps)
            self.wq_b = nn.Linear(cfg.q_lora_rank, q_width, bias=False)
        else:
            self.wq = nn.Linear(cfg.dim, q_width, bias=False)
        self.wkv_a = nn.Linear(cfg.dim, cfg.kv_lora_rank + self.rope_dim, bias=False)
        self.kv_norm = RMSNorm(cfg.kv_lora_rank, cfg.norm_eps)
        self.wkv_b = nn.Linear(
            cfg.kv_lora_rank, cfg.num_heads * (self.nope_dim + self.v_dim), bias=False
        )
        self.wo = nn.Linear(cfg.num_heads * self.v_dim, cfg.dim, bias=False)
        self._init_score_options(cfg, layer_id)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None):
        bsz, seq_len, _ = x.shape
        q = self.wq_b(self.q_norm(self.wq_a(x))) if self.q_lora else self.wq(x)
        q = q.view(bsz, seq_len, self.num_heads, -1).transpose(1, 2)
        latent, k_rope = self.wkv_a(x).split([self.kv_lora_rank, self.rope_dim], dim=-1)
        kv = self.wkv_b(self.kv_norm(latent)).view(bsz, seq_len, self.num_heads, -1)
        k_nope, v = kv.transpose(1, 2).split([self.nope_dim, self.v_dim], dim=-1)
        k_rope = k_rope.view(bsz, 1, seq_len, self.rope_dim)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        if rope is not None:
            q_rope, k_rope = apply_rope(q_rope, rope), apply_rope(k_rope, rope)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, self.num_heads, -1, -1)], dim=-1)
        out = self._attend(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(bsz, seq_len, -1))


# --- MLP and mixture of experts ------------------------------------------------------------------


class MLP(nn.Module):
    """w2(act(w1 x) * w3 x) when gated (SwiGLU with silu, GeGLU with gelu), else w2(act(w1 x))
    (GELU, ReLU² MLPs). The activation is a name, so an ablation can swap it."""

    def __init__(self, dim: int, hidden: int, activation: str, gated: bool):
        super().__init__()
        self.act = ACTIVATIONS[activation]
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False) if gated else None
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.w1(x))
        if self.w3 is not None:
            h = h * self.w3(x)
        return self.w2(h)


def make_mlp(cfg: DecoderConfig, hidden: int) -> MLP:
    return MLP(cfg.dim, hidden, cfg.activation, cfg.gated_mlp)


class GroupedExperts(nn.Module):
    """num_experts MLPs of one shape, their weights stacked [E, ...] (as TorchTitan and HF keep
    them: one parameter per projection rather than thousands of modules)."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        num, dim, hidden = cfg.num_experts, cfg.dim, cfg.moe_intermediate_size
        self.act = ACTIVATIONS[cfg.activation]
        self.w1 = nn.Parameter(torch.empty(num, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(num, hidden, dim)) if cfg.gated_mlp else None
        self.w2 = nn.Parameter(torch.empty(num, dim, hidden))
        for w in (self.w1, self.w3, self.w2):
            if w is not None:
                nn.init.normal_(w, std=cfg.init_std)

    def forward(self, x: torch.Tensor, combine: torch.Tensor) -> torch.Tensor:
        """Every expert on every token x [N, D], outputs summed with weights combine [N, E]."""
        h = self.act(torch.einsum("nd,ehd->enh", x, self.w1))
        if self.w3 is not None:
            h = h * torch.einsum("nd,ehd->enh", x, self.w3)
        y = torch.einsum("enh,edh->end", h, self.w2)
        return torch.einsum("end,ne->nd", y, combine.to(y.dtype))


class MoE(nn.Module):
    """Top-k routed experts (plus optional shared experts every token uses).

    Routing: softmax router scores; each token picks its k best experts, optionally biased by
    `expert_bias` (aux-loss-free balancing, DeepSeek-V3: the bias only chooses, the weights stay
    the unbiased scores, so gradients reach the router through the weights).

    Dispatch is dense: every expert runs on every token and a [tokens, experts] combine matrix,
    zero where a token did not pick the expert, weighs the outputs. Shapes are static, there are no
    host syncs and the gradients are exact; the price is num_experts / k times the routed-expert
    FLOPs and activations, so time a MoE with this in mind (MFU counts only the active experts)."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.num_experts, self.top_k = cfg.num_experts, cfg.experts_per_token
        self.balancing, self.aux_loss_coef = cfg.moe_balancing, cfg.aux_loss_coef
        self.norm_topk_prob = cfg.norm_topk_prob
        self.router = nn.Linear(cfg.dim, cfg.num_experts, bias=False)
        self.experts = GroupedExperts(cfg)
        shared_width = cfg.moe_intermediate_size * cfg.num_shared_experts
        self.shared_expert = make_mlp(cfg, shared_width) if shared_width else None
        self.register_buffer("expert_bias", torch.zeros(cfg.num_experts), persistent=True)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [N, D] -> (router probabilities [N, E], chosen experts [N, k], their weights [N, k])."""
        scores = _upcast(self.router(x)).softmax(dim=-1)
        choice = scores + self.expert_bias.to(scores.dtype) if self.balancing == "bias" else scores
        experts = choice.topk(self.top_k, dim=-1).indices
        weights = scores.gather(-1, experts)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return scores, experts, weights

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [..., D] -> (output [..., D], balancing loss term, tokens per expert [E]).

        The loss and the load are returned rather than stored on the module: torch.compile
        refuses side effects inside an activation-checkpointed block."""
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        scores, experts, weights = self.route(x)
        combine = torch.zeros_like(scores).scatter(-1, experts, weights)  # [N, E]
        chosen = torch.zeros_like(scores).scatter(-1, experts, 1.0)

        out = self.experts(x, combine)
        if self.shared_expert is not None:
            out = out + self.shared_expert(x)
        return out.view(shape), self._balancing_loss(scores, chosen), chosen.sum(dim=0).detach()

    def _balancing_loss(self, scores: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """Switch Transformer's auxiliary loss: E * sum_e (fraction of picks of e) * (mean
        probability of e), times the coefficient: coef for a uniform router, more when skewed.
        (HF's Qwen3-MoE pools all layers and sums over the k slots; this is per layer.)"""
        if self.balancing != "aux_loss":
            return scores.new_zeros(())
        fraction = chosen.mean(dim=0) / self.top_k
        return self.aux_loss_coef * self.num_experts * (fraction * scores.mean(dim=0)).sum()

    @torch.no_grad()
    def update_bias(self, tokens_per_expert: torch.Tensor, rate: float = 1e-3) -> None:
        """Aux-loss-free balancing step (after the optimizer step): raise the bias of experts
        that got fewer tokens than average, lower it for busier ones."""
        if self.balancing != "bias":
            return
        load = tokens_per_expert.to(self.expert_bias.dtype)
        self.expert_bias += rate * torch.sign(load.mean() - load)


# --- the decoder ---------------------------------------------------------------------------------


class Block(nn.Module):
    """One transformer layer: attention then MLP (or MoE), each a residual branch, with the norms
    placed pre (Llama), post (original Transformer) or sandwich (Gemma 2: pre and post)."""

    def __init__(self, cfg: DecoderConfig, layer_id: int):
        super().__init__()
        self.placement = cfg.norm_placement
        self.attention = (MLAttention if cfg.is_mla else Attention)(cfg, layer_id)
        self.feed_forward = MoE(cfg) if cfg.num_experts else make_mlp(cfg, cfg.intermediate_size)
        self.attention_norm = make_norm(cfg)
        self.ffn_norm = make_norm(cfg)
        if self.placement == "sandwich":
            self.post_attention_norm = make_norm(cfg)
            self.post_ffn_norm = make_norm(cfg)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """-> (output, MoE balancing loss, MoE tokens per expert); the last two None if dense."""
        if self.placement == "post":
            x = self.attention_norm(x + self.attention(x, rope))
            h, aux_loss, load = self._feed_forward(x)
            return self.ffn_norm(x + h), aux_loss, load
        h = self.attention(self.attention_norm(x), rope)
        if self.placement == "sandwich":
            h = self.post_attention_norm(h)
        x = x + h
        h, aux_loss, load = self._feed_forward(self.ffn_norm(x))
        if self.placement == "sandwich":
            h = self.post_ffn_norm(h)
        return x + h, aux_loss, load

    def _feed_forward(self, x: torch.Tensor):
        if isinstance(self.feed_forward, MoE):
            return self.feed_forward(x)
        return self.feed_forward(x), None, None


class Decoder(nn.Module):
    """Token embedding -> layers -> final norm -> output projection; forward(input_ids [B, T])
    returns logits [B, T, vocab]. `layers` is a ModuleList so a trainer can compile or checkpoint
    each block on its own, as TorchTitan does."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.args = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos_embeddings = (
            nn.Embedding(cfg.max_seq_len, cfg.dim) if cfg.position == "learned" else None
        )
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_layers))
        self.norm = make_norm(cfg)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        # The MoE layers' balancing losses and loads of the last forward, for aux_loss() and
        # update_moe_bias(). Kept here, outside the blocks, so that blocks have no side effects.
        self._moe_aux_losses: list[torch.Tensor] = []
        self._moe_loads: list[torch.Tensor] = []

    def __getstate__(self) -> dict:
        # The last forward's losses are graph tensors, which copy.deepcopy and pickle refuse;
        # a copy of the model starts without them.
        return {**self.__dict__, "_moe_aux_losses": [], "_moe_loads": []}

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        h = self.tok_embeddings(input_ids)
        if self.pos_embeddings is not None:
            h = h + self.pos_embeddings(torch.arange(seq_len, device=input_ids.device))
        rope = None
        if self.args.rope_dim:
            rope = rope_cache(seq_len, self.args.rope_dim, self.args.rope_theta, h.device, h.dtype)
        aux_losses, loads = [], []
        for layer in self.layers:
            h, aux_loss, load = layer(h, rope)
            if aux_loss is not None:
                aux_losses.append(aux_loss)
                loads.append(load)
        self._moe_aux_losses, self._moe_loads = aux_losses, loads
        return self.output(self.norm(h))

    def moe_layers(self) -> list[MoE]:
        return [m for m in self.modules() if isinstance(m, MoE)]

    def aux_loss(self) -> torch.Tensor:
        """The MoE balancing loss of the last forward (coefficient included, summed over layers),
        0 without one; add it to the training loss."""
        if not self._moe_aux_losses:
            return torch.zeros((), device=self.output.weight.device)
        return torch.stack(self._moe_aux_losses).sum()

    def tokens_per_expert(self) -> list[torch.Tensor]:
        """Per MoE layer, how many tokens each expert got in the last forward."""
        return list(self._moe_loads)

    def update_moe_bias(self, rate: float = 1e-3) -> None:
        """Aux-loss-free balancing: call once per step after the optimizer step."""
        if not self._moe_loads:  # no forward yet
            return
        for moe, load in zip(self.moe_layers(), self._moe_loads, strict=True):
            moe.update_bias(load, rate)

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Deterministic initialisation: the same seed gives the same weights on every device and
        dtype (values are drawn in fp32 on the CPU, in parameter order, then copied). Linear and
        embedding weights ~ N(0, init_std), residual output projections (wo, w2) scaled by
        1/sqrt(2 * num_layers) (GPT-2); norms one, biases, sinks and expert biases zero."""
        if self.args.tie_embeddings:  # Module.to_empty() unties shared parameters: tie again
            self.output.weight = self.tok_embeddings.weight
        gen = torch.Generator().manual_seed(seed)
        residual_std = self.args.init_std / math.sqrt(2 * self.args.num_layers)
        for name, param in self.named_parameters():
            if param.ndim < 2:  # norm scales start at one; biases and sink logits at zero
                param.fill_(1.0 if name.endswith("norm.weight") else 0.0)
                continue
            is_residual_out = name.endswith(("wo.weight", "w2.weight", "experts.w2"))
            std = residual_std if is_residual_out else self.args.init_std
            values = torch.randn(param.shape, generator=gen, dtype=torch.float32) * std
            param.copy_(values)
        for m in self.moe_layers():
            m.expert_bias.zero_()


def num_params(model: nn.Module, exclude_embedding: bool = False, active: bool = False) -> int:
    """Parameters of `model`, a shared (tied) matrix once. exclude_embedding: minus the input (and
    learned position) embeddings unless tied to the output projection, as TorchTitan counts N for
    6 * N FLOPs. active: routed experts weighted by k / E (the parameters one token uses)."""
    params = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in params.values())
    if exclude_embedding:
        output = getattr(model, "output", None)
        tied = {id(output.weight)} if output is not None else set()
        for m in model.modules():
            if isinstance(m, nn.Embedding) and id(m.weight) not in tied:
                total -= m.weight.numel()
    if active:
        for m in model.modules():
            if isinstance(m, MoE):
                routed = sum(p.numel() for p in m.experts.parameters())
                total -= routed * (m.num_experts - m.top_k) // m.num_experts
    return total
