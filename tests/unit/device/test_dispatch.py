"""The dispatcher rule of device/dispatch.py against the dispatcher's own computed table."""

from __future__ import annotations

import re

import pytest
import torch

from trainready.device.dispatch import (
    COMPOSITE,
    FALLBACK,
    KERNEL,
    MISSING,
    backend_key,
    classify,
    op_name,
)

# The tag `_dispatch_dump_table` prints after each computed entry -> our kind.
TAGS = {
    "[kernel]": KERNEL,
    "[default backend kernel]": COMPOSITE,
    "[math kernel]": COMPOSITE,
    "[backend fallback]": FALLBACK,
}


def computed_kind(name: str, key: str) -> str:
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith(f"{key}:"):
            tag = re.search(r"\[[^\]]+\]$", line)
            assert tag is not None and tag.group(0) in TAGS, line
            return TAGS[tag.group(0)]
    return MISSING


def assert_rule_matches_table(keys: tuple[str, ...]) -> int:
    classify.cache_clear()
    checked = 0
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        for key in keys:
            assert classify(name, key) == computed_kind(name, key), (name, key)
            checked += 1
    return checked


def test_rule_matches_the_computed_table_for_every_aten_op():
    checked = assert_rule_matches_table(("PrivateUse1", "CUDA", "XPU", "MPS"))
    assert checked > 4 * 2000


def test_known_ops_on_a_backend_without_kernels():
    assert classify("aten::add.Tensor", "CPU") == KERNEL
    # add.Tensor is structured: a backend with no kernel of its own (PrivateUse1 here) reaches
    # it through the composite that calls add.out.
    assert classify("aten::add.Tensor", "PrivateUse1") == COMPOSITE
    assert classify("aten::linear", "PrivateUse1") == COMPOSITE
    assert classify("aten::t", "PrivateUse1") == COMPOSITE


@pytest.mark.parametrize(
    "device_type, key",
    [("cpu", "CPU"), ("cuda", "CUDA"), ("xpu", "XPU"), ("mps", "MPS"), ("meta", "Meta")],
)
def test_backend_key(device_type, key):
    assert backend_key(device_type) == key


def test_backend_key_of_the_privateuse1_backend():
    assert backend_key(torch._C._get_privateuse1_backend_name()) == "PrivateUse1"


def test_op_name_is_the_schema_name():
    assert op_name(torch.ops.aten.add.Tensor) == "aten::add.Tensor"
    assert op_name(torch.ops.aten.mm.default) == "aten::mm"
