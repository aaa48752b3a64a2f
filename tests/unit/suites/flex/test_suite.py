"""The flex suite without compiling: its grid, its variants and their float64 references, the
numerics check of outputs and gradients, the backend's refusal, compile-error categories, and the
report section (user variant files: test_flex_variants.py)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from trainready.core.case import Case, Result
from trainready.core.config import RunConfig
from trainready.core.context import Unsupported
from trainready.core.store import RunRecord, Store
from trainready.reporting import render
from trainready.reporting.build import build_report
from trainready.reporting.sections import flex as flex_section
from trainready.suites.flex import suite as flex
from trainready.suites.flex.variants import BUILTIN, Shape

SHAPE = Shape(B=2, Hq=4, Hkv=2, S=128, D=16)


def _cases(preset: str, device: str = "cpu", dtype: str | None = None, **options) -> list[Case]:
    cfg = RunConfig(suites=["flex"], device=device, preset=preset, dtype=dtype, options=options)
    return flex.cases(cfg)


# --- the grid -------------------------------------------------------------------------------------


def test_standard_preset_is_the_issue_grid_for_both_passes():
    cases = _cases("standard")
    configs = {c.name.rsplit("/", 1)[0] for c in cases}
    assert len(configs) == 128 and len(cases) == 256
    p = [c.params for c in cases]
    assert {x["B"] for x in p} == {2, 4}
    assert {(x["Hq"], x["Hkv"]) for x in p} == {(16, 16), (16, 4)}
    assert {x["S"] for x in p} == {1024, 2048, 4096, 8192}
    assert {x["D"] for x in p} == {64, 128}
    assert {x["variant"] for x in p} == {"noop", "causal", "alibi", "sliding_window"}
    assert {x["pass"] for x in p} == {"fwd", "fwd_bwd"}


def test_full_covers_every_builtin_and_quick_is_cpu_sized():
    full = _cases("full")
    assert {c.params["variant"] for c in full} == set(BUILTIN) and len(full) == 9 * 32 * 2
    quick = _cases("quick")
    assert {c.params["variant"] for c in quick} == set(BUILTIN) and len(quick) == 18
    assert max(c.params["S"] for c in quick) <= 256


def test_case_ids_are_unique_and_named_as_documented():
    ids = [c.id for c in _cases("full")]
    assert len(set(ids)) == len(ids)
    assert "flex/causal/B2/H16-4/S1024/D64/fwd_bwd" in ids


def test_dtype_is_fp32_on_the_cpu_bf16_on_accelerators_and_overridable():
    assert {c.params["dtype"] for c in _cases("quick")} == {"fp32"}
    assert {c.params["dtype"] for c in _cases("quick", device="cuda:0")} == {"bf16"}
    assert {c.params["dtype"] for c in _cases("quick", dtype="fp16")} == {"fp16"}


# --- variants and references ------------------------------------------------------------------------


def _inputs(shape: Shape = SHAPE, grad: bool = False) -> flex.Inputs:
    return flex.make_inputs(shape, torch.float64, "cpu", grad)


@pytest.mark.parametrize("name", list(BUILTIN))
def test_builtin_reference_matches_eager_flex_attention_in_float64(name):
    mods = BUILTIN[name].build(SHAPE, "cpu")
    x = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex_attention warns that it is unfused
        expected = flex.attend(flex_attention, x, mods, flex.block_mask_for(mods, SHAPE, "cpu"))
    got = flex.dense_attention(x, mods, torch.float64, "cpu", grad=False)["out"]
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("causal", [False, True])
def test_dense_reference_and_its_gradients_match_sdpa_with_gqa(causal):
    mods = BUILTIN["causal" if causal else "noop"].build(SHAPE, "cpu")
    x = _inputs(grad=True)
    got = flex.dense_attention(x, mods, torch.float64, "cpu", grad=True)
    out = F.scaled_dot_product_attention(x.q, x.k, x.v, is_causal=causal, enable_gqa=True)
    grads = torch.autograd.grad(out, (x.q, x.k, x.v), x.grad_out)
    for name, want in zip(("out", "grad_q", "grad_k", "grad_v"), (out, *grads), strict=True):
        torch.testing.assert_close(got[name], want.detach(), rtol=1e-9, atol=1e-9)


def test_a_fully_masked_row_gives_zero_output_and_finite_gradients():
    def strictly_causal(s, b, h, q, kv):
        return s.masked_fill(kv >= q, -math.inf)  # row 0 sees nothing

    mods = flex.Mods(None, None, strictly_causal)
    got = flex.dense_attention(_inputs(grad=True), mods, torch.float64, "cpu", grad=True)
    assert torch.all(got["out"][:, :, 0] == 0)
    assert all(torch.isfinite(t).all() for t in got.values())


def test_block_share_counts_the_tiles_the_mask_keeps():
    shape = Shape(1, 1, 1, 256, 16)  # 2 x 2 tiles of 128: causal keeps 3
    causal = BUILTIN["causal"].build(shape, "cpu")
    assert flex.block_share(flex.block_mask_for(causal, shape, "cpu")) == pytest.approx(0.75)
    assert flex.block_share(None) == 1.0


def test_flops_count_kept_blocks_and_the_dense_equivalent():
    work, dense = flex._flops(SHAPE, "fwd", 0.5)
    assert dense == 4 * 2 * 4 * 128 * 128 * 16 and work == dense / 2
    assert flex._flops(SHAPE, "fwd_bwd", 1.0)[1] == 3 * dense


def test_check_passes_pytorchs_own_bf16_result_and_fails_a_perturbed_one():
    """The accelerator path's rule: bf16 against float64, baseline the dense math in bf16."""
    mods = BUILTIN["alibi"].build(SHAPE, "cpu")
    x = flex.make_inputs(SHAPE, torch.bfloat16, "cpu", grad=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = flex.attend(flex_attention, x, mods, None)
    ok, worst, verdicts = flex.check(x, mods, {"out": out}, "bf16", "cpu", grad=False)
    assert ok and worst == "out" and verdicts["out"]["ok"]
    ok, _, verdicts = flex.check(x, mods, {"out": out * 1.05}, "bf16", "cpu", grad=False)
    assert not ok and verdicts["out"]["rule"] == "noise_vs_cpu"


def _eager(x: flex.Inputs, mods: flex.Mods) -> torch.Tensor:
    """Eager flex_attention with `mods` (the kernel stand-in; the suite compiles it)."""
    with flex._plain_eager_flex():  # the mods as plain Python: no trace per call
        return flex.attend(flex_attention, x, mods, flex.block_mask_for(mods, SHAPE, "cpu"))


def _planted(name: str) -> flex.Mods:
    """A variant of the planted-fault file, loaded as `--variants` loads it."""
    from trainready.suites.flex.variants import load_user_variants
    from trainready.testing.flex_faults import PATH

    return load_user_variants(PATH)[name].build(SHAPE, "cpu")


@pytest.mark.parametrize(
    ("name", "dtype", "caught"),
    [
        ("scale_2pct", "fp32", True),
        ("scale_2pct", "bf16", True),
        ("window_one_wider", "fp32", True),
        ("causal_diagonal_dropped", "fp32", True),
        ("alibi_slope_1pct", "fp32", True),
        ("alibi_slope_1pct", "bf16", False),  # 1% of ALiBi's slope: under bf16's resolution
        ("softcap_via_sigmoid", "fp32", False),
        ("softcap_via_sigmoid", "bf16", False),
        ("alibi_from_table", "fp32", False),
    ],
)
def test_a_wrong_mod_fails_against_its_right_reference_and_a_rewritten_one_passes(
    name, dtype, caught
):
    """The noise is the dense math of the variant's *reference* at the dtype, so a wrong mod does
    not raise its own bar; the same mathematics written another way passes."""
    mods = _planted(name)
    x = flex.make_inputs(SHAPE, flex.torch_dtype(dtype), "cpu", grad=False)
    ok, worst, verdicts = flex.check(x, mods, {"out": _eager(x, mods)}, dtype, "cpu", grad=False)
    assert ok is not caught, verdicts[worst]
    assert verdicts["out"]["rule"] == "noise_vs_cpu" and verdicts["out"]["noise_rmse"] > 0


def test_fp64_is_not_judged():
    """In fp64 the same-dtype baseline is the reference itself: no honest noise, unsupported."""
    case = _cases("smoke", dtype="fp64")[0]
    ctx = flex.CaseContext("cpu", "fp64", 60.0)
    with pytest.raises(Unsupported, match="numerics not judged"):
        flex.execute(case, ctx)


def _dense_grads(x: flex.Inputs, mods: flex.Mods) -> dict[str, torch.Tensor]:
    return flex.dense_attention(x, mods, torch.float32, "cpu", grad=True)


def test_check_judges_every_gradient_and_names_the_worst():
    """The fwd_bwd rule, which no CPU run reaches (the CPU refuses flex backward)."""
    mods = BUILTIN["document"].build(SHAPE, "cpu")
    x = flex.make_inputs(SHAPE, torch.float32, "cpu", grad=True)
    got = _dense_grads(x, mods)
    ok, worst, verdicts = flex.check(x, mods, got, "fp32", "cpu", grad=True)
    assert ok, verdicts[worst]
    assert set(verdicts) == {"out", "grad_q", "grad_k", "grad_v"}
    skewed = {**got, "grad_k": got["grad_k"] * 1.01}
    ok, worst, verdicts = flex.check(x, mods, skewed, "fp32", "cpu", grad=True)
    assert not ok and worst == "grad_k"
    assert [n for n, v in verdicts.items() if not v["ok"]] == ["grad_k"]


def _sdpa_as_flex(q, k, v, score_mod, block_mask, enable_gqa):
    """flex_attention's stand-in for the noop variant: SDPA computes the same attention without
    mods, and has the CPU backward flex lacks."""
    assert score_mod is None and block_mask is None
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=enable_gqa)


def test_the_fwd_bwd_step_gives_gradients_that_check_accepts():
    """step_fn's gradients, by name, against the float64 reference (GQA: grad_k and grad_v share
    a shape, so a swap would fail)."""
    mods = BUILTIN["noop"].build(SHAPE, "cpu")
    x = flex.make_inputs(SHAPE, torch.float32, "cpu", grad=True)
    got = flex.step_fn("fwd_bwd", _sdpa_as_flex, x, mods, None)()
    assert set(got) == {"out", "grad_q", "grad_k", "grad_v"}
    ok, worst, verdicts = flex.check(x, mods, got, "fp32", "cpu", grad=True)
    assert ok, verdicts[worst]


# --- what the backend refuses, and compile-error categories -----------------------------------------


def test_cpu_backward_is_refused_with_pytorchs_message():
    flex.refuse_if_unsupported("cpu", torch.float32, grad=False)  # the forward is supported
    with pytest.raises(Unsupported, match="does not support backward on CPU"):
        flex.refuse_if_unsupported("cpu", torch.float32, grad=True)


def _raising(exc: BaseException):
    def step():
        raise exc

    return step


def test_first_call_sorts_errors_into_unsupported_compile_and_oom():
    try:
        raise NotImplementedError("no template for this backend")
    except NotImplementedError as inner:
        wrapped = RuntimeError("backend compiler failed")
        wrapped.__cause__ = inner
    with pytest.raises(Unsupported, match="no template for this backend"):
        flex.first_call(_raising(wrapped), "cpu")
    with pytest.raises(flex.CompileError, match="LoweringException: bad"):
        flex.first_call(_raising(type("LoweringException", (Exception,), {})("bad")), "cpu")
    with pytest.raises(torch.OutOfMemoryError):
        flex.first_call(_raising(torch.OutOfMemoryError("out of memory")), "cpu")


# --- the report section -----------------------------------------------------------------------------


def _result(variant: str, s: int, pass_: str, status: str, phase: str | None = None, **kw):
    shape = Shape(2, 4, 2, s, 16)
    params = {"variant": variant, "B": 2, "Hq": 4, "Hkv": 2, "S": s, "D": 16}
    case = Case(
        "flex", flex.case_name(variant, shape, pass_), params | {"pass": pass_, "dtype": "fp32"}
    )
    metrics = {
        "compile_s": 9.0,
        "run_ms": 2.0,
        "tflops": 0.5,
        "tflops_dense": 1.0,
        "block_share": 0.5,
    }
    return Result(case, status, metrics if status == "pass" else {}, kw, phase, 0.0, 1.0)


@pytest.fixture
def flex_report(tmp_path):
    results = [
        _result("causal", 128, "fwd", "pass"),
        _result("causal", 256, "fwd", "pass"),
        _result(
            "alibi", 128, "fwd", "fail_numerics", "check", error="out: rmse 0.3 > allowed 0.01"
        ),
        _result("alibi", 256, "fwd", "timeout", "compile", error="exceeded budget of 5 s"),
        _result("causal", 128, "fwd_bwd", "unsupported", "setup", reason="no backward on CPU"),
    ]
    never = _result("causal", 256, "fwd_bwd", "pass").case
    store = Store(tmp_path)
    store.add_run(RunRecord("r1", 1.7e9, ["flex"], "cpu", "quick", "fp32", env={}, planned=6))
    store.add_planned("r1", [r.case for r in results] + [never])
    for r in results:
        store.add_result("r1", r)
    yield store
    store.close()


def test_section_counts_passes_by_variant_and_names_categories(flex_report):
    report = build_report(flex_report, ["r1"])
    run = report.primary
    stats = {s.label: (s.value, s.note) for s in flex_section.headlines(run)}
    assert stats["flex fwd passed"] == ("2/4", "1 fail_numerics, 1 timeout (compile)")
    assert stats["flex fwd+bwd passed"] == ("0/2", "1 unsupported, 1 not run")
    by_variant = flex_section.pass_table(report, "t", "variant", flex_section._variant_order, "{}")
    assert ["alibi", "0/2", "0/0", "1 fail_numerics, 1 timeout (compile)"] in by_variant.rows
    assert ["causal", "2/2", "0/2", "1 unsupported, 1 not run"] in by_variant.rows


def test_heat_map_has_a_cell_per_case_with_its_status(flex_report):
    svg = flex_section.heat_map(build_report(flex_report, ["r1"]).primary)
    cell = f'width="{flex_section.CELL}" height="{flex_section.CELL}"'
    assert svg.count(cell) == 6  # one per planned case, the one that never ran included
    assert "flex/alibi/B2/H4-2/S256/D16/fwd: timeout (compile)" in svg
    assert "out: rmse 0.3 &gt; allowed 0.01" in svg


def test_section_renders_in_every_format(flex_report):
    html = render(flex_report, ["r1"], "html")
    assert "FlexAttention status over the grid" in html and "TFLOP/s (kept blocks)" in html
    md = render(flex_report, ["r1"], "md")
    assert "Pass table by variant" in md and "2/4" in md


def test_section_copes_with_cases_it_did_not_make(tmp_path):
    """Results from another version of the suite (no params) still render, counted and drawn."""
    with Store(tmp_path) as store:
        store.add_run(RunRecord("r1", 1.7e9, ["flex"], "cpu", "quick", None, env={}, planned=1))
        store.add_result("r1", Result(Case("flex", "legacy"), "crash", {}, {}, "run", 0.0, 1.0))
        md = render(store, ["r1"], "md")
        svg = flex_section.heat_map(build_report(store, ["r1"]).primary)
    assert "| ? | 0/1 | 1 crash |" in md
    assert "flex/legacy: crash" in svg
