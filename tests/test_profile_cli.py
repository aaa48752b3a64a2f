"""`trainready profile` and `trainready analyze` end to end, and the capture API, on the CPU."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from trainready.cli import app
from trainready.commands import profile as profile_command
from trainready.profile import analysis as A
from trainready.profile import capture
from trainready.profile.capture import METADATA_NAME, TRACE_NAME, profile_steps
from trainready.profile.trace import KIND_CPU_OP, KIND_PYTHON, load_trace

DATA = Path(__file__).parent / "data" / "traces"
runner = CliRunner()

TRAIN = textwrap.dedent(
    """
    import sys
    import torch

    steps = int(sys.argv[1])
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    for _ in range(steps):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    print("trained", steps)
    """
)


def test_analyze_prints_a_summary():
    result = runner.invoke(app, ["analyze", str(DATA / "trace_filter__sampled_rank-1.json.gz")])
    assert result.exit_code == 0, result.output
    for text in ("Device time", "Kernel types", "Idle time per stream", "launches: 577",
                 "communication overlapped by computation: 20.05%", "Profiler steps"):  # fmt: skip
        assert text in result.output


def test_analyze_json():
    path = DATA / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    result = runner.invoke(app, ["analyze", str(path), "--json"])
    assert result.exit_code == 0, result.output
    (summary,) = json.loads(result.output)
    assert summary["launches"]["count"] == 98
    assert summary["temporal"]["idle_pct"] > 99


def test_analyze_bad_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"not": "a trace"}')
    for target in (bad, tmp_path / "missing.json.gz"):
        result = runner.invoke(app, ["analyze", str(target)])
        assert result.exit_code == 2
        assert result.output.count("\n") == 1 and "error:" in result.output


def test_profile_without_a_command_is_one_line_exit_2():
    result = runner.invoke(app, ["profile", "--", "python", "no_such_script.py"])
    assert result.exit_code == 2 and "no such script" in result.output


def test_profile_steps_api(tmp_path):
    import torch

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    with profile_steps(tmp_path, steps=2, wait=0, warmup=1) as step:
        for _ in range(5):
            model(x).sum().backward()
            opt.step()
            step()
    meta = json.loads((tmp_path / METADATA_NAME).read_text())
    assert meta["complete"] and meta["steps_seen"] == 3  # warm-up + 2 active, then it stops
    assert meta["env"]["torch"] == torch.__version__
    trace = load_trace(tmp_path / TRACE_NAME)
    assert [s[0] for s in A.profiler_steps(trace)] == [1, 2]
    mm = np.flatnonzero((trace.kind == KIND_CPU_OP) & (trace.name == trace.symbol("aten::addmm")))
    assert mm.size == 2 and trace.event(int(mm[0]))["input_dims"][1] == [4, 8]


def test_a_run_shorter_than_the_schedule_is_marked_partial(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / "prof"
    assert capture.main(["--steps", "5", "--out", str(out), "--", str(script), "3"]) == 0
    meta = json.loads((out / METADATA_NAME).read_text())
    assert (meta["steps_seen"], meta["active_steps_recorded"], meta["complete"]) == (3, 1, False)
    # Step 2 is the recorded one; step 3 is the tail, from the last optimizer step to the exit,
    # which the analyses leave out as the last step.
    assert [s[0] for s in A.profiler_steps(load_trace(out / TRACE_NAME))] == [2, 3]
    none = tmp_path / "none"
    assert capture.main(["--steps", "2", "--out", str(none), "--", str(script), "1"]) == 3
    assert not (none / TRACE_NAME).exists()


def test_profile_command_on_an_unmodified_script(tmp_path, monkeypatch):
    """`trainready profile` runs `python -m trainready.profile.capture ...` in a child; here the
    child's main() runs in this process (torch and the profiler are already loaded), which keeps
    the test fast and checks the exact command line the CLI builds."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / "prof"
    children = []

    def run_child(cmd):
        assert cmd[:3] == [sys.executable, "-m", "trainready.profile.capture"]
        children.append(cmd)
        return capture.main(cmd[3:])

    monkeypatch.setattr(profile_command, "_run_child", run_child)
    result = runner.invoke(
        app,
        ["profile", "--steps", "2", "--out", str(out), "--", sys.executable, str(script), "6"],
    )
    assert result.exit_code == 0, result.output
    assert len(children) == 1 and children[0][-2:] == [str(script), "6"]
    meta = json.loads((out / METADATA_NAME).read_text())
    assert meta["complete"] and meta["exit_code"] == 0 and meta["steps_seen"] == 4
    assert meta["command"] == [str(script), "6"]
    trace = load_trace(out / TRACE_NAME)
    assert [s[0] for s in A.profiler_steps(trace)] == [2, 3]  # after wait=1 and warmup=1
    assert (trace.kind == KIND_PYTHON).any()  # stacks recorded
    assert len(trace.memory.ts) > 0  # allocator events recorded
    assert (trace.input_dims >= 0).any()  # shapes recorded
    result = runner.invoke(app, ["analyze", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)[0]
    assert len(summary["steps"]) == 2
    # A CPU-only trace: one line says there is no device activity, instead of empty device
    # tables; "your code" splits the module-level loop by the calls it makes, and the tool's
    # own frames (capture.py, runpy) are nobody's code.
    assert summary["device_activity"] is False
    lines = [row["line"] for row in summary["source"]]
    assert any(line.startswith(f"{script} <module> → backward") for line in lines), lines
    assert any(line.startswith(f"{script} <module> → step") for line in lines), lines
    assert not any("capture.py" in line or "runpy" in line for line in lines), lines
    text = runner.invoke(app, ["analyze", str(out)]).output
    assert "no device activity in this trace (a CPU-only run)" in " ".join(text.split())
    for device_table in ("Device time", "Kernel types", "Idle time per stream", "device busy"):
        assert device_table not in text
    assert "Your code by host time" in text and "Profiler steps" in text
