"""Synthetic inputs for a transformers model with a task head, by its modality.

The inputs are chosen from the model's own `main_input_name` and forward signature: token ids and
attention masks, pixel values, raw audio or audio features, video frames, a time series, decoder
ids. Where models of one modality differ in layout, `Layout`s are tried in order (`LAYOUTS`) and
the first the model runs with is kept: audio features either way round; a multimodal LM's image
with as many placeholder tokens as its vision tower yields features (with each image's size,
or as a list of images; a video LM's frames with video placeholders; a Q-Former's text prompt
beside them), else pixels beside the text, else its text alone. A model in the image-text table
with no visual feature method (a text-only LM, or one a `fixes` INPUTS entry lays out) gets
its pixels beside the text from the first layout.

    inputs(model, config, task, seed, layout) -> {name: CPU tensor}, floating ones float32
    applies(layout, model, task)              -> whether trying that layout changes anything
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo.losses import tensors

BATCH = 2
SEQ_LEN = 16
IMAGE_SIZE = 64
AUDIO_SAMPLES = 3200  # 0.2 s at 16 kHz: ~10 frames after a wav2vec2 feature encoder
AUDIO_FRAMES = 32  # frames of precomputed audio features (mel bins x frames)
VIDEO_FRAMES = 4
PLACEHOLDER_BASE = 500  # multimodal placeholder ids sit at 500..; random text stays below

# Task groups that change the inputs.
IMAGE_TEXT = ("IMAGE_TEXT_TO_TEXT", "MULTIMODAL_LM", "VISUAL_QUESTION_ANSWERING")
_VIDEO = ("VIDEO_CLASSIFICATION",)
_TEXT_AND_IMAGE = ("ZERO_SHOT_IMAGE_CLASSIFICATION", "ZERO_SHOT_OBJECT_DETECTION")


def _vision(config: Any) -> Any:
    return getattr(config, "vision_config", None) or config


def _vocab(model: nn.Module, config: Any) -> int:
    try:
        emb = model.get_input_embeddings()
        if isinstance(emb, nn.Embedding):
            return int(emb.num_embeddings)
    except Exception:  # noqa: BLE001 - a model without token embeddings
        pass
    return int(getattr(hf.text_config(config), "vocab_size", None) or hf.VOCAB_SIZE)


def _ids(gen: torch.Generator, vocab: int, *shape: int) -> torch.Tensor:
    # Ids from 3 up: clear of pad, bos and eos, and below the placeholders.
    return torch.randint(3, max(4, min(vocab, PLACEHOLDER_BASE)), shape, generator=gen)


def _pixels(gen: torch.Generator, config: Any, *frames: int) -> torch.Tensor:
    """[B, (frames,) C, H, W] pixel values at the vision config's size."""
    v = _vision(config)
    size = getattr(v, "image_size", IMAGE_SIZE)
    h, w = (size, size) if isinstance(size, int) else tuple(size)[:2]
    return torch.randn(BATCH, *frames, getattr(v, "num_channels", 3), h, w, generator=gen)


def inputs(
    model: nn.Module, config: Any, task: str, seed: int, layout: Layout | None = None
) -> dict[str, torch.Tensor]:
    """Synthetic inputs of the model's modality, by its main input and forward signature, in
    `layout` (the first of `LAYOUTS` the model runs with)."""
    layout = layout or LAYOUTS[0]
    gen = torch.Generator().manual_seed(seed)
    sig = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    vocab = _vocab(model, config)
    batch: dict[str, torch.Tensor] = {}
    if main == "input_values":
        batch["input_values"] = torch.randn(BATCH, AUDIO_SAMPLES, generator=gen)
    elif main == "input_features":
        bins = _find(config, *_BINS) or 16
        shape = (BATCH, AUDIO_FRAMES, bins) if layout.features_last else (BATCH, bins, AUDIO_FRAMES)
        batch["input_features"] = torch.randn(*shape, generator=gen)
    elif main == "pixel_values_videos" or (main == "pixel_values" and task in _VIDEO):
        frames = _pixels(gen, config, getattr(config, "num_frames", VIDEO_FRAMES))
        batch[main] = frames
    elif main == "pixel_values" or (task in _TEXT_AND_IMAGE and "pixel_values" in sig):
        batch["pixel_values"] = _pixels(gen, config)
    elif main == "past_values":  # a time series: [B, context, channels]
        channels = getattr(config, "num_input_channels", 1)
        context = getattr(config, "context_length", SEQ_LEN)
        batch["past_values"] = torch.randn(BATCH, context, channels, generator=gen)
    if task in IMAGE_TEXT and layout.images and layout.placeholders and _encoder(model):
        return _image_text(model, config, gen, vocab, layout)
    if task in IMAGE_TEXT and layout.images and "pixel_values" in sig:
        batch["pixel_values"] = _pixels(gen, config)
    if "qformer_input_ids" in sig:  # a Q-Former's text prompt (InstructBLIP)
        batch |= _qformer_prompt(config, gen)
    if "input_ids" in sig and (main == "input_ids" or task in _TEXT_AND_IMAGE + IMAGE_TEXT):
        if task == "MULTIPLE_CHOICE":
            batch["input_ids"] = _ids(gen, vocab, BATCH, 2, SEQ_LEN)
        else:
            batch["input_ids"] = _ids(gen, vocab, BATCH, SEQ_LEN)
        if "attention_mask" in sig:
            batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    if "decoder_input_ids" in sig and task in (
        "SEQ_TO_SEQ_CAUSAL_LM",
        "SPEECH_SEQ_2_SEQ",
        *IMAGE_TEXT,
    ):
        batch["decoder_input_ids"] = _ids(gen, vocab, BATCH, SEQ_LEN)
    return batch


@dataclass(frozen=True)
class Layout:
    """How inputs are laid out where models of one modality differ."""

    features_last: bool = False  # audio features [B, frames, bins] rather than [B, bins, frames]
    images: bool = True  # a multimodal LM gets images (else its text alone, said so)
    image_list: bool = False  # pixel values [B, images, C, H, W] (Idefics style)
    placeholders: bool = True  # image placeholder tokens in the text (else pixels and text apart)
    image_sizes: bool = False  # each image's (height, width) given too (LLaVA-NeXT)


# Tried in order; the first the model runs with is its layout.
LAYOUTS = (
    Layout(),
    Layout(features_last=True),
    Layout(image_sizes=True),
    Layout(image_list=True),
    Layout(placeholders=False),
    Layout(images=False),
)
_BINS = ("num_mel_bins", "feature_size", "input_feat_per_channel", "n_mels", "num_mel_filters")


def _find(config: Any, *names: str) -> Any:
    """The first of `names` set in the config or its sub-configs (breadth first)."""
    queue = [config]
    while queue:
        c = queue.pop(0)
        for name in names:
            value = getattr(c, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        queue += [v for v in vars(c).values() if hasattr(v, "to_dict") and v is not c]
    return None


def _encoder(model: nn.Module) -> Callable[..., Any] | None:
    """The model's visual feature method: an image LM's, else a video LM's (InstructBLIP-Video:
    its pixels are frames), on the head model or, where only its base model has one
    (PerceptionLM), there; None for a model that takes no images (a text-only LM in the table)."""
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    for name in ("get_image_features", "get_video_features"):
        for owner in (model, base):
            if callable(method := getattr(owner, name, None)):
                return method
    return None


def _placeholder(config: Any, video: bool = False) -> int:
    kind = "video" if video else "image"
    for key in (f"{kind}_token_id", f"{kind}_token_index"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise ValueError(f"the config names no {kind} token id")


def _qformer_prompt(config: Any, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The text prompt a Q-Former reads beside the image (InstructBLIP's instruction), in the
    Q-Former's own vocabulary."""
    qformer = getattr(config, "qformer_config", None)
    vocab = int(getattr(qformer, "vocab_size", None) or hf.VOCAB_SIZE)
    ids = _ids(gen, vocab, BATCH, SEQ_LEN // 2)
    return {"qformer_input_ids": ids, "qformer_attention_mask": torch.ones_like(ids)}


def _image_text(
    model: nn.Module, config: Any, gen: torch.Generator, vocab: int, layout: Layout
) -> dict[str, torch.Tensor]:
    """A multimodal LM's inputs: one image per sample, then as many image placeholder tokens as
    the model's vision tower yields features for it, then text. Patch-sequence towers (Qwen-VL
    style, `image_grid_thw`) get a 4 x 4 grid of flattened patches."""
    sig = inspect.signature(model.forward).parameters
    encoder = _encoder(model)
    video = encoder.__name__ == "get_video_features"
    batch: dict[str, torch.Tensor] = {}
    if "image_grid_thw" in sig:
        v = _vision(config)
        merge = getattr(v, "spatial_merge_size", 2)
        side = 2 * merge
        patch = getattr(v, "patch_size", 14)
        temporal = getattr(v, "temporal_patch_size", 1)
        width = getattr(v, "in_channels", getattr(v, "num_channels", 3)) * temporal * patch**2
        batch["image_grid_thw"] = torch.tensor([[1, side, side]] * BATCH)
        batch["pixel_values"] = torch.randn(BATCH * side * side, width, generator=gen)
    elif video:
        batch["pixel_values"] = _pixels(gen, config, getattr(config, "num_frames", VIDEO_FRAMES))
    else:
        batch["pixel_values"] = _pixels(gen, config)
        if layout.image_list:
            batch["pixel_values"] = batch["pixel_values"].unsqueeze(1)
        if layout.image_sizes:
            h, w = batch["pixel_values"].shape[-2:]
            batch["image_sizes"] = torch.tensor([[h, w]] * BATCH)
    if "qformer_input_ids" in inspect.signature(encoder).parameters:
        batch |= _qformer_prompt(config, gen)  # the Q-Former reads it with the image
    with torch.no_grad():
        feats = encoder(**batch)
    rows = _feature_rows(feats)
    if rows % BATCH:
        raise ValueError(f"{rows} image features do not split over {BATCH} images")
    token = _placeholder(config, video)
    image = torch.full((BATCH, rows // BATCH), token)
    ids = torch.cat([image, _ids(gen, vocab, BATCH, SEQ_LEN)], dim=1)
    batch |= {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "mm_token_type_ids" in sig:  # which tokens are image placeholders (M-RoPE positions)
        batch["mm_token_type_ids"] = (ids == token).long()
    return batch


def _feature_rows(feats: Any) -> int:
    """How many feature vectors (rows of the last dimension) a vision tower's output holds."""
    if not isinstance(feats, (torch.Tensor, list, tuple)):
        pooled = getattr(feats, "pooler_output", None)
        feats = pooled if pooled is not None else feats[0]
    return sum(t.numel() // t.shape[-1] for t in tensors(feats))


def applies(layout: Layout, model: nn.Module, task: str) -> bool:
    """Whether a layout changes anything for this model (others are not tried)."""
    if layout.features_last:
        return getattr(model, "main_input_name", "") == "input_features"
    if layout.image_sizes:
        return task in IMAGE_TEXT and "image_sizes" in inspect.signature(model.forward).parameters
    if layout.image_list or not layout.images or not layout.placeholders:
        return task in IMAGE_TEXT
    return True
