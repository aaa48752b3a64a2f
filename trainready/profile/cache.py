"""A cache of parsed traces: reopening a trace reads its columns back instead of parsing JSON.

One `.npz` per trace in a cache directory (default `~/.cache/trainready/traces`, or
`$TRAINREADY_CACHE_DIR`; set it to `off` to disable), named by a hash of the trace's resolved path,
size and modification time and of `FORMAT` (bumped whenever the loader's output changes), so an
edited, replaced or re-parsed file never hits a stale entry. Arrays only (strings as one text
with offsets; tracks, metadata as JSON): read with `allow_pickle=False`, never unpickled.

Safety: an entry records the size of the JSON text it came from, and a hit re-applies the
loader's limits (`max_bytes`, gzip ratio) and time checks to it, so a cache never admits what
parsing would refuse. A missing, unreadable, corrupt or mismatched entry is a miss (and a corrupt one is
removed); failing to write one (read-only home, full disk) only costs the next open a parse.
Entries are written to a temporary name and renamed into place, and the directory is kept under
`max_bytes` by removing the least recently used entries.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

try:  # CPython's own SHA-256: importing hashlib loads OpenSSL (2 ms of a small trace's analyze)
    from _sha256 import sha256  # Python <= 3.11
except ImportError:  # pragma: no cover - depends on the Python
    try:
        from _sha2 import sha256  # Python >= 3.12
    except ImportError:
        from hashlib import sha256

from trainready.profile.trace import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_RATIO,
    Flows,
    GiB,
    Instants,
    Memory,
    Trace,
    Track,
    check_limits,
    check_times,
    load_trace,
)

FORMAT = 2  # bump when the loader's columns or this layout change (2: hostile-input checks)
DEFAULT_MAX_CACHE_BYTES = 4 * GiB
ENV = "TRAINREADY_CACHE_DIR"
_COLUMNS = ("ts", "dur", "name", "cat", "kind", "track", "correlation", "external_id", "seq",
            "fwd_tid", "nbytes", "python_id", "python_parent", "wait_stream", "wait_record_corr",
            "input_dims", "input_types", "concrete_inputs", "grid", "block")  # fmt: skip
_SIDE = {"flows": Flows, "memory": Memory, "instants": Instants}


def default_dir() -> Path | None:
    """The cache directory: $TRAINREADY_CACHE_DIR ('off' or empty: no cache), else the user's."""
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "trainready" / "traces"


class TraceCache:
    """Parsed traces kept on disk beside nothing: in one directory, bounded in size."""

    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_CACHE_BYTES):
        self.directory = Path(directory)
        self.max_bytes = max_bytes

    def entry(self, path: Path) -> Path:
        st = path.stat()
        key = f"{FORMAT}\0{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}"
        return self.directory / (sha256(key.encode()).hexdigest()[:32] + ".npz")

    def load(
        self,
        path: str | Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_ratio: float = DEFAULT_MAX_RATIO,
    ) -> Trace:
        """The trace at `path`, from the cache when it holds the file as it is now; else parsed
        (`load_trace`, which raises TraceError for bad input) and stored."""
        path = Path(path)
        try:
            entry = self.entry(path)
        except OSError:
            return load_trace(path, max_bytes=max_bytes, max_ratio=max_ratio)  # names the error
        trace = self._read(entry, path)
        if trace is not None:
            with path.open("rb") as f:
                gz = f.read(2) == b"\x1f\x8b"
            check_limits(path, trace.text_bytes, path.stat().st_size, gz, max_bytes, max_ratio)
            check_times(path, trace)
            return trace
        trace = load_trace(path, max_bytes=max_bytes, max_ratio=max_ratio)
        self._write(entry, trace)
        return trace

    def _read(self, entry: Path, path: Path) -> Trace | None:
        try:
            with np.load(entry, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            trace = from_arrays(arrays, str(path))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile):
            with contextlib.suppress(OSError):
                entry.unlink()  # corrupt or from another layout: parse again
            return None
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used: kept longest
        return trace

    def _write(self, entry: Path, trace: Trace) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".part-", suffix=".npz")
            try:
                with os.fdopen(fd, "wb") as f:
                    np.savez(f, **to_arrays(trace))
                os.replace(tmp, entry)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            self._trim()
        except OSError:
            pass  # no cache this time

    def _trim(self) -> None:
        """Remove the least recently used entries while the directory is over its bound."""
        entries = []
        for p in self.directory.glob("*.npz"):
            with contextlib.suppress(OSError):
                st = p.stat()
                entries.append((st.st_mtime_ns, st.st_size, p))
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                p.unlink()
                total -= size


def _text(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


def _json(array: np.ndarray) -> Any:
    return json.loads(array.tobytes().decode())


def to_arrays(trace: Trace) -> dict[str, np.ndarray]:
    """A trace as named arrays (no Python objects: loadable without pickle)."""
    out = {c: getattr(trace, c) for c in _COLUMNS}
    for side in _SIDE:
        for name, value in vars(getattr(trace, side)).items():
            out[f"{side}.{name}"] = value
    out["strings"] = np.frombuffer("".join(trace.strings).encode(), dtype=np.uint8)
    out["string_lengths"] = np.array([len(s) for s in trace.strings], dtype=np.int64)
    tracks = [[t.kind, t.pid, t.tid, t.device, t.stream, t.label] for t in trace.tracks]
    info = {"format": FORMAT, "rank": trace.rank, "skipped": trace.skipped,
            "text_bytes": trace.text_bytes, "tracks": tracks}  # fmt: skip
    out["info"] = _text(info)
    out["meta"] = _text(trace.meta)
    return out


def from_arrays(arrays: dict[str, np.ndarray], path: str) -> Trace:
    info = _json(arrays["info"])
    if info.get("format") != FORMAT:
        raise ValueError("cache entry of another format")
    text = arrays["strings"].tobytes().decode()
    ends = np.cumsum(arrays["string_lengths"]).tolist()
    strings = [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    side = {
        name: cls(**{f: arrays[f"{name}.{f}"] for f in cls.__dataclass_fields__})
        for name, cls in _SIDE.items()
    }
    trace = Trace(
        path=path,
        rank=int(info["rank"]),
        meta=_json(arrays["meta"]),
        strings=strings,
        tracks=[Track(*t) for t in info["tracks"]],
        skipped=dict(info["skipped"]),
        text_bytes=int(info["text_bytes"]),
        **{c: arrays[c] for c in _COLUMNS},
        **side,
    )
    n = len(trace)
    if any(arrays[c].shape != (n,) for c in _COLUMNS) or (
        n and int(trace.track.max()) >= len(trace.tracks)
    ):
        raise ValueError("inconsistent cache entry")
    return trace


def load_cached(path: str | Path, cache_dir: Path | None = None, **limits: Any) -> Trace:
    """`load_trace` through the cache in `cache_dir` (default: `default_dir()`; none: parse)."""
    directory = cache_dir if cache_dir is not None else default_dir()
    if directory is None:
        return load_trace(path, **limits)
    return TraceCache(directory).load(path, **limits)
