"""Server-side level of detail for the explorer: send the browser only what it can see.

A `Viewport` indexes one loaded `Trace` once (events of each hardware-unit row sorted by start, a
lane per nesting depth, the idle gaps of every device stream) and then answers window queries
`(t0, t1, px)` in time proportional to the events inside the window:

- an event at least `min_px` pixels wide is sent on its own (start, duration, lane, name, kind);
- events narrower than that are aggregated per (lane, pixel column): how many, what fraction of the
  column they cover, and the longest one (so a click on the aggregate can still select an event);
- idle gaps of a device stream (no kernel, copy or set running) are sent when a pixel wide or more;
- the memory counter track is reduced to the min and max of each pixel column.

Times in every answer are nanoseconds relative to `origin_ns` (the first event's start), so they
stay exact as JavaScript numbers.

The side panel's content is put together here too, from the analyses (adapters, no analysis of
their own): an event's details with its typed dependencies (`deps`: launch, stream, host, fwdbwd,
sync edges, and the step's critical path), counted FLOPs and MFU (`opflops`) and user source line
(`source`); the summary (`analysis`, `opflops`); and the comparison of two summaries.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from trainready.profile import analysis, deps, opflops, source
from trainready.profile.memory import timelines as memory_timelines
from trainready.profile.trace import (
    DEVICE_KINDS,
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_NAMES,
    KIND_PYTHON,
    KIND_RUNTIME,
    KIND_SYNC,
    TRACK_CPU,
    TRACK_STREAM,
    Trace,
)

MAX_LANES = 64  # deeper nesting is drawn on the last lane
MAX_PX = 8192  # widest window a client may ask for, pixels
COMPARE_KERNELS = 50  # kernels per trace a comparison looks at (the most device time first)


_SUBROWS = (  # a device stream is drawn as up to four rows: what runs on it, by kind
    ("annotations", ()),
    ("kernels", (KIND_KERNEL,)),
    ("memory", (KIND_MEMCPY, KIND_MEMSET)),
    ("sync", (KIND_SYNC,)),
)
_BUSY_KINDS = np.asarray((KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET), np.int8)  # work, not waits


@dataclass(frozen=True)
class Row:
    """One drawn row: a hardware unit (a host thread, or one kind of work on a device stream),
    with its lanes (nesting depth), in its process/device group."""

    id: int
    track: int
    group: str
    title: str
    kind: str
    lanes: int
    events: int


def _unit_of(trace: Trace) -> np.ndarray:
    """Row key of every event: track * 4 + the sub-row of a device stream (0 for host rows)."""
    sub_of_kind = np.zeros(len(KIND_NAMES), dtype=np.int64)
    for sub, (_, kinds) in enumerate(_SUBROWS):
        sub_of_kind[list(kinds)] = sub
    is_stream = np.array([t.kind == TRACK_STREAM for t in trace.tracks] or [False])
    sub = np.where(is_stream[trace.track], sub_of_kind[trace.kind], 0)
    return trace.track.astype(np.int64) * len(_SUBROWS) + sub


_AGG_KEYS = ("lane", "x", "n", "fill", "rep", "hit")


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _lanes(unit: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of every event, given events sorted by (row, start, longest first): the
    number of earlier events of its row still running when it starts (clipped to MAX_LANES)."""
    lane = np.zeros(len(unit), dtype=np.int16)
    if not len(unit):  # an empty trace: no rows
        return lane
    starts = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]])
    for a, b in zip(starts, np.r_[starts[1:], len(unit)], strict=True):
        ended = np.searchsorted(np.sort(end[a:b]), ts[a:b], side="right")
        lane[a:b] = np.clip(np.arange(b - a) - ended, 0, MAX_LANES - 1)
    return lane


class Viewport:
    """Level-of-detail index over one trace."""

    def __init__(self, trace: Trace):
        self.trace = trace
        n = len(trace)
        self.origin_ns = int(trace.ts.min()) if n else 0
        self.end_ns = int(trace.end.max()) - self.origin_ns if n else 0
        unit = _unit_of(trace)
        by_start = np.lexsort((-trace.dur, trace.ts, unit)) if n else np.zeros(0, np.int64)
        lane = _lanes(unit[by_start], trace.ts[by_start], trace.end[by_start])
        # Final order: by row, then lane, then start. Each (row, lane) segment is a run of
        # events sorted by start, so a window query is binary searches plus linear passes.
        regroup = np.lexsort((np.arange(n), lane, unit[by_start]))
        order = by_start[regroup]
        self.order = order.astype(np.int64)
        self.lane = lane[regroup]
        self.unit = unit[order]
        self.start = (trace.ts[order] - self.origin_ns).astype(np.int64)
        self.stop = self.start + trace.dur[order]
        self.position = np.empty(n, dtype=np.int64)  # event -> index into the sorted arrays
        self.position[order] = np.arange(n)
        self._kind = trace.kind[order]
        self._name = trace.name[order]
        seg = self.unit * MAX_LANES + self.lane
        keys, first = np.unique(seg, return_index=True)
        bounds = np.r_[first, n]
        self.segments: dict[int, list[tuple[int, int, int]]] = {}  # row -> [(lane, a, b)]
        self.reach = np.zeros(n, dtype=np.int64)  # running max of stop within a segment
        for i, key in enumerate(keys.tolist()):
            a, b = int(bounds[i]), int(bounds[i + 1])
            self.segments.setdefault(key // MAX_LANES, []).append((key % MAX_LANES, a, b))
            self.reach[a:b] = np.maximum.accumulate(self.stop[a:b])
        self.gaps = self._idle_gaps()
        self.rows = self._rows()
        self._row_of = {r.id: r for r in self.rows}
        self.memory_lines = {d: m for d, m in memory_timelines(trace).items() if len(m["ts"])}
        self._search: tuple[str, np.ndarray] | None = None

    # -- layout ------------------------------------------------------------------------------------
    def _rows(self) -> list[Row]:
        rows = []
        for unit, segments in self.segments.items():
            k, sub = divmod(unit, len(_SUBROWS))
            tr = self.trace.tracks[k]
            if tr.kind == TRACK_STREAM:
                name = self.trace.device_name(tr.device)
                group = f"device {tr.device}" + (f" ({name})" if name else "")
                title = f"stream {tr.stream} {_SUBROWS[sub][0]}"
            elif tr.kind == TRACK_CPU:
                group = f"process {tr.pid}"
                title = f"thread {tr.tid}"
                label = tr.label.removeprefix(f"thread {tr.tid} ").strip("() ")
                title += f" ({label})" if label and label != f"thread {tr.tid}" else ""
            else:
                group = "other"
                title = tr.title
            lanes = max(lane for lane, _, _ in segments) + 1
            events = sum(b - a for _, a, b in segments)
            rows.append(Row(unit, k, group, title, tr.kind, lanes, events))
        rank = {TRACK_STREAM: 0, TRACK_CPU: 1}
        rows.sort(key=lambda r: (rank.get(r.kind, 2), r.group, r.id))
        return rows

    def _idle_gaps(self) -> dict[int, np.ndarray]:
        """Per device stream (track), [start, stop) of every gap in its work, shape (n, 2): the
        time no kernel, copy or set runs on it (sync records are waits, not work)."""
        busy = np.flatnonzero(np.isin(self._kind, _BUSY_KINDS))
        track = self.unit[busy] // len(_SUBROWS)
        out: dict[int, np.ndarray] = {}
        for k in np.unique(track).tolist():
            sel = busy[track == k]
            order = np.argsort(self.start[sel], kind="stable")
            start, stop = self.start[sel][order], self.stop[sel][order]
            reach = np.maximum.accumulate(stop)
            opens = start[1:] > reach[:-1]
            out[k] = np.stack([reach[:-1][opens], start[1:][opens]], axis=1)
        return out

    def meta(self) -> dict:
        return {
            "events": len(self.trace),
            "origin_ns": self.origin_ns,
            "duration_ns": self.end_ns,
            "rows": [
                {
                    "id": r.id,
                    "track": r.track,
                    "group": r.group,
                    "title": r.title,
                    "kind": r.kind,
                    "lanes": r.lanes,
                    "events": r.events,
                }
                for r in self.rows
            ],
            "kinds": list(KIND_NAMES),
            "has_memory": bool(self.memory_lines),
        }

    # -- window queries ----------------------------------------------------------------------------
    def window(
        self,
        t0: float,
        t1: float,
        px: int,
        rows: list[int] | None = None,
        query: str = "",
        min_px: float = 1.0,
    ) -> dict:
        """Everything drawn in [t0, t1) ns at `px` pixels wide, for the given rows (ids)."""
        px = int(min(max(px, 1), MAX_PX))
        t0, t1 = float(t0), float(max(t1, t0 + 1))
        ns_per_px = (t1 - t0) / px
        wanted = set(self._row_of) if rows is None else set(rows)
        match = self._matches(query)
        names: dict[int, int] = {}
        out = []
        for r in self.rows:
            if r.id not in wanted:
                continue
            wide, aggs = [], []
            for lane, a, b in self.segments[r.id]:
                lo = a + int(np.searchsorted(self.reach[a:b], t0, side="right"))
                hi = a + int(np.searchsorted(self.start[a:b], t1, side="left"))
                if hi <= lo:
                    continue
                idx = np.arange(lo, hi)
                idx = idx[self.stop[idx] > t0]
                is_wide = (self.stop[idx] - self.start[idx]) >= min_px * ns_per_px
                wide.append(idx[is_wide])
                aggs.append(self._aggregate(idx[~is_wide], lane, t0, ns_per_px, px, match))
            out.append(
                {
                    "row": r.id,
                    "ev": self._events(_concat(wide), names, match),
                    "agg": {k: [v for a in aggs for v in a[k]] for k in _AGG_KEYS},
                    "gaps": self._gaps(r.track, t0, t1, ns_per_px),
                }
            )
        table = sorted(names, key=names.get)
        return {
            "t0": t0,
            "t1": t1,
            "px": px,
            "names": [self.trace.strings[s] for s in table],
            "rows": out,
        }

    def _events(self, idx: np.ndarray, names: dict[int, int], match: np.ndarray | None) -> dict:
        local = [names.setdefault(s, len(names)) for s in self._name[idx].tolist()]
        ev = {
            "id": self.order[idx].tolist(),
            "lane": self.lane[idx].tolist(),
            "ts": self.start[idx].tolist(),
            "dur": (self.stop[idx] - self.start[idx]).tolist(),
            "name": local,
            "kind": self._kind[idx].tolist(),
        }
        if match is not None:
            ev["hit"] = np.flatnonzero(match[idx]).tolist()
        return ev

    def _aggregate(
        self,
        idx: np.ndarray,
        lane: int,
        t0: float,
        ns_per_px: float,
        px: int,
        match: np.ndarray | None,
    ) -> dict:
        """Events of one lane per pixel column: count, covered fraction, longest event, search
        hits. `idx` is in start order, so each column's events are one contiguous run."""
        if not len(idx):
            return dict.fromkeys(_AGG_KEYS, [])
        col = np.clip(((self.start[idx] - t0) / ns_per_px).astype(np.int64), 0, px - 1)
        first = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
        count = np.diff(np.r_[first, len(col)])
        dur = self.stop[idx] - self.start[idx]
        fill = np.minimum(np.add.reduceat(dur, first) / ns_per_px, 1.0)
        longest = np.maximum.reduceat(dur, first)
        cell = np.repeat(np.arange(len(first)), count)
        at_max = np.flatnonzero(dur == longest[cell])  # ascending: each cell's first comes first
        rep = at_max[np.r_[True, cell[at_max][1:] != cell[at_max][:-1]]]
        hits = np.add.reduceat(match[idx].astype(np.int64), first) if match is not None else None
        return {
            "lane": [lane] * len(first),
            "x": col[first].tolist(),
            "n": count.tolist(),
            "fill": np.round(fill, 3).tolist(),
            "rep": self.order[idx[rep]].tolist(),
            "hit": hits.tolist() if hits is not None else [],
        }

    def _gaps(self, track: int, t0: float, t1: float, ns_per_px: float) -> list[list[int]]:
        gaps = self.gaps.get(track)
        if gaps is None or not len(gaps):
            return []
        lo = int(np.searchsorted(gaps[:, 1], t0, side="right"))
        hi = int(np.searchsorted(gaps[:, 0], t1, side="left"))
        g = gaps[lo:hi]
        return g[(g[:, 1] - g[:, 0]) >= ns_per_px].tolist()

    def _matches(self, query: str) -> np.ndarray | None:
        """Per sorted event: does its name contain `query` (any case)? None without a query."""
        query = query.strip().lower()
        if not query:
            return None
        cached = self._search  # one read: other request threads may replace it meanwhile
        if cached is None or cached[0] != query:
            hit_ids = [i for i, s in enumerate(self.trace.strings) if query in s.lower()]
            mask = np.zeros(len(self.trace.strings), dtype=bool)
            mask[hit_ids] = True
            cached = self._search = (query, mask[self._name])
        return cached[1]

    def search(self, query: str, limit: int = 200) -> dict:
        """Events whose name contains `query`: the total, counts per name, the first `limit`."""
        match = self._matches(query)
        if match is None:
            return {"query": query, "total": 0, "names": [], "events": []}
        hits = np.flatnonzero(match)
        hits = hits[np.argsort(self.start[hits], kind="stable")]
        ids, counts = np.unique(self._name[hits], return_counts=True)
        top = np.argsort(-counts, kind="stable")[:50]
        shown = hits[:limit]
        return {
            "query": query,
            "total": int(len(hits)),
            "names": [
                {"name": self.trace.strings[int(ids[i])], "count": int(counts[i])} for i in top
            ],
            "events": [
                {
                    "id": int(self.order[i]),
                    "name": self.trace.strings[int(self._name[i])],
                    "row": int(self.unit[i]),
                    "ts": int(self.start[i]),
                    "dur": int(self.stop[i] - self.start[i]),
                }
                for i in shown.tolist()
            ],
        }

    # -- one event ---------------------------------------------------------------------------------
    def place(self, event: int) -> dict:
        """Where an event is drawn: track, lane, start and duration relative to the origin."""
        p = int(self.position[event])
        return {
            "id": int(event),
            "row": int(self.unit[p]),
            "lane": int(self.lane[p]),
            "ts": int(self.start[p]),
            "dur": int(self.stop[p] - self.start[p]),
            "name": self.trace.strings[int(self.trace.name[event])],
        }

    def python_stack(self, event: int) -> list[str]:
        """Names of the python_function events enclosing an event on its thread, outermost first
        (e.g. `model.py(42): forward`): the source lines of a trace taken with `with_stack=True`.
        The frames `trainready profile` itself added (its capture, runpy) are left out."""
        p = int(self.position[event])
        out = []
        for lane, a, b in self.segments[int(self.unit[p])]:
            if lane >= self.lane[p]:
                break
            i = a + int(np.searchsorted(self.start[a:b], self.start[p], side="right")) - 1
            if i >= a and self._kind[i] == KIND_PYTHON and self.stop[i] >= self.stop[p]:
                name = self.trace.strings[int(self._name[i])]
                if not source.is_tool_frame(name):
                    out.append(name)
        return out

    # -- memory counter ----------------------------------------------------------------------------
    def memory(self, t0: float, t1: float, px: int) -> dict:
        """Allocated bytes per device (`memory.timelines`) over [t0, t1): min and max of each
        pixel column, plus the value in force at t0 (the counter is a step function)."""
        px = int(min(max(px, 1), MAX_PX))
        t0, t1 = float(t0), float(max(t1, t0 + 1))
        ns_per_px = (t1 - t0) / px
        series = []
        for device, line in self.memory_lines.items():
            ts, value = line["ts"] - self.origin_ns, line["allocated"]
            before = int(np.searchsorted(ts, t0, side="right")) - 1
            lo, hi = before + 1, int(np.searchsorted(ts, t1, side="left"))
            col = ((ts[lo:hi] - t0) / ns_per_px).astype(np.int64)
            v = value[lo:hi]
            cols, first = np.unique(col, return_index=True)
            series.append(
                {
                    "device": device,
                    "start": int(value[before]) if before >= 0 else 0,
                    "x": cols.tolist(),
                    "max": np.maximum.reduceat(v, first).tolist() if len(v) else [],
                    "min": np.minimum.reduceat(v, first).tolist() if len(v) else [],
                    "last": v[np.r_[first[1:], len(v)] - 1].tolist() if len(v) else [],
                    "peak": int(value.max()),
                }
            )
        return {"t0": t0, "t1": t1, "px": px, "series": series}


# -- panels: what the side panel shows about an event and a trace ---------------------------------
DEPENDENCY_TYPES = {
    "launch": "launch → kernel (ac2g)",
    "stream": "same-stream order",
    "host": "host program order",
    "fwdbwd": "forward → backward",
    "sync": "cross-stream / host sync (CUDA events)",
    "critical": "critical path of the step",
}


class Graph:
    """The trace's dependency edges (`deps.dependencies`) indexed by event both ways, and the
    critical path (`deps.critical_path`) of each profiler step, computed when first asked for."""

    def __init__(self, trace: Trace):
        self.trace = trace
        edges = deps.dependencies(trace)
        names = list(edges)
        pairs = [edges[n].reshape(-1, 2) for n in names]
        self.types = names
        self.type = np.concatenate(
            [np.full(len(p), i, np.int8) for i, p in enumerate(pairs)] or [np.zeros(0, np.int8)]
        )
        both = np.concatenate(pairs or [np.zeros((0, 2), np.int64)])
        self.src, self.dst = both[:, 0], both[:, 1]
        self.by_src = np.argsort(self.src, kind="stable")
        self.by_dst = np.argsort(self.dst, kind="stable")
        launch = edges.get("launch", np.zeros((0, 2), np.int64))
        self.launch_of = dict(zip(launch[:, 1].tolist(), launch[:, 0].tolist(), strict=True))
        self.steps = analysis.profiler_steps(trace)
        self._paths: dict[int, tuple[str, list[int]]] = {}
        self._lock = threading.Lock()

    def edges(self, event: int) -> list[tuple[str, int, int]]:
        """(type, source, destination) of every edge into or out of `event`."""
        out = []
        for order, key in ((self.by_dst, self.dst), (self.by_src, self.src)):
            lo = np.searchsorted(key[order], event, side="left")
            hi = np.searchsorted(key[order], event, side="right")
            for i in order[lo:hi].tolist():
                out.append((self.types[self.type[i]], int(self.src[i]), int(self.dst[i])))
        return out + self._critical(event)

    def host_side(self, event: int) -> int:
        """The runtime call that launched a device event; the event itself otherwise."""
        return self.launch_of.get(event, event)

    def _critical(self, event: int) -> list[tuple[str, int, int]]:
        """The critical-path edges into and out of `event`, if it is on its step's path."""
        at = int(self.trace.ts[self.host_side(event)])
        step = next((i for i, (_, a, b) in enumerate(self.steps) if a <= at < b), -1)
        if step < 0 and self.steps:
            return []
        with self._lock:
            if step not in self._paths:
                bounds = self.steps[step][1:] if step >= 0 else (None, None)
                self._paths[step] = deps.critical_path(self.trace, *bounds)["events"]
            path = self._paths[step]
        if event not in path:
            return []
        i = path.index(event)
        out = [("critical", path[i - 1], event)] if i > 0 else []
        return out + ([("critical", event, path[i + 1])] if i + 1 < len(path) else [])


class OpFlops:
    """Counted FLOPs of op calls (`opflops.op_table`), found from the op or from a kernel it
    launched (the counted op on the launching thread whose time holds the launch call)."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.by_row = {int(e["row"]): e for e in opflops.op_table(trace)}
        rows = np.array(sorted(self.by_row), dtype=np.int64)
        rows = rows[np.lexsort((trace.ts[rows], trace.track[rows]))] if len(rows) else rows
        self.rows = rows
        self.key = trace.track[rows].astype(np.int64)
        self.ts = trace.ts[rows]

    def of(self, event: int) -> dict | None:
        found = self.by_row.get(event)
        if found is not None or self.trace.kind[event] not in DEVICE_KINDS:
            return found
        corr = self.trace.correlation[event]
        launch = np.flatnonzero(
            (self.trace.correlation == corr) & (self.trace.kind == KIND_RUNTIME)
        )
        if corr < 0 or not len(launch):
            return None
        at, track = self.trace.ts[launch[0]], int(self.trace.track[launch[0]])
        lo, hi = np.searchsorted(self.key, track), np.searchsorted(self.key, track, side="right")
        i = lo + int(np.searchsorted(self.ts[lo:hi], at, side="right")) - 1
        if i < lo:
            return None
        op = int(self.rows[i])
        return self.by_row[op] if self.trace.end[op] > at else None


def event_details(
    view: Viewport, event: int, flops: OpFlops | None = None, graph: Graph | None = None
) -> dict:
    """One event for the details panel: its fields, where it is drawn, its python stack and user
    source line, its counted FLOPs (achieved TFLOP/s, MFU), and its dependencies (what it waits
    for) and dependents (what waits for it), each typed."""
    trace = view.trace
    fields = trace.event(int(event))
    fields["row"] = int(event)
    op = flops.of(event) if flops is not None else None
    host = graph.host_side(event) if graph is not None else event
    before: list[dict] = []
    after: list[dict] = []
    for kind, src, dst in graph.edges(event) if graph is not None else []:
        if dst == event:
            before.append(_dep(view, kind, src))
        else:
            after.append(_dep(view, kind, dst))
    present = {d["type"] for d in before + after}
    return {
        "event": fields,
        "place": view.place(event),
        "stack": view.python_stack(host),
        "source": source.user_frames(trace, np.array([host]))[0],
        "flops": _flops_fields(op, event),
        "dependencies": before,
        "dependents": after,
        "types": [{"type": t, "label": lab} for t, lab in DEPENDENCY_TYPES.items() if t in present],
    }


def _flops_fields(op: dict | None, event: int) -> dict | None:
    if op is None:
        return None
    return {
        "op": op["op"],
        "of_this_event": op["row"] == event,
        "flops": op["flops"],
        "dtype": op["dtype"],
        "timed_on": op["timed_on"],
        "tflops_per_s": op["tflops"],
        "mfu": op["mfu"],
        "peak": op["peak"],
    }


def _dep(view: Viewport, kind: str, other: int) -> dict:
    return {"type": kind, "label": DEPENDENCY_TYPES[kind], "place": view.place(other)}


_OP_FIELDS = ("op", "input_dims", "dtype", "calls", "flops", "time_ns", "tflops", "mfu", "peak")


def summary(view: Viewport, top: int = 15) -> dict:
    """The summary panel, from `analysis` over its window (HTA's default: the last of several
    profiler steps left out): step time, idle, overlap, launches, and the kernels that take the
    most device time."""
    trace = view.trace
    win = analysis.window(trace)
    steps = analysis.step_breakdown(trace)
    kept = steps[:-1] if win.trimmed_last_step else steps
    temporal = analysis.temporal_breakdown(trace, win)
    overlap = analysis.comm_comp_overlap(trace, win)
    kernels = np.flatnonzero(win.keep & (trace.kind == KIND_KERNEL))
    top_kernels = []
    if len(kernels):
        ids, inverse = np.unique(trace.name[kernels], return_inverse=True)
        total = np.bincount(inverse, weights=trace.dur[kernels].astype(np.float64))
        count = np.bincount(inverse)
        all_ns = float(total.sum())
        for i in np.argsort(-total, kind="stable")[: max(top, COMPARE_KERNELS)].tolist():
            top_kernels.append(
                {
                    "name": trace.strings[int(ids[i])],
                    "count": int(count[i]),
                    "total_ns": int(total[i]),
                    "share": float(total[i] / all_ns) if all_ns else 0.0,
                }
            )
    flops = opflops.mfu_summary(trace, top=8)
    mfu, mfu_label = _step_mfu(trace, flops, kept)
    notes = []
    if win.trimmed_last_step:
        notes.append(f"the last of {len(steps)} profiler steps is left out (usually cut short)")
    return {
        "device": trace.device_name(0) or "",
        "span_ns": view.end_ns,
        "steps": len(kept),
        "step_name": "ProfilerStep#N",
        "step_time_ns": int(np.median([s["step_ns"] for s in kept])) if kept else None,
        "busy_ns": temporal["span_ns"] - temporal["idle_ns"] if temporal["span_ns"] else None,
        "idle_fraction": _fraction(temporal["idle_pct"]),
        "overlap_fraction": _fraction(overlap["overlap_pct"]),
        "mfu": mfu,
        "mfu_label": mfu_label,
        "top_ops": [{k: g[k] for k in _OP_FIELDS} for g in flops["top"]],
        "top_kernels": top_kernels[:top],
        "kernel_ns_per_step": {k["name"]: k["total_ns"] / max(len(kept), 1) for k in top_kernels},
        "notes": notes,
    }


def _step_mfu(trace: Trace, flops: dict, steps: list[dict]) -> tuple[float | None, str]:
    """Counted FLOPs per step over the step time, against the peak at the dtype that carries
    most of them (median over the kept steps); None with the reason when it cannot be had."""
    if not flops["ops"]:
        return None, "no counted ops (trace recorded without shapes, or no matmul/conv/attention)"
    if not steps:
        return None, "no ProfilerStep markers: no step time"
    by_dtype: dict[str, int] = {}
    for g in flops["top"]:
        by_dtype[g["dtype"]] = by_dtype.get(g["dtype"], 0) + g["flops"]
    dtype = max(by_dtype, key=by_dtype.get)
    peak, label = opflops.peak_flops(trace, dtype)
    if peak is None:
        return None, label
    step_flops = {s["step"]: s["flops"] for s in flops["steps"]}
    rates = [step_flops.get(s["step"], 0) / (s["step_ns"] * 1e-9) for s in steps if s["step_ns"]]
    if not rates:
        return None, "steps without duration"
    return float(np.median(rates)) / peak, f"counted FLOPs per step over step time, {label}"


def _fraction(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


def compare(a: dict, b: dict, top: int = 25) -> dict:
    """Step time and top-kernel deltas of two summaries (kernel time per step when both traces
    mark steps, else per trace)."""
    ka, kb = a["kernel_ns_per_step"], b["kernel_ns_per_step"]
    names = set(ka) | set(kb)
    rows = [{"name": n, "a_ns": ka.get(n), "b_ns": kb.get(n)} for n in names]
    rows.sort(key=lambda r: -abs((r["b_ns"] or 0) - (r["a_ns"] or 0)))
    note = None
    if not (a["steps"] and b["steps"]):
        note = "kernel times are per trace: one of the traces has no ProfilerStep markers"
    return {
        "a": {"step_time_ns": a["step_time_ns"], "steps": a["steps"]},
        "b": {"step_time_ns": b["step_time_ns"], "steps": b["steps"]},
        "kernels": rows[:top],
        "note": note,
    }
