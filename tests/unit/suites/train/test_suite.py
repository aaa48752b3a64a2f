"""The train suite: its cases, how it judges what the scenario processes measured (parity, the
ledger, failures), and one real run through the CLI in eager and compiled mode, four scenarios."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.clirun import cli
from trainready.core.case import Case, Result
from trainready.core.config import ConfigError, RunConfig
from trainready.core.context import CaseContext
from trainready.core.store import Store
from trainready.metrics.ledger import Mode, break_even_range
from trainready.reporting.sections.train import COMPILE_PHASE_COLUMNS, break_even_text
from trainready.suites.train import plan
from trainready.suites.train import processes as train_processes
from trainready.suites.train.loop import COMPILE_PHASES
from trainready.suites.train.processes import combine_ranks
from trainready.suites.train.suite import MODES, SCENARIOS, Scenario, cases, judge

ROOT = paths.ROOT


def _cfg(**options) -> RunConfig:
    return RunConfig(suites=["train"], device="cpu", options=options)


def test_quick_case_on_cpu_and_presets_add_variants():
    (case,) = cases(_cfg())
    assert case.id == "train/qwen3-debug/T64/B4/bf16"
    p = case.params
    assert (p["compile"], p["shape_seq_len"], p["scenarios"]) == ("blocks", 32, list(SCENARIOS))
    full = cases(RunConfig(suites=["train"], device="cpu", preset="full"))
    names = [c.name for c in full]
    assert names == [
        "qwen3-debug/T64/B4/bf16",
        "qwen3-debug/T64/B4/bf16/ac",
        "qwen3-debug/T64/B4/bf16/whole-model",
        "qwen3-debug/T64/B4/bf16/bf16-params",
    ]
    (fsdp,) = cases(_cfg(nproc=2, seq_len=32))
    assert fsdp.name == "qwen3-debug/T32/B4/bf16/fsdp2"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scenarios": "warm"}, "need cold first"),
        ({"scenarios": "cold,lukewarm"}, "unknown scenario"),
        ({"arch_change": "bigger"}, "unknown arch_change"),
        ({"steps": 3, "warmup": 2}, "at least one steady step"),
        ({"compile": "none"}, "compile must be blocks or model"),
        ({"nproc": 3}, "does not split over 3 ranks"),
        ({"model": "gpt-17"}, "unknown Qwen3 size"),
        ({"seq_len": "long"}, "seq_len must be a number"),
        ({"ac": "yes"}, "ac must be true or false"),
    ],
)
def test_bad_options_are_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        cases(_cfg(**options))


def test_arch_change_edits_one_thing():
    p = cases(_cfg())[0].params
    cold = plan.scenario_spec(p, "cpu", "compiled", "cold")
    arch = plan.scenario_spec(p, "cpu", "compiled", "arch_change")
    shape = plan.scenario_spec(p, "cpu", "eager", "shape_change")
    assert arch.model_overrides == {"mlp_activation": "gelu"} and cold.model_overrides == {}
    assert (shape.seq_len, shape.compile, cold.compile) == (32, "none", "blocks")
    norm = plan.scenario_spec({**p, "arch_change": "norm"}, "cpu", "compiled", "arch_change")
    assert norm.model_overrides == {"extra_norm": True}


# Compile seconds by phase as a compiled run records them: Dynamo holds the forward backend
# compile, so compile_s = Dynamo + backend backward = 2.5.
PHASES = {
    "dynamo_s": 2.0,
    "backend_forward_s": 1.5,
    "backend_backward_s": 0.5,
    "kernel_compile_wait_s": 1.0,
}


def _record(first_step_s: float, step_s: float, losses: list[float], tokens: int = 256) -> dict:
    return {
        "first_step_s": first_step_s,
        "first_step_phases": {"setup_s": 0.1, "forward_s": first_step_s / 2},
        "step_times_s": [step_s * 1.5, step_s, step_s, step_s],
        "clock": "wall",
        "losses": losses,
        "tokens_per_step": tokens,
        "params": 1000,
        "flops_per_token": 6000,
        "world_size": 1,
        "peak_memory_bytes": 2**30,
        "memory_source": "process-rss",
        "finite": True,
        "compile": {"graph_breaks": 0, "recompiles": 0, "phases": dict(PHASES)},
    }


LOSSES = [6.0, 5.5, 5.2, 5.0, 4.9]


def _runs(compiled_losses=LOSSES, compiled_cold: Scenario | None = None):
    eager = [Scenario("eager", n, _record(1.0, 0.2, LOSSES)) for n in SCENARIOS]
    compiled = [Scenario("compiled", n, _record(9.0, 0.1, compiled_losses)) for n in SCENARIOS]
    if compiled_cold is not None:
        compiled[0] = compiled_cold
    return {"eager": eager, "compiled": compiled}


PARAMS = {"scenarios": list(SCENARIOS), "warmup": 1, "dtype": "fp32"}
PEAK = {"flops": 1e9, "label": "vs measured peak", "source": "measured"}


def test_judge_computes_steady_speed_mfu_and_the_ledger():
    out = judge(PARAMS, _runs(), PEAK)
    assert out.status == "pass"
    m = out.metrics
    # Steady: the median after the warm-up step; 256 tokens per step.
    assert m["eager_cold_step_s"] == pytest.approx(0.2)
    assert m["compiled_warm_tokens_per_s"] == pytest.approx(2560.0)
    assert m["compiled_speedup"] == pytest.approx(2.0)
    assert m["compiled_cold_mfu"] == pytest.approx(6000 * 2560.0 / 1e9)
    assert m["compiled_cold_first_step_x"] == pytest.approx(90.0)
    # Head start 8 s, gain 0.1 s per step: caught up after 80 steady steps, at N = 81.
    assert out.diagnostics["ledger"]["cold"]["break_even_step"] == 81
    assert m["break_even_step_cold"] == 81.0
    assert m["compiled_cold_compile_s"] == 2.5
    json.dumps(out.diagnostics)


def test_the_ledger_starts_at_the_first_step_whose_loss_the_numerics_check_accepted():
    """A first step that ran is not a first result: compiled's step 0 loss is 10% off eager's
    (fp32 allows 1e-3), so its first valid result is step 1, after 9 s + its step 1 (0.15 s,
    `_record`'s warm-up step): 9.15 s. Head start 8.15 s, gain 0.1 s per step: 81.5 steady
    steps, break-even at N = 1 + 82 = 83 (81 from the first step alone)."""
    off_at_first = [LOSSES[0] * 1.1, *LOSSES[1:]]
    out = judge(PARAMS, _runs(compiled_losses=off_at_first), PEAK)
    assert out.status == "fail_numerics"  # the curve diverged at step 0: still a failure
    compiled = out.diagnostics["scenarios"]["compiled"]["cold"]
    assert (compiled["first_valid_step"], compiled["first_valid_s"]) == (1, pytest.approx(9.15))
    eager = out.diagnostics["scenarios"]["eager"]["cold"]
    assert (eager["first_valid_step"], eager["first_valid_s"]) == (0, 1.0)
    entry = out.diagnostics["ledger"]["cold"]
    assert entry["first_step_s"] == {"eager": 1.0, "compiled": 9.0}  # as measured
    assert entry["first_valid_step"] == {"eager": 0, "compiled": 1}
    assert entry["first_valid_s"] == pytest.approx({"eager": 1.0, "compiled": 9.15})
    assert entry["break_even_step"] == 83
    assert out.metrics["compiled_cold_first_step_s"] == 9.0  # the first-step clock is unchanged


def test_no_accepted_loss_is_no_first_valid_result_and_no_break_even():
    out = judge(PARAMS, _runs(compiled_losses=[x * 1.1 for x in LOSSES]), PEAK)
    compiled = out.diagnostics["scenarios"]["compiled"]["cold"]
    assert (compiled["first_valid_step"], compiled["first_valid_s"]) == (None, None)
    entry = out.diagnostics["ledger"]["cold"]
    assert entry["break_even_step"] is None and entry["conclusive"] is False
    assert entry["why"] == (
        "no valid result in compiled: the numerics check accepted none of its losses"
    )
    assert break_even_text(entry) == "inconclusive"
    assert "break_even_step_cold" not in out.metrics
    # A non-finite eager loss is no valid eager result either.
    runs = _runs()
    runs["eager"][0].record["losses"] = [float("nan"), *LOSSES[1:]]
    eager = judge(PARAMS, runs, PEAK).diagnostics["scenarios"]["eager"]["cold"]
    assert (eager["first_valid_step"], eager["first_valid_s"]) == (1, pytest.approx(1.3))


def test_price_per_hour_is_an_option_carried_in_the_params_only_when_given():
    from trainready.core.options import check_options
    from trainready.suites.train import suite

    (case,) = cases(_cfg(price_per_hour=2.0))
    assert case.params["price_per_hour"] == 2.0
    assert case.id == cases(_cfg())[0].id  # the price measures nothing: the same case
    assert "price_per_hour" not in cases(_cfg())[0].params
    with pytest.raises(ConfigError, match="must be a finite number > 0"):
        cases(_cfg(price_per_hour=0))
    check_options({"price_per_hour": 2.5}, {"train": suite}, set())
    with pytest.raises(ConfigError, match="expected a finite number > 0"):
        check_options({"price_per_hour": "two"}, {"train": suite}, set())


def _timed(first_step_s: float, steps: list[float]) -> dict:
    return {**_record(first_step_s, 0.1, LOSSES), "step_times_s": [steps[0], *steps]}


def _noisy_runs(eager: dict[str, list[float]], compiled: dict[str, list[float]]):
    """Scenarios with these steady step times (one warm-up step before them)."""
    return {
        "eager": [Scenario("eager", n, _timed(1.0, ts)) for n, ts in eager.items()],
        "compiled": [Scenario("compiled", n, _timed(9.0, ts)) for n, ts in compiled.items()],
    }


MAIN = ["cold", "warm", "arch_change"]


def test_one_pooled_rate_per_mode_so_speedup_and_break_even_agree():
    """The report that said "speedup 1.27x" next to "break-even (cold): never": each scenario's
    rate carried its own noise. Pooled, one rate per mode: every scenario's ledger uses it, and a
    compiled mode faster per step breaks even everywhere. (Cold and warm run the same work: the
    15% their compiled medians differ by is the machine's drift, and widens the interval.)"""
    eager = {"cold": [0.14, 0.15, 0.14, 0.145, 0.15], "warm": [0.15, 0.145, 0.15, 0.148, 0.145],
             "arch_change": [0.14, 0.145, 0.14, 0.15, 0.14]}  # fmt: skip
    compiled = {"cold": [0.11, 0.115, 0.12, 0.11, 0.115], "warm": [0.1, 0.11, 0.1, 0.105, 0.1],
                "arch_change": [0.11, 0.115, 0.11, 0.12, 0.11]}  # fmt: skip
    params = {**PARAMS, "scenarios": MAIN}
    out = judge(params, _noisy_runs(eager, compiled), PEAK)
    rates = out.diagnostics["rates"]["main"]
    assert rates["eager"]["steady_steps"] == rates["compiled"]["steady_steps"] == 15
    assert rates["eager"]["step_s"] == pytest.approx(0.145)  # the median of all 15
    assert out.diagnostics["drift_reference"]["moved"] == pytest.approx(0.115 / 0.1 - 1)
    sp = rates["speedup"]
    assert sp["conclusive"] and sp["interval"][0] > 1, sp
    assert out.metrics["compiled_speedup"] == pytest.approx(0.145 / rates["compiled"]["step_s"])
    for name in MAIN:
        entry = out.diagnostics["ledger"][name]
        assert entry["tokens_per_s"]["compiled"] == rates["compiled"]["tokens_per_s"]
        assert entry["break_even_step"] is not None and entry["conclusive"]
        lo, hi = entry["break_even_range"]
        assert lo <= entry["break_even_step"] <= hi
        # Every scenario's rate metrics are its pool's: scenarios differ in their first step only.
        assert out.metrics[f"compiled_{name}_tokens_per_s"] == rates["compiled"]["tokens_per_s"]
    # The scenario's own steady steps stay as measured, for the reader.
    assert out.diagnostics["scenarios"]["compiled"]["cold"]["step_s"] == pytest.approx(0.115)


def _drifting(factor: float) -> dict:
    """Eager and compiled in turn, cold then warm, the machine `factor` slower for warm."""
    steps = [0.10, 0.102, 0.101, 0.099, 0.1, 0.101]
    eager = {"cold": [2 * t for t in steps], "warm": [2 * factor * t for t in steps]}
    compiled = {"cold": steps, "warm": [factor * t for t in steps]}
    return judge({**PARAMS, "scenarios": ["cold", "warm"]}, _noisy_runs(eager, compiled), PEAK)


def test_processes_apart_widen_every_rate_or_make_it_inconclusive():
    """Cold and warm train the same work, each in its own process: when warm's processes ran 15%
    slower, the rates' and the speedup's intervals span where a rerun's processes may land (the t
    interval over processes, `tests/unit/suites/train/test_rates.py`); at 30% (over stats.MAX_DRIFT) they are
    inconclusive, with the disagreement named. Without it, two runs of this machine would state
    intervals that a rerun contradicts."""
    steady = _drifting(1.0).diagnostics
    assert steady["drift_reference"]["moved"] == pytest.approx(0.0, abs=1e-12)
    moved = _drifting(1.15).diagnostics
    assert moved["drift_reference"]["moved"] == pytest.approx(0.15)
    for mode in ("eager", "compiled"):
        rate = moved["rates"]["main"][mode]
        lo, hi = rate["step_s_interval"]
        assert lo < min(rate["process_step_s"]) / 1.1 and hi > max(rate["process_step_s"]) * 1.1
        assert rate["tokens_per_s_interval"][0] == pytest.approx(256 / hi)
        assert not rate["why"]
    sp = moved["rates"]["main"]["speedup"]
    assert sp["conclusive"] and sp["interval"][0] > 1
    # The first steps, one sample each, may have run 15% faster or slower too: the break-even
    # range spans that as well as the speedup's interval.
    entry = moved["ledger"]["cold"]
    e, c = (Mode(m, entry["first_step_s"][m], entry["tokens_per_s"][m]) for m in MODES)
    as_measured = break_even_range(e, c, entry["tokens_per_step"], sp["interval"])
    lo, hi = entry["break_even_range"]
    assert lo < as_measured[0] <= entry["break_even_step"] <= as_measured[1] < hi
    far = _drifting(1.3)
    for mode in ("eager", "compiled"):
        assert (
            "processes' steady medians differ by 30%"
            in far.diagnostics["rates"]["main"][mode]["why"]
        )
    assert not far.diagnostics["rates"]["main"]["speedup"]["conclusive"]
    assert not far.diagnostics["ledger"]["cold"]["conclusive"]
    assert "compiled_speedup" not in far.metrics


def test_too_wide_a_spread_is_inconclusive_with_why():
    """One mode's steps 1x or 2x at random in every process (a machine under load) are no rate;
    nor are its processes differing 17x (a process whose threads waited on each other)."""
    noisy = [0.01, 0.02, 0.01, 0.02, 0.015]
    eager = {name: noisy for name in MAIN}
    compiled = {name: [0.01] * 5 for name in MAIN}
    out = judge({**PARAMS, "scenarios": MAIN}, _noisy_runs(eager, compiled), PEAK)
    rates = out.diagnostics["rates"]["main"]
    assert "steady eager steps spread" in rates["eager"]["why"]
    assert not rates["speedup"]["conclusive"] and rates["speedup"]["why"] == rates["eager"]["why"]
    eager = {"cold": [0.012] * 5, "warm": [0.013] * 5, "arch_change": [0.2] * 5}
    out = judge({**PARAMS, "scenarios": MAIN}, _noisy_runs(eager, compiled), PEAK)
    rates = out.diagnostics["rates"]["main"]
    assert "the 3 eager processes' steady medians differ by 1567%" in rates["eager"]["why"]
    assert not rates["speedup"]["conclusive"] and rates["speedup"]["why"] == rates["eager"]["why"]
    assert not out.diagnostics["ledger"]["cold"]["conclusive"]
    assert "compiled_speedup" not in out.metrics and "break_even_step_cold" not in out.metrics
    assert out.status == "pass"  # a noisy clock is not a failing device


def test_a_speedup_interval_that_includes_one_is_inconclusive():
    steps = [0.10, 0.11, 0.12, 0.10, 0.11]
    out = judge(
        {**PARAMS, "scenarios": ["cold"]},
        _noisy_runs({"cold": steps}, {"cold": list(reversed(steps))}),
        PEAK,
    )
    sp = out.diagnostics["rates"]["main"]["speedup"]
    lo, hi = sp["interval"]
    assert lo < 1 < hi and "includes 1" in sp["why"]
    assert break_even_text(out.diagnostics["ledger"]["cold"]) == "inconclusive"


def test_a_fast_wrong_compiled_run_fails_numerics():
    wrong = [x * 1.1 for x in LOSSES]
    out = judge(PARAMS, _runs(compiled_losses=wrong), PEAK)
    assert out.status == "fail_numerics"
    assert "compiled loss differs from eager" in out.diagnostics["error"]
    assert "compiled_speedup" in out.metrics  # the speed is still reported, and still wrong


def test_ties_a_move_broke_fail_the_case_and_keep_its_numbers():
    """A device whose move untied the embedding from the LM head: the case fails with the tie
    named and which model was timed (the one with its ties kept, or the untied one and why),
    its speeds still reported; kept ties change nothing."""
    runs = _runs()
    for s in runs["eager"] + runs["compiled"]:
        s.record["device"] = "emu:0"
        s.record["broken_ties"] = [["embed.weight", "head.weight"]]
    out = judge(PARAMS, runs, PEAK)
    assert out.status == "fail_numerics"
    assert out.diagnostics["error"].startswith("model: tied parameters came apart on .to('emu:0')")
    assert "embed.weight = head.weight" in out.diagnostics["error"]
    assert out.diagnostics["error"].endswith("Timed: the model moved with its ties kept")
    assert "compiled_speedup" in out.metrics
    for s in runs["eager"] + runs["compiled"]:
        s.record["ties_not_kept"] = "RuntimeError: no swap"
    error = judge(PARAMS, runs, PEAK).diagnostics["error"]
    assert error.endswith(
        "Timed: the untied model (the ties could not be kept: RuntimeError: no swap)"
    )
    kept = _runs()
    for s in kept["eager"]:
        s.record["broken_ties"] = []
    assert judge(PARAMS, kept, PEAK).status == "pass"


def test_a_compile_failure_is_reported_and_skips_what_depended_on_it():
    failed = Scenario("compiled", "cold", status="fail_compile", error="InductorError: boom")
    out = judge(PARAMS, _runs(compiled_cold=failed), PEAK)
    assert out.status == "fail_compile"
    assert out.diagnostics["error"] == "compiled/cold: InductorError: boom"
    assert "cold" not in out.diagnostics["ledger"]
    assert out.metrics["eager_cold_tokens_per_s"] == pytest.approx(1280.0)


def test_run_mode_skips_later_scenarios_after_a_failed_cold(monkeypatch, tmp_path):
    calls = []

    def fake_single(spec, env, work, timeout_s, profile=None):
        calls.append(env["TORCHINDUCTOR_CACHE_DIR"])
        return Scenario("", "", status="fail_compile", error="no compiler")

    monkeypatch.setattr(train_processes, "run_single", fake_single)
    p = cases(_cfg())[0].params
    ctx = CaseContext(device="cpu", dtype="bf16", budget_s=60)
    out = train_processes.run_mode(p, ctx, "compiled", tmp_path, deadline=float("inf"))
    assert [s.status for s in out] == ["fail_compile", "skipped", "skipped", "skipped"]
    assert calls == [str(tmp_path / "compiled" / "cache" / "inductor")]


def test_combine_ranks_takes_the_slowest_rank_and_the_mean_loss():
    a, b = _record(2.0, 0.1, [6.0, 5.0]), _record(3.0, 0.1, [5.0, 4.0])
    b["step_times_s"] = [0.3, 0.05, 0.2, 0.1]
    b["world_size"] = a["world_size"] = 2
    c = combine_ranks([a, b])
    assert c["first_step_s"] == 3.0
    assert c["step_times_s"] == [0.3, 0.1, 0.2, 0.1]
    assert c["losses"] == [5.5, 4.5]
    assert c["per_rank_first_step_s"] == [2.0, 3.0]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return cli(*args, cwd=cwd, timeout=1800)


def _train(out: Path, *args: str, sets: list[str]):
    """`trainready run train --device cpu` into `out`; the run's one result."""
    p = _cli(
        "run", "train", "--device", "cpu", "--out", str(out), *args,
        *(x for s in sets for x in ("--set", s)), cwd=out.parent,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(out, create=False) as store:
        (r,) = store.results(store.latest_run().run_id)
    assert r.status == "pass", r.diagnostics.get("error")
    return r


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
    """The real thing, tiny: Inductor compiles every block on the CPU, in fresh processes, in
    both modes and all four scenarios. Run once (minutes on a busy machine) for the tests below."""
    out = tmp_path_factory.mktemp("train") / "runs"
    return out, _train(out, sets=["seq_len=32", "batch_size=2", "steps=3", "warmup=0"])


@pytest.mark.slow
def test_cli_trains_eager_and_compiled_in_all_four_scenarios(train_run):
    out, r = train_run
    scenarios = r.diagnostics["scenarios"]
    for mode in ("eager", "compiled"):
        # The planned four, then any repeat processes the rates' interval asked for.
        assert {n for n in scenarios[mode] if not n.startswith("repeat")} == set(SCENARIOS)
    compiled = scenarios["compiled"]
    # The warm cache pays: the warm first step is faster than the cold one.
    assert compiled["warm"]["first_step_s"] < compiled["cold"]["first_step_s"]
    assert compiled["cold"]["compile"]["graphs"] >= 1
    assert compiled["shape_change"]["tokens_per_step"] == 2 * 16
    # Because the caches served it (torch's counters, read in each process): cold looked up and
    # missed, warm hit, and the warm first step's headline says so.
    cold, warm = compiled["cold"]["compile"]["cache"], compiled["warm"]["compile"]["cache"]
    assert cold["fxgraph_hit"] == 0 < cold["fxgraph_miss"]
    assert warm["fxgraph_hit"] > 0 and warm["aot_autograd_hit"] > 0
    assert scenarios["eager"]["warm"]["compile"]["cache"] == dict.fromkeys(cold, 0)
    heads = json.loads(next(out.glob("*/report.json")).read_text())["runs"][0]["headlines"]
    [warm_head] = [h for h in heads if h["label"] == "compiled first step (warm)"]
    hits = warm["fxgraph_hit"] + warm["aot_autograd_hit"]
    lookups = hits + warm["fxgraph_miss"] + warm["aot_autograd_miss"]
    assert warm_head["note"].endswith(f"; {hits} of {lookups} compile-cache lookups hit")
    # Eager and compiled losses agree in every scenario (what `pass` requires).
    assert all(v["ok"] for v in r.diagnostics["parity"].values())
    assert set(r.diagnostics["ledger"]) == set(SCENARIOS)
    # Every loss agreed, so every first valid result is the first step itself.
    for mode in ("eager", "compiled"):
        for summary in scenarios[mode].values():
            assert summary["first_valid_step"] == 0
            assert summary["first_valid_s"] == summary["first_step_s"]
    report = next(out.glob("*/report.md")).read_text()
    assert "time to N steps" in report and "break-even" in report
    assert "the full bill" in report and "cost: no price given" in report
    assert "compile time by phase" in report
    html = next(out.glob("*/report.html")).read_text()
    assert "Time to N training steps" in html and "compile time by phase" in html


@pytest.mark.slow
def test_cold_compile_time_is_split_into_every_phase(train_run):
    """Every phase of COMPILE_PHASES is read from torch on a real compile: a metric torch
    renamed would drop out here instead of silently from the report."""
    _, r = train_run
    cold = r.diagnostics["scenarios"]["compiled"]["cold"]
    comp, phases = cold["compile"], cold["compile"]["phases"]
    assert set(phases) == set(COMPILE_PHASES)
    assert all(v > 0 for v in phases.values()), phases
    # How they nest: the forward graph's backend compile runs inside Dynamo's frame compile, and
    # Inductor waits for kernels inside both backend compiles.
    assert phases["backend_forward_s"] <= phases["dynamo_s"]
    assert phases["kernel_compile_wait_s"] <= (
        phases["backend_forward_s"] + phases["backend_backward_s"]
    )
    assert comp["compile_s"] == pytest.approx(phases["dynamo_s"] + phases["backend_backward_s"])
    assert r.metrics["compiled_cold_compile_s"] == comp["compile_s"]
    # Cold compiles everything in the first step (nothing recompiles): its clock holds them.
    assert comp["recompiles"] == 0
    assert comp["compile_s"] <= cold["first_step_s"]
    assert phases["dynamo_s"] <= cold["first_step_phases"]["forward_s"]
    assert phases["backend_backward_s"] <= cold["first_step_phases"]["backward_s"]
    # Eager mode compiles nothing.
    assert r.diagnostics["scenarios"]["eager"]["cold"]["compile"]["phases"] == {}


@pytest.mark.slow
def test_cli_trains_with_fsdp2_on_two_ranks(tmp_path):
    """`--nproc 2` end to end, as cheap as it gets: cold only, aot_eager (compiled mode traces
    and partitions, but Inductor generates no kernels), two steps after the first."""
    r = _train(
        tmp_path / "runs",
        "--nproc", "2", "--compile-backend", "aot_eager",
        sets=["scenarios=cold", "model=debug", "seq_len=16", "batch_size=2", "steps=3",
              "warmup=0"],
    )  # fmt: skip
    assert r.case.name == "qwen3-debug/T16/B2/bf16/fsdp2"
    scenarios = r.diagnostics["scenarios"]
    for mode in ("eager", "compiled"):
        assert scenarios[mode]["cold"]["world_size"] == 2
    assert scenarios["compiled"]["cold"]["compile"]["graphs"] >= 1  # compiled under FSDP2
    assert r.diagnostics["parity"]["cold"]["ok"]


def test_report_shows_both_clocks_the_ledger_and_the_chart(tmp_path):
    from trainready.core.case import Case, Result
    from trainready.core.store import RunRecord
    from trainready.reporting import render

    out = judge(PARAMS, _runs(), PEAK)
    case = Case("train", "qwen3-debug/T64/B4/fp32", {})
    with Store(tmp_path) as store:
        store.add_run(RunRecord("r1", 1.7e9, ["train"], "cpu", "quick", "fp32", planned=1))
        store.add_result("r1", Result(case, out.status, out.metrics, out.diagnostics))
        md = render(store, ["r1"], "md")
        html = render(store, ["r1"], "html")
    assert "**compiled steady speedup**: 2×" in md
    assert "**break-even step (cold)**: 81" in md
    assert "| cold | compiled | 9.00 |" in md
    assert "| cold | 81 |" in md  # the ledger row, break-even step first
    # Compile time by phase, compiled mode: Dynamo, backend forward and backward, kernel wait.
    assert "| cold | 2.00 | 1.50 | 0.5 | 1.00 | 2.50 |" in md
    assert "Time to N training steps" in html and "<polyline" in html
    assert "compile time by phase" in html


def test_report_has_a_column_for_every_compile_phase_the_loop_records():
    assert set(COMPILE_PHASE_COLUMNS) == set(COMPILE_PHASES)


def test_report_calls_an_inconclusive_speedup_and_break_even_so_and_says_why(tmp_path):
    from trainready.core.case import Case, Result
    from trainready.core.store import RunRecord
    from trainready.reporting import render

    eager = {"cold": [0.012] * 5, "warm": [0.2] * 5, "arch_change": [0.013] * 5}
    compiled = {name: [0.01] * 5 for name in MAIN}
    out = judge({**PARAMS, "scenarios": MAIN}, _noisy_runs(eager, compiled), PEAK)
    with Store(tmp_path) as store:
        store.add_run(RunRecord("r1", 1.7e9, ["train"], "cpu", "quick", "fp32", planned=1))
        store.add_result(
            "r1", Result(Case("train", "t", {}), out.status, out.metrics, out.diagnostics)
        )
        md = render(store, ["r1"], "md")
        doc = json.loads(render(store, ["r1"], "json"))
    # Eager warm ran 17x slower than eager cold, the same work: the processes disagree, and every
    # timing headline says so, with the medians that show it.
    moved = "the 3 eager processes' steady medians differ by 1567% (over 25%)"
    assert f"**compiled steady speedup**: inconclusive — t: {moved}" in md
    assert f"**break-even step (cold)**: inconclusive — {moved}" in md
    heads = {h["label"]: h for h in doc["runs"][0]["headlines"]}
    assert heads["compiled steady speedup"]["value"] == "inconclusive"
    assert heads["compiled tokens/s"]["value"] == "inconclusive"
    assert "eager 12.00 → 200.0 ms" in heads["compiled tokens/s"]["note"]
    # With the processes agreeing (to 8.3%), steps that spread is still called out.
    noisy = [0.01, 0.02, 0.01, 0.02, 0.015]
    eager = {"cold": noisy, "warm": [x * 13 / 12 for x in noisy], "arch_change": noisy}
    out = judge({**PARAMS, "scenarios": MAIN}, _noisy_runs(eager, compiled), PEAK)
    with Store(tmp_path) as store:
        store.add_result(
            "r1", Result(Case("train", "t", {}), out.status, out.metrics, out.diagnostics)
        )
        md = render(store, ["r1"], "md")
        doc = json.loads(render(store, ["r1"], "json"))
    assert "**compiled steady speedup**: inconclusive — t: steady eager steps spread" in md
    heads = {h["label"]: h for h in doc["runs"][0]["headlines"]}
    # The compiled rate itself is fine: a number, with its interval, sample and drift.
    note = heads["compiled tokens/s"]["note"]
    assert "95% interval" in note and "15 steps" in note, note
    assert "widened by the drift" in note and "machine drift 8.3% (steady step medians" in note


def test_report_names_the_moe_dispatch_that_ran():
    from trainready.reporting.sections.train import headlines, rates_table

    runs = _runs()
    for scenarios in runs.values():
        for s in scenarios:
            s.record["moe_dispatch"] = "routed: grouped_mm"
    out = judge(PARAMS, runs, PEAK)
    result = Result(Case("train", "moe", {}), out.status, out.metrics, out.diagnostics)
    assert "MoE dispatch routed: grouped_mm (MFU counts the active experts)" in (
        rates_table(result, "moe").caption
    )

    class View:  # the one thing headlines() asks of a run
        def in_suite(self, suite):
            return [result]

    tokens = next(s for s in headlines(View()) if s.label == "compiled tokens/s")
    assert tokens.note.endswith("MoE routed: grouped_mm")


def test_break_even_reads_as_a_step_never_or_how_long_compiled_stays_ahead():
    assert break_even_text({"break_even_step": 1296, "ahead_until_step": None}) == "1,296"
    assert break_even_text({"break_even_step": 12, "break_even_range": [9, 20]}) == "12 (9–20)"
    assert break_even_text({"break_even_step": 12, "conclusive": False}) == "inconclusive"
    assert break_even_text({"break_even_step": None, "ahead_until_step": None}) == "never"
    assert (
        break_even_text({"break_even_step": None, "ahead_until_step": 451})
        == "never (ahead until step 451)"
    )
