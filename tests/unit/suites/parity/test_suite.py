"""The parity suite on planted faults (tests/support/parity_faults.py) and on the case plan."""

import math
from pathlib import Path

import pytest
import torch

from tests.support import paths
from trainready.core.case import Case
from trainready.core.config import RunConfig
from trainready.core.context import CaseContext
from trainready.core.worker import execute_case
from trainready.probes.numerics import Verdict
from trainready.suites.parity import suite as parity
from trainready.suites.parity import verdicts as parity_verdicts

FAULTS = "tests.support.parity_faults"
FAULTS_FILE = paths.SUPPORT / "parity_faults.py"


def _line(text: str) -> int:
    """The line of tests/support/parity_faults.py that contains `text`."""
    lines = FAULTS_FILE.read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if text in ln)


def _run(factory: str, mode: str = "eager", steps: int = 3, dtype: str = "fp32", **options):
    ctx = CaseContext("cpu", dtype, 300.0, options=options)
    return execute_case(parity, _case(factory, mode, steps, dtype), ctx)


def _case(factory: str, mode: str = "eager", steps: int = 3, dtype: str = "fp32") -> Case:
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
    return Case("parity", f"custom/{factory}/{mode}/{dtype}", params)


def test_clean_model_passes_with_every_tensor_compared():
    out = _run("clean")
    assert out.status == "pass", out.diagnostics.get("error")
    d = out.diagnostics
    # loss + logits + (grad, after-step) for each of the 8 parameters
    assert d["tensors_compared"] == 2 + 2 * 8 and d["tensors_failing"] == 0
    assert d["curve"]["ok"] and len(d["curve"]["device"]) == 3
    assert d["determinism"]["identical"]
    assert d["same_dtype_baseline"].startswith("two CPU runs at fp32 rounding independently")
    assert d["independent_rounding"]["gemm"] > 0
    assert out.metrics["host_round_trips"] == 0


def test_wrong_backward_in_one_parameter_is_fail_numerics_naming_that_gradient():
    out = _run("wrong_backward")
    assert out.status == "fail_numerics"
    assert out.diagnostics["error"].startswith("down.weight.grad rmse ratio ")
    worst = out.diagnostics["worst"][0]
    assert worst["tensor"] == "down.weight.grad" and not worst["ok"] and worst["ratio"] > 1
    assert worst["rule"] == "noise_vs_independent"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_cpu_eager_is_judged_against_independently_rounded_runs(dtype):
    """Deliberately stricter than before: the CPU's own bf16 run used to be reported, not
    judged, and its fp32 run judged against 8x a rounded reference (whose atol floor let a 10%
    error in a small gradient through). Now both are judged against the disagreement of two runs
    whose roundings are independent: the clean model passes, and the 2% weight-gradient skew --
    which used to crash under bf16 autocast, so bf16 was never fault-tested -- fails."""
    clean = _run("clean", dtype=dtype, steps=5)
    assert clean.status == "pass", clean.diagnostics.get("error")
    d = clean.diagnostics
    assert {w["rule"] for w in d["worst"]} <= {"noise_vs_independent", "noise_vs_cpu_optimizer"}
    assert all(w["ok"] and 0 < w["ratio"] < 1 for w in d["worst"])
    assert d["curve"]["ok"] and d["curve"]["rel_tol"] < 5e-3  # noise-derived, not 5e-2
    wrong = _run("wrong_backward", dtype=dtype, steps=5)
    assert wrong.status == "fail_numerics", wrong.diagnostics.get("worst")
    assert wrong.diagnostics["worst"][0]["tensor"] == "down.weight.grad"


def test_the_allowance_multiplies_the_noise_never_the_floor():
    """A gradient of rms 6.7e-5 with a 10% error: the old fp32 floor (8 x atol/10 = 8e-6) was
    larger than the error (6.7e-6); the relative floor is one rounding of the tensor."""
    from trainready.probes.numerics import ALLOWANCE, UNIT_ROUNDOFF, judge, sampling

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(64, 64, dtype=torch.float64, generator=g) * 6.7e-5
    wrong = (ref * 1.1).float()
    v = judge(ref, wrong, noise=2e-12, dtype="fp32")
    assert not v.ok and v.rule == "noise_vs_cpu"
    floor = UNIT_ROUNDOFF["fp32"] * v.errors["ref_rms"]
    assert v.threshold == pytest.approx(ALLOWANCE["fp32"] * sampling(64 * 64) * 2e-12 + floor)
    assert v.errors["floor"] == pytest.approx(floor) and floor < 1e-11
    assert judge(ref, ref.float(), noise=2e-12, dtype="fp32").ok  # one rounding passes


def test_a_step_that_raises_only_under_the_ops_probe_runs_plainly_its_ops_unrecorded():
    out = _run("raises_under_a_dispatch_mode")
    assert out.status == "pass", out.diagnostics.get("error")
    ops = out.diagnostics["ops"]
    why = "none: the first step raised only under the ops probe's dispatch mode (RuntimeError: "
    assert ops["recorded"] is False and ops["dispatch_source"].startswith(why)
    assert ops["fallback_source"].startswith(why) and ops["ops"] == {}
    assert "aten_ops" not in out.metrics and "fallback_ops" not in out.metrics  # no claim


def test_a_step_that_raises_plainly_too_fails_with_the_plain_error():
    out = _run("raises_in_forward")
    assert out.status == "fail_run"
    assert "planted: the forward raises" in out.diagnostics["error"]


def test_fp64_on_the_cpu_is_numerics_not_judged_never_a_pass():
    out = _run("clean", dtype="fp64")
    assert out.status == "unsupported"
    assert out.diagnostics["reason"].startswith("numerics not judged: the device is the CPU")
    assert out.diagnostics["numerics_judged"] is False
    assert "worst" not in out.diagnostics


def test_independent_runs_that_fail_leave_the_numerics_not_judged(monkeypatch):
    from trainready.probes import perturb

    def broken(self, func, args, kwargs):
        raise RuntimeError("no kernel one precision up")

    # every fp32 reordering goes through it, intercepted or under the dispatch mode
    monkeypatch.setattr(perturb.IndependentRounding, "_reordered", broken)
    out = _run("clean")
    assert out.status == "unsupported"
    assert "independently rounded runs failed: RuntimeError" in out.diagnostics["reason"]


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
    ctx = CaseContext("cpu", "fp32", 300.0)
    out = execute_case(parity, _case("crash_when_compiled", mode="compile"), ctx)
    assert out.status == "fail_compile"
    assert ctx.current_phase == "compile"  # where it broke, not the CPU runs after it
    assert "same reduction dim" in out.diagnostics["error"]
    # Not a layout bug: the eager first step, checked op by op, names no op (probes/layouts.py).
    layouts = out.diagnostics["layouts"]
    assert layouts["mismatches"] == [] and layouts["checked_ops"] >= 10
    assert out.diagnostics["error"].endswith(
        f"; the device's output layouts match PyTorch's meta kernels ({layouts['checked_calls']} "
        f"calls of {layouts['checked_ops']} ops checked)"
    )


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
    from trainready.models import synthetic
    from trainready.models.zoo import hf_causal as hf

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
    from trainready.models.zoo import hf_causal as hf

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
    ok, verdicts = parity_verdicts.judge(ref, {"loss": torch.tensor(1.0)}, {"loss": 0.0}, "fp32")
    assert not ok and not verdicts["w.grad"].ok


def test_describe_uses_rmse_over_the_threshold():
    v = Verdict(False, "noise_vs_cpu", {"rmse": 7.3e-6}, threshold=1e-6)
    entry = parity_verdicts.worst({"layers.1.mlp.w2.grad": v}, 1)[0]
    assert parity_verdicts.describe(entry) == "layers.1.mlp.w2.grad rmse ratio 7.3"
    assert math.isclose(entry["ratio"], 7.3)


def test_a_tensor_allowed_nothing_is_infinitely_over_and_says_why():
    # owlv2's objectness bias gradient: exactly 0 in float64 and on the CPU, 7.9e-9 compiled
    # (it read "rmse ratio 0", a failure that looked like a pass)
    v = Verdict(False, "noise_vs_cpu", {"rmse": 7.9e-9, "ref_rms": 0.0}, threshold=0.0)
    exact = Verdict(True, "noise_vs_cpu", {"rmse": 0.0, "ref_rms": 0.0}, threshold=0.0)
    entry, other = parity_verdicts.worst({"b.grad": v, "c.grad": exact}, 2)
    assert entry["ratio"] == math.inf and other["ratio"] == 0.0
    assert parity_verdicts.describe(entry) == (
        "b.grad rmse 7.9e-09 where the reference and the baseline are exactly 0"
    )


@pytest.mark.parametrize("rule", ["shape", "nonfinite"])
def test_structural_failures_rank_worst(rule):
    bad = Verdict(False, rule, {})
    fine = Verdict(True, "allclose", {"tol_ratio": 0.5})
    assert parity_verdicts.worst({"a": fine, "b": bad}, 2)[0]["tensor"] == "b"


# --- MoE: routing replayed, decisions judged on their own ---------------------------------------


def test_moe_eager_pins_the_devices_routing_and_passes():
    """A bf16 router's logits round to ties and a run flips some of its top-k decisions against
    float64, moving the expert gradients by far more than rounding noise: every run replays the
    device's decisions, which are judged on their own (near-ties: honest)."""
    from trainready.models.synthetic import BASE

    config = {**BASE, "moe": "shared+routed"}
    params = {"source": "synthetic", "model": "moe", "config": config, "mode": "eager",
              "dtype": "bf16", "steps": 20}  # fmt: skip
    case = Case("parity", "synthetic/moe=shared+routed/eager/bf16", params)
    out = execute_case(parity, case, CaseContext("cpu", "bf16", 300.0))
    assert out.status == "pass", out.diagnostics.get("error")
    routing = out.diagnostics["routing"]
    assert routing["pinned"] and routing["calls"] == 2 * 20  # two MoE layers, 20 steps
    assert routing["flipped"] > 0 and routing["beyond_noise"] == 0
    from trainready.models import synthetic

    n_params = len(list(synthetic.build(config).named_parameters()))
    assert out.diagnostics["tensors_compared"] == 3 + 2 * n_params  # the aux loss included


def test_routing_records_and_forces_both_topk_spellings():
    """Routers call `torch.topk` or `Tensor.topk` from Python: both are recorded, and replayed
    calls return the recorded indices with the values they select (a `return_types.topk`)."""
    from trainready.probes.routing import Routing

    scores = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    with Routing() as recorder:
        torch.topk(scores, 1, dim=-1)
        scores.topk(2)
    assert [t.tolist() for t in recorder.log] == [[[0], [1]], [[0, 2], [1, 2]]]
    forced = [torch.tensor([[2], [0]]), torch.tensor([[1, 2], [0, 2]])]
    with Routing(replay=forced) as replay:
        one = torch.topk(scores, 1, dim=-1)
        two = scores.topk(2)
    assert one.indices.tolist() == [[2], [0]] and one.values.tolist() == [[2.0], [0.0]]
    assert two.indices.tolist() == [[1, 2], [0, 2]] and two.values.tolist() == [
        [1.0, 2.0],
        [0.0, 4.0],
    ]
    assert replay.diverged is None and len(replay.calls) == 2


def test_routing_flips_within_the_noise_are_honest_and_far_ones_are_not():
    from trainready.probes.routing import FLIP_ALLOWANCE, Call, Routing, flips

    scores = torch.tensor([[0.50, 0.30, 0.2000], [0.40, 0.35, 0.2500]], dtype=torch.float64)
    natural = torch.tensor([[0], [0]])

    def runs(forced, noise):
        ref = Routing(replay=[])
        ref.calls = [Call(scores, natural, forced, True)]
        a, b = Routing(replay=[]), Routing(replay=[])
        a.calls = [Call(scores + noise, natural, forced, True)]
        b.calls = [Call(scores - noise, natural, forced, True)]
        return ref, [a, b]

    # Row 1 flips to expert 1, 0.05 behind, with a score noise of 0.02: honest.
    ref, base = runs(torch.tensor([[0], [1]]), 0.02)
    honest = flips(ref, base, "bf16", kappa2=2.0)
    assert (honest.flipped, honest.beyond_noise) == (1, 0)
    # Row 0 flips to expert 2, 0.3 behind: far past FLIP_ALLOWANCE noises.
    ref, base = runs(torch.tensor([[2], [0]]), 0.02)
    wrong = flips(ref, base, "bf16", kappa2=2.0)
    assert (wrong.flipped, wrong.beyond_noise) == (1, 1) and wrong.worst_ratio > 1
    assert FLIP_ALLOWANCE * 0.02 < 0.3


def test_pooled_routing_noise_is_the_rms_of_the_runs_distances_over_their_kappas():
    """One run's score noise and worst flip are one sample of an honest run's: pooled with
    independently rounded runs (kappa2 2), a flip just past what the one run allows is judged
    by all of them; a far one still fails."""
    from trainready.probes.routing import FLIP_ALLOWANCE, Call, Routing, flips

    scores = torch.tensor([[0.50, 0.30, 0.2000], [0.40, 0.35, 0.2500]], dtype=torch.float64)
    natural = torch.tensor([[0], [0]])

    def run(forced, shift):
        r = Routing(replay=[])
        r.calls = [Call(scores + shift, natural, forced, True)]
        return r

    near = torch.tensor([[0], [1]])  # row 1 flips to expert 1, 0.05 behind float64's pick
    ref, lucky = run(near, 0.0), run(near, 0.01)  # the CPU's one run: 0.01 from float64
    one = flips(ref, [lucky], "bf16")
    assert one.beyond_noise == 1 and 1 < one.worst_ratio <= 2  # 0.05 > FLIP_ALLOWANCE x ~0.011
    honest = [run(near, 0.02 * (-1) ** i) for i in range(4)]  # sqrt(2) x 0.02 each, kappa2 2
    pooled = flips(ref, [lucky, *honest], "bf16", pooled_kappa2=[1.0] + [2.0] * 4)
    assert pooled.baselines == 5 and pooled.beyond_noise == 0
    far = torch.tensor([[2], [0]])  # row 0 to expert 2, 0.3 behind: a wrong router
    wrong = flips(run(far, 0.0), [run(far, 0.01), *[run(far, 0.02)] * 4], "bf16",
                  pooled_kappa2=[1.0] + [2.0] * 4)  # fmt: skip
    assert wrong.beyond_noise == 1 and wrong.worst_ratio > 2 and FLIP_ALLOWANCE * 0.02 < 0.3
