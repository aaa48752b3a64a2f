"""Text and document encoders that need inputs of their own (boxes, visual features), and configs a validator rejects or that do not build tiny.

See `task_fixes/__init__.py` for the tables' contract; each entry says why it is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo.inputs import BATCH, IMAGE_SIZE, PLACEHOLDER_BASE, SEQ_LEN


def _boxes(gen: torch.Generator, batch: int, length: int, scale: int) -> torch.Tensor:
    """[batch, length, 4] boxes (x0, y0, x1, y1) with x0 <= x1 and y0 <= y1, in 0..scale: what
    an OCR engine's word boxes become after a processor normalizes them to the page."""
    corners = torch.randint(0, scale + 1, (batch, length, 2, 2), generator=gen)
    low, high = corners.min(dim=2).values, corners.max(dim=2).values  # [B, L, (x, y)]
    return torch.cat([low, high], dim=-1)


def _length(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["input_ids"].shape[-1])


def _int_boxes(model: nn.Module, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # LayoutLM-style: integer word boxes normalized to 0..1000 (their 2-D position embeddings).
    return {**batch, "bbox": _boxes(gen, BATCH, _length(batch), 1000)}


def _bros(model: nn.Module, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # BROS reads word boxes normalized to the page, floats in 0..1 (its data pipeline divides by
    # the page's width and height; the model scales them by `bbox_scale`, 100, into its
    # sinusoidal 2-D embedding).
    return {**batch, "bbox": _boxes(gen, BATCH, _length(batch), 1000).float() / 1000}


def _layoutlmv3(model: nn.Module, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # Word boxes in 0..1000 and the page image at the config's `input_size` (its patch grid).
    size = config.input_size
    pixels = torch.randn(BATCH, config.num_channels, size, size, generator=gen)
    return {**_int_boxes(model, config, gen, batch), "pixel_values": pixels}


def _lxmert(model: nn.Module, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # LXMERT reads an object detector's region features and their boxes (normalized 0..1).
    regions = 8
    feats = torch.randn(BATCH, regions, config.visual_feat_dim, generator=gen)
    pos = _boxes(gen, BATCH, regions, 1000).float() / 1000
    return {**batch, "visual_feats": feats, "visual_pos": pos}


def _siglip2(model: nn.Module, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # SigLIP 2 (NaFlex) takes an image as its flattened patches, [B, patches, C * p * p], with
    # the patch grid of each image and which patches are real (its processor's output).
    v = config.vision_config
    side = IMAGE_SIZE // v.patch_size
    width = v.num_channels * v.patch_size**2
    return {
        **batch,
        "pixel_values": torch.randn(BATCH, side * side, width, generator=gen),
        "pixel_attention_mask": torch.ones(BATCH, side * side, dtype=torch.long),
        "spatial_shapes": torch.tensor([[side, side]] * BATCH),
    }


def _prompts(gen: torch.Generator, rows: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CLIP-tokenized prompts: random words, then the end-of-text token (the vocabulary's
    largest id, where CLIP's text tower pools), then padding."""
    ids = torch.zeros(rows, SEQ_LEN, dtype=torch.long)
    mask = torch.zeros(rows, SEQ_LEN, dtype=torch.long)
    for r in range(rows):
        n = int(torch.randint(2, SEQ_LEN - 1, (1,), generator=gen))
        ids[r, :n] = torch.randint(3, PLACEHOLDER_BASE, (n,), generator=gen)
        ids[r, n] = vocab - 1
        mask[r, : n + 1] = 1
    return ids, mask


def _omdet_turbo(model: nn.Module, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # OmDet-Turbo detects the classes it is prompted with: per image a task prompt ("Detect cat,
    # remote.") and the class names, flattened, with how many classes each image has.
    per_image = 3
    vocab = config.text_config.vocab_size
    classes, classes_mask = _prompts(gen, BATCH * per_image, vocab)
    tasks, tasks_mask = _prompts(gen, BATCH, vocab)
    return {
        **batch,
        "classes_input_ids": classes,
        "classes_attention_mask": classes_mask,
        "tasks_input_ids": tasks,
        "tasks_attention_mask": tasks_mask,
        "classes_structure": torch.full((BATCH,), per_image, dtype=torch.long),
    }


def _molmo2(model: nn.Module, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # What Molmo2's image processor gives for an image of exactly one crop (its processor needs
    # torchvision to resize, not installed here): each image's low-resolution view and its one
    # crop as flattened patches, which patches each image token pools (2 x 2 windows, indices
    # into the batch's patches), each view's token grid, and in the text each view's <im_patch>
    # tokens between its start and end tokens, all of them image tokens in `mm_token_type_ids`
    # (1; text 0), which the model needs to train (bidirectional attention within an image).
    from transformers.models.molmo2.image_processing_molmo2 import arange_for_pooling

    v = config.vision_config
    side = _MOLMO2_CROP // v.patch_size
    per_crop = side * side
    pool, rows, cols = arange_for_pooling(torch.arange(per_crop).reshape(side, side), 2, 2)
    views = 2  # the low-resolution view, then the crop
    pooling = [
        torch.cat([pool + (i * views + view) * per_crop for view in range(views)])
        for i in range(BATCH)
    ]
    width = v.num_channels * v.patch_size**2
    tokens = [config.low_res_image_start_token_id] + [config.image_patch_id] * (rows * cols)
    tokens += [config.image_end_token_id, config.image_start_token_id]
    tokens += [config.image_patch_id] * (rows * cols) + [config.image_end_token_id]
    image = torch.tensor([tokens] * BATCH)
    ids = torch.cat([image, batch["input_ids"]], dim=1)
    kinds = torch.cat([torch.ones_like(image), torch.zeros_like(batch["input_ids"])], dim=1)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": kinds,
        "pixel_values": torch.randn(BATCH * views, per_crop, width, generator=gen),
        "image_token_pooling": torch.cat(pooling),
        "image_grids": torch.tensor([[rows, cols, rows, cols]] * BATCH),
        "image_num_crops": torch.full((BATCH,), views),
    }


def _jev(model: nn.Module, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # JEV decides one prompt at a time: the prompt's ids [1, L], the position of each question's
    # `<|mark|>` token, its number of options and its type (index into noul/choice/score).
    ids = batch["input_ids"][:1]
    marks = torch.tensor([[SEQ_LEN // 2, SEQ_LEN - 1]])
    return {
        "input_ids": ids,
        "marks": marks,
        "num_options": torch.tensor([[2, 4]]),
        "question_type_ids": torch.tensor([[0, 1]]),  # a true/false, then a 4-way choice
    }


def _align_config(d: dict[str, Any]) -> None:
    # ALIGN's image embedding is its EfficientNet's last block, `round_filters(out_channels[-1])`
    # wide (640 for B7); the text projection must meet it. A narrower, shallower EfficientNet.
    from transformers.models.align.modeling_align import round_filters

    v = d["vision_config"]
    v.update(width_coefficient=0.25, depth_coefficient=1.0)
    d["projection_dim"] = round_filters(SimpleNamespace(**v), v["out_channels"][-1])


def _lilt_config(d: dict[str, Any]) -> None:
    # LiLT splits its layout embedding into 6 equal parts (4 coordinates, height, width) and
    # shrinks the layout stream by `channel_shrink_ratio` (4) per head: a width divisible by both.
    d["hidden_size"] = 48


def _layoutlmv3_config(d: dict[str, Any]) -> None:
    # 4 coordinate and 2 shape embeddings concatenate to the hidden size (128 * 6 = 768), and the
    # page image is `input_size` square (224) in `patch_size` patches: both at the tiny sizes.
    d.update(hidden_size=48, coordinate_size=8, shape_size=8, input_size=IMAGE_SIZE)


def _lxmert_config(d: dict[str, Any]) -> None:
    # Language, cross-modality and object-relationship encoders (9, 5, 5 layers), the detector
    # feature width (2048) and the VQA answer vocabulary (9500), tiny.
    d.update(l_layers=2, x_layers=1, r_layers=1, visual_feat_dim=hf.HIDDEN, num_qa_labels=16)


def _apertus1p5_config(d: dict[str, Any]) -> None:
    # Images become tokens: the vision tokenizer's codebook maps to ids from `image_token_offset`,
    # the audio codebook's right after, all inside the vocabulary. Tiny codebooks placed above the
    # text ids (random text stays below 500), and a small IBQ encoder at the tiny image size.
    d["vision_config"].update(
        codebook_size=64,
        base_channels=32,  # its GroupNorms have 32 groups
        latent_channels=32,
        num_res_blocks=1,
        resolution=IMAGE_SIZE,
    )
    d["audio_config"]["codebook_size"] = 64
    d["text_config"]["vocab_size"] = 512 + 128
    d.update(image_token_offset=512, audio_token_offset=512 + 64)


def _glm5_next_config(d: dict[str, Any]) -> None:
    # The sparse indexer selects `index_topk` keys in pools of `index_kpool`: a pool size that
    # divides the shrunk top-k (8).
    d["text_config"]["index_kpool"] = 4


_MOLMO2_CROP = 56  # 4 x 4 patches of 14


def _molmo2_config(d: dict[str, Any]) -> None:
    # The adapter concatenates the features of ViT layers [24, 18]: the last and an earlier layer
    # of the 2-layer tiny ViT. Its position embeddings cover one crop's patches (27 x 27 for
    # 378-pixel crops): 4 x 4 for the tiny crop. The image tokens (<im_start>, <im_patch>...)
    # move into the tiny vocabulary, above the random text.
    d["adapter_config"]["vision_feature_layer"] = [1, 0]
    v = d["vision_config"]
    v["image_size"] = [_MOLMO2_CROP, _MOLMO2_CROP]
    v["num_position_embeddings"] = (_MOLMO2_CROP // v["patch_size"]) ** 2
    names = ("image_start_token_id", "low_res_image_start_token_id", "image_end_token_id")
    names += ("image_patch_id", "frame_start_token_id", "frame_end_token_id")
    d.update({name: PLACEHOLDER_BASE + i for i, name in enumerate(names)})


def _siglip2_config(d: dict[str, Any]) -> None:
    # The position-embedding grid (16 x 16 patches) at the tiny image's 4 x 4 patches.
    d["vision_config"]["num_patches"] = (IMAGE_SIZE // d["vision_config"]["patch_size"]) ** 2


def _omdet_turbo_config(d: dict[str, Any]) -> None:
    # Widths of one sub-module that must meet another's: class embeddings are the CLIP text
    # width (512 in the checkpoint), the encoder reads the backbone's stage widths, and the
    # encoder, decoder and vision features share a narrower width (256) -- it must differ from
    # the class width: the decoder projects task features only when they do.
    # The layer norms after the backbone are for timm Swin's channels-last feature maps; the
    # native backbone that replaces it gives normalized channels-first maps.
    d["apply_layernorm_after_vision_backbone"] = False
    text = d["text_config"]["hidden_size"]
    stages = d["backbone_config"]["hidden_sizes"][-len(d["encoder_in_channels"]) :]
    width = text // 2
    d.update(
        text_projection_in_dim=text,
        text_projection_out_dim=text,
        class_embed_dim=text,
        task_encoder_hidden_dim=2 * text,
        encoder_in_channels=stages,
        d_model=width,
        vision_features_channels=[width] * len(stages),
        encoder_dim_feedforward=2 * width,
        decoder_hidden_dim=width,
        decoder_num_heads=hf.HEADS,
        decoder_num_layers=hf.LAYERS,
        decoder_dim_feedforward=2 * width,
    )


def _jev_config(d: dict[str, Any]) -> None:
    # The decision head reads the text model's last hidden state: its width.
    d["hidden_size"] = d["text_config"]["hidden_size"]


def _bros_config(d: dict[str, Any]) -> None:
    # BROS derives its box-embedding widths from the hidden size (`__post_init__`); the full
    # config's values (192, 24, 64 for 768) are dropped so the tiny one derives its own.
    for key in ("dim_bbox_sinusoid_emb_2d", "dim_bbox_sinusoid_emb_1d", "dim_bbox_projection"):
        d.pop(key, None)


ADJUST: dict[str, Callable[[dict[str, Any]], None]] = {
    "align": _align_config,
    "bros": _bros_config,
    "apertus1p5": _apertus1p5_config,
    # DiffusionGemma's text layers always hold a router and experts (Gemma 4 MoE); the config
    # leaves their counts to the checkpoint.
    "diffusion_gemma": lambda d: d["text_config"].update(
        num_experts=hf.EXPERTS, top_k_experts=hf.TOP_K, moe_intermediate_size=hf.HIDDEN
    ),
    # ESM's tokenizer: <cls> 0, <pad> 1, <eos> 2, <mask> 32; the model masks padding by id.
    "esm": hf._set(pad_token_id=1, mask_token_id=32),
    # ESM C has no grouped-query attention: as many key-value heads as heads.
    "esmc": lambda d: d.update(num_key_value_heads=d["num_attention_heads"]),
    "glm5_next": _glm5_next_config,
    "jev": _jev_config,
    "layoutlmv3": _layoutlmv3_config,
    "lilt": _lilt_config,
    "lxmert": _lxmert_config,
    "molmo2": _molmo2_config,
    "omdet-turbo": _omdet_turbo_config,
    "siglip2": _siglip2_config,
}
INPUTS: dict[str, Callable[..., dict[str, Any]]] = {
    "bros": _bros,
    "jev": _jev,
    "layoutlmv3": _layoutlmv3,
    "lilt": _int_boxes,
    "lxmert": _lxmert,
    "molmo2": _molmo2,
    "omdet-turbo": _omdet_turbo,
    "siglip2": _siglip2,
}
HEAD: dict[str, str] = {}
UNSUPPORTED: dict[str, str] = {
    # Its config and prompts above are in place (it runs once, fp32); what stops it is the cache.
    "omdet-turbo": (
        "OmDet-Turbo caches its text tower's class and task embeddings on the model, keyed by token "
        "ids (`language_cache_class`/`language_cache_prompt`, an LRU of `cache_size` >= 1; 0 fails "
        "in its `put`): a second step on the same prompts reuses the first step's tensors, and its "
        "backward raises 'Trying to backward through the graph a second time' (and the copies "
        "the parity runs train start with the build's cached float32, no-grad embeddings)"
    ),
    "layoutlmv2": (
        "LayoutLMv2's visual backbone is detectron2's ResNet-FPN (`LayoutLMv2Model` raises "
        "ImportError without detectron2, which has no wheel for this torch)"
    ),
}
