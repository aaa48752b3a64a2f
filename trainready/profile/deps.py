"""Dependencies between trace events, and the critical path of a step.

Edges (arrays of row indices, `src` must finish before `dst` can start or finish):

- launch: runtime call -> the device activity it launched (same correlation id; `ac2g` flows);
- stream: device activity -> the next activity on the same stream (in-order execution);
- host: runtime call -> the next runtime call on the same host thread (program order);
- fwdbwd: forward op -> its backward op (`fwdbwd` flows, from autograd's sequence numbers);
- sync: cross-stream and host synchronisation through CUDA events, from CUPTI's sync records:
  "Stream Wait Event" (stream S waits for an event recorded on stream R): the last activity
  launched on R before the cudaEventRecord call -> the first activity launched on S after the
  cudaStreamWaitEvent call; "Event Sync" / "Stream Sync" / "Context Sync" (the host waits):
  the last activity launched on the awaited stream(s) before the wait -> the waiting call.

Critical path: in an executed schedule, the chain of events that set the end time. Walking back
from the event that ends last, each event's binding dependency is the predecessor that finished
last; the time on the path is attributed to the host (runtime calls and the program between
them), device work by kernel type, and waits (gaps where the binding predecessor finished before
the event started: launch latency on a launch edge, else idle).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainready.profile import analysis as A
from trainready.profile import intervals
from trainready.profile.trace import KIND_CPU_OP, KIND_RUNTIME, KIND_SYNC, Trace

EDGE_TYPES = ("launch", "stream", "host", "fwdbwd", "sync")


def _pairs(src: list[int] | np.ndarray, dst: list[int] | np.ndarray) -> np.ndarray:
    return np.stack([np.asarray(src, np.int64), np.asarray(dst, np.int64)], axis=1).reshape(-1, 2)


def _launch_edges(trace: Trace) -> np.ndarray:
    everything = A.Window(np.ones(len(trace), dtype=bool), False, None)
    pairs = A.launches(trace, everything)
    return _pairs(pairs["launch"], pairs["activity"])


def _chain(rows: np.ndarray, groups: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Consecutive rows (by start time) within each group."""
    if rows.size < 2:
        return np.zeros((0, 2), np.int64)
    order = np.lexsort((ts[rows], groups))
    r, g = rows[order], groups[order]
    same = g[1:] == g[:-1]
    return _pairs(r[:-1][same], r[1:][same])


def _innermost_ops(trace: Trace, tracks: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """For each (track, ts): the cpu_op on that track enclosing ts that started last; -1 if none.

    Flow endpoints sit at the start of the op they belong to, so the op that started last at or
    before ts is almost always it; a few steps back cover an endpoint inside a finished child.
    """
    out = np.full(ts.size, -1, dtype=np.int64)
    ops = np.flatnonzero(trace.kind == KIND_CPU_OP)
    for track in intervals.unique(tracks).tolist():
        on = ops[trace.track[ops] == track]
        on = on[np.lexsort((-trace.dur[on], trace.ts[on]))]
        sel = np.flatnonzero(tracks == track)
        k = intervals.enclosing(trace.ts[on], trace.end[on], ts[sel])
        out[sel[k >= 0]] = on[k[k >= 0]]
    return out


def _fwdbwd_edges(trace: Trace) -> np.ndarray:
    f = trace.flows
    cat = trace.symbol("fwdbwd")
    if cat < 0:
        return np.zeros((0, 2), np.int64)
    sel = np.flatnonzero(f.cat == cat)
    rows = _innermost_ops(trace, f.track[sel], f.ts[sel])
    ends: dict[int, dict[int, int]] = {}
    for i, row in zip(sel.tolist(), rows.tolist(), strict=True):
        if row >= 0:
            ends.setdefault(int(f.id[i]), {})[int(f.phase[i])] = row
    pairs = [(e[ord("s")], e[ord("f")]) for e in ends.values() if ord("s") in e and ord("f") in e]
    return _pairs([p[0] for p in pairs], [p[1] for p in pairs])


def _last_launched_before(trace: Trace, launch: dict, stream: int, ts: int) -> int:
    """The activity on `stream` whose launch call started last before `ts` (-1 if none)."""
    on = launch["by_stream"].get(stream)
    if on is None:
        return -1
    k = np.searchsorted(on[0], ts, side="left")
    return int(on[1][k - 1]) if k > 0 else -1


def _first_launched_after(trace: Trace, launch: dict, stream: int, ts: int) -> int:
    on = launch["by_stream"].get(stream)
    if on is None:
        return -1
    k = np.searchsorted(on[0], ts, side="right")
    return int(on[1][k]) if k < on[0].size else -1


def _sync_edges(trace: Trace, launch_edges: np.ndarray) -> np.ndarray:
    syncs = np.flatnonzero((trace.kind == KIND_SYNC) & (trace.correlation >= 0))
    if syncs.size == 0 or launch_edges.size == 0:
        return np.zeros((0, 2), np.int64)
    streams = trace.stream_of()
    act = launch_edges[:, 1]
    by_stream = {}
    for s in intervals.unique(streams[act]).tolist():
        sel = launch_edges[streams[act] == s]
        order = np.argsort(trace.ts[sel[:, 0]], kind="stable")
        by_stream[s] = (trace.ts[sel[order, 0]], sel[order, 1])
    launch = {"by_stream": by_stream}
    runtime = np.flatnonzero((trace.kind == KIND_RUNTIME) & (trace.correlation >= 0))
    call_of = dict(zip(trace.correlation[runtime].tolist(), runtime.tolist(), strict=False))
    src, dst = [], []
    for row in syncs.tolist():
        call = call_of.get(int(trace.correlation[row]))
        if call is None:
            continue
        call_ts = int(trace.ts[call])
        kind = trace.strings[trace.name[row]]
        record = call_of.get(int(trace.wait_record_corr[row]), -1)
        awaited = int(trace.wait_stream[row])
        if kind == "Stream Wait Event" and record >= 0 and awaited >= 0:
            before = _last_launched_before(trace, launch, awaited, int(trace.ts[record]))
            after = _first_launched_after(trace, launch, int(streams[row]), call_ts)
            if before >= 0 and after >= 0:
                src.append(before)
                dst.append(after)
        elif kind in ("Event Sync", "Stream Sync", "Context Sync"):
            if kind == "Event Sync" and record >= 0 and awaited >= 0:
                targets, until = [awaited], int(trace.ts[record])
            elif kind == "Stream Sync":
                targets, until = [int(streams[row])], call_ts
            else:
                targets, until = list(by_stream), call_ts
            for s in targets:
                before = _last_launched_before(trace, launch, s, until)
                if before >= 0:
                    src.append(before)
                    dst.append(call)
    return _pairs(src, dst)


def dependencies(trace: Trace) -> dict[str, np.ndarray]:
    """Every dependency edge of the trace, by type: {type: int64 array of (src, dst) rows}."""
    launch = _launch_edges(trace)
    work = np.flatnonzero(trace.of_kind(*A.DEVICE_WORK))
    runtime = np.flatnonzero(trace.kind == KIND_RUNTIME)
    return {
        "launch": launch,
        "stream": _chain(work, trace.stream_of()[work], trace.ts),
        "host": _chain(runtime, trace.track[runtime].astype(np.int64), trace.ts),
        "fwdbwd": _fwdbwd_edges(trace),
        "sync": _sync_edges(trace, launch),
    }


class Graph:
    """All dependency edges, indexed by destination for walking back from an event."""

    _TYPES = ("launch", "stream", "host", "sync")  # fwdbwd links host ops, not on the path

    def __init__(self, trace: Trace, edges: dict[str, np.ndarray] | None = None):
        edges = dependencies(trace) if edges is None else edges
        parts = [edges[t] for t in self._TYPES]
        all_edges = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
        types = np.concatenate([np.full(len(p), i, np.int8) for i, p in enumerate(parts)])
        order = np.argsort(all_edges[:, 1], kind="stable")
        self.src, self.dst, self.type = all_edges[order, 0], all_edges[order, 1], types[order]
        self.launch = edges["launch"]
        work = np.flatnonzero(trace.of_kind(*A.DEVICE_WORK))
        self.category = np.full(len(trace), -1, dtype=np.int8)  # -1: host
        self.category[work] = A.kernel_types(trace, work)

    def preds(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        lo = np.searchsorted(self.dst, node, side="left")
        hi = np.searchsorted(self.dst, node, side="right")
        return self.src[lo:hi], self.type[lo:hi]

    def binding(self, trace: Trace, group: np.ndarray) -> np.ndarray:
        """For every node, the edge (index) from its binding dependency: among its predecessors
        in the same group (group >= 0), the one that finished last (the first such edge on a
        tie); -1 where none. One vectorised pass for every group at once."""
        gs, gd = group[self.src], group[self.dst]
        e = np.flatnonzero((gs >= 0) & (gs == gd))
        e = e[np.lexsort((e, -trace.end[self.src[e]], self.dst[e]))]
        first = e[np.r_[True, self.dst[e][1:] != self.dst[e][:-1]]] if e.size else e
        best = np.full(len(trace), -1, dtype=np.int64)
        best[self.dst[first]] = first
        return best


def critical_path(
    trace: Trace,
    start_ns: int | None = None,
    end_ns: int | None = None,
    graph: Graph | None = None,
) -> dict[str, Any]:
    """The critical path through runtime calls and device work launched in [start_ns, end_ns)
    (default: the whole trace): its events, and its time by category (ns)."""
    graph = graph or Graph(trace)
    if len(trace) == 0:
        return _walk(trace, np.zeros(0, np.int64), graph, np.zeros(0, np.int64))
    lo = int(trace.ts.min()) if start_ns is None else start_ns
    hi = int(trace.end.max()) + 1 if end_ns is None else end_ns
    host = np.flatnonzero((trace.kind == KIND_RUNTIME) & (trace.ts >= lo) & (trace.ts < hi))
    launch = graph.launch
    launched = launch[intervals.isin(launch[:, 0], host), 1] if launch.size else launch[:, 0]
    nodes = intervals.unique(np.concatenate((host, launched)))
    group = np.full(len(trace), -1, dtype=np.int64)
    group[nodes] = 0
    return _walk(trace, nodes, graph, graph.binding(trace, group))


def _walk(trace: Trace, nodes: np.ndarray, graph: Graph, best: np.ndarray) -> dict[str, Any]:
    """Walk back from the node that ends last, through binding dependencies (`best`, from
    Graph.binding) among `nodes`. Only the pointer chase is a Python loop (one read per node);
    the time by category is worked out over the whole path at once."""
    if nodes.size == 0:
        return {"events": [], "length_ns": 0, "by_category": {}}
    prev_of = np.where(best >= 0, graph.src[best], -1)  # each node's binding predecessor
    node = int(nodes[np.argmax(trace.end[nodes])])
    chain: list[int] = []  # from the last node back to the first
    while node >= 0:
        chain.append(node)
        node = prev_of.item(node)
    return _path_times(trace, graph, best, np.asarray(chain, dtype=np.int64))


# The wait before a node, named by its binding edge's type (Graph._TYPES' order).
_WAIT_LABELS = tuple(
    {"launch": "launch latency", "host": "host"}.get(t, "waiting") for t in Graph._TYPES
)
# What a path's time is summed under, by index: a node's category + 1 (host is -1), then the
# wait before it at 1 + len(KERNEL_TYPES) + its binding edge's type.
_LABELS = ("host", *A.KERNEL_TYPES, *_WAIT_LABELS)


def _path_times(trace: Trace, graph: Graph, best: np.ndarray, chain: np.ndarray) -> dict[str, Any]:
    """The critical path along `chain` (walked backwards, last node first): `t_hi`, the time
    from which a node is still on the path, is the running minimum of the end of the path so far
    and each predecessor's end; a node's own time is from the later of its start and its
    predecessor's end up to t_hi, the wait before it from its predecessor's end up to its start.
    Categories are listed by time, ties in the order the walk first meets them."""
    start = trace.ts[chain]
    prev_end = trace.end[chain[1:]]  # each node's binding predecessor: the next in the chain
    t_hi = np.minimum.accumulate(np.concatenate((trace.end[chain[:1]], prev_end)))
    own = t_hi.copy()
    own[:-1] -= np.maximum(start[:-1], prev_end)
    own[-1] -= start[-1]
    wait = np.minimum(t_hi[:-1], start[:-1]) - prev_end
    codes = graph.category[chain].astype(np.int64)  # -1: host, else a kernel type
    wait_label = graph.type[best[chain[:-1]]].astype(np.int64) + 1 + len(A.KERNEL_TYPES)
    # the walk's order: node 0's own time, its wait, node 1's own time, ...
    amount = np.empty(2 * chain.size - 1, dtype=np.int64)
    label = np.empty(2 * chain.size - 1, dtype=np.int64)
    amount[0::2], amount[1::2] = own, wait
    label[0::2], label[1::2] = codes + 1, wait_label
    keep = amount > 0
    amount, label = amount[keep], label[keep]
    by_cat: dict[str, int] = {}
    firsts = np.unique(label, return_index=True)[1]
    for i in np.sort(firsts):
        name = _LABELS[int(label[i])]
        by_cat[name] = by_cat.get(name, 0) + int(amount[label == label[i]].sum())
    length = int(trace.end[chain[0]]) - min(int(t_hi[-1]), int(start[-1]))
    return {
        "events": chain[::-1].tolist(),
        "length_ns": length,
        "by_category": dict(sorted(by_cat.items(), key=lambda kv: -kv[1])),
    }


def step_critical_paths(trace: Trace, graph: Graph | None = None) -> list[dict[str, Any]]:
    """The critical path of every ProfilerStep#N: its runtime calls and the work they launched."""
    steps = A.profiler_steps(trace)
    if not steps:
        return []
    graph = graph or Graph(trace)
    runtime = np.flatnonzero(trace.kind == KIND_RUNTIME)
    runtime = runtime[np.argsort(trace.ts[runtime], kind="stable")]
    launch = graph.launch
    launch = launch[np.argsort(trace.ts[launch[:, 0]], kind="stable")]
    run_ts, launch_ts = trace.ts[runtime], trace.ts[launch[:, 0]]
    node_sets = []
    for _, start, end in steps:
        host = runtime[np.searchsorted(run_ts, start) : np.searchsorted(run_ts, end)]
        launched = launch[np.searchsorted(launch_ts, start) : np.searchsorted(launch_ts, end), 1]
        node_sets.append(intervals.unique(np.concatenate((host, launched))))
    group = np.full(len(trace), -1, dtype=np.int64)
    for i, nodes in enumerate(node_sets):
        group[nodes] = i
    disjoint = sum(n.size for n in node_sets) == int((group >= 0).sum())
    best = graph.binding(trace, group) if disjoint else None
    out = []
    for (number, _, _), nodes in zip(steps, node_sets, strict=True):
        if not disjoint:  # overlapping steps: each its own pass
            group[:] = -1
            group[nodes] = 0
            best = graph.binding(trace, group)
        cp = _walk(trace, nodes, graph, best)
        out.append({"step": number, "length_ns": cp["length_ns"],
                    "events": len(cp["events"]), "by_category": cp["by_category"]})  # fmt: skip
    return out


def dependency_counts(edges: dict[str, np.ndarray]) -> dict[str, int]:
    return {k: int(v.shape[0]) for k, v in edges.items()}
