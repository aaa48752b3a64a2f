"""Shutdown: a signal to `trainready run` ends every process of the run, keeps what finished, and
the run's row and report say it was interrupted, when, and by which signal.

Processes of a run are found by a marker in their environment (TRAINREADY_RUN_TOKEN, which every
process the run starts inherits), so a survivor is found wherever it went: another session, a
new parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.clirun import ROOT, default_signals
from trainready.core import procs
from trainready.core.shutdown import Interrupted, interrupt_on_signals
from trainready.core.store import Store
from trainready.reporting import fmt

TOKEN_ENV = "TRAINREADY_RUN_TOKEN"
GRACE_S = 5.0  # for the kernel to deliver parent-death signals and reap


def run_processes(token: str) -> list[str]:
    """'PID CMDLINE' of every live process whose environment holds TOKEN_ENV=token."""
    marker = f"{TOKEN_ENV}={token}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:  # a zombie's environ reads empty: it is gone, only not yet reaped
            if marker in (d / "environ").read_bytes().split(b"\0"):
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{d.name} {cmd[:160]}")
        except OSError:
            continue  # exited meanwhile, or not ours to read
    return found


def survivors(token: str, grace_s: float = GRACE_S) -> list[str]:
    deadline = time.monotonic() + grace_s
    while (left := run_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def wait_for(predicate, what: str, proc: subprocess.Popen, timeout_s: float = 240.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"run ended before {what} (code {proc.returncode}):\n{out}\n{err}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no {what} within {timeout_s:g} s")


def start_run(out: Path, token: str, *args: str) -> subprocess.Popen:
    """`trainready run ARGS --out OUT` with stdout piped (not a terminal: progress lines)."""
    env = {**os.environ, TOKEN_ENV: token, "TRAINREADY_PROGRESS_INTERVAL_S": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "trainready", "run", *args, "--device", "cpu", "--out", str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )


def stop_run(proc: subprocess.Popen, sig: int) -> tuple[str, str]:
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"run still up 120 s after {sig!r}:\n{out}\n{err}")


def check_interrupted(out: Path, sig: signal.Signals, done: int, planned: int) -> str:
    """The run row, the report files and the terminal summary all say it; returns report.md."""
    with Store(out, create=False) as store:
        run = store.latest_run()
        stored = store.results(run.run_id)
    assert run.finished_at is None
    stop = run.env["interrupted"]
    assert stop["signal"] == sig.name and (stop["done"], stop["planned"]) == (done, planned)
    assert abs(stop["at"] - time.time()) < 300
    assert len(stored) == done and all(r.status == "pass" for r in stored)
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(stop["at"]))
    header = f"interrupted at {when} ({sig.name}), {done} of {fmt.plural(planned, 'case')} done"
    md = (out / run.run_id / "report.md").read_text()
    assert header in md
    assert header in (out / run.run_id / "report.html").read_text()
    state = json.loads((out / run.run_id / "report.json").read_text())["runs"][0]["state"]
    assert state["kind"] == "interrupted" and state["signal"] == sig.name
    assert state["text"] == header
    return md


SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
@pytest.mark.slow
def test_a_signal_mid_case_ends_every_process_of_the_run(tmp_path, sig):
    token, out, pid_file = uuid.uuid4().hex, tmp_path / "runs", tmp_path / "pids.json"
    proc = start_run(
        out, token, "tests.support.shutdown_suite", "--set", f"pid_file={pid_file}", "--jobs", "1"
    )
    try:
        wait_for(pid_file.exists, "the spawning case's children", proc)
        pids = json.loads(pid_file.read_text())
        assert len(run_processes(token)) >= 4  # the CLI, its worker, the worker's two children
        time.sleep(3.0)  # progress lines (every 1 s here) while the case runs: 2 s of slack
        stdout, stderr = stop_run(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = survivors(token)
    assert not left, f"processes of the run survived {sig.name}: {left}"
    assert not any(_alive(pid) for pid in [pids["worker"], *pids["children"]])
    assert proc.returncode == 128 + sig, stderr
    assert f"interrupted ({sig.name})" in stderr
    check_interrupted(out, sig, done=1, planned=3)
    # Progress lines in a log: the first at once, more while the case ran, a last one at the end.
    lines = [ln for ln in stdout.splitlines() if ln.startswith("progress ")]
    assert lines[0].startswith("progress 0/3 done: 0 pass, 0 fail, 0 other; elapsed 0:00:00")
    assert any("running shutdown/01-spawn" in ln for ln in lines), lines
    assert lines[-1].startswith("progress 1/3 done: 1 pass, 0 fail, 0 other; elapsed ")
    assert lines[-1].endswith(f"; interrupted ({sig.name})")


def _training(cmd: str) -> bool:
    """A training process on the CPU: a fork of the train suite's zygote (which shows the
    zygote's command line: two of them, the zygote and its child, mean one is training)."""
    return "-m trainready.suites.train.zygote" in cmd


def _rank(cmd: str) -> bool:
    return "-m trainready.core.launch" in cmd and "torch.distributed.run" not in cmd


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "count", "args"),
    [
        (_training, 2, ()),
        (_rank, 2, ("--nproc", "2")),  # torchrun's ranks: sessions of their own
    ],
    ids=["training-process", "torchrun-ranks"],
)
def test_sigterm_while_the_train_suite_trains_leaves_nothing(tmp_path, kind, count, args):
    """The train suite's own children: its zygote and the training process forked from it, or
    torchrun and its ranks; SIGTERM lands while they train (many steps: they are still at it)."""
    token, out = uuid.uuid4().hex, tmp_path / "runs"
    sets = ["scenarios=cold", "seq_len=16", "batch_size=2", "steps=100000", "warmup=0"]
    proc = start_run(
        out, token, "train", *args, "--compile-backend", "eager",
        *(x for s in sets for x in ("--set", s)),
    )  # fmt: skip
    try:
        training = lambda: sum(map(kind, run_processes(token))) >= count  # noqa: E731
        wait_for(training, kind.__name__, proc)
        time.sleep(1.0)  # into the training steps
        _, stderr = stop_run(proc, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = survivors(token)
    assert not left, f"processes of the run survived SIGTERM: {left}"
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    check_interrupted(out, signal.SIGTERM, done=0, planned=1)


# -- the pieces ---------------------------------------------------------------------------------
def test_the_first_signal_raises_interrupted_later_ones_are_ignored():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stop, interrupt_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at the next bytecode: never reached
    assert stop.value.signal_name == "SIGTERM" and stop.value.exit_code == 143
    assert abs(stop.value.at - time.time()) < 5
    assert isinstance(stop.value, KeyboardInterrupt)  # handled wherever Ctrl-C is
    assert signal.getsignal(signal.SIGTERM) is before  # restored

    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # not ignored (pytest under nohup)
    try:
        with pytest.raises(Interrupted) as first, interrupt_on_signals():
            try:
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(5)
            finally:  # cleaning up: a second signal must not cut it short
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert first.value.signal_name == "SIGHUP"


def test_an_ignored_signal_stays_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it
    try:
        with interrupt_on_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_worker_whose_runner_is_gone_starts_nothing(monkeypatch, tmp_path):
    """The reported bug: a worker left behind went on to start a training process."""
    from trainready.suites.train.loop import TrainSpec
    from trainready.suites.train.processes import run_single

    assert not procs.runner_gone()  # outside a worker nothing is refused
    monkeypatch.setattr(procs, "_runner_pid", os.getppid() + 1_000_000)  # not our parent
    started = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: started.append(a))
    with pytest.raises(procs.RunnerGone, match="the run was stopped"):
        run_single(TrainSpec(), {}, tmp_path, 60.0)
    with pytest.raises(procs.RunnerGone):
        from trainready.core.launch import RankPool

        RankPool(1, device="cpu").start(timeout_s=60)
    assert not started


def test_a_guarded_child_dies_with_its_parent(tmp_path):
    """A child in a session of its own, through guarded_command, dies when its parent is
    SIGKILLed: nothing could have killed it otherwise."""
    code = (
        "import os, subprocess, sys, time\n"
        "from trainready.core.procs import guarded_command\n"
        "cmd, env = guarded_command([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "p = subprocess.Popen(cmd, env={**os.environ, **env}, start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + GRACE_S
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
