"""Runner overhead, measured in one run on this machine (not a test: machines are noisy).

    python -m benchmarks.runner_overhead [--cases 200] [--ray-cases 20] [--json FILE --note TEXT]

Reports:
- per-case cost of a trivial case through the runner on a warm worker (target: < 50 ms), alone and
  through `trainready.run` with its store commit, against the same case called in-process;
- worker start-up (spawn + imports), paid once per worker;
- `--executor ray` on a local Ray instance with one slot: Ray's start, the seconds to the first
  result, and the per-case cost of an actor that keeps its Runner against that of a Ray task per
  case with a fresh Runner (the design before actors), measured in the same run (`--ray-cases 0`
  leaves Ray out);
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
from trainready.core.config import RunConfig
from trainready.core.context import CaseContext
from trainready.core.ray_executor import RayExecutor, local_init_kwargs, task_resources
from trainready.core.runner import Job, Runner

SUITE = "benchmarks.trivial_suite"


def in_process_s(cases) -> float:
    ctx = CaseContext(device="cpu", dtype=None, budget_s=60)
    t0 = time.perf_counter()
    for c in cases:
        trivial_suite.execute(c, ctx)
    return (time.perf_counter() - t0) / len(cases)


def _jobs(cases) -> list[Job]:
    ctx = {
        "device": "cpu",
        "dtype": None,
        "budget_s": 60,
        "preset": "quick",
        "options": {},
        "peaks": {},
    }
    return [Job(c, SUITE, 60, ctx) for c in cases]


def through_runner(cases, log_dir: Path) -> tuple[float, float]:
    jobs = _jobs(cases)
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


def _fresh_runner_case(job: Job) -> str:
    """The per-case body of the Ray executor before actors (a Ray task per case): a new one-worker
    Runner, so a new worker process and its imports, for one case."""
    statuses: list[str] = []
    with tempfile.TemporaryDirectory() as logs:
        runner = Runner(jobs=1, log_dir=logs, on_result=lambda r: statuses.append(r.status))
        try:
            runner.run([job])
        finally:
            runner.close()
    return statuses[0]


def through_ray(cases) -> dict[str, float]:
    """One slot on a local Ray instance: Ray's start; the executor (one actor holding one Runner)
    from its start to the first result (actor and worker start-up) and per case after it; and per
    case, a Ray task per case with a fresh Runner, one after another (the design it replaced)."""
    import ray

    jobs = _jobs(cases)
    t0 = time.perf_counter()
    ray.init(**local_init_kwargs(jobs=1))
    try:
        t1 = time.perf_counter()
        marks: list[float] = []
        statuses: list[str] = []

        def on_result(r) -> None:
            marks.append(time.perf_counter())
            statuses.append(r.status)

        RayExecutor(on_result=on_result, jobs=1).run(jobs)
        actor_first, actor_per_case = marks[0] - t1, (marks[-1] - marks[0]) / (len(jobs) - 1)
        fresh = ray.remote(_fresh_runner_case).options(max_retries=0, **task_resources("cpu"))
        marks.clear()
        for job in jobs:
            statuses.append(ray.get(fresh.remote(job)))
            marks.append(time.perf_counter())
        fresh_per_case = (marks[-1] - marks[0]) / (len(jobs) - 1)
    finally:
        ray.shutdown()
    if statuses != ["pass"] * 2 * len(jobs):
        raise RuntimeError(f"ray runs did not pass every trivial case: {sorted(set(statuses))}")
    return {
        "ray_init_s": t1 - t0,
        "ray_actor_first_result_s": actor_first,
        "ray_actor_ms_per_case": actor_per_case * 1e3,
        "ray_task_per_case_ms_per_case": fresh_per_case * 1e3,
        "ray_task_per_case_over_actor": fresh_per_case / actor_per_case,
    }


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
        ["python", "-m", "benchmarks.runner_overhead", "--cases", str(args.cases), "--ray-cases",
         str(args.ray_cases), "--json", str(args.json), "--note", "..."]
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--ray-cases", type=int, default=20, help="cases through Ray (0: skip Ray)")
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
    ray_cases = cases[: args.ray_cases]
    ray = through_ray(ray_cases) if len(ray_cases) > 1 else {}
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
        "ray_cases": len(ray_cases) if ray else 0,
        **ray,
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
