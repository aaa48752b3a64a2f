"""Advisory file locks (flock) that the OS drops when their holder dies, `kill -9` included.

`RunLock` is held by the process running a run of a store (`run`, `run --resume`): a second
process that would run the same run at once is refused with one line, instead of executing the
same cases beside it (measuring each other's contention, the last writer winning). The lock file
is `DIR/RUN_ID/.lock` and holds the holder's pid; it is left in place when released (removing it
would race with the next holder). `core.flock.try_lock` is the primitive, also used by the store's
creation guard and the explorer server for its upload part files.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

from trainready.core.flock import try_lock
from trainready.core.store import StoreError

LOCK_NAME = ".lock"


class RunInUse(StoreError):
    """Another live process holds the run."""


class RunLock:
    """Exclusive use of one run of one store, for as long as the `with` block lasts."""

    def __init__(self, store_dir: Path, run_id: str):
        self.run_id = run_id
        self.store_dir = Path(store_dir)
        self.path = self.store_dir / run_id / LOCK_NAME
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            f = open(self.path, "a+")  # noqa: SIM115 - kept open while the lock is held
        except OSError as e:
            raise StoreError(f"cannot lock run {self.run_id} in {self.store_dir}: {e}") from None
        try:
            held = try_lock(f)
        except OSError:  # a file system without locks: nothing to enforce with
            held = True
        if not held:
            f.seek(0)
            pid = f.read().strip()
            f.close()
            who = f" (pid {pid})" if pid.isdigit() else ""
            raise RunInUse(
                f"run {self.run_id} in {self.store_dir} is being run by another process{who}; "
                "wait for it to finish or stop it, then --resume"
            )
        with contextlib.suppress(OSError):  # the pid is for the message above only
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the only open file of the lock releases it
            self._file = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
