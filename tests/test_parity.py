"""The parity suite on planted faults (tests/parity_faults.py) and on the case plan."""

import math
from pathlib import Path

import pytest
import torch

from trainready.config import RunConfig
from trainready.core.case import Case
from trainready.core.context import CaseContext
from trainready.core.worker import execute_case
from trainready.probes.numerics import Verdict
from trainready.suites import parity

FAULTS = "tests.parity_faults"
FAULTS_FILE = Path(__file__).with_name("parity_faults.py")


def _line(text: str) -> int:
    """The line of tests/parity_faults.py that contains `text`."""
    lines = FAULTS_FILE.read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if text in ln)


def _run(factory: str, mode: str = "eager", steps: int = 3, dtype: str = "fp32", **options):
    params = {
        "source": "factory",
        "model": factory,
        "factory": f"{FAULTS}:{factory}",
        "mode": mode,
        "dtype": dtype,
        "steps": steps,
    }
    if mode == "compile":
        params["compile_backend"] = "eager"  # dynamo's own analysis, without inductor's codegen
    case = Case("parity", f"custom/{factory}/{mode}/{dtype}", params)
    return execute_case(parity, case, CaseContext("cpu", dtype, 300.0, options=options))


def test_clean_model_passes_with_every_tensor_compared():
    out = _run("clean")
    assert out.status == "pass", out.diagnostics.get("error")
    d = out.diagnostics
    # loss + logits + (grad, after-step) for each of the 8 parameters
    assert d["tensors_compared"] == 2 + 2 * 8 and d["tensors_failing"] == 0
    assert d["curve"]["ok"] and len(d["curve"]["device"]) == 3
    assert d["determinism"]["identical"]
    assert d["same_dtype_baseline"].startswith("the reference rounded")
    assert out.metrics["host_round_trips"] == 0


def test_wrong_backward_in_one_parameter_is_fail_numerics_naming_that_gradient():
    out = _run("wrong_backward")
    assert out.status == "fail_numerics"
    assert out.diagnostics["error"].startswith("down.weight.grad rmse ratio ")
    worst = out.diagnostics["worst"][0]
    assert worst["tensor"] == "down.weight.grad" and not worst["ok"] and worst["ratio"] > 1


def test_cpu_bf16_eager_is_its_own_baseline_so_tensor_errors_are_reported_not_judged():
    """The CPU's bf16 eager run is what other devices' bf16 is judged against: its errors against
    the rounded reference stay visible (worst tensors, ratio, rule); the curve is still judged."""
    out = _run("clean", dtype="bf16", steps=5)
    assert out.status == "pass", out.diagnostics.get("error")
    d = out.diagnostics
    assert d["tensor_rule"] == parity.SELF_BASELINE_NOTE[False]
    assert {w["rule"] for w in d["worst"]} == {parity.REPORTED_RULE}
    assert all(w["ok"] and w["ratio"] > 0 for w in d["worst"])
    assert d["curve"]["ok"] and len(d["curve"]["device"]) == 5


def test_cpu_fp32_eager_is_judged_with_a_compounding_allowance():
    assert _run("clean").diagnostics["tensor_rule"] == parity.SELF_BASELINE_NOTE[True]
    out = _run("wrong_backward")  # a 2% skew is far past any compounding of fp32 roundings
    assert out.status == "fail_numerics"
    assert out.diagnostics["worst"][0]["rule"] == parity.COMPOUNDED_RULE


@pytest.mark.parametrize(
    ("rmse", "ok"), [(0.9, True), (5.0, True), (parity.COMPOUNDING - 0.1, True), (9.0, False)]
)
def test_compounding_allowance_bounds_an_fp32_gradient(rmse, ok):
    """Against one rounding (bound 1.0) a correct network's gradient may be several times past;
    the allowance takes it up to COMPOUNDING, and no further."""
    v = Verdict(rmse <= 1.0, "rmse_vs_rounded", {"rmse": rmse}, threshold=1.0)
    got = parity._self_baseline("w.grad", v, "fp32")
    assert (got.ok, got.rule, got.threshold) == (ok, parity.COMPOUNDED_RULE, parity.COMPOUNDING)
    assert parity._self_baseline("w.after_step", v, "fp32") is v  # the step is judged as ever
    assert parity._self_baseline("w.grad", v, "bf16").rule == parity.REPORTED_RULE


def test_a_float64_reference_that_is_not_finite_is_unsupported_not_blamed_on_the_device():
    out = _run("nan_in_float64")
    assert out.status == "unsupported"
    assert out.diagnostics["reason"].startswith(
        "no float64 CPU reference: its loss is nan at step 0"
    )


def test_cpu_round_trip_is_reported_with_the_op_and_line():
    out = _run("cpu_round_trip")
    calls = out.diagnostics["ops"]["host_calls"]
    ops = {c["op"] for c in calls}
    assert {"Tensor.cpu", "Tensor.to(cpu)"} <= ops
    line = _line("h = h.cpu().to(ids.device)")
    assert all(c["site"].endswith(f"parity_faults.py:{line}") for c in calls)
    assert out.metrics["host_round_trips"] == 2


def test_item_in_forward_is_a_graph_break_with_reason_and_stack():
    out = _run("item_in_forward", mode="compile")
    c = out.diagnostics["compile"]
    assert c["graph_breaks"] >= 1
    assert list(c["break_reasons"]) == [
        "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    ]
    brk = c["breaks"][0]
    assert brk["where"].endswith(f"parity_faults.py:{_line('scale = h.detach()')}")
    assert "scale = h.detach().abs().max().item()" in brk["user_stack"][-1]
    assert out.metrics["graph_breaks"] >= 1


def test_item_in_forward_eager_is_a_host_round_trip():
    out = _run("item_in_forward")
    assert [c["op"] for c in out.diagnostics["ops"]["host_calls"]] == ["Tensor.item"]
    assert out.diagnostics["ops"]["scalar_reads"] == 1


def test_crash_only_when_compiled_is_fail_compile():
    eager = _run("crash_when_compiled")
    assert eager.status == "pass"
    out = _run("crash_when_compiled", mode="compile")
    assert out.status == "fail_compile"
    assert "same reduction dim" in out.diagnostics["error"]


def test_a_factory_that_does_not_exist_fails_the_case_with_its_name():
    out = _run("no_such_model")
    assert out.status == "fail_run" and "no_such_model" in out.diagnostics["error"]


def test_hf_type_that_cannot_build_is_unsupported_with_the_reason():
    case = Case(
        "parity",
        "hf/nope/eager/fp32",
        {"source": "hf", "model": "nope", "mode": "eager", "dtype": "fp32", "steps": 2},
    )
    out = execute_case(parity, case, CaseContext("cpu", "fp32", 60.0))
    assert out.status == "unsupported"
    assert "not a causal-LM type" in out.diagnostics["reason"]
    assert out.diagnostics["traits"] == {}  # nothing to read them from


def test_unbuildable_hf_type_keeps_the_traits_its_config_declares():
    name = "gemma4_unified_assistant"  # its config builds; the model is no standalone LM
    case = Case(
        "parity",
        f"hf/{name}/eager/fp32",
        {"source": "hf", "model": name, "mode": "eager", "dtype": "fp32"},
    )
    out = execute_case(parity, case, CaseContext("cpu", "fp32", 60.0))
    assert out.status == "unsupported" and "not a standalone LM" in out.diagnostics["reason"]
    assert out.diagnostics["traits"]["attention"] == "sliding"


# --- --baseline ------------------------------------------------------------------------------


def _store_run(path: Path, case_id: str, outcome) -> str:
    from trainready.core.case import Result
    from trainready.core.store import RunRecord, Store

    suite, _, name = case_id.partition("/")
    with Store(path) as store:
        store.add_run(RunRecord("base-run", 0.0, ["parity"], "cuda:0", "quick", env={}))
        store.add_result(
            "base-run",
            Result(Case(suite, name, {}), outcome.status, diagnostics=outcome.diagnostics),
        )
    return "base-run"


def test_baseline_run_that_agrees_passes_and_one_that_diverges_fails(tmp_path):
    first = _run("clean")
    case_id = "parity/custom/clean/eager/fp32"
    run_id = _store_run(tmp_path / "same", case_id, first)
    again = _run("clean", baseline=f"{tmp_path / 'same'}:{run_id}")
    cmp = again.diagnostics["baseline"]
    assert again.status == "pass" and cmp["ok"] is True and cmp["run_id"] == run_id
    assert cmp["curve"]["max_rel_dev"] == 0.0 and cmp["logits"]["max_abs"] == 0.0

    first.diagnostics["summary"]["loss_curve"][2] *= 1.5  # the other device went astray at step 2
    _store_run(tmp_path / "off", case_id, first)
    off = _run("clean", baseline=str(tmp_path / "off"))
    assert off.status == "fail_numerics"
    assert "diverges from baseline" in off.diagnostics["error"]
    assert off.diagnostics["baseline"]["curve"]["first_diverging_step"] == 2
    # the baseline's own curve is kept, so the report can draw it beside this run's
    assert (
        off.diagnostics["baseline"]["baseline_curve"] == first.diagnostics["summary"]["loss_curve"]
    )


def test_baseline_without_the_case_says_so_and_does_not_fail(tmp_path):
    _store_run(tmp_path / "b", "parity/custom/other/eager/fp32", _run("clean"))
    out = _run("clean", baseline=str(tmp_path / "b"))
    assert out.status == "pass"
    assert out.diagnostics["baseline"] == {
        "ok": None,
        "run_id": "base-run",
        "device": "cuda:0",
        "missing": "case not in baseline",
    }


# --- the plan ----------------------------------------------------------------------------------


def _cases(preset="quick", dtype=None, **options):
    return parity.cases(RunConfig(suites=["parity"], preset=preset, dtype=dtype, options=options))


def test_quick_plan_is_hf_eager_fp32_and_synthetic_one_axis_both_modes():
    from trainready.models import hf, synthetic

    cases = _cases()
    hf_cases = [c for c in cases if c.params["source"] == "hf"]
    syn = [c for c in cases if c.params["source"] == "synthetic"]
    assert len(hf_cases) == len(hf.model_types())
    assert {(c.params["mode"], c.params["dtype"]) for c in hf_cases} == {("eager", "fp32")}
    assert len(syn) == 2 * len(synthetic.variants("quick"))
    assert {c.params["compile_backend"] for c in syn if c.params["mode"] == "compile"} == {
        "inductor"
    }
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)) and "parity/hf/llama/eager/fp32" in ids


def test_full_plan_has_both_dtypes_and_dtype_flag_narrows_it():
    full = _cases("full", zoo="synthetic")
    assert {c.params["dtype"] for c in full} == {"fp32", "bf16"}
    assert {c.params["dtype"] for c in _cases("full", dtype="bf16", zoo="synthetic")} == {"bf16"}


def test_user_factories_and_backend_land_in_the_cases():
    cases = _cases(zoo="none", models=f"{FAULTS}:clean", compile_backend="aot_eager")
    assert [c.id for c in cases] == [
        f"parity/custom/{FAULTS}:clean/eager/fp32",
        f"parity/custom/{FAULTS}:clean/compile/fp32",
    ]
    assert cases[1].params["compile_backend"] == "aot_eager"


def test_without_transformers_the_zoo_is_one_unsupported_case(monkeypatch):
    from trainready.models import hf

    def missing():
        raise ImportError("No module named 'transformers'")

    monkeypatch.setattr(hf, "model_types", missing)
    cases = _cases(zoo="hf")
    assert [c.id for c in cases] == ["parity/hf/unavailable"]
    out = execute_case(parity, cases[0], CaseContext("cpu", "fp32", 60.0))
    assert out.status == "unsupported" and "needs transformers" in out.diagnostics["reason"]


# --- verdict helpers ---------------------------------------------------------------------------


def test_judge_names_a_gradient_missing_on_the_device():
    ref = {"loss": torch.tensor(1.0), "w.grad": torch.ones(2)}
    ok, verdicts = parity.judge(ref, {"loss": torch.tensor(1.0)}, None, "fp32")
    assert not ok and not verdicts["w.grad"].ok


def test_describe_uses_rmse_over_the_threshold():
    v = Verdict(False, "rmse_vs_rounded", {"rmse": 7.3e-6, "tol_ratio": 9.0}, threshold=1e-6)
    entry = parity._worst({"layers.1.mlp.w2.grad": v}, 1)[0]
    assert parity.describe(entry) == "layers.1.mlp.w2.grad rmse ratio 7.3"
    assert math.isclose(entry["ratio"], 7.3)


@pytest.mark.parametrize("rule", ["shape", "nonfinite"])
def test_structural_failures_rank_worst(rule):
    bad = Verdict(False, rule, {})
    fine = Verdict(True, "allclose", {"tol_ratio": 0.5})
    assert parity._worst({"a": fine, "b": bad}, 2)[0]["tensor"] == "b"
