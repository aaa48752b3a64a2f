"""Task-zoo fixes of text and document encoders (`task_fixes/text_docs.py`) and the float64
reference path (`models/zoo/float64.py`): the inputs and config fields a fix adds, and that the
fixed types pass parity."""

import copy

import pytest
import torch

from tests.support.zoo_checks import run_task_type
from trainready.models.task import cast_batch
from trainready.models.zoo import hf_tasks
from trainready.models.zoo.float64 import float32_as_float64, float_dtypes


def _valid_boxes(bbox: torch.Tensor, scale: float) -> bool:
    x0, y0, x1, y1 = bbox.unbind(-1)
    return bool((x0 <= x1).all() and (y0 <= y1).all() and bbox.min() >= 0 and bbox.max() <= scale)


@pytest.mark.slow
def test_lilt_gets_word_boxes_and_a_width_its_six_layout_parts_divide():
    model = hf_tasks.build("lilt")
    assert model.model.config.hidden_size % 6 == 0
    batch = model.make_batch(0)
    assert batch["bbox"].shape == (*batch["input_ids"].shape, 4)
    assert batch["bbox"].dtype == torch.long and _valid_boxes(batch["bbox"], 1000)
    out = run_task_type("lilt")
    assert out.status == "pass", out.diagnostics.get("error") or out.diagnostics.get("reason")


def test_esmc_has_no_grouped_query_attention_and_passes():
    config = hf_tasks.tiny_config("esmc")
    assert config.num_key_value_heads == config.num_attention_heads
    out = run_task_type("esmc")
    assert out.status == "pass", out.diagnostics.get("error") or out.diagnostics.get("reason")


@pytest.mark.slow
def test_layoutlmv3_gets_boxes_and_its_page_image():
    model = hf_tasks.build("layoutlmv3")
    config = model.model.config
    assert 4 * config.coordinate_size + 2 * config.shape_size == config.hidden_size
    batch = model.make_batch(0)
    assert _valid_boxes(batch["bbox"], 1000)
    assert batch["pixel_values"].shape[-1] == config.input_size
    out = run_task_type("layoutlmv3")
    assert out.status == "pass", out.diagnostics.get("error") or out.diagnostics.get("reason")


@pytest.mark.slow
def test_lxmert_gets_region_features_and_their_boxes():
    model = hf_tasks.build("lxmert")
    batch = model.make_batch(0)
    feats, pos = batch["visual_feats"], batch["visual_pos"]
    assert feats.shape[-1] == model.model.config.visual_feat_dim
    assert pos.shape == (*feats.shape[:2], 4) and _valid_boxes(pos, 1.0)
    out = run_task_type("lxmert")
    assert out.status == "pass", out.diagnostics.get("error") or out.diagnostics.get("reason")


# --- the float64 reference -----------------------------------------------------------------------


def test_constants_made_without_a_dtype_are_float64_in_the_reference_mode():
    default = torch.get_default_dtype()
    with float32_as_float64(True):
        assert torch.full((2,), float("-inf")).dtype == torch.float64
        assert torch.tensor(0.5).dtype == torch.float64
        assert torch.arange(4).float().dtype == torch.float64
    assert torch.get_default_dtype() == default  # restored on exit
    with float32_as_float64(False):
        assert torch.full((2,), 1.0).dtype == default


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["grounding-dino", "mra"])
def test_a_task_model_computes_only_in_float64_under_the_reference_mode(model_type):
    # grounding-dino fills its logits with torch.full(..., -inf) (no dtype); mra builds a
    # float32 tensor: under the mode both stay float64, forward and backward.
    task = hf_tasks.build(model_type)
    model = copy.deepcopy(task).double()
    batch = cast_batch(task.make_batch(0), "cpu", torch.float64)

    def step():
        with float32_as_float64(True):
            out = model(**batch)
        out.loss.backward()

    assert set(float_dtypes(step)) == {torch.float64}
