"""The ops suite's plan: presets, dtype and entry filters, what the CPU can reference."""

from __future__ import annotations

from trainready.suites.ops.plan import PRESETS, plan

ADD = {
    "entry": "add",
    "op": "add",
    "variant": "",
    "autograd": True,
    "dtypes": ["bf16", "fp16", "fp32", "fp64"],
    "backward_dtypes": ["bf16", "fp32", "fp64"],
    "inplace": True,
    "out": True,
}
NORMAL = {
    "entry": "normal(in_place)",
    "op": "normal",
    "variant": "in_place",
    "autograd": False,
    "dtypes": ["fp32", "fp64"],
    "backward_dtypes": [],
    "inplace": False,
    "out": False,
}
BROKEN = {"entry": "gone", "error": "AttributeError: no sample_inputs"}


def names(cases):
    return [c.name for c in cases]


def test_smoke_is_first_sample_fp32_forward_of_every_entry():
    cases = plan("ops", [ADD, NORMAL], "smoke")
    assert names(cases) == ["add/fp32/fwd", "normal(in_place)/fp32/fwd"]
    assert {c.params["samples"] for c in cases} == {1}


def test_quick_plans_backward_only_where_the_cpu_has_autograd_in_that_dtype():
    quick = names(plan("ops", [ADD, NORMAL], "quick"))
    assert quick == [
        "add/fp32/fwd",
        "add/fp32/bwd",
        "add/bf16/fwd",
        "add/bf16/bwd",
        "add/fp64/fwd",
        "normal(in_place)/fp32/fwd",
        "normal(in_place)/fp64/fwd",
    ]
    assert PRESETS["quick"].samples == 3


def test_standard_adds_fp16_and_the_inplace_and_out_forms():
    standard = names(plan("ops", [ADD], "standard"))
    assert "add/fp16/fwd" in standard and "add/fp16/bwd" not in standard  # no fp16 autograd
    assert "add/fp32/inplace" in standard and "add/fp32/out" in standard
    assert all(c.params["samples"] is None for c in plan("ops", [ADD], "standard"))


def test_filters_dtype_entries_and_samples():
    cases = plan("ops", [ADD, NORMAL], "quick", dtype="fp64", only=["normal"], samples=7)
    assert names(cases) == ["normal(in_place)/fp64/fwd"]
    assert cases[0].params == {
        "op": "normal",
        "variant": "in_place",
        "entry": "normal(in_place)",
        "dtype": "fp64",
        "direction": "fwd",
        "form": "function",
        "samples": 7,
    }


def test_a_broken_entry_gets_one_case_that_says_so():
    assert names(plan("ops", [BROKEN], "quick")) == ["gone/fp32/fwd"]
