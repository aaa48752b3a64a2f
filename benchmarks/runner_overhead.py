"""Runner overhead, measured in one run on this machine (not a test: machines are noisy).

    python -m benchmarks.runner_overhead [--cases 200]

Reports:
- per-case cost of a trivial case through the runner on a warm worker (target: < 50 ms), alone and
  through `trainready.run` with its store commit, against the same case called in-process;
- worker start-up (spawn + imports), paid once per worker;
- time from `trainready run` (a new process) to the first stored result, which is when the
  progress bar first moves.
"""

from __future__ import annotations

import argparse
import json
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


def first_result_s(out: Path) -> float:
    cmd = [sys.executable, "-m", "trainready", "run", SUITE, "--device", "cpu",
           "--out", str(out), "--no-report"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = out / "trainready.db"
    try:
        while proc.poll() is None or db.exists():
            if db.exists():
                with sqlite3.connect(db, timeout=5) as con:
                    if con.execute("SELECT count(*) FROM results").fetchone()[0]:
                        return time.perf_counter() - t0
            if proc.poll() is not None:
                break
            time.sleep(0.01)
    finally:
        proc.wait()
    raise RuntimeError("the run stored no result")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200)
    args = ap.parse_args()
    cases = trivial_suite.cases(RunConfig(suites=[SUITE], options={"n": args.cases}))
    with tempfile.TemporaryDirectory() as tmp:
        per_case, startup = through_runner(cases, Path(tmp) / "logs")
        direct = in_process_s(cases)
        with_store = through_api(args.cases, Path(tmp) / "api")
        first = first_result_s(Path(tmp) / "cli")
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
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
