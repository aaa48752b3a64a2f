"""Multimodal LMs and image-text models: image placeholders, vision towers, image features.

See `task_fixes/__init__.py` for the tables' contract; each entry says why it is needed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import torch

from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo.inputs import BATCH, PLACEHOLDER_BASE

IMAGE_TOKEN = PLACEHOLDER_BASE  # the image placeholder id inside the tiny vocabulary


def _sub(key: str, fix: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """`fix` applied to the sub-config `key` (a text or vision config)."""

    def apply(d: dict[str, Any]) -> None:
        fix(d[key])

    return apply


def _all(*fixes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(d: dict[str, Any]) -> None:
        for fix in fixes:
            fix(d)

    return apply


def _mrope(sections: list[int]) -> Callable[[dict[str, Any]], None]:
    """M-RoPE sections (time, height, width) for the shrunk head (16 wide: 8 rotary pairs)."""

    def apply(d: dict[str, Any]) -> None:
        d["rope_parameters"] = {**(d.get("rope_parameters") or {}), "mrope_section": sections}

    return apply


def _chameleon(d: dict[str, Any]) -> None:
    # The VQ-VAE image tokenizer's codes are BPE tokens of the vocabulary (`vocabulary_map`, the
    # tokenizer's vocab: "IMGIMG<code as letters A-J>Z" names, and "<image>"): a tiny codebook of
    # 64 codes mapped to ids 400..463, the <image> placeholder at IMAGE_TOKEN, and a VQ encoder
    # that downsamples the 64 px image 8x (an 8 x 8 token grid, like 512 px / 16x at full size).
    codes = 64

    def name(i: int) -> str:
        return "IMGIMG" + "".join(chr(ord("A") + int(c)) for c in str(i)) + "Z"

    d["vocabulary_map"] = {"<image>": IMAGE_TOKEN, **{name(i): 400 + i for i in range(codes)}}
    d["image_token_id"] = IMAGE_TOKEN
    d["vq_config"] = {
        **d["vq_config"],
        "num_embeddings": codes,
        "embed_dim": 16,
        "latent_channels": 16,
        "base_channels": 32,  # its GroupNorms have 32 groups
        "channel_multiplier": [1, 1, 2, 2],
        "num_res_blocks": 1,
        "resolution": 64,
    }


def _qwen25_vision(d: dict[str, Any]) -> None:
    # Qwen2.5-VL's vision windows are `window_size` pixels wide: the shrink's 16 px is under one
    # merged patch (2 x 14 px), a zero-wide window; 2 merged patches a side (56 px), as the
    # checkpoint's 112 px are 4.
    v = d["vision_config"]
    v["window_size"] = 2 * v["spatial_merge_size"] * v["patch_size"]


# Qwen2.5-VL's text M-RoPE sections default to [16, 24, 24] (a 128-wide head): the same
# proportions for the shrunk 16-wide head's 8 rotary pairs.
_QWEN_MROPE = _mrope([2, 3, 3])


# The Omni thinkers' M-RoPE finds an image by the <|vision_start|> token before its
# placeholders (what their processor writes); the thinker configs of the checkpoints name its
# id, the default thinker config does not: it is placed in the tiny vocabulary (the talker's).
VISION_START, VISION_END = PLACEHOLDER_BASE + 4, PLACEHOLDER_BASE + 5
_OMNI_VISION_IDS = hf._set(vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)


def _vision_span(model: Any, config: Any, gen: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """<|vision_start|> placeholders <|vision_end|>, as the processor writes an image."""
    ids = batch.get("input_ids")
    image = getattr(config, "image_token_id", None)
    if ids is None or image is None or not (ids == image).any():
        return batch
    n = int((ids[0] == image).sum())  # the image's placeholders lead every row
    start = torch.full_like(ids[:, :1], config.vision_start_token_id)
    end = torch.full_like(ids[:, :1], config.vision_end_token_id)
    ids = torch.cat([start, ids[:, :n], end, ids[:, n:]], dim=1)
    batch = {**batch, "input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "mm_token_type_ids" in batch:
        batch["mm_token_type_ids"] = (ids == image).long()
    return batch


def _kosmos2(model: Any, config: Any, gen: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """Kosmos-2 reads `<s><image>` + one slot per latent query + `</image>` + text, and
    `image_embeds_position_mask` marks the slots its image embeddings fill (its processor's
    layout); the slots' ids are replaced, the boundary tokens sit in the tiny vocabulary."""
    ids = batch["input_ids"]
    rows, n = ids.shape[0], config.latent_query_num
    boi, slot, eoi = PLACEHOLDER_BASE + 6, IMAGE_TOKEN, PLACEHOLDER_BASE + 7
    head = torch.tensor([1, boi] + [slot] * n + [eoi]).expand(rows, -1)
    ids = torch.cat([head, ids], dim=1)
    mask = torch.zeros_like(ids)
    mask[:, 2 : 2 + n] = 1
    return {
        **batch,
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "image_embeds_position_mask": mask,
    }


def _idefics(model: Any, config: Any, gen: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """IDEFICS (Flamingo style) takes a list of images per sample, [B, images, C, H, W], and
    `image_attention_mask` [B, text, images]: which text tokens cross-attend to which image
    (every token after the sample's one image, as its processor writes for an image prompt)."""
    pixels = batch["pixel_values"]
    if pixels.dim() == 4:
        pixels = pixels.unsqueeze(1)
    ids = batch["input_ids"]
    image_mask = torch.ones(ids.shape[0], ids.shape[1], pixels.shape[1], dtype=torch.long)
    return {**batch, "pixel_values": pixels, "image_attention_mask": image_mask}


def _pix2struct(model: Any, config: Any, gen: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """Pix2Struct reads `flattened_patches` [B, patches, 2 + patch * patch * C], what its image
    processor makes: each patch's 1-based row and column, then its pixels (a 64 px image in
    16 px patches: 4 x 4), with their attention mask."""
    width = config.vision_config.patch_embed_hidden_size  # 16 x 16 px x 3 channels
    side = 4
    rows = torch.arange(1, side + 1).repeat_interleave(side).float()
    cols = torch.arange(1, side + 1).repeat(side).float()
    pixels = torch.randn(BATCH, side * side, width, generator=gen)
    grid = torch.stack([rows, cols], dim=-1).expand(BATCH, -1, -1)
    patches = torch.cat([grid, pixels], dim=-1)
    return {
        **{k: v for k, v in batch.items() if k != "pixel_values"},
        "flattened_patches": patches,
        "attention_mask": torch.ones(BATCH, side * side, dtype=torch.long),
    }


def _udop(model: Any, config: Any, gen: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """UDOP reads a document: each text token's box `bbox` (x0, y0, x1, y1) normalised to
    [0, 1], as its processor gives OCR words' boxes, beside the page image."""
    ids = batch["input_ids"]
    rows, n = ids.shape
    corner = torch.rand(rows, n, 2, generator=gen) * 0.8
    size = 0.02 + torch.rand(rows, n, 2, generator=gen) * 0.18
    bbox = torch.cat([corner, corner + size], dim=-1)
    return {**batch, "bbox": bbox}


def _pi0(model: Any, config: Any, gen: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """PI0 is a vision-language-action policy trained by flow matching: besides the camera
    image and the instruction it reads the robot `state` and the target `actions` (an action
    chunk), and mixes them with `noise` at a flow `timestep` it would sample itself; both are
    given, drawn from the case's seed (in (0, 1), like its Beta sampling), so the step is fixed."""
    rows = batch["input_ids"].shape[0]
    chunk, action, state = config.chunk_size, config.max_action_dim, config.max_state_dim
    # One camera per sample: pixels [B, cameras, C, H, W] and which camera slots are real;
    # the prompt opens with as many image tokens as the VLM's vision tower yields features.
    pixels = batch["pixel_values"]
    pixels = pixels.unsqueeze(1) if pixels.dim() == 4 else pixels
    with torch.no_grad():
        tokens = model.model.vlm.get_image_features(pixels[:1, 0]).pooler_output.shape[1]
    image = torch.full((rows, tokens), config.vlm_config.image_token_id)
    ids = torch.cat([image, batch["input_ids"]], dim=1)
    return {
        **batch,
        "pixel_values": pixels,
        "pixel_attention_mask": torch.ones(rows, pixels.shape[1], dtype=torch.bool),
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "state": torch.randn(rows, state, generator=gen),
        "actions": torch.randn(rows, chunk, action, generator=gen),
        "noise": torch.randn(rows, chunk, action, generator=gen),
        "timestep": 0.05 + 0.9 * torch.rand(rows, generator=gen),
    }


def _paddleocr_vl(model: Any, config: Any, gen: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """PaddleOCR-VL's processor cuts each image into patches kept as [patches, C, p, p] (not
    flattened as Qwen-VL's are) with each image's (t, h, w) patch grid: a 4 x 4 grid per image,
    then as many image placeholders as its projector yields features, marked in
    `mm_token_type_ids` for the M-RoPE positions."""
    v = config.vision_config
    rows, side, p = batch["input_ids"].shape[0], 2 * v.spatial_merge_size, v.patch_size
    pixels = torch.randn(rows * side * side, v.num_channels, p, p, generator=gen)
    grid = torch.tensor([[1, side, side]] * rows)
    with torch.no_grad():
        feats = model.get_image_features(pixel_values=pixels, image_grid_thw=grid).pooler_output
    image = torch.full((rows, feats[0].shape[0]), config.image_token_id)
    ids = torch.cat([image, batch["input_ids"]], dim=1)
    return {
        "pixel_values": pixels,
        "image_grid_thw": grid,
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == config.image_token_id).long(),
    }


def _sam_neck(width: int) -> Callable[[dict[str, Any]], None]:
    """DeepSeek-OCR style towers: a SAM encoder whose neck and two downsampling convolutions
    (256 -> 512 -> the second encoder's width) feed their map to a second encoder as its patch
    embeddings; the shrink has no rule for these widths: a small neck ending at the second
    encoder's (shrunk) width, and a small SAM MLP. (SAM's placeholder `initializer_range` of
    1e-10 is the shrink's: `hf.PLACEHOLDER_INIT`.)"""

    def apply(d: dict[str, Any]) -> None:
        sam = d["vision_config"]["sam_config"]
        sam.update(mlp_dim=128, output_channels=32, downsample_channels=[32, width])

    return apply


def _granite4_vision(d: dict[str, Any]) -> None:
    # Granite-4 Vision injects vision features into LLM layers: deepstack pairs (vision layer,
    # LLM layer) and 4 spatial offset groups, each at its own LLM layer, which the default
    # config leaves to the checkpoint ([12, 15, 18, 21] of 40 layers) -- here 4 LLM layers, one
    # group each, the deepstack pairs from both vision layers; a window Q-Former downsampling
    # by 1/2 over a 4 x 4 patch grid (16 px patches of the 64 px image), and LLaVA-NeXT
    # resolutions at the 64 px size.
    d["text_config"]["num_hidden_layers"] = 4
    d["vision_config"]["patch_size"] = 16
    d.update(
        deepstack_layer_map=[[1, 0], [2, 1]],
        spatial_target_layers=[0, 1, 2, 3],
        downsample_rate="1/2",
        image_grid_pinpoints=[[64, 64], [64, 128], [128, 64]],
    )


def _granite4_inputs(model: Any, config: Any, gen: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """LLaVA-NeXT style any-resolution input: each 64 px image as its processor sends it, the
    resized base view and its one 64 px tile ([B, 2, C, H, W]) with the image's size, then as
    many image placeholders as its packed features."""
    ids = batch["input_ids"]
    rows = ids.shape[0]
    pixels = torch.randn(rows, 2, 3, 64, 64, generator=gen)
    sizes = torch.tensor([[64, 64]] * rows)
    with torch.no_grad():
        feats = model.get_image_features(pixel_values=pixels, image_sizes=sizes)
    _, packed = feats.deepstack_features[0]
    per_image = (
        sum(t.shape[0] for t in packed) // rows
        if isinstance(packed, (list, tuple))
        else (packed.shape[0] // rows)
    )
    image = torch.full((rows, per_image), config.image_token_id)
    ids = torch.cat([image, ids], dim=1)
    return {
        "pixel_values": pixels,
        "image_sizes": sizes,
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
    }


def _perception_lm(d: dict[str, Any]) -> None:
    """PerceptionLM's vision tower is timm's Perception Encoder, but transformers 5.24's default
    config leaves TimmWrapper's own default, resnet50 with no `model_args`, and the projector
    reads `model_args["embed_dim"]`: the tower PLM is built on (PE-Lang: an EVA ViT with 2-D
    RoPE, a class token, layer scale, no final norm), shrunk through timm's `model_args` as
    transformers' own test does: 2 blocks 64 wide, 16 px patches on the zoo's 64 px image (a
    4 x 4 grid, the RoPE's reference grid), no pooling (the projector reads every token)."""
    grid = 4
    d["vision_config"] = {
        **d["vision_config"],
        "architecture": "vit_pe_lang_large_patch14_448",
        "model_args": {
            "embed_dim": hf.HIDDEN,
            "depth": 2,
            "num_heads": hf.HEADS,
            "patch_size": 16,
            "img_size": (16 * grid, 16 * grid),
            "ref_feat_shape": (grid, grid),
            "global_pool": "",
        },
    }


ADJUST: dict[str, Callable[[dict[str, Any]], None]] = {
    "granite4_vision": _granite4_vision,  # (why: in the function)
    # Its text attention is multi-head (the checkpoint's key/value heads = its heads; the eager
    # attention repeats no key/value head): the shrink's 2 KV heads of 4 would be grouped.
    "unlimited_ocr": _all(
        _sam_neck(hf.HIDDEN), _sub("text_config", hf._set(num_key_value_heads=hf.HEADS))
    ),
    # Its text M-RoPE sections default to Qwen2-VL's [16, 24, 24] (a 128-wide head).
    "paddleocr_vl": _sub("text_config", _QWEN_MROPE),
    # PP-FormulaNet's SAM-style encoder ends in a neck and post convolutions whose widths the
    # shrink has no rule for (256 / 512 / 1024, 8M parameters), and projects to
    # `decoder_hidden_size`, which must be the decoder's (shrunk) d_model for its cross-attention.
    "pp_formulanet": _sub(
        "vision_config",
        hf._set(
            mlp_dim=128,
            output_channels=32,
            post_conv_in_channels=32,
            post_conv_mid_channels=32,
            post_conv_out_channels=64,
            decoder_hidden_size=hf.HIDDEN,
        ),
    ),
    # Pix2Struct's attention is heads x d_kv wide and must give back the hidden width (the
    # checkpoint: 12 x 64 = 768); the shrink keeps d_kv 64: 16, the shrunk 64 over 4 heads.
    "pix2struct": _all(
        _sub("vision_config", hf._set(d_kv=16)), _sub("text_config", hf._set(d_kv=16))
    ),
    # Its text attention builds a sliding-window mask for every model (the checkpoint sets a
    # window); the default config leaves `sliding_window` None.
    "step3p7": _sub("text_config", hf._set(sliding_window=8)),
    # Vision windows of whole merged patches, text M-RoPE sections for the shrunk head; the
    # Omni thinkers (the same vision tower and text M-RoPE) also name their vision start/end ids.
    "qwen2_5_vl": _all(_qwen25_vision, _sub("text_config", _QWEN_MROPE)),
    "qwen2_5_omni_thinker": _all(
        _qwen25_vision, _sub("text_config", _QWEN_MROPE), _OMNI_VISION_IDS
    ),
    "qwen3_omni_moe_thinker": _all(_sub("text_config", _QWEN_MROPE), _OMNI_VISION_IDS),
    "chameleon": _chameleon,  # (why: in the function)
    # The text RoPE is per layer type and the default config names none (checkpoints do): the
    # default RoPE with M-RoPE sections for the shrunk 16-wide head.
    "cohere_compass": _sub(
        "text_config",
        hf._set(
            rope_parameters={
                "full_attention": {
                    "rope_type": "default",
                    "rope_theta": 10000.0,
                    "mrope_section": [4, 2, 2],
                }
            }
        ),
    ),
    # Which decoder layers are dense or MoE is left to the checkpoint (`mlp_layer_types`): the
    # first dense, the rest sparse, as DeepSeek's first_k_dense_replace does; so is its MoE's
    # top-k: 2 of the 4 routed experts. Its SAM neck as unlimited_ocr's.
    "deepseek_ocr2": _all(
        _sub("text_config", hf._set(mlp_layer_types=["dense", "sparse"], num_experts_per_tok=2)),
        _sam_neck(hf.HIDDEN),
    ),
    # The text head width: its config leaves head_dim None (hidden / heads) but its attention
    # reads head_dim: named (16, the shrunk width over 4 heads). Its M-RoPE axes (sequence, width, height, image index: the checkpoint's xdrope_section of 4
    # equal parts) are left to the checkpoint too: 4 x 2 rotary pairs of the 16-wide head.
    "hunyuan_vl": _sub("text_config", _all(hf._set(head_dim=16), _mrope([2, 2, 2, 2]))),
    # Ernie's M-RoPE pre-rotates height/width pairs: sections for the shrunk 16-wide head
    # (8 rotary pairs: 3 + 3 spatial, 2 temporal, the checkpoint's 22/22/20 proportions).
    "ernie4_5_vl_moe": _sub("text_config", _mrope([3, 3, 2])),
    # BLIP-2 and InstructBLIP: the query tokens' outputs replace image placeholder tokens whose
    # id the checkpoints' configs name (`image_token_index`); the default config leaves it None.
    "blip-2": hf._set(image_token_index=IMAGE_TOKEN),
    "instructblip": hf._set(image_token_index=IMAGE_TOKEN),
    # InstructBLIP-Video: 32 query tokens per frame, 4 frames, would fill the tiny OPT's 128
    # positions; 8 queries a frame (the Q-Former's query count is a size like any other).
    "instructblipvideo": hf._set(video_token_index=IMAGE_TOKEN, num_query_tokens=8),
    # MLA: its attention head is qk_nope + qk_rope wide (8 + 8 shrunk) and its RoPE covers
    # partial_rotary_factor of head_dim (= qk_rope); the shrink's head_dim 8 would rotate 4.
    "mistral4": hf._set(head_dim=16),
    # Its learned position grid is max_image_size / patch_size on a side (2048 px: 128 x 128,
    # 16,385 x 64 parameters), bilinearly resized to each image's patch grid: a size the shrink
    # has no rule for: max_image_size 64, the zoo's images (a 4 x 4 grid of 16 px patches).
    # (At 128 x 128 the resize's float32 source coordinates, up to 128 with an ulp of 8e-6,
    # give its bilinear weights an error every float32 run shares: the grid's gradient 2.2x
    # its measured noise, which the independently rounded runs cannot see.)
    "hy_v4_vl": _sub("vision_config", hf._set(max_image_size=64)),
    "perception_lm": _perception_lm,  # (why: in the function)
}
INPUTS: dict[str, Callable[..., dict[str, Any]]] = {
    "qwen2_5_omni_thinker": _vision_span,
    "qwen3_omni_moe_thinker": _vision_span,
    "kosmos-2": _kosmos2,
    "idefics": _idefics,
    "pix2struct": _pix2struct,
    "udop": _udop,
    "pi0": _pi0,
    "paddleocr_vl": _paddleocr_vl,
    "granite4_vision": _granite4_inputs,
}
HEAD: dict[str, str] = {}
UNSUPPORTED: dict[str, str] = {
    "qwen2_5_omni": (
        "Qwen2_5OmniForConditionalGeneration is a generation-only wrapper (thinker,"
        " talker, token2wav) with no forward to train; its trainable part is the thinker,"
        " judged as qwen2_5_omni_thinker"
    ),
    "qwen3_omni_moe": (
        "Qwen3OmniMoeForConditionalGeneration is a generation-only wrapper"
        " (thinker, talker, code2wav) with no forward to train; its trainable part is the"
        " thinker, judged as qwen3_omni_moe_thinker"
    ),
    **(
        {
            "fast_vlm": (
                "FastVLM's vision tower is timm's FastViT (TimmWrapperModel); timm is not"
                " installed and transformers has no native FastViT to build instead"
            ),
            "perception_lm": (
                "PerceptionLM's vision tower is timm's PE (TimmWrapperModel); timm is not"
                " installed and transformers has no native Perception Encoder to build instead"
            ),
        }
        if importlib.util.find_spec("timm") is None
        else {}
    ),
}
