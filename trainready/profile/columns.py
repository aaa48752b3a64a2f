"""Decoded trace events -> the `Trace` columns, a batch at a time (the loader's inner half).

`trace.py` streams the file and cuts the traceEvents array into ~256 KiB slices of whole events;
each slice is decoded here by msgspec into one struct per event, of a type per phase (a tagged
union on "ph": a slice, a flow arrow, an instant...) holding only the fields the loader reads
from that phase (the decoder skips every other key without building an object, and the structs
are not tracked by the garbage collector). The columns are then built per batch with C-level
passes and numpy, never with a Python loop per event: `msgspec.structs.astuple` + `zip` turn
the structs into one tuple per field, and each distinct (name, category, thread, stream) of a
slice, or (phase, category, thread, binding) of a flow, is looked up once in a dict per event.

Times stay exact: they reach us as their JSON text (`msgspec.Raw`), and `ns_array` parses the
whole batch's texts with one numpy call (integers, and the decimals as integers behind a
leading 1: no float on the way).
"""

from __future__ import annotations

import json
from itertools import compress, repeat
from operator import is_not
from typing import Any, Union

import numpy as np

from trainready.core.config import ConfigError

try:
    import msgspec
    from msgspec import UNSET, Raw, field
except ModuleNotFoundError as e:  # e.g. a vendor's image: one line from analyze/explore, and
    # `run train --profile` records it as its summary's error; never a traceback
    raise ConfigError(
        "reading a profiler trace needs msgspec, which is not installed (pip install msgspec; "
        "where nothing can be fetched, carry its wheel: benchmarks/gpu_checks.sh --fetch-wheels)"
    ) from e

from trainready.profile.schema import (
    _KIND_OF_CAT,
    KIND_GPU_ANNOTATION,
    KIND_KERNEL,
    KIND_OTHER,
    KIND_SYNC,
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
    _ns,
    json_depth,
)

_NO_RAW = Raw()
_ZERO = Raw(b"0")


class _Args(msgspec.Struct, gc=False, frozen=True):
    """The args of a slice the columns keep; ids and counts as written, JSON-valued ones as raw
    text. The field order is the order `Builder` reads them in (`astuple`)."""

    correlation: Any = -1
    external_id: Any = field(default=-1, name="External id")
    seq: Any = field(default=-1, name="Sequence number")
    fwd_tid: Any = field(default=-1, name="Fwd thread id")
    nbytes: Any = field(default=-1, name="bytes")
    python_id: Any = field(default=-1, name="Python id")
    python_parent: Any = field(default=-1, name="Python parent id")
    wait_stream: Any = field(default=-1, name="wait_on_stream")
    wait_record_corr: Any = field(default=-1, name="wait_on_cuda_event_record_corr_id")
    input_dims: Raw = field(default=_NO_RAW, name="Input Dims")
    input_types: Raw = field(default=_NO_RAW, name="Input type")
    concrete_inputs: Raw = field(default=_NO_RAW, name="Concrete Inputs")
    grid: Raw = _NO_RAW
    block: Raw = _NO_RAW
    stream: Any = UNSET  # device rows: the stream / device of the row (default: tid / pid)
    device: Any = UNSET


class _MemoryArgs(msgspec.Struct, gc=False, frozen=True):
    """Args of an allocator event ("[memory]" instant)."""

    addr: Any = field(default=-1, name="Addr")
    mem_bytes: Any = field(default=0, name="Bytes")
    total_allocated: Any = field(default=-1, name="Total Allocated")
    total_reserved: Any = field(default=-1, name="Total Reserved")
    device_type: Any = field(default=-1, name="Device Type")
    device_id: Any = field(default=-1, name="Device Id")


class _MetaArgs(msgspec.Struct, gc=False, frozen=True):
    label: Any = field(default="", name="name")  # process_name / thread_name metadata


_NO_ARGS = _Args()
_NO_MEMORY_ARGS = _MemoryArgs()
_NO_META_ARGS = _MetaArgs()


# Events: one struct per phase ("ph", the tag msgspec picks the struct by), holding only the fields
# the loader reads from that phase, in the order `Builder` reads them (`astuple`). Args are None
# only where the file says "args": null.
class _Event(msgspec.Struct, gc=False, tag_field="ph"):
    @property
    def ph(self) -> Any:
        return self.__struct_config__.tag


class _Slice(_Event, tag="X"):
    name: Any = ""
    cat: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Raw = None  # times as their JSON text (exact; see ns_array)
    dur: Raw = _ZERO
    args: _Args | None = _NO_ARGS


class _Begin(_Event, tag="B"):
    name: Any = ""
    cat: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Raw = None
    args: _Args | None = _NO_ARGS


class _End(_Begin, tag="E"):
    pass


class _FlowStart(_Event, tag="s"):
    cat: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Raw = None
    id: Any = -1
    bp: Any = None


class _FlowStep(_FlowStart, tag="t"):
    pass


class _FlowEnd(_FlowStart, tag="f"):
    pass


class _Instant(_Event, tag="i"):
    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Raw = None
    args: _MemoryArgs | None = _NO_MEMORY_ARGS


class _GlobalInstant(_Instant, tag="I"):
    pass


class _Metadata(_Event, tag="M"):
    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    args: _MetaArgs | None = _NO_META_ARGS


class _Odd(msgspec.Struct, gc=False):
    """An event of another phase (counted as skipped), or of none."""

    ph: Any = None


# The other phases of the Chrome trace format: counted, not loaded.
_SKIPPED = tuple(type(f"_Phase_{ph}", (_Event,), {}, tag=ph) for ph in "CbneSTpFPNODVvRc()")
_EVENT_TYPES = (_Slice, _Begin, _End, _FlowStart, _FlowStep, _FlowEnd, _Instant, _GlobalInstant,
                _Metadata, *_SKIPPED)  # fmt: skip
_AnyEvent = Union[_EVENT_TYPES]  # noqa: UP007 - a runtime union of the tuple
# Per event type: 0 slice, 1 flow, 2 instant, 3 other (metadata, begin/end, skipped), 4 odd.
_GROUP = {t: 3 for t in _EVENT_TYPES} | {_Slice: 0, _FlowStart: 1, _FlowStep: 1, _FlowEnd: 1,
                                         _Instant: 2, _GlobalInstant: 2, _Odd: 4}  # fmt: skip
_PHASE_CODE = {_FlowStart: ord("s"), _FlowStep: ord("t"), _FlowEnd: ord("f")}
_SLICE_FIELDS = ("name", "cat", "pid", "tid", "ts", "dur", "args")
_FLOW_FIELDS = ("cat", "pid", "tid", "ts", "id", "bp")

BATCH_DECODER = msgspec.json.Decoder(list[_AnyEvent], float_hook=str)
_VALUE = msgspec.json.Decoder(float_hook=str)  # one time's text -> int, or str for a decimal
_RAW_LIST = msgspec.json.Decoder(list[Raw])
_ONE_EVENT = msgspec.json.Decoder(_AnyEvent, float_hook=str)
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)

INT_COLUMNS = ("correlation", "external_id", "seq", "fwd_tid", "nbytes", "python_id",
               "python_parent", "wait_stream", "wait_record_corr")  # fmt: skip
JSON_COLUMNS = ("input_dims", "input_types", "concrete_inputs", "grid", "block")
_astuple = msgspec.structs.astuple
_N_INT = len(INT_COLUMNS)
_N_KEPT = _N_INT + len(JSON_COLUMNS)
assert _Args.__struct_fields__ == (*INT_COLUMNS, *JSON_COLUMNS, "stream", "device")
assert _Slice.__struct_fields__ == _SLICE_FIELDS and _FlowStart.__struct_fields__ == _FLOW_FIELDS


def _fields(structs: list[Any] | tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The structs' fields as one tuple per field (one C-level pass over the structs)."""
    return list(zip(*map(_astuple, structs), strict=True))


def decode_batch(text: bytes) -> list[Any] | None:
    """The events of a JSON array text, or None when it is not one (the caller then goes
    element by element, which also places an error). An event whose fields have unexpected
    types (e.g. args that is not an object, a phase of no known kind) is decoded on its own,
    leniently."""
    try:
        return BATCH_DECODER.decode(text)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError:
        return None
    try:
        raws = _RAW_LIST.decode(text)
    except _DECODE_ERRORS:
        return None
    out = []
    for raw in raws:
        try:
            out.append(_ONE_EVENT.decode(raw))
        except msgspec.ValidationError:
            value = json.loads(bytes(raw), parse_float=str)
            if type(value) is not dict:
                return None  # not an event: the element-by-element path names it
            out.append(event_of(value))
    return out


def is_event(value: Any) -> bool:
    """Whether `value` is a decoded event (else a plain JSON value for `event_of`)."""
    return type(value) in _GROUP


def event_of(obj: Any) -> Any:
    """An event from a plain decoded JSON value (floats kept as text); args that are not an
    object are dropped, as a missing args would be."""
    if type(obj) is not dict:
        raise ValueError("a trace event that is not a JSON object")
    if "args" in obj and type(obj["args"]) is not dict:
        obj = {k: v for k, v in obj.items() if k != "args"}
    try:
        return _ONE_EVENT.decode(msgspec.json.encode(obj))
    except msgspec.ValidationError:  # a phase of no known kind, or none
        return _Odd(obj.get("ph"))


# -- JSON-valued args ------------------------------------------------------------------------------
_JSON_DECODER = json.JSONDecoder(parse_float=str)
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"))
_PLAIN_OUTSIDE = b"[],-0123456789 \t\r\n"  # outside strings: arrays of integers only
_WHITESPACE = b" \t\r\n"


def compact_json(raw: bytes) -> str:
    """A JSON value (valid: msgspec checked it) as compact text, floats as quoted strings of
    their exact text: `json.dumps(json.loads(raw, parse_float=str), separators=(",", ":"))`.

    Kineto's shapes, dtypes and launch geometry (arrays of integers and of plain strings) take
    a shortcut with the same result: dropping the whitespace between tokens. A value nested
    deeper than MAX_JSON_DEPTH is refused (ValueError): it is kept, and shown on request."""
    if raw.isascii() and b"\\" not in raw and b"\x7f" not in raw and b"-0" not in raw:
        parts = raw.split(b'"')  # even parts lie outside strings (no escaped quotes)
        outside = parts[0::2]
        if not b"".join(outside).translate(None, _PLAIN_OUTSIDE):
            _check_depth(_bracket_depth(b"".join(outside)))
            parts[0::2] = [p.translate(None, _WHITESPACE) for p in outside]
            return b'"'.join(parts).decode("ascii")
    value = _JSON_DECODER.decode(raw.decode())
    _check_depth(json_depth(value))
    return _JSON_ENCODER.encode(value)


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]")


def _bracket_depth(outside: bytes) -> int:
    """Nesting depth of the arrays in a JSON text with no strings or objects in it."""
    brackets = outside.translate(None, _NOT_BRACKETS)
    if len(brackets) <= 2 * MAX_JSON_DEPTH:  # too few brackets to nest any deeper
        return len(brackets) // 2
    steps = np.where(np.frombuffer(brackets, np.uint8) == ord("["), 1, -1)
    return int(np.cumsum(steps).max())


def _check_depth(depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"an argument nested over {MAX_JSON_DEPTH} levels deep")


# -- exact times -----------------------------------------------------------------------------------
_MAX_WHOLE = (2**63 - 1) // 1000 - 1  # whole microseconds that still fit int64 as ns
_STRING_UFUNCS = ("partition", "isdigit", "str_len", "ljust", "startswith")


def _string_ufuncs() -> Any:
    """numpy >= 2's string ufuncs (C loops), or None: then times are converted one by one in
    Python. Looked up on first use: `np.strings` is a lazy import that the common times never
    need (0.4 ms of every analyze)."""
    strings = getattr(np, "strings", None)
    return strings if all(hasattr(strings, f) for f in _STRING_UFUNCS) else None


_P10 = 10 ** np.arange(19, dtype=np.int64)
_DIGITS = b"0123456789"


def ns_array(raw: list[Any] | tuple[Any, ...]) -> np.ndarray:
    """Kineto times in us (their JSON text as `Raw`, or plain values: ints, decimal text) ->
    int64 ns, rounded half up at the fourth decimal. Raises ValueError for anything that is not
    a number."""
    if not raw:
        return np.zeros(0, dtype=np.int64)
    try:
        return _ns_plain(raw)
    except (ValueError, TypeError):
        pass
    values = [_VALUE.decode(v) if type(v) is Raw else v for v in raw]
    if type(values[0]) is int:  # whole microseconds
        try:
            us = np.array(values, dtype=np.int64)
            if us.ndim == 1 and np.abs(us).max() <= _MAX_WHOLE:
                return us * 1000
        except (ValueError, TypeError, OverflowError):
            pass
    return _ns_strings(values)


def _ns_plain(raw: list[Any] | tuple[Any, ...]) -> np.ndarray:
    """The common cases: all times are plain non-negative decimals ("123.456"), or all are
    non-negative integers (whole us, older Kineto).

    The texts are joined with spaces and numpy parses the lot in one C call. For decimals each
    '.' becomes " 1" first: whole microseconds, then the decimals behind a leading 1 (which
    keeps their count). Anything else (a sign, an exponent, a mix, a text that is not one
    number) raises ValueError or TypeError for the general path."""
    n = len(raw)
    text = b" ".join(raw)  # TypeError unless all are Raw / bytes
    shape = text.translate(None, _DIGITS)
    if shape == b" " * (n - 1):  # integers
        us = np.fromstring(text, dtype=np.int64, sep=" ")
        if us.shape != (n,) or us.max() > _MAX_WHOLE:
            raise ValueError("not plain integers")
        return us * 1000
    if shape != b". " * (n - 1) + b".":  # one dot in each, only digits
        raise ValueError("not plain decimals")
    parts = np.fromstring(text.replace(b".", b" 1"), dtype=np.int64, sep=" ")
    if parts.shape != (2 * n,):
        raise ValueError("not plain decimals")  # an empty whole part (".5")
    us, frac = parts[0::2], parts[1::2]
    # Overflowing texts saturate at the int64 maximum, which fails these bounds.
    if us.max() > _MAX_WHOLE or frac.max() >= _P10[18]:
        raise ValueError("out of range")
    places = np.searchsorted(_P10, frac, side="right") - 1  # decimals written
    frac4 = np.where(  # the first four decimals, as an integer 0..9999
        places <= 4,
        (frac - _P10[places]) * _P10[4 - np.minimum(places, 4)],
        frac // _P10[np.maximum(places - 4, 0)] - 10_000,
    )
    return us * 1000 + (frac4 + 5) // 10


_FEW_TIMES = 32  # fewer than this are converted one by one: quicker than numpy's string calls


def _ns_strings(raw: list[Any]) -> np.ndarray:
    """Signed decimals through numpy's string functions; a few (a trace's instants, whose times
    Kineto writes as quoted text) or anything odder one by one, to the same values."""
    if len(raw) < _FEW_TIMES:
        return _ns_each(raw)
    try:
        strings = _string_ufuncs()
        if strings is None:
            raise ValueError("numpy without string ufuncs")
        text = np.array(raw, dtype="S")  # decimal text, as the decoder kept it
        whole, _, frac = strings.partition(text, b".")
        if text.ndim != 1 or not (strings.isdigit(frac) | (strings.str_len(frac) == 0)).all():
            raise ValueError("not plain decimals")  # e.g. an exponent
        us = whole.astype(np.int64)
        if np.abs(us).max() > _MAX_WHOLE:
            raise ValueError("out of range")
        frac4 = strings.ljust(frac.astype("S4"), 4, b"0").astype(np.int64)  # 4 decimals
        ns = np.abs(us) * 1000 + (frac4 + 5) // 10
        return np.where(strings.startswith(whole, b"-"), -ns, ns)
    except (ValueError, TypeError, UnicodeEncodeError, OverflowError):
        return _ns_each(raw)  # rare: exponents, odd values; raises for what is not a time


def _ns_each(raw: list[Any]) -> np.ndarray:
    out = np.zeros(len(raw), dtype=np.int64)
    for i, value in enumerate(raw):
        ns = _ns(value if isinstance(value, (int, str)) else str(value))
        if abs(ns) > _MAX_WHOLE * 1000:
            raise ValueError(f"time out of range: {value!r}")
        out[i] = ns
    return out


def int_array(raw: list[Any]) -> np.ndarray:
    """Integer ids as written (ints, or occasionally strings) -> int64; -1 where not an int."""
    try:
        return np.array(raw, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        return np.array([_int(v) for v in raw], dtype=np.int64)


class _Ids(dict):
    """Value -> id, assigning the next id on a miss (`compute(key)` -> id)."""

    def __init__(self, compute: Any):
        super().__init__()
        self.compute = compute

    def __missing__(self, key: Any) -> int:
        value = self[key] = self.compute(key)
        return value


# Device categories whose events need args.stream: MTIA's command-processor events without one
# (e.g. `dma_request`) belong to no queue; they are left out, counted in `skipped`, as HTA
# drops them, rather than put on a made-up stream named after the thread id.
_STREAM_REQUIRED = frozenset({"mtia_ccp_events"})
_DROPPED = -2  # track of a dropped slice's slot
_DROPPED_KEY = "X without args.stream"


class _Column:
    """One column built in batches: int64 arrays, or just a count for an all-default batch."""

    def __init__(self, dtype: Any, default: int = -1):
        self.parts: list[np.ndarray | int] = []
        self.dtype, self.default = dtype, default

    def add(self, values: np.ndarray | int) -> None:
        self.parts.append(values)

    def array(self) -> np.ndarray:
        parts = [
            np.full(p, self.default, self.dtype) if isinstance(p, int) else p.astype(self.dtype)
            for p in self.parts
        ]
        return np.concatenate(parts) if parts else np.zeros(0, self.dtype)


class Builder:
    """Accumulates decoded events into columns without keeping the events."""

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.string_ids: dict[str, int] = {}
        self.names = _Ids(lambda v: self.intern(v if type(v) is str else str(v)))
        self.json_ids = _Ids(self._intern_json)  # raw JSON text -> id of its compact form
        self.json_ids[b""] = -1  # the arg is absent
        self.tracks: list[tuple] = []  # (kind, pid, tid, device, stream)
        self.track_ids: dict[tuple, int] = {}
        self.slots: list[tuple[int, int, int]] = []  # (cat id, kind, track)
        self.slot_ids = _Ids(self._slot)  # (cat, pid, tid, stream, device) -> slot
        # (name, cat, pid, tid, stream, device) -> row of self.kinds: (name id, slot)
        self.kinds: list[tuple[int, int]] = []
        self.kind_ids = _Ids(self._kind)
        self.flow_keys = _Ids(lambda key: len(self.flow_keys))  # (pid, tid) -> key
        # (phase, cat, pid, tid, bp) -> row of self.flow_kinds: (phase, cat id, key, bind)
        self.flow_kinds: list[tuple[int, int, int, int]] = []
        self.flow_kind_ids = _Ids(self._flow_kind)
        self.cols = {c: _Column(np.int64) for c in ("ts", "dur", *INT_COLUMNS)}
        self.cols |= {c: _Column(np.int32) for c in ("kind", *JSON_COLUMNS)}
        self.flows = {c: _Column(np.int64) for c in ("id", "kind", "ts")}
        self.memory = {c: _Column(np.int64) for c in
                       ("ts", "addr", "nbytes", "alloc", "reserved", "dt", "di", "track")}  # fmt: skip
        self.instants: dict[str, list[Any]] = {"ts": [], "name": [], "track": []}
        self.process_names: dict[Any, str] = {}
        self.thread_names: dict[tuple, str] = {}
        self.open_slices: dict[tuple, list[_Event]] = {}
        self.closed: list[tuple[int, _Event]] = []  # (X rows before it in the file, B/E slice)
        self.skipped: dict[str, int] = {}
        self.rows = 0  # X rows so far

    def intern(self, text: str) -> int:
        sid = self.string_ids.get(text)
        if sid is None:
            sid = self.string_ids[text] = len(self.strings)
            self.strings.append(text)
        return sid

    def _intern_json(self, raw: bytes) -> int:
        return self.intern(compact_json(raw))

    def host_track(self, pid: Any, tid: Any) -> int:
        key = (pid, tid)
        tr = self.track_ids.get(key)
        if tr is None:
            kind = TRACK_CPU if isinstance(pid, int) or str(pid).isdigit() else TRACK_OTHER
            tr = self.track_ids[key] = len(self.tracks)
            self.tracks.append((kind, pid, tid, -1, -1))
        return tr

    def _slot(self, key: tuple) -> int:
        """(category id, kind, track) of a slice: device rows sit on their (device, stream)."""
        cat_text, pid, tid, stream, device = key
        cat_text = cat_text if isinstance(cat_text, str) else ""
        kind = _KIND_OF_CAT.get(cat_text, KIND_OTHER)
        if stream is UNSET and cat_text in _STREAM_REQUIRED:
            track = _DROPPED  # no queue to put it on: left out, as HTA does
        elif KIND_KERNEL <= kind <= KIND_GPU_ANNOTATION:
            stream = _int(tid if stream is UNSET else stream)
            device = _int(pid if device is UNSET else device)
            tkey = (TRACK_STREAM, device, stream)
            track = self.track_ids.get(tkey)
            if track is None:
                track = self.track_ids[tkey] = len(self.tracks)
                self.tracks.append((TRACK_STREAM, pid, tid, device, stream))
        else:
            track = self.host_track(pid, tid)
        self.slots.append((self.intern(cat_text), kind, track))
        return len(self.slots) - 1

    def _kind(self, key: tuple) -> int:
        """(name, cat, pid, tid[, stream, device]) -> a new row of self.kinds."""
        slot = key[1:] if len(key) == 6 else (*key[1:], UNSET, UNSET)
        self.kinds.append((self.names[key[0]], self.slot_ids[slot]))
        return len(self.kinds) - 1

    def _flow_kind(self, key: tuple) -> int:
        phase, cat, pid, tid, bp = key
        self.flow_kinds.append((phase, self.names[cat], self.flow_keys[pid, tid], bp == "e"))
        return len(self.flow_kinds) - 1

    # -- batches -----------------------------------------------------------------------------------
    def add_batch(self, events: list[Any]) -> None:
        types = list(map(type, events))
        n = len(types)
        if types.count(_Slice) == n:
            self._slices(events)
            return
        group = np.fromiter(map(_GROUP.__getitem__, types), np.int8, n)
        is_slice = group == 0
        before = self.rows
        self._slices(list(compress(events, is_slice.tolist())))
        self._flows(list(compress(events, (group == 1).tolist())))
        rest = np.flatnonzero(group >= 2)
        if rest.size:  # instants, metadata, begin/end pairs, skipped phases: few
            x_before = before + np.cumsum(is_slice)[rest]  # X rows before each in the file
            memory = []
            for i, x in zip(rest.tolist(), x_before.tolist(), strict=True):
                e = events[i]
                if group[i] == 2 and e.name == "[memory]":
                    memory.append(e)
                else:
                    self._other(e, x)
            self._memory(memory)

    def _slices(self, xs: list[_Slice]) -> None:
        n = len(xs)
        if not n:
            return
        cols = self.cols
        name, cat, pid, tid, ts, dur, args = _fields(xs)
        try:  # both in one parse when both are plain decimals (or both integers)
            times = _ns_plain(ts + dur)
            cols["ts"].add(times[:n])
            cols["dur"].add(times[n:])
        except (ValueError, TypeError):
            cols["ts"].add(ns_array(ts))
            cols["dur"].add(ns_array(dur))
        if None in args:  # "args": null
            args = [_NO_ARGS if a is None else a for a in args]
        kept = _fields(args)
        stream, device = kept[_N_KEPT], kept[_N_KEPT + 1]
        if stream.count(UNSET) == n and device.count(UNSET) == n:  # host rows: a shorter key
            keys = zip(name, cat, pid, tid, strict=True)
        else:
            keys = zip(name, cat, pid, tid, stream, device, strict=True)
        cols["kind"].add(np.fromiter(map(self.kind_ids.__getitem__, keys), np.int32, n))
        # Columns a batch never sets (most of them: each kind of event has its own few args)
        # cost one count.
        for c, values in zip(INT_COLUMNS, kept, strict=False):
            cols[c].add(n if values.count(-1) == n else int_array(values))
        json_id = self.json_ids.__getitem__
        for c, raws in zip(JSON_COLUMNS, kept[_N_INT:], strict=False):
            absent = raws.count(_NO_RAW)
            if absent == n:
                cols[c].add(n)
            elif not absent:
                cols[c].add(np.fromiter(map(json_id, map(bytes, raws)), np.int32, n))
            else:  # look up only the values present (e.g. the kernels' launch geometry)
                present = np.fromiter(map(is_not, raws, repeat(_NO_RAW)), bool, n)
                ids = np.full(n, -1, np.int32)
                values = compress(raws, present.tolist())
                ids[present] = np.fromiter(map(json_id, map(bytes, values)), np.int32, n - absent)
                cols[c].add(ids)
        self.rows += n

    def _flows(self, fs: list[_FlowStart]) -> None:
        n = len(fs)
        if not n:
            return
        cat, pid, tid, ts, ids, bp = _fields(fs)
        f = self.flows
        f["id"].add(int_array(ids))
        f["ts"].add(ns_array([_ZERO if t is None else t for t in ts] if None in ts else ts))
        keys = zip(map(_PHASE_CODE.__getitem__, map(type, fs)), cat, pid, tid, bp, strict=True)
        f["kind"].add(np.fromiter(map(self.flow_kind_ids.__getitem__, keys), np.int64, n))

    def _memory(self, ms: list[_Instant]) -> None:
        if not ms:
            return
        m = self.memory
        args = [_NO_MEMORY_ARGS if e.args is None else e.args for e in ms]
        m["ts"].add(ns_array([_ZERO if e.ts is None else e.ts for e in ms]))
        for col, attr in (("addr", "addr"), ("nbytes", "mem_bytes"), ("alloc", "total_allocated"),
                          ("reserved", "total_reserved"), ("dt", "device_type"),
                          ("di", "device_id")):  # fmt: skip
            m[col].add(int_array([getattr(a, attr) for a in args]))
        m["track"].add(np.array([self.host_track(e.pid, e.tid) for e in ms], np.int64))

    def _other(self, ev: Any, x_before: int) -> None:
        kind = type(ev)
        if kind is _Instant or kind is _GlobalInstant:
            i = self.instants
            i["ts"].append(_ZERO if ev.ts is None else ev.ts)
            i["name"].append(self.names[ev.name])
            i["track"].append(self.host_track(ev.pid, ev.tid))
        elif kind is _Metadata:
            label = str((ev.args or _NO_META_ARGS).label)
            if ev.name == "process_name":
                self.process_names[ev.pid] = label
            elif ev.name == "thread_name":
                self.thread_names[(ev.pid, ev.tid)] = label
        elif kind is _Begin:
            self.open_slices.setdefault((ev.pid, ev.tid), []).append(ev)
        elif kind is _End:
            stack = self.open_slices.get((ev.pid, ev.tid))
            if stack:
                self.closed.append((x_before, _close(stack.pop(), ev)))
            else:
                self.skipped["E"] = self.skipped.get("E", 0) + 1
        else:
            key = str(ev.ph)
            self.skipped[key] = self.skipped.get(key, 0) + 1

    # -- the trace ---------------------------------------------------------------------------------
    def finish(self, path: str, meta: dict[str, Any], rank: int) -> Trace:
        x_rows = self.rows
        if self.closed:  # B/E slices go where their E was in the file, between X rows
            self._slices([e for _, e in self.closed])
        cols = {c: col.array() for c, col in self.cols.items()}
        if self.closed:
            key = np.r_[2 * np.arange(x_rows) + 1, 2 * np.array([x for x, _ in self.closed])]
            order = np.argsort(key, kind="stable")
            cols = {c: v[order] for c, v in cols.items()}
        kinds = np.array(self.kinds or [(0, 0)], dtype=np.int64)[cols.pop("kind")]
        cols["name"] = kinds[:, 0].astype(np.int32)
        slots = np.array(self.slots or [(0, 0, 0)], dtype=np.int64)[kinds[:, 1]]
        dropped = slots[:, 2] == _DROPPED
        if dropped.any():
            keep = ~dropped
            cols = {c: v[keep] for c, v in cols.items()}
            slots = slots[keep]
            self.skipped[_DROPPED_KEY] = int(dropped.sum())
        kind = slots[:, 1].astype(np.int8)
        self._mtia_syncs(kind, slots[:, 0], cols["name"])
        f = {c: col.array() for c, col in self.flows.items()}
        flow_kinds = np.array(self.flow_kinds or [(0, 0, 0, 0)], dtype=np.int64)[f.pop("kind")]
        f["phase"], f["cat"], f["key"], f["bind"] = flow_kinds.T
        m = {c: col.array() for c, col in self.memory.items()}
        ins = self.instants
        tracks = []
        for tkind, pid, tid, device, stream in self.tracks:
            label = self.thread_names.get((pid, tid), "")
            if tkind == TRACK_STREAM:
                label = label or self.process_names.get(pid, "")
            tracks.append(Track(tkind, pid, tid, device, stream, label))
        skipped = dict(self.skipped)
        unclosed = sum(len(s) for s in self.open_slices.values())
        if unclosed:
            skipped["B"] = unclosed
        return Trace(
            path=str(path),
            rank=rank,
            meta=meta,
            strings=self.strings,
            tracks=tracks,
            cat=slots[:, 0].astype(np.int32),
            kind=kind,
            track=slots[:, 2].astype(np.int32),
            flows=Flows(
                id=f["id"],
                cat=f["cat"].astype(np.int32),
                phase=f["phase"].astype(np.uint8),
                ts=f["ts"],
                track=self._flow_tracks()[f["key"]],
                bind_enclosing=f["bind"].astype(bool),
            ),
            memory=Memory(
                ts=m["ts"],
                addr=m["addr"],
                nbytes=m["nbytes"],
                total_allocated=m["alloc"],
                total_reserved=m["reserved"],
                device_type=m["dt"].astype(np.int8),
                device_id=m["di"].astype(np.int16),
                track=m["track"].astype(np.int32),
            ),
            instants=Instants(
                ts=ns_array(ins["ts"]),
                name=np.array(ins["name"], dtype=np.int32),
                track=np.array(ins["track"], dtype=np.int32),
            ),
            skipped=skipped,
            **cols,
        )

    def _mtia_syncs(self, kind: np.ndarray, cat: np.ndarray, name: np.ndarray) -> None:
        """MTIA's command processor recording / waiting on an event is a sync, not a kernel."""
        mtia = self.string_ids.get("mtia_ccp_events")
        if mtia is None:
            return
        events = [i for i, s in enumerate(self.strings) if s.startswith("event_")]
        kind[(cat == mtia) & (kind == KIND_KERNEL) & np.isin(name, events)] = KIND_SYNC

    def _flow_tracks(self) -> np.ndarray:
        """Flow (pid, tid) key -> track: a device row's stream track, else the host thread's."""
        streams = {(t[1], t[2]): i for i, t in enumerate(self.tracks) if t[0] == TRACK_STREAM}
        out = np.zeros(len(self.flow_keys), dtype=np.int64)
        for (pid, tid), k in list(self.flow_keys.items()):
            tr = streams.get((pid, tid))
            out[k] = self.host_track(pid, tid) if tr is None else tr
        return out


def _time(raw: Any) -> Any:
    return _VALUE.decode(raw) if type(raw) is Raw else raw


def _close(begin: _Begin, end: _End) -> _Slice:
    """A B/E pair as one complete slice: the end's args over the begin's."""
    args = begin.args or _NO_ARGS
    if end.args is not None:
        changed = {
            f: v
            for f in _Args.__struct_fields__
            if (v := getattr(end.args, f)) is not getattr(_NO_ARGS, f) and v != getattr(_NO_ARGS, f)
        }
        args = msgspec.structs.replace(args, **changed)
    dur_ns = max(0, _ns(_time(end.ts)) - _ns(_time(begin.ts)))
    dur = Raw(f"{dur_ns // 1000}.{dur_ns % 1000:03d}".encode())
    return _Slice(begin.name, begin.cat, begin.pid, begin.tid, begin.ts, dur, args)
