"""The worker process: runs one case at a time for the runner, in isolation from the parent.

A worker is started with the `spawn` method (a clean interpreter: no forked CUDA context), moves into
its own session so the runner can kill it together with any compile workers it spawned, sends its
stdout/stderr to a log file (the runner reads the tail when the worker dies; faulthandler puts the
Python stack of a fatal signal there), and then serves cases over a pipe until told to stop.
Messages to the parent:

    ("ready", pid)                       once, after start-up
    ("phase", name)                      whenever the case enters a phase (for timeout reports)
    ("result", outcome_dict, phase, s)   when a case ends, however it ended short of dying
"""

from __future__ import annotations

import faulthandler
import gc
import os
import resource
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from trainready.core.case import Case, Outcome
from trainready.core.concurrency import cpu_threads
from trainready.core.context import CaseContext, Unsupported, is_unsupported, prepare_artifacts
from trainready.core.errors import PROCESS_EXITS, error_head, root_cause
from trainready.core.procs import guard_worker


def redirect_output(log_path: str) -> None:
    """Send this process's stdout and stderr (file descriptors, so C code too) to a log file."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _virtual_size_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _limit_memory(headroom_mb: int) -> None:
    """Cap the address space at what the worker uses now plus `headroom_mb`.

    Relative to the current size because importing torch alone maps gigabytes of virtual memory.
    Only for hostile-case isolation on the CPU: accelerator runtimes map far more than they use.
    torch is imported first so that its libraries are not counted against the headroom.
    """
    import torch  # noqa: F401

    limit = _virtual_size_bytes() + headroom_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _traceback_tail(exc: BaseException, lines: int = 25) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.splitlines()[-lines:])


def _is_oom(exc: BaseException) -> bool:
    from trainready.device import is_oom

    return is_oom(exc)


def execute_case(suite: Any, case: Case, ctx: CaseContext) -> Outcome:
    """Run one case, turning every way it can end short of killing the process into an Outcome."""
    try:
        outcome = suite.execute(case, ctx)
        if not isinstance(outcome, Outcome):
            return Outcome(
                "fail_run",
                diagnostics={"error": f"suite returned {type(outcome).__name__}, not an Outcome"},
            )
        return outcome
    except Unsupported as e:
        return Outcome("unsupported", diagnostics={"reason": str(e)})
    except PROCESS_EXITS:
        raise
    except BaseException as e:  # noqa: BLE001 - every error is a finding about the case
        if is_unsupported(e):  # training needs what the backend lacks (autocast)
            return Outcome("unsupported", diagnostics={"reason": str(e)})
        status = "oom" if _is_oom(root_cause(e)) else "fail_run"
        return Outcome(
            status, diagnostics={"error": error_head(e), "traceback": _traceback_tail(e)}
        )


def _excuse_torch_limitation(case: Case, device: str, outcome: Outcome) -> Outcome:
    """`outcome`, or `unsupported` where a known bug of this torch version explains it
    (`trainready.device.compat.LIMITATIONS`): torch's fault is not charged to the device."""
    from trainready.device.compat import excuse

    status, diagnostics = excuse(case.id, device, outcome.status, outcome.diagnostics)
    if diagnostics is outcome.diagnostics:  # no entry explains it
        return outcome
    return Outcome(status, metrics=outcome.metrics, diagnostics=diagnostics)


FULL_COLLECT_EVERY = 20  # cases between collections of everything, frozen objects included


class CaseCollector:
    """Frees a case's reference cycles (models, graphs) before the next case, cheaply.

    A full collection traverses every object the worker holds -- torch, transformers and its
    modeling modules: ~0.3 s, a third of a tiny parity case. So what is alive after a collection
    is frozen (`gc.freeze`), and the next collection traverses only what was made since. Every
    `every` cases the frozen objects are collected too, so a cycle that died among them (a cache
    cleared later) is freed within that many cases rather than never.
    """

    def __init__(self, every: int = FULL_COLLECT_EVERY):
        self.every = every
        self.cases = 0

    def after_case(self) -> None:
        self.cases += 1
        if self.cases % self.every == 0:
            gc.unfreeze()
        gc.collect()
        gc.freeze()


def _preload(paths: list[str]) -> dict[str, Any]:
    """Import the run's suites before reporting ready: an import (torch, transformers…) can take
    seconds, and it must not count against the first case's budget."""
    from trainready.suites import load_suite

    return {path: load_suite(path) for path in paths}


def _import_modules(names: list[str]) -> str | None:
    """Import the run's --import modules (a backend for the device, kernels), first, and pass them
    on to the processes cases start (ranks, training processes); returns the error, one line
    naming the module, when one fails."""
    from trainready.core.imports import ImportFailed, export, import_modules

    export(names)
    try:
        import_modules(names)
    except ImportFailed as e:
        return str(e)
    return None


def worker_main(
    conn: Connection,
    log_path: str,
    mem_limit_mb: int | None,
    preload: list[str] | None = None,
    imports: list[str] | None = None,
) -> None:
    os.setsid()
    guard_worker()  # dies with the runner; SIGTERM/SIGHUP end the group (core.procs)
    redirect_output(log_path)
    # A fatal signal (segfault, abort, bus error) then leaves every thread's Python stack in the
    # log, whose tail the runner keeps as the crash's stderr_tail.
    faulthandler.enable(all_threads=True)
    # Before the memory cap, which is relative to the size then: a backend maps a lot.
    import_error = _import_modules(imports or [])
    if mem_limit_mb:
        _limit_memory(mem_limit_mb)
    try:
        suites: dict[str, Any] = _preload(preload or [])
    except Exception:  # noqa: BLE001 - the case that needs it reports the import error
        suites = {}
    conn.send(("ready", os.getpid()))
    collector = CaseCollector()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if msg[0] == "stop":
            return
        _, case_json, ctx_json, suite_path = msg
        case = Case.from_json(case_json)
        ctx = CaseContext(**ctx_json, _report_phase=lambda p: conn.send(("phase", p)))
        prepare_artifacts(ctx, case.id)
        t0 = time.perf_counter()
        try:
            if import_error is not None:  # no case may run without the run's modules
                from trainready.core.imports import ImportFailed

                raise ImportFailed(import_error)
            if suite_path not in suites:
                from trainready.suites import load_suite

                suites[suite_path] = load_suite(suite_path)
            with cpu_threads(ctx.cpu_threads):
                outcome = execute_case(suites[suite_path], case, ctx)
        except Exception as e:  # noqa: BLE001 - a suite that fails to import fails its cases
            outcome = Outcome("fail_run", diagnostics={"error": error_head(e)})
        outcome = _excuse_torch_limitation(case, ctx.device, outcome)
        duration = time.perf_counter() - t0
        sys.stdout.flush()
        sys.stderr.flush()
        # The case's garbage is freed before its result is sent, not after: the runner counts this
        # worker busy until then, so a timing case started on the result (`core/schedule.py`: one
        # that needs the whole machine waits for every running case) never runs, nor reads the
        # drift reference, beside a collection (up to ~0.3 s of a core).
        collector.after_case()
        conn.send(
            (
                "result",
                {
                    "status": outcome.status,
                    "metrics": outcome.metrics,
                    "diagnostics": outcome.diagnostics,
                },
                ctx.current_phase,
                duration,
            )
        )
