"""The readiness verdict's rules, dimension by dimension, over synthetic results; the thresholds
file a team gives; the verdict at the top of every format, and in the JSON for CI."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from trainready.core.case import Case, Result
from trainready.core.config import ConfigError
from trainready.core.store import RunRecord, Store
from trainready.reporting import render
from trainready.reporting.model import build_run
from trainready.reporting.terminal import print_summary
from trainready.reporting.verdict import NOT_READY, NOT_TESTED, PARTIAL, READY, judge, load_rules

ALL = ["parity", "matmul", "flex", "train", "dist"]


def _run(results: list[Result], suites: list[str] | None = None, planned: list[Case] = ()):
    suites = suites or sorted({r.case.suite for r in results} | {c.suite for c in planned})
    record = RunRecord("r", 1.7e9, suites, "cuda:0", "quick")
    cases = [r.case for r in results] + list(planned)
    return build_run(record, results, "H200", cases)


def _line(run, key: str, rules=None):
    return next(line for line in judge(run, rules).lines if line.key == key)


def _parity(name: str, mode: str, status: str = "pass", **diagnostics) -> Result:
    case = Case("parity", f"hf/{name}/{mode}/fp32", {"model": name, "mode": mode})
    diagnostics.setdefault("ops", {"device": "cuda:0", "dispatch_key": "CUDA"})
    if mode == "compile":
        diagnostics.setdefault("compile", {"break_reasons": {}})
    return Result(
        case, status, {}, {"error": "boom"} | diagnostics if status != "pass" else diagnostics
    )


def _parity_run(eager: list[str], compiled: list[str], **extra) -> list[Result]:
    return [_parity(f"e{i}", "eager", s, **extra) for i, s in enumerate(eager)] + [
        _parity(f"c{i}", "compile", s, **extra) for i, s in enumerate(compiled)
    ]


def _matmul(mfu: float, status: str = "pass", m: int = 128, **diagnostics) -> Result:
    case = Case("matmul", f"m/q/M{m}-{int(mfu * 1000)}/fwd", {"M": m})
    return Result(case, status, {"mfu": mfu, "tflops": 1.0}, diagnostics)


def _train(**metrics: float) -> Result:
    return Result(Case("train", "qwen3-8b/T4096", {}), "pass", metrics, {"scenarios": {}})


# --- every dimension, without its suite: not tested, never ready ------------------------------


def test_a_run_of_some_suites_says_not_tested_for_the_rest():
    run = _run([_matmul(0.7)], ["matmul"])
    lines = {line.key: line for line in judge(run).lines}
    assert [lines[k].status for k in ("correctness", "compile", "first_step", "attention")] == [
        NOT_TESTED
    ] * 4
    assert lines["distributed"].status == NOT_TESTED
    assert lines["distributed"].reason == "the dist suite was not in this run"
    assert lines["numerics"].status == NOT_TESTED  # matmul's spot checks are not training
    assert "parity suite" in lines["numerics"].reason
    # Throughput measured by one of its two suites: at most partial, and it says why.
    assert lines["throughput"].status == PARTIAL
    assert lines["throughput"].reason.startswith("no train MFU; median matmul MFU 70.0%")
    assert judge(run).overall.status == PARTIAL


def test_an_empty_run_is_not_tested_overall():
    verdict = judge(_run([], ALL))
    assert {line.status for line in verdict.lines} == {NOT_TESTED}
    assert verdict.overall.status == NOT_TESTED


def test_planned_cases_that_never_ran_are_not_tested():
    planned = [Case("flex", f"causal/{i}", {"pass": "fwd"}) for i in range(3)]
    line = _line(_run([], ["flex"], planned), "attention")
    assert (line.status, line.reason) == (NOT_TESTED, "none of the 3 planned flex cases ran")


# --- correctness ----------------------------------------------------------------------------------


def test_correctness_takes_the_worse_mode():
    ready = _line(_run(_parity_run(["pass"] * 20, ["pass"] * 20)), "correctness")
    assert ready.status == READY
    assert (
        ready.reason
        == "eager: 20 of 20 cases pass (100.0%); compiled: 20 of 20 cases pass (100.0%)"
    )
    assert (ready.section, ready.section_title) == ("suite-parity", "Suite: parity")
    # 19/20 eager passes (95%: ready), compiled 15/20 (75%: partial): compiled decides.
    mixed = _parity_run(["pass"] * 19 + ["fail_run"], ["pass"] * 15 + ["unsupported"] * 5)
    line = _line(_run(mixed), "correctness")
    assert line.status == PARTIAL
    assert line.reason.startswith("compiled: 15 of 20 cases pass (75.0%), below the 95.0%")
    assert "5 unsupported; e.g. parity/hf/c15/compile/fp32: boom" in line.reason
    bad = _parity_run(["pass"] * 4 + ["fail_numerics"] * 6, ["pass"] * 10)
    assert _line(_run(bad), "correctness").status == NOT_READY


def test_correctness_without_compiled_mode_is_at_most_partial():
    line = _line(_run(_parity_run(["pass"] * 10, [])), "correctness")
    assert line.status == PARTIAL
    assert line.reason.startswith("compiled mode not run; eager: 10 of 10")


def test_not_run_counts_against_and_skipped_is_left_out():
    results = _parity_run(["pass"] * 10, ["pass"] * 10)
    results.append(_parity("skip", "eager", "skipped"))
    assert _line(_run(results), "correctness").status == READY  # skipped: not the device's
    missing = [Case("parity", f"hf/x{i}/compile/fp32", {"mode": "compile"}) for i in range(10)]
    line = _line(_run(results, planned=missing), "correctness")
    assert line.status == PARTIAL and "compiled: 10 of 20 cases pass (50.0%)" in line.reason
    assert "10 not run" in line.reason


# --- numerics -------------------------------------------------------------------------------------


def test_numerics_counts_wrong_results_in_every_suite():
    clean = _parity_run(["pass"] * 10, ["pass"] * 10) + [_matmul(0.5)]
    line = _line(_run(clean), "numerics")
    assert (line.status, line.reason) == (
        READY,
        "none of 21 cases with a numerics check is wrong",
    )
    one = [*clean, _matmul(0.4, "fail_numerics", error="max rel err 0.3")]
    line = _line(_run(one), "numerics")
    assert line.status == PARTIAL  # 1 of 22 = 4.5%, within 5%
    assert line.reason == (
        "1 of 22 cases with a numerics check wrong (4.5%); e.g. matmul/m/q/M128-400/fwd: "
        "max rel err 0.3"
    )
    assert line.section == "causes" and line.section_title == "Failures by cause"
    many = clean + [_parity(f"w{i}", "eager", "fail_numerics") for i in range(5)]
    assert _line(_run(many), "numerics").status == NOT_READY


def test_numerics_fails_without_parity_when_a_single_op_is_wrong():
    run = _run([_matmul(0.5), _matmul(0.4, "fail_numerics")], ["matmul"])
    assert _line(run, "numerics").status == NOT_READY  # 1 of 2: found wrong, so tested


def test_numerics_counts_only_cases_that_reached_a_numerics_check():
    """A case that crashed, failed to run or was unsupported never compared a number: it is in
    no count, and a run of only such cases did not test numerics -- never ready."""
    never = [
        _parity("crash", "eager", "crashed"),
        _parity("run", "eager", "fail_run"),
        _parity("unsup", "compile", "unsupported"),
    ]
    clean = _parity_run(["pass"] * 10, [])
    line = _line(_run(clean + never), "numerics")
    assert (line.status, line.reason) == (READY, "none of 10 cases with a numerics check is wrong")
    # 1 wrong of 20 checked is 5% (partial); counted over 23 it would read 4.3%
    one = _parity_run(["pass"] * 19 + ["fail_numerics"], []) + never
    line = _line(_run(one), "numerics")
    assert line.status == PARTIAL
    assert line.reason.startswith("1 of 20 cases with a numerics check wrong (5.0%)")
    line = _line(_run(never), "numerics")
    assert (line.status, line.reason) == (NOT_TESTED, "no case reached a numerics check")


# --- host fallbacks -------------------------------------------------------------------------------


def _ops(roundtrips: dict[str, int] | None = None, **fallbacks: int) -> dict:
    record = {"device": "foo:0", "dispatch_key": "PrivateUse1", "dispatch_fallbacks": fallbacks}
    record["dispatch_kinds"] = {"kernel": 40, "composite": 10}
    return record if roundtrips is None else {**record, "dispatch_roundtrips": roundtrips}


def test_host_fallbacks_from_the_dispatcher_record():
    none = _parity_run(["pass"] * 3, [], ops=_ops({}))
    line = _line(_run(none), "host_fallbacks")
    assert (line.status, line.reason) == (
        READY,
        "no op fell back to the host (dispatcher over 3 cases); no host round-trip inside the "
        "device's kernels (dispatcher nesting over 3 cases, 150 aten calls)",
    )
    few = _parity_run(["pass"] * 3, [], ops=_ops(**{"aten::mm": 4, "aten::add.out": 1}))
    line = _line(_run(few), "host_fallbacks")
    assert line.status == PARTIAL
    assert line.reason.startswith("2 ops fell back to the host: aten::add.out, aten::mm")
    many = _parity_run(["pass"], [], ops=_ops(**{f"aten::op{i}": 1 for i in range(11)}))
    line = _line(_run(many), "host_fallbacks")
    assert line.status == NOT_READY and "(+7)" in line.reason


def test_a_host_round_trip_inside_a_kernel_is_not_no_host_fallbacks():
    planted = _parity_run(["pass"] * 2, [], ops=_ops({"aten::mul.Tensor": 3}))
    line = _line(_run(planted), "host_fallbacks")
    assert line.status == PARTIAL
    assert line.reason == (
        "no op fell back to the host (dispatcher over 2 cases); host round-trip inside "
        "aten::mul.Tensor (dispatcher nesting over 2 cases, 100 aten calls)"
    )


def test_host_round_trips_not_measured_are_said_so():
    # A record from before the rule, and compiled cases (no ops record): "not measured".
    old = _parity_run(["pass"], [], ops=_ops()) + _parity_run([], ["pass"], ops=None)
    line = _line(_run(old), "host_fallbacks")
    assert line.status == READY
    assert line.reason.endswith(
        "host round-trips inside kernels not measured (1 case: recorded before the rule; 1 "
        "case: no ops record (a compiled case, or one that ended before its eager step))"
    )


def test_host_fallbacks_unknown_is_not_tested_and_the_cpu_has_none():
    unknown = _parity_run(["pass"], [], ops={"device": "foo:0", "fallback_source": "none"})
    line = _line(_run(unknown), "host_fallbacks")
    assert line.status == NOT_TESTED and line.reason.startswith("unknown")
    cpu = _parity_run(["pass"], [], ops={"device": "cpu"})
    line = _line(_run(cpu), "host_fallbacks")
    assert (line.status, line.reason) == (READY, "the device is the CPU: nothing to fall back from")


# --- compile --------------------------------------------------------------------------------------


def test_compile_failures_and_graph_breaks():
    ok = _parity_run([], ["pass"] * 10)
    line = _line(_run(ok), "compile")
    assert line.status == READY
    assert line.reason == "10 compiled cases, none failed to compile; graph breaks in 0 of 10"
    broken = _parity_run([], ["pass"] * 8 + ["fail_compile"] * 2)
    line = _line(_run(broken), "compile")
    assert line.status == PARTIAL and line.reason.startswith("2 of 10 compiled cases did not")
    refused = _parity_run([], ["unsupported"] * 4)
    assert _line(_run(refused), "compile").status == NOT_READY
    breaks = {"break_reasons": {"Tensor.item() call": 2}}
    results = _parity_run([], ["pass"] * 8) + [
        _parity(f"b{i}", "compile", compile=breaks) for i in range(2)
    ]
    line = _line(_run(results), "compile")
    assert line.status == PARTIAL  # 2 of 10 with breaks, over the 10% ready allows
    assert line.reason == (
        "graph breaks in 2 of 10 compiled cases (4 breaks); most common: Tensor.item() call"
    )
    # A wrong result is a numerics failure, not a compile one.
    wrong = _parity_run([], ["pass"] * 9 + ["fail_numerics"])
    assert _line(_run(wrong), "compile").status == READY


def test_compile_without_compiled_cases_is_not_tested():
    line = _line(_run(_parity_run(["pass"], [])), "compile")
    assert (line.status, line.reason) == (NOT_TESTED, "no compiled parity case in this run")


# --- time to first step ---------------------------------------------------------------------------


def test_first_step_judges_the_slowest_compiled_first_step():
    fast = _train(compiled_cold_first_step_s=50.0, compiled_warm_first_step_s=9.0)
    line = _line(_run([fast]), "first_step")
    assert line.status == READY
    assert line.reason == (
        "compiled, cold first step 50.00 s (qwen3-8b/T4096), within the 120 s ready allows"
    )
    slow = _train(compiled_cold_first_step_s=400.0, compiled_warm_first_step_s=9.0)
    assert _line(_run([slow]), "first_step").status == PARTIAL
    worse = _train(compiled_cold_first_step_s=900.0, compiled_warm_first_step_s=9.0)
    assert _line(_run([worse]), "first_step").status == NOT_READY


def test_first_step_with_a_scenario_or_mode_missing_is_at_most_partial():
    cold_only = _train(compiled_cold_first_step_s=50.0)
    line = _line(_run([cold_only]), "first_step")
    assert line.status == PARTIAL and line.reason.startswith("compiled, warm first step not")
    eager_only = _train(eager_cold_first_step_s=2.0)
    line = _line(_run([eager_only]), "first_step")
    assert line.status == PARTIAL and line.reason.startswith("compiled mode did not run")


# --- throughput -----------------------------------------------------------------------------------


def test_throughput_takes_the_worse_of_train_and_matmul():
    results = [_train(compiled_warm_mfu=0.45, eager_warm_mfu=0.30), _matmul(0.6), _matmul(0.7)]
    line = _line(_run(results), "throughput")
    assert line.status == READY
    assert line.reason == (
        "train MFU 45.0% (compiled, warm scenario, qwen3-8b/T4096); median matmul MFU 65.0% at "
        "M=128, the largest M measured, over 2 passing cases"
    )
    slow = [_train(compiled_warm_mfu=0.05, eager_warm_mfu=0.12), _matmul(0.6)]
    line = _line(_run(slow), "throughput")
    # Eager is the faster mode here: that is the MFU a researcher gets.
    assert line.status == PARTIAL and line.reason.startswith("train MFU 12.0% (eager, warm")
    low = [_train(compiled_warm_mfu=0.45), _matmul(0.1)]
    assert _line(_run(low), "throughput").status == NOT_READY


def test_matmul_mfu_is_judged_at_the_largest_m_not_across_clusters():
    # M=1 (decode) clusters low, M=2048 high: a median over both would be their midpoint.
    results = [_train(compiled_warm_mfu=0.45), _matmul(0.05, m=1), _matmul(0.06, m=1)]
    results += [_matmul(0.62, m=2048), _matmul(0.66, m=2048), _matmul(0.7, m=2048)]
    line = _line(_run(results), "throughput")
    assert line.status == READY
    assert (
        "median matmul MFU 66.0% at M=2048, the largest M measured, over 3 passing" in line.reason
    )


def test_an_inconclusive_mfu_decides_neither_ready_nor_not_ready():
    # The drift reference moved 50% over the run: the matmul headline says inconclusive, and so
    # does the verdict, whatever side of the threshold the measured median fell on.
    moved = {"readings_flops": [1.0e11, 1.5e11], "workload": "512^3 fp32 GEMM"}
    for mfu in (0.9, 0.1):
        results = [_train(compiled_warm_mfu=0.45)]
        results += [_matmul(mfu, drift_reference=moved), _matmul(mfu + 0.01)]
        line = _line(_run(results), "throughput")
        assert line.status == PARTIAL
        assert "inconclusive, the machine's speed moved 50% during the run" in line.reason
        assert "ready needs" not in line.reason
    steady = {"readings_flops": [1.0e11, 1.02e11], "workload": "512^3 fp32 GEMM"}
    results = [_train(compiled_warm_mfu=0.45), _matmul(0.9, drift_reference=steady)]
    assert _line(_run(results), "throughput").status == READY
    # The train headline's own verdict: its pooled rate inconclusive -> partial, saying why.
    train = _train(compiled_warm_mfu=0.45)
    train.diagnostics["rates"] = {"main": {"compiled": {"why": "spread 40% over 25%"}}}
    line = _line(_run([train, _matmul(0.9)]), "throughput")
    assert line.status == PARTIAL and line.reason.endswith("inconclusive, spread 40% over 25%")


def test_an_mfu_that_is_the_hosts_is_not_ready():
    results = [_train(compiled_warm_mfu=0.9), _matmul(0.9, host_fallback="aten::mm fell back")]
    line = _line(_run(results), "throughput")
    assert line.status == NOT_READY
    assert line.reason == "the MFU is the host's, not the device's: aten::mm fell back"


# --- attention and distributed --------------------------------------------------------------------


def _flex(i: int, status: str) -> Result:
    case = Case("flex", f"causal/B2/S{i}/fwd", {"variant": "causal", "pass": "fwd"})
    return Result(case, status, {}, {"reason": "no backward on this device"})


def test_attention_pass_share():
    assert _line(_run([_flex(i, "pass") for i in range(20)]), "attention").status == READY
    half = [_flex(i, "pass") for i in range(10)] + [_flex(i + 10, "unsupported") for i in range(10)]
    line = _line(_run(half), "attention")
    assert line.status == PARTIAL
    assert "10 unsupported; e.g. flex/causal/B2/S10/fwd: no backward on this device" in line.reason


def _dist(api: str, status: str, nranks: int = 2) -> Result:
    case = Case("dist", f"{api}/x", {"api": api})
    return Result(case, status, {"nranks": nranks}, {"reason": "not implemented"})


def test_distributed_apis_and_ranks():
    run = _run([_dist("all_reduce", "pass"), _dist("ddp", "pass"), _dist("p2p", "skipped")])
    assert _line(run, "distributed").reason == "2 of 2 APIs work"
    broken = _run([_dist("all_reduce", "pass"), _dist("fsdp2", "fail_run")])
    line = _line(broken, "distributed")
    assert line.status == PARTIAL and "fsdp2: fail_run" in line.reason
    one_rank = _run([_dist("all_reduce", "pass", nranks=1)])
    line = _line(one_rank, "distributed")
    assert line.status == PARTIAL and line.reason.startswith("on 1 rank only")


def test_overall():
    everything = (
        _parity_run(["pass"] * 10, ["pass"] * 10)
        + [_train(compiled_cold_first_step_s=5.0, compiled_warm_first_step_s=1.0)]
        + [_train(compiled_warm_mfu=0.5), _matmul(0.8)]
        + [_flex(i, "pass") for i in range(4)]
        + [_dist("all_reduce", "pass")]
        + [_op_case(f"e{i}", "fp32", "fwd") for i in range(4)]
    )
    for r in everything:
        r.diagnostics.setdefault("ops", {"device": "cpu"})
    verdict = judge(_run(everything))
    assert [line.status for line in verdict.lines] == [READY] * 9
    assert verdict.overall.status == READY and verdict.overall.reason == "9 ready"
    everything.append(_flex(9, "crash"))
    everything += [_flex(10 + i, "crash") for i in range(4)]
    verdict = judge(_run(everything))
    assert verdict.overall.status == NOT_READY
    assert verdict.overall.reason == "8 ready, 1 not ready"


# --- operators (the ops suite) -------------------------------------------------------------------


def _op_case(entry: str, dtype: str, form: str, status: str = "pass", **diagnostics) -> Result:
    """An ops case shaped as the suite writes it; dispatch classes measured, one kernel, unless
    `aten` or `dispatch_source` say otherwise."""
    direction = "bwd" if form == "bwd" else "fwd"
    params = {"op": entry, "variant": "", "entry": entry, "dtype": dtype,
              "direction": direction, "form": {"fwd": "function", "bwd": "function"}.get(form, form)}  # fmt: skip
    diagnostics.setdefault("aten", {f"aten::{entry}.Tensor": "kernel"})
    diagnostics.setdefault("dispatch_source", "dispatcher (CUDA key)")
    diagnostics.setdefault("judged", "numerics")
    if status != "pass":
        diagnostics.setdefault("error", "RuntimeError: boom")
    return Result(
        Case("ops", f"{entry}/{dtype}/{form}", params), status, {"samples": 3.0}, diagnostics
    )


def _ops_cases(passing: int, failing: int = 0, **failing_diagnostics) -> list[Result]:
    return [_op_case(f"p{i}", "fp32", "fwd") for i in range(passing)] + [
        _op_case(f"f{i}", "bf16", "bwd", "fail_numerics", **failing_diagnostics)
        for i in range(failing)
    ]


def test_operators_is_not_measured_without_the_ops_suite():
    line = _line(_run([_matmul(0.7)], ["matmul"]), "operators")
    assert line.status == NOT_TESTED
    assert line.reason == "not measured: the ops suite was not in this run"
    none_ran = _run([], ["ops"], planned=[Case("ops", "add/fp32/fwd", {"entry": "add"})])
    line = _line(none_ran, "operators")
    assert line.status == NOT_TESTED and line.reason.startswith("not measured: none of the 1")
    skipped = _op_case("sin", "fp16", "fwd", "skipped", skipped="reference_invalid")
    line = _line(_run([skipped]), "operators")
    assert line.status == NOT_TESTED and "every ops case was skipped (reference_invalid 1)" in (
        line.reason
    )


def test_operators_thresholds_ready_partial_not_ready():
    # 95% of the judged cases pass: ready (the threshold itself is inclusive).
    line = _line(_run(_ops_cases(19, 1)), "operators")
    assert line.status == READY and line.section == "suite-ops"
    assert line.reason.startswith("19 of 20 judged ops cases pass (95.0%)")
    # Below 95%, at least 50%: partial, with the first failure's reason.
    line = _line(_run(_ops_cases(18, 2)), "operators")
    assert line.status == PARTIAL
    assert "below the 95.0% ready needs; 2 fail_numerics; e.g. ops/f0/bf16/bwd" in line.reason
    assert _line(_run(_ops_cases(10, 10)), "operators").status == PARTIAL
    # Below half: not ready.
    assert _line(_run(_ops_cases(9, 11)), "operators").status == NOT_READY
    # Unsupported (the device lacks the dtype, or the kernel) and not-run cases count against.
    missing = [
        _op_case(f"m{i}", "fp32", "fwd", "unsupported", unsupported="missing") for i in range(2)
    ]
    planned = [Case("ops", "x/fp32/fwd", {"entry": "x"})]
    line = _line(_run(_ops_cases(18) + missing, planned=planned), "operators")
    assert line.status == PARTIAL and line.reason.startswith("18 of 21 judged ops cases pass")


def test_operators_leaves_out_what_is_not_the_devices():
    not_the_devices = [
        _op_case("sin", "fp16", "fwd", "skipped", skipped="reference_invalid"),
        _op_case("eigh", "bf16", "fwd", "skipped", skipped="cpu_unsupported"),
        _op_case("mm", "fp32", "fwd", "unsupported", unsupported="database"),
    ]
    line = _line(_run(_ops_cases(20) + not_the_devices), "operators")
    assert line.status == READY and line.reason.startswith("20 of 20 judged ops cases pass")
    assert "not the device's, not counted: " in line.reason
    assert all(k in line.reason for k in ("reference_invalid 1", "cpu_unsupported 1", "database 1"))


def test_operators_host_fallback_keeps_it_from_ready():
    fell = _op_case("add", "fp32", "out", aten={"aten::add.out": "fallback"})
    line = _line(_run(_ops_cases(40) + [fell]), "operators")
    assert line.status == PARTIAL
    assert line.reason.startswith("1 aten overload ran on the host (fallback or round-trip): ")
    assert "aten::add.out, over the 0 ready allows" in line.reason
    # A round-trip inside the device's kernel counts the same; a failing share stays judged by
    # the pass rate (never below partial for the host alone).
    trip = _op_case("mul", "fp32", "fwd", aten={"aten::mul.Tensor": "roundtrip"})
    line = _line(_run(_ops_cases(5, 15) + [trip]), "operators")
    assert line.status == NOT_READY and "aten::mul.Tensor" in line.reason
    # Unmeasured dispatch classes on a device: at most partial; on the CPU nothing falls back.
    blind = [_op_case(f"b{i}", "fp32", "fwd", aten={"aten::b.Tensor": "unknown"},
                  dispatch_source="none: no dispatcher key") for i in range(20)]  # fmt: skip
    line = _line(_run(blind), "operators")
    assert line.status == PARTIAL and line.reason.startswith("host fallbacks not measured")
    on_cpu = build_run(RunRecord("c", 1.7e9, ["ops"], "cpu", "quick"), blind, "cpu", [])
    assert _line(on_cpu, "operators").status == READY


def test_operators_thresholds_come_from_the_toml(tmp_path):
    lenient = tmp_path / "ops.toml"
    lenient.write_text("[operators]\nready_min_pass_rate = 0.80\nready_max_host_ops = 1\n")
    fell = _op_case("add", "fp32", "out", aten={"aten::add.out": "fallback"})
    results = _ops_cases(17, 3) + [fell]
    assert _line(_run(results), "operators").status == PARTIAL
    assert _line(_run(results), "operators", load_rules(lenient)).status == READY


def test_ops_numerics_are_judged_once_under_operators():
    """An ops case that is wrong counts under operators, not numerics too; parity's share of
    wrong training checks is not diluted by thousands of single-op checks."""
    run = _run(_parity_run(["pass"] * 10 + ["fail_numerics"], []) + _ops_cases(500, 1))
    line = _line(run, "numerics")
    assert line.reason.startswith("1 of 11 cases with a numerics check wrong")
    assert line.status == NOT_READY  # 9.1% > 5%, as without the ops suite
    only_ops = _run(_ops_cases(10, 1))
    assert _line(only_ops, "numerics").status == NOT_TESTED


# --- thresholds -----------------------------------------------------------------------------------


def test_a_team_changes_a_threshold_in_a_toml_file(tmp_path):
    results = [_train(compiled_warm_mfu=0.45), _matmul(0.6)]
    assert _line(_run(results), "throughput").status == READY
    strict = tmp_path / "strict.toml"
    strict.write_text("[throughput]\ntrain_ready_min_mfu = 0.5\n")
    rules = load_rules(strict)
    assert rules.source == str(strict)
    assert rules["throughput"]["matmul_ready_min_mfu"] == 0.5  # the rest stay built in
    line = _line(_run(results), "throughput", rules)
    assert line.status == PARTIAL and "below the 50.0% ready needs" in line.reason
    assert judge(_run(results), rules).source == str(strict)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[speed]\nx = 1\n", "unknown dimension [speed]; valid: correctness, numerics"),
        ("[numerics]\nmax = 1\n", "unknown key 'max' in [numerics]; valid: ready_max_failures"),
        ('[compile]\nready_max_failure_share = "low"\n', "must be a number >= 0, got 'low'"),
        ("[first_step]\nmetrics = []\n", "must be a non-empty list of metric names"),
        ("[numerics\n", "not valid TOML"),
    ],
)
def test_a_bad_thresholds_file_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "v.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"verdict config {path}: .*"):
        load_rules(path)
    with pytest.raises(ConfigError) as e:
        load_rules(path)
    assert message in str(e.value)
    with pytest.raises(ConfigError, match="no such file"):
        load_rules(tmp_path / "missing.toml")


# --- in every format ------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "runs") as s:
        results = [_matmul(0.7), _matmul(0.6)]
        s.add_run(RunRecord("r", 1.7e9, ["matmul"], "cuda:0", "quick", env={}))
        for r in results:
            s.add_result("r", r)
        yield s


def test_the_verdict_opens_every_format_and_the_json_carries_it(store, tmp_path):
    md = render(store, ["r"], "md")
    assert md.index("## Readiness") < md.index("## Overview")
    assert "| throughput (MFU) | partial | no train MFU; median matmul MFU 65.0%" in md
    assert "[Suite: matmul](#suite-matmul)" in md  # GitHub's anchor of the section
    html = render(store, ["r"], "html")
    assert html.index('id="readiness"') < html.index('id="overview"')
    assert '<span class="vd vd-not-tested">not tested</span>' in html
    assert '<a href="#suite-matmul">Suite: matmul</a>' in html
    doc = json.loads(render(store, ["r"], "json"))
    verdict = doc["runs"][0]["verdict"]
    assert verdict["overall"]["status"] == PARTIAL
    assert verdict["thresholds"] == "built-in thresholds"
    dims = {d["key"]: d for d in verdict["dimensions"]}
    assert list(dims) == [
        "correctness", "numerics", "host_fallbacks", "compile", "first_step", "throughput",
        "attention", "distributed", "operators",
    ]  # fmt: skip
    assert (
        dims["throughput"]["status"] == PARTIAL and dims["throughput"]["section"] == "suite-matmul"
    )
    console = Console(record=True, width=120, color_system=None)
    print_summary(console, store, "r")
    text = console.export_text()
    assert text.index("Readiness") < text.index("Overview")
    assert "ready for research training: partial" in text


def test_report_and_run_take_a_verdict_config(store, tmp_path):
    from typer.testing import CliRunner

    from trainready.cli.app import app

    lenient = tmp_path / "lenient.toml"
    lenient.write_text("[throughput]\nmatmul_ready_min_mfu = 0.1\nmatmul_partial_min_mfu = 0.05\n")
    args = ["report", str(store.dir), "-f", "json", "--verdict-config", str(lenient)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    verdict = json.loads(out.stdout)["runs"][0]["verdict"]
    assert verdict["thresholds"] == str(lenient)
    bad = tmp_path / "bad.toml"
    bad.write_text("[nope]\n")
    for cmd in (
        ["report", str(store.dir), "--verdict-config", str(bad)],
        [
            "run",
            "matmul",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "o"),
            "--verdict-config",
            str(bad),
        ],
    ):
        out = CliRunner().invoke(app, cmd)
        assert out.exit_code == 2 and "unknown dimension [nope]" in out.stderr
    assert not (tmp_path / "o").exists()  # refused before anything ran
