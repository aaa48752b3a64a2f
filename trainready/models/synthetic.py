"""The synthetic architecture matrix the parity suite runs: one tiny decoder (blocks.Decoder) with
each architectural axis switchable, small enough that a float64 CPU reference is cheap.

A config is a JSON-able dict {axis: value} over AXES (missing axes take the BASE value):

    norm        rmsnorm, layernorm, rmsnorm+qk_norm, and norm placements post / sandwich
    mlp         swiglu, gelu, geglu, relu2
    moe         dense, topk (2 of 4 experts, aux loss), shared+routed, topk+bias (aux-loss-free)
    attention   mha, gqa, mqa, mla, sliding, local_global, sinks, softcap
    position    rope, partial_rope, alibi, none, learned
    embeddings  untied, tied

`variants(preset)` names the configs a preset runs; `build(config, seed)` makes the model.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from trainready.core.config import ConfigError
from trainready.models.blocks import Decoder, DecoderConfig

VOCAB_SIZE = 256
SEQ_LEN = 32
WINDOW = 8  # sliding window of the local attention variants: a quarter of SEQ_LEN

# The tiny model every variant starts from.
_SIZE: dict[str, Any] = dict(
    vocab_size=VOCAB_SIZE,
    dim=64,
    num_layers=2,
    num_heads=4,
    intermediate_size=128,
    max_seq_len=4 * SEQ_LEN,
)
_MOE = dict(num_experts=4, experts_per_token=2, moe_intermediate_size=32)

# axis -> value -> the DecoderConfig fields it sets; the first value of each axis is the base.
_OPTIONS: dict[str, dict[str, dict[str, Any]]] = {
    "norm": {
        "rmsnorm": {},
        "layernorm": {"norm": "layernorm"},
        "rmsnorm+qk_norm": {"qk_norm": True},
        "rmsnorm/post": {"norm_placement": "post"},
        "rmsnorm/sandwich": {"norm_placement": "sandwich"},
        "layernorm/post": {"norm": "layernorm", "norm_placement": "post"},  # original Transformer
    },
    "mlp": {
        "swiglu": {"activation": "silu", "gated_mlp": True},
        "gelu": {"activation": "gelu", "gated_mlp": False},
        "geglu": {"activation": "gelu_tanh", "gated_mlp": True},
        "relu2": {"activation": "relu2", "gated_mlp": False},
    },
    "moe": {
        "dense": {},
        "topk": {**_MOE, "moe_balancing": "aux_loss"},
        "shared+routed": {**_MOE, "num_shared_experts": 1, "moe_balancing": "aux_loss"},
        "topk+bias": {**_MOE, "moe_balancing": "bias"},
    },
    "attention": {
        "mha": {},
        "gqa": {"num_kv_heads": 2},
        "mqa": {"num_kv_heads": 1},
        "mla": dict(
            q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16
        ),
        "sliding": {"sliding_window": WINDOW},
        "local_global": {"sliding_window": WINDOW, "global_every": 2},
        "sinks": {"attention_sinks": True},
        "softcap": {"attn_softcap": 5.0},
    },
    "position": {
        "rope": {"position": "rope"},
        "partial_rope": {"position": "rope", "rope_fraction": 0.5},
        "alibi": {"position": "alibi"},
        "none": {"position": "none"},
        "learned": {"position": "learned"},
    },
    "embeddings": {
        "untied": {"tie_embeddings": False},
        "tied": {"tie_embeddings": True},
    },
}

AXES: dict[str, tuple[str, ...]] = {axis: tuple(values) for axis, values in _OPTIONS.items()}
BASE: dict[str, str] = {axis: values[0] for axis, values in AXES.items()}
PRESETS = {"quick": 0, "standard": 24, "full": 96}  # preset -> combinations beyond quick


def _resolve(config: dict) -> dict[str, str]:
    """config with every axis present; ConfigError on an unknown axis or value."""
    if not isinstance(config, dict):
        raise ConfigError(f"a synthetic config is a dict of axis -> value, got {config!r}")
    unknown = sorted(set(config) - set(AXES))
    if unknown:
        raise ConfigError(f"unknown synthetic axis {unknown[0]!r}; valid: {', '.join(AXES)}")
    full = {**BASE, **config}
    for axis, value in full.items():
        if value not in AXES[axis]:
            raise ConfigError(
                f"unknown {axis} {value!r} for the synthetic model; valid: {', '.join(AXES[axis])}"
            )
    return full


def traits(config: dict) -> dict[str, str]:
    """The value of every axis (norm, mlp, moe, attention, position, embeddings)."""
    return _resolve(config)


def decoder_config(config: dict) -> DecoderConfig:
    fields = dict(_SIZE)
    for axis, value in _resolve(config).items():
        fields.update(_OPTIONS[axis][value])
    return DecoderConfig(**fields)


def build(config: dict, seed: int = 0) -> Decoder:
    """The model of a config, initialised from `seed`: forward(input_ids [B, T]) -> logits
    [B, T, VOCAB_SIZE]; aux_loss() is the MoE balancing term of the last forward (or 0)."""
    model = Decoder(decoder_config(config))
    model.init_weights(seed)
    return model


def _one_axis() -> list[tuple[str, dict]]:
    return [
        (f"{axis}={value}", {**BASE, axis: value})
        for axis, values in AXES.items()
        for value in values[1:]
    ]


def _combinations(count: int, seed: int) -> list[tuple[str, dict]]:
    """`count` distinct random configs that differ from the base on two or more axes. The same
    seed gives the same sequence, and a smaller count is a prefix of a larger one."""
    rng = random.Random(seed)
    seen: set[tuple[str, ...]] = set()
    combos = []
    while len(combos) < count:
        config = {axis: rng.choice(values) for axis, values in AXES.items()}
        changed = [f"{axis}={v}" for axis, v in config.items() if v != BASE[axis]]
        key = tuple(config.values())
        if len(changed) < 2 or key in seen:
            continue
        seen.add(key)
        combos.append((f"combo-{len(combos):02d}:{','.join(changed)}", config))
    return combos


def variants(preset: str, seed: int = 0) -> list[tuple[str, dict]]:
    """(stable name, config) pairs: smoke = the base alone; quick = the base and every one-axis
    variation; standard and full add 24 and 96 seeded combinations of several axes."""
    if preset == "smoke":
        return [("base", dict(BASE))]
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; valid: smoke, {', '.join(PRESETS)}")
    return [("base", dict(BASE)), *_one_axis(), *_combinations(PRESETS[preset], seed)]


def example_input(batch: int = 2, seq_len: int = SEQ_LEN, seed: int = 0) -> torch.Tensor:
    """Token ids [batch, seq_len] drawn from a seeded CPU generator."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB_SIZE, (batch, seq_len), generator=gen)
