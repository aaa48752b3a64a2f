"""The Qwen3 family (dense and MoE), the model the training suite trains.

A Qwen3 layer is a pre-norm decoder block with RMSNorm, QK-norm (RMSNorm over each query and key
head, before RoPE), grouped-query attention, a SwiGLU MLP (or, in Qwen3-MoE, 8 of 128 routed SwiGLU
experts with renormalised weights) and RoPE with theta 1e6. The small sizes tie the embedding to
the output projection. Sizes come from trainready.models.specs, so the parameter counts the FLOPs
formula uses and the modules built here are checked against the same numbers.

    cfg = qwen3_config("0.6B")
    with torch.device("meta"):
        model = Qwen3(cfg)          # no memory; model.to_empty(device=...) then init_weights
    model = Qwen3(qwen3_config("debug")); model.init_weights(seed=0)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trainready.core.config import ConfigError, check_choice
from trainready.models.blocks import ACTIVATIONS, Decoder, DecoderConfig, num_params
from trainready.models.moe import use_routed_dispatch
from trainready.models.specs import ModelSpec, get_spec

MOE_DISPATCH = ("routed", "dense")

__all__ = ["Qwen3", "Qwen3Config", "num_params", "qwen3_config", "qwen3_sizes"]


@dataclass
class Qwen3Config:
    name: str
    vocab_size: int
    dim: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tie_embeddings: bool
    rope_theta: float = 1_000_000.0
    norm_eps: float = 1e-6
    # Qwen3-MoE: every layer routes each token to experts_per_token of num_experts experts
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    aux_loss_coef: float = 0.001  # HF Qwen3-MoE's router_aux_loss_coef
    moe_dispatch: str = "routed"  # "routed" (each token to its k experts) or "dense" (all E)
    # Ablations: swap the gate activation (e.g. "gelu": SwiGLU -> GeGLU), add post-sublayer norms.
    mlp_activation: str = "silu"
    extra_norm: bool = False

    def __post_init__(self) -> None:
        if self.mlp_activation not in ACTIVATIONS:
            raise ConfigError(
                f"unknown mlp_activation {self.mlp_activation!r}; valid: {', '.join(ACTIVATIONS)}"
            )
        check_choice("moe_dispatch", self.moe_dispatch, MOE_DISPATCH)
        self.decoder_config()  # validates the sizes

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def decoder_config(self) -> DecoderConfig:
        return DecoderConfig(
            vocab_size=self.vocab_size,
            dim=self.dim,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            norm="rmsnorm",
            norm_eps=self.norm_eps,
            # extra_norm adds a norm after each sublayer, i.e. Gemma 2's sandwich placement.
            norm_placement="sandwich" if self.extra_norm else "pre",
            qk_norm=True,
            activation=self.mlp_activation,
            gated_mlp=True,
            num_experts=self.num_experts,
            experts_per_token=self.experts_per_token,
            moe_intermediate_size=self.moe_intermediate_size,
            moe_balancing="aux_loss",
            aux_loss_coef=self.aux_loss_coef,
            norm_topk_prob=True,
            position="rope",
            rope_theta=self.rope_theta,
            tie_embeddings=self.tie_embeddings,
        )


def _from_spec(spec_name: str) -> Qwen3Config:
    spec: ModelSpec = get_spec(spec_name)
    # Qwen3 has neither MLA, shared experts nor leading dense layers; refuse a spec that does.
    assert not (spec.is_mla or spec.num_shared_experts or spec.first_k_dense), spec.name
    return Qwen3Config(
        name=spec.name,
        vocab_size=spec.vocab_size,
        dim=spec.hidden_size,
        num_layers=spec.num_layers,
        num_heads=spec.num_heads,
        num_kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        intermediate_size=spec.intermediate_size,
        tie_embeddings=spec.tie_embeddings,
        num_experts=spec.num_experts,
        experts_per_token=spec.experts_per_token,
        moe_intermediate_size=spec.moe_intermediate_size,
    )


# Tiny sizes for CPU tests; the rest are the named models in specs.py.
_DEBUG = dict(
    name="qwen3-debug-tiny",
    vocab_size=512,
    dim=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    tie_embeddings=True,
)
_TINY = {
    "debug": _DEBUG,
    "debug-moe": {
        **_DEBUG,
        "name": "qwen3-moe-debug-tiny",
        "tie_embeddings": False,
        "num_experts": 8,
        "experts_per_token": 2,
        "moe_intermediate_size": 32,
    },
}
_SPEC_SIZES = {
    "0.6B": "Qwen3-0.6B",
    "1.7B": "Qwen3-1.7B",
    "4B": "Qwen3-4B",
    "8B": "Qwen3-8B",
    "14B": "Qwen3-14B",
    "32B": "Qwen3-32B",
    "30B-A3B": "Qwen3-30B-A3B",
    "235B-A22B": "Qwen3-235B-A22B",
    "debugmodel": "torchtitan-qwen3-debugmodel",  # TorchTitan's qwen3 debugmodel
}


def qwen3_sizes() -> list[str]:
    return [*_TINY, *_SPEC_SIZES]


def qwen3_config(size: str, **overrides) -> Qwen3Config:
    """The config of a Qwen3 size (case-insensitive: "0.6B", "30B-A3B", "debugmodel", "debug",
    "debug-moe", ...), with fields replaced by `overrides`."""
    key = {s.lower(): s for s in qwen3_sizes()}.get(size.strip().lower())
    if key is None:
        raise ConfigError(f"unknown Qwen3 size {size!r}; valid: {', '.join(qwen3_sizes())}")
    config = Qwen3Config(**_TINY[key]) if key in _TINY else _from_spec(_SPEC_SIZES[key])
    fields = {f.name for f in dataclasses.fields(Qwen3Config)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ConfigError(
            f"unknown Qwen3Config field(s) {', '.join(unknown)}; valid: {', '.join(sorted(fields))}"
        )
    return dataclasses.replace(config, **overrides)


class Qwen3(Decoder):
    """Qwen3 decoder: forward(input_ids [B, T]) -> logits [B, T, vocab]; `.layers` holds the
    transformer blocks; `init_weights(seed)` initialises deterministically; for MoE sizes,
    `aux_loss()` is the router's load-balancing term of the last forward."""

    def __init__(self, config: Qwen3Config):
        super().__init__(config.decoder_config())
        self.config = config
        if config.moe_dispatch == "routed":
            use_routed_dispatch(self)
