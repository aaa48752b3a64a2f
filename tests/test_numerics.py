import math

import pytest
import torch

from trainready.config import ConfigError
from trainready.probes.numerics import (
    DTYPE_TOL,
    compare,
    compare_many,
    loss_curve_compare,
    tensor_errors,
)


@pytest.fixture
def matmul64() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two float64 operands and their float64 product (K large enough for real cancellation)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(48, 512, dtype=torch.float64, generator=g)
    b = torch.randn(512, 40, dtype=torch.float64, generator=g) / math.sqrt(512)
    return a, b, a @ b


def _bf16_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.bfloat16() @ b.bfloat16()


def _noise_half(t: torch.Tensor, rel: float) -> torch.Tensor:
    """`t` plus Gaussian noise of `rel` times its rms on every other entry."""
    t64 = t.double()
    noise = torch.randn(t.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    noise.view(-1)[1::2] = 0.0
    return (t64 + rel * t64.square().mean().sqrt() * noise).to(t.dtype)


def test_exact_match_passes_via_allclose(matmul64):
    _, _, ref = matmul64
    v = compare(ref, ref.clone(), dtype="fp32")
    assert v.ok and v.rule == "allclose" and v.threshold is None
    assert v.errors["max_abs"] == 0.0 and v.errors["rmse"] == 0.0
    assert v.errors["cosine"] == pytest.approx(1.0)


def test_bf16_matmul_passes_via_rmse_rule(matmul64):
    a, b, ref = matmul64
    cpu_lowp = _bf16_matmul(a, b)
    # A "device" that accumulates in fp32 and rounds once: as good as the CPU, not bit-identical.
    device = (a.bfloat16().float() @ b.bfloat16().float()).bfloat16()
    v = compare(ref, device, cpu_lowp, dtype="bf16")
    assert v.ok, v.to_json()
    assert v.rule == "rmse_vs_cpu"  # input rounding breaks elementwise rtol near cancellations
    assert v.errors["rmse"] <= v.threshold
    assert v.errors["cosine"] > 0.999


def test_perturbed_bf16_matmul_fails(matmul64):
    # As the matmul suite checks: the reference is computed on the very inputs the device saw.
    a, b, _ = matmul64
    a, b = a.bfloat16(), b.bfloat16()
    ref, cpu_lowp = a.double() @ b.double(), a @ b
    assert compare(ref, cpu_lowp, cpu_lowp, dtype="bf16").ok
    v = compare(ref, _noise_half(cpu_lowp, 0.01), cpu_lowp, dtype="bf16")
    assert not v.ok and v.rule == "rmse_vs_cpu"
    assert v.errors["rmse"] > v.threshold


def test_noise_beyond_m_times_the_cpu_error_fails(matmul64):
    # With rounded inputs the CPU's own bf16 error is ~0.3% rms; m = 3 leaves room below 1%.
    a, b, ref = matmul64
    cpu_lowp = _bf16_matmul(a, b)
    assert compare(ref, _noise_half(cpu_lowp, 0.005), cpu_lowp, dtype="bf16").ok
    assert not compare(ref, _noise_half(cpu_lowp, 0.03), cpu_lowp, dtype="bf16").ok


def test_without_cpu_baseline_uses_rounded_reference(matmul64):
    _, _, ref = matmul64
    good = compare(ref, ref.bfloat16(), dtype="bf16")
    assert good.ok and good.rule == "allclose"
    bad = compare(ref, _noise_half(ref.bfloat16(), 0.03), dtype="bf16")
    assert not bad.ok and bad.rule == "rmse_vs_rounded"


def test_nan_fails(matmul64):
    _, _, ref = matmul64
    device = ref.float().clone()
    device[3, 5] = float("nan")
    v = compare(ref, device, ref.float(), dtype="fp32")
    assert not v.ok and v.rule == "nonfinite" and v.errors["nonfinite"] == 1


def test_matching_nonfinite_pattern_is_not_a_failure():
    ref = torch.tensor([1.0, float("inf"), float("nan")], dtype=torch.float64)
    v = compare(ref, ref.float(), dtype="fp32")
    assert v.ok and v.errors["nonfinite"] == 0


def test_shape_mismatch_fails(matmul64):
    _, _, ref = matmul64
    v = compare(ref, ref[:, :-1], dtype="fp32")
    assert not v.ok and v.rule == "shape"
    assert v.errors["ref_shape"] == [48, 40] and v.errors["actual_shape"] == [48, 39]


def test_tensor_errors_guards_relative_error_near_zero():
    ref = torch.tensor([1.0, -1.0, 1e-12], dtype=torch.float64)
    e = tensor_errors(ref, torch.tensor([1.0, -1.0, 1e-3]))
    # Against the raw 1e-12 the relative error would be ~1e9; the floor is a tenth of the rms.
    assert e["max_rel"] == pytest.approx(1e-3 / (0.1 * math.sqrt(2 / 3)), rel=1e-6)
    assert e["max_abs"] == pytest.approx(1e-3, rel=1e-6)


def test_unknown_dtype_is_a_config_error(matmul64):
    _, _, ref = matmul64
    with pytest.raises(ConfigError, match="fp8"):
        compare(ref, ref, dtype="fp8")


def test_dtype_tolerances_cover_every_dtype():
    assert set(DTYPE_TOL) == {"fp64", "fp32", "bf16", "fp16"}


def test_compare_many_names_the_worst_tensor(matmul64):
    a, b, ref = matmul64
    lowp = _bf16_matmul(a, b)
    ok, worst, verdicts = compare_many(
        {
            "loss": (ref[0, :1], ref[0, :1].bfloat16(), ref[0, :1].bfloat16()),
            "grad.w": (ref, _noise_half(lowp, 0.05), lowp),
            "logits": (ref, lowp, lowp),
        },
        dtype="bf16",
    )
    assert not ok and worst == "grad.w"
    assert verdicts["loss"].ok and verdicts["logits"].ok and not verdicts["grad.w"].ok


def test_compare_many_when_all_pass_and_when_empty(matmul64):
    _, _, ref = matmul64
    ok, worst, _ = compare_many({"x": (ref, ref, None), "y": (ref, ref.float(), None)}, "fp32")
    assert ok and worst in {"x", "y"}
    assert compare_many({}, "fp32") == (True, None, {})


def test_loss_curve_divergence_is_located():
    ref = [4.0, 3.5, 3.1, 2.8, 2.6]
    dev = [4.0, 3.5001, 3.1, 2.9, 3.5]
    r = loss_curve_compare(ref, dev, rel_tol=1e-2)
    assert not r["ok"] and r["first_diverging_step"] == 3
    assert r["max_rel_dev_step"] == 4
    assert r["max_rel_dev"] == pytest.approx(0.9 / 2.6)


def test_loss_curve_within_tolerance_and_nonfinite_and_short():
    ref = torch.tensor([2.0, 1.5, 1.2])
    assert loss_curve_compare(ref, ref * (1 + 1e-4), rel_tol=1e-3)["ok"]
    nan = loss_curve_compare(ref, [2.0, float("nan"), 1.2], rel_tol=1e-3)
    assert nan["first_diverging_step"] == 1 and nan["max_rel_dev"] == math.inf
    short = loss_curve_compare(ref, [2.0, 1.5], rel_tol=1e-3)
    assert not short["ok"] and short["first_diverging_step"] == 2


# --- the rule: measured noise, a relative floor --------------------------------------------------

from trainready.probes.numerics import (  # noqa: E402 - the new rule's half of this module
    ALLOWANCE,
    CURVE_ALLOWANCE,
    CURVE_FLOOR,
    SMALL_NUMEL,
    UNIT_ROUNDOFF,
    curve_noise,
    curve_tolerance,
    judge,
    judge_many,
    noise_rmse,
    sampling,
    spread_noise,
)


def test_judge_allows_twice_the_measured_noise_plus_one_rounding(matmul64):
    a, b, ref = matmul64
    honest = _bf16_matmul(a, b)
    noise = noise_rmse(ref, honest)
    v = judge(ref, honest, noise, "bf16")
    assert v.ok and v.rule == "noise_vs_cpu"
    widen = sampling(ref.numel())
    assert v.threshold == pytest.approx(
        ALLOWANCE["bf16"] * widen * noise + UNIT_ROUNDOFF["bf16"] * v.errors["ref_rms"]
    )
    assert 1.0 < widen < 1.1 and sampling(64) == pytest.approx(1.55, abs=0.01)
    # A 2% scale error is 2% of the rms; bf16's noise on this product is well under 1%.
    assert not judge(ref, (honest.double() * 1.02).bfloat16(), noise, "bf16").ok


def test_no_allclose_shortcut_a_one_percent_error_everywhere_fails_in_fp32(matmul64):
    """bf16's elementwise rtol (1.6e-2) passed a 1% error in every entry; fp32's atol (1e-5)
    passed anything in a tensor of rms 1e-5. Both are measured against the noise now."""
    _, _, ref = matmul64
    small = ref * 1e-5
    assert compare(small, (small * 1.01).float(), dtype="fp32").ok  # the legacy rule
    assert not judge(small, (small * 1.01).float(), noise_rmse(small, small.float()), "fp32").ok


def test_small_tensors_take_at_least_the_pooled_relative_noise():
    big = torch.linspace(-1, 1, 4096, dtype=torch.float64)
    loss = torch.tensor(2.0, dtype=torch.float64)
    named = {
        "grad": (big, big * (1 + 5e-3), 5e-3 * big.square().mean().sqrt().item()),
        # A scalar's own "noise" from one pair of runs can be ~0 by chance: pooled instead.
        "loss": (loss, loss * (1 + 5e-3), 0.0),
    }
    ok, _, verdicts = judge_many(named, "bf16")
    assert ok and verdicts["loss"].errors["noise_pooled"] is True
    assert loss.numel() < SMALL_NUMEL
    assert verdicts["loss"].errors["noise_rmse"] == pytest.approx(2.0 * 5e-3, rel=1e-6)


def test_spread_noise_cancels_what_two_runs_share():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(10000, dtype=torch.float64, generator=g)
    bias = 0.05 * ref  # a systematic error both runs make
    first = ref + bias + 1e-3 * torch.randn(10000, dtype=torch.float64, generator=g)
    second = ref + bias + 1e-3 * torch.randn(10000, dtype=torch.float64, generator=g)
    assert spread_noise(ref, first, second, kappa2=1.0) == pytest.approx(1e-3, rel=0.05)
    assert noise_rmse(ref, first) > 0.04  # while each run's own distance holds the bias


def test_noise_of_a_baseline_that_overflowed_is_infinite():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert noise_rmse(ref, torch.tensor([1.0, float("inf")])) == math.inf
    assert spread_noise(ref, ref, torch.tensor([float("nan"), 2.0]), 2.0) == math.inf


def test_curve_tolerance_is_three_times_the_largest_honest_deviation():
    ref = [4.0, 3.0, 2.0]
    noise = curve_noise(ref, [4.0, 3.0003, 2.0001])
    assert noise == pytest.approx([0.0, 1e-4, 5e-5])
    assert curve_tolerance(noise) == pytest.approx(CURVE_ALLOWANCE * 1e-4 + CURVE_FLOOR)
    assert curve_tolerance(curve_noise(ref, [4.0, float("nan")])) == math.inf
    assert curve_tolerance([0.0, 0.0]) == CURVE_FLOOR


# --- the CPU's own baseline: independent rounding -------------------------------------------------


def _chain(x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
    for w in ws:
        x = torch.nn.functional.gelu(x @ w)
    return x


@pytest.mark.parametrize(("dtype", "kappa2"), [("bf16", 2.0), ("fp32", 1.0)])
def test_independent_rounding_has_the_plain_runs_noise_times_kappa(dtype, kappa2):
    """A chain of GEMMs and GELUs: the independently rounded run is as far from float64 as the
    plain run times sqrt(KAPPA2), and its disagreement with the plain run is sqrt(1 + KAPPA2)
    times the plain run's own error (independent errors)."""
    from trainready.device import torch_dtype
    from trainready.probes.perturb import KAPPA2, IndependentRounding

    assert KAPPA2[dtype] == kappa2
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, dtype=torch.float64, generator=g)
    ws = [torch.randn(256, 256, dtype=torch.float64, generator=g) / 16 for _ in range(4)]
    ref = _chain(x, ws)
    low = torch_dtype(dtype)
    plain = _chain(x.to(low), [w.to(low) for w in ws]).double()
    with IndependentRounding(dtype, seed=1) as mode:
        other = _chain(x.to(low), [w.to(low) for w in ws]).double()
    assert mode.counts["gemm"] == 4
    assert mode.counts["recomputed"] >= 4 if dtype == "bf16" else mode.counts["recomputed"] == 0
    e_plain, e_other = noise_rmse(ref, plain), noise_rmse(ref, other)
    assert e_other / e_plain == pytest.approx(math.sqrt(kappa2), rel=0.15)
    assert noise_rmse(plain, other) / e_plain == pytest.approx(math.sqrt(1 + kappa2), rel=0.15)


def test_stochastic_rounding_to_bf16_is_unbiased_and_exact_on_bf16_values():
    from trainready.probes.perturb import _stochastic

    g = torch.Generator().manual_seed(0)
    x = torch.full((100000,), 1.0 + 2.0**-9, dtype=torch.float32)  # a quarter ulp above 1
    rounded = _stochastic(x, torch.bfloat16, g).float()
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + 2.0**-7}
    assert rounded.double().mean().item() == pytest.approx(1.0 + 2.0**-9, abs=5e-5)  # 5 sigma
    exact = torch.tensor([1.5, -3.0, float("inf")], dtype=torch.float32)
    assert torch.equal(_stochastic(exact, torch.bfloat16, g).float(), exact)
    assert _stochastic(torch.tensor([1.0 + 2.0**-12]), torch.float16, g).dtype == torch.float16
