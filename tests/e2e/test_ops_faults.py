"""The ops suite proven by planted faults (#36, item 6), on emu.

Every kernel fault of `trainready.testing.faults` that names op_db entries (`Fault.ops`) is
planted, and the ops suite runs those entries' cases (`faults.ops_cases`: the quick preset's
dtypes and samples). A wrong kernel must fail at least one of its cases (`fail_numerics`, or
`fail_run`), every failing case naming the planted aten overload among the ops it ran
(`diagnostics["aten"]`) and the planted bug counted as acting there (`faults.hits`); a
correct-but-different kernel (another reduction order, an addbmm more accurate than the CPU's)
must pass every case; with nothing planted, every one of those cases passes on emu, or is skipped
or unsupported for a reason that is not its numbers -- before the faults and after they were
removed.

Emu is never imported in the pytest process (it would make `auto` resolve to emu in every later
test): everything runs in one spawned process, in order (clean, each fault planted, run and
removed, clean again), through `benchmarks.planted_faults.ops_in_processes(..., fresh=False)`;
the benchmark (`--columns ops`) runs each fault in a fresh process instead. About 15 s on 2 cores.
"""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.planted_faults import CLEAN, FAILING, OpsRecord, ops_in_processes, ops_rows
from trainready.testing import faults

pytestmark = pytest.mark.slow

CATCH = [name for name, f in faults.FAULTS.items() if f.ops and f.expect == "catch"]
PASS = [name for name, f in faults.FAULTS.items() if f.ops and f.expect == "pass"]
# Misses the suite has today, each with its reason; strict, so a fixed suite fails them loudly.
MISSES: dict[str, str] = {}
# Rows of the benchmark's ops table (fault, dtype) that miss, each with its reason, measured and
# so not required (`Fault.weak_on`; benchmarks/results/planted-faults.md, "The ops suite on emu").
MISSED_ROWS = {
    ("softmax_scale_2pct", "bf16"): "the softmax cases whose samples are bf16 pass (worst "
    "0.85 of the allowance): a 2% scale of op_db's inputs moves the output by less than bf16 "
    "resolves; it fails only cases whose samples are float64 (with_dtype) or float32 "
    "(_safe_softmax's samples ignore the dtype)",
}
# Correct-but-different kernels more accurate than the CPU: these cases must say so.
CLOSER = {"addbmm_float64": ("addbmm/fp32/fwd", "addbmm/bf16/fwd")}
# Why a clean case may end other than `pass`: nothing about its numbers.
EXCUSES = {
    "no_samples",
    "cpu_unsupported",
    "not_in_database",
    "reference_invalid",
    "dtype",
    "missing",
    "database",
}


def _marked(name: str):
    if name in MISSES:
        return pytest.param(name, marks=pytest.mark.xfail(reason=MISSES[name], strict=True))
    return name


@pytest.fixture(scope="module")
def records() -> list[OpsRecord]:
    return ops_in_processes([CLEAN, *CATCH, *PASS, CLEAN], fresh=False)


def _of(records: list[OpsRecord], fault: str) -> list[OpsRecord]:
    mine = [r for r in records if r.fault == fault]
    assert mine, f"no ops case ran for {fault}"
    return mine


def test_each_fault_names_its_cases_by_entry_form_and_dtype(monkeypatch):
    """`ops_cases`: an entry's cases in the quick preset, one form of them, or one case; a form
    the quick preset lacks in the standard preset's dtypes with quick's three samples."""
    names = [c.name for c in faults.ops_cases("norm_backward_1pct")]
    assert names == [
        "native_layer_norm/fp32/bwd",
        "native_layer_norm/bf16/bwd",
        "nn.functional.layer_norm/fp32/bwd",
        "nn.functional.layer_norm/bf16/bwd",
    ]
    assert [c.name for c in faults.ops_cases("exp_1pct")] == [
        "exp/fp32/fwd",
        "exp/fp32/bwd",
        "exp/bf16/fwd",
        "exp/bf16/bwd",
        "exp/fp64/fwd",
    ]
    assert {c.params["samples"] for c in faults.ops_cases("gemm_contiguous_only")} == {3}
    assert faults.ops_cases("adamw_bias_correction") == []  # op_db has no _foreach_ entry
    for name, fault in faults.FAULTS.items():  # every entry named is in this torch's op_db
        entries = {c.params["entry"] for c in faults.ops_cases(name)}
        assert entries == {item.split("/")[0] for item in fault.ops}, name
    exp = dataclasses.replace(faults.FAULTS["exp_1pct"], ops=("exp/inplace", "exp/bf16/bwd"))
    monkeypatch.setitem(faults.FAULTS, "exp_1pct", exp)
    cases = faults.ops_cases("exp_1pct")
    assert [c.name for c in cases] == ["exp/fp32/inplace", "exp/bf16/bwd"]
    assert cases[0].params["samples"] == 3
    monkeypatch.setitem(faults.FAULTS, "exp_1pct", dataclasses.replace(exp, ops=("nope",)))
    with pytest.raises(ValueError, match="op_db has no entry 'nope'"):
        faults.ops_cases("exp_1pct")


@pytest.mark.parametrize("fault", [_marked(n) for n in CATCH])
def test_a_wrong_kernel_fails_a_case_that_names_it(records, fault):
    mine = _of(records, fault)
    assert sum(r.hits for r in mine) > 0, "the planted bug never acted in its cases"
    failing = [r for r in mine if r.status in FAILING]
    assert failing, [(r.case, r.status, r.ratio, r.judged) for r in mine]
    kernels = {f"aten::{op}" for op in faults.FAULTS[fault].kernels}
    for r in failing:
        assert set(r.named) & kernels, (r.case, r.named)  # diagnostics["aten"] names it
        assert r.hits > 0, r.case  # ... and it acted in the very case that failed
        if r.status == "fail_numerics":
            assert r.ratio > 1.0 and r.error.startswith(r.output), r


@pytest.mark.parametrize("fault", PASS)
def test_a_correct_but_different_kernel_passes_every_case(records, fault):
    mine = _of(records, fault)
    assert sum(r.hits for r in mine) > 0, "the planted kernel never ran in its cases"
    assert all(r.status == "pass" for r in mine), [(r.case, r.status, r.error) for r in mine]
    for case in CLOSER.get(fault, ()):
        (r,) = [r for r in mine if r.case == case]
        assert r.closer and r.hits > 0, r  # closer to float64 than the CPU, and passed


def test_nothing_planted_no_case_fails(records):
    """0 false alarms: every case of every fault, clean, before the faults and after them."""
    clean = _of(records, CLEAN)
    every = {c.name for n in CATCH + PASS for c in faults.ops_cases(n)}
    assert [r.case for r in clean] == [*dict.fromkeys(r.case for r in clean)] * 2
    assert {r.case for r in clean} == every
    for r in clean:
        excused = r.status in ("skipped", "unsupported") and r.excuse in EXCUSES
        assert r.status == "pass" or excused, (r.case, r.status, r.excuse, r.error)
    assert sum(r.status == "pass" for r in clean) > 0.9 * len(clean)


def test_the_catch_table_catches_every_fault_in_fp32_and_passes_the_right_runs(records):
    """The benchmark's ops rows from the same records: every required catch made, or one of
    MISSES; no false alarm."""
    rows = ops_rows(records)
    for row in rows:
        if row.verdict == "not exercised in this dtype":  # mm's fp64 cases: forward only
            assert row.fault != CLEAN and row.bug_calls == 0 and not row.bad, row
        elif row.fault in MISSES:
            assert row.verdict == "missed", row
        elif (row.fault, row.dtype) in MISSED_ROWS:
            assert row.verdict.startswith("missed (under the goal)") and not row.required, row
        elif row.expect == "catch" and row.required:
            assert row.verdict == "caught", row
        elif row.expect == "pass":
            assert row.verdict == "ok", row
    assert {r.fault for r in rows if r.dtype == "fp32" and r.verdict == "caught"} == set(
        CATCH
    ) - set(MISSES)


def test_the_ops_section_replaces_its_own_and_keeps_the_rest_of_the_file():
    from benchmarks.planted_faults import OPS_SECTION, with_section

    old = f"# T\n\n## A\n\na\n\n{OPS_SECTION}, 2026-01-01\n\nold\n\n## B\n\nb\n"
    new = f"{OPS_SECTION}, 2026-12-05\n\nnew\n"
    assert with_section(old, new) == f"# T\n\n## A\n\na\n\n{new}\n## B\n\nb\n"
    assert with_section("# T\n\n## A\n", new) == f"# T\n\n## A\n\n{new}"
