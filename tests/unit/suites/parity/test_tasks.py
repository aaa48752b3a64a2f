"""Parity over task models: the engine on a batch dict, the transformers task zoo (a few types
per modality), heads and inputs, and the case plan's zoo and modality selection."""

import pytest
import torch

from trainready.core.case import Case
from trainready.core.config import RunConfig
from trainready.core.context import CaseContext
from trainready.core.worker import execute_case
from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo import hf_tasks
from trainready.suites.parity import plan as parity_plan
from trainready.suites.parity import suite as parity

FAULTS = "tests.support.parity_task_faults"


def _run(params: dict, case_id: str, steps: int = 2):
    params = {"mode": "eager", "dtype": "fp32", "steps": steps, **params}
    if params["mode"] == "compile":
        params.setdefault("compile_backend", "eager")  # dynamo's analysis, no inductor codegen
    case = Case("parity", case_id, params)
    return execute_case(parity, case, CaseContext("cpu", "fp32", 300.0))


def _factory(name: str, **params):
    p = {"source": "factory", "model": name, "factory": f"{FAULTS}:{name}", **params}
    return _run(p, f"custom/{name}/{p.get('mode', 'eager')}/fp32", steps=3)


# --- the engine on task models ------------------------------------------------------------------


def test_a_clean_task_model_passes_with_every_tensor_compared():
    out = _factory("clean")
    assert out.status == "pass", out.diagnostics.get("error")
    # loss, logits, and each of the 4 parameters' gradient and after-step value
    assert out.diagnostics["tensors_compared"] == 2 + 2 * 4
    assert out.diagnostics["modality"] == "vision"


def test_a_fault_in_the_low_precision_path_is_fail_numerics():
    out = _factory("low_precision_bug")
    assert out.status == "fail_numerics"
    assert "logits" in out.diagnostics["error"] or "grad" in out.diagnostics["error"]


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_the_same_loss_computed_another_way_passes(mode):
    out = _factory("log_softmax_loss", mode=mode)
    assert out.status == "pass", out.diagnostics.get("error")


def test_a_model_that_casts_to_float32_has_no_float64_reference():
    out = _factory("float32_inside")
    assert out.status == "unsupported"
    assert out.diagnostics["reason"].startswith("no float64 CPU reference: the model computes")
    assert out.diagnostics["modality"] == "vision"  # what the case found stays


def test_the_reference_batch_is_float64_and_integer_inputs_stay_integers():
    from trainready.suites.parity.engine import Spec, TaskData, on_device

    data = TaskData({"x": torch.ones(2), "labels": torch.ones(2, dtype=torch.long)})
    ref = on_device(data, Spec("cpu", "fp64", 1)).batch
    low = on_device(data, Spec("cpu", "bf16", 1)).batch  # autocast lowers compute, not inputs
    assert ref["x"].dtype == torch.float64 and low["x"].dtype == torch.float32
    assert ref["labels"].dtype == low["labels"].dtype == torch.long


# --- the transformers task zoo ------------------------------------------------------------------


def test_task_types_are_the_types_with_a_head_and_no_causal_lm():
    types = hf_tasks.model_types()
    assert types == sorted(set(types)) and len(types) > 300
    assert not set(types) & set(hf.model_types())


@pytest.mark.parametrize(
    ("model_type", "task"),
    [
        ("t5", "SEQ_TO_SEQ_CAUSAL_LM"),  # before its classification and QA heads
        ("albert", "MASKED_LM"),
        ("hubert", "CTC"),  # before audio classification
        ("clip", "ZERO_SHOT_IMAGE_CLASSIFICATION"),  # contrastive, before the vision-only head
        ("llava", "IMAGE_TEXT_TO_TEXT"),
        ("resnet", "IMAGE_CLASSIFICATION"),  # before the backbone
    ],
)
def test_the_head_is_the_first_of_the_priority_order(model_type, task):
    assert hf_tasks.head(model_type)[0] == task


def test_an_unknown_type_is_a_build_error_naming_it():
    with pytest.raises(hf.BuildError, match="'gpt-17' has no task head"):
        hf_tasks.head("gpt-17")


def test_backbone_stages_and_mrope_sections_follow_the_shrunk_sizes():
    d = {"depths": [2, 2], "hidden_sizes": [32, 64], "out_features": ["stage2", "stage3", "stage4"]}
    hf_tasks._out_stages(d)
    assert d["depths"] == [2, 2, 2] and d["hidden_sizes"] == [32, 64, 64]
    assert d["out_indices"] == [1, 2, 3] and d["out_features"] == ["stage1", "stage2", "stage3"]
    vit = {"num_hidden_layers": 2, "out_indices": [3, 6, 9, 12]}
    hf_tasks._out_stages(vit)
    assert vit["num_hidden_layers"] == 4 and vit["out_indices"] == [1, 2, 3, 4]
    stemless = {"depths": [2, 2], "stage_names": ["stage1", "stage2"], "out_indices": [1]}
    hf_tasks._out_stages(stemless)  # PVTv2: indices count from its first stage
    assert stemless["out_indices"] == [1] and stemless["out_features"] == ["stage2"]
    text = {"head_dim": 16, "rope_parameters": {"mrope_section": [16, 24, 24]}}
    hf_tasks._mrope(text)
    assert sum(text["rope_parameters"]["mrope_section"]) == 8


@pytest.mark.parametrize(
    ("model_type", "modality", "terms"),
    [
        ("albert", "text-encoder", ["ce:logits"]),
        ("t5", "seq2seq", ["ce:logits"]),
        ("vit", "vision", ["ce:logits"]),
        ("wav2vec2", "audio", ["ctc:logits"]),
        ("vivit", "video", ["ce:logits"]),
        ("llava", "multimodal", ["ce:logits"]),
        ("detr", "vision", ["ce:logits", "square:pred_boxes"]),
    ],
)
def test_a_type_per_modality_passes_eager(model_type, modality, terms):
    model = hf_tasks.build(model_type)
    assert [f"{t.kind}:{t.field}" for t in model.terms] == terms
    assert model.text_only_reason is None  # llava gets its image and placeholder tokens
    out = _run({"source": "hf_task", "model": model_type}, f"hf/{model_type}/eager/fp32")
    assert out.status == "pass", out.diagnostics.get("error")
    assert out.diagnostics["modality"] == modality
    n_params = sum(1 for p in model.parameters() if p.requires_grad)
    assert out.diagnostics["tensors_compared"] >= 2 + n_params


def test_a_task_type_compiled_passes():
    p = {"source": "hf_task", "model": "vit", "mode": "compile"}
    out = _run(p, "hf/vit/compile/fp32")
    assert out.status == "pass", out.diagnostics.get("error")
    assert "graph_breaks" in out.diagnostics["compile"]


def test_an_unbuildable_task_type_is_unsupported_with_the_reason(monkeypatch):
    monkeypatch.setitem(hf_tasks.UNSUPPORTED, "vit", "planted: cannot be trained tiny")
    out = _run({"source": "hf_task", "model": "vit"}, "hf/vit/eager/fp32")
    assert out.status == "unsupported" and "planted" in out.diagnostics["reason"]
    assert out.diagnostics["modality"] == "vision"


# --- the plan -----------------------------------------------------------------------------------


def _cases(preset="quick", **options):
    return parity.cases(RunConfig(suites=["parity"], preset=preset, options=options))


def test_quick_keeps_the_causal_zoo_and_samples_each_modality():
    cases = _cases(zoo="hf")
    causal = [c for c in cases if c.params["source"] == "hf"]
    tasks = [c for c in cases if c.params["source"] == "hf_task"]
    assert len(causal) == len(hf.model_types())
    assert sorted(c.params["model"] for c in tasks) == sorted(parity_plan.QUICK_TASK_TYPES)
    assert "parity/hf/llama/eager/fp32" in [c.id for c in causal]  # ids stay stable
    assert "parity/hf/t5/eager/fp32" in [c.id for c in tasks]


def test_standard_covers_every_task_type_in_both_modes():
    tasks = [c for c in _cases("standard", zoo="hf") if c.params["source"] == "hf_task"]
    assert len(tasks) == 2 * len(hf_tasks.model_types())


def test_a_modality_in_zoo_narrows_the_model_zoos():
    cases = _cases("standard", zoo="hf,audio", modes="eager")
    assert cases and all(c.params["source"] in ("hf", "hf_task") for c in cases)
    assert {"wav2vec2", "speech_to_text"} <= {c.params["model"] for c in cases}
    assert "llama" not in {c.params["model"] for c in cases}


def test_hf_types_selects_causal_and_task_types_alike():
    cases = _cases(zoo="hf", hf_types="llama,vit")
    assert [(c.params["model"], c.params["source"]) for c in cases] == [
        ("llama", "hf"),
        ("vit", "hf_task"),
    ]


def test_a_library_zoo_that_does_not_import_is_one_unavailable_case(monkeypatch):
    from trainready.suites.parity import models as parity_models

    def missing(source):
        raise ImportError(f"No module named {source!r}")

    monkeypatch.setattr(parity_plan, "zoo_module", missing)
    cases = _cases(zoo="timm")
    assert [c.id for c in cases] == ["parity/timm/unavailable"]
    out = execute_case(parity, cases[0], CaseContext("cpu", "fp32", 60.0))
    assert out.status == "unsupported" and "needs timm" in out.diagnostics["reason"]
    assert out.diagnostics["modality"] == "vision"
    assert parity_models.ZOOS["timm"] == "trainready.models.zoo.timm"


def test_labels_never_pick_a_class_the_model_masks_to_minus_inf():
    from trainready.models.zoo import losses

    term = losses.Term("start_logits", "ce", (2, 6))
    finite = {"start_logits": torch.tensor([[False, False, True, True, True, True]] * 2)}
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        labels = losses.labels([term], gen, 0, finite)["label:start_logits"]
        assert labels.shape == (2,) and (labels >= 2).all()


def test_a_multimodal_lm_fed_its_text_alone_says_so(monkeypatch):
    from trainready.models.zoo import inputs as hf_inputs

    def no_images(*args, **kwargs):
        raise ValueError("planted: no image features")

    monkeypatch.setattr(hf_inputs, "_image_text", no_images)
    model = hf_tasks.build("llava")
    assert model.text_only_reason == "ValueError: planted: no image features"
    out = _run({"source": "hf_task", "model": "llava"}, "hf/llava/eager/fp32")
    assert "planted: no image features" in out.diagnostics["text_only"]


def test_a_task_model_without_its_batch_or_forward_cannot_be_built():
    from trainready.models.task import TaskModel

    class NoBatch(TaskModel):
        def forward(self, **batch):
            return None

    with pytest.raises(TypeError, match="abstract"):
        NoBatch()


def test_a_logit_at_its_dtypes_lowest_is_a_masked_class():
    """Chameleon masks its image-code logits at finfo(dtype).min, which float32 and float64 do
    not share: such a logit becomes -inf (never a label, compared as masked); others stay."""
    for dtype in (torch.float32, torch.float64):
        logits = torch.tensor([[0.5, torch.finfo(dtype).min, -3.0]], dtype=dtype)
        out = hf_tasks._fields({"logits": logits, "pred_boxes": logits.clone()})
        assert out["logits"].tolist() == [[0.5, float("-inf"), -3.0]]
        assert torch.equal(out["pred_boxes"], logits)  # not a logits field: left alone


def test_a_head_without_logits_trains_its_prediction_and_masks_and_skips_selections():
    from trainready.models.zoo.losses import plan

    x = torch.zeros(2, 3)
    terms = plan({"last_hidden_state": x, "mean_predictions": x}, "TIME_SERIES_PREDICTION")
    assert [(t.field, t.kind) for t in terms] == [("mean_predictions", "square")]
    # SAM2: a one-class score's cross-entropy trains nothing: it is trained as a prediction (its
    # square), and the masks beside it.
    one = torch.zeros(2, 1, 1)
    terms = plan({"object_score_logits": one, "iou_scores": x, "pred_masks": x}, "MASK_GENERATION")
    assert [(t.field, t.kind) for t in terms] == [
        ("object_score_logits", "square"),
        ("pred_masks", "square"),
    ]
    # SuperPoint's keypoints are picked by a threshold and NMS: no gradient, never trained.
    terms = plan({"keypoints": x, "scores": x}, "KEYPOINT_DETECTION")
    assert [t.field for t in terms] == ["scores"]
