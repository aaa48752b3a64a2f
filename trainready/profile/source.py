"""Source mapping: which line of the user's code each op, and its device time, comes from.

Needs Python stacks (`with_stack=True`, as `trainready profile` records): python_function events
named "path(line): function", nested on the thread that ran them. An op's user frame is the
innermost enclosing frame outside PyTorch, the standard library, site-packages and trainready's
own capture (so a `model(x)` call in train.py maps to train.py, not to torch/nn/modules/...).

The profiler's Python tracer records calls, not lines: a frame's line is where the function was
entered (its `def`, or for a module-level frame the line running when profiling started). So ops
map to the user *function* that issued them, written "path:line function".
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from trainready.profile import intervals
from trainready.profile.trace import DEVICE_KINDS, KIND_CPU_OP, KIND_PYTHON, KIND_RUNTIME, Trace

_FRAME = re.compile(r"^(?P<path>.+)\((?P<line>\d+)\): (?P<func>.*)$")
_INTERNAL = re.compile(
    r"(^<)|(^torch/)|(/torch/)|(site-packages/)|(dist-packages/)|(^trainready/profile/)"
    r"|(/lib/python3\.\d+/)|(^threading\.py$)|(^runpy\.py$)"
)


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """'train.py(12): forward' -> ('train.py', 12, 'forward'); None for other names."""
    m = _FRAME.match(name)
    return (m["path"], int(m["line"]), m["func"]) if m else None


def is_user_frame(path: str) -> bool:
    return _INTERNAL.search(path) is None


def user_frames(trace: Trace, rows: np.ndarray) -> list[str | None]:
    """For each given host row, "path:line function" of its innermost enclosing user frame."""
    py = np.flatnonzero(trace.kind == KIND_PYTHON)
    user_ids = {}
    for sid in np.unique(trace.name[py]).tolist():
        frame = parse_frame(trace.strings[sid])
        if frame and is_user_frame(frame[0]):
            user_ids[sid] = f"{frame[0]}:{frame[1]} {frame[2]}"
    py = py[np.isin(trace.name[py], np.array(list(user_ids) or [-1], dtype=np.int32))]
    found = np.full(rows.size, -1, dtype=np.int64)
    for track in np.unique(trace.track[rows]).tolist():
        frames = py[trace.track[py] == track]
        frames = frames[np.argsort(trace.ts[frames], kind="stable")]
        on = np.flatnonzero(trace.track[rows] == track)
        # nested frames: the latest-starting enclosing one is innermost
        k = intervals.enclosing(trace.ts[frames], trace.end[frames], trace.ts[rows[on]])
        found[on[k >= 0]] = frames[k[k >= 0]]
    names = trace.name[np.maximum(found, 0)].tolist()
    return [user_ids[n] if f >= 0 else None for f, n in zip(found.tolist(), names, strict=True)]


def time_by_line(trace: Trace, top: int = 15) -> list[dict[str, Any]]:
    """User source lines ranked by the device time of the kernels their ops launched (host time
    of top-level ops where nothing ran on a device)."""
    run = np.flatnonzero((trace.kind == KIND_RUNTIME) & (trace.correlation >= 0))
    dev = np.flatnonzero(trace.of_kind(*DEVICE_KINDS) & (trace.correlation >= 0))
    if run.size and dev.size:
        corr, inverse = np.unique(trace.correlation[dev], return_inverse=True)
        dev_ns = np.bincount(inverse.reshape(-1), weights=trace.dur[dev].astype(np.float64))
        pos = np.minimum(np.searchsorted(corr, trace.correlation[run]), corr.size - 1)
        weights = np.where(corr[pos] == trace.correlation[run], dev_ns[pos], 0.0)
        rows, what = run[weights > 0], "device"
        weights = weights[weights > 0]
    else:
        rows = np.flatnonzero(trace.kind == KIND_CPU_OP)
        rows, what = _top_level(trace, rows), "host"
        weights = trace.dur[rows].astype(np.float64)
    lines = user_frames(trace, rows)
    agg: dict[str, list[float]] = {}
    for line, w in zip(lines, weights.tolist(), strict=True):
        if line is not None:
            a = agg.setdefault(line, [0.0, 0])
            a[0] += w
            a[1] += 1
    ranked = sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]
    return [{"line": k, "time_ns": int(v[0]), "events": int(v[1]), "timed_on": what}
            for k, v in ranked]  # fmt: skip


def _top_level(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The rows not nested in another of the given rows on the same thread."""
    keep = []
    for track in np.unique(trace.track[rows]).tolist():
        r = rows[trace.track[rows] == track]
        r = r[np.lexsort((-trace.dur[r], trace.ts[r]))]
        running_end = np.maximum.accumulate(trace.end[r])
        nested = np.zeros(r.size, dtype=bool)
        nested[1:] = trace.end[r][1:] <= running_end[:-1]
        keep.append(r[~nested])
    return np.concatenate(keep) if keep else rows[:0]
