"""The layout check (`trainready/probes/layouts.py`): it names an op whose output layout differs
from its meta kernel's where a view depends on it, and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.support.layout_faults import laid_out
from trainready.probes.layouts import LayoutCheck

LIB = "trainready_layout_test"


@pytest.fixture(scope="module")
def ops():
    """Custom ops whose real kernels return `laid_out(kind)` and whose fake kernels say row-major,
    as PyTorch's meta kernels do; `plain` has no fake kernel at all."""
    lib = torch.library.Library(LIB, "FRAGMENT")
    for kind in ("transposed", "size_one", "rowmajor"):
        lib.define(f"{kind}(Tensor x) -> Tensor")
        lib.impl(kind, lambda x, k=kind: laid_out(x * 2, x.device, k), "CPU")
        lib.impl(kind, lambda x: torch.empty_like(x, memory_format=torch.contiguous_format), "Meta")
    lib.define("plain(Tensor x) -> Tensor")
    lib.impl("plain", lambda x: x * 2, "CPU")
    yield getattr(torch.ops, LIB)
    lib._destroy()


def test_an_op_laid_out_otherwise_than_its_meta_kernel_is_named_with_both_layouts(ops):
    x = torch.randn(2, 3, 4)
    check = LayoutCheck()
    with check:
        y = ops.transposed(x)
        ops.transposed(x + 1)
    assert torch.equal(y, x * 2)  # the op ran as it is: the check changes nothing
    [m] = check.report.to_json()["mismatches"]
    assert m["op"] == f"{LIB}.transposed.default" and m["calls"] == 2
    assert (m["shape"], m["device_strides"], m["meta_strides"]) == (
        [2, 3, 4],
        [12, 1, 3],
        [12, 4, 1],
    )
    sentence = check.report.sentence()
    assert sentence.startswith("output layouts that differ from PyTorch's meta kernels")
    assert "(shape (2, 3, 4): strides (12, 1, 3) on the device, (12, 4, 1) by its meta kernel)" in (
        sentence
    )


def test_layouts_that_differ_only_where_no_view_looks_are_not_named(ops):
    x = torch.randn(4, 1, 8)  # a dimension of length 1: its stride means nothing
    check = LayoutCheck()
    with check:
        a = ops.size_one(x)
        ops.rowmajor(x)
        torch.nn.functional.silu(x.transpose(0, 2)).sum()  # PyTorch's own ops, strided input
    assert a.stride() != torch.empty(4, 1, 8).stride()  # different, and harmless
    report = check.report.to_json()
    assert report["mismatches"] == [] and report["unchecked_calls"] == 0
    assert report["checked_calls"] == 5  # size_one, rowmajor, transpose, silu, sum
    assert check.report.sentence() == (
        "the device's output layouts match PyTorch's meta kernels (5 calls of 5 ops checked)"
    )


def test_an_op_without_a_fake_kernel_is_unchecked_never_a_match(ops):
    x = torch.randn(3, 3)
    check = LayoutCheck()
    with check:
        ops.plain(x)
    report = check.report.to_json()
    assert (report["checked_calls"], report["unchecked_calls"], report["mismatches"]) == (0, 1, [])


def test_a_wrong_shape_is_named_as_one(ops):
    lib = torch.library.Library(LIB, "FRAGMENT")
    lib.define("shrinks(Tensor x) -> Tensor")
    lib.impl("shrinks", lambda x: x[:-1] * 1, "CPU")
    lib.impl("shrinks", lambda x: torch.empty_like(x), "Meta")
    try:
        check = LayoutCheck()
        with check:
            ops.shrinks(torch.randn(3, 2))
    finally:
        lib._destroy()
    assert "shrinks.default (shape (2, 2) on the device, (3, 2) by its meta kernel)" in (
        check.report.sentence()
    )


@pytest.mark.slow
def test_on_emu_the_backward_ops_are_checked_too():
    """A backward op runs on the autograd engine's device thread: the check sees it there too.
    (emu in a subprocess: it is never imported in pytest's.)"""
    code = """
import json, torch, trainready.testing.emu
from tests.support.layout_faults import laid_out
from trainready.probes.layouts import LayoutCheck
lib = torch.library.Library("aten", "IMPL")
lib.impl("silu_backward",
         lambda g, x: laid_out(torch.ops.aten.silu_backward(g.cpu(), x.cpu()), x.device,
                               "transposed"), "PrivateUse1")
x = torch.randn(2, 4, 8, device="emu", requires_grad=True)
check = LayoutCheck()
with check:
    torch.nn.functional.silu(x).sum().backward()
print(json.dumps([m["op"] for m in check.report.to_json()["mismatches"]]), flush=True)
# Out without finalising: an autograd device thread that ran Python (the kernel above, the check)
# may race the interpreter's shutdown and abort ("terminate called without an active exception",
# PyTorch's exit race, pytorch/pytorch#38230's kind), as a loaded CI machine showed once.
import os
os._exit(0)
"""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.splitlines()[-1]) == ["aten.silu_backward.default"]
