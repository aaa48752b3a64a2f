"""Fallback and graph-break headlines claim a number only where something measured it."""

from __future__ import annotations

from trainready.core.case import Case, Result
from trainready.reporting.sections import host
from trainready.reporting.sections.parity import graph_breaks_stat


def _result(name: str, **diagnostics) -> Result:
    return Result(Case("parity", name, {"model": name}), "pass", diagnostics=diagnostics)


def _name(r: Result) -> str:
    return r.case.name


DISPATCHER = {
    "device": "emu",
    "dispatch_key": "PrivateUse1",
    "dispatch_fallbacks": {"aten::add.out": 3, "aten::_softmax": 1},
    "dispatch_missing": {},
    "fallbacks": {},
    "fallback_source": "CPU-fallback warnings (warn-always)",
}


def test_dispatcher_record_counts_ops_and_names_its_source():
    stat = host.collect([_result("a", ops=DISPATCHER), _result("b", ops=DISPATCHER)], _name).stat()
    assert stat.value == 2
    # A warnings record that stayed silent proves nothing (the fallback may not warn at all).
    assert stat.note.startswith("dispatcher over 2 cases; ")
    assert "aten::_softmax" in stat.note


def test_a_backend_record_counts_where_silence_means_none_fell_back():
    mps = {"device": "mps", "dispatch_key": None, "fallbacks": {}, "fallback_complete": True}
    mps["fallback_source"] = "CPU-fallback warnings (warn-always)"
    stat = host.collect([_result("a", ops=mps)], _name).stat()
    assert (stat.value, stat.note) == (0, "backend record over 1 case")
    silent = {**mps, "fallback_complete": False}
    assert host.collect([_result("a", ops=silent)], _name).stat().value == "unknown"


def test_table_rows_per_source_with_calls_and_cases():
    vendor = {**DISPATCHER, "fallbacks": {"aten::nonzero": 1}}
    fallbacks = host.collect([_result("a", ops=DISPATCHER), _result("b", ops=vendor)], _name)
    rows = {(row[0], row[1]): row[2:4] for row in host.table(fallbacks, "t").rows}
    assert rows[(host.DISPATCHER, "aten::add.out")] == [6, 2]
    assert rows[(host.VENDOR, "aten::nonzero")] == [1, 1]


def test_cpu_is_not_applicable_and_nothing_recorded_is_unknown():
    cpu = {"device": "cpu", "dispatch_key": None, "fallback_source": "none: the device is the CPU"}
    assert host.collect([_result("a", ops=cpu)], _name).stat().value == "n/a"
    assert host.collect([_result("a")], _name).stat().value == "unknown"
    no_key = {"device": "weird", "dispatch_key": None, "fallback_source": ""}
    assert host.collect([_result("a", ops=no_key)], _name).stat().value == "unknown"


def test_graph_breaks_only_over_compiled_cases():
    assert graph_breaks_stat([_result("a")]).value == "no compiled case ran"
    compiled = [_result("a", compile={"break_reasons": {}}), _result("b", compile={})]
    stat = graph_breaks_stat(compiled)
    assert (stat.value, stat.note) == (0, "over 2 compiled cases")


def test_round_trips_inside_kernels_are_named_apart_from_fallbacks():
    planted = {**DISPATCHER, "dispatch_kinds": {"kernel": 7, "fallback": 4}}
    planted["dispatch_roundtrips"] = {"aten::mul.Tensor": 2}
    clean = {**planted, "dispatch_roundtrips": {}}
    fallbacks = host.collect([_result("a", ops=planted), _result("b", ops=clean)], _name)
    stat = fallbacks.roundtrip_stat()
    assert stat.value == 1
    assert stat.note == (
        "dispatcher nesting over 2 cases, 22 aten calls; host round-trip inside aten::mul.Tensor"
    )
    assert fallbacks.fallback_ops == {"aten::add.out", "aten::_softmax"}  # counted apart
    rows = {(row[0], row[1]): row[2:4] for row in host.table(fallbacks, "t").rows}
    assert rows[(host.ROUNDTRIP, "host round-trip inside aten::mul.Tensor")] == [2, 1]


def test_round_trips_not_measured_say_why():
    cpu = {"device": "cpu", "roundtrip_source": "not measured: the device is the CPU"}
    stat = host.collect([_result("a", ops=cpu), _result("b")], _name).roundtrip_stat()
    assert (stat.value, stat.note) == (
        "not measured",
        "1 case: the device is the CPU; 1 case: no ops record (a compiled case, or one that "
        "ended before its eager step)",
    )
    # Measured in one case, not in a compiled one: the count says what it leaves out.
    measured = {**DISPATCHER, "dispatch_roundtrips": {}}
    stat = host.collect([_result("a", ops=measured), _result("b")], _name).roundtrip_stat()
    assert stat.value == 0 and stat.note.endswith(
        "; not measured in 1 case: no ops record (a "
        "compiled case, or one that ended before its "
        "eager step)"
    )
