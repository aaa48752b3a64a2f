"""The runner: cases in spawned worker processes, each under a wall-clock budget.

Workers are reused while healthy. A case that raises is `fail_run` (the worker survives); one that
passes its budget is `timeout` with the phase it was in (the worker's process group is killed and
replaced); one whose worker dies is `crash` with the signal and the tail of the worker's output. The
run always goes on, and every result reaches `on_result` the moment it exists.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from trainready.core.case import Case, Result
from trainready.core.concurrency import threads_per_worker, usable_cores
from trainready.core.schedule import next_startable
from trainready.core.worker import worker_main

WORKER_START_TIMEOUT_S = 300.0  # importing torch and a vendor stack can be slow on a cold disk
STDERR_TAIL_BYTES = 4000


class RunnerError(RuntimeError):
    """The runner itself cannot go on (e.g. a worker never starts)."""


@dataclass
class Job:
    """A case plus what the worker needs to run it."""

    case: Case
    suite_path: str
    budget_s: float
    context: dict[str, Any]  # CaseContext fields, JSON-able
    # A case that times something (or starts processes on every core) runs with no other case
    # beside it; a correctness case may share the machine (core/suite.py: KIND).
    alone: bool = True
    # The cores a timing case needs on a CPU run (its suite's CPU_CORES; it runs on that many
    # threads): correctness cases may use the rest. None: the whole machine (core/schedule.py).
    cores: int | None = None


@dataclass
class _Worker:
    slot: int
    process: Any
    conn: Connection
    log_path: Path
    ready: bool = False
    job: Job | None = None
    started: float = 0.0  # wall-clock epoch of the case start
    t0: float = 0.0  # monotonic start of the case
    phase: str = "setup"
    log_offset: int = 0
    messages: list[Any] = field(default_factory=list)


def signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "unknown"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def _tail(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            f.seek(max(offset, end - STDERR_TAIL_BYTES))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


class Runner:
    def __init__(
        self,
        jobs: int = 1,
        log_dir: str | Path = ".",
        mem_limit_mb: int | None = None,
        on_start: Callable[[Case], None] | None = None,
        on_result: Callable[[Result], None] | None = None,
        preload: list[str] | None = None,
        imports: list[str] | None = None,
    ):
        self.jobs = max(1, jobs)
        self.preload = list(preload or [])  # suite modules workers import before they are ready
        self.imports = list(imports or [])  # the run's --import modules, imported before those
        self.log_dir = Path(log_dir)
        self.mem_limit_mb = mem_limit_mb
        self.on_start = on_start or (lambda _c: None)
        self.on_result = on_result or (lambda _r: None)
        self._threads = threads_per_worker(self.jobs)
        self._cores = usable_cores()
        self._ctx = mp.get_context("spawn")
        self._workers: list[_Worker] = []
        self._spawned = 0

    # -- worker lifecycle ---------------------------------------------------------------------
    def _spawn(self, slot: int) -> _Worker:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._spawned += 1
        log_path = self.log_dir / f"worker-{slot}-{self._spawned}.log"
        parent_conn, child_conn = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=worker_main,
            args=(child_conn, str(log_path), self.mem_limit_mb, self.preload, self.imports),
            name=f"trainready-worker-{slot}",
            daemon=True,
        )
        proc.start()
        child_conn.close()
        w = _Worker(slot=slot, process=proc, conn=parent_conn, log_path=log_path)
        w.started = time.monotonic()  # start-up clock until ready
        return w

    def _kill(self, w: _Worker) -> None:
        """Kill the worker and everything it started (it leads its own process group)."""
        pid = w.process.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, ValueError):
                w.process.kill()
        w.process.join(timeout=10)
        w.conn.close()

    def _replace(self, w: _Worker) -> None:
        self._kill(w)
        self._workers[w.slot] = self._spawn(w.slot)

    def close(self) -> None:
        """Stop idle workers (they exit between cases), then kill what is left of their groups:
        a worker that ignored the stop, and anything it started that outlived it."""
        try:
            for w in self._workers:
                if w.process.is_alive():
                    with contextlib.suppress(OSError, ValueError):
                        w.conn.send(("stop",))
            for w in self._workers:
                w.process.join(timeout=5)
        finally:
            self.kill_all()

    def kill_all(self) -> None:
        """Kill every worker and everything it started, now (shutdown: nothing is worth waiting
        for, finished results are stored)."""
        workers, self._workers = self._workers, []
        for w in workers:
            self._kill(w)

    # -- the loop -----------------------------------------------------------------------------
    def run(self, jobs: Iterable[Job]) -> None:
        pending = deque(jobs)
        if not pending:
            return
        if not self._workers:
            self._workers = [self._spawn(0)]  # more join when side-by-side cases need them
        try:
            while pending or any(w.job for w in self._workers):
                self._dispatch(pending)
                self._wait_and_handle()
        except BaseException:
            # Interrupted (a signal: core.shutdown) or broken: no worker may go on, nor anything
            # it started. Cases in flight are lost; finished ones are stored.
            self.kill_all()
            raise

    def _dispatch(self, pending: deque[Job]) -> None:
        """Start every case that may start now (`core/schedule.py`: a timing case with nothing
        beside it but correctness cases on the cores it leaves, in plan order), each on an idle
        worker; another worker is spawned (up to `jobs`) when none is idle."""
        while pending:
            running = [w.job for w in self._workers if w.job is not None]
            starting = sum(not w.ready for w in self._workers)
            i = next_startable(pending, running, starting, self._cores, self._threads)
            if i is None:
                return
            idle = next((w for w in self._workers if w.ready and w.job is None), None)
            if idle is None:
                self._grow(pending[i])
                return
            job = pending[i]
            del pending[i]
            self._start(idle, job)

    def _grow(self, job: Job) -> None:
        """One more worker, up to `jobs`, for a case that may run beside others (none is still
        starting): a case that needs the whole machine never pays for a second worker."""
        starting = any(not w.ready for w in self._workers)
        whole = job.alone and job.cores is None
        if not whole and not starting and len(self._workers) < self.jobs:
            self._workers.append(self._spawn(len(self._workers)))

    def _start(self, w: _Worker, job: Job) -> None:
        w.job, w.phase = job, "setup"
        w.started, w.t0 = time.time(), time.monotonic()
        w.log_offset = w.log_path.stat().st_size if w.log_path.exists() else 0
        self.on_start(job.case)
        # A correctness case gets its share of the cores, a timing case with CPU_CORES that many
        # (beside others or not, so its numbers mean the same); one alone keeps the default (all).
        threads = self._threads if not job.alone else None
        if job.alone and job.cores is not None:
            threads = min(job.cores, self._cores)
        context = job.context if threads is None else {**job.context, "cpu_threads": threads}
        w.conn.send(("run", job.case.to_json(), context, job.suite_path))

    def _deadline(self, w: _Worker) -> float:
        if w.job is not None:
            return w.t0 + w.job.budget_s
        if not w.ready:
            return w.started + WORKER_START_TIMEOUT_S
        return float("inf")

    def _wait_and_handle(self) -> None:
        now = time.monotonic()
        timeout = max(0.0, min(self._deadline(w) for w in self._workers) - now)
        handles: dict[Any, _Worker] = {}
        for w in self._workers:
            handles[w.conn] = w
            handles[w.process.sentinel] = w
        ready = wait(list(handles), timeout=None if timeout == float("inf") else timeout)
        for h in ready:
            w = handles[h]
            if self._workers[w.slot] is not w:
                continue  # replaced while handling an earlier handle
            self._drain(w)  # a dying worker may still have sent its result
            if h is not w.conn and self._workers[w.slot] is w:
                self._on_death(w)
        now = time.monotonic()
        for w in list(self._workers):
            if now >= self._deadline(w):
                self._on_deadline(w)

    def _drain(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                self._on_message(w, msg)
        except (EOFError, OSError):
            if w.process.is_alive():
                w.process.join(timeout=5)
            if self._workers[w.slot] is w:
                self._on_death(w)

    def _on_message(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "ready":
            w.ready = True
        elif kind == "phase":
            w.phase = msg[1]
        elif kind == "result" and w.job is not None:
            outcome, phase, duration = msg[1], msg[2], msg[3]
            job, w.job = w.job, None
            self._emit(
                job,
                outcome["status"],
                w,
                metrics=outcome["metrics"],
                diagnostics=outcome["diagnostics"],
                phase=None if outcome["status"] == "pass" else phase,
                duration=duration,
            )

    def _emit(
        self,
        job: Job,
        status: str,
        w: _Worker,
        *,
        metrics: dict[str, float] | None = None,
        diagnostics: dict[str, Any] | None = None,
        phase: str | None = None,
        duration: float | None = None,
    ) -> None:
        self.on_result(
            Result(
                case=job.case,
                status=status,
                metrics=metrics or {},
                diagnostics=diagnostics or {},
                phase=phase,
                started_at=w.started,
                duration_s=duration if duration is not None else time.monotonic() - w.t0,
            )
        )

    def _on_death(self, w: _Worker) -> None:
        w.process.join(timeout=5)
        how = signal_name(w.process.exitcode)
        tail = _tail(w.log_path, w.log_offset)
        if w.job is None:
            if not w.ready:
                raise RunnerError(f"worker failed to start ({how}): {tail[-1000:]}")
            self._replace(w)  # died between cases: nothing lost, start a fresh one
            return
        job = w.job
        w.job = None
        self._emit(
            job,
            "crash",
            w,
            diagnostics={"error": f"worker died: {how}", "signal": how, "stderr_tail": tail},
            phase=w.phase,
        )
        self._replace(w)

    def _on_deadline(self, w: _Worker) -> None:
        if w.job is None:
            self._kill(w)
            raise RunnerError(f"worker did not start within {WORKER_START_TIMEOUT_S:.0f} s")
        job = w.job
        w.job = None
        elapsed = time.monotonic() - w.t0
        self._emit(
            job,
            "timeout",
            w,
            diagnostics={
                "error": f"exceeded budget of {job.budget_s:g} s in phase {w.phase!r}",
                "budget_s": job.budget_s,
                "stderr_tail": _tail(w.log_path, w.log_offset)[-1500:],
            },
            phase=w.phase,
            duration=elapsed,
        )
        self._replace(w)
