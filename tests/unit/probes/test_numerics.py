import math

import pytest
import torch

from trainready.core.config import ConfigError
from trainready.probes.numerics import (
    CURVE_ALLOWANCE,
    CURVE_FLOOR,
    SMALL_NUMEL,
    UNIT_ROUNDOFF,
    curve_noise,
    curve_tolerance,
    judge,
    judge_many,
    loss_curve_compare,
    noise_rmse,
    sampling,
    spread_noise,
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


def test_exact_match_passes_with_no_error(matmul64):
    _, _, ref = matmul64
    v = judge(ref, ref.clone(), 0.0, "fp32")
    assert v.ok and v.rule == "noise_vs_cpu" and v.threshold is not None
    assert v.errors["max_abs"] == 0.0 and v.errors["rmse"] == 0.0
    assert v.errors["cosine"] == pytest.approx(1.0)


def test_nan_fails(matmul64):
    _, _, ref = matmul64
    device = ref.float().clone()
    device[3, 5] = float("nan")
    v = judge(ref, device, noise_rmse(ref, ref.float()), "fp32")
    assert not v.ok and v.rule == "nonfinite" and v.errors["nonfinite"] == 1


def test_matching_nonfinite_pattern_is_not_a_failure():
    ref = torch.tensor([1.0, float("inf"), float("nan")], dtype=torch.float64)
    v = judge(ref, ref.float(), noise_rmse(ref, ref.float()), "fp32")
    assert v.ok and v.errors["nonfinite"] == 0


def test_shape_mismatch_fails(matmul64):
    _, _, ref = matmul64
    v = judge(ref, ref[:, :-1], 1.0, "fp32")
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
        judge(ref, ref, 0.0, "fp8")


def test_judge_many_names_the_worst_tensor(matmul64):
    a, b, ref = matmul64
    lowp = _bf16_matmul(a, b)
    noise = noise_rmse(ref, lowp)
    ok, worst, verdicts = judge_many(
        {
            "grad.w": (ref, _noise_half(lowp, 0.05), noise),
            "logits": (ref, lowp, noise),
        },
        dtype="bf16",
    )
    assert not ok and worst == "grad.w"
    assert verdicts["logits"].ok and not verdicts["grad.w"].ok


def test_judge_many_when_all_pass_and_when_empty(matmul64):
    _, _, ref = matmul64
    noise = noise_rmse(ref, ref.float())
    ok, worst, _ = judge_many({"x": (ref, ref, noise), "y": (ref, ref.float(), noise)}, "fp32")
    assert ok and worst in {"x", "y"}
    assert judge_many({}, "fp32") == (True, None, {})


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


def test_judge_allows_twice_the_measured_noise_plus_one_rounding(matmul64):
    a, b, ref = matmul64
    honest = _bf16_matmul(a, b)
    noise = noise_rmse(ref, honest)
    v = judge(ref, honest, noise, "bf16")
    assert v.ok and v.rule == "noise_vs_cpu"
    widen = sampling(ref.numel())
    floor = UNIT_ROUNDOFF["bf16"] * v.errors["ref_rms"]
    # twice, written out: a check against ALLOWANCE["bf16"] itself passes whatever it is set to
    assert v.threshold == pytest.approx(2 * widen * noise + floor)
    assert 1.0 < widen < 1.1 and sampling(64) == pytest.approx(1.55, abs=0.01)
    # and the verdict, not only the bound: an error just under twice the (widened) noise plus
    # the floor passes, one just over fails, in bf16 and fp16 at 2 and in fp32 at 4
    direction = torch.randn(
        ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
    )
    direction /= direction.square().mean().sqrt()
    for dtype, times in (("bf16", 2), ("fp16", 2), ("fp32", 4)):
        floor = judge(ref, ref, noise, dtype).errors["floor"]
        for k, ok in ((0.95 * times, True), (1.05 * times, False)):
            off = ref + (k * widen * noise + floor) * direction  # rmse k noises plus the floor
            assert judge(ref, off, noise, dtype).ok is ok, (dtype, k)
    # A 2% scale error is 2% of the rms; bf16's noise on this product is well under 1%.
    assert not judge(ref, (honest.double() * 1.02).bfloat16(), noise, "bf16").ok


def test_no_allclose_shortcut_a_one_percent_error_everywhere_fails_in_fp32(matmul64):
    """bf16's elementwise rtol (1.6e-2) passed a 1% error in every entry; fp32's atol (1e-5)
    passed anything in a tensor of rms 1e-5. Both are measured against the noise now."""
    _, _, ref = matmul64
    small = ref * 1e-5
    assert not judge(small, (small * 1.01).float(), noise_rmse(small, small.float()), "fp32").ok


def test_the_floor_is_what_one_rounding_loses_below_the_dtypes_range():
    """A reference below the dtype's smallest subnormal rounds to zero: no fp32 computation can
    return it, and every honest run returns 0 too (noise 0). The floor is then what that one
    rounding loses, its whole rms (HF efficientnet's stem gradients, 1e-97 in float64). In the
    normal range the floor stays u times the rms: zeros for a 1e-30 tensor still fail, and so
    does a 1% error in a subnormal one."""
    g = torch.Generator().manual_seed(0)
    tiny = torch.randn(256, dtype=torch.float64, generator=g) * 1e-97
    assert tiny.float().eq(0).all()
    v = judge(tiny, tiny.float(), 0.0, "fp32")
    assert v.ok and v.threshold == v.errors["rmse"] == v.errors["ref_rms"]
    assert judge(tiny, tiny.float(), 0.0, "bf16").ok  # bf16 has fp32's range
    assert not judge(tiny * 1e67, torch.zeros(256), 0.0, "fp32").ok  # 1e-30: normal range
    assert not judge(tiny, torch.full((256,), 1e-45), 0.0, "fp32").ok  # not zero: off
    normal = torch.randn(256, dtype=torch.float64, generator=g)
    v = judge(normal, normal.float(), 0.0, "fp32")
    assert v.threshold == UNIT_ROUNDOFF["fp32"] * v.errors["ref_rms"]
    sub = normal * 1e-40  # subnormal in fp32: a few bits kept, its rounding's loss is the floor
    rounded = sub.float()
    v = judge(sub, rounded, 0.0, "fp32")
    assert v.ok and v.threshold > UNIT_ROUNDOFF["fp32"] * v.errors["ref_rms"]
    assert not judge(sub, (sub * 1.01).float(), 0.0, "fp32").ok


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
    assert spread_noise(ref, [first, second], kappa2=1.0) == pytest.approx(1e-3, rel=0.05)
    assert noise_rmse(ref, first) > 0.04  # while each run's own distance holds the bias
    # more runs: the same noise from their sample variance, the shared bias still cancelled
    more = [
        ref + bias + 1e-3 * torch.randn(10000, dtype=torch.float64, generator=g) for _ in range(6)
    ]
    assert spread_noise(ref, [first, second, *more], kappa2=1.0) == pytest.approx(1e-3, rel=0.03)
    assert spread_noise(ref, [first, second, *more], kappa2=2.0) == pytest.approx(
        1e-3 / math.sqrt(2.0), rel=0.03
    )


def test_noise_of_a_baseline_that_overflowed_is_infinite():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert noise_rmse(ref, torch.tensor([1.0, float("inf")])) == math.inf
    assert spread_noise(ref, [ref, torch.tensor([float("nan"), 2.0])], 2.0) == math.inf


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
