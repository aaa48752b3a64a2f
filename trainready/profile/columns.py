"""Decoded trace events -> the `Trace` columns, a batch at a time (the loader's inner half).

`trace.py` streams the file and cuts the traceEvents array into ~2 MiB slices of whole events;
each slice is decoded here by msgspec into `_Event` structs that hold only the fields the columns
use (the decoder skips every other key without building an object, and the structs are not
tracked by the garbage collector). Each column is then built per batch by one C-level pass
(`map` over an attrgetter, interning through a dict) and numpy, never with a Python loop per
event: that loop was most of the load time.

Times stay exact: floats reach us as their JSON text (`float_hook=str`), and `ns_array` turns
that text into int64 ns with numpy's string ufuncs (no float on the way).
"""

from __future__ import annotations

import json
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
from msgspec import UNSET, Raw, field

from trainready.profile.trace import (
    _KIND_OF_CAT,
    KIND_GPU_ANNOTATION,
    KIND_KERNEL,
    KIND_OTHER,
    KIND_SYNC,
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
)

_NO_RAW = Raw()


class _Args(msgspec.Struct, gc=False):
    """The args the columns keep; ids and counts as written, JSON-valued ones as raw text."""

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
    label: Any = field(default="", name="name")  # process_name / thread_name metadata
    # allocator events ("[memory]" instants)
    addr: Any = field(default=-1, name="Addr")
    mem_bytes: Any = field(default=0, name="Bytes")
    total_allocated: Any = field(default=-1, name="Total Allocated")
    total_reserved: Any = field(default=-1, name="Total Reserved")
    device_type: Any = field(default=-1, name="Device Type")
    device_id: Any = field(default=-1, name="Device Id")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    name: Any = ""
    cat: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = 0
    args: _Args | None = None
    id: Any = -1
    bp: Any = None


BATCH_DECODER = msgspec.json.Decoder(list[_Event], float_hook=str)
_RAW_LIST = msgspec.json.Decoder(list[Raw])
_ONE_EVENT = msgspec.json.Decoder(_Event, float_hook=str)
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)

INT_COLUMNS = ("correlation", "external_id", "seq", "fwd_tid", "nbytes", "python_id",
               "python_parent", "wait_stream", "wait_record_corr")  # fmt: skip
JSON_COLUMNS = ("input_dims", "input_types", "concrete_inputs", "grid", "block")
_FLOW_PHASES = frozenset("stf")
_GET = {f: attrgetter(f) for f in (*_Event.__struct_fields__, *_Args.__struct_fields__)}


def decode_batch(text: str) -> list[_Event] | None:
    """The events of a JSON array text, or None when it is not one (the caller then goes
    element by element, which also places an error). An event whose fields have unexpected
    types (e.g. args that is not an object) is decoded on its own, leniently."""
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


def event_of(obj: Any) -> _Event:
    """An event from a plain decoded JSON value (floats kept as text); args that are not an
    object are dropped, as a missing args would be."""
    if type(obj) is not dict:
        raise ValueError("a trace event that is not a JSON object")
    if "args" in obj and type(obj["args"]) is not dict:
        obj = {k: v for k, v in obj.items() if k != "args"}
    return _ONE_EVENT.decode(msgspec.json.encode(obj))


# -- exact times -----------------------------------------------------------------------------------
_MAX_WHOLE = (2**63 - 1) // 1000 - 1  # whole microseconds that still fit int64 as ns
# numpy >= 2 string ufuncs (C loops); without them times are converted one by one in Python.
_STRINGS = getattr(np, "strings", None)
if _STRINGS is not None and not all(
    hasattr(_STRINGS, f) for f in ("partition", "isdigit", "str_len", "ljust", "startswith")
):
    _STRINGS = None


def ns_array(raw: list[Any]) -> np.ndarray:
    """Kineto times (us: ints, or the exact decimal text of a float) -> int64 ns, rounded half
    up at the fourth decimal. Raises ValueError for anything that is not a number."""
    if not raw:
        return np.zeros(0, dtype=np.int64)
    try:
        if type(raw[0]) is int:  # whole microseconds (older Kineto)
            us = np.array(raw, dtype=np.int64)
            if np.abs(us).max() <= _MAX_WHOLE:
                return us * 1000
        if _STRINGS is None:
            raise ValueError("numpy without string ufuncs")
        text = np.array(raw, dtype="S")  # decimal text, as the decoder kept it
        whole, _, frac = _STRINGS.partition(text, b".")
        if text.ndim != 1 or not (_STRINGS.isdigit(frac) | (_STRINGS.str_len(frac) == 0)).all():
            raise ValueError("not plain decimals")  # e.g. an exponent
        us = whole.astype(np.int64)
        if np.abs(us).max() > _MAX_WHOLE:
            raise ValueError("out of range")
        frac4 = _STRINGS.ljust(frac.astype("S4"), 4, b"0").astype(np.int64)  # 4 decimals
        ns = np.abs(us) * 1000 + (frac4 + 5) // 10
        return np.where(_STRINGS.startswith(whole, b"-"), -ns, ns)
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
        self.flow_keys = _Ids(lambda key: len(self.flow_keys))  # (pid, tid) -> key
        self.cols = {c: _Column(np.int64) for c in ("ts", "dur", *INT_COLUMNS)}
        self.cols |= {c: _Column(np.int32) for c in ("name", "slot", *JSON_COLUMNS)}
        self.flows = {c: _Column(np.int64) for c in ("id", "cat", "phase", "ts", "key", "bind")}
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
        # Compact JSON, numbers as written (floats kept as text, as the rest of the loader does).
        value = json.loads(raw, parse_float=str)
        return self.intern(json.dumps(value, separators=(",", ":")))

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
        if KIND_KERNEL <= kind <= KIND_GPU_ANNOTATION:
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

    # -- batches -----------------------------------------------------------------------------------
    def add_batch(self, events: list[_Event]) -> None:
        phs = [e.ph for e in events]
        if phs.count("X") == len(phs):
            self._slices(events)
            return
        before = self.rows
        self._slices([e for e, p in zip(events, phs, strict=True) if p == "X"])
        rest = [i for i, p in enumerate(phs) if p != "X"]
        self._flows([events[i] for i in rest if phs[i] in _FLOW_PHASES])
        memory, other = [], []
        for k, i in enumerate(rest):
            e = events[i]
            if e.ph in _FLOW_PHASES:
                continue
            if e.ph in ("i", "I") and e.name == "[memory]":
                memory.append(e)
            else:
                other.append((before + i - k, e))  # X rows before it in the file
        self._memory(memory)
        for x_before, e in other:
            self._other(e, x_before)

    def _slices(self, xs: list[_Event]) -> None:
        n = len(xs)
        if not n:
            return
        cols = self.cols
        cols["ts"].add(ns_array(list(map(_GET["ts"], xs))))
        cols["dur"].add(ns_array(list(map(_GET["dur"], xs))))
        cols["name"].add(
            np.fromiter(map(self.names.__getitem__, map(_GET["name"], xs)), np.int32, n)
        )
        args = [_NO_ARGS if a is None else a for a in map(_GET["args"], xs)]
        keys = zip(map(_GET["cat"], xs), map(_GET["pid"], xs), map(_GET["tid"], xs),
                   map(_GET["stream"], args), map(_GET["device"], args), strict=False)  # fmt: skip
        cols["slot"].add(np.fromiter(map(self.slot_ids.__getitem__, keys), np.int32, n))
        # One C-level pass per column (no Python frame per event); columns a batch never sets
        # (most of them: each kind of event has its own few args) cost one count.
        for c in INT_COLUMNS:
            values = list(map(_GET[c], args))
            cols[c].add(n if values.count(-1) == n else int_array(values))
        json_id = self.json_ids.__getitem__
        for c in JSON_COLUMNS:
            raws = list(map(_GET[c], args))
            if raws.count(_NO_RAW) == n:
                cols[c].add(n)
            else:
                cols[c].add(np.fromiter(map(json_id, map(bytes, raws)), np.int32, n))
        self.rows += n

    def _flows(self, fs: list[_Event]) -> None:
        if not fs:
            return
        f = self.flows
        f["id"].add(int_array([e.id for e in fs]))
        f["cat"].add(np.fromiter(map(self.names.__getitem__, [e.cat for e in fs]), np.int64))
        f["phase"].add(np.array([ord(e.ph) for e in fs], np.int64))
        f["ts"].add(ns_array([0 if e.ts is None else e.ts for e in fs]))
        keys = zip([e.pid for e in fs], [e.tid for e in fs], strict=True)
        f["key"].add(np.fromiter(map(self.flow_keys.__getitem__, keys), np.int64))
        f["bind"].add(np.array([e.bp == "e" for e in fs], np.int64))

    def _memory(self, ms: list[_Event]) -> None:
        if not ms:
            return
        m = self.memory
        args = [_NO_ARGS if e.args is None else e.args for e in ms]
        m["ts"].add(ns_array([0 if e.ts is None else e.ts for e in ms]))
        for col, attr in (("addr", "addr"), ("nbytes", "mem_bytes"), ("alloc", "total_allocated"),
                          ("reserved", "total_reserved"), ("dt", "device_type"),
                          ("di", "device_id")):  # fmt: skip
            m[col].add(int_array([getattr(a, attr) for a in args]))
        m["track"].add(np.array([self.host_track(e.pid, e.tid) for e in ms], np.int64))

    def _other(self, ev: _Event, x_before: int) -> None:
        ph = ev.ph
        if ph in ("i", "I"):
            i = self.instants
            i["ts"].append(0 if ev.ts is None else ev.ts)
            i["name"].append(self.names[ev.name])
            i["track"].append(self.host_track(ev.pid, ev.tid))
        elif ph == "M":
            label = str((ev.args or _NO_ARGS).label)
            if ev.name == "process_name":
                self.process_names[ev.pid] = label
            elif ev.name == "thread_name":
                self.thread_names[(ev.pid, ev.tid)] = label
        elif ph == "B":
            self.open_slices.setdefault((ev.pid, ev.tid), []).append(ev)
        elif ph == "E":
            stack = self.open_slices.get((ev.pid, ev.tid))
            if stack:
                self.closed.append((x_before, _close(stack.pop(), ev)))
            else:
                self.skipped["E"] = self.skipped.get("E", 0) + 1
        else:
            key = str(ph)
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
        slots = np.array(self.slots or [(0, 0, 0)], dtype=np.int64)[cols.pop("slot")]
        kind = slots[:, 1].astype(np.int8)
        self._mtia_syncs(kind, slots[:, 0], cols["name"])
        f = {c: col.array() for c, col in self.flows.items()}
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


def _close(begin: _Event, end: _Event) -> _Event:
    """A B/E pair as one complete slice: the end's args over the begin's."""
    args = begin.args or _NO_ARGS
    if end.args is not None:
        changed = {
            f: v
            for f in _Args.__struct_fields__
            if (v := getattr(end.args, f)) is not getattr(_NO_ARGS, f) and v != getattr(_NO_ARGS, f)
        }
        args = msgspec.structs.replace(args, **changed)
    dur_ns = max(0, _ns(end.ts) - _ns(begin.ts))
    dur = f"{dur_ns // 1000}.{dur_ns % 1000:03d}"
    return msgspec.structs.replace(begin, ph="X", dur=dur, args=args)
