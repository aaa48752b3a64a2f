"""The vision task fixes (`trainready/models/zoo/fixes/vision.py`): a few fixed types build with
the config fields or inputs their fix gives, and pass parity; the prompts and image pairs fed
are what a user feeds; types needing an uninstalled library say which and why."""

import copy

import pytest
import torch

from tests.support.zoo_checks import run_task_type
from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo import hf_tasks, losses
from trainready.models.zoo.fixes import vision
from trainready.models.zoo.float64 import float32_as_float64


def test_bits_group_norms_divide_every_width():
    model = hf_tasks.build("bit")
    groups = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert groups and all(g.num_channels % g.num_groups == 0 for g in groups)
    assert model.model.config.num_groups == 4


def test_dpt_reads_four_vit_layers():
    config = hf_tasks.tiny_config("dpt")
    assert config.backbone_out_indices == [0, 1, 2, 3] and config.num_hidden_layers == 4


# End to end (a float64 reference and the judged run): slow, as the project marks them.
@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["bit", "dpt", "prompt_depth_anything"])
def test_a_fixed_type_passes_parity(model_type):
    out = run_task_type(model_type)
    assert out.status == "pass", out.diagnostics.get("error")


def test_prompt_depth_anything_gets_a_metric_depth_prompt():
    model = hf_tasks.build("prompt_depth_anything")
    batch = model.make_batch(0)
    depth, pixels = batch["prompt_depth"], batch["pixel_values"]
    assert depth.shape == (2, 1, 16, 16) and bool((depth >= 0.5).all() and (depth <= 5).all())
    assert pixels.shape[-1] % 14 == 0  # whole DINOv2 patches
    assert (
        model.model.config.reassemble_hidden_size == model.model.config.backbone_config.hidden_size
    )


def test_box_prompts_are_valid_boxes_inside_the_image():
    boxes = vision._boxes(torch.Generator().manual_seed(0), 64, n=50)
    x0, y0, x1, y1 = boxes.unbind(-1)
    assert bool((x0 >= 0).all() and (y0 >= 0).all() and (x1 <= 64).all() and (y1 <= 64).all())
    assert bool(((x1 - x0) >= 16).all() and ((y1 - y0) >= 16).all())


def test_sam_gets_a_box_prompt_and_matching_sub_config_widths():
    model = hf_tasks.build("sam")
    batch = model.make_batch(0)
    assert batch["input_boxes"].shape == (2, 1, 4)
    c = model.model.config
    assert c.vision_config.output_channels == c.mask_decoder_config.hidden_size
    assert c.prompt_encoder_config.image_embedding_size == 64 // c.vision_config.patch_size


def test_keypoint_matchers_get_image_pairs():
    batch = {"pixel_values": torch.zeros(2, 3, 64, 64)}
    pairs = vision._image_pairs(None, None, torch.Generator().manual_seed(0), batch)
    assert pairs["pixel_values"].shape == (2, 2, 3, 64, 64)
    assert {vision.INPUTS[t] for t in ("lightglue", "superglue", "efficientloftr")} == {
        vision._image_pairs
    }


@pytest.mark.slow
def test_superglue_builds_on_image_pairs():
    model = hf_tasks.build("superglue")
    assert model.make_batch(0)["pixel_values"].shape[:2] == (2, 2)


@pytest.mark.parametrize("model_type", ["timm_wrapper", "edgetam", "dinat"])
def test_a_type_needing_an_uninstalled_library_says_which(model_type, monkeypatch):
    if model_type not in vision.UNSUPPORTED:
        pytest.skip("its library is installed here")
    with pytest.raises(hf.BuildError, match="timm|natten"):
        hf_tasks.build(model_type)


# --- detectors on a randomly initialised backbone -----------------------------------------------

_DETECTORS = ("d_fine", "pp_doclayout_v2", "pp_doclayout_v3", "pp_doclayout_v4", "rt_detr")


@pytest.mark.parametrize("model_type", _DETECTORS + ("rt_detr_v2",))
def test_detectors_train_their_random_backbones_batch_norms(model_type):
    config = hf_tasks.tiny_config(model_type)
    assert config.freeze_backbone_batch_norms is False


def test_a_trained_backbone_norm_keeps_the_detectors_features_and_top_k_apart():
    """Frozen at init, the backbone's batch norms are the identity and its features reach the
    encoder at ~1e-12 (the top-k query selection then picks among ties); trained, they are
    normalised: the encoder's input is O(1e-4) and its query scores far apart."""
    model = hf_tasks.build("pp_doclayout_v3")
    frozen = [m for m in model.modules() if "FrozenBatchNorm" in type(m).__name__]
    assert not frozen
    seen = {}
    detector = model.model.model
    hook = detector.enc_output.register_forward_hook(lambda m, i, o: seen.update(x=i[0]))
    with torch.no_grad():
        model(**model.make_batch(0))
    hook.remove()
    assert seen["x"].abs().mean() > 1e-6


# --- masked classes and recognition heads (losses) ----------------------------------------


def test_a_reading_order_head_labels_only_the_pairs_it_can_order():
    """PP-DocLayout's order logits mask an element and those before it at -1e4: a label is a
    later element, and the last element, which none follows, has no label (ignored)."""
    model = hf_tasks.build("pp_doclayout_v4")
    labels = model.make_batch(0)["label:successor_order_logits"]
    term = next(t for t in model.terms if t.field == "successor_order_logits")
    assert term.allowed is not None
    rows = term.allowed.reshape(-1, term.shape[-1])
    picked = labels.reshape(-1)
    assert all(rows[i, j] for i, j in enumerate(picked.tolist()) if j != losses.IGNORED)


def test_masked_classes_are_never_labels_and_empty_rows_are_ignored():
    n = 5
    logits = torch.randn(2, n, n).masked_fill(torch.tril(torch.ones(n, n)).bool(), -1e4)
    (term,) = losses.plan({"order_logits": logits}, "OBJECT_DETECTION")
    labels = losses.labels([term], torch.Generator().manual_seed(0), 0, {})
    picked = labels["label:order_logits"]
    assert bool((picked[:, -1] == losses.IGNORED).all())  # nothing follows the last
    rows = torch.arange(n - 1)
    assert bool((picked[:, :-1] > rows).all())  # a later element, never a masked one
    loss = losses.term_loss(term, logits, picked, 0)
    assert loss < 10  # no label at -1e4 (whose cross-entropy alone would be 1e4)


def test_a_recognition_head_trains_its_softmax_by_ctc_on_its_log():
    model = hf_tasks.build("pp_ocrv5_mobile_rec")
    (term,) = model.terms
    assert (term.kind, term.probabilities) == ("ctc", True)
    # cross-entropy on the log of the softmax is the cross-entropy of the logits
    z = torch.randn(3, 4, 7)
    label = torch.randint(0, 7, (3, 4))
    ce = losses.Term("p", "ce", (3, 4, 7), probabilities=True)
    expected = torch.nn.functional.cross_entropy(z.reshape(-1, 7), label.reshape(-1))
    assert torch.allclose(losses.term_loss(ce, z.softmax(-1), label, 0), expected)


# --- keypoint matchers -----------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["superglue", "lightglue"])
def test_the_matchers_detector_keeps_its_signal(model_type):
    config = hf_tasks.tiny_config(model_type)
    assert config.keypoint_detector_config.initializer_range == vision._DETECTOR_INIT


@pytest.mark.slow
def test_the_matchers_detector_finds_the_same_keypoints_in_float32_and_float64():
    model = hf_tasks.build("superglue")
    batch = {k: v for k, v in model.make_batch(0).items() if not k.startswith("label:")}
    found = []
    for dtype in (torch.float32, torch.float64):
        m = copy.deepcopy(model.model).to(dtype)
        with torch.no_grad(), float32_as_float64(dtype == torch.float64):
            out = m(pixel_values=batch["pixel_values"].to(dtype))
        found.append((out.mask.sum(-1), out.keypoints.float()))
    (n32, k32), (n64, k64) = found
    assert torch.equal(n32, n64) and int(n32.max()) < 200  # ~75 an image, not ~1850 ties
    assert torch.equal(k32, k64)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["d_fine", "pp_doclayout_v3", "rt_detr"])
def test_a_detector_on_a_random_backbone_passes_parity(model_type):
    out = run_task_type(model_type)
    assert out.status == "pass", out.diagnostics.get("error")
