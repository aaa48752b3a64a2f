"""Trace analyses on `trainready.profile.trace.Trace` columns: where device time goes.

Each function takes a Trace (and optionally a `Window`, the rows to analyse) and returns a plain
dict of numbers (JSON-ready; times in ns, shares in percent). Definitions follow
HolisticTraceAnalysis (HTA) so results can be compared with it; where HTA is wrong, the
difference is named in the function's docstring (and in tests/data/hta_reference/README.md).

- Device activity = kernels, memcpy and memset on device streams. Synchronisation records
  (cuda_sync: "Stream Sync", "Event Sync", ...) are *waits*, not work, so they never count as
  busy time (HTA counts them as non-compute busy time in its temporal and kernel-type breakdowns).
- Kernel types (HTA's rules): communication = name matches `^nccl.*Kernel`; memory = memcpy/memset
  activity or a name starting Memcpy/Memset/dma; computation = anything else except names that
  contain Memcpy/Sync or start with Memset (those are "other").
- The window: with two or more ProfilerStep#N annotations, the last step is left out (it is
  usually cut short by the profiler stopping): host rows starting at or after its start, and
  device rows whose launch is not in the kept host rows, are dropped - HTA's default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainready.profile import intervals
from trainready.profile.trace import (
    KIND_CPU_OP,
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_RUNTIME,
    KIND_SYNC,
    KIND_USER_ANNOTATION,
    TRACK_STREAM,
    Trace,
)

US = 1000  # ns per microsecond

COMPUTATION, COMMUNICATION, MEMORY, OTHER = 0, 1, 2, 3
KERNEL_TYPES = ("computation", "communication", "memory", "other")

_COMM_RE = re.compile(r"^nccl.*Kernel")
_MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")

# Idle gaps shorter than this between two kernels on a stream, with the next kernel already
# launched, are the device's own kernel-to-kernel latency ("kernel wait"); HTA's default, 30 us.
DEFAULT_KERNEL_WAIT_NS = 30 * US


def kernel_type_of(name: str, kind: int) -> int:
    """COMPUTATION | COMMUNICATION | MEMORY | OTHER for one device activity."""
    if _COMM_RE.match(name):
        return COMMUNICATION
    if kind in (KIND_MEMCPY, KIND_MEMSET) or _MEMORY_RE.match(name):
        return MEMORY
    if _NOT_COMPUTE_RE.match(name):
        return OTHER
    return COMPUTATION


def _pct(part: float, whole: float) -> float | None:
    return None if whole <= 0 else 100.0 * part / whole


@dataclass(frozen=True)
class Window:
    """The rows an analysis looks at (a boolean mask over the trace's rows) and why."""

    keep: np.ndarray
    trimmed_last_step: bool
    last_step_start_ns: int | None


def profiler_steps(trace: Trace) -> list[tuple[int, int, int]]:
    """(step number, start ns, end ns) of every ProfilerStep#N annotation, sorted by start."""
    host = trace.of_kind(KIND_CPU_OP, KIND_USER_ANNOTATION)
    steps = []
    for sid, text in enumerate(trace.strings):
        m = _STEP_RE.match(text)
        if m is None:
            continue
        rows = np.flatnonzero(host & (trace.name == sid))
        for r in rows.tolist():
            steps.append((int(m.group(1)), int(trace.ts[r]), int(trace.ts[r] + trace.dur[r])))
    return sorted(steps, key=lambda s: s[1])


def window(trace: Trace, trim_last_step: bool = True) -> Window:
    """Rows to analyse: all, or (HTA's default) all but the last of two or more profiler steps."""
    steps = profiler_steps(trace)
    if not trim_last_step or len({s[0] for s in steps}) < 2:
        return Window(np.ones(len(trace), dtype=bool), False, None)
    last_start = max(s[1] for s in steps)
    device = trace.device_mask
    host_kept = ~device & (trace.ts < last_start)
    launched = intervals.unique(trace.correlation[host_kept & (trace.correlation >= 0)])
    device_kept = device & intervals.isin(trace.correlation, launched) & (trace.correlation >= 0)
    return Window(host_kept | device_kept, True, last_start)


# Device work: what makes a device busy. Sync records (KIND_SYNC) are waits, not work.
DEVICE_WORK = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)


def _activity(trace: Trace, win: Window) -> np.ndarray:
    """Row indices of device work (kernels, memcpy, memset) in the window."""
    return np.flatnonzero(win.keep & trace.of_kind(*DEVICE_WORK))


def kernel_types(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Kernel type code of each given device row (classified once per distinct name and kind,
    once per trace)."""
    return trace.memo("kernel_types", lambda: _all_kernel_types(trace))[rows]


def _all_kernel_types(trace: Trace) -> np.ndarray:
    """Kernel type code of every device row (OTHER for host rows)."""
    out = np.full(len(trace), OTHER, dtype=np.int8)
    dev = np.flatnonzero(trace.device_mask)
    key = trace.name[dev].astype(np.int64) * 256 + trace.kind[dev].astype(np.int64)
    pairs, inverse = np.unique(key, return_inverse=True)
    codes = [kernel_type_of(trace.strings[k >> 8], k & 255) for k in pairs.tolist()]
    out[dev] = np.array(codes, dtype=np.int8)[inverse.reshape(-1)] if dev.size else 0
    return out


# -- temporal breakdown ----------------------------------------------------------------------------
def temporal_breakdown(trace: Trace, win: Window | None = None) -> dict[str, Any]:
    """Idle / compute / non-compute time of the device between its first and last activity.

    span = last activity end - first activity start (all streams); busy = the union of all
    activity; compute = the union of computation kernels; non-compute = busy - compute (time
    only memory or communication work runs); idle = span - busy.
    """
    win = win or window(trace)
    rows = _activity(trace, win)
    if rows.size == 0:
        return {"span_ns": 0, "idle_ns": 0, "compute_ns": 0, "non_compute_ns": 0,
                "idle_pct": None, "compute_pct": None, "non_compute_pct": None}  # fmt: skip
    ts, end = trace.ts[rows], trace.ts[rows] + trace.dur[rows]
    types = kernel_types(trace, rows)
    span = int(end.max() - ts.min())
    busy = intervals.total(ts, end)
    comp = types == COMPUTATION
    compute = intervals.total(ts[comp], end[comp])
    idle = span - busy
    return {
        "span_ns": span,
        "idle_ns": idle,
        "compute_ns": compute,
        "non_compute_ns": busy - compute,
        "idle_pct": _pct(idle, span),
        "compute_pct": _pct(compute, span),
        "non_compute_pct": _pct(busy - compute, span),
    }


# -- kernel-type breakdown -------------------------------------------------------------------------
def kernel_type_breakdown(trace: Trace, win: Window | None = None) -> dict[str, Any]:
    """Device time by kernel type and by overlap of types (e.g. computation + communication).

    Each type's kernels are merged into a union; a sweep over the unions gives the time each
    combination of types runs. Shares are of the total busy time.
    """
    win = win or window(trace)
    rows = _activity(trace, win)
    ts, end = trace.ts[rows], trace.ts[rows] + trace.dur[rows]
    types = kernel_types(trace, rows)
    order = (COMPUTATION, COMMUNICATION, MEMORY)
    sets = [(ts[types == t], end[types == t]) for t in order]
    covered = {m: ns for m, ns in intervals.sweep(sets).items() if m > 0}
    busy = sum(covered.values())
    out = {}
    for mask, ns in sorted(covered.items(), key=lambda kv: -kv[1]):
        label = " overlapping ".join(KERNEL_TYPES[t] for b, t in enumerate(order) if mask >> b & 1)
        out[label] = {"ns": ns, "pct": _pct(ns, busy)}
    return {"busy_ns": busy, "types": out}


# -- idle time by cause ----------------------------------------------------------------------------
def _launch_ts(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Start of the runtime call that launched each device row; -1 where none is in the trace."""
    launch = np.flatnonzero((trace.kind == KIND_RUNTIME) & (trace.correlation >= 0))
    corr = trace.correlation[launch]
    order = np.argsort(corr, kind="stable")
    corr, launch = corr[order], launch[order]
    want = trace.correlation[rows]
    pos = np.searchsorted(corr, want)
    pos = np.minimum(pos, max(corr.size - 1, 0))
    found = (corr.size > 0) & (want >= 0)
    found &= corr[pos] == want if corr.size else False
    out = np.full(rows.size, -1, dtype=np.int64)
    out[found] = trace.ts[launch[pos[found]]]
    return out


def stream_gaps(trace: Trace, win: Window | None = None) -> dict[int, dict[str, np.ndarray]]:
    """Per stream, the activities in start order and the gap before each (from the second on).

    {stream: {"rows", "ts", "end", "launch_ts" (-1: launch not in the trace),
    "gap_ns" (ts - previous end; negative where activities overlap)}}; gap arrays have one
    entry fewer than the activities, aligned with rows[1:].
    """
    win = win or window(trace)
    rows = _activity(trace, win)
    streams = trace.stream_of()[rows]
    launch = _launch_ts(trace, rows)
    out = {}
    for stream in intervals.unique(streams).tolist():
        on = streams == stream
        sel, lts = rows[on], launch[on]
        order = np.argsort(trace.ts[sel], kind="stable")
        sel, lts = sel[order], lts[order]
        ts = trace.ts[sel]
        end = ts + trace.dur[sel]
        out[int(stream)] = {
            "rows": sel,
            "ts": ts,
            "end": end,
            "launch_ts": lts,
            "gap_ns": ts[1:] - end[:-1],
        }
    return out


def idle_time_breakdown(
    trace: Trace, win: Window | None = None, kernel_wait_ns: int = DEFAULT_KERNEL_WAIT_NS
) -> dict[str, Any]:
    """Idle time of each stream between consecutive activities, by cause.

    For each gap before an activity (activities of a stream in start order): host wait when the
    runtime call that launched it started after the previous activity ended (the host had not
    queued it yet); kernel wait when it was queued and the gap is under `kernel_wait_ns`;
    other otherwise (waiting on another stream, an event, ...). Gaps are clipped at zero: HTA
    adds the negative "gaps" of overlapping activities on one stream, which shrinks the idle
    time it reports.
    """
    result = []
    for stream, g in stream_gaps(trace, win).items():
        gap = g["gap_ns"]
        host_wait = g["launch_ts"][1:] > g["end"][:-1]
        kernel_wait = ~host_wait & (gap < kernel_wait_ns)
        other = ~host_wait & ~kernel_wait
        gap = np.maximum(gap, 0)
        cats = {
            "host_wait_ns": int(gap[host_wait].sum()),
            "kernel_wait_ns": int(gap[kernel_wait].sum()),
            "other_ns": int(gap[other].sum()),
        }
        idle = sum(cats.values())
        result.append(
            {
                "stream": stream,
                "idle_ns": idle,
                **cats,
                **{k.replace("_ns", "_pct"): _pct(v, idle) for k, v in cats.items()},
            }
        )
    return {"kernel_wait_threshold_ns": kernel_wait_ns, "streams": result}


# -- communication / computation overlap -----------------------------------------------------------
def comm_comp_overlap(trace: Trace, win: Window | None = None) -> dict[str, Any]:
    """Share of communication time during which computation also runs (None: no communication)."""
    win = win or window(trace)
    rows = _activity(trace, win)
    ts, end = trace.ts[rows], trace.ts[rows] + trace.dur[rows]
    types = kernel_types(trace, rows)
    comm = (ts[types == COMMUNICATION], end[types == COMMUNICATION])
    comp = (ts[types == COMPUTATION], end[types == COMPUTATION])
    comm_ns = intervals.total(*comm)
    both = intervals.intersection_total(comm, comp)
    return {"communication_ns": comm_ns, "overlap_ns": both, "overlap_pct": _pct(both, comm_ns)}


# -- kernel launches -------------------------------------------------------------------------------
def launches(trace: Trace, win: Window | None = None) -> dict[str, np.ndarray]:
    """Each (runtime call, device activity) pair sharing a correlation id, as columns.

    Keys: launch (runtime row), activity (device row), cpu_ns (runtime call duration),
    device_ns (activity duration), delay_ns (activity start - runtime call end, clipped at 0),
    fanout (how many activities the call launched: > 1 for a graph launch).
    Any runtime call with a correlated kernel/memcpy/memset counts (cudaLaunchKernel,
    cuLaunchKernel, hipLaunchKernel, cudaMemcpyAsync, MTIA's runFunction...), whatever the vendor.
    """
    win = win or window(trace)
    dev = _activity(trace, win)
    dev = dev[trace.correlation[dev] >= 0]
    run = np.flatnonzero(win.keep & (trace.kind == KIND_RUNTIME) & (trace.correlation >= 0))
    run = run[np.argsort(trace.correlation[run], kind="stable")]
    rc = trace.correlation[run]
    pos = np.searchsorted(rc, trace.correlation[dev])
    found = pos < rc.size
    found[found] = rc[pos[found]] == trace.correlation[dev[found]]
    activity = dev[found]
    launch = run[pos[found]]
    _, inverse, fanout = np.unique(launch, return_inverse=True, return_counts=True)
    cpu_end = trace.ts[launch] + trace.dur[launch]
    return {
        "launch": launch,
        "activity": activity,
        "cpu_ns": trace.dur[launch],
        "device_ns": trace.dur[activity],
        "delay_ns": np.maximum(trace.ts[activity] - cpu_end, 0),
        "fanout": fanout[inverse.reshape(-1)] if launch.size else np.zeros(0, np.int64),
    }


def percentiles(values: np.ndarray, percents: list[float]) -> np.ndarray:
    """`np.percentile(values, percents)` (method "linear"), bit for bit, for a non-empty int
    array: numpy's own steps (virtual index, neighbours, `_lerp`) on a sorted copy, without the
    np.unique call numpy's partition makes, which imports numpy.ma (see `intervals.unique`).
    Other dtypes (NaN handling) go to np.percentile."""
    a = np.asarray(values)
    if a.dtype.kind not in "iu" or a.size == 0:
        return np.percentile(a, percents)
    a = np.sort(a, axis=None)
    n = a.size
    virtual = (n - 1) * np.true_divide(percents, 100)
    prev = np.floor(virtual)
    nxt = prev + 1
    above = virtual >= n - 1
    prev[above] = -1
    nxt[above] = -1
    prev, nxt = prev.astype(np.intp), nxt.astype(np.intp)
    gamma = np.asanyarray(virtual - prev, dtype=virtual.dtype)
    lo, hi = a[prev], a[nxt]
    diff = hi - lo
    out = np.add(lo, diff * gamma)
    np.subtract(hi, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
    return out


def _stats(values: np.ndarray) -> dict[str, Any]:
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None, "sum": 0}
    p50, p90, p99 = percentiles(values, [50, 90, 99]).tolist()
    return {"mean": float(values.mean()), "p50": p50, "p90": p90, "p99": p99,
            "max": int(values.max()), "sum": int(values.sum())}  # fmt: skip


def graph_launches(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Which of the runtime rows launch a graph (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch):
    a graph launch is never a single-kernel launch, even of a graph of one kernel."""
    ids = trace.memo(
        "graph_launch_names",
        lambda: np.array([i for i, s in enumerate(trace.strings) if "GraphLaunch" in s], np.int64),
    )
    return intervals.isin(trace.name[rows], ids)


def launch_stats(trace: Trace, win: Window | None = None) -> dict[str, Any]:
    """Launches of single kernels and memory operations: count, CPU launch time, device time,
    launch delay (ns). Calls that start several activities (a copy split into several DMA
    requests) and graph launches (whatever their number of kernels) are counted apart as
    `multi_launches`, as HTA leaves them out: the delay of an activity deep in a graph is not a
    launch delay.

    `count` = `kernels` + `memory`. `short_kernels`: launches whose device work took less time
    than the launch call itself (the device outruns the host: launch-bound).
    """
    pairs = launches(trace, win)
    single = (pairs["fanout"] == 1) & ~graph_launches(trace, pairs["launch"])
    memory = single & (kernel_types(trace, pairs["activity"]) == MEMORY)
    graph = ~single
    return {
        "count": int(single.sum()),
        "kernels": int((single & ~memory).sum()),
        "memory": int(memory.sum()),
        "multi_launches": int(intervals.unique(pairs["launch"][graph]).size),
        "multi_activities": int(graph.sum()),
        "cpu_ns": _stats(pairs["cpu_ns"][single]),
        "device_ns": _stats(pairs["device_ns"][single]),
        "delay_ns": _stats(pairs["delay_ns"][single]),
        "short_kernels": int((single & (pairs["device_ns"] < pairs["cpu_ns"])).sum()),
    }


# -- steps -----------------------------------------------------------------------------------------
def step_breakdown(trace: Trace) -> list[dict[str, Any]]:
    """Per ProfilerStep#N: host duration, and the device activity it launched (busy, by type).

    Device work belongs to the step whose host time range holds the runtime call that launched
    it, so work that runs after the step's host side ended is still billed to it.
    """
    steps = profiler_steps(trace)
    if not steps:
        return []
    everything = Window(np.ones(len(trace), dtype=bool), False, None)
    pairs = launches(trace, everything)
    launch_ts = trace.ts[pairs["launch"]]
    starts = np.array([s[1] for s in steps])
    ends = np.array([s[2] for s in steps])
    idx = np.searchsorted(starts, launch_ts, side="right") - 1
    inside = (idx >= 0) & (launch_ts < ends[np.maximum(idx, 0)])
    activity, idx = pairs["activity"][inside], idx[inside]
    computation = kernel_types(trace, activity) == COMPUTATION
    order = np.argsort(idx, kind="stable")
    bounds = np.searchsorted(idx[order], np.arange(len(steps) + 1))
    out = []
    for i, (number, start, end) in enumerate(steps):
        sel = order[bounds[i] : bounds[i + 1]]
        rows, first = np.unique(activity[sel], return_index=True)
        ts, dend = trace.ts[rows], trace.ts[rows] + trace.dur[rows]
        comp = computation[sel][first]
        busy = intervals.total(ts, dend)
        device_end = int(dend.max()) if rows.size else end
        out.append(
            {
                "step": number,
                "start_ns": start,
                "host_ns": end - start,
                "device_end_ns": device_end,
                "step_ns": max(end, device_end) - start,
                "activities": int(rows.size),
                "device_busy_ns": busy,
                "compute_ns": intervals.total(ts[comp], dend[comp]),
            }
        )
    return out


# -- hardware-unit rows ----------------------------------------------------------------------------
def hardware_rows(trace: Trace) -> list[dict[str, Any]]:
    """The trace's rows as a timeline shows them: host threads, then per device stream its
    kernels, memory (memcpy/memset) and sync rows; each with its event count and busy time."""
    out = []
    kinds = {
        "kernels": (KIND_KERNEL,),
        "memory": (KIND_MEMCPY, KIND_MEMSET),
        "sync": (KIND_SYNC,),
    }
    for tid, track in enumerate(trace.tracks):
        on = trace.track == tid
        if not on.any():
            continue
        if track.kind != TRACK_STREAM:
            out.append({"track": tid, "row": track.title, "kind": track.kind,
                        "events": int(on.sum())})  # fmt: skip
            continue
        for label, ks in kinds.items():
            sel = on & trace.of_kind(*ks)
            if sel.any():
                busy = intervals.total(trace.ts[sel], trace.ts[sel] + trace.dur[sel])
                out.append({"track": tid, "row": f"{track.title} {label}", "kind": label,
                            "events": int(sel.sum()), "busy_ns": busy})  # fmt: skip
    return out
