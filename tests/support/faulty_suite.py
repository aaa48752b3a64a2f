"""A suite of real faulty cases for the runner's isolation tests (imported by dotted path)."""

from __future__ import annotations

import ctypes
import os
import sys
import time

from trainready.core.case import Case, Outcome
from trainready.core.context import Unsupported

NAME = "faulty"
DEFAULT_DTYPE = None
DEFAULT_BUDGET_S = 30.0

KINDS = (
    "ok",
    "raises",
    "abort",
    "segfault",
    "hang",
    "hang_in_compile",
    "alloc",
    "unsupported",
    "ok_after",
)

# Written to stderr just before the abort: a crash's stderr tail must hold the worker's last words.
ABORT_MARKER = "faulty_suite: last words before os.abort()"


def cases(cfg) -> list[Case]:
    names = cfg.options.get("kinds", KINDS)
    sleep_s = cfg.options.get("sleep_s", 0.0)
    return [
        Case(NAME, f"{i:02d}-{k}", {"kind": k, "sleep_s": sleep_s}) for i, k in enumerate(names)
    ]


def execute(case: Case, ctx) -> Outcome:
    kind = case.params["kind"]
    time.sleep(case.params.get("sleep_s", 0.0))
    if kind in ("ok", "ok_after"):
        return Outcome("pass", metrics={"pid": float(os.getpid()), "value": 42.0})
    if kind == "raises":
        raise ValueError("planted failure")
    if kind == "abort":
        print(ABORT_MARKER, file=sys.stderr, flush=True)
        os.abort()
    if kind == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if kind == "hang":
        with ctx.phase("run"):
            time.sleep(3600)
    if kind == "hang_in_compile":
        with ctx.phase("compile"):
            time.sleep(3600)
    if kind == "alloc":
        chunks = []
        while True:  # grows until the worker's memory limit stops it
            chunks.append(bytearray(64 * 2**20))
    if kind == "kill_parent":
        _kill_parent()
        time.sleep(60)
    if kind == "unsupported":
        raise Unsupported("this backend has no such thing")
    raise AssertionError(f"unknown kind {kind}")


def _kill_parent() -> None:
    """Kill the process that runs this case's worker (under Ray: the Ray worker itself)."""
    os.kill(os.getppid(), 9)
