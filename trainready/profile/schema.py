"""The columnar trace: `Trace` (one rank's events as parallel numpy arrays, every column named in
`trainready.profile.trace`'s docstring), its side tables (`Flows`, `Memory`, `Instants`) and
`Track`s, the KIND_* and TRACK_* codes, and how a value of the file becomes a column's value
(`_ns`: microseconds as written -> exact int ns; `_int`: ids and counts, -1 when absent;
`json_depth` against MAX_JSON_DEPTH). The loader (`trace`) and the batch decoder it streams
through (`columns`) both build on it; every analysis reads it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_JSON_DEPTH = 64  # nesting of a JSON value the trace keeps (metadata, shapes); Kineto's: < 5

# -- event kinds -----------------------------------------------------------------------------------
KIND_OTHER = 0
KIND_CPU_OP = 1  # cat cpu_op / operator: an aten / user op on a host thread
KIND_USER_ANNOTATION = 2  # record_function ranges, ProfilerStep#N, Optimizer.step...
KIND_RUNTIME = 3  # host side of the device runtime / driver (cudaLaunchKernel, hipMemcpy...)
KIND_KERNEL = 4  # device compute or communication kernel
KIND_MEMCPY = 5  # device memory copy
KIND_MEMSET = 6  # device memory set
KIND_SYNC = 7  # device-side synchronisation record (cuda_sync: event/stream/device sync)
KIND_GPU_ANNOTATION = 8  # user annotation projected onto a device stream
KIND_PYTHON = 9  # python_function (with_stack=True)
KIND_PROFILER = 10  # the profiler's own span ("Trace" category)

KIND_NAMES = (
    "other",
    "cpu_op",
    "user_annotation",
    "runtime",
    "kernel",
    "memcpy",
    "memset",
    "sync",
    "gpu_annotation",
    "python",
    "profiler",
)
DEVICE_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_SYNC)

_KIND_OF_CAT = {
    "cpu_op": KIND_CPU_OP,
    "operator": KIND_CPU_OP,
    "user_annotation": KIND_USER_ANNOTATION,
    "cuda_runtime": KIND_RUNTIME,
    "cuda_driver": KIND_RUNTIME,
    "runtime": KIND_RUNTIME,
    "xpu_runtime": KIND_RUNTIME,
    "xpu_driver": KIND_RUNTIME,
    "mtia_runtime": KIND_RUNTIME,
    "privateuse1_runtime": KIND_RUNTIME,
    "privateuse1_driver": KIND_RUNTIME,
    "kernel": KIND_KERNEL,
    "Kernel": KIND_KERNEL,
    "mtia_ccp_events": KIND_KERNEL,
    "gpu_memcpy": KIND_MEMCPY,
    "Memcpy": KIND_MEMCPY,
    "gpu_memset": KIND_MEMSET,
    "Memset": KIND_MEMSET,
    "cuda_sync": KIND_SYNC,
    "gpu_user_annotation": KIND_GPU_ANNOTATION,
    "python_function": KIND_PYTHON,
    "Trace": KIND_PROFILER,
}

# -- track kinds -----------------------------------------------------------------------------------
TRACK_CPU = "cpu"  # a host thread
TRACK_STREAM = "stream"  # a device stream (kernels, memcpy, memset, sync records)
TRACK_OTHER = "other"  # anything else (the profiler's own spans, counters)


@dataclass(frozen=True)
class Track:
    """One hardware-unit row: a host thread or a device stream."""

    kind: str  # TRACK_CPU | TRACK_STREAM | TRACK_OTHER
    pid: int | str  # process id as written (device index for device rows in Kineto)
    tid: int | str  # thread id as written (stream id for device rows)
    device: int = -1  # device index for a stream row, -1 otherwise
    stream: int = -1  # stream id for a stream row, -1 otherwise
    label: str = ""  # thread/process name from the trace's metadata, when given

    @property
    def title(self) -> str:
        if self.kind == TRACK_STREAM:
            if self.stream < 0:  # device-wide records (Event Sync, Context Sync)
                return f"device {self.device} sync"
            return f"device {self.device} stream {self.stream}"
        if self.kind == TRACK_CPU:
            return f"thread {self.tid}" + (f" ({self.label})" if self.label else "")
        return f"{self.pid}/{self.tid}"


@dataclass
class Flows:
    """Flow arrows. One row per flow endpoint ('s' start, 't' step, 'f' finish)."""

    id: np.ndarray  # int64 flow id (ac2g: the correlation id)
    cat: np.ndarray  # int32 index into Trace.strings ("ac2g", "fwdbwd", "async_cpu_to_gpu")
    phase: np.ndarray  # uint8 ord('s') / ord('t') / ord('f')
    ts: np.ndarray  # int64 ns
    track: np.ndarray  # int32 index into Trace.tracks
    bind_enclosing: np.ndarray  # bool: 'bp': 'e' (binds to the slice enclosing ts)


@dataclass
class Memory:
    """Allocator events ("[memory]" instants), in file order."""

    ts: np.ndarray  # int64 ns
    addr: np.ndarray  # int64
    nbytes: np.ndarray  # int64, negative for a free
    total_allocated: np.ndarray  # int64 bytes allocated on that device after the event, -1 unknown
    total_reserved: np.ndarray  # int64 bytes reserved by the caching allocator, -1 unknown
    device_type: np.ndarray  # int8 (c10 DeviceType: 0 cpu, 1 cuda, ...)
    device_id: np.ndarray  # int16
    track: np.ndarray  # int32 host thread that allocated


@dataclass
class Instants:
    """Other instant events (e.g. "Iteration Start"), in file order."""

    ts: np.ndarray
    name: np.ndarray
    track: np.ndarray


@dataclass
class Trace:
    """One rank's trace as columns (every column: `trainready.profile.trace`'s docstring)."""

    path: str
    rank: int
    meta: dict[str, Any]
    strings: list[str]
    tracks: list[Track]
    ts: np.ndarray
    dur: np.ndarray
    name: np.ndarray
    cat: np.ndarray
    kind: np.ndarray
    track: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    seq: np.ndarray
    fwd_tid: np.ndarray
    nbytes: np.ndarray
    python_id: np.ndarray
    python_parent: np.ndarray
    wait_stream: np.ndarray
    wait_record_corr: np.ndarray
    input_dims: np.ndarray
    input_types: np.ndarray
    concrete_inputs: np.ndarray
    grid: np.ndarray
    block: np.ndarray
    flows: Flows
    memory: Memory
    instants: Instants
    skipped: dict[str, int] = field(default_factory=dict)  # event phases not loaded, by ph
    text_bytes: int = 0  # size of the (decompressed) JSON text it was loaded from
    _symbol_ids: dict[str, int] | None = field(default=None, repr=False)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @property
    def end(self) -> np.ndarray:
        """int64 end time of every event, ns."""
        return self.ts + self.dur

    def memo(self, key: str, build: Any) -> Any:
        """`build()` once per trace: derived arrays several analyses share (columns never
        change after loading). Threads racing on a key both build it; either result is kept."""
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = build()
        return value

    def symbol(self, text: str) -> int:
        """The string id of `text`, or -1 when the trace never uses it."""
        if self._symbol_ids is None:
            self._symbol_ids = {s: i for i, s in enumerate(self.strings)}
        return self._symbol_ids.get(text, -1)

    def names(self, rows: np.ndarray | None = None) -> list[str]:
        """Decoded names of the given rows (all rows when None)."""
        ids = self.name if rows is None else self.name[rows]
        return [self.strings[i] for i in ids.tolist()]

    def text(self, ids: np.ndarray | int) -> Any:
        """Decode one string id (-> str or None for -1) or an array of them (-> list)."""
        if isinstance(ids, (int, np.integer)):
            return None if ids < 0 else self.strings[int(ids)]
        return [None if i < 0 else self.strings[i] for i in np.asarray(ids).tolist()]

    def of_kind(self, *kinds: int) -> np.ndarray:
        """Boolean mask of the rows whose kind is one of `kinds`."""
        return np.isin(self.kind, np.asarray(kinds, dtype=np.int8))

    @property
    def device_mask(self) -> np.ndarray:
        """Rows that are device activity on a stream (kernel, memcpy, memset, sync record)."""
        return self.of_kind(*DEVICE_KINDS)

    def stream_of(self) -> np.ndarray:
        """int64 stream id of every row (-1 for host rows), from the row's track."""
        streams = np.array([t.stream for t in self.tracks], dtype=np.int64)
        return streams[self.track] if len(self) else np.zeros(0, np.int64)

    def device_of(self) -> np.ndarray:
        """int64 device index of every row (-1 for host rows), from the row's track."""
        devices = np.array([t.device for t in self.tracks], dtype=np.int64)
        return devices[self.track] if len(self) else np.zeros(0, np.int64)

    def device_name(self, device: int = 0) -> str | None:
        """The device's name from the trace's deviceProperties (e.g. 'NVIDIA A100-SXM4-80GB')."""
        found = self.meta.get("deviceProperties")
        for props in found if isinstance(found, list) else []:
            if isinstance(props, dict) and props.get("id") == device:
                name = props.get("name")
                return name if isinstance(name, str) else None
        return None

    def event(self, row: int) -> dict[str, Any]:
        """One row as a plain dict (for display; analyses use the columns)."""
        out: dict[str, Any] = {
            "row": row,
            "name": self.strings[self.name[row]],
            "cat": self.strings[self.cat[row]],
            "kind": KIND_NAMES[self.kind[row]],
            "ts_ns": int(self.ts[row]),
            "dur_ns": int(self.dur[row]),
            "track": self.tracks[self.track[row]].title,
        }
        for col in ("correlation", "external_id", "seq", "fwd_tid", "nbytes", "python_id"):
            value = int(getattr(self, col)[row])
            if value >= 0:
                out[col] = value
        for col in ("input_dims", "input_types", "concrete_inputs", "grid", "block"):
            sid = int(getattr(self, col)[row])
            if sid >= 0:
                out[col] = json.loads(self.strings[sid])
        return out


# -- parsing helpers -------------------------------------------------------------------------------
def _ns(value: Any) -> int:
    """A Kineto time in microseconds (int, or decimal text kept by parse_float) -> int ns."""
    if type(value) is int:
        return value * 1000
    if type(value) is str:
        dot = value.find(".")
        if dot >= 0 and "e" not in value and "E" not in value:
            whole = value[:dot]
            frac = value[dot + 1 :]
            sign = -1 if whole.startswith("-") else 1
            ns = abs(int(whole or "0")) * 1000 + int((frac + "000")[:3] or "0")
            if len(frac) > 3 and frac[3] >= "5":
                ns += 1
            return sign * ns
        return _float_ns(float(value), value)
    if isinstance(value, float):
        return _float_ns(value, value)
    raise ValueError(f"not a time: {value!r}")


def _float_ns(us: float, text: Any) -> int:
    """Microseconds written with an exponent (or as a float) -> ns; ValueError unless finite."""
    if not math.isfinite(us):
        raise ValueError(f"time out of range: {text!r}")
    return round(us * 1000)


def json_depth(value: Any) -> int:
    """How deeply a decoded JSON value nests (0 for a scalar), without recursion."""
    depth, stack = 0, [(value, 1)] if type(value) in (dict, list) else []
    while stack:
        item, level = stack.pop()
        depth = max(depth, level)
        children = item.values() if type(item) is dict else item
        stack.extend((c, level + 1) for c in children if type(c) in (dict, list))
    return depth


def _int(value: Any) -> int:
    """An integer arg (ids, bytes); -1 when absent or not an integer."""
    if type(value) is int:
        return value
    if type(value) is str:
        try:
            return int(float(value)) if "." in value else int(value)
        except ValueError:
            return -1
    return -1
