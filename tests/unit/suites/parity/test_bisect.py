"""Compile bisection (`suites/parity/bisect.py`): a failing compiled case runs again with the
backends below its own, and the first that passes says where the fault lives. A fault planted in
a backend's code generation (its backward gradients 2% off) is placed below AOT autograd; a fault
in the model's own compiled path fails with every backend and is placed there; a case already
compiled with `eager` has nothing below it to try."""

from __future__ import annotations

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from tests.unit.suites.parity.test_suite import FAULTS
from trainready.core.case import Case
from trainready.core.context import CaseContext
from trainready.core.worker import execute_case
from trainready.suites.parity import bisect
from trainready.suites.parity import suite as parity

PLANTED = "planted_codegen"


def _skewed_backward(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """The backward graph, its gradients 2% too large: a code generator's bug."""
    inner = make_boxed_func(gm.forward)

    def run(args: list) -> list:
        return [o * 1.02 if isinstance(o, torch.Tensor) else o for o in inner(args)]

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _register_planted() -> None:
    if PLANTED not in torch._dynamo.list_backends(exclude_tags=()):
        backend = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                               bw_compiler=_skewed_backward)  # fmt: skip
        torch._dynamo.register_backend(backend, name=PLANTED)


def _run(factory: str, backend: str):
    params = {
        "source": "factory",
        "model": factory,
        "factory": f"{FAULTS}:{factory}",
        "mode": "compile",
        "dtype": "fp32",
        "steps": 3,
        "compile_backend": backend,
    }
    case = Case("parity", f"custom/{factory}/compile/fp32", params)
    return execute_case(parity, case, CaseContext("cpu", "fp32", 300.0))


def test_a_arises_in_code_generation_is_placed_below_aot_autograd():
    _register_planted()
    out = _run("clean", PLANTED)
    assert out.status == "fail_numerics"
    report = out.diagnostics["compile_bisect"]
    assert report["runs"] == {"aot_eager_decomp_partition": {"status": "pass"}}
    assert "lowering or code generation" in report["arises_in"]
    assert out.diagnostics["error"].endswith(f"the difference arises in {report['arises_in']}")


def test_a_arises_in_the_models_compiled_path_fails_with_every_backend():
    out = _run("zeroed_upstream", "aot_eager")
    assert out.status == "fail_numerics"
    report = out.diagnostics["compile_bisect"]
    assert (
        list(report["runs"]) == ["eager"] and report["runs"]["eager"]["status"] == "fail_numerics"
    )
    assert report["arises_in"] == bisect.NONE_PASS


def test_a_case_compiled_with_eager_has_nothing_below_to_try():
    out = _run("zeroed_upstream", "eager")
    assert out.status == "fail_numerics" and "compile_bisect" not in out.diagnostics
    assert "compile bisection" not in out.diagnostics["error"]


def test_a_clean_case_is_never_bisected():
    _register_planted()
    out = _run("clean", "aot_eager")
    assert out.status == "pass" and "compile_bisect" not in out.diagnostics


def test_the_backends_below_each_one():
    assert bisect.below("inductor") == ["aot_eager_decomp_partition", "aot_eager", "eager"]
    assert bisect.below("my_vendor_backend") == bisect.below("inductor")
    assert bisect.below("aot_eager") == ["eager"]
    assert bisect.below("eager") == []


def test_a_bisection_over_its_budget_runs_nothing_and_says_so(monkeypatch):
    _register_planted()
    monkeypatch.setattr(bisect, "BUDGET_S", 0.0)
    out = _run("clean", PLANTED)
    assert out.status == "fail_numerics"  # the verdict stands; only the placing is unknown
    report = out.diagnostics["compile_bisect"]
    first = report["runs"]["aot_eager_decomp_partition"]
    assert first["status"] == "not run" and "over the bisection's 0 s" in first["why"]
    assert report["arises_in"] is None and "compile bisection" not in out.diagnostics["error"]
