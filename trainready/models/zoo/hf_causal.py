"""The Hugging Face zoo: every causal-LM model type of the installed transformers, built tiny.

Each type is built from its default config shrunk to a few hundred thousand parameters (2 layers,
hidden 64, 4 heads / 2 KV heads, vocab 512, 4 small experts for MoE, `use_cache=False`) with random
weights, never downloaded. Shrinking is generic -- a rule per config field name (`SIZES`), per-layer
lists cut to the layer count while keeping every distinct layer kind, sizes that must agree
recomputed (`_derive`: MLA heads, Mamba inner widths), dropout and router noise zeroed -- plus short
tables of per-type fixes where a config's validators or fixed sizes need them (`ADJUST`), where a
default config fails its own validator (`DEFAULT_KWARGS`), or where a model needs set-up before its
first forward (`AFTER_BUILD`); types that build but take no token ids say why (`NO_TOKEN_FORWARD`).
Models use transformers' plain PyTorch attention and expert loops ("eager"), which also run in
float64, so the float64 reference executes the same code.

    model_types()                 -> the causal-LM types of this transformers, sorted
    tiny_config(model_type)       -> the shrunk PretrainedConfig (raises BuildError with the reason)
    build(model_type, seed=0)     -> CausalLM: forward(input_ids [B,T]) -> logits [B,T,V];
                                     aux_loss() the MoE router loss of the last forward
    traits(config)                -> norm, mlp, moe, attention kind, position encoding
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import os
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from trainready.models.zoo.float64 import float32_as_float64, is_float64
from trainready.models.zoo.optional import mend_torchvision

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB_SIZE = 512
SEQ_LEN = 32
LAYERS = 2
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
EXPERTS = 4
TOP_K = 2

# Field name -> tiny value. A field is shrunk only when its default is an int (not a bool) and
# larger than the tiny value, so flags, ratios and already-small fields keep their meaning.
SIZES: dict[str, int] = {
    **dict.fromkeys(
        (
            "num_hidden_layers",
            "n_layer",
            "n_layers",
            "num_layers",
            "num_blocks",
            "decoder_layers",
            "encoder_layers",
            "num_decoder_layers",
            "num_encoder_layers",
        ),
        LAYERS,
    ),
    **dict.fromkeys(
        (
            "hidden_size",
            "n_embd",
            "n_embed",
            "d_model",
            "dim",
            "embedding_size",
            "word_embed_proj_dim",
            "attention_hidden_size",
            "lru_width",
            "backbone_hidden_size",
            "embedding_dim",
            "emb_dim",
            "pronunciation_embed_dim",
            "shape_embed_dim",
            "input_embedding_size",
            "output_embedding_size",
        ),
        HIDDEN,
    ),
    **dict.fromkeys(
        (
            "intermediate_size",
            "n_inner",
            "ffn_dim",
            "decoder_ffn_dim",
            "encoder_ffn_dim",
            "d_ff",
            "dff",
            "dim_ff",
            "ffn_hidden_size",
            "feed_forward_size",
            "intermediate_size_mlp",
            "dense_intermediate_size",
            "expert_ffn_hidden_size",
            "d_inner",
        ),
        2 * HIDDEN,
    ),
    **dict.fromkeys(
        (
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "shared_intermediate_size",
            "shared_experts_intermediate_size",
            "moe_shared_expert_intermediate_size",
        ),
        HIDDEN // 2,
    ),
    **dict.fromkeys(
        (
            "num_attention_heads",
            "n_head",
            "n_heads",
            "num_heads",
            "decoder_attention_heads",
            "encoder_attention_heads",
            "num_decoder_attention_heads",
            "num_encoder_attention_heads",
            "swa_num_attention_heads",
            "linear_num_value_heads",
            "linear_num_heads",
            "index_n_heads",
            "mamba_n_heads",
            "mamba_num_heads",
            "n_mamba_heads",
        ),
        HEADS,
    ),
    **dict.fromkeys(
        (
            "num_key_value_heads",
            "num_kv_heads",
            "swa_num_key_value_heads",
            "linear_num_key_heads",
            "mamba_n_groups",
            "n_groups",
        ),
        KV_HEADS,
    ),
    **dict.fromkeys(
        (
            "head_dim",
            "swa_head_dim",
            "qk_head_dim",
            "v_head_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_head_dim",
            "index_head_dim",
            "attention_head_dim",
            "attention_head_size",
            "mamba_d_head",
            "mamba_head_dim",
            "dim_head",
            "kv_channels",
            "d_rel",
            "d_head",
        ),
        HEAD_DIM,
    ),
    **dict.fromkeys(("qk_rope_head_dim", "qk_nope_head_dim", "rotary_dim"), HEAD_DIM // 2),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank", "o_lora_rank"), 32),
    **dict.fromkeys(
        (
            "num_experts",
            "num_local_experts",
            "n_routed_experts",
            "moe_num_experts",
            "num_experts_per_layer",
            "zero_expert_num",
        ),
        EXPERTS,
    ),
    **dict.fromkeys(
        ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k", "topk"), TOP_K
    ),
    **dict.fromkeys(
        ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts", "n_group"), 1
    ),
    **dict.fromkeys(("topk_group", "num_expert_group"), 1),
    **dict.fromkeys(
        (
            "vocab_size",
            "decoder_vocab_size",
            "unpadded_vocab_size",
            "vocab_size_per_layer_input",
            "pronunciation_vocab_size",
            "shape_vocab_size",
        ),
        VOCAB_SIZE,
    ),
    **dict.fromkeys(
        (
            "max_position_embeddings",
            "n_positions",
            "n_ctx",
            "max_seq_len",
            "model_max_length",
            "original_max_position_embeddings",
        ),
        4 * SEQ_LEN,
    ),
    **dict.fromkeys(
        (
            "sliding_window",
            "sliding_window_size",
            "attention_window_size",
            "window_size",
            "local_attention",
            "attention_chunk_size",
        ),
        SEQ_LEN // 2,
    ),
    **dict.fromkeys(("mamba_d_state", "state_size", "ssm_state_size"), 16),
    **dict.fromkeys(("chunk_size", "mamba_chunk_size"), SEQ_LEN // 2),
    **dict.fromkeys(("hidden_size_per_layer_input", "laurel_rank", "ple_embed_dim"), 16),
    "first_k_dense_replace": 1,
    "num_dense_layers": 1,
    "num_nextn_predict_layers": 0,
    "index_topk": 8,
    "time_step_rank": 8,
    "mamba_dt_rank": 8,
}

# Token ids must sit inside the small vocabulary.
TOKEN_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}

# Per-layer lists cut to LAYERS entries (keeping every distinct kind, so hybrids stay hybrid).
LAYER_LISTS = (
    "layer_types",
    "mlp_layer_types",
    "layers_block_type",
    "block_types",
    "attention_types_expanded",
    "indexer_types",
    "mtp_layers_block_type",
    "num_attention_heads_per_layer",
    "attention_layers",
)


# Float fields that make a training step random (dropout, router noise): zeroed.
_RANDOM_FIELD = re.compile(r"drop|pdrop|jitter|noise")
# Configs that default `initializer_range` to a placeholder only a checkpoint ever overwrites
# (1e-10: SAM's, BLIP's, GOT-OCR's, SLANeXt's vision towers and those derived from them): trained
# from it, a tower's float32 gradients lie below float32's normal range (1e-45 down to exact
# zeros) and its case judges rounding residue, or nothing. Such a tower starts at INIT_RANGE,
# transformers' usual 0.02, the scale a fine-tune starts from.
PLACEHOLDER_INIT = 1e-6
INIT_RANGE = 0.02


class BuildError(Exception):
    """A model type that cannot be built tiny here; the message says why."""


# --- shrinking ------------------------------------------------------------------------------------


def _cut_layers(values: list[Any], n: int) -> list[Any]:
    """n entries of a per-layer list: the first of each distinct kind first, in layer order."""
    firsts: list[int] = []
    seen: list[Any] = []
    for i, v in enumerate(values):
        if v not in seen:
            seen.append(v)
            firsts.append(i)
    keep = sorted(firsts[:n])
    rest = [i for i in range(len(values)) if i not in keep]
    return [values[i] for i in sorted(keep + rest[: max(0, n - len(keep))])]


def _original_layers(d: dict[str, Any]) -> int | None:
    return next((d[k] for k in SIZES if SIZES[k] == LAYERS and isinstance(d.get(k), int)), None)


def shrink(d: dict[str, Any]) -> dict[str, Any]:
    """A config dict with sizes cut by `SIZES`, token ids in the vocabulary, no cache, per-layer
    lists cut to LAYERS (named ones, and any list as long as the original layer count), sizes
    that must agree recomputed (`_derive`). Nested sub-configs are shrunk as well."""
    out = dict(d)
    layers = _original_layers(d)
    for key, value in d.items():
        if isinstance(value, bool):
            continue
        random_list = isinstance(value, list) and value and _RANDOM_FIELD.search(key)
        if random_list and all(isinstance(v, float) for v in value):
            value = out[key] = [0.0] * len(value)  # per-stage rates (CvT's drop_path_rate)
        if key == "initializer_range" and isinstance(value, float) and 0 < value < PLACEHOLDER_INIT:
            out[key] = INIT_RANGE
        elif isinstance(value, float) and _RANDOM_FIELD.search(key):
            out[key] = 0.0  # dropout and noise: two runs of one model must compute the same
        elif key in SIZES and isinstance(value, int) and value > SIZES[key]:
            out[key] = SIZES[key]
        elif key in TOKEN_IDS and isinstance(value, int):
            out[key] = TOKEN_IDS[key]
        elif key in TOKEN_IDS and isinstance(value, list):
            out[key] = [TOKEN_IDS[key]]
        elif (
            isinstance(value, list)
            and len(value) > LAYERS
            and (key in LAYER_LISTS or (layers and len(value) == layers))
        ):
            cut = _cut_layers(value, LAYERS)
            out[key] = [min(v, SIZES[key]) if key in SIZES else v for v in cut]
        elif key == "per_layer_config" and isinstance(value, dict):
            out[key] = {i: c for i, c in value.items() if int(i) < LAYERS}
        elif isinstance(value, dict) and ("model_type" in value or value.keys() & SIZES.keys()):
            out[key] = shrink(value)  # a sub-config (text, vision, encoder, attention, ...)
    _derive(out)
    if "use_cache" in out or "num_hidden_layers" in out:
        out["use_cache"] = False
    for key in ("id2label", "label2id", "_name_or_path", "transformers_version", "dtype"):
        out.pop(key, None)
    return out


def _derive(d: dict[str, Any]) -> None:
    """Sizes that a config checks against each other, recomputed from the shrunk ones."""
    hidden = d.get("hidden_size")
    if isinstance(d.get("kv_lora_rank"), int) and isinstance(d.get("qk_rope_head_dim"), int):
        # MLA: the rotary part is head_dim wide; the query/key head is nope + rope; keys and
        # values are expanded per query head from the latent.
        d["head_dim"] = d["qk_rope_head_dim"]
        if isinstance(d.get("num_key_value_heads"), int):
            d["num_key_value_heads"] = d["num_attention_heads"]
        if "qk_head_dim" in d:
            d["qk_head_dim"] = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    expand = d.get("mamba_expand", d.get("expand"))
    if isinstance(hidden, int) and isinstance(expand, int):
        inner = expand * hidden
        if "mamba_d_ssm" in d:
            d["mamba_d_ssm"] = inner
        for heads_key, dim_key in (
            ("mamba_n_heads", "mamba_d_head"),
            ("n_mamba_heads", "mamba_headdim"),
            ("mamba_num_heads", "mamba_head_dim"),
            ("num_heads", "head_dim"),
        ):
            if isinstance(d.get(heads_key), int) and dim_key in d and "mamba" in str(d):
                d[dim_key] = inner // d[heads_key]


# Per-type adjustments after the generic shrink, where a validator or a fixed size needs them.
def _set(**kw: Any) -> Callable[[dict[str, Any]], None]:
    def apply(d: dict[str, Any]) -> None:
        d.update(kw)

    return apply


def _rope_per_layer_type(d: dict[str, Any]) -> None:
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    d["rope_parameters"] = {t: dict(rope) for t in set(d["layer_types"])}


def _nested(key: str, **kw: Any) -> Callable[[dict[str, Any]], None]:
    def apply(d: dict[str, Any]) -> None:
        d[key] = {**d[key], **kw}

    return apply


def _blt(d: dict[str, Any]) -> None:
    for key in ("encoder_config", "decoder_config"):
        d[key] = {**d[key], "hidden_size_global": d["global_config"]["hidden_size"]}
    d["encoder_hash_byte_group_vocab"] = 512


# Qwen4-Exp's full-attention layers always build the QSA token indexer, whose sizes default to
# None: one key head (required), an 8-token budget in blocks of 4, so selection happens at SEQ_LEN.
# Its hyper-connection bottleneck (320 wide by default) is cut below its 4 x HIDDEN input.
_QWEN4_EXP_QSA = _set(
    hc_lowrank=32,
    indexer_n_heads=HEADS,
    indexer_kv_heads=1,
    indexer_head_dim=HEAD_DIM,
    indexer_budget=8,
    indexer_compress_ratio=4,
)

# Gemma 3n's vision tower, timm's MobileNetV5 encoder, at the block types of the checkpoint's
# (edge residual, universal inverted residual, mobile MQA; a multi-scale fusion of the last two
# stages) and tiny widths: 500k parameters for its 300M. Its fusion adapter's output is fixed at
# 2048 channels by timm (the tower's `hidden_size`), pooled to a 2 x 2 grid of soft tokens.
_MOBILENET_V5_TINY = [
    ["er_r1_k3_s2_e4_c16"],
    ["uir_r1_a3_k5_s2_e6_c24"],
    ["uir_r1_a5_k5_s2_e6_c32", "mqa_r1_k3_h2_s2_d16_c32", "uir_r1_a0_k0_s1_e2_c32"],
    ["uir_r1_a5_k5_s2_e6_c64", "mqa_r1_k3_h2_s1_d16_c64", "uir_r1_a0_k0_s1_e2_c64"],
]


def _gemma3n(d: dict[str, Any]) -> None:
    """The multimodal Gemma 3n, trained here on text like its causal-LM class's other types: its
    text model as gemma3n_text's (no KV sharing: 15 shared layers of the 2 kept), and its
    towers built tiny, which the default config builds at full size (295M parameters): the
    audio conformer at transformers' own test sizes, the vision tower as above (where timm is
    installed; without it the build says timm is missing)."""
    d["text_config"] = {**d["text_config"], "num_kv_shared_layers": 0}
    d["audio_config"] = {
        **d["audio_config"],
        "conf_num_hidden_layers": LAYERS,
        "conf_num_attention_heads": HEADS,
        "sscp_conv_channel_size": [16, 8],
        "conf_conv_kernel_size": 3,
        "conf_attention_chunk_size": 4,
        "conf_attention_context_left": 5,
    }
    if importlib.util.find_spec("timm") is None:
        return
    from trainready.models.zoo.timm import import_timm

    import_timm()
    from timm.models._efficientnet_builder import decode_arch_def

    grid = 2
    d["vision_config"] = {
        **d["vision_config"],
        "hidden_size": 2048,
        "model_args": {
            "block_args": decode_arch_def(_MOBILENET_V5_TINY),
            "stem_size": 16,
            "msfa_output_resolution": grid,
        },
    }
    d["vision_soft_tokens_per_image"] = grid * grid


ADJUST: dict[str, Callable[[dict[str, Any]], None]] = {
    # Default configs that leave a size None which the modeling code needs (transformers 5.x).
    "hunyuan_v1_dense": _set(head_dim=HEAD_DIM),
    "hunyuan_v1_moe": _set(head_dim=HEAD_DIM),
    "ministral": _set(head_dim=HEAD_DIM),
    "nemotron": _set(num_key_value_heads=KV_HEADS),
    "dots1": _set(n_routed_experts=EXPERTS, num_experts_per_tok=TOP_K, n_shared_experts=1),
    "deepseek_v2": _set(num_experts_per_tok=TOP_K),
    # MLA with a sliding-window head as wide as the MLA query/key head.
    "dots3_note": _set(num_key_value_heads=HEADS, swa_head_dim=HEAD_DIM, head_dim=HEAD_DIM),
    "dots3_note_text": _set(num_key_value_heads=HEADS, swa_head_dim=HEAD_DIM, head_dim=HEAD_DIM),
    "dbrx": _nested("attn_config", rope_theta=10000.0, clip_qkv=8.0),
    "lfm2_moe": _set(layer_types=["conv", "full_attention"], num_dense_layers=1),
    "cohere_compass_text": _rope_per_layer_type,
    # Validators tying layer counts together. Dory's `to_dict` writes the released layout (each
    # layer as an attention block plus an "mlp" block, every count doubled) and its __post_init__
    # halves all counts whenever "mlp" is listed: give one entry per layer, without "mlp", so the
    # counts are taken as they are (input 1 + recurrent 1 + output 1 = 3 layers).
    "dory": _set(
        num_hidden_layers=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        n_input_layers=1,
        n_recurrent_layers=1,
        n_output_layers=1,
    ),
    "gpt_neo": _set(attention_types=[[["global", "local"], 1]]),
    # Shared-block tying needs two hybrid layers: four layers, hybrid at 1 and 3.
    # The shared attention block sees the hidden state concatenated with the embeddings: twice
    # as wide. Zamba's shared-block tying needs two hybrid layers.
    "zamba": _set(
        num_hidden_layers=4,
        layers_block_type=["linear_attention", "hybrid"] * 2,
        attention_hidden_size=2 * HIDDEN,
        attention_head_dim=2 * HIDDEN // HEADS,
    ),
    # Its config keeps the default's hybrid layer ids (6, 12, ...) as given rather than deriving
    # them from the shrunk layer types: name the one hybrid layer.
    "zamba2": _set(
        attention_hidden_size=2 * HIDDEN,
        attention_head_dim=2 * HIDDEN // HEADS,
        kv_channels=16,
        hybrid_layer_ids=[1],
    ),
    # Byte-level patches: the local encoder and decoder project to the global model's width, and
    # the hash-n-gram embedding (500k rows by default) is shrunk like a vocabulary.
    "blt": _blt,
    # Hierarchical reasoning loops: one cycle of each level is enough to exercise them.
    "hrm_text": _set(H_cycles=1, L_cycles=1),
    "reformer": _set(
        is_decoder=True, axial_pos_embds_dim=[HIDDEN // 2, HIDDEN // 2], axial_pos_shape=[4, 8]
    ),
    "gemma3n_text": _set(num_kv_shared_layers=0),
    "gemma3n": _gemma3n,
    # Gemma 4 speculative-decoding drafters: every layer reads the target model's shared KVs, and
    # the count (in the text config, not cut by the generic shrink) must equal the layer count.
    "gemma4_assistant": _nested("text_config", num_kv_shared_layers=LAYERS),
    "gemma4_unified_assistant": _nested("text_config", num_kv_shared_layers=LAYERS),
    "qwen4_exp": _QWEN4_EXP_QSA,
    "qwen4_exp_text": _QWEN4_EXP_QSA,
    # CPM-Ant's init_std=1.0 is the original's (CPM-Live) init for a Linear that divides its output
    # by sqrt(dim_in); the transformers port uses plain nn.Linear, so std-1 weights make every
    # projection sqrt(dim_in) too large: attention scores of std ~60 (softmax nearly one-hot),
    # a residual stream of rms ~600 after one layer, and fp32 gradients 60x less accurate (relative
    # error 4e-5 vs the usual 6e-7: fail_numerics at any width, worse at the default 4096).
    # 1/sqrt(HIDDEN) is the original's effective weight scale.
    "cpmant": _set(init_std=HIDDEN**-0.5),
    # One codebook: the decoder then reads plain [B, T] token ids.
    "musicgen": _set(num_codebooks=1),
    "musicgen_melody": _set(num_codebooks=1),
}

# Types whose float64 reference needs `float64.float32_as_float64` (the float64 mode every task
# model runs under): their library code drops a float64 run to float32. Causal LMs otherwise run
# their code as is: under the mode the Qwen3.5 family's gated delta rule becomes float64 in the
# reference too, and its decay-gate gradients (A_log, dt_bias, in_proj_a: ~1e-13 at init, where
# g ~ -20 per token) are below what fp32 resolves -- every fp32 run, in any summation order,
# returns the same rounding residue (2^-42 steps) of a diagonal that cancels exactly in the
# chunked form's backward, which no independently rounded run moves (measured; see jev in the
# task zoo, which fails on it).
FLOAT64_MODE: dict[str, str] = {
    "xglm": "its attention clamps scores with torch.full((), torch.finfo(dtype).min) without a "
    "dtype: the float64 minimum in a default-dtype (float32) tensor overflows",
    "inkling2_text": "its modeling code casts to float32 with `.float()` throughout (router "
    "input, norms, the residual stream): a float64 model meets float32 activations",
    "inkling2_loop_text": "as inkling2_text (the same modeling code, looped)",
    "blt": "its eager attention takes the softmax with dtype=torch.float32: the float64 mask "
    "minimum becomes -inf there and a fully masked row gives nan (loss nan at step 0)",
}

# Types that stay unsupported or fail for reasons of their own, not of the shrinking (transformers
# 5.24, eager fp32 on the CPU):
# - gemma3n without timm: the causal-LM mapping names the multimodal
#   Gemma3nForConditionalGeneration, whose vision tower is a timm model (`_gemma3n` above); its
#   text decoder is also the gemma3n_text type.
# - rwkv (fail_numerics, an honest result): RWKV initialises its embedding at ~1e-4 per entry at
#   any size (orthogonal, gain 1e-4 sqrt(max(V, H))) and normalises it with pre_ln, whose eps 1e-5
#   dwarfs the 1e-8 variance, so the embedding gradient is ~316x larger than the rest (rms ~5 vs
#   ~0.01). Its fp32 relative error (6e-7) is that of every other gradient of the model (5-9e-7,
#   as in llama); the others pass on allclose's atol, the embedding gradient is too large for it
#   and is held to twice the error of one rounding (2 x 2.5e-8 relative). Not rescale_every (a no-op under 6
#   layers and outside eval mode), not the WKV loop's float32 key (a float64 loop fails the same).

# Keyword arguments for the default config itself, where the default fails its own validator.
DEFAULT_KWARGS: dict[str, dict[str, Any]] = {
    # The assistant's validator checks its text config (a Gemma 4 text default, with per-layer
    # inputs on): no per-layer input embeddings.
    "gemma4_assistant": {
        "text_config": {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}
    },
}

# Types whose causal-LM class builds but cannot be run from token ids alone: the reason.
NO_TOKEN_FORWARD: dict[str, str] = {
    t: "a speculative-decoding drafter, not a standalone LM: its forward ignores input_ids and "
    "needs the target model's inputs_embeds and shared_kv_states"
    for t in ("gemma4_assistant", "gemma4_unified_assistant")
}

# Set-up a built model needs before its first forward.
AFTER_BUILD: dict[str, Callable[[nn.Module], None]] = {
    "xmod": lambda m: m.set_default_language(next(iter(m.config.languages))),
}


# --- building -------------------------------------------------------------------------------------


def model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """transformers warns about every shrunk config; those warnings are not findings."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            yield
    finally:
        logging.disable(logging.NOTSET)
        hf_logging.set_verbosity(level)


def one_line(e: BaseException) -> str:
    """The exception as one line of at most 400 characters, its type first."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}"[:400]


def import_class(name: str) -> Any:
    """The transformers class of that name (BuildError when it does not import). A vision class
    imports torchvision where it is installed: mended first where its extension does not load
    (`optional.mend_torchvision`)."""
    mend_torchvision()
    import transformers

    try:
        return getattr(transformers, name)
    except Exception as e:  # noqa: BLE001 - a missing optional dependency, say
        raise BuildError(f"{name} does not import: {one_line(e)}") from e


def model_class(model_type: str) -> Any:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if name is None:
        raise BuildError(f"{model_type!r} is not a causal-LM type of this transformers")
    return import_class(name)


def shrunk_config(
    cls: Any,
    adjust: Callable[[dict[str, Any]], None] | None = None,
    default_kwargs: dict[str, Any] | None = None,
) -> Any:
    """`cls`'s default config (built with `default_kwargs`) shrunk by `shrink`, then `adjust`ed;
    BuildError with the reason when the default or the shrunk config does not validate."""
    with quiet():
        try:
            d = shrink(cls(**(default_kwargs or {})).to_dict())
        except Exception as e:  # noqa: BLE001 - a default config that does not validate
            raise BuildError(f"default config does not build: {one_line(e)}") from e
        if adjust is not None:
            adjust(d)
        d.pop("model_type", None)
        try:
            return cls(**d)
        except Exception as e:  # noqa: BLE001 - the shrunk config fails a validator
            raise BuildError(f"shrunk config rejected: {one_line(e)}") from e


def tiny_config(model_type: str) -> Any:
    """The shrunk config of the class the causal-LM model takes (a text config for some types)."""
    cls = model_class(model_type).config_class
    return shrunk_config(cls, ADJUST.get(model_type), DEFAULT_KWARGS.get(model_type, {}))


class CausalLM(nn.Module):
    """A transformers causal LM behind one interface: input_ids [B,T] -> logits [B,T,V].

    MoE models that return a router load-balancing loss (`aux_loss` of their output, asked for
    with `output_router_logits`) train with it as they would in transformers: `aux_loss()` is the
    model's own coefficient (`router_aux_loss_coef`, dbrx's `moe_loss_weight`) times the loss of
    the last forward, which the parity engine adds to the training loss and compares."""

    def __init__(self, model: nn.Module, model_type: str, aux_coef: float | None = None):
        super().__init__()
        self.model = model
        self.model_type = model_type
        self.aux_coef = aux_coef
        self.float64_mode = model_type in FLOAT64_MODE
        self._aux: torch.Tensor | None = None

    def __getstate__(self) -> dict:
        # The last forward's loss is a graph tensor, which copy.deepcopy and pickle refuse.
        return {**self.__dict__, "_aux": None}

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        with float32_as_float64(self.float64_mode and is_float64(self.model)):
            out = self.model(input_ids=input_ids, use_cache=False)
        aux = getattr(out, "aux_loss", None)
        self._aux = aux if self.aux_coef and isinstance(aux, torch.Tensor) else None
        return out.logits

    def aux_loss(self) -> torch.Tensor | float:
        """The router load-balancing loss of the last forward, coefficient included (0.0 for a
        model without one)."""
        return 0.0 if self._aux is None else self.aux_coef * self._aux

    def router_loss_fails_on(self, device: str) -> str | None:
        """Whether the model's own router-loss code runs on `device` (transformers' MoE losses
        count experts with an int32 `histc` off the CPU, which a device may lack): None if it
        runs (or there is none); else the error, and the loss is no longer asked for, so every
        run of a case trains the same loss."""
        if not self.aux_coef or torch.device(device).type == "cpu":
            return None
        try:
            probe = copy.deepcopy(self).to(device)
            with torch.no_grad(), quiet():
                probe(torch.zeros(1, 4, dtype=torch.long, device=device))
            return None
        except Exception as e:  # noqa: BLE001 - the model's load-balancing code on this device
            self.aux_coef = None
            for c in _configs(self.model.config):
                if hasattr(c, "output_router_logits"):
                    c.output_router_logits = False
            return one_line(e)


def _aux_coef(model: nn.Module, config: Any) -> float | None:
    """The coefficient a transformers MoE model weighs its router loss by, or None."""
    for obj in (model, text_config(config), config):
        value = getattr(obj, "router_aux_loss_coef", None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _configs(config: Any) -> list[Any]:
    """The config and its text config (once, if they are one)."""
    return list({id(config): config, id(text_config(config)): text_config(config)}.values())


def _ask_router_loss(config: Any) -> bool:
    """Ask an MoE config for its router loss (`output_router_logits`); False if it has none."""
    found = False
    for c in _configs(config):
        if hasattr(c, "output_router_logits"):
            c.output_router_logits = True
            found = True
    return found


def build(model_type: str, seed: int = 0, config: Any = None) -> CausalLM:
    """The tiny model with seeded random weights, in float32 on the CPU."""
    config = config if config is not None else tiny_config(model_type)
    cls = model_class(model_type)
    # The plain PyTorch attention and expert loops: they run in float64 too, so the reference
    # executes the same code as the device (fused grouped-GEMM experts have no float64 kernel).
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    routed = _ask_router_loss(config)
    torch.manual_seed(seed)
    with quiet():
        try:
            model = cls(config)
            if model_type in AFTER_BUILD:
                AFTER_BUILD[model_type](model)
        except Exception as e:  # noqa: BLE001 - any failure to construct is the finding
            raise BuildError(f"model does not build: {one_line(e)}") from e
    if model_type in NO_TOKEN_FORWARD:
        raise BuildError(f"{type(model).__name__}: {NO_TOKEN_FORWARD[model_type]}")
    coef = _aux_coef(model, config) if routed else None
    if coef is not None and not _router_loss_runs(model, config):
        coef = None  # its router loss fails (flint with no MoE layer left): trained without it
    return CausalLM(model.float(), model_type, coef)


def _router_loss_runs(model: nn.Module, config: Any) -> bool:
    """Whether a forward with the router loss asked for runs; if not, it is asked for no more."""
    try:
        with torch.no_grad(), quiet():
            model(input_ids=torch.zeros(1, 4, dtype=torch.long), use_cache=False)
        return True
    except Exception:  # noqa: BLE001 - the model's own load-balancing code failed
        for c in _configs(config):
            if hasattr(c, "output_router_logits"):
                c.output_router_logits = False
        return False


# --- traits ---------------------------------------------------------------------------------------


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def text_config(config: Any) -> Any:
    """The config's text config (itself for a text-only config)."""
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def _attention(c: Any) -> str:
    types = [str(t) for t in (_get(c, "layer_types", "layers_block_type", "block_types") or [])]
    recurrent = ("linear", "mamba", "ssm", "conv", "recurrent", "rwkv", "deltanet", "kda", "gdn")
    if any(any(k in t.lower() for k in recurrent) for t in types):
        return "hybrid"
    if _get(c, "kv_lora_rank") is not None:
        return "mla"
    if any("sliding" in t or "local" in t or "chunk" in t for t in types):
        return "sliding"
    if _get(c, "sliding_window") and _get(c, "use_sliding_window", default=True):
        return "sliding"
    heads = _get(c, "num_attention_heads", "n_head", "num_heads", "n_heads")
    kv = _get(c, "num_key_value_heads", "num_kv_heads", "multi_query_group_num")
    if _get(c, "multi_query") is True:
        return "mqa"
    if heads and kv and kv < heads:
        return "mqa" if kv == 1 else "gqa"
    return "mha" if heads else "none"


def _position(c: Any) -> str:
    pe = str(_get(c, "position_embedding_type", "positional_embedding", default="")).lower()
    if "alibi" in pe or _get(c, "alibi") or getattr(c, "model_type", "") in ("bloom", "mpt"):
        return "alibi"
    if _get(c, "rope_parameters", "rope_theta", "rotary_dim", "rotary_emb_base") is not None:
        return "rope"
    if "relative" in pe or _get(c, "relative_attention_num_buckets") is not None:
        return "relative"
    if _get(c, "max_position_embeddings", "n_positions") is not None:
        return "learned"
    return "none"


def _norm(c: Any) -> str:
    if _get(c, "rms_norm_eps", "norm_eps") is not None and _get(c, "layer_norm_eps") is None:
        return "rmsnorm"
    if _get(c, "layer_norm_eps", "layer_norm_epsilon") is not None:
        return "layernorm"
    return "unknown"


def _mlp(c: Any) -> str:
    """The MLP's activation as the config names it; "unknown" (as `_norm` says) without one."""
    return str(_get(c, "hidden_act", "activation_function", "hidden_activation", default="unknown"))


def traits(config: Any) -> dict[str, str]:
    """What the config says about the architecture, to group results by."""
    c = text_config(config)
    experts = _get(c, *("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"))
    return {
        "norm": _norm(c),
        "mlp": _mlp(c),
        "moe": "moe" if isinstance(experts, int) and experts > 1 else "dense",
        "attention": _attention(c),
        "position": _position(c),
    }
