"""How a run stops on a signal: SIGINT, SIGTERM and SIGHUP all become one exception, `Interrupted`.

The process running the runner raises it from the signal handler, as Python does for SIGINT, so
every signal unwinds the run through the same cleanup: the runner kills its workers' process
groups (and with them the training processes, compile workers and torchrun they started), the
results already committed stay, and the run's row records the interruption. Without this a
SIGTERM or SIGHUP would end the runner at once, leaving its workers (their own sessions, so the
terminal's signals never reach them) to finish their cases for nobody.

Only the first signal raises: a second Ctrl-C, or a supervisor repeating SIGTERM, must not cut
the cleanup short and orphan what it was about to kill. A signal whose handler was SIG_IGN (as
`nohup` sets SIGHUP) stays ignored.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal. A KeyboardInterrupt, so code that handles Ctrl-C handles every
    stopping signal, and `except Exception` never swallows it."""

    def __init__(self, signum: int, at: float | None = None):
        self.signum = signum
        self.at = time.time() if at is None else at
        self.summary: Any = None  # what the run had done (api.run attaches its RunSummary)
        super().__init__(self.signal_name)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by the signal: 128 + its number."""
        return 128 + self.signum

    def record(self, done: int, planned: int) -> dict[str, Any]:
        """What the run's row keeps: which signal, when, and how far the run had come."""
        return {"signal": self.signal_name, "at": self.at, "done": done, "planned": planned}


@contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Within the block, the first of SIGNALS raises Interrupted and later ones are ignored; the
    previous handlers come back after it. Outside the main thread (the only one Python delivers
    signals to) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if not stopping:
            stopping.append(signum)
            raise Interrupted(signum)

    previous = {
        sig: signal.signal(sig, handler)
        for sig in SIGNALS
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)
