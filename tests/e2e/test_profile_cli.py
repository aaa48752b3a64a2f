"""`trainready profile` and `trainready analyze` end to end, and the capture API, on the CPU."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from tests.support import paths
from trainready.cli.app import app
from trainready.cli.commands import profile as profile_command
from trainready.profile import analysis as A
from trainready.profile import capture
from trainready.profile.capture import METADATA_NAME, TRACE_NAME, profile_steps
from trainready.profile.trace import KIND_CPU_OP, KIND_PYTHON, load_trace

DATA = paths.DATA / "traces"
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
    assert "no device activity in this trace (a CPU-only run, or a device whose" in " ".join(
        text.split()
    )
    for device_table in ("Device time", "Kernel types", "Idle time per stream", "device busy"):
        assert device_table not in text
    assert "Your code by host time" in text and "Profiler steps" in text


SMALL = DATA / "trace_filter__sampled_rank-1.json.gz"


def _quick_call(monkeypatch, argv):
    """What quick_analyze runs for `argv`: (trace, options) or None (left to Typer)."""
    calls = []
    monkeypatch.setattr(profile_command, "analyze", lambda trace, **kw: calls.append((trace, kw)))
    code = profile_command.quick_analyze(argv)
    assert (code is None) == (not calls)
    return calls[0] if calls else None


def test_quick_analyze_parses_the_plain_forms(monkeypatch):
    t = Path("t.json.gz")
    assert _quick_call(monkeypatch, ["analyze", str(t)]) == (t, {})
    argv = ["analyze", "--json", str(t), "--no-all-steps", "--peak-tflops", "2.5"]
    assert _quick_call(monkeypatch, argv) == (
        t, {"as_json": True, "all_steps": False, "peak_tflops": 2.5}
    )  # fmt: skip
    argv = ["analyze", str(t), "--all-steps", "--peak-tflops=0.001"]
    assert _quick_call(monkeypatch, argv) == (t, {"all_steps": True, "peak_tflops": 0.001})


def test_quick_analyze_leaves_everything_else_to_typer(monkeypatch):
    for argv in (
        [], ["explore", "t"], ["analyze"], ["analyze", "--help"], ["analyze", "t", "--help"],
        ["analyze", "a", "b"], ["analyze", "t", "--json", "--json"], ["analyze", "-", "--json"],
        ["analyze", "t", "--all-steps", "--no-all-steps"], ["analyze", "t", "--jsn"],
        ["analyze", "t", "--peak-tflops", "0"], ["analyze", "t", "--peak-tflops", "1e3"],
        ["analyze", "t", "--peak-tflops"], ["analyze", "t", "--peak-tflops", "--json"],
        ["analyze", "t", "--json=1"], ["analyze", "--", "t"], ["analyze", ""],
    ):  # fmt: skip
        assert _quick_call(monkeypatch, argv) is None, argv


def test_quick_analyze_flags_are_typers(monkeypatch):
    """Each flag quick_analyze reads is the Typer option of the parameter it sets, with the same
    sense, and Typer's minimum of the number is the one it checks: renaming one fails here."""
    import typer.main

    command = typer.main.get_command(app).commands["analyze"]
    params = {p.name: p for p in command.params}
    for flag, (name, value) in profile_command.QUICK_FLAGS.items():
        assert flag in (params[name].opts if value else params[name].secondary_opts), flag
    assert profile_command.QUICK_NUMBER in params["peak_tflops"].opts
    least = profile_command.PEAK_TFLOPS_MIN
    for peak, code in ((least, 0), (least * 0.9, 2)):
        argv = ["analyze", str(SMALL), "--json", profile_command.QUICK_NUMBER, repr(peak)]
        assert runner.invoke(app, argv).exit_code == code
        assert (_quick_call(monkeypatch, argv) is None) == bool(code)


def test_quick_analyze_prints_what_typer_prints(capsys):
    for argv in (["analyze", str(SMALL)], ["analyze", str(SMALL), "--json", "--all-steps"],
                 ["analyze", str(DATA / "missing.json.gz")]):  # fmt: skip
        typer_result = runner.invoke(app, argv)
        code = profile_command.quick_analyze(argv)
        out = capsys.readouterr()
        assert (code, out.out + out.err) == (typer_result.exit_code, typer_result.output)


def test_analyze_imports_neither_typers_parser_nor_the_runner():
    """`trainready analyze TRACE` as the console entry runs it: no pydantic (Typer's parsing),
    no torch, no report renderers, and numpy loaded without OpenBLAS's thread pool: the cost of
    every whole-process run."""
    code = (
        "import sys\n"
        "from trainready.cli.app import main\n"
        f"sys.argv = ['trainready', 'analyze', {str(SMALL)!r}, '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "heavy = ('pydantic', 'torch', 'trainready.reporting.html', 'pandas')\n"
        "print([m for m in heavy if m in sys.modules], file=sys.stderr)\n"
        "import os\n"
        "assert os.environ['OPENBLAS_NUM_THREADS'] == '1'  # no BLAS thread pool to start\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["TRAINREADY_CACHE_DIR"] = "off"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0]["launches"]["count"] == 577
    assert p.stderr.strip().splitlines()[-1] == "[]"


ENTRY = "import sys; sys.argv[0] = 'trainready'; from trainready.cli.entry import main; main()"


def _entry_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without what tells rich it writes to a terminal, no trace cache."""
    drop = ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    return {**base, "TRAINREADY_CACHE_DIR": "off", **(env or {})}


def _entry(
    argv: list[str], env: dict[str, str] | None = None, flags: list[str] | None = None
) -> subprocess.CompletedProcess:
    """`trainready ARGV` as the console script runs it (trainready.cli.entry:main), in a fresh
    process; stdout is a pipe, as in `trainready analyze T > file`."""
    return subprocess.run([sys.executable, *(flags or []), "-c", ENTRY, *argv],
                          capture_output=True, text=True, env=_entry_env(env),
                          stdin=subprocess.DEVNULL)  # fmt: skip


def test_a_pipe_gets_whole_lines():
    """Piped (`trainready analyze T > file`): plain text, no line wrapped at 80 columns, no box
    drawing (that rich is not even imported: the test below)."""
    p = _entry(["analyze", str(SMALL)])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    launches = next(line for line in lines if line.startswith("launches: "))
    assert len(launches) > 80 and launches.endswith("ran shorter than their launch call")
    assert "Idle time per stream" in lines and not any(ch in p.stdout for ch in "┃━│┏")


def test_a_terminal_gets_rich_tables():
    """On a pseudo-terminal the same command draws rich's tables."""
    leader, follower = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-c", ENTRY, "analyze", str(SMALL)],
                             stdout=follower, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env=_entry_env())  # fmt: skip
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert p.wait(timeout=60) == 0, p.stderr.read()
        p.stderr.close()
    finally:
        os.close(leader)
    shown = out.decode("utf-8", "replace")
    assert "Idle time per stream" in shown and "┃" in shown and "━" in shown


def test_the_console_entry_analyzes_without_the_cli():
    """The console script's `analyze TRACE` loads neither Typer nor the runner, the reports,
    torch, numpy.ma or rich (a whole `trainready analyze` into a pipe is python, numpy, the parse,
    the analyses and plain-text printing), and prints what the Typer command prints. (It ends with
    os._exit: the modules it loaded are read from `-X importtime`.)"""
    p = _entry(["analyze", str(SMALL)], env={"COLUMNS": "80"}, flags=["-X", "importtime"])
    assert p.returncode == 0, p.stderr
    loaded = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if "|" in line}
    assert "trainready.profile.analysis" in loaded and "numpy" in loaded
    heavy = ("typer", "click", "pydantic", "torch", "numpy.ma", "trainready.cli.app",
             "trainready.cli.common", "trainready.cli.commands", "trainready.api",
             "trainready.reporting.model", "trainready.reporting.fmt", "trainready.reporting.html",
             "rich")  # fmt: skip
    assert [m for m in heavy if m in loaded] == []
    # of core, only its base (errors and dtype names): no runner, store or plan
    assert {m for m in loaded if m.startswith("trainready.core")} <= {
        "trainready.core",
        "trainready.core.config",
    }
    typer_result = runner.invoke(app, ["analyze", str(SMALL)], env={"COLUMNS": "80"})
    assert p.stdout == typer_result.output


def test_the_console_entry_leaves_the_rest_to_typer(tmp_path):
    """--help, other forms of `analyze` and bad input: the Typer app's output and exit codes."""
    p = _entry(["--help"])
    assert p.returncode == 0 and "analyze" in p.stdout and "run" in p.stdout
    p = _entry(["analyze", "--help"])
    assert p.returncode == 0 and "--peak-tflops" in p.stdout
    p = _entry(["analyze", str(SMALL), "--peak-tflops", "0"])
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--peak-tflops" in p.stderr
    bad = tmp_path / "x.json"
    bad.write_text('{"not": "a trace"}')
    for target in (bad, tmp_path / "missing.json.gz"):
        p = _entry(["analyze", str(target)])
        typer_result = runner.invoke(app, ["analyze", str(target)])
        assert (p.returncode, p.stderr, p.stdout) == (2, typer_result.output, "")


def test_numpy_stand_ins_are_numpys():
    """intervals.unique / isin and analysis.percentiles (which spare numpy.ma's import) give
    numpy's answers, bit for bit."""
    from trainready.profile import intervals

    rng = np.random.default_rng(0)
    for n in (*range(1, 40), 257, 5000):
        for hi in (3, 10**6, 2**62):
            v = rng.integers(-hi, hi, size=n, dtype=np.int64)
            w = rng.integers(-hi, hi, size=max(1, n // 3), dtype=np.int64)
            assert np.array_equal(intervals.unique(v), np.unique(v))
            assert np.array_equal(intervals.isin(v, w), np.isin(v, w))
            assert np.array_equal(intervals.isin(v, v[: n // 2]), np.isin(v, v[: n // 2]))
            for qs in ([50, 90, 99], [0, 100, 33.3]):
                assert A.percentiles(v, qs).tobytes() == np.percentile(v, qs).tobytes()
    assert intervals.unique(np.zeros(0, np.int64)).size == 0
    assert not intervals.isin(np.arange(3), np.zeros(0, np.int64)).any()
