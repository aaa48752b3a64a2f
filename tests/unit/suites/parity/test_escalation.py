"""What a failing CPU eager parity case is judged again with (`suites/parity/rejudge.py`, `escalated`):
the float64 reference's own rounding noise on the failing tensors, and more independently
rounded runs where every failure is borderline. A tensor that is float64 rounding residue (zero
in exact arithmetic) passes where fp32 returns 0, and a device value well above the residue
still fails; a fault far past its bound is never escalated into more runs."""

from __future__ import annotations

import math

import pytest
import torch

from trainready.core.case import Outcome
from trainready.probes.numerics import Verdict
from trainready.suites.parity import noise as parity_noise
from trainready.suites.parity import verdicts as parity_verdicts
from trainready.suites.parity.engine import Trace

RESIDUE = 5e-22  # a float64 gradient that is zero in exact arithmetic (HF blip-2's Q-Former)


def _trace(grad: torch.Tensor) -> Trace:
    one = torch.tensor(1.0, dtype=torch.float64)
    return Trace(one, one.reshape(1, 1), {"w": grad}, {"w": grad}, [1.0])


def _judged(device: torch.Tensor, reference_noise: dict[str, float]) -> Verdict:
    g = torch.Generator().manual_seed(0)
    ref = RESIDUE * torch.randn(4096, dtype=torch.float64, generator=g)
    runs = (_trace(torch.zeros(4096)), _trace(torch.zeros(4096)))  # fp32: exactly 0, both
    base = parity_noise.Baseline("independent", runs, "fp32", reference_noise=reference_noise)
    pre = {"w.grad": ref}
    _, verdicts = parity_verdicts.judge(pre, {"w.grad": device}, base.noise(pre), "fp32", base.rule)
    return verdicts["w.grad"]


def test_a_float64_residue_passes_against_the_references_own_noise():
    zero = torch.zeros(4096)
    assert not _judged(zero, {}).ok  # the runs agree exactly: the residue alone fails it
    assert _judged(zero, {"w.grad": RESIDUE}).ok


def test_a_device_value_far_above_the_residue_still_fails():
    g = torch.Generator().manual_seed(1)
    wrong = 1e-19 * torch.randn(4096, dtype=torch.float64, generator=g)  # 200x the residue
    assert not _judged(wrong, {"w.grad": RESIDUE}).ok


def test_the_reference_noise_adds_in_quadrature():
    runs = (_trace(torch.full((128,), 1.0)), _trace(torch.full((128,), 1.0 + 3e-7)))
    ref = {"w.grad": torch.ones(128, dtype=torch.float64)}
    plain = parity_noise.Baseline("independent", runs, "fp32").noise(ref)["w.grad"]
    both = parity_noise.Baseline("independent", runs, "fp32", reference_noise={"w.grad": 4e-7})
    assert both.noise(ref)["w.grad"] == pytest.approx(math.hypot(plain, 4e-7))


def _verdict(ratio: float) -> Verdict:
    return Verdict(ratio <= 1.0, "noise_vs_independent", {"rmse": ratio}, 1.0)


@pytest.mark.parametrize(
    ("ratios", "curve_ok", "escalated"),
    [
        ([1.2, 0.5], True, True),  # a tensor just over its bound
        ([1.9, 1.5], False, True),
        ([], False, True),  # the loss curve alone
        ([3.0, 1.2], True, False),  # one failure far past its bound: a finding, not a sample
        ([5e3], True, False),
    ],
)
def test_only_borderline_failures_get_more_runs(ratios, curve_ok, escalated):
    out = Outcome(diagnostics={"curve": {"ok": curve_ok}})
    verdicts = {f"t{i}": _verdict(r) for i, r in enumerate(ratios)}
    assert parity_verdicts.borderline(out, verdicts) is escalated


def test_a_shape_failure_is_never_borderline():
    out = Outcome(diagnostics={"curve": {"ok": True}})
    assert not parity_verdicts.borderline(out, {"logits": Verdict(False, "shape", {})})


@pytest.mark.slow
def test_blip2_q_former_residue_gradients_pass_with_the_reference_noise():
    """HF blip-2's Q-Former starts its queries at zero: layer 1's query and key gradients are
    float64 residue (~5e-22) that every fp32 run returns as exactly 0."""
    from tests.unit.suites.parity.test_tasks import _run

    out = _run({"source": "hf_task", "model": "blip-2"}, "hf/blip-2/eager/fp32", steps=2)
    assert out.status == "pass", out.diagnostics.get("error")
    noise = out.diagnostics["reference_noise"]
    assert any(".qformer.encoder.layer.1." in n for n in noise)
    assert all(v < 1e-18 for v in noise.values())
