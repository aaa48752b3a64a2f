"""Runner overhead, measured in one run on this machine (not a test: machines are noisy).

    python -m benchmarks.runner_overhead [--cases 200] [--json FILE --note TEXT]

Reports:
- per-case cost of a trivial case through the runner on a warm worker (target: < 50 ms), alone and
  through `trainready.run` with its store commit, against the same case called in-process;
- worker start-up (spawn + imports), paid once per worker;
- time from `trainready run` (a new process, empty store) to the first stored result, which is
  when the progress bar first moves: for the trivial suite, and for the real matmul suite, whose
  first result also waits for the CPU peak calibration (an empty store has none cached).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import trivial_suite
from trainready import api
from trainready.config import RunConfig
from trainready.core.context import CaseContext
from trainready.core.runner import Job, Runner

SUITE = "benchmarks.trivial_suite"


def in_process_s(cases) -> float:
    ctx = CaseContext(device="cpu", dtype=None, budget_s=60)
    t0 = time.perf_counter()
    for c in cases:
        trivial_suite.execute(c, ctx)
    return (time.perf_counter() - t0) / len(cases)


def through_runner(cases, log_dir: Path) -> tuple[float, float]:
    ctx = {
        "device": "cpu",
        "dtype": None,
        "budget_s": 60,
        "preset": "quick",
        "options": {},
        "peaks": {},
    }
    jobs = [Job(c, SUITE, 60, ctx) for c in cases]
    marks: list[float] = []
    runner = Runner(jobs=1, log_dir=log_dir, on_result=lambda r: marks.append(time.perf_counter()))
    t0 = time.perf_counter()
    try:
        runner.run(jobs[:1])  # start-up plus one case
        startup = marks[0] - t0
        marks.clear()
        t1 = time.perf_counter()
        runner.run(jobs[1:])  # the same, now warm, worker
    finally:
        runner.close()
    return (marks[-1] - t1) / (len(cases) - 1), startup


class _Marks(api.Observer):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_result(self, result) -> None:
        self.times.append(time.perf_counter())


def through_api(n: int, out: Path) -> float:
    """Per case on a warm worker through trainready.run: the runner plus a store commit each."""
    marks = _Marks()
    api.run([SUITE], device="cpu", out=out, options={"n": n}, observer=marks)
    return (marks.times[-1] - marks.times[0]) / (len(marks.times) - 1)


def _stored_results(db: Path) -> int:
    """Results stored so far; 0 while the store is absent or busy (a poll, not a failure)."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as con:
            return con.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.OperationalError:  # locked; or a store made by a version without atomic creation
        return 0


def first_result_s(out: Path, suite: str, timeout_s: float = 600.0) -> float:
    """Seconds from starting `trainready run SUITE` on an empty store to its first stored result;
    the run is then interrupted (Ctrl-C: finished results kept, workers stopped)."""
    cmd = [sys.executable, "-m", "trainready", "run", suite, "--device", "cpu",
           "--out", str(out), "--no-report"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - t0 < timeout_s:
            if _stored_results(out / "trainready.db"):
                return time.perf_counter() - t0
            if proc.poll() is not None:
                raise RuntimeError(f"`{' '.join(cmd)}` exited {proc.returncode} before a result")
            time.sleep(0.01)
        raise RuntimeError(f"no result within {timeout_s:.0f} s")
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # the CLI's Ctrl-C path stops its workers
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _machine() -> str:
    from trainready.device import device_info

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    cpu = f"{device_info('cpu')['name']}, {platform.machine()}, {os.cpu_count()} cores"
    return f"{cpu}, load average {load} at the start"


def _command(args: argparse.Namespace) -> str:
    """The command that reproduces the file (the note is recorded beside it, not in it)."""
    return shlex.join(
        ["python", "-m", "benchmarks.runner_overhead", "--cases", str(args.cases), "--json",
         str(args.json), "--note", "..."]
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--json", type=Path, help="also write the results here, with the command")
    ap.add_argument("--note", default="", help="a note for the JSON file (e.g. the machine's load)")
    args = ap.parse_args()
    machine = _machine()
    cases = trivial_suite.cases(RunConfig(suites=[SUITE], options={"n": args.cases}))
    with tempfile.TemporaryDirectory() as tmp:
        per_case, startup = through_runner(cases, Path(tmp) / "logs")
        direct = in_process_s(cases)
        with_store = through_api(args.cases, Path(tmp) / "api")
        first = first_result_s(Path(tmp) / "cli", SUITE)
        first_matmul = first_result_s(Path(tmp) / "matmul", "matmul")
    result = {
        "cases": args.cases,
        "runner_ms_per_case": per_case * 1e3,
        "api_ms_per_case_with_store": with_store * 1e3,
        "in_process_ms_per_case": direct * 1e3,
        "overhead_ratio": per_case / direct if direct else None,
        "target_ms_per_case": 50.0,
        "meets_target": max(per_case, with_store) * 1e3 < 50.0,
        "worker_startup_s": startup,
        "cli_to_first_result_s": first,
        "cli_to_first_result_matmul_s": first_matmul,  # includes the CPU peak calibration
    }
    print(json.dumps(result, indent=2))
    if args.json:
        record = {
            "command": _command(args),
            "date": time.strftime("%Y-%m-%d"),
            "machine": machine,
            "note": args.note,
            "result": result,
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
