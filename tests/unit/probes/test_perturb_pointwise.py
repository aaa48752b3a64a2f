"""The CPU's fp32 baseline over elementwise ops (`probes/perturb.py`, `pointwise=True`, used when
a failing case is judged again): each op is recomputed in float64 and rounded stochastically, so
its result is the plain op's to within one float32 ulp and two seeds round apart; a sinusoidal
time embedding (every fp32 run rounds t * freq alike, sin amplifies it) fails against the plain
baseline and passes against this one, and a sin 0.1% too large below float64 still fails."""

from __future__ import annotations

import torch

from tests.support.perturb_conv_models import parity_case
from trainready.probes.perturb import IndependentRounding
from trainready.suites.parity import suite as parity

MODELS = "tests.support.perturb_pointwise_models"


def test_pointwise_results_are_within_an_ulp_and_two_seeds_round_apart():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4096, generator=g) * 1500
    plain = (x * 1.37).sin()
    runs = []
    for seed in (1, 2):
        with IndependentRounding("fp32", seed, pointwise=True) as mode:
            runs.append((x * 1.37).sin())
        assert mode.counts["pointwise"] == 2
    for run in runs:
        ulps = (run - plain).abs() / torch.finfo(torch.float32).eps
        assert (ulps <= 2048).all()  # the product's ulp, amplified by sin's slope (|x| < 2048)
    assert not torch.equal(runs[0], runs[1])
    with IndependentRounding("fp32", 1) as plain_mode:  # not asked for: elementwise ops plain
        assert torch.equal((x * 1.37).sin(), plain)
    assert "pointwise" not in plain_mode.counts


def test_a_time_embedding_passes_only_with_pointwise_rounding_and_a_wrong_sin_fails(monkeypatch):
    clean = parity_case("time_embed", MODELS)
    assert clean.status == "pass", clean.diagnostics.get("error")
    assert clean.diagnostics["independent_rounding"]["pointwise"] > 0
    # passed by the elementwise rounding alone: the rounded float64 run, the next step of the
    # escalation (which rescues the net without it), was never needed
    assert "rounded_run" not in clean.diagnostics
    assert "rounded to fp32" not in clean.diagnostics["same_dtype_baseline"]
    bug = parity_case("time_embed_sin_bug", MODELS)
    assert bug.status == "fail_numerics"
    # the first judgement alone (no rerun with elementwise rounding): the clean net fails
    monkeypatch.setattr(parity, "escalated", lambda *a: (a[3][2], ["not escalated"]))
    assert parity_case("time_embed", MODELS).status == "fail_numerics"
