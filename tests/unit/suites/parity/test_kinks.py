"""Kinks (`probes/kinks.py`, `suites/parity/rejudge.py` `kink_flips`): a ReLU decision within rounding of
its kink that a device takes the other way than float64 is honest, and the case passes with the
flip named; a flip far from the kink, and a gradient fault beside a near kink, still fail."""

from __future__ import annotations

import torch
from torch import nn

from tests.unit.suites.parity.test_suite import _run
from trainready.probes.kinks import Kink, flipping, name_kinks, near_kinks
from trainready.suites.parity import rejudge
from trainready.testing import kink_branch


def _found(model: nn.Module, x: torch.Tensor, rel_tol: float = 1e-5, limit: int = 8) -> list:
    name_kinks(model)
    found: list = []
    with near_kinks(rel_tol, found, limit):
        model(x)
    return found


def test_near_kinks_finds_the_elements_within_rounding_of_a_kink_per_call():
    act = nn.ReLU()
    model = nn.Sequential(act, nn.Identity(), act)  # one module, called twice
    x = torch.tensor([[-1e-9, 0.5, -0.7, 0.9]], dtype=torch.float64)
    found = _found(model, x)
    # call 1 sees the relu'd input: its exact zeros are structural, left out
    assert [(k.module, k.call, k.index) for k in found] == [("0", 0, 0)]
    assert found[0].value == -1e-9 and found[0].at == 0.0 and found[0].flat_below


def test_a_hardtanh_is_near_at_either_end_and_more_than_the_limit_is_said():
    model = nn.Sequential(nn.ReLU6())
    x = torch.tensor([6.0 - 1e-9, 3.0, 1e-9, 2.0], dtype=torch.float64)
    found = _found(model, x)
    assert sorted((k.at, k.flat_below) for k in found) == [(0.0, True), (6.0, False)]
    x = torch.cat([torch.full((20,), 1e-12), torch.ones(20)]).double()  # 20 near, rms ~0.7
    many = _found(model, x, limit=8)
    assert len(many) == 9  # one past the limit: the caller can tell there were more


def test_flipping_opens_or_closes_one_elements_gradient_path_in_place_too():
    for inplace in (False, True):
        model = nn.Sequential(nn.Linear(4, 4, dtype=torch.float64), nn.ReLU(inplace=inplace))
        with torch.no_grad():  # the identity, bias -1e-9 on unit 2: its decision is "closed"
            model[0].weight.copy_(torch.eye(4))
            model[0].bias.copy_(torch.tensor([0.0, 0.0, -1e-9, 0.0]))
        x = torch.tensor([[1.0, 2.0, 0.0, 3.0]], dtype=torch.float64)
        name_kinks(model)
        with torch.no_grad():
            pre = model[0](x)
        closed = 2
        kink = Kink("1", 0, closed, float(pre[0, closed]), 0.0, True, 1.0)
        grads = []
        for flip in (False, True):
            model.zero_grad()
            with flipping(kink) if flip else torch.enable_grad():
                y = model(x)
            y.sum().backward()
            grads.append(model[0].bias.grad.clone())
        assert grads[0][closed] == 0 and grads[1][closed] == 1  # the path opened
        others = [i for i in range(4) if i != closed]
        assert torch.equal(grads[0][others], grads[1][others])  # nothing else moved


def test_an_honest_flip_of_a_near_kink_decision_passes_with_the_flip_named():
    out = _run("near_kink_flipped_when_compiled", mode="compile")
    assert out.status == "pass", out.diagnostics.get("error")
    flipped = out.diagnostics["kinks"]["flipped"]
    assert flipped["module"] == "model.kink" or flipped["module"].endswith("kink")
    assert flipped["element"] == 0 and flipped["value"] < 0


def test_without_the_kink_judgement_the_honest_flip_fails(monkeypatch):
    monkeypatch.setattr(rejudge, "KINK_REL_TOL", {})
    out = _run("near_kink_flipped_when_compiled", mode="compile")
    assert out.status == "fail_numerics" and "p.grad" in out.diagnostics["error"]


def test_a_flip_far_from_the_kink_still_fails():
    out = _run("far_kink_flipped_when_compiled", mode="compile")
    assert out.status == "fail_numerics"
    kinks = out.diagnostics["kinks"]
    assert kinks["tried"] >= 1 and "flipped" not in kinks  # p[0] tried, it does not explain it


def test_a_gradient_fault_beside_a_near_kink_still_fails():
    out = _run("near_kink_wrong_backward")
    assert out.status == "fail_numerics" and "down.weight.grad" in out.diagnostics["error"]
    assert "flipped" not in out.diagnostics["kinks"]


def test_a_clean_model_with_a_near_kink_passes_without_trying_flips():
    out = _run("near_kink")
    assert out.status == "pass", out.diagnostics.get("error")
    assert "kinks" not in out.diagnostics


def test_the_near_kink_branch_flips_what_it_says_in_the_other_order_only():
    branch = kink_branch.NearKinkBranch(8, seed=3)
    a, b = branch.a.detach(), branch.b.detach()
    exact = a.double() @ b.double()
    found = _found(nn.Sequential(nn.ReLU()), exact, limit=rejudge.MAX_KINKS)
    assert len(found) == rejudge.MAX_KINKS + 1  # more than kink_flips tries
    near = exact.abs() < 1e-5 * exact.pow(2).mean().sqrt()
    assert int(near.sum()) == kink_branch.N and not bool((exact[near] == 0).any())
    plain, split = a @ b, kink_branch.split_k(a, b)
    assert not bool(((plain > 0) != (exact > 0)).any())  # the CPU's plain run: every one right
    assert int(((split > 0) != (exact > 0)).sum()) == kink_branch.FLIPPED


def test_many_near_kinks_flipped_honestly_pass_against_the_pooled_honest_runs():
    # 16 near-kink decisions (more than kink_flips tries), 3 of them taken the other way by the
    # compiled model's honest summation order, none by the CPU's plain run
    out = _run("many_near_kinks", mode="compile")
    assert out.status == "pass", out.diagnostics.get("error")
    assert out.diagnostics["kinks"]["near"] == f"more than {rejudge.MAX_KINKS}: none tried"
    assert out.diagnostics["pooled_for"] == "near-kink decisions"
    assert out.diagnostics["same_dtype_baseline"].startswith("the CPU")
    assert out.diagnostics["pooled_baseline"] >= 3  # the CPU's run and independently rounded ones


def test_without_the_kink_judgement_many_honest_flips_fail(monkeypatch):
    monkeypatch.setattr(rejudge, "KINK_REL_TOL", {})
    out = _run("many_near_kinks", mode="compile")
    assert out.status == "fail_numerics" and "a.grad" in out.diagnostics["error"]
    assert "pooled_for" not in out.diagnostics


def test_a_gradient_fault_beside_many_near_kinks_is_not_pooled_away():
    out = _run("many_near_kinks_nudged_when_compiled", mode="compile")
    assert out.status == "fail_numerics" and "down.weight.grad" in out.diagnostics["error"]
    assert out.diagnostics["pooled_for"] == "near-kink decisions"
