"""Processes that never outlive the run they work for.

The runner kills a case worker's whole process group on a timeout and on shutdown, and the
children a worker starts stay in that group. This module covers the ways a process could still
be left behind:

- the runner dies without cleaning up (SIGKILL, OOM killer): a worker asks the kernel for SIGTERM
  when its parent dies (PR_SET_PDEATHSIG), and `guard_worker` makes SIGTERM or SIGHUP to a worker
  kill its whole group, itself included;
- a worker dies alone: each child it starts goes through `guarded_command`, a trampoline that asks
  for SIGKILL when its parent dies and then execs the command (the request survives exec), so
  it dies even where it left the group;
- shutdown began: `guarded_command` refuses to start anything once the worker's runner is gone
  (`RunnerGone`), so a worker still finishing a case never starts new work for a dead run.

PR_SET_PDEATHSIG is Linux's; elsewhere the process-group kill and the parent check remain.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PARENT_ENV = "TRAINREADY_PARENT_PID"

# Run as `python -c _TRAMPOLINE COMMAND...`: ask to be SIGKILLed when the parent dies, then become
# COMMAND. The parent's pid comes in PARENT_ENV so that a parent that died before the request took
# effect is noticed (the request only covers deaths after it).
_TRAMPOLINE = (
    "import ctypes, os, signal, sys\n"
    "if sys.platform.startswith('linux'):\n"
    f"    ctypes.CDLL(None).prctl({PR_SET_PDEATHSIG}, signal.SIGKILL)\n"
    f"if os.getppid() != int(os.environ.pop({PARENT_ENV!r})):\n"
    "    os._exit(1)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)

_runner_pid: int | None = None  # set in a case worker: the runner it works for


class RunnerGone(RuntimeError):
    """The run this worker works for has ended: nothing new may start."""


def die_with_parent(sig: int, parent_pid: int | None = None) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies. If the parent is already
    gone (not `parent_pid`, or adopted by init when it is not given), exit now: the request only
    covers deaths after it."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    orphaned = os.getppid() == 1 if parent_pid is None else os.getppid() != parent_pid
    if orphaned:
        os._exit(1)


def guard_worker() -> None:
    """In a case worker that leads its own process group (after `os.setsid()`): die with the
    runner, end the whole group on SIGTERM or SIGHUP, and remember the runner for
    `runner_gone`."""
    global _runner_pid
    parent = multiprocessing.parent_process()
    _runner_pid = parent.pid if parent is not None and parent.pid else os.getppid()
    leader = os.getpid()

    def end_group(signum: int, _frame: object) -> None:
        if os.getpid() == leader and os.getpgrp() == leader:
            os.killpg(leader, signal.SIGKILL)  # what the worker started, and the worker
        # A forked child inherited this handler: it ends alone, as it would have by default.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, end_group)
    die_with_parent(signal.SIGTERM, _runner_pid)


def runner_gone() -> bool:
    """True in a case worker whose runner has died (always False outside a worker)."""
    return _runner_pid is not None and os.getppid() != _runner_pid


def guarded_command(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """`argv` started so that it dies with this process, and the environment entries it needs:
    run `subprocess.Popen(cmd, env={..., **env})`. Raises RunnerGone instead when this worker's
    runner is gone."""
    if runner_gone():
        raise RunnerGone(f"not starting {' '.join(argv[:3])}…: the run was stopped")
    return [sys.executable, "-c", _TRAMPOLINE, *argv], {PARENT_ENV: str(os.getpid())}
