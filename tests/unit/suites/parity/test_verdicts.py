"""Zeroed gradients (`suites/parity/verdicts.py` `zeroed`): a failing tensor the device returns as
exactly zero where the reference's is not is named as that, first, whatever its rmse ratio; a
gradient that is exactly zero on both sides is no such failure."""

from __future__ import annotations

import torch

from tests.unit.suites.parity.test_suite import _run
from trainready.probes.numerics import Verdict
from trainready.suites.parity.verdicts import zeroed


def test_a_gradient_cut_off_partly_fails_but_names_no_tensor_zeroed():
    # the MLP's input loses its gradient; the embedding still gets the residual's: wrong, not 0
    out = _run("zeroed_when_compiled", mode="compile")
    assert out.status == "fail_numerics" and "embed.weight.grad" in out.diagnostics["error"]
    assert "zeroed" not in out.diagnostics


def test_a_block_cut_off_names_every_parameter_before_it():
    out = _run("zeroed_upstream", mode="compile")
    assert out.status == "fail_numerics"
    assert out.diagnostics["zeroed"] == [
        "down.bias.grad",
        "down.weight.grad",
        "embed.weight.grad",
        "up.bias.grad",
        "up.weight.grad",
    ]
    assert out.metrics["zeroed_tensors"] == 5.0
    assert out.diagnostics["error"].startswith("5 tensors exactly zero on the device")


def test_a_gradient_zero_in_every_precision_passes_unnamed():
    for mode in ("eager", "compile"):
        out = _run("exactly_zero_gradient", mode=mode)
        assert out.status == "pass", out.diagnostics.get("error")
        assert "zeroed" not in out.diagnostics


def test_only_failing_tensors_with_a_nonzero_reference_are_zeroed():
    ref = {
        "a": torch.ones(3),
        "b": torch.full((3,), 1e-22),
        "c": torch.zeros(3),
        "d": torch.ones(3),
    }
    dev = {"a": torch.zeros(3), "b": torch.zeros(3), "c": torch.zeros(3), "d": torch.ones(3) * 2}
    fail, ok = Verdict(False, "noise", {}), Verdict(True, "noise", {})
    verdicts = {"a": fail, "b": ok, "c": fail, "d": fail}
    # a: zeroed; b: residue within its noise; c: zero on both sides; d: wrong but not zero
    assert zeroed(ref, dev, verdicts) == ["a"]
