"""The dispatcher rule of device/dispatch.py against the dispatcher's own computed table, and the
watch's nesting rule: host round-trips inside the device's own kernels."""

from __future__ import annotations

import re

import pytest
import torch

from trainready.device.dispatch import (
    COMPOSITE,
    FALLBACK,
    KERNEL,
    MISSING,
    DispatchWatch,
    backend_key,
    classify,
    crosses_host,
    is_transfer,
    op_name,
    roundtrip_label,
)
from trainready.probes.ops import OpsProbe, OpsReport, fell_back
from trainready.reporting.sections import host as host_section

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


# -- host round-trips inside the device's own kernels ----------------------------------------------
# The meta device stands in for an accelerator (its key, Meta, has kernels of its own and no
# fallback). Ops of a test namespace get Meta kernels: one makes its result on the host and moves
# it to the device, one stays on the device, one calls the first. Meta tensors cannot be copied to
# the host, so the host work here is the upload; tests/e2e/test_emu_roundtrips.py plants the
# whole round-trip on emu, with its CPU fallback beside it.
@pytest.fixture(scope="module")
def rt():
    lib = torch.library.Library("trainready_rt", "DEF")
    for name in ("via_host", "on_device", "calls_via_host"):
        lib.define(f"{name}(Tensor x) -> Tensor")
    lib.impl("via_host", lambda x: torch.zeros(x.shape).to(x.device), "Meta")
    lib.impl("on_device", lambda x: torch.empty_like(x), "Meta")
    lib.impl("calls_via_host", lambda x: torch.ops.trainready_rt.via_host(x) + 1, "Meta")
    yield torch.ops.trainready_rt
    lib._destroy()


def test_a_kernel_that_makes_its_result_on_the_host_is_named(rt):
    x = torch.empty(3, device="meta")
    with DispatchWatch("meta") as w:
        rt.via_host(x)
        rt.via_host(x)
    assert w.roundtrips == {"trainready_rt::via_host": 2}
    assert w.left_device() == {"host round-trip inside trainready_rt::via_host": 2}
    assert w.roundtrip_source.startswith("dispatcher nesting, ") and w.nested > 0


def test_the_innermost_kernel_that_copied_is_named(rt):
    with DispatchWatch("meta") as w:
        rt.calls_via_host(torch.empty(3, device="meta"))
    assert w.roundtrips == {"trainready_rt::via_host": 1}


def test_device_kernels_composites_and_the_regions_own_copies_are_not(rt):
    with DispatchWatch("meta") as w:
        x = torch.ones(3).to("meta")  # the region's own copy, through the _to_copy composite
        y = rt.on_device(x) + x.to(torch.float64)  # a kernel that stays; a composite's copy
        torch.zeros(2, device="meta").copy_(torch.ones(2))  # a kernel-kind copy, top level
    assert y.device.type == "meta"
    assert w.kinds[KERNEL] > 0 and w.kinds[COMPOSITE] > 0
    assert not w.roundtrips and not w.left_device()


def test_the_cpu_is_not_measured():
    with DispatchWatch("cpu") as w:
        torch.ones(2).cpu()
    assert w.roundtrip_source == "not measured: the device is the CPU" and not w.roundtrips


def test_transfers_cross_the_host_boundary_only_between_host_and_device():
    cpu, meta = torch.empty(1), torch.empty(1, device="meta")
    assert is_transfer("aten::_to_copy") and is_transfer("aten::to.dtype_layout")
    assert is_transfer("aten::copy_") and not is_transfer("aten::mul.Tensor")
    assert crosses_host((meta,), {"device": torch.device("cpu")}, "meta")
    assert crosses_host((meta, cpu), {}, "meta")
    assert not crosses_host((meta, meta), {}, "meta")
    assert not crosses_host((cpu,), {"dtype": torch.float64}, "meta")


def test_the_ops_probe_records_round_trips_next_to_fallbacks(rt):
    with OpsProbe("meta") as probe:
        rt.via_host(torch.empty(3, device="meta"))
    record = probe.report.to_json()
    assert record["dispatch_roundtrips"] == {"trainready_rt::via_host": 1}
    assert record["roundtrip_source"].startswith("dispatcher nesting, ")
    assert fell_back(record) == {"host round-trip inside trainready_rt::via_host": 1}
    assert probe.report.metrics()["kernel_roundtrip_ops"] == 1
    unwatched = OpsReport.unrecorded("meta", "it raised").to_json()
    assert unwatched["roundtrip_source"] == "not measured: it raised"
    assert "kernel_roundtrip_ops" not in OpsReport("cpu").metrics()


def test_reports_word_the_round_trip_as_the_watch_does():
    assert host_section.roundtrip_label("aten::bmm") == roundtrip_label("aten::bmm")
