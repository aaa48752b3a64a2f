"""The train suite: its cases, how it judges what the scenario processes measured (parity, the
ledger, failures), and one real run through the CLI in eager and compiled mode, four scenarios."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.clirun import cli
from trainready.config import ConfigError, RunConfig
from trainready.core.context import CaseContext
from trainready.core.store import Store
from trainready.suites import train as suite
from trainready.suites.train import SCENARIOS, Scenario, cases, combine_ranks, judge

ROOT = Path(__file__).resolve().parent.parent


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
    cold = suite.scenario_spec(p, "cpu", "compiled", "cold")
    arch = suite.scenario_spec(p, "cpu", "compiled", "arch_change")
    shape = suite.scenario_spec(p, "cpu", "eager", "shape_change")
    assert arch.model_overrides == {"mlp_activation": "gelu"} and cold.model_overrides == {}
    assert (shape.seq_len, shape.compile, cold.compile) == (32, "none", "blocks")
    norm = suite.scenario_spec({**p, "arch_change": "norm"}, "cpu", "compiled", "arch_change")
    assert norm.model_overrides == {"extra_norm": True}


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
        "compile": {"graph_breaks": 0, "recompiles": 0, "phases": {"dynamo_s": 2.0}},
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
    assert m["compiled_cold_compile_s"] == 2.0
    json.dumps(out.diagnostics)


def test_a_fast_wrong_compiled_run_fails_numerics():
    wrong = [x * 1.1 for x in LOSSES]
    out = judge(PARAMS, _runs(compiled_losses=wrong), PEAK)
    assert out.status == "fail_numerics"
    assert "compiled loss differs from eager" in out.diagnostics["error"]
    assert "compiled_speedup" in out.metrics  # the speed is still reported, and still wrong


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

    monkeypatch.setattr(suite, "run_single", fake_single)
    p = cases(_cfg())[0].params
    ctx = CaseContext(device="cpu", dtype="bf16", budget_s=60)
    out = suite.run_mode(p, ctx, "compiled", tmp_path, deadline=float("inf"))
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


@pytest.mark.slow
def test_cli_trains_eager_and_compiled_in_all_four_scenarios(tmp_path):
    """The real thing, tiny: Inductor compiles every block on the CPU, in fresh processes."""
    out = tmp_path / "runs"
    sets = ["seq_len=32", "batch_size=2", "steps=3", "warmup=0"]
    p = _cli(
        "run", "train", "--device", "cpu", "--out", str(out),
        *(x for s in sets for x in ("--set", s)), cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(out, create=False) as store:
        (r,) = store.results(store.latest_run().run_id)
    assert r.status == "pass", r.diagnostics.get("error")
    scenarios = r.diagnostics["scenarios"]
    for mode in ("eager", "compiled"):
        assert set(scenarios[mode]) == set(SCENARIOS)
    compiled = scenarios["compiled"]
    # The warm cache pays: the warm first step is faster than the cold one.
    assert compiled["warm"]["first_step_s"] < compiled["cold"]["first_step_s"]
    assert compiled["cold"]["compile"]["graphs"] >= 1
    assert compiled["shape_change"]["tokens_per_step"] == 2 * 16
    # Eager and compiled losses agree in every scenario (what `pass` requires).
    assert all(v["ok"] for v in r.diagnostics["parity"].values())
    assert set(r.diagnostics["ledger"]) == set(SCENARIOS)
    report = next(out.glob("*/report.md")).read_text()
    assert "time to N steps" in report and "break-even" in report
    html = next(out.glob("*/report.html")).read_text()
    assert "Time to N training steps" in html


def test_report_shows_both_clocks_the_ledger_and_the_chart(tmp_path):
    from trainready.core.case import Case, Result
    from trainready.core.store import RunRecord
    from trainready.report import render

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
    assert "Time to N training steps" in html and "<polyline" in html
