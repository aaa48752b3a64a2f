"""`summary`: every analysis of one rank's trace, as one JSON-ready dict: `analysis`'s breakdowns
over its window (temporal, kernel types, idle causes, overlap, launches, steps, hardware rows),
`opflops`' FLOPs and MFU, `deps`' dependency counts and critical paths, `memory` and `source`.
What `trainready analyze` prints and `per_rank` computes per file.
"""

from __future__ import annotations

from typing import Any

from trainready.profile import analysis as A
from trainready.profile.deps import Graph, dependencies, dependency_counts, step_critical_paths
from trainready.profile.memory import memory_summary, unrecorded_devices
from trainready.profile.opflops import mfu_summary
from trainready.profile.source import time_by_line
from trainready.profile.trace import DEVICE_KINDS, Trace


def summary(
    trace: Trace, trim_last_step: bool = True, peak_flops: float | None = None, rows: bool = True
) -> dict[str, Any]:
    """Every analysis of one rank, as one JSON-ready dict (`peak_flops`: see opflops).

    `rows=False` leaves out "rows" (`analysis.hardware_rows`: a timeline's rows, which the
    printed `analyze` does not show; up to 2 % of a whole `analyze`)."""
    win = A.window(trace, trim_last_step)
    edges = dependencies(trace)
    out = {
        "path": trace.path,
        "rank": trace.rank,
        "device": trace.device_name(),
        "events": len(trace),
        # False for a CPU-only trace: the device tables below then hold nothing to read.
        "device_activity": bool(trace.of_kind(*DEVICE_KINDS).any()),
        # Devices the run used whose kernels the trace does not record (memory events only).
        "unrecorded_devices": unrecorded_devices(trace),
        "window": {
            "trimmed_last_step": win.trimmed_last_step,
            "rows": int(win.keep.sum()),
        },
        "rows": A.hardware_rows(trace) if rows else None,
        "temporal": A.temporal_breakdown(trace, win),
        "kernel_types": A.kernel_type_breakdown(trace, win),
        "idle_time": A.idle_time_breakdown(trace, win),
        "overlap": A.comm_comp_overlap(trace, win),
        "launches": A.launch_stats(trace, win),
        "steps": A.step_breakdown(trace),
        "flops": mfu_summary(trace, peak=peak_flops),
        "dependencies": dependency_counts(edges),
        "critical_path": step_critical_paths(trace, Graph(trace, edges)),
        "memory": memory_summary(trace),
        "source": time_by_line(trace),
    }
    if not rows:
        del out["rows"]
    return out
