"""The image-text task fixes (`task_fixes/image_text.py`) and the shared image-text inputs
(`hf_inputs`): representative types get the inputs and config fields their fixes name, run with
images (not their text alone), and pass parity."""

import pytest

from tests.support.zoo_checks import run_task_type
from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo import hf_tasks
from trainready.models.zoo.inputs import PLACEHOLDER_BASE


def test_a_qformer_model_reads_its_prompt_and_its_image_placeholders():
    model = hf_tasks.build("instructblip")
    batch = model.make_batch(0)
    assert model.text_only_reason is None and model.layout.placeholders
    assert batch["qformer_input_ids"].shape[0] == batch["pixel_values"].shape[0]
    assert model.model.config.image_token_index == PLACEHOLDER_BASE  # the fix's field
    placeholders = (batch["input_ids"] == PLACEHOLDER_BASE).sum(dim=1)
    assert placeholders.tolist() == [model.model.config.num_query_tokens] * 2


def test_a_document_model_reads_valid_word_boxes():
    model = hf_tasks.build("udop")
    batch = model.make_batch(0)
    box = batch["bbox"]
    assert box.shape[:2] == batch["input_ids"].shape
    assert ((box >= 0) & (box <= 1)).all()
    assert (box[..., 2] > box[..., 0]).all() and (box[..., 3] > box[..., 1]).all()
    assert "pixel_values" in batch and model.text_only_reason is None


def test_qwen2_5_vl_gets_a_vision_window_of_whole_merged_patches():
    config = hf_tasks.tiny_config("qwen2_5_vl")
    v = config.vision_config
    assert v.window_size == 2 * v.spatial_merge_size * v.patch_size
    assert sum(config.text_config.rope_parameters["mrope_section"]) == 8  # 16-wide head
    model = hf_tasks.build("qwen2_5_vl")
    assert "image_grid_thw" in model.make_batch(0) and model.text_only_reason is None


def test_pix2struct_reads_flattened_patches_with_their_rows_and_columns():
    model = hf_tasks.build("pix2struct")
    patches = model.make_batch(0)["flattened_patches"]
    assert patches.shape[-1] == 2 + model.model.config.vision_config.patch_embed_hidden_size
    assert patches[0, :, 0].min() == 1 and patches[0, :, 1].max() == 4  # a 4 x 4 grid, 1-based


def test_a_text_only_model_in_the_image_table_is_judged_on_its_text():
    model = hf_tasks.build("mistral4")  # Mistral4ForCausalLM: no vision tower to feed
    assert model.layout.images and model.text_only_reason is None
    assert set(model.make_batch(0)) == {"input_ids", "attention_mask", "label:logits"}


def test_generation_only_wrappers_are_unsupported_with_their_thinker_named():
    for model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
        with pytest.raises(Exception, match="thinker"):
            hf_tasks.build(model_type)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["instructblip", "udop", "qwen2_5_vl", "pix2struct"])
def test_fixed_types_pass_parity(model_type):
    out = run_task_type(model_type)
    assert out.status == "pass", out.diagnostics.get("error") or out.diagnostics.get("reason")
    assert out.diagnostics["modality"] == "multimodal"
    assert not out.diagnostics.get("text_only")


@pytest.mark.parametrize("model_type", ["unlimited_ocr", "deepseek_ocr2"])
def test_a_sam_tower_starts_at_the_scale_of_the_rest(model_type):
    # SAM's default initializer_range (1e-10) left the tower's float32 gradients at 1e-45,
    # below the smallest normal float32: the tower now starts at the text model's 0.02.
    config = hf_tasks.tiny_config(model_type)
    assert config.vision_config.sam_config.initializer_range == 0.02
    if model_type == "unlimited_ocr":  # (one build: the weights follow the config)
        sam = hf_tasks.build(model_type).model.model.vision_tower.sam_encoder
        assert sam.neck.conv1.weight.detach().std() > 1e-3


def test_hy_v4_vl_learns_a_position_grid_the_size_of_its_images():
    model = hf_tasks.build("hy_v4_vl")
    v = model.model.config.vision_config
    side = v.max_image_size // v.patch_size
    assert side == 4  # the zoo's 64 px images: a 4 x 4 grid of 16 px patches
    embeddings = model.model.model.vision_tower.embeddings
    assert embeddings.position_embedding.weight.shape[0] == side * side + 1  # and the cls token
    assert model.make_batch(0)["image_grid_thw"].tolist() == [[1, side, side]] * 2


@pytest.mark.parametrize(
    ("model_type", "tower"),
    [
        ("instructblip", "vision_config"),
        ("instructblipvideo", "vision_config"),
        ("blip-2", "vision_config"),
        ("pp_formulanet", "vision_config"),
        ("slanext", "vision_config"),
        ("sam", "vision_config"),
    ],
)
def test_vision_towers_with_a_placeholder_init_start_at_the_models_scale(model_type, tower):
    # Their configs default initializer_range to 1e-10 (until a checkpoint loads): a tower
    # whose gradients then lie far below what float32 holds.
    assert getattr(hf_tasks.tiny_config(model_type), tower).initializer_range == 0.02


@pytest.mark.slow  # three parity cases end to end
@pytest.mark.parametrize("model_type", ["unlimited_ocr", "deepseek_ocr2", "hy_v4_vl"])
def test_towers_fed_as_trained_pass_parity(model_type):
    out = run_task_type(model_type)
    assert out.status == "pass", out.diagnostics.get("error") or out.diagnostics.get("reason")
    assert not out.diagnostics.get("text_only")


def test_image_features_are_found_on_the_base_model_where_the_head_has_none():
    """PerceptionLM's head class has no get_image_features, its base model does: the inputs
    then get image placeholders for the base model's features (before, the model ran on its
    text alone, said so)."""
    from torch import nn

    from trainready.models.zoo.inputs import _encoder

    class Base(nn.Module):
        def get_image_features(self, pixel_values):
            return pixel_values

    class Head(nn.Module):
        base_model_prefix = "model"

        def __init__(self):
            super().__init__()
            self.model = Base()

    head = Head()
    assert _encoder(head) == head.model.get_image_features
    assert _encoder(Base()) is not None
    assert _encoder(nn.Linear(2, 2)) is None


def test_perception_lm_names_its_pe_tower_tiny():
    config = hf_tasks.tiny_config("perception_lm")
    args = config.vision_config.model_args
    assert config.vision_config.architecture.startswith("vit_pe_lang")
    assert args["embed_dim"] == hf.HIDDEN and args["depth"] == 2
    grid = args["img_size"][0] // args["patch_size"]
    assert tuple(args["ref_feat_shape"]) == (grid, grid)
