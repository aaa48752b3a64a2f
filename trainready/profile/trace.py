"""Load PyTorch profiler (Kineto) / Chrome-trace JSON into columnar numpy arrays.

One `Trace` per rank. Every complete slice (`ph` "X", or a matched "B"/"E" pair) is one row of
the event table: parallel numpy arrays of equal length, indexed by the same row number. Strings
(names, categories, shapes) are interned: a column holds an index into `Trace.strings`. Times are
integer **nanoseconds** exactly as written in the file (Kineto writes microseconds with three
decimals; they are parsed from the text, not through a float, which at 1.7e15 us only resolves
0.25 us).

Event table columns (all of length `len(trace)`):

    ts, dur          int64   start and duration, ns (`end` = ts + dur)
    name, cat        int32   index into `strings`
    kind             int8    one of the KIND_* codes (`schema`: what the event is, device-agnostic)
    track            int32   index into `tracks`: the hardware-unit row the event sits on
    correlation      int64   launch <-> device-activity id (args "correlation"), -1 if none
    external_id      int64   op <-> runtime/kernel id (args "External id"), -1 if none
    seq              int64   autograd sequence number (args "Sequence number"), -1 if none
    fwd_tid          int64   forward thread of a backward op (args "Fwd thread id"), -1 if none
    nbytes           int64   bytes moved by a memcpy/memset (args "bytes"), -1 if none
    python_id        int64   python_function id (args "Python id"), -1 if none
    python_parent    int64   python_function parent id (args "Python parent id"), -1 if none
    wait_stream      int64   stream a sync record waits on (args "wait_on_stream"), -1 if none
    wait_record_corr int64   correlation of the event-record call it waits on, -1 if none
                             (args "wait_on_cuda_event_record_corr_id")
    input_dims       int32   index into `strings` of the JSON text of args "Input Dims", -1 if none
    input_types      int32   same for args "Input type"
    concrete_inputs  int32   same for args "Concrete Inputs" (scalars of an op, e.g. alpha)
    grid, block      int32   same for a kernel's launch geometry, -1 if none

`tracks` is a list of `Track` (one per hardware unit: a CPU thread, a device stream, ...).
Device activity (kernels, memcpy, memset, sync) sits on the track of its (device, stream); sync
records of no stream (Event Sync, Context Sync) on a "device N sync" track; host events on the
track of their (pid, tid). Analyses split a stream track by kind (kernels / memory / sync rows).

Side tables: `flows` (flow arrows: ac2g launch -> kernel, fwdbwd forward -> backward, ...),
`memory` (allocator events "[memory]"), `instants` (other instant events), `meta` (the top-level
keys of the file other than traceEvents: deviceProperties, distributedInfo, ...).

Loading streams the (optionally gzipped: ISA-L's inflate when `isal` is installed, else zlib)
file in chunks, decodes ~256 KiB of events at a time (small batches stay in the CPU's cache) and
keeps only the columns, so peak memory is the columns plus one batch. A gzip bomb is refused once
the decompressed size passes `max_bytes` or, past the first MiB, the compression ratio passes
`max_ratio` (100: real Kineto traces gzip 8-30x, repeated valid events about 340x). Corrupt,
truncated or non-trace JSON raises `TraceError` with one line naming the file and the problem; so
does hostile JSON that decodes: nesting deeper than Python's recursion allows (or a kept value --
metadata, shapes -- deeper than `MAX_JSON_DEPTH`), a time that is not a finite number of us within
int64 ns, a negative duration, an event that ends past the int64 range.
"""

from __future__ import annotations

import codecs
import gc
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from trainready.core.config import ConfigError
from trainready.profile.columns import Builder, decode_batch, event_of, is_event
from trainready.profile.schema import (
    DEVICE_KINDS,
    KIND_CPU_OP,
    KIND_GPU_ANNOTATION,
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_NAMES,
    KIND_OTHER,
    KIND_PROFILER,
    KIND_PYTHON,
    KIND_RUNTIME,
    KIND_SYNC,
    KIND_USER_ANNOTATION,
    MAX_JSON_DEPTH,
    TRACK_CPU,
    TRACK_OTHER,
    TRACK_STREAM,
    Flows,
    Instants,
    Memory,
    Trace,
    Track,
    _int,
    json_depth,
)

# The columnar trace's own names (`schema`) are this module's too: every analysis imports them
# from here, with the loader.
__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_RATIO",
    "DEVICE_KINDS",
    "GiB",
    "KIND_CPU_OP",
    "KIND_GPU_ANNOTATION",
    "KIND_KERNEL",
    "KIND_MEMCPY",
    "KIND_MEMSET",
    "KIND_NAMES",
    "KIND_OTHER",
    "KIND_PROFILER",
    "KIND_PYTHON",
    "KIND_RUNTIME",
    "KIND_SYNC",
    "KIND_USER_ANNOTATION",
    "MAX_JSON_DEPTH",
    "TRACK_CPU",
    "TRACK_OTHER",
    "TRACK_STREAM",
    "Flows",
    "Instants",
    "Memory",
    "MiB",
    "Trace",
    "TraceError",
    "Track",
    "check_limits",
    "check_times",
    "json_depth",
    "load",
    "load_trace",
    "settled_ranks",
    "trace_files",
]

GiB = 1 << 30
MiB = 1 << 20

DEFAULT_MAX_BYTES = 16 * GiB  # decompressed JSON text
DEFAULT_MAX_RATIO = 100  # decompressed / compressed; real Kineto traces gzip 8-30x
_RATIO_GRACE_BYTES = 1 * MiB  # below this, any ratio is fine (a small file of whitespace)
_CHUNK_BYTES = 256 << 10
_LOOKAHEAD_CHARS = 64 << 10  # keep at least this much undecoded text buffered past a batch
_MAX_VALUE_CHARS = 64 * MiB  # one JSON value (event or metadata) larger than this is refused


class TraceError(ConfigError):
    """The file is not a readable trace: one line naming the file and what is wrong."""


_SEP = re.compile(rb"\s*([,\]])\s*")
_WS = re.compile(rb"\s*")

try:  # ISA-L's inflate reads the same gzip streams as zlib, several times faster
    from isal import isal_zlib as _inflate_lib
except ImportError:  # pragma: no cover - depends on the environment
    _inflate_lib = zlib
_INFLATE_ERRORS = (zlib.error, getattr(_inflate_lib, "error", zlib.error), EOFError)
_IN_BYTES = 256 << 10  # compressed bytes read at a time


def check_limits(
    path: Path, text_bytes: int, file_bytes: int, gz: bool, max_bytes: int, max_ratio: float
) -> None:
    """Refuse input that decompresses to more than `max_bytes`, or a gzip bomb."""
    if text_bytes > max_bytes:
        raise TraceError(f"{path}: refused: decompresses to more than {max_bytes >> 20} MiB")
    if gz and text_bytes > _RATIO_GRACE_BYTES and text_bytes / max(1, file_bytes) > max_ratio:
        raise TraceError(
            f"{path}: refused: compression ratio over {max_ratio:.0f}x "
            "(a gzip bomb, not a profiler trace)"
        )


class _Reader:
    """Streams the decompressed bytes (checked to be UTF-8) with bounds on total size and
    compression ratio. Gzip (one or more members, as `gzip` reads them) is inflated here in
    bounded steps, with ISA-L when `isal` is installed, else zlib; both check each member's
    CRC and length."""

    def __init__(self, path: Path, max_bytes: int, max_ratio: float):
        self.path = path
        self.max_bytes = max_bytes
        self.max_ratio = max_ratio
        raw: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._raw = raw
        self._gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        self._inflate = _inflate_lib.decompressobj(31) if self._gz else None
        self._pending = b""  # compressed bytes not yet given to the current member's inflater
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.total = 0
        self.eof = False

    def _inflated(self) -> bytes:
        """The next piece of decompressed data (at most _CHUNK_BYTES); b"" after the last member."""
        while True:
            if not self._pending:
                self._pending = self._raw.read(_IN_BYTES)
                if not self._pending:
                    if not self._inflate.eof:
                        raise EOFError("compressed file ended before the end-of-stream marker")
                    return b""
            if self._inflate.eof:  # another member follows (zero bytes may pad between them)
                self._pending = self._pending.lstrip(b"\0")
                if not self._pending:
                    continue
                self._inflate = _inflate_lib.decompressobj(31)
            out = self._inflate.decompress(self._pending, _CHUNK_BYTES)
            inflate = self._inflate
            self._pending = inflate.unused_data if inflate.eof else inflate.unconsumed_tail
            if out:
                return out

    def read(self) -> bytes:
        if self.eof:
            return b""
        try:
            data = self._inflated() if self._gz else self._raw.read(_CHUNK_BYTES)
        except _INFLATE_ERRORS as e:
            raise TraceError(f"{self.path}: corrupt or truncated gzip data ({e})") from None
        self.total += len(data)
        check_limits(self.path, self.total, self._raw.tell(), self._gz, self.max_bytes,
                     self.max_ratio)  # fmt: skip
        if not data:
            self.eof = True
        if not data.isascii() or self.eof or self._utf8.getstate()[0]:
            try:  # only checked: the text stays bytes (msgspec decodes UTF-8 itself)
                self._utf8.decode(data, final=self.eof)
            except UnicodeDecodeError as e:
                raise TraceError(f"{self.path}: not UTF-8 text ({e.reason})") from None
        return data

    def close(self) -> None:
        self._raw.close()


class _Text:
    """A sliding window over the decompressed bytes, refilled on demand: buf[pos:end] is what is
    left to read. One buffer serves the whole file (what is left moves to its front before a
    refill), so its memory is reused rather than allocated afresh for every refill."""

    def __init__(self, reader: _Reader):
        self.reader = reader
        self.buf = bytearray()
        self.pos = 0
        self.end = 0
        self.consumed = 0  # bytes dropped from the front of buf, for error offsets

    def ensure(self, size: int) -> None:
        """Have at least `size` bytes after pos buffered, unless the file ends first."""
        if self.end - self.pos >= size or self.reader.eof:
            return
        buf = self.buf
        left = self.end - self.pos
        if self.pos:
            buf[:left] = buf[self.pos : self.end]  # same length: no reallocation
            self.consumed += self.pos
            self.pos, self.end = 0, left
        while self.end < size and not self.reader.eof:
            chunk = self.reader.read()
            end = self.end + len(chunk)
            if end > len(buf):
                buf.extend(bytes(end - len(buf) + _CHUNK_BYTES))
            buf[self.end : end] = chunk
            self.end = end

    def grow(self) -> bool:
        """Buffer more text; False at the end of the file."""
        if self.reader.eof:
            return False
        before = self.end - self.pos
        if before > _MAX_VALUE_CHARS:
            self.too_big()
        self.ensure(before * 2 + _CHUNK_BYTES)
        return True

    def too_big(self) -> None:
        raise TraceError(
            f"{self.reader.path}: a single JSON value over {_MAX_VALUE_CHARS >> 20} MiB; "
            "not a profiler trace"
        )

    def skip_ws(self) -> None:
        while True:
            self.pos = _WS.match(self.buf, self.pos, self.end).end()
            if self.pos < self.end or not self.grow():
                return

    def peek(self) -> bytes:
        self.skip_ws()
        return bytes(self.buf[self.pos : min(self.pos + 1, self.end)])

    def expect(self, char: bytes, what: str) -> None:
        if self.peek() != char:
            found = self.buf[self.pos : min(self.pos + 20, self.end)]
            self.fail(f"expected {what}, found {found.decode(errors='replace') or 'end of file'!r}")
        self.pos += 1

    def fail(self, problem: str) -> None:
        raise TraceError(f"{self.reader.path}: {problem} at offset {self.consumed + self.pos}")


_VALUE_BYTES = 64 << 10  # first try at decoding one JSON value; doubled until it fits


def _value(text: _Text, scan: Any) -> Any:
    """Decode one JSON value at text.pos (a metadata value, or an odd array element).

    The json scanner works on text: a bounded piece of the window is decoded, doubled until
    the value fits in it (a value cut at the piece's end does not decode, or may be a number
    that continues)."""
    text.skip_ws()
    size = _VALUE_BYTES
    while True:
        text.ensure(size)
        more = text.end - text.pos > size or not text.reader.eof
        piece, _ = codecs.utf_8_decode(
            text.buf[text.pos : min(text.pos + size, text.end)], "strict", False
        )
        try:
            obj, end = scan(piece, 0)
        except StopIteration:
            if not more:
                text.fail("expected a JSON value")
        except json.JSONDecodeError as e:
            if not more:
                text.fail(f"truncated or corrupt JSON ({e.msg})")
        else:
            if end < len(piece) or not more:
                text.pos += end if piece.isascii() else len(piece[:end].encode())
                return obj
        if size > _MAX_VALUE_CHARS:
            text.too_big()
        size *= 2


_BATCH_BYTES = MiB // 4
_EVENT_END = re.compile(rb"}\s*,\s*(?={)")


def _array_batches(text: _Text, scan: Any) -> Iterator[list[Any]]:
    """The elements of the JSON array starting at text.pos, in batches.

    Most of the array is decoded by one msgspec call per ~256 KiB: the window is cut after the last
    `},` that is followed by `{`, and the slice decoded as an array. A cut inside a string
    leaves an unterminated string and a cut inside a nested value leaves brackets open, so a
    slice that decodes is exactly a run of whole elements; one that does not (or the array's
    tail) is decoded element by element, which also locates a real error precisely.
    """
    text.expect(b"[", "'['")
    if text.peek() == b"]":
        text.pos += 1
        return
    while True:
        text.ensure(_BATCH_BYTES + _LOOKAHEAD_CHARS)
        start = text.pos
        buf = text.buf
        limit = min(text.end, start + _BATCH_BYTES)
        cut = buf.rfind(b"}", start, limit)
        m = None
        for _ in range(64):  # the last '}' may close an args object: step back to an element's
            if cut <= start:
                break
            m = _EVENT_END.match(buf, cut, text.end)
            if m is not None:
                break
            cut = buf.rfind(b"}", start, cut)
        if m is not None:
            batch = decode_batch(b"".join((b"[", memoryview(buf)[start : cut + 1], b"]")))
            if batch is not None:
                text.pos = m.end()
                yield batch
                continue
        yield [_value(text, scan)]  # a plain JSON value: the builder checks and converts it
        text.ensure(64)
        text.skip_ws()
        sep = _SEP.match(text.buf, text.pos, text.end)
        if sep is None:
            text.fail("truncated or corrupt traceEvents array (expected ',' or ']')")
        text.pos = sep.end()
        if sep.group(1) == b"]":
            return


# -- entry points ----------------------------------------------------------------------------------
def _rank_of(meta: dict[str, Any], default: int) -> int:
    info = meta.get("distributedInfo")
    if isinstance(info, dict):
        rank = _int(info.get("rank", -1))
        if rank >= 0:
            return rank
    return default


def load_trace(
    path: str | Path,
    *,
    rank: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_ratio: float = DEFAULT_MAX_RATIO,
) -> Trace:
    """Load one trace file (`.json` or `.json.gz`, or gzip data under any name).

    `rank` defaults to distributedInfo.rank in the file, else 0. Raises TraceError for anything
    that is not a readable trace (missing file, corrupt or truncated JSON or gzip, a JSON document
    without trace events, a gzip bomb).
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    # The loader makes and drops many small objects (none in cycles): the cyclic garbage
    # collector's passes over them are ~5-10% of the time, so it waits until the load is done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load(path, rank, max_bytes, max_ratio)
    except RecursionError:  # json's scanner, msgspec, repr: each stops at the recursion limit
        raise TraceError(f"{path}: JSON nested too deeply; not a profiler trace") from None
    finally:
        if collecting:
            gc.enable()


def _load(path: Path, rank: int | None, max_bytes: int, max_ratio: float) -> Trace:
    reader = _Reader(path, max_bytes, max_ratio)
    text = _Text(reader)
    # Keep decimals exact (times are parsed later); NaN and Infinity, which are not JSON, as text.
    decoder = json.JSONDecoder(parse_float=str, parse_constant=str)
    scan = json.scanner.make_scanner(decoder)
    builder = Builder()
    meta: dict[str, Any] = {}
    found_events = False
    try:
        first = text.peek()
        if first == b"[":  # the Chrome trace "JSON array format": a bare list of events
            found_events = True
            for batch in _array_batches(text, scan):
                _add(builder, batch, text)
        elif first == b"{":
            text.pos += 1
            if text.peek() == b"}":
                text.pos += 1
            else:
                while True:
                    key = _value(text, scan)
                    if not isinstance(key, str):
                        text.fail("expected an object key")
                    text.expect(b":", "':'")
                    text.skip_ws()
                    if key == "traceEvents":
                        found_events = True
                        for batch in _array_batches(text, scan):
                            _add(builder, batch, text)
                    else:
                        meta[key] = _value(text, scan)
                        if json_depth(meta[key]) > MAX_JSON_DEPTH:
                            text.fail(f"metadata {key!r} nested over {MAX_JSON_DEPTH} levels deep")
                    sep = text.peek()
                    text.pos += 1
                    if sep == b"}":
                        break
                    if sep != b",":
                        text.pos -= 1
                        text.fail("truncated or corrupt JSON object (expected ',' or '}')")
        elif first == b"":
            text.fail("empty file; not a profiler trace")
        else:
            text.fail("not JSON (expected '{' or '[')")
        if text.peek() != b"":
            text.fail("unexpected data after the JSON document")
    finally:
        reader.close()
    if not found_events:
        raise TraceError(f"{path}: JSON without 'traceEvents'; not a profiler trace")
    try:  # begin/end pairs and instants are converted after the stream
        trace = builder.finish(path, meta, _rank_of(meta, 0) if rank is None else rank)
    except (KeyError, ValueError, TypeError) as e:
        raise TraceError(f"{path}: malformed trace event ({type(e).__name__}: {e})") from None
    check_times(path, trace)
    trace.text_bytes = reader.total
    return trace


_LATEST = np.iinfo(np.int64).max


def check_times(path: Path, trace: Trace) -> None:
    """Refuse what no profiler writes and every analysis would misstate: a negative duration
    (idle over 100 %), or an event whose end does not fit int64 ns."""
    bad = np.flatnonzero((trace.dur < 0) | (trace.ts > _LATEST - np.maximum(trace.dur, 0)))
    if bad.size:
        row = int(bad[0])
        what = "a negative duration" if trace.dur[row] < 0 else "an end past the int64 ns range"
        raise TraceError(
            f"{path}: event {trace.strings[trace.name[row]][:80]!r} at ts {trace.ts[row] / 1000:g} us "
            f"has {what} (dur {trace.dur[row] / 1000:g} us); not a valid trace"
        )


def _add(builder: Any, batch: list[Any], text: _Text) -> None:
    try:
        if len(batch) == 1 and not is_event(batch[0]):  # one plain JSON value
            batch = [event_of(batch[0])]
        builder.add_batch(batch)
    except (KeyError, ValueError, TypeError) as e:
        text.fail(f"malformed trace event ({type(e).__name__}: {e})")


# Files a capture directory holds beside its trace(s) (trainready.profile.capture's metadata).
_NOT_TRACES = frozenset({"metadata.json"})


def trace_files(path: str | Path) -> list[Path]:
    """The trace files a path names: the file itself, or every *.json / *.json.gz in a directory."""
    path = Path(path)
    if path.is_dir():
        files = sorted(
            p
            for p in path.iterdir()
            if p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name not in _NOT_TRACES
        )
        if not files:
            raise TraceError(f"{path}: directory holds no .json or .json.gz trace files")
        return files
    if not path.exists():
        raise TraceError(f"{path}: no such trace file or directory")
    return [path]


def load(path: str | Path, **limits: Any) -> list[Trace]:
    """Load a trace file or a directory of per-rank traces (`load_trace` each, in this process);
    sorted by rank (unique ranks). `analyze` summarises a directory's files side by side
    instead (`per_rank.summaries`)."""
    traces = [load_trace(p, **limits) for p in trace_files(path)]
    for t, rank in zip(traces, settled_ranks([t.rank for t in traces]), strict=True):
        t.rank = rank
    return sorted(traces, key=lambda t: t.rank)


def settled_ranks(ranks: list[int]) -> list[int]:
    """The ranks of traces loaded in file order: their own, or 0, 1, ... in that order when two
    share one (files without distributedInfo all say 0)."""
    return list(ranks) if len(set(ranks)) == len(ranks) else list(range(len(ranks)))
