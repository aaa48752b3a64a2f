"""Vision models: detection (DETR family, RT-DETR backbones), segmentation (SAM, MaskFormer), depth, keypoints, OCR.

See `task_fixes/__init__.py` for the tables' contract; each entry says why it is needed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo.inputs import BATCH, IMAGE_SIZE, SEQ_LEN

# --- conv backbones -------------------------------------------------------------------------------

# A tiny HGNetV2 (the RT-DETR-v2 / D-FINE backbone): four stages whose widths agree with each
# other (stem -> stage inputs -> stage outputs), two conv layers per block, one block per stage.
# The generic shrink cuts `hidden_sizes` but not the `stage_*_channels` lists the stages are
# built from, so the classifier and a detector's encoder would read the wrong width.
_HGNET_STAGES = [32, 64, 128, 256]
HGNET = {
    "stem_channels": [3, 16, 16],
    "stage_in_channels": [16, *_HGNET_STAGES[:-1]],
    "stage_mid_channels": [16, 16, 32, 32],
    "stage_out_channels": _HGNET_STAGES,
    "stage_num_blocks": [1, 1, 1, 1],
    "stage_numb_of_layers": [2, 2, 2, 2],
    "hidden_sizes": _HGNET_STAGES,  # the classifier's and a backbone's feature widths
    "embedding_size": 16,
}


def _hgnet(d: dict[str, Any]) -> None:
    d.update(HGNET)


def _hgnet_pixels(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """128-pixel images (its processor's are 224): HGNetV2's last two stages run at strides 16
    and 32, so 64-pixel images leave them 4 x 4 and 2 x 2 maps, and training-mode batch norm
    normalises each channel over 32 and 8 values, where float32's gradients are 6e-2 off
    float64's (relative; 2e-4 at 128 pixels)."""
    return {**batch, "pixel_values": torch.randn(BATCH, 3, 128, 128, generator=gen)}


def _stage_widths(backbone: dict[str, Any]) -> list[int]:
    """The widths of a backbone's output stages (`out_features`, stage1.. of `hidden_sizes`)."""
    return [
        backbone["hidden_sizes"][int(s.removeprefix("stage")) - 1] for s in backbone["out_features"]
    ]


def _hgnet_detector(d: dict[str, Any]) -> None:
    """An RT-DETR style detector on a tiny HGNetV2: the hybrid encoder takes the widths of the
    backbone stages it is fed (`encoder_in_channels`), and projects them to the decoder's width
    (`encoder_hidden_dim` = `decoder_in_channels` = `d_model`), as the full config has them."""
    _hgnet(d["backbone_config"])
    widths = _stage_widths(d["backbone_config"])
    levels = len(d["encoder_in_channels"])
    d["encoder_in_channels"] = widths[-levels:]
    if "x4_feat_dim" in d:  # PP-DocLayoutV3: the first (stride-4) stage feeds the mask head
        d["x4_feat_dim"] = widths[0]
    width = d.get("d_model") or d["hidden_size"]  # PP-DocLayoutV4 names it hidden_size
    d["encoder_hidden_dim"] = width
    d["decoder_in_channels"] = [width] * len(d["decoder_in_channels"])


# An RT-DETR style detector freezes its backbone's batch norms by default: their statistics and
# affine stay as loaded, which is meant for the ImageNet-pretrained backbone every checkpoint
# starts from (`use_pretrained_backbone`). Here the backbone is built from its config with random
# weights: frozen, every batch norm is the identity (running mean 0, variance 1) and the convs'
# 0.01-0.02 std weights shrink the signal ~10x a layer, so the backbone's features reach the
# encoder at 1e-11 to 1e-17 (measured, 64-pixel images). Everything downstream then decides on
# ties: PP-DocLayout's top-k query selection picks among encoder scores equal to 1e-12 (other
# queries in float32 than in float64), RT-DETR's reference points stay exactly on the anchor
# lattice (its deformable attention samples at pixel boundaries, where bilinear sampling has a
# kink), a ReLU of D-FINE's encoder box head sits 2e-8 from 0 and flips. Training a detector on a
# randomly initialised backbone, one trains its batch norms: the config's option for it.
_TRAINED_BACKBONE_NORMS = {"freeze_backbone_batch_norms": False}


def _trained_norms(fix: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """`fix`, then the backbone's batch norms trained (`_TRAINED_BACKBONE_NORMS`)."""

    def adjust(d: dict[str, Any]) -> None:
        fix(d)
        d |= _TRAINED_BACKBONE_NORMS

    return adjust


def _pp_doclayout_v2(d: dict[str, Any]) -> None:
    """PP-DocLayoutV2 ranks its detections for the reading-order head by a per-class score
    threshold and class priority, which the config leaves unset (the checkpoint names them for
    its 25 classes): one per class of the tiny head. A threshold of 0 keeps every query, so the
    reading order sees them all and no query flips in or out between precisions on a random
    model's ~0.5 scores."""
    _hgnet_detector(d)
    n = d.get("num_labels", 2)  # the head's classes (transformers' default, 2, when unnamed)
    d["class_thresholds"] = [0.0] * n
    d["class_order"] = list(range(n))


def _lw_detr(d: dict[str, Any]) -> None:
    """LW-DETR: the default config names no projector scale (every checkpoint does: P4, a
    scale factor of 1, for the tiny to medium sizes), so no feature level reaches the decoder;
    the projector's widths and level count follow it (the config derives them only from its
    own defaults). The ViT's 4 x 4 patch grid is split into 2 x 2 windows (16 windows of the
    full 1024-pixel grid would be one patch each); layers alternate windowed and global as in
    the full net."""
    scales = [1.0]
    d |= {
        "projector_scale_factors": scales,
        "projector_in_channels": [d["d_model"]] * len(scales),
        "projector_out_channels": d["d_model"],
        "num_feature_levels": len(scales),
    }
    d["backbone_config"] |= {"num_windows": 4, "window_block_indices": [0, 2]}


# --- universal segmentation (MaskFormer family) -----------------------------------------------

# A Swin backbone keeps its four stages (the generic shrink cuts the per-stage lists to 2 as
# if they were per-layer): the pixel decoders read all four (strides 4 to 32). One block a
# stage, widths 16 to 128.
_SWIN_4_STAGES = {
    "embed_dim": 16,
    "depths": [1, 1, 1, 1],
    "num_heads": [1, 2, 4, 8],
    "num_layers": 4,
    "hidden_size": 128,  # the last stage's width, embed_dim * 2**3
    "stage_names": ["stem", "stage1", "stage2", "stage3", "stage4"],
    "out_features": ["stage1", "stage2", "stage3", "stage4"],
    "out_indices": [1, 2, 3, 4],
}
# The pixel and transformer decoders' widths (256 and 1024-2048 in the full nets, which the
# shrink leaves or cuts to 16 through the audio field `feature_size`); 64 is a multiple of
# their group norms' 32 groups.
_SEG_WIDTH = hf.HIDDEN
_SEG_FFN = 2 * hf.HIDDEN


def _mask2former(d: dict[str, Any]) -> None:
    d["backbone_config"] |= _SWIN_4_STAGES
    d |= {
        "feature_size": _SEG_WIDTH,
        "mask_feature_size": _SEG_WIDTH,
        "hidden_dim": _SEG_WIDTH,
        "encoder_feedforward_dim": _SEG_FFN,
        "dim_feedforward": _SEG_FFN,
    }


def _maskformer(d: dict[str, Any]) -> None:
    """MaskFormer: the FPN and mask features at the decoder's (DETR's) width."""
    d["backbone_config"] |= _SWIN_4_STAGES
    d |= {"fpn_feature_size": _SEG_WIDTH, "mask_feature_size": _SEG_WIDTH}
    d["decoder_config"]["d_model"] = _SEG_WIDTH


def _oneformer(d: dict[str, Any]) -> None:
    d["backbone_config"] |= _SWIN_4_STAGES
    d |= {
        "conv_dim": _SEG_WIDTH,
        "mask_dim": _SEG_WIDTH,
        "hidden_dim": _SEG_WIDTH,
        "encoder_feedforward_dim": _SEG_FFN,
        "dim_feedforward": _SEG_FFN,
    }


# CLIP's tokenizer: start and end of text (OneFormer's task prompts are CLIP-tokenized).
_CLIP_START, _CLIP_END = 49406, 49407


def _oneformer_task(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """OneFormer is conditioned on its task: `task_inputs`, the prompt "the task is {semantic,
    instance, panoptic}" CLIP-tokenized and padded to `task_seq_len` (the processor's), which
    an MLP reads as a vector. Here: start, four word ids, end, zero padding. Its
    `main_input_name` is a list (pixels and task), which the generic inputs do not read: the
    images are given here too."""
    pixels = torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen)
    ids = torch.zeros(BATCH, config.task_seq_len, dtype=torch.long)
    ids[:, 0], ids[:, 5] = _CLIP_START, _CLIP_END
    ids[:, 1:5] = torch.randint(1, _CLIP_START, (1, 4), generator=gen)  # one prompt for all
    return {**batch, "pixel_values": pixels, "task_inputs": ids}


# --- OCR (PaddleOCR) ---------------------------------------------------------------------------

# The DB-style text detectors' neck: transformers' configs leave the intra-class blocks' convs,
# the per-level upsampling factors and the head's kernels unset (`None`); every released
# config.json names them, as here (PaddleOCR's IntraCLBlock: 7/5/3-long vertical, horizontal
# and square convs; levels upsampled by 1, 2, 4, 8 to stride 4; a 3x3 conv then two 2x2
# transposed convs in the head).
_INTRACLASS_BLOCK = {
    "reduce_channel": [1, 1, 0],
    "return_channel": [1, 1, 0],
    "vertical_long_to_small_conv_longratio": [[7, 1], [1, 1], [3, 0]],
    "vertical_long_to_small_conv_midratio": [[5, 1], [1, 1], [2, 0]],
    "vertical_long_to_small_conv_shortratio": [[3, 1], [1, 1], [1, 0]],
    "horizontal_small_to_long_conv_longratio": [[1, 7], [1, 1], [0, 3]],
    "horizontal_small_to_long_conv_midratio": [[1, 5], [1, 1], [0, 2]],
    "horizontal_small_to_long_conv_shortratio": [[1, 3], [1, 1], [0, 1]],
    "symmetric_conv_long_longratio": [[7, 7], [1, 1], [3, 3]],
    "symmetric_conv_long_midratio": [[5, 5], [1, 1], [2, 2]],
    "symmetric_conv_long_shortratio": [[3, 3], [1, 1], [1, 1]],
}
_OCR_DET_NECK = {
    "intraclass_block_config": _INTRACLASS_BLOCK,
    "scale_factor_list": [1, 2, 4, 8],
    "kernel_list": [3, 2, 2],
    "neck_out_channels": hf.HIDDEN,  # 256 in the full nets
}


def _ocr_det_hgnet(d: dict[str, Any]) -> None:
    """PP-OCRv5 server detector: the DB neck on a tiny HGNetV2 (all four stages)."""
    _hgnet(d["backbone_config"])
    d |= _OCR_DET_NECK


# PP-LCNetV4's default blocks are the text recogniser's (stages 3 and 4 stride (2, 1): height
# only), which no detector uses: the released PP-OCRv6 det config.json's blocks (stem 3-64-128;
# stages 128, 256, 512, 896 wide, each first block stride 2, so the four levels are at strides
# 4 to 32 as the neck's upsampling factors 1 to 8 assume), at a quarter of the width, two
# blocks a stage (kernel, in, out, stride, squeeze-excitation).
_LCNET_V4_DET = {
    "stem_channels": [3, 16, 32],
    "block_configs": [
        [[3, 32, 32, 1, True], [3, 32, 32, 1, False]],
        [[3, 32, 64, 2, False], [3, 64, 64, 1, True]],
        [[3, 64, 128, 2, False], [3, 128, 128, 1, True]],
        [[3, 128, 224, 2, False], [3, 224, 224, 1, True]],
    ],
    # The neck fuses every stage (it is built for all of `stage_out_channels`): all four out.
    "out_features": ["stage1", "stage2", "stage3", "stage4"],
    "out_indices": [1, 2, 3, 4],
}
_LCNET_V4_DERIVED = ("depths", "stage_names", "stage_out_channels")  # from the blocks


def _lcnet_v4_det(d: dict[str, Any]) -> list[int]:
    """The tiny detection PP-LCNetV4 in the backbone config; its stages' widths."""
    b = d["backbone_config"]
    for derived in _LCNET_V4_DERIVED:
        b.pop(derived, None)
    b |= _LCNET_V4_DET
    return [blocks[-1][2] for blocks in _LCNET_V4_DET["block_configs"]]


def _ocr_det(d: dict[str, Any]) -> None:
    """PP-OCRv6 medium detector: the DB neck on the tiny detection PP-LCNetV4."""
    _lcnet_v4_det(d)
    d |= _OCR_DET_NECK


def _ocr_det_small(d: dict[str, Any]) -> None:
    """PP-OCRv6 small detector: its neck's inputs (`layer_list_out_channels`, "the output
    channels of each backbone stage") are the tiny backbone's."""
    d["layer_list_out_channels"] = _lcnet_v4_det(d)


# PP-OCRv5's recogniser reads text lines 48 pixels high (its processor's height), 320 wide in
# the processor; its backbone strides the height by 16 and the width by 4, then pools (3, 2):
# one row, a CTC sequence along the width (40 steps for 320 pixels, 40 here for 160).
_OCR_LINE = (48, 160)
# PP-LCNetV3's default blocks are the detector's (stride 2 both ways); the recogniser's
# (PaddleOCR's rec_lcnetv3 NET_CONFIG_rec: strides (2, 1), (1, 2), (2, 1), (2, 1) in stages 3
# to 5) at half the width, one or two blocks a stage (kernel, in, out, stride, SE).
_LCNET_V3_REC = [
    [[3, 16, 32, 1, False]],
    [[3, 32, 64, 1, False]],
    [[3, 64, 128, [2, 1], False]],
    [[3, 128, 128, [1, 2], False], [5, 128, 128, 1, False]],
    [[5, 128, 256, [2, 1], True], [5, 256, 256, [2, 1], False]],
]


def _ocr_rec(d: dict[str, Any]) -> None:
    """The recogniser's backbone blocks; its classes are its character dictionary's (18385
    for the multilingual one), which fine-tuning on one's own dictionary sets: the shrunk
    vocabulary."""
    d["backbone_config"]["block_configs"] = _LCNET_V3_REC
    d["backbone_config"].pop("depths", None)  # derived from the blocks
    d["head_out_channels"] = hf.VOCAB_SIZE


def _ocr_line(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Text-line images at the recogniser's height."""
    return {**batch, "pixel_values": torch.randn(BATCH, 3, *_OCR_LINE, generator=gen)}


# --- Perceiver --------------------------------------------------------------------------------

# Perceiver's masked LM: 256 latents 1280 wide, 26 self-attention layers in the full config,
# which the shrink does not name (num_latents, d_latents, num_self_attends_per_block). Its
# decoder queries every position up to `max_position_embeddings` (the tokenizer pads to it):
# as many as the text fed.
_PERCEIVER = {
    "num_latents": 32,
    "d_latents": hf.HIDDEN,
    "num_self_attends_per_block": hf.LAYERS,
    "max_position_embeddings": SEQ_LEN,
}


def _perceiver_text(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Perceiver's masked LM reads UTF-8 bytes (its tokenizer: ids 6.. are bytes + 6) under the
    name `inputs` (its `main_input_name`), which the generic text inputs do not fill."""
    ids = torch.randint(6, config.vocab_size, (BATCH, SEQ_LEN), generator=gen)
    return {**batch, "inputs": ids, "attention_mask": torch.ones_like(ids)}


# --- SAM family --------------------------------------------------------------------------------

# The widths the SAM sub-configs share: the vision neck's output is the image embedding that the
# prompt encoder's positional encoding and the mask decoder work at (256 in every checkpoint;
# the shrink cuts the prompt encoder and mask decoder to 64 but not the vision neck), and the
# mask decoder's MLPs keep their full 2048 / 256 units unless cut with it.
_SAM_WIDTH = hf.HIDDEN
_SAM_PATCH = 8  # an 8 x 8 image embedding of the 64-pixel image: windowed attention has work


def _sam_decoder(d: dict[str, Any]) -> None:
    d["prompt_encoder_config"] |= {"hidden_size": _SAM_WIDTH, "image_size": IMAGE_SIZE}
    d["mask_decoder_config"] |= {
        "hidden_size": _SAM_WIDTH,
        "mlp_dim": 4 * _SAM_WIDTH,
        "iou_head_hidden_dim": _SAM_WIDTH,
    }


def _sam(d: dict[str, Any]) -> None:
    """SAM and SAM-HQ: a ViT image encoder whose neck yields the `output_channels`-wide image
    embedding on an (image / patch)^2 grid; the prompt encoder embeds prompts onto that grid
    (`image_embedding_size`) with the vision config's positional encoding (`num_pos_feats`, half
    the embedding width); the last ViT layer attends globally (SAM-HQ's decoder reads the
    global layers' features, `vit_dim` wide)."""
    v = d["vision_config"]
    v |= {
        "output_channels": _SAM_WIDTH,
        "num_pos_feats": _SAM_WIDTH // 2,
        # The std of the prompt and image positional encoding's random Gaussian frequencies:
        # 1 in SAM (segment-anything's PositionEmbeddingRandom) and so in every checkpoint;
        # transformers' default initialises it at half the ViT width (384), whose sin / cos of
        # ~1e3-radian arguments keep only ~4 digits in float32.
        "scale": 1.0,
        "patch_size": _SAM_PATCH,
        "mlp_dim": 4 * v["hidden_size"],
        "global_attn_indexes": [v["num_hidden_layers"] - 1],
        # The vision config's default initialises the ViT at std 1e-10 (weights that are ~0,
        # every checkpoint overwrites them): the std of the rest of SAM and of transformers'
        # ViTs, so the encoder computes something a trained SAM's resembles.
        "initializer_range": d["initializer_range"],
    }
    _sam_decoder(d)
    d["prompt_encoder_config"] |= {
        "patch_size": _SAM_PATCH,
        "image_embedding_size": IMAGE_SIZE // _SAM_PATCH,
    }
    if "vit_dim" in d["mask_decoder_config"]:
        d["mask_decoder_config"]["vit_dim"] = v["hidden_size"]


def _sam2(d: dict[str, Any]) -> None:
    """SAM 2: a Hiera image encoder (patch stride 4, three query-pooling stages: 16, 8, 4 and
    2 cells a side of the 64-pixel image) feeding an FPN whose levels the mask decoder reads
    (`backbone_channel_list`: the stages' widths, last first; `backbone_feature_sizes`: the
    three finest grids; `fpn_hidden_size`: the decoder's width). One block a stage, the third
    stage's second attending globally as in the full net (a stage's first block pools its
    queries, which a global block cannot); windows cut to tile the small grids."""
    v = d["vision_config"]
    widths = [16, 32, 64, 128]
    v["backbone_config"] |= {
        "hidden_size": widths[0],
        "embed_dim_per_stage": widths,
        "num_attention_heads_per_stage": [1, 2, 4, 8],
        "blocks_per_stage": [1, 1, 2, 1],
        "global_attention_blocks": [3],
        "window_size_per_stage": [8, 4, 4, 2],
    }
    grid = IMAGE_SIZE // 4
    v |= {
        "backbone_channel_list": widths[::-1],
        "backbone_feature_sizes": [[grid >> i] * 2 for i in range(3)],
        "fpn_hidden_size": _SAM_WIDTH,
    }
    _sam_decoder(d)


# SAM 3's ViT has 14-pixel patches: 112-pixel images make an 8 x 8 patch grid (the prompt
# encoder's image embedding), windows of 4 as in the full net's 72 x 72 grid of 24-windows.
_SAM3_IMAGE = 112


def _sam3_tracker(d: dict[str, Any]) -> None:
    """SAM 3 tracker: the ViT's FPN (scales 4, 2, 1, 0.5 of the patch grid) feeds the SAM 2
    mask decoder at `fpn_hidden_size`, the decoder's width; `backbone_feature_sizes` are the
    three finest levels' grids; the last ViT layer attends globally."""
    v = d["vision_config"]
    b = v["backbone_config"]
    b |= {
        "image_size": _SAM3_IMAGE,
        "global_attn_indexes": [b["num_hidden_layers"] - 1],
    }
    grid = _SAM3_IMAGE // b["patch_size"]
    v |= {
        "fpn_hidden_size": _SAM_WIDTH,
        "backbone_feature_sizes": [[grid * 4 >> i] * 2 for i in range(3)],
    }
    _sam_decoder(d)
    d["prompt_encoder_config"]["image_size"] = _SAM3_IMAGE


def _sam3_box_prompt(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """SAM 3's images at its ViT's size (the vision config names it in its backbone's config
    only, so the generic inputs are 64-pixel), and a box prompt per image."""
    size = config.vision_config.backbone_config.image_size
    pixels = torch.randn(BATCH, 3, size, size, generator=gen)
    return _box_prompt(model, config, gen, {**batch, "pixel_values": pixels})


def _boxes(gen: torch.Generator, size: int, n: int = 1) -> torch.Tensor:
    """[BATCH, n, 4] valid (x0, y0, x1, y1) boxes in pixels of a `size`-pixel image: each at least
    a quarter and at most half of the image wide and high."""
    corner = torch.rand(BATCH, n, 2, generator=gen) * size / 2
    extent = (1 + torch.rand(BATCH, n, 2, generator=gen)) * size / 4
    return torch.cat([corner, corner + extent], dim=-1)


def _box_prompt(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """A box prompt per image, in pixels of the input image, as SAM is fine-tuned (the
    transformers SAM fine-tuning tutorial prompts each image with its object's bounding box)."""
    size = batch["pixel_values"].shape[-1]
    return {**batch, "input_boxes": _boxes(gen, size)}


# --- depth and dense prediction (DPT necks) --------------------------------------------------------

# DPT-style necks: four feature maps reassembled at 4, 2, 1 and 1/2 of the patch grid, each
# projected to a `neck_hidden_sizes` width (an eighth of the full 96..768 / 48..384 widths,
# rounded up) and fused at `fusion_hidden_size`.
_NECK = {"neck_hidden_sizes": [16, 32, 64, 64], "fusion_hidden_size": hf.HIDDEN}
# DINOv2 backbones have 14-pixel patches: a 56-pixel image is a 4 x 4 patch grid (the processor
# resizes to a multiple of 14; the 64-pixel default would drop a partial patch).
_DINO_IMAGE = 56


def _depth_anything(d: dict[str, Any]) -> None:
    """Depth Anything: the neck reassembles the DINOv2 backbone's hidden states, so its input
    width (`reassemble_hidden_size`, 384 = the full ViT-S width) is the shrunk backbone's."""
    b = d["backbone_config"]
    b["image_size"] = _DINO_IMAGE
    d["reassemble_hidden_size"] = b["hidden_size"]
    d |= _NECK


def _dpt(d: dict[str, Any]) -> None:
    """DPT: the neck reads four ViT layers (`backbone_out_indices`: 3, 6, 9 and 12 of the full
    12): a 4-layer ViT, every layer read."""
    d["num_hidden_layers"] = 4
    d["backbone_out_indices"] = [0, 1, 2, 3]
    d |= _NECK


# Depth Pro: a DINOv2 ViT (16-pixel patches at 384, the checkpoint's) encodes 384-pixel patches
# of the 1536-pixel image at scales 1/4, 1/2 and 1, and the whole image at 384. Tiny: 32-pixel
# patches of 8-pixel tokens (a 4 x 4 token grid) of a 128-pixel image, the same 1:4 ratio, so
# the three scales are 1, 3 x 3 and 5 x 5 overlapping patches as in the full net. (64-pixel
# patches of 16-pixel tokens: a 256-pixel depth map, whose fusion convs made a 20-step parity
# case run past its 10 minutes on 2 cores.)
_DEPTH_PRO_PATCH = 32
_DEPTH_PRO_TOKEN = 8


def _depth_pro(d: dict[str, Any]) -> None:
    """Depth Pro's widths cut with its encoders' (a sixteenth of 1024 / 512 / 256), the
    intermediate features taken from the shrunk encoder's layers (the full net's 12th and 6th
    of 24: its last and first here)."""
    for key in ("image_model_config", "patch_model_config", "fov_model_config"):
        d[key] |= {"image_size": _DEPTH_PRO_PATCH, "patch_size": _DEPTH_PRO_TOKEN}
    layers = d["patch_model_config"]["num_hidden_layers"]
    d |= {
        "patch_size": _DEPTH_PRO_PATCH,
        "scaled_images_feature_dims": [64, 64, 32],
        "intermediate_feature_dims": [16, 16],
        "intermediate_hook_ids": [layers - 1, 0],
        "fusion_hidden_size": 32,
    }


def _depth_pro_pixels(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Depth Pro's image: four of its patches a side (1536 pixels for 384-pixel patches)."""
    size = 4 * config.patch_size
    return {**batch, "pixel_values": torch.randn(BATCH, 3, size, size, generator=gen)}


def _sapiens2(d: dict[str, Any]) -> None:
    """Sapiens2: the decode head's config is empty by default (each released task config names
    its own); a segmentation head as Sapiens' is built: 2x transposed-conv upsamplings of the
    patch grid (kernel 4, the config's default), then a 1x1 conv, at a width cut like the
    ViT's. Key/value heads per layer: full attention in the first layer, grouped (half the
    heads) after it, as the full net's middle layers (the shrink leaves 16 and 8 of 16)."""
    heads = d["num_attention_heads"]
    d["head_config"] |= {
        "upsample_out_channels": [32, 32],
        "upsample_kernel_sizes": None,  # filled from upsample_kernel_size
        "use_pixel_shuffle": False,
        "conv_out_channels": [32],
        "conv_kernel_sizes": None,
    }
    d |= {
        "num_key_value_heads_per_layer": [heads, heads // 2],
        "num_key_value_attention_heads": heads // 2,
        "num_first_full_attention_layers": 1,
        "num_last_full_attention_layers": 0,
    }


def _dino_pixels(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Images the size of the DINOv2 backbone (a multiple of its 14-pixel patch)."""
    size = config.backbone_config.image_size
    return {**batch, "pixel_values": torch.randn(BATCH, 3, size, size, generator=gen)}


def _prompt_depth(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Prompt Depth Anything's prompt: a low-resolution metric depth map (a phone's LiDAR, in
    metres: 0.5 to 5 here) of each image, which the model min-max normalises."""
    batch = _dino_pixels(model, config, gen, batch)
    depth = 0.5 + 4.5 * torch.rand(BATCH, 1, 16, 16, generator=gen)
    return {**batch, "prompt_depth": depth}


# --- keypoint matching ---------------------------------------------------------------------------


def _image_pairs(
    model: nn.Module, config: Any, gen: torch.Generator, batch: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """A keypoint matcher's input: pairs of images to match, [B, 2, C, H, W]."""
    pixels = batch["pixel_values"]
    pair = torch.randn(BATCH, 2, *pixels.shape[1:], generator=gen)
    return {**batch, "pixel_values": pair}


# The matchers' keypoint detector, a SuperPoint an eighth / a quarter as wide, its descriptors
# as wide as the matcher (the full ones: 256 and 256).
_DESCRIPTOR = hf.HIDDEN
# A matcher is trained on the keypoints of a pretrained SuperPoint (SuperGlue's and LightGlue's
# training start from the released detector), whose heatmap has peaks. At transformers' init
# (convs at std 0.02, no normalisation, ReLU) the signal shrinks ~4x a conv: the 65-way heatmap
# logits come out ~1e-6, every pixel scores 1/65 within float32's resolution, and the NMS (an
# equality with a max-pool) keeps ~1850 "keypoints" an image in float32 against ~75 in float64
# (measured: the matchers' outputs then differ in shape). Initialised at std 0.1 (He's
# sqrt(2 / fan_in) for its 3x3 convs of 16-32 channels: 0.08-0.12) the signal keeps its scale, as
# in a trained detector, and both precisions find the same ~75 keypoints at the same pixels.
_DETECTOR_INIT = 0.1
_SUPERPOINT = {
    "encoder_hidden_sizes": [16, 16, 32, 32],
    "decoder_hidden_size": _DESCRIPTOR,
    "descriptor_decoder_dim": _DESCRIPTOR,
    "initializer_range": _DETECTOR_INIT,
}


def _lightglue(d: dict[str, Any]) -> None:
    """LightGlue trains with its adaptive depth and width (early exit, point pruning) off, as
    the reference implementation's training sets them (-1): both are decisions on a
    confidence threshold, which the training signal must not depend on. Its descriptors are
    the tiny SuperPoint's."""
    d["keypoint_detector_config"] |= _SUPERPOINT
    d |= {"depth_confidence": -1.0, "width_confidence": -1.0, "descriptor_dim": _DESCRIPTOR}


def _superglue(d: dict[str, Any]) -> None:
    """SuperGlue: the keypoint encoder's MLP (positions and scores -> the descriptor width)
    cut like the rest, one self and one cross attention layer (the full net alternates 9 of
    each), SuperPoint's descriptors as wide as the attention (SuperGlue adds the two)."""
    d["keypoint_detector_config"] |= _SUPERPOINT
    d |= {
        "hidden_size": _DESCRIPTOR,
        "keypoint_encoder_sizes": [8, 16, 32, 64],
        "gnn_layers_types": ["self", "cross"],
    }


def _efficientloftr(d: dict[str, Any]) -> None:
    """EfficientLoFTR's RepVGG backbone widths a quarter of the full ones, its last stage as
    wide as the shrunk transformer (the config's validator), one to two blocks a stage (the
    block lists are derived from these). Its 2-D RoPE spans half the hidden width (one
    quarter per axis) whatever the heads: `partial_rotary_factor` is heads / 2 of a head."""
    d |= {"out_features": [16, 16, 32, d["hidden_size"]], "stage_num_blocks": [1, 1, 2, 2]}
    d["rope_parameters"]["partial_rotary_factor"] = d["num_attention_heads"] / 2
    for derived in _LOFTR_DERIVED:  # the full config's, which the config would keep
        d.pop(derived, None)


_LOFTR_DERIVED = (
    "stage_in_channels",
    "stage_block_stride",
    "stage_block_out_channels",
    "stage_block_in_channels",
    "fine_fusion_dims",
    "num_key_value_heads",  # = the attention heads: the attention views keys at full width
    "intermediate_size",
)


def _edgetam(d: dict[str, Any]) -> None:
    """transformers 5.24's default EdgeTAM vision config misspells its backbone's key
    (`"archirecture": "repvit_m1"`), so TimmWrapper builds timm's default resnet50, whose stage
    widths (256-2048) are not the neck's (`backbone_channel_list` 384-48): the intended
    RepViT-M1 (48-384), random weights. Its FPN and mask decoder as SAM 2's (`_sam2`): the
    decoder's width and the three finest grids (stride 4, 8, 16 of the image)."""
    v = d["vision_config"]
    v["backbone_config"]["architecture"] = "repvit_m1"
    grid = IMAGE_SIZE // 4
    v |= {
        "backbone_feature_sizes": [[grid >> i] * 2 for i in range(3)],
        "fpn_hidden_size": _SAM_WIDTH,
    }
    _sam_decoder(d)


ADJUST: dict[str, Callable[[dict[str, Any]], None]] = {
    # BiT's group norms have 32 groups, more than a tiny bottleneck's 8 channels (32 / 4): 4
    # groups divide every width of the shrunk net (8..256).
    "bit": hf._set(num_groups=4),
    # TextNet's stem feeds stage 1, whose input width is `hidden_sizes[0]` (the stem's, 64, in
    # the full config); its five widths (64..512) are cut only to 32..512 by the shrink, 10M
    # parameters: a quarter of the full widths throughout, the stem's equal to the first.
    "textnet": hf._set(stem_out_channels=16, hidden_sizes=[16, 16, 32, 64, 128]),
    "hgnet_v2": _hgnet,
    "deimv2": _hgnet_detector,
    # (backbones built with random weights: their batch norms trained, `_TRAINED_BACKBONE_NORMS`)
    **dict.fromkeys(
        ("d_fine", "pp_doclayout_v3", "pp_doclayout_v4"), _trained_norms(_hgnet_detector)
    ),
    "pp_doclayout_v2": _trained_norms(_pp_doclayout_v2),
    **dict.fromkeys(("rt_detr", "rt_detr_v2"), hf._set(**_TRAINED_BACKBONE_NORMS)),
    "lw_detr": _lw_detr,
    "mask2former": _mask2former,
    "maskformer": _maskformer,
    "oneformer": _oneformer,
    "pp_ocrv5_server_det": _ocr_det_hgnet,
    "pp_ocrv6_medium_det": _ocr_det,
    "pp_ocrv6_small_det": _ocr_det_small,
    "pp_ocrv5_mobile_rec": _ocr_rec,
    **dict.fromkeys(("sam", "sam_hq"), _sam),
    # sam2_video and sam3_video train the image model of their tracker (the head table's
    # Sam2Model, Sam3TrackerModel): the same fixes.
    **dict.fromkeys(("sam2", "sam2_video"), _sam2),
    **dict.fromkeys(("sam3_tracker", "sam3_video"), _sam3_tracker),
    **dict.fromkeys(("depth_anything", "prompt_depth_anything"), _depth_anything),
    "dpt": _dpt,
    "depth_pro": _depth_pro,
    "sapiens2": _sapiens2,
    "perceiver": hf._set(**_PERCEIVER),
    "lightglue": _lightglue,
    "superglue": _superglue,
    "efficientloftr": _efficientloftr,
    # TimmBackbone builds the timm model its config names (no default): timm's own tiny CI
    # ResNet, random weights (where timm is installed; without it the type is unsupported).
    "timm_backbone": hf._set(backbone="test_resnet", use_pretrained_backbone=False),
    **dict.fromkeys(("edgetam", "edgetam_video"), _edgetam),
}
INPUTS: dict[str, Callable[..., dict[str, Any]]] = {
    "hgnet_v2": _hgnet_pixels,
    **dict.fromkeys(("sam", "sam_hq", "sam2", "sam2_video"), _box_prompt),
    **dict.fromkeys(("sam3_tracker", "sam3_video"), _sam3_box_prompt),
    "depth_anything": _dino_pixels,
    "prompt_depth_anything": _prompt_depth,
    "depth_pro": _depth_pro_pixels,
    **dict.fromkeys(("lightglue", "superglue", "efficientloftr"), _image_pairs),
    "oneformer": _oneformer_task,
    "pp_ocrv5_mobile_rec": _ocr_line,
    "perceiver": _perceiver_text,
}
HEAD: dict[str, str] = {}


def _missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


# timm: this project's optional `timm` extra (trainready/models/zoo/timm.py), not in `dev`: it
# needs torchvision, which pins one exact torch.
_TIMM = (
    "needs timm, not installed (this project's optional `timm` extra, left out of `dev` because"
    " timm needs torchvision, which pins one exact torch)"
)
UNSUPPORTED: dict[str, str] = {
    **(
        {
            "timm_backbone": f"TimmBackbone wraps a timm model: {_TIMM}",
            "timm_wrapper": f"TimmWrapperForImageClassification wraps a timm model: {_TIMM}",
            # EdgeTAM's image encoder is timm's RepViT-M1 (a TimmWrapper sub-model, no
            # transformers implementation to substitute).
            "edgetam": f"EdgeTamModel's image encoder is timm's RepViT (TimmWrapperModel): {_TIMM}",
            "edgetam_video": (
                f"EdgeTamModel (the head of edgetam_video)'s image encoder is timm's RepViT"
                f" (TimmWrapperModel): {_TIMM}"
            ),
        }
        if _missing("timm")
        else {}
    ),
    **(
        {
            "dinat": (
                "DinatForImageClassification's neighbourhood attention calls natten's kernels"
                " (natten2dqkrpb, natten2dav) and raises ImportError without them: natten is"
                " not installed (no dependency or extra of this project; its wheels are built"
                " per torch and CUDA version)"
            ),
        }
        if _missing("natten")
        else {}
    ),
}
