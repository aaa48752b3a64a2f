"""Model families for grouping results: the modality of a transformers model type, and the traits
of a config that the architecture traits of `hf.traits` do not name (token mixer, MLA, sliding
window, cross-attention, convolutions).

Modality, first match wins (transformers' own tables, MODEL_FOR_<TASK>_MAPPING_NAMES):

1. other: a time-series task (classification, regression, prediction).
2. multimodal: a task that takes text with another input (image-text-to-text, multimodal LM,
   visual or document QA, zero-shot image classification or detection, retrieval).
3. audio: a speech or audio task (classification, CTC, RNN-T, TDT, speech seq2seq, text to speech).
4. video: video classification.
5. vision: an image task (classification, detection, segmentation, depth, backbone...).
6. seq2seq: a seq2seq LM.
7. text-encoder: masked LM or next-sentence prediction (BERT also ships a causal-LM head).
8. text-decoder: a causal LM.
9. text-encoder: any other text task (sequence, token classification, QA, text encoding).
10. A type in none of these tables (a sub-model such as clip_vision_model, a codec, a forecaster
    with no task table): EXCEPTIONS, then its config class, read without building it:
    a `prediction_length` -> other; sub-configs of two or more modalities -> multimodal; unless
    it is a text tower (a ...TextConfig), its class name or fields say video, audio or vision;
    its one sub-config's modality; then as text: is_encoder_decoder -> seq2seq; no vocabulary ->
    other; a contrastive tower's projection, BERT's segment embeddings or "encoder" in the name
    -> text-encoder; a KV cache, tied embeddings, RoPE or GQA -> text-decoder; else text-encoder.

"diffusion" is for diffusers models (transformers ships none). "other": inputs none of the
families names (time series, reinforcement learning, protein structure).
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from typing import Any

DIFFUSION = "diffusion"
MODALITIES = (
    "text-decoder",
    "text-encoder",
    "seq2seq",
    "vision",
    "audio",
    "video",
    "multimodal",
    DIFFUSION,
    "other",
)

# (modality, tasks) in priority order: the first whose tables hold the type decides.
_TASKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("other", ("TIME_SERIES_CLASSIFICATION", "TIME_SERIES_PREDICTION", "TIME_SERIES_REGRESSION")),
    (
        "multimodal",
        (
            "MULTIMODAL_LM",
            "IMAGE_TEXT_TO_TEXT",
            "VISUAL_QUESTION_ANSWERING",
            "DOCUMENT_QUESTION_ANSWERING",
            "ZERO_SHOT_IMAGE_CLASSIFICATION",
            "ZERO_SHOT_OBJECT_DETECTION",
            "RETRIEVAL",
        ),
    ),
    (
        "audio",
        (
            "AUDIO_CLASSIFICATION",
            "AUDIO_FRAME_CLASSIFICATION",
            "AUDIO_XVECTOR",
            "CTC",
            "RNNT",
            "TDT",
            "SPEECH_SEQ_2_SEQ",
            "TEXT_TO_SPECTROGRAM",
            "TEXT_TO_WAVEFORM",
        ),
    ),
    ("video", ("VIDEO_CLASSIFICATION",)),
    (
        "vision",
        (
            "IMAGE_CLASSIFICATION",
            "IMAGE",
            "BACKBONE",
            "CAUSAL_IMAGE_MODELING",
            "MASKED_IMAGE_MODELING",
            "DEPTH_ESTIMATION",
            "OBJECT_DETECTION",
            "IMAGE_SEGMENTATION",
            "SEMANTIC_SEGMENTATION",
            "INSTANCE_SEGMENTATION",
            "UNIVERSAL_SEGMENTATION",
            "MASK_GENERATION",
            "KEYPOINT_DETECTION",
            "KEYPOINT_MATCHING",
            "POSE_ESTIMATION",
            "IMAGE_TO_IMAGE",
            "IMAGE_MATTING",
            "NORMAL_ESTIMATION",
            "POINTMAP_ESTIMATION",
            "TEXT_RECOGNITION",
            "TABLE_RECOGNITION",
        ),
    ),
    ("seq2seq", ("SEQ_TO_SEQ_CAUSAL_LM",)),
    ("text-encoder", ("MASKED_LM", "NEXT_SENTENCE_PREDICTION")),
    ("text-decoder", ("CAUSAL_LM",)),
    (
        "text-encoder",
        (
            "SEQUENCE_CLASSIFICATION",
            "TOKEN_CLASSIFICATION",
            "QUESTION_ANSWERING",
            "MULTIPLE_CHOICE",
            "TEXT_ENCODING",
            "TABLE_QUESTION_ANSWERING",
        ),
    ),
)

# Types the rule gets wrong or cannot decide, each with why.
EXCEPTIONS: dict[str, tuple[str, str]] = {
    "decision_transformer": ("other", "states, actions and returns of reinforcement learning"),
    "esmfold2": ("other", "protein structure prediction: sequences in, 3-D coordinates out"),
    "EvollaModel": ("multimodal", "an alias key of evolla (protein structure with text)"),
    "nougat": ("multimodal", "page image to text; its config does not build (donut_swin)"),
    "rag": ("seq2seq", "a retriever feeding a seq2seq generator"),
    "colqwen2": ("multimodal", "page retrieval by a vision-language model (an AutoConfig)"),
    "vision-text-dual-encoder": ("multimodal", "an image and a text tower (AutoConfigs)"),
    "visual_bert": ("multimodal", "BERT over text and image-region features"),
    "embedding_gemma2": ("text-encoder", "a bidirectional embedding model"),
    "jev": ("text-decoder", "verbalizer heads over a text model (an AutoConfig)"),
    "muse_glimmer_assistant": ("text-decoder", "the draft model of muse_glimmer's text decoding"),
    "blip_2_qformer": ("multimodal", "queries image features with text"),
    "dia_encoder": ("audio", "the text encoder of Dia, a text-to-speech model"),
    "dia_decoder": ("audio", "the audio-code decoder of Dia, a text-to-speech model"),
    "musicgen_decoder": ("audio", "the audio-code decoder of MusicGen"),
    "musicgen_melody_decoder": ("audio", "the audio-code decoder of MusicGen Melody"),
    "moshi_depth": ("audio", "the audio-code depth decoder of Moshi"),
    "csm_depth_decoder_model": ("audio", "the audio-code depth decoder of CSM"),
    "clvp_decoder": ("audio", "the speech-code decoder of CLVP"),
    "moonshine_streaming_encoder": ("audio", "the speech encoder of Moonshine Streaming"),
    "sapiens2_head": ("vision", "a dense-prediction head on a vision backbone"),
    "uvdoc": ("vision", "document image unwarping"),
    "flava_multimodal_model": ("multimodal", "FLAVA's fusion tower over image and text"),
    "idefics_perciever": ("vision", "resamples image features for the text model"),
    "idefics2_perceiver": ("vision", "resamples image features for the text model"),
    "molmo2_adapter": ("vision", "projects image features into the text model"),
    "instructblip_qformer": ("multimodal", "queries image features with text"),
    "instructblipvideo_qformer": ("multimodal", "queries video features with text"),
    "qwen2_5_omni_dit": ("audio", "the diffusion transformer of the speech output"),
    "vibevoice_diffusion": ("audio", "the diffusion head of the speech output"),
    "blt_global_transformer": ("text-decoder", "the latent transformer of a byte-level LM"),
    "blt_local_encoder": ("text-decoder", "the causal byte encoder of a byte-level LM"),
}

# Parts of a config class's lower-cased name that name its input, checked in this order (a text
# tower's name, e.g. VideoPrismTextConfig, is not: its input is text).
_NAME_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("video", ("video",)),
    (
        "audio",
        (
            "audio",
            "speech",
            "acoustic",
            "wav",
            "codec",
            "hifigan",
            "vgan",
            "talker",
            "transcribe",
            "asr",
        ),
    ),
    ("vision", ("vision", "visual", "image", "vqvae", "vqgan", "sam", "tam", "hiera")),
)
# Fields whose presence says the input is of that kind.
_FIELDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("video", frozenset({"num_frames"})),
    ("audio", frozenset({"num_mel_bins", "sampling_rate", "upsample_rates"})),
    ("vision", frozenset({"image_size", "num_channels", "patch_size"})),
)
# Fields of a text model that generates: a KV cache, tied output embeddings, RoPE, GQA.
_DECODER_FIELDS = frozenset(
    {"use_cache", "tie_word_embeddings", "rope_parameters", "num_key_value_heads"}
)
# Fields of a text encoder: a contrastive tower's projection, BERT's segment embeddings.
_ENCODER_FIELDS = frozenset({"projection_dim", "projection_size", "type_vocab_size"})


@cache
def _task_tables() -> tuple[tuple[str, frozenset[str]], ...]:
    from transformers.models.auto import modeling_auto

    return tuple(
        (
            family,
            frozenset(
                t
                for task in tasks
                for t in getattr(modeling_auto, f"MODEL_FOR_{task}_MAPPING_NAMES", {})
            ),
        )
        for family, tasks in _TASKS
    )


def _config_class(model_type: str) -> type:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        return CONFIG_MAPPING[model_type]
    except (KeyError, ValueError):
        raise ValueError(f"unknown transformers model type: {model_type!r}") from None


def _defaults(cls: type) -> dict[str, Any]:
    """The config class's fields and their defaults (None where a factory makes them)."""
    if not dataclasses.is_dataclass(cls):
        return {}
    return {
        f.name: None if f.default is dataclasses.MISSING else f.default
        for f in dataclasses.fields(cls)
    }


def _sub_modalities(cls: type) -> list[str]:
    """The modalities of the sub-configs a config class names (an AutoConfig one is unknown until
    built, and left out)."""
    found = []
    for sub in (getattr(cls, "sub_configs", None) or {}).values():
        sub_type = getattr(sub, "model_type", "")
        if sub_type and sub is not cls:
            try:
                found.append(modality(sub_type))
            except ValueError:
                continue  # a sub-config type this transformers does not register
    return found


def _by_class(model_type: str) -> str:
    cls = _config_class(model_type)
    fields = _defaults(cls)
    name = cls.__name__.lower().removesuffix("config")
    if "prediction_length" in fields:
        return "other"
    subs = _sub_modalities(cls)
    if len(set(subs) - {"other"}) >= 2:
        return "multimodal"
    if not name.endswith(("text", "textmodel")):
        for family, parts in _NAME_PARTS:
            if any(p in name for p in parts):
                return family
        for family, names in _FIELDS:
            if names & fields.keys():
                return family
    return subs[0] if subs else _text_kind(name, fields)


def _text_kind(name: str, fields: dict[str, Any]) -> str:
    if fields.get("is_encoder_decoder"):
        return "seq2seq"
    if "vocab_size" not in fields:
        return "other"
    if _ENCODER_FIELDS & fields.keys() or "encoder" in name:
        return "text-encoder"
    return "text-decoder" if _DECODER_FIELDS & fields.keys() else "text-encoder"


@cache
def modality(model_type: str) -> str:
    """The modality of a transformers model type (one of MODALITIES), by the rule above. Raises
    ValueError for a type that transformers does not know."""
    for family, types in _task_tables():
        if model_type in types:
            return family
    if model_type in EXCEPTIONS:
        return EXCEPTIONS[model_type][0]
    return _by_class(model_type)


# -- Traits --------------------------------------------------------------------------------------

# The token mixer of a layer, from the names transformers gives layer kinds (layer_types...),
# checked in this order: "linear" is linear attention or an SSM, decided by the config's fields.
_LAYER_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hybrid", ("hybrid",)),
    ("ssm", ("mamba", "ssm")),
    ("linear", ("linear", "deltanet", "gdn", "kda", "lightning")),
    ("rnn", ("recurrent", "rwkv", "lstm", "rnn")),
    ("conv", ("conv",)),
    ("attention", ("attention", "full", "sliding", "global", "local", "lsh", "chunk", "window")),
)
_LAYER_LISTS = (
    "layer_types",
    "layers_block_type",
    "block_types",
    "attention_layers",
    "attn_layers",
)
# nemotron_h's pattern: one character per layer (M mamba, * attention; - MLP and E MoE mix no
# tokens).
_PATTERN = {"M": "ssm", "*": "attention"}
_SSM_FIELDS = ("state_size", "ssm_state_size", "mamba_d_state", "mamba_d_ssm")
_HEAD_FIELDS = (
    "num_attention_heads",
    "num_key_value_heads",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "attention_heads",
    "n_head",
    "num_heads",
    "num_self_attention_heads",
)
# Words of a config class's name that say what mixes tokens where fields cannot (RwkvConfig and
# xLSTMConfig name no state size; xLSTM's and Mamba2's num_heads are not attention heads).
_NAME_MIXERS = (("ssm", ("mamba",)), ("rnn", ("rwkv", "lstm", "recurrent")))
# lfm2_moe keeps no layer list: its short-conv cache says it has conv layers.
_CONV_LAYER_FIELDS = ("conv_L_cache",)
# Types the rule gets wrong, each with why.
MIXER_EXCEPTIONS: dict[str, tuple[str, str]] = {
    "fnet": ("conv", "mixes tokens by a Fourier transform, a global convolution"),
}
# A CNN's fields: kernel sizes, depthwise convolutions, stem channels.
_CNN_FIELD = re.compile(r"(^|_)kernel_sizes?$|depthwise|depth_multiplier|^stem_channels$")
_CROSS = re.compile(r"cross_(att|attn|layer|num|head|hidden)")


def _value(config: Any, name: str) -> Any:
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - a heterogeneous config refuses a per-layer attribute
        return vars(config).get(name)


def _set(config: Any, name: str) -> bool:
    value = _value(config, name)
    return value is not None and value is not False and value != 0 and value != []


def _tree(config: Any, depth: int = 2) -> list[Any]:
    """The config and the configs nested in it (a VLM's text and vision configs...)."""
    from transformers import PretrainedConfig

    found = [config]
    if depth:
        for value in vars(config).values():
            if isinstance(value, PretrainedConfig) and value is not config:
                found += _tree(value, depth - 1)
    return found


def _layer_kinds(config: Any) -> list[str]:
    """The mixer of each layer, where the config lists its layers' kinds; [] where it does not."""
    kinds: list[str] = []
    for name in _LAYER_LISTS:
        layers = _value(config, name)
        if isinstance(layers, (list, tuple)) and layers:
            kinds = [_kind(str(t).lower()) for t in layers]
            break
    pattern = _value(config, "hybrid_override_pattern")
    if not kinds and isinstance(pattern, str):
        kinds = [_PATTERN.get(ch, "") for ch in pattern]
    recurrent = "ssm" if any(_set(config, f) for f in _SSM_FIELDS) else "rnn"
    out = []
    for k in kinds:
        out += {"hybrid": ["attention", recurrent], "linear": [recurrent]}.get(k, [k] if k else [])
    return out


def _kind(layer: str) -> str:
    for kind, parts in _LAYER_KINDS:
        if any(p in layer for p in parts):
            return kind
    return ""  # an MLP or MoE layer: it mixes no tokens


def _mixers(config: Any) -> set[str]:
    """The kinds of token mixer one config (not its nested ones) holds."""
    name = type(config).__name__.lower()
    if listed := _layer_kinds(config):
        return set(listed)
    for kind, parts in _NAME_MIXERS:
        if any(p in name for p in parts):
            return {kind}
    found = set()
    if any(_set(config, f) for f in _SSM_FIELDS):
        found.add("ssm")
    if any(_set(config, f) for f in _CONV_LAYER_FIELDS):
        found.add("conv")
    if any(_set(config, f) for f in _HEAD_FIELDS):
        found.add("attention")
    if not found and _convolves(config):
        found.add("conv")
    return found


def _convolves(config: Any) -> bool:
    """Whether the config names convolutions: a conv field (conv_kernel, conv_dim...), a CNN's
    (kernel_sizes, depth_multiplier...), or a CNN's stages (hidden_sizes and depths)."""
    for name in vars(config):
        words = name.lower().split("_")
        named = any(w.startswith("conv") and not w.startswith("convert") for w in words)
        if (named or _CNN_FIELD.search(name)) and _set(config, name):
            return True
    return _set(config, "hidden_sizes") and _set(config, "depths")


def _mixer(configs: list[Any]) -> str:
    """attention, ssm, rnn, conv, hybrid (attention with another mixer in one stack, or an SSM or
    RNN beside attention), or unknown. A CNN beside a transformer (RT-DETR's ResNet backbone)
    stays attention: the conv trait says so."""
    per = []
    for c in configs:
        kinds = _mixers(c)
        per.append("hybrid" if len(kinds) > 1 else next(iter(kinds), ""))
    kinds = {k for k in per if k}
    if "hybrid" in kinds or (kinds & {"ssm", "rnn"} and len(kinds) > 1):
        return "hybrid"
    if kinds == {"attention", "conv"}:
        return "attention"
    return next(iter(kinds)) if len(kinds) == 1 else "unknown"


def _sliding(config: Any) -> str:
    layers = [str(t).lower() for t in _value(config, "layer_types") or []]
    attention = [t for t in layers if _kind(t) == "attention"]
    local = [t for t in attention if any(k in t for k in ("sliding", "local", "chunk", "window"))]
    if local:
        return "all" if len(local) == len(attention) else "some"
    if layers:
        return "no"  # the layer list is the truth: qwen2's sliding_window with it off
    if _set(config, "sliding_window_pattern"):
        return "some"
    if _set(config, "sliding_window") and _value(config, "use_sliding_window") is not False:
        return "all"
    return "all" if _set(config, "attention_window") else "no"


def _cross_attention(config: Any) -> bool:
    if _set(config, "is_encoder_decoder") or _set(config, "add_cross_attention"):
        return True
    return any(_CROSS.match(name) and _set(config, name) for name in vars(config))


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def extra_traits(config: Any) -> dict[str, str]:
    """The traits of a transformers config beside hf.traits, read from it and its nested configs
    without building a model: mixer (attention, ssm, rnn, conv, hybrid or unknown), mla (a
    kv_lora_rank), sliding_window (all, some or no attention layers), cross_attention, conv."""
    configs = _tree(config)
    model_type = getattr(config, "model_type", "")
    mixer = MIXER_EXCEPTIONS[model_type][0] if model_type in MIXER_EXCEPTIONS else _mixer(configs)
    slides = {_sliding(c) for c in configs}
    return {
        "mixer": mixer,
        "mla": _yes(any(_set(c, "kv_lora_rank") for c in configs)),
        "sliding_window": "some" if "some" in slides else "all" if "all" in slides else "no",
        "cross_attention": _yes(any(_cross_attention(c) for c in configs)),
        "conv": _yes(any("conv" in _mixers(c) or _convolves(c) for c in configs)),
    }
