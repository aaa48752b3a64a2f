"""Fresh training processes without importing torch again for each: a zygote forks them.

A train scenario runs in a process of its own, so that its compile caches, in memory and on
disk, are its own. It need not pay `import torch` again: 2.2 s of the 3.5-4.4 s each of a quick
case's eight processes spends beside its first step (measured 2026-12-02 on 2 cores). The zygote,
started once per train case, imports torch and `trainready.suites.train.loop` and runs nothing of them --
no dynamo, no inductor, no device runtime, no `--import` module -- then forks one child per
scenario. The child takes the scenario's whole environment (compile cache directories, the run's
`--import` modules) before anything reads it, writes to the scenario's log, dies with the zygote
(which dies with its worker: `core/procs.guarded_command`), and runs `trainready.suites.train.loop.main`
as `python -m trainready.suites.train.loop` would.

Used only where forking after `import torch` is known safe (`usable`): the CPU and CUDA, whose
runtimes importing torch does not start (a child that starts CUDA after the fork is fine), and
no device backend that torch autoloads at import (its runtime could start in the zygote). Every
other case keeps a fresh interpreter per scenario (`processes.run_single`).

Protocol, one JSON object per line: the worker writes {"argv", "env", "log"}; the zygote answers
{"pid"} once the child runs and {"rc"} when it ends (negative: the signal that ended it).

    forking(device)  -> context: a zygote for the block where `usable(device)`; `current()` in it
    Zygote.run(argv, env, log, timeout_s) -> the child's exit code (TimeoutExpired: killed)
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import entry_points

from trainready.core.procs import die_with_parent, guarded_command

FORK_SAFE_DEVICE_TYPES = ("cpu", "cuda")
START_TIMEOUT_S = 120.0  # the zygote's own start: importing torch


class ZygoteLost(RuntimeError):
    """The zygote exited or stopped answering: the scenario's process is lost with it."""


def usable(device: str) -> bool:
    """Whether scenarios on `device` may run as forks of a zygote (see the module docstring)."""
    if not hasattr(os, "fork") or device.split(":", 1)[0] not in FORK_SAFE_DEVICE_TYPES:
        return False
    return not list(entry_points(group="torch.backends"))


class Zygote:
    """The worker's side: starts the zygote, asks it for one child at a time."""

    def __init__(self) -> None:
        cmd, guard_env = guarded_command([sys.executable, "-m", __name__])
        self._proc = subprocess.Popen(
            cmd, env={**os.environ, **guard_env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._buffer = b""
        try:
            if self._read(time.monotonic() + START_TIMEOUT_S) != {"ready": True}:
                raise ZygoteLost("the zygote did not start")
        except (ZygoteLost, subprocess.TimeoutExpired) as e:
            self._proc.kill()
            self._proc.wait()
            raise ZygoteLost(f"the zygote did not start: {e}") from e

    def run(self, argv: list[str], env: dict[str, str], log: str, timeout_s: float) -> int:
        """`python -m trainready.suites.train.loop ARGV` in a fork with exactly `env` as its environment
        and its output in `log`: the exit code. TimeoutExpired once `timeout_s` passed (the
        child is killed first)."""
        deadline = time.monotonic() + timeout_s
        request = {"argv": argv, "env": env, "log": log}
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        except OSError as e:
            raise ZygoteLost(f"the zygote is gone: {e}") from e
        pid = None
        try:
            pid = self._read(deadline)["pid"]
            return self._read(deadline)["rc"]
        except subprocess.TimeoutExpired:
            if pid is None:  # the fork's pid came late (a loaded host): kill it all the same
                pid = self._read(time.monotonic() + 30.0)["pid"]
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._read(time.monotonic() + 30.0)  # its exit, reaped by the zygote
            raise

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _read(self, deadline: float) -> dict:
        """The zygote's next line (TimeoutExpired at `deadline`, ZygoteLost at its end)."""
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("trainready zygote", 0)
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise ZygoteLost(f"the zygote exited ({self._proc.wait()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)


_current: Zygote | None = None


def current() -> Zygote | None:
    """The zygote of the block `forking` opened, if any."""
    return _current


@contextlib.contextmanager
def forking(device: str) -> Iterator[None]:
    """A zygote for the scenarios run in this block, where `usable(device)` (and where it
    starts: if not, every scenario gets a fresh interpreter as before)."""
    global _current
    zygote = None
    if usable(device):
        with contextlib.suppress(ZygoteLost, OSError):
            zygote = Zygote()
    _current = zygote
    try:
        yield
    finally:
        _current = None
        if zygote is not None:
            zygote.close()


def forget(zygote: Zygote) -> None:
    """Stop using a zygote that was lost (the block's later scenarios start fresh interpreters)."""
    global _current
    if _current is zygote:
        _current = None
    zygote.close()


# --- the zygote's side --------------------------------------------------------------------------


def _child(request: dict, zygote_pid: int) -> None:
    """In the fork: become the scenario's process, run it, exit with its code."""
    code = 1
    try:
        die_with_parent(signal.SIGKILL, zygote_pid)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from the scenario's TMPDIR (its compile caches)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        from trainready.suites.train.loop import main

        code = main(request["argv"])
    except BaseException:  # noqa: BLE001 - the log gets it, the exit code says it
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    import torch  # noqa: F401 - what every child shares

    import trainready.suites.train.loop  # noqa: F401

    out = sys.stdout.buffer

    def say(obj: dict) -> None:
        out.write((json.dumps(obj) + "\n").encode())
        out.flush()

    say({"ready": True})
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request, os.getppid())
        say({"pid": pid})
        _, status = os.waitpid(pid, 0)
        say({"rc": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
