"""Interval arithmetic on int64 nanosecond arrays: unions, overlaps, sweeps. No trace knowledge."""

from __future__ import annotations

import numpy as np


def unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` (sorted distinct values, flattened), without the masked-array check
    numpy 2 makes first, which imports numpy.ma: a tenth of the cost of importing numpy, in a
    process (`trainready analyze`) that never uses masked arrays."""
    a = np.sort(np.asarray(values), axis=None)
    if a.size > 1:
        keep = np.empty(a.size, dtype=bool)
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
        a = a[keep]
    return a


def isin(values: np.ndarray, test: np.ndarray) -> np.ndarray:
    """`np.isin(values, test)` for the int arrays of a trace, by binary search in the sorted
    distinct `test` (np.isin's sort method takes np.unique's path that imports numpy.ma)."""
    values = np.asarray(values)
    table = unique(test)
    if table.size == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.searchsorted(table, values)
    at[at == table.size] = 0
    return table[at] == values


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge possibly overlapping intervals [start, end) into sorted disjoint ones.

    Intervals that touch stay separate (an interval starting exactly where the running end is
    starts a new group only if strictly after it, as HolisticTraceAnalysis merges).
    """
    if start.size == 0:
        return start.astype(np.int64), end.astype(np.int64)
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = end[order]
    running_end = np.maximum.accumulate(e)
    new_group = np.ones(s.size, dtype=bool)
    new_group[1:] = s[1:] > running_end[:-1]
    first = np.flatnonzero(new_group)
    return s[first], np.maximum.reduceat(e, first)


def total(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of the intervals."""
    s, e = union(start, end)
    return int((e - s).sum())


def sweep(sets: list[tuple[np.ndarray, np.ndarray]]) -> dict[int, int]:
    """Time covered by each combination of interval sets.

    `sets[i]` is (start, end) of set i. Returns {bitmask: ns}, where bit i of the mask is set when
    set i covers the time; mask 0 (covered by none, between the first start and last end) is
    included.
    """
    times = []
    deltas = []
    for bit, (start, end) in enumerate(sets):
        s, e = union(start, end)
        times += [s, e]
        deltas += [np.full(s.size, 1 << bit, np.int64), np.full(e.size, -(1 << bit), np.int64)]
    if not times:
        return {}
    t = np.concatenate(times)
    d = np.concatenate(deltas)
    if t.size == 0:
        return {}
    order = np.argsort(t, kind="stable")
    t = t[order]
    running = np.cumsum(d[order])
    seg = np.diff(t)
    masks = running[:-1]
    out: dict[int, int] = {}
    for mask in unique(masks).tolist():
        out[int(mask)] = int(seg[masks == mask].sum())
    return out


def intersection_total(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length of time covered by both interval sets."""
    return sweep([a, b]).get(3, 0)


def previous_greater(values: np.ndarray) -> np.ndarray:
    """For each position j: the nearest i < j with values[i] > values[j], -1 if none."""
    out = [-1] * values.size  # a list: one numpy store per position costs more than the walk
    stack: list[int] = []
    vals = values.tolist()
    for j, v in enumerate(vals):
        while stack and vals[stack[-1]] <= v:
            stack.pop()
        if stack:
            out[j] = stack[-1]
        stack.append(j)
    return np.array(out, dtype=np.int64)


def enclosing(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`: the last interval (in the given order, sorted by start) with
    start <= t <= end, -1 if none. Intervals that end before t are skipped along the chain of
    previous larger ends: everything between an interval and that one ends even earlier, so
    each query takes as many steps as its nesting depth, not one per earlier interval."""
    cand = np.searchsorted(starts, at, side="right") - 1
    if cand.size == 0 or starts.size == 0:
        return np.full(at.size, -1, dtype=np.int64)
    prev = None  # built on the first step back: often none is needed (a time at an op's start)
    live = np.flatnonzero(cand >= 0)
    while live.size:
        live = live[ends[cand[live]] < at[live]]  # the candidate ended before the time
        if not live.size:
            break
        if prev is None:
            prev = previous_greater(ends)
        cand[live] = prev[cand[live]]
        live = live[cand[live] >= 0]
    return cand
