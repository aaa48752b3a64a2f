"""`try_lock`: an advisory file lock (flock) taken without waiting, which the OS drops when its
holder dies, `kill -9` included. The primitive under `core.lock.RunLock`, the store's creation
guard (`core.store`) and the explorer server's upload part files."""

from __future__ import annotations

import errno
from typing import IO, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no advisory locks
    fcntl = None  # type: ignore[assignment]

_HELD = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def try_lock(f: IO[Any]) -> bool:
    """Take an exclusive lock on the open file `f` without waiting: False when another open
    file holds one (another process, or another open of the file in this one). Raises OSError
    where the file system has no such locks."""
    if fcntl is None:  # pragma: no cover - not POSIX
        raise OSError(errno.ENOTSUP, "no advisory locks on this platform")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in _HELD:
            return False
        raise
    return True
