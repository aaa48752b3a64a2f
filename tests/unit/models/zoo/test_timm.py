"""The timm zoo (trainready/models/zoo/timm.py): every test_* model builds and trains on image
classification in float32 and float64 (float64 end to end), reproducibly; timm's need for
torchvision is met honestly or reported as the reason it is unavailable."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

from tests.support import zoo_checks
from trainready.models.zoo import timm as timm_zoo

if importlib.util.find_spec("timm") is None:
    pytest.skip("the timm extra is not installed", allow_module_level=True)

try:
    NAMES, UNAVAILABLE = timm_zoo.model_names(), ""
except ImportError as e:  # timm is installed, but a torchvision is not: see the last test
    NAMES, UNAVAILABLE = [], str(e)
needs_timm = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE)

# The fast loop checks one model of each kind (evonorm: its `.float()` upcast must stay float64
# in the reference); CI checks them all.
FAST = ("test_vit", "test_resnet", "test_efficientnet_evos")


@needs_timm
@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in NAMES]
)
def test_model_trains_in_float32_and_float64(name):
    zoo_checks.check_model(timm_zoo.build, name)


@needs_timm
def test_classifier_batch_and_output():
    model = timm_zoo.build("test_vit")
    batch = model.make_batch(0)
    assert batch["pixel_values"].shape == (timm_zoo.BATCH, *model.input_size)
    assert int(batch["labels"].min()) >= 0 and int(batch["labels"].max()) < timm_zoo.NUM_CLASSES
    out = model(**batch)
    assert out.output.shape == (timm_zoo.BATCH, timm_zoo.NUM_CLASSES)
    torch.testing.assert_close(
        out.loss, torch.nn.functional.cross_entropy(out.output, batch["labels"])
    )
    assert model.modality == "vision" and model.traits["family"] == "vision_transformer"


@needs_timm
def test_unknown_name_is_a_one_line_error():
    with pytest.raises(ValueError, match="not a timm test model; one of: test_byobnet"):
        timm_zoo.build("resnet50")


@needs_timm
def test_torchvision_ops_stay_unavailable_where_its_extension_did_not_load():
    """Declaring the two op schemas lets torchvision import; it fakes no kernel."""
    import torchvision

    if torchvision.extension._has_ops():
        assert timm_zoo._schema_lib is None  # a working torchvision: nothing declared
        return
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    with pytest.raises(RuntimeError):
        torchvision.ops.nms(boxes, torch.ones(1), 0.5)


def test_without_torchvision_the_reason_is_one_line():
    code = (
        "import sys; sys.modules['torchvision'] = None\n"
        "from trainready.models.zoo import timm as timm_zoo\n"
        "try:\n    timm_zoo.model_names()\nexcept ImportError as e:\n    print('unavailable:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("unavailable: timm does not import"), out
    assert "torchvision" in lines[0]


@needs_timm
def test_transformers_timm_backed_types_build_beside_a_mended_torchvision():
    """transformers imports torchvision whenever it is installed: with PyPI's CUDA torchvision
    beside a CPU torch its vision classes failed to import ("TimmWrapperForImageClassification
    does not import"); `optional.mend_torchvision` runs before any transformers class import."""
    from trainready.suites.parity.models import load

    for model_type in ("timm_wrapper", "fast_vlm", "timm_backbone", "edgetam"):
        subject = load({"source": "hf_task", "model": model_type}, 0)
        assert sum(p.numel() for p in subject.model.parameters()) > 0


@needs_timm
def test_perception_lm_trains_its_pe_tower_on_image_tiles():
    """PerceptionLM reads pixel values as [batch, tiles, C, H, W], and only its base model has
    get_image_features: the tiny PE-Lang tower is fed one tile per sample, its features fill
    the image placeholders (a 4 x 4 grid after the class token), and it is not text-only."""
    from trainready.models.zoo import hf_tasks

    model = hf_tasks.build("perception_lm")
    batch = model.make_batch(0)
    assert model.text_only_reason is None
    assert batch["pixel_values"].shape == (2, 1, 3, 64, 64)
    placeholders = batch["input_ids"] == model.model.config.image_token_id
    assert placeholders.sum(dim=1).tolist() == [16, 16]


@needs_timm
def test_gemma3n_builds_tiny_towers():
    """Gemma 3n's default towers are full size (295M parameters); shrunk, the whole model is
    about 1.3M, its vision tower a MobileNetV5 of the checkpoint's block types."""
    from trainready.models.zoo import hf_causal as hf

    model = hf.build("gemma3n")
    sizes = {
        tower: sum(p.numel() for n, p in model.named_parameters() if f".{tower}." in n)
        for tower in ("vision_tower", "audio_tower", "language_model")
    }
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    assert all(n > 0 for n in sizes.values()), sizes
    kinds = {type(m).__name__ for m in model.modules()}
    assert {"UniversalInvertedResidual", "MobileAttention", "EdgeResidual"} <= kinds
