"""`trainready run train --profile`: the capture after the timed steps, the case's artifacts
directory, what the diagnostics and the report say, and one real run through the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support.clirun import cli
from trainready.core.context import CaseContext, artifacts_name, prepare_artifacts
from trainready.core.store import Store
from trainready.profile import analysis as A
from trainready.profile import capture
from trainready.profile.capture import METADATA_NAME, TRACE_NAME, extra_steps, profile_after
from trainready.profile.trace import KIND_CPU_OP, load_trace
from trainready.suites.train.profile import timed_record
from trainready.suites.train.suite import SCENARIOS, Scenario, judge


def _train(steps: int) -> None:
    import torch

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    for _ in range(steps):
        model(x).sum().backward()
        opt.step()


def _addmm_calls(trace) -> int:
    sel = (trace.kind == KIND_CPU_OP) & (trace.name == trace.symbol("aten::addmm"))
    return int(np.count_nonzero(sel))


def test_profile_after_records_only_steps_after_the_timed_ones(tmp_path):
    started = []
    with profile_after(tmp_path, after=3, steps=2, on_start=lambda: started.append(1)):
        _train(3 + extra_steps(2) + 2)  # two more than needed: they run unprofiled
    meta = json.loads((tmp_path / METADATA_NAME).read_text())
    assert meta["complete"] and meta["after_steps"] == 3 and started == [1]
    trace = load_trace(tmp_path / TRACE_NAME)
    assert [s[0] for s in A.profiler_steps(trace)] == [1, 2]
    assert _addmm_calls(trace) == 2  # the two recorded steps: nothing of the timed ones


def test_a_profiler_error_ends_the_capture_not_the_training(tmp_path, monkeypatch):
    def broken(self):
        raise RuntimeError("no profiler here")

    monkeypatch.setattr(capture.StepProfiler, "start", broken)
    with profile_after(tmp_path, after=1, steps=2) as prof:
        _train(1 + extra_steps(2))
    meta = json.loads((tmp_path / METADATA_NAME).read_text())
    assert meta["error"] == "RuntimeError: no profiler here" and prof.error == meta["error"]
    assert not meta["complete"] and not (tmp_path / TRACE_NAME).exists()


def test_a_case_gets_its_own_emptied_artifacts_directory(tmp_path):
    ids = ["train/qwen3-debug/T64/B4/bf16", "train_qwen3-debug_T64_B4_bf16", "x/../../etc"]
    names = [artifacts_name(i) for i in ids]
    assert len(set(names)) == 3 and all("/" not in n and not n.startswith(".") for n in names)
    ctx = CaseContext(device="cpu", dtype=None, budget_s=1, run_dir=str(tmp_path))
    prepare_artifacts(ctx, ids[0])
    assert not Path(ctx.artifacts_dir).exists()  # made on first use only
    (ctx.artifacts() / "old.txt").write_text("from an interrupted attempt")
    prepare_artifacts(ctx, ids[0])  # a rerun (--resume) starts over
    assert not Path(ctx.artifacts_dir).exists()
    assert ctx.run_relative(ctx.artifacts() / "t.gz") == f"artifacts/{names[0]}/t.gz"
    with pytest.raises(OSError, match="no artifacts directory"):
        CaseContext(device="cpu", dtype=None, budget_s=1).artifacts()


def _record(steps: int) -> dict:
    return {
        "first_step_s": 1.0,
        "first_step_phases": {"setup_s": 0.1},
        "step_times_s": [0.1] * (steps - 1),
        "clock": "wall",
        "losses": [6.0 - 0.1 * i for i in range(steps)],
        "tokens_per_step": 64,
        "params": 1000,
        "flops_per_token": 6000,
        "world_size": 1,
        "peak_memory_bytes": 3 * 2**30,
        "memory_source": "process-rss",
        "finite": True,
        "compile": {"graph_breaks": 0, "recompiles": 0, "phases": {}},
    }


def test_a_profiled_record_keeps_the_timed_steps_and_the_metrics_keep_their_kind():
    longer = _record(4 + extra_steps(capture_steps := 3))
    longer["losses"][-1] = float("nan")  # a profiled step's loss says nothing of the timed ones
    cut = timed_record(longer, 4, {"peak_allocated": 2**30})
    assert (len(cut["step_times_s"]), len(cut["losses"]), cut["finite"]) == (3, 4, True)
    assert cut["peak_memory_bytes"] == 2**30 and capture_steps == 3
    params = {"scenarios": list(SCENARIOS), "warmup": 1, "dtype": "fp32"}

    def runs(profile: dict | None) -> dict:
        return {
            mode: [Scenario(mode, n, _record(4), profile=profile) for n in SCENARIOS]
            for mode in ("eager", "compiled")
        }

    plain = judge(params, runs(None), None)
    capture_info = {"trace": "artifacts/c/eager-warm/trace.json.gz", "summary": {"steps": 2}}
    profiled = judge(params, runs(capture_info), None)
    assert profiled.metrics == plain.metrics and "profile" not in plain.diagnostics
    assert profiled.diagnostics["profile"]["eager/warm"] == capture_info


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return cli(*args, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory):
    """The smallest train case: cold only, 3 steps of a T32 B2 debug model, the eager backend
    for compiled mode (Dynamo's graphs, no Inductor build); about half a minute on 2 cores."""
    tmp = tmp_path_factory.mktemp("profiled")
    sets = ["seq_len=32", "batch_size=2", "steps=3", "warmup=0", "scenarios=cold"]
    p = _cli(
        "run", "train", "--device", "cpu", "--preset", "quick", "--out", "runs",
        "--filter", "train/qwen3-debug/*", "--profile", "--compile-backend", "eager",
        *(x for s in sets for x in ("--set", s)), cwd=tmp,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(tmp / "runs", create=False) as store:
        (result,) = store.results(store.latest_run().run_id)
        run_dir = tmp / "runs" / store.latest_run().run_id
    return tmp, run_dir, result


@pytest.mark.slow
def test_cli_profile_writes_traces_the_diagnostics_and_the_report_name(profiled_run):
    tmp, run_dir, r = profiled_run
    assert r.status == "pass", r.diagnostics.get("error")
    captures = r.diagnostics["profile"]
    assert set(captures) == {"eager/cold", "compiled/cold"}
    for name, c in captures.items():
        trace = load_trace(run_dir / c["trace"])  # recorded relative to the run directory
        assert [s[0] for s in A.profiler_steps(trace)] == [1, 2, 3]
        ops = {trace.strings[i] for i in np.unique(trace.name[trace.kind == KIND_CPU_OP])}
        assert {"aten::mm", "aten::embedding"} <= ops  # shapes recorded for the analyses
        meta = json.loads((run_dir / c["metadata"]).read_text())
        assert meta["complete"] and meta["after_steps"] == 3 and meta["env"]["torch"]
        assert meta["scenario"] == name and meta["timed_spec"]["steps"] == 3
        s = c["summary"]
        assert s["steps"] == 2 and s["step_ms"] > 0 and s["top_ops"], c
        assert s["device_idle_pct"] is None  # the CPU: no device activity to be idle between
    # The timed steps alone made the numbers: 3 losses, 2 steady steps, metrics as always.
    cold = r.diagnostics["scenarios"]["eager"]["cold"]
    assert len(cold["losses"]) == 3 and cold["steady_steps"] == 2
    for key in (
        "compiled_cold_first_step_x",
        "eager_cold_tokens_per_s",
        "compiled_cold_peak_memory_gib",
    ):
        assert key in r.metrics
    # Two steady steps per mode support no conclusion: no speedup metric, and the report says why.
    assert "compiled_speedup" not in r.metrics
    assert r.diagnostics["rates"]["main"]["speedup"]["why"].startswith("only 2 steady")
    md = (run_dir / "report.md").read_text()
    path = captures["compiled/cold"]["trace"]
    assert f"trainready analyze {path}" in md and f"trainready explore {path}" in md
    assert path in (run_dir / "report.html").read_text()


@pytest.mark.slow
def test_merge_carries_the_artifacts(profiled_run):
    tmp, run_dir, r = profiled_run
    p = _cli("merge", "runs", "--out", "merged", cwd=tmp)
    assert p.returncode == 0, p.stdout + p.stderr
    with Store(tmp / "merged", create=False) as store:
        merged_id = store.latest_run().run_id
    trace = r.diagnostics["profile"]["eager/cold"]["trace"]
    assert (tmp / "merged" / merged_id / trace).is_file()
