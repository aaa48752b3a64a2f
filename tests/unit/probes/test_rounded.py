"""The rounded float64 run (`probes/rounded.py`, `rejudge.escalated`): the float64 code path
with every op's output rounded to fp32, one more sample of the noise of a CPU eager case that
still fails, with what every fp32 run shares. An honest range effect that every fp32 run shares
passes with it and fails without it; a fault in the model's low-precision path stays caught."""

from __future__ import annotations

import torch

from tests.unit.suites.parity.test_suite import _run
from trainready.probes.rounded import RoundedOutputs
from trainready.suites.parity import rejudge


def test_outputs_are_rounded_to_fp32_range_included():
    x = torch.tensor([1.0 / 3.0, -120.0, 100.0], dtype=torch.float64)
    with RoundedOutputs("fp32") as mode:
        y = torch.exp(x)
        third = x[0] * 1.0
    assert y.dtype == torch.float64
    assert y[1] == 0.0  # exp(-120) is below fp32's smallest subnormal
    assert torch.isinf(y[2])  # exp(100) is past fp32's largest
    assert third == torch.tensor(1.0 / 3.0, dtype=torch.float32).double()
    assert third != 1.0 / 3.0
    assert mode.counts["rounded"] >= 2


def test_in_place_ops_round_the_written_tensor_and_views_keep_aliasing():
    base = torch.zeros(4, dtype=torch.float64)
    with RoundedOutputs("fp32"):
        view = base[1:3]
        view.add_(1.0 / 3.0)  # writes through the view into base, rounded there
    assert base[1] == torch.tensor(1.0 / 3.0, dtype=torch.float32).double()
    assert view.data_ptr() == base[1:].data_ptr()


def test_only_fp32_is_rounded_op_by_op():
    for dtype in ("bf16", "fp16"):
        try:
            RoundedOutputs(dtype)
        except ValueError as e:
            assert "fp32 only" in str(e)
        else:
            raise AssertionError(f"{dtype} accepted")


def test_a_range_effect_every_fp32_run_shares_passes_with_the_rounded_run():
    out = _run("underflows_in_fp32")  # q's gradient: 4e-18 in float64, 0 in every fp32 run
    assert out.status == "pass", out.diagnostics.get("error")
    assert out.diagnostics["rounded_run"] == "run"
    assert "the float64 code path rounded to fp32" in out.diagnostics["same_dtype_baseline"]


def test_without_the_rounded_run_the_same_case_fails(monkeypatch):
    monkeypatch.setattr(rejudge, "ROUNDED_BUDGET_S", 0.0)
    out = _run("underflows_in_fp32")
    assert out.status == "fail_numerics"
    assert out.diagnostics["rounded_run"].startswith("not run: about")
    assert "q.grad rmse ratio" in out.diagnostics["error"]


def test_faults_below_float64_stay_caught_with_the_rounded_run():
    # the model's fp32 path is wrong, its float64 path (the rounded run's) is not
    for name in ("wrong_backward", "skewed_below_float64"):  # 2%, 1e-5
        out = _run(name)
        assert out.status == "fail_numerics", name
        assert out.diagnostics["rounded_run"] == "run"
        assert out.diagnostics["error"].startswith("down.weight.grad rmse ratio")
