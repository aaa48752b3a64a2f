"""Run the `trainready` CLI in a fresh interpreter, as a user would, for end-to-end tests."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.support import paths

ROOT = paths.ROOT


def cli(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m trainready ARGS` in `cwd` (the repository by default, so workers can import
    the tests' planted-fault modules), output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "trainready", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# The signals a user's Ctrl-C, a supervisor's SIGTERM and a closed terminal send.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def default_signals() -> None:
    """A Popen `preexec_fn`: the child starts with the stop signals at their defaults, as at a
    terminal. An ignored signal is inherited (pytest started in the background has SIGINT
    ignored, under nohup SIGHUP too), and trainready keeps an ignored signal ignored, as the
    one who started it asked: a test that sends one would wait on a process that ignores it."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
