"""Source mapping: which line of the user's code each op, and its device time, comes from.

Needs Python stacks (`with_stack=True`, as `trainready profile` records): python_function events
named "path(line): function", nested on the thread that ran them. An op's user frame is the
innermost enclosing frame outside PyTorch, the standard library, site-packages and trainready's
own capture (so a `model(x)` call in train.py maps to train.py, not to torch/nn/modules/...).

The profiler's Python tracer records calls, not lines: a frame's line is where the function was
entered (its `def`), and a module-level frame's is only the line running when profiling started,
which says nothing (a training loop at module level would all land on it). So "your code" ranks
the user frame together with the call it made that led to the op — `train.py <module> →
backward (torch/_tensor.py)`, `train.py:12 train_step → Linear_0 (nn.Module)` — which splits a
loop into its steps. Wrapper frames (`_call_impl`, an optimizer's `wrapper`...) are looked
through to the call they wrap.

The tool's own frames (the capture that ran the script, runpy) are never the user's: they are
neither user frames nor shown in an event's Python stack (`is_tool_frame`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from trainready.profile import intervals
from trainready.profile.trace import DEVICE_KINDS, KIND_CPU_OP, KIND_PYTHON, KIND_RUNTIME, Trace

_FRAME = re.compile(r"^(?P<path>.+)\((?P<line>\d+)\): (?P<func>.*)$")
_INTERNAL = re.compile(
    r"(^<)|(^torch/)|(/torch/)|(site-packages/)|(dist-packages/)|((^|/)trainready/profile/)"
    r"|(/lib/python3\.\d+/)|(^threading\.py$)|(^runpy\.py$)"
)
# The frames trainready profile itself adds above the user's script: its capture, and runpy
# running the script as __main__ (a path, or "<frozen runpy>").
_TOOL = re.compile(r"^((.*/)?trainready/profile/capture\.py|(.*/)?runpy\.py|<frozen runpy>)\(")
# Frames that only pass a call on: the call they wrap names it better.
_WRAPPERS = frozenset(
    {"_wrapped_call_impl", "_call_impl", "wrapper", "_use_grad", "inner", "_fn",
     "decorate_context", "__call__", "<lambda>"}
)  # fmt: skip
_CALL_DEPTH = 4  # frames below a user frame looked through for a call that is not a wrapper
_BUILTIN = re.compile(r"^<built-in (?:method|function) (\w+)")


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """'train.py(12): forward' -> ('train.py', 12, 'forward'); None for other names."""
    m = _FRAME.match(name)
    return (m["path"], int(m["line"]), m["func"]) if m else None


def is_user_frame(path: str) -> bool:
    return _INTERNAL.search(path) is None


def is_tool_frame(name: str) -> bool:
    """A python_function event of trainready's own capture or of runpy, not the user's."""
    return _TOOL.match(name) is not None


def _frame_label(path: str, line: int, func: str) -> str:
    # A module-level frame's line is where profiling started: not worth printing.
    return f"{path} {func}" if func == "<module>" else f"{path}:{line} {func}"


def call_name(name: str) -> str | None:
    """How a call reads: 'backward (torch/_tensor.py)', 'Linear_0 (nn.Module)', 'pow
    (built-in)'; None for a wrapper that only passes the call on."""
    if name.startswith("nn.Module: "):
        return f"{name.removeprefix('nn.Module: ')} (nn.Module)"
    frame = parse_frame(name)
    if frame is not None:
        path, _, func = frame
        if func in _WRAPPERS:
            return None
        short = path.split("site-packages/")[-1].split("dist-packages/")[-1]
        return f"{func} ({short})"
    builtin = _BUILTIN.match(name)
    return f"{builtin[1]} (built-in)" if builtin else name


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For frames sorted by start (the longer first on a tie): each one's innermost enclosing
    frame, -1 if none (the nearest earlier frame that ends no earlier)."""
    out = np.full(starts.size, -1, dtype=np.int64)
    stack: list[int] = []
    ends_list = ends.tolist()
    for j, end in enumerate(ends_list):
        while stack and ends_list[stack[-1]] < end:
            stack.pop()
        if stack:
            out[j] = stack[-1]
        stack.append(j)
    return out


def user_calls(trace: Trace, rows: np.ndarray) -> list[str | None]:
    """For each given host row: its innermost enclosing user frame and the call that frame made
    towards the row, "path:line function → call" ("path <module> → call" at module level);
    None where no user frame encloses it, or where the tool's own frames issued it (the
    capture's hook on the optimizer step that advances the profiler)."""
    py_all = np.flatnonzero(trace.kind == KIND_PYTHON)
    labels: list[str | None] = [None] * rows.size
    names = trace.strings
    for track in intervals.unique(trace.track[rows]).tolist():
        frames = py_all[trace.track[py_all] == track]
        frames = frames[np.lexsort((-trace.dur[frames], trace.ts[frames]))]
        on = np.flatnonzero(trace.track[rows] == track)
        if not frames.size:
            continue
        frame_names = [names[i] for i in trace.name[frames].tolist()]
        parsed = [parse_frame(n) for n in frame_names]
        user = np.array([f is not None and is_user_frame(f[0]) for f in parsed], dtype=bool)
        tool = np.array([is_tool_frame(n) for n in frame_names], dtype=bool)
        parent = _parents(trace.ts[frames], trace.end[frames])
        cur = intervals.enclosing(trace.ts[frames], trace.end[frames], trace.ts[rows[on]])
        below = np.full((on.size, _CALL_DEPTH), -1, dtype=np.int64)  # nearest the user frame first
        in_tool = np.zeros(on.size, dtype=bool)  # issued by the tool (the profiler's own hook)
        live = np.flatnonzero(cur >= 0)
        live = live[~user[cur[live]]]
        while live.size:  # up the chain to the user frame, one level per pass, all rows at once
            in_tool[live] |= tool[cur[live]]
            below[live, 1:] = below[live, :-1]
            below[live, 0] = cur[live]
            cur[live] = parent[cur[live]]
            live = live[cur[live] >= 0]
            live = live[~user[cur[live]]]
        cur[in_tool] = -1
        for k, (frame, calls) in enumerate(zip(cur.tolist(), below.tolist(), strict=True)):
            if frame < 0:
                continue
            path, line, func = parsed[frame]
            call = next((c for i in calls if i >= 0 and (c := call_name(frame_names[i]))), None)
            labels[on[k]] = _frame_label(path, line, func) + (f" → {call}" if call else "")
    return labels


def user_frames(trace: Trace, rows: np.ndarray) -> list[str | None]:
    """For each given host row, "path:line function" of its innermost enclosing user frame."""
    py = np.flatnonzero(trace.kind == KIND_PYTHON)
    user_ids = {}
    for sid in intervals.unique(trace.name[py]).tolist():
        frame = parse_frame(trace.strings[sid])
        if frame and is_user_frame(frame[0]):
            user_ids[sid] = f"{frame[0]}:{frame[1]} {frame[2]}"
    py = py[intervals.isin(trace.name[py], np.array(list(user_ids) or [-1], dtype=np.int32))]
    found = np.full(rows.size, -1, dtype=np.int64)
    for track in intervals.unique(trace.track[rows]).tolist():
        frames = py[trace.track[py] == track]
        frames = frames[np.argsort(trace.ts[frames], kind="stable")]
        on = np.flatnonzero(trace.track[rows] == track)
        # nested frames: the latest-starting enclosing one is innermost
        k = intervals.enclosing(trace.ts[frames], trace.end[frames], trace.ts[rows[on]])
        found[on[k >= 0]] = frames[k[k >= 0]]
    names = trace.name[np.maximum(found, 0)].tolist()
    return [user_ids[n] if f >= 0 else None for f, n in zip(found.tolist(), names, strict=True)]


def time_by_line(trace: Trace, top: int = 15) -> list[dict[str, Any]]:
    """User frames and the calls they made (`user_calls`), ranked by the device time of the
    kernels their ops launched (host time of top-level ops where nothing ran on a device)."""
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
    lines = user_calls(trace, rows)
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
    for track in intervals.unique(trace.track[rows]).tolist():
        r = rows[trace.track[rows] == track]
        r = r[np.lexsort((-trace.dur[r], trace.ts[r]))]
        running_end = np.maximum.accumulate(trace.end[r])
        nested = np.zeros(r.size, dtype=bool)
        nested[1:] = trace.end[r][1:] <= running_end[:-1]
        keep.append(r[~nested])
    return np.concatenate(keep) if keep else rows[:0]
