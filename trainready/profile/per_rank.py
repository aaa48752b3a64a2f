"""The summaries of a trace file or a directory of per-rank traces, the files side by side.

Each file is loaded (through the parsed-column cache, `cache.load_cached`) and summarised
(`summary.summary`) on its own: in a forked child per file, up to one per usable core, when
there are several files and cores, else one after another here. A child sends back only its
summary, a JSON-ready dict of kilobytes where the trace's columns are megabytes, and no trace
outlives its summary, so memory holds one trace per process rather than every rank at once.

Ranks are settled as `trace.load` settles them (`trace.settled_ranks`): each file's
distributedInfo rank, or the files numbered in name order when those repeat; the summaries come
sorted by rank. A file that is not a trace raises its TraceError, the first in name order, as a
sequential load would; a child that dies is a TraceError naming the directory. Why:
HolisticTraceAnalysis parses a directory's ranks in a process pool, so on a multi-rank directory
a sequential `analyze` gave up what it gains on one file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from trainready.profile.cache import load_cached
from trainready.profile.summary import summary
from trainready.profile.trace import TraceError, settled_ranks, trace_files


def summaries(
    path: str | Path,
    trim_last_step: bool = True,
    peak_flops: float | None = None,
    workers: int | None = None,
    rows: bool = True,
) -> list[dict[str, Any]]:
    """One summary per trace file at `path` (a file or a directory), sorted by rank.

    `workers`: processes at most (None: the usable cores; 1: all in this process); `rows`:
    as `summary.summary`'s."""
    files = trace_files(path)
    args = [(f, trim_last_step, peak_flops, rows) for f in files]
    n = _workers(len(files), workers) if len(files) > 1 else 1
    if n > 1 and _can_fork():
        import multiprocessing  # (here: one file never pays for importing the pool)
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        # fork: the child has numpy and trainready loaded already (spawn would import them anew)
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=n, mp_context=context) as pool:
            futures = [pool.submit(_summary, *a) for a in args]
            try:  # the first failure in name order raises
                out = [future.result() for future in futures]
            except BrokenProcessPool:  # every unfinished file fails with it: which died is unknown
                raise TraceError(
                    f"{path}: a process summarising its traces died (killed, or out of memory); "
                    "analyze the files one at a time to find which"
                ) from None
    else:
        out = [_summary(*a) for a in args]
    for s, rank in zip(out, settled_ranks([s["rank"] for s in out]), strict=True):
        s["rank"] = rank
    return sorted(out, key=lambda s: s["rank"])


def _summary(
    path: Path, trim_last_step: bool, peak_flops: float | None, rows: bool
) -> dict[str, Any]:
    return summary(load_cached(path), trim_last_step, peak_flops, rows)


def _workers(files: int, workers: int | None) -> int:
    """Processes for `files` files: `workers`, else one per usable core; never more than files.
    (Only asked for several files: one file never loads the runner's package.)"""
    from trainready.core.concurrency import usable_cores

    return min(files, usable_cores() if workers is None else max(1, workers))


def _can_fork() -> bool:
    """Forking is safe only without other threads (a thread holding a lock would leave the
    child that lock held forever), and only where the platform has it (not Windows; macOS has
    it, but its system libraries may not survive it: spawn is its default)."""
    import threading

    return sys.platform == "linux" and threading.active_count() == 1
