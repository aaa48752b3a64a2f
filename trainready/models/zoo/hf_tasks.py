"""The Hugging Face task zoo: every transformers model type with a task head but no causal-LM head.

Each type is built tiny like the causal-LM zoo (`hf.shrunk_config`: the same generic shrinking,
plus `TASK_SIZES` for vision and audio sizes, backbone stages, M-RoPE sections, and `TASK_ADJUST`
per-type fixes) with the head users train most: the first of `HEADS` (a priority order over
transformers' MODEL_FOR_*_MAPPING_NAMES tables) the type has. It is fed synthetic inputs of its
modality (`hf_inputs`) and trains on a loss computed from its outputs (`task_losses`).

    model_types()              -> the task types of this transformers, sorted
    head(model_type)           -> (task, class name): the head trained
    tiny_config(model_type)    -> the shrunk config of that head's class
    build(model_type, seed=0)  -> HFTask, a TaskModel (BuildError with the reason)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainready.models.task import TaskModel, TaskOutput
from trainready.models.zoo import fixes as task_fixes
from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo.float64 import float32_as_float64, is_float64
from trainready.models.zoo.inputs import (
    AUDIO_FRAMES,
    IMAGE_SIZE,
    LAYOUTS,
    PLACEHOLDER_BASE,
    SEQ_LEN,
    VIDEO_FRAMES,
    Layout,
    applies,
    inputs,
)
from trainready.models.zoo.losses import Term, fields, labels, plan, tensors, term_loss

# The head trained, first one the type has: generation heads first (seq2seq, speech, image-text),
# then the pre-training objectives users fine-tune from (masked LM, CTC), classification, dense
# prediction, and last the headless tables (backbones, encoders), trained on their features.
HEADS: tuple[str, ...] = (
    "SEQ_TO_SEQ_CAUSAL_LM",
    "SPEECH_SEQ_2_SEQ",
    "IMAGE_TEXT_TO_TEXT",
    "MULTIMODAL_LM",
    "VISUAL_QUESTION_ANSWERING",
    "MASKED_LM",
    "CTC",
    "ZERO_SHOT_IMAGE_CLASSIFICATION",
    "IMAGE_CLASSIFICATION",
    "AUDIO_CLASSIFICATION",
    "VIDEO_CLASSIFICATION",
    "SEQUENCE_CLASSIFICATION",
    "TOKEN_CLASSIFICATION",
    "AUDIO_FRAME_CLASSIFICATION",
    "QUESTION_ANSWERING",
    "MULTIPLE_CHOICE",
    "TIME_SERIES_CLASSIFICATION",
    "TIME_SERIES_PREDICTION",
    "OBJECT_DETECTION",
    "ZERO_SHOT_OBJECT_DETECTION",
    "SEMANTIC_SEGMENTATION",
    "UNIVERSAL_SEGMENTATION",
    "INSTANCE_SEGMENTATION",
    "IMAGE_SEGMENTATION",
    "DEPTH_ESTIMATION",
    "TEXT_RECOGNITION",
    "TABLE_RECOGNITION",
    "MASKED_IMAGE_MODELING",
    "PRETRAINING",
    "TEXT_TO_SPECTROGRAM",
    "TEXT_TO_WAVEFORM",
    "RNNT",
    "TDT",
    "MASK_GENERATION",
    "KEYPOINT_DETECTION",
    "KEYPOINT_MATCHING",
    "POSE_ESTIMATION",
    "IMAGE_MATTING",
    "IMAGE_TO_IMAGE",
    "DECISION",
    "BACKBONE",
    "IMAGE",
    "TEXT_ENCODING",
)

# The modality of a head: a type's modality where the families table does not say.
HEAD_MODALITY: dict[str, str] = {
    **dict.fromkeys(("SEQ_TO_SEQ_CAUSAL_LM",), "seq2seq"),
    **dict.fromkeys(
        (
            "SPEECH_SEQ_2_SEQ",
            "CTC",
            "AUDIO_CLASSIFICATION",
            "AUDIO_FRAME_CLASSIFICATION",
            "TEXT_TO_SPECTROGRAM",
            "TEXT_TO_WAVEFORM",
            "RNNT",
            "TDT",
        ),
        "audio",
    ),
    **dict.fromkeys(
        (
            "IMAGE_TEXT_TO_TEXT",
            "MULTIMODAL_LM",
            "VISUAL_QUESTION_ANSWERING",
            "ZERO_SHOT_IMAGE_CLASSIFICATION",
            "ZERO_SHOT_OBJECT_DETECTION",
        ),
        "multimodal",
    ),
    **dict.fromkeys(
        (
            "MASKED_LM",
            "SEQUENCE_CLASSIFICATION",
            "TOKEN_CLASSIFICATION",
            "QUESTION_ANSWERING",
            "MULTIPLE_CHOICE",
            "TEXT_ENCODING",
            "PRETRAINING",
            "TIME_SERIES_CLASSIFICATION",
            "TIME_SERIES_PREDICTION",
            "DECISION",
        ),
        "text-encoder",
    ),
    "VIDEO_CLASSIFICATION": "video",
}

# Vision and audio sizes (field name -> tiny value), applied like `hf.SIZES` but only here: the
# causal-LM zoo's configs stay as they are.
TASK_SIZES: dict[str, int] = {
    "image_size": IMAGE_SIZE,
    "num_frames": VIDEO_FRAMES,
    "max_source_positions": AUDIO_FRAMES // 2,
    "num_mel_bins": 16,
    "feature_size": 16,
    "num_labels": 4,
    "num_queries": 8,
    "num_channels_out": 16,
    "projection_size": hf.HIDDEN,  # SigLIP: the text projection must meet the shrunk vision width
    "projection_dim": hf.HIDDEN,
    # Widths one sub-config must share with another's (shrunk) hidden size.
    "out_hidden_size": hf.HIDDEN,
    "text_hidden_size": hf.HIDDEN,
    "audio_hidden_size": hf.HIDDEN,
    "condition_dim": hf.HIDDEN,
    "codebook_dim": hf.HIDDEN,
    "context_length": SEQ_LEN,
    "depth": hf.LAYERS,  # a vision tower's layer count (Qwen-VL, GLM-4V: 24-32)
}
# Per-stage width lists (conv nets, hierarchical transformers): each stage cut to at most this.
STAGE_LISTS: dict[str, int] = {
    "hidden_sizes": 32,
    "embed_dims": 32,
    "embed_dim": 32,
    "conv_dim": 32,
    "widths": 32,
}
# Placeholder token ids of multimodal configs, moved into the small vocabulary.
PLACEHOLDER_IDS = (
    "image_token_id",
    "image_token_index",
    "video_token_id",
    "video_token_index",
    "audio_token_id",
    "audio_token_index",
    "boi_token_id",
    "eoi_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
)


# Fields set so: a training step must not be random (SpecAugment masking), and a backbone
# must be built from its config rather than loaded from timm or a checkpoint.
TASK_FLAGS: dict[str, Any] = {
    "mask_time_prob": 0.0,
    "mask_feature_prob": 0.0,
    "use_timm_backbone": False,
    "use_pretrained_backbone": False,
    "layerdrop": 0.0,
    # DINOv3's training-time RoPE augmentation draws a random rescale, jitter and shift every
    # forward (uniform_): float64 and float32 runs would draw different ones from one seed.
    "pos_embed_rescale": None,
    "pos_embed_jitter": None,
    "pos_embed_shift": None,
}


# A timm backbone (DETR family's default resnet50) needs timm and torchvision: the transformers
# ResNet, the same architecture, built tiny (basic blocks, one per stage) takes its place.
NATIVE_RESNET = {
    "model_type": "resnet",
    "embedding_size": 16,
    "hidden_sizes": [16, 32, 64, 128],
    "depths": [1, 1, 1, 1],
    "layer_type": "basic",
}


def _task_shrink(d: dict[str, Any]) -> None:
    """The task-only shrinking, in place (nested sub-configs too)."""
    for key, value in list(d.items()):
        if isinstance(value, dict) and value.get("model_type") == "timm_backbone":
            d[key] = value = {**NATIVE_RESNET, "out_indices": value.get("out_indices") or [4]}
        if key in TASK_FLAGS:
            d[key] = TASK_FLAGS[key]
            continue
        if isinstance(value, bool):
            continue
        if key in TASK_SIZES and isinstance(value, int) and value > TASK_SIZES[key]:
            d[key] = TASK_SIZES[key]
        elif key == "image_size" and isinstance(value, list) and max(value) > IMAGE_SIZE:
            d[key] = [IMAGE_SIZE] * len(value)  # (height, width)
        elif (
            key in STAGE_LISTS
            and isinstance(value, list)
            and all(isinstance(v, int) for v in value)
        ):
            d[key] = [min(v, STAGE_LISTS[key] * 2**i) for i, v in enumerate(value)]
        elif key in STAGE_LISTS and isinstance(value, int) and value > STAGE_LISTS[key]:
            d[key] = STAGE_LISTS[key] * 2
        elif key in PLACEHOLDER_IDS and isinstance(value, int) and value >= hf.VOCAB_SIZE:
            d[key] = PLACEHOLDER_BASE + PLACEHOLDER_IDS.index(key) // 2
        elif key in ("num_heads", "num_attention_heads") and isinstance(value, list):
            d[key] = [2**i for i in range(len(value))]  # divides every stage's width
        elif key == "depths" and isinstance(value, list):
            d[key] = [min(v, 1) for v in value]
        elif isinstance(value, dict):
            _task_shrink(value)
    _out_stages(d)
    _mrope(d)
    if "image_size" in d and isinstance(d.get("window_size"), int) and d["window_size"] > 4:
        d["window_size"] = 4  # a vision window that tiles the small image's patch grid


def _mrope(d: dict[str, Any]) -> None:
    """Multimodal RoPE sections (time, height, width) rescaled to sum to half the rotary dim."""
    rope = d.get("rope_parameters")
    sections = rope.get("mrope_section") if isinstance(rope, dict) else None
    if not isinstance(sections, list) or not sections:
        return
    heads = d.get("num_attention_heads") or hf.HEADS
    head = (
        d.get("qk_rope_head_dim") or d.get("head_dim") or d.get("hidden_size", hf.HIDDEN) // heads
    )
    partial = rope.get("partial_rotary_factor") or d.get("partial_rotary_factor") or 1.0
    half = int(head * partial) // 2
    scaled = [max(1, v * half // sum(sections)) for v in sections]
    scaled[0] += half - sum(scaled)
    rope["mrope_section"] = scaled


def _out_stages(d: dict[str, Any]) -> None:
    """A backbone's output stages renamed to the last ones the shrunk config has, as many as it
    asked for (a head may need them all): stages are added (per-stage lists extended by their
    last entry, or layers) where fewer remain."""
    names, indices = d.get("out_features"), d.get("out_indices")
    wanted = len(names) if isinstance(names, list) else len(indices or [])
    if not wanted:
        return
    if isinstance(d.get("depths"), list):
        n = len(d["depths"])
        for key, value in list(d.items()):
            if isinstance(value, list) and len(value) == n and key not in _OUT_KEYS:
                d[key] = value + value[-1:] * (wanted - n)
        n = max(n, wanted)
    elif isinstance(d.get("num_hidden_layers"), int):
        n = d["num_hidden_layers"] = max(d["num_hidden_layers"], wanted)
    else:
        return
    stages = range(n - wanted + 1, n + 1)
    d["out_features"] = [f"stage{i}" for i in stages]
    # An index counts the stem first, unless the config's stage names have none (PVTv2).
    names = d.get("stage_names")
    stem = not (isinstance(names, list) and names and names[0] != "stem")
    d["out_indices"] = [i if stem else i - 1 for i in stages]
    if isinstance(names, list):
        d["stage_names"] = ["stem"] * stem + [f"stage{i}" for i in range(1, n + 1)]


_OUT_KEYS = ("out_features", "out_indices")


def _mrope_sections(d: dict[str, Any]) -> None:
    """Qwen2-VL's and GLM-4V's text configs leave their M-RoPE sections to the modeling code's
    default ([16, 24, 24] or [8, 12, 12], for the full head): name them for the shrunk head."""
    text = d.get("vlm_config", d)
    text = text.get("text_config", text)
    text["rope_parameters"] = {**(text.get("rope_parameters") or {}), "mrope_section": [16, 24, 24]}
    _mrope(text)


# Per-type fixes after the generic shrink (the reason with each).
TASK_ADJUST: dict[str, Callable[[dict[str, Any]], None]] = {
    **dict.fromkeys(
        ("qwen2_vl", "colqwen2", "glm4v", "glm46v", "glm4v_moe", "glm_ocr", "glmga"),
        _mrope_sections,
    ),
    # VITS's flows and HiFi-GAN vocoder keep their full widths (16M parameters; a parity case
    # ran over 25 minutes): the generic shrink has no rule for their fields.
    "vits": hf._set(
        flow_size=32,
        spectrogram_bins=33,
        upsample_initial_channel=32,
        duration_predictor_filter_channels=32,
        prior_encoder_num_flows=2,
        posterior_encoder_num_wavenet_layers=2,
        duration_predictor_num_flows=2,
    ),
}

# Types that cannot be trained tiny here: the reason (per-family ones in `task_fixes`).
UNSUPPORTED: dict[str, str] = {**task_fixes.UNSUPPORTED}


# --- the head -------------------------------------------------------------------------------------


def _tables() -> dict[str, dict[str, str]]:
    from transformers.models.auto import modeling_auto

    return {t: getattr(modeling_auto, f"MODEL_FOR_{t}_MAPPING_NAMES", {}) for t in HEADS}


def model_types() -> list[str]:
    """Every type with a task head and no causal-LM head (those are `hf`'s)."""
    causal = set(hf.model_types())
    return sorted({t for table in _tables().values() for t in table} - causal)


def head(model_type: str) -> tuple[str, str]:
    """(task, class name) of the head trained: the first of HEADS the type has (or the one
    `task_fixes.HEAD` names)."""
    tables = _tables()
    if model_type in task_fixes.HEAD:
        tables = {task_fixes.HEAD[model_type]: tables[task_fixes.HEAD[model_type]]}
    for task, table in tables.items():
        name = table.get(model_type)
        if isinstance(name, (tuple, list)):
            name = name[0]
        if name:
            return task, name
    raise hf.BuildError(f"{model_type!r} has no task head in this transformers")


def head_modality(model_type: str) -> str:
    """The modality of the type's head (`HEAD_MODALITY`, vision for the rest)."""
    task, _ = head(model_type)
    return HEAD_MODALITY.get(task, "vision")


def tiny_config(model_type: str) -> Any:
    """The shrunk config of the type's head class (BuildError with the reason)."""
    _, name = head(model_type)
    cls = hf.import_class(name).config_class
    fix = TASK_ADJUST.get(model_type) or task_fixes.ADJUST.get(model_type)

    def adjust(d: dict[str, Any]) -> None:
        if "vocab_size" in d and d["vocab_size"] is None:
            d["vocab_size"] = hf.VOCAB_SIZE  # a CTC head's vocabulary, left to the tokenizer
        _task_shrink(d)
        if fix is not None:
            fix(d)

    return hf.shrunk_config(cls, adjust)


class HFTask(TaskModel):
    """A transformers model with its task head, trained on fixed synthetic inputs."""

    def __init__(
        self,
        model: nn.Module,
        model_type: str,
        task: str,
        terms: list[Term],
        blank: int,
        layout: Layout = LAYOUTS[0],
        text_only_reason: str | None = None,
    ):
        super().__init__()
        self.model = model
        self.model_type, self.task = model_type, task
        self.terms = terms
        self.blank = blank
        # A multimodal LM fed its text alone (its vision tower untrained): why.
        self.layout, self.text_only_reason = layout, text_only_reason
        self.finite: dict[str, torch.Tensor] = {}  # see task_losses.labels
        self.traits = hf.traits(model.config)
        self.modality = head_modality(model_type)

    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed + 1)
        batch = _inputs(self.model, self.model_type, self.task, seed, self.layout)
        return {**batch, **labels(self.terms, gen, self.blank, self.finite)}

    def forward(self, **batch: torch.Tensor) -> TaskOutput:  # type: ignore[override]
        given = {k: v for k, v in batch.items() if not k.startswith("label:")}
        # The float64 reference stays float64 through the model's float32 casts and dtype-less
        # constants (`models/zoo/float64.py`), as in the diffusers and timm zoos.
        with float32_as_float64(is_float64(self.model)):
            out = _fields(self.model(**given))
        losses = [
            term_loss(t, out[t.field], batch.get(f"label:{t.field}"), self.blank)
            for t in self.terms
        ]
        return TaskOutput(sum(losses), tensors(out[self.terms[0].field])[0])


def _fields(out: Any) -> dict[str, Any]:
    """The output's fields; a logit at its dtype's lowest value is a masked class (Chameleon masks
    its image-code logits so, and float32's lowest is not float64's): made -inf, so it is never a
    label and compares as masked."""
    found = fields(out)
    for k, v in found.items():
        if "logits" in k and isinstance(v, torch.Tensor) and v.is_floating_point():
            found[k] = v.masked_fill(v == torch.finfo(v.dtype).min, float("-inf"))
    return found


def _inputs(
    model: nn.Module, model_type: str, task: str, seed: int, layout: Layout
) -> dict[str, torch.Tensor]:
    """The modality's synthetic inputs, then the type's own (`task_fixes.INPUTS`)."""
    batch = inputs(model, model.config, task, seed, layout)
    fix = task_fixes.INPUTS.get(model_type)
    if fix is not None:
        batch = fix(model, model.config, torch.Generator().manual_seed(seed + 2), batch)
    return batch


def build(model_type: str, seed: int = 0, config: Any = None) -> HFTask:
    """The tiny model with its head and seeded random weights, in float32 on the CPU; BuildError
    with the reason when it cannot be built or run."""
    if model_type in UNSUPPORTED:
        raise hf.BuildError(UNSUPPORTED[model_type])
    task, name = head(model_type)
    config = config if config is not None else tiny_config(model_type)
    config._attn_implementation = task_fixes.ATTENTION.get(model_type, "eager")
    config._experts_implementation = "eager"
    torch.manual_seed(seed)
    with hf.quiet():
        try:
            model = hf.import_class(name)(config).float()
        except Exception as e:  # noqa: BLE001 - any failure to construct is the finding
            raise hf.BuildError(f"{name} does not build: {hf.one_line(e)}") from e
    model.train()
    blank = int(getattr(config, "pad_token_id", 0) or 0)
    out, layout, errors = None, None, []
    for candidate in LAYOUTS:
        if not applies(candidate, model, task):
            continue
        with torch.no_grad(), hf.quiet():
            try:
                out = model(**_inputs(model, model_type, task, 0, candidate))
            except Exception as e:  # noqa: BLE001 - the synthetic inputs do not fit this model
                errors.append(hf.one_line(e))
                continue
        layout = candidate
        break
    if layout is None:
        raise hf.BuildError(f"{name} forward on synthetic inputs: {errors[0]}")
    why = None if layout.images else errors[0]  # the image layout first tried
    task_model = HFTask(model, model_type, task, plan(out, task), blank, layout, why)
    outputs = _fields(out)
    for t in task_model.terms:
        value = outputs[t.field]
        if t.kind == "ce" and not value.isfinite().all():
            task_model.finite[t.field] = value.isfinite()
    return task_model
