"""Memory timeline from the allocator's "[memory]" events (profile_memory=True).

Each event is one allocation (Bytes > 0) or free (Bytes < 0) with, in current Kineto versions, the
allocator's running totals after it ("Total Allocated", "Total Reserved"). Older traces have only
Bytes; the running total is then the cumulative sum from the start of the trace, so it counts
only what was allocated while profiling (blocks allocated before appear when freed as negative).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainready.profile.trace import DEVICE_KINDS, KIND_CPU_OP, Trace

# c10::DeviceType codes as the profiler records them.
DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip",
                7: "fpga", 8: "maia", 9: "xla", 10: "vulkan", 11: "metal", 12: "xpu", 13: "mps",
                14: "meta", 15: "hpu", 16: "ve", 17: "lazy", 18: "ipu", 19: "mtia",
                20: "privateuseone"}  # fmt: skip


CPU, PRIVATEUSE1 = 0, 20
# The trace's top-level key naming the PrivateUse1 backend ("npu", "emu"...), which `trainready
# profile` writes: its memory events carry only the device type code, PRIVATEUSE1.
BACKEND_KEY = "privateuse1Backend"


def device_type_name(trace: Trace, dt: int) -> str:
    """c10's name of a device type code; PrivateUse1 by its backend's name ("npu", "emu") where
    the trace records it (BACKEND_KEY)."""
    backend = trace.meta.get(BACKEND_KEY) if dt == PRIVATEUSE1 else None
    if isinstance(backend, str) and backend.isidentifier():
        return backend
    return DEVICE_TYPES.get(dt, str(dt))


def _devices(trace: Trace) -> list[tuple[int, int]]:
    """(device type code, index) of every device the allocator events name, in order."""
    m = trace.memory
    return sorted(set(zip(m.device_type.tolist(), m.device_id.tolist(), strict=True)))


def _label(trace: Trace, dt: int, di: int) -> str:
    name = device_type_name(trace, dt)
    return name if di < 0 else f"{name}:{di}"


def unrecorded_devices(trace: Trace) -> list[str]:
    """The devices the run allocated memory on although the trace records no device activity
    at all (no kernel, copy, memset or sync): a backend whose kernels the profiler does not see,
    as many PrivateUse1 ones. Their ops' host times are dispatch, not compute ([] otherwise)."""
    if trace.of_kind(*DEVICE_KINDS).any():
        return []
    return [_label(trace, dt, di) for dt, di in _devices(trace) if dt != CPU]


def timelines(trace: Trace) -> dict[str, dict[str, np.ndarray]]:
    """Per device ("cuda:0", "cpu:-1", ...): ts, allocated and reserved bytes after each event."""
    m = trace.memory
    out = {}
    for dt, di in _devices(trace):
        sel = np.flatnonzero((m.device_type == dt) & (m.device_id == di))
        sel = sel[np.argsort(m.ts[sel], kind="stable")]
        totals = m.total_allocated[sel]
        allocated = totals if (totals >= 0).all() else np.cumsum(m.nbytes[sel])
        out[_label(trace, dt, di)] = {
            "ts": m.ts[sel],
            "allocated": allocated,
            "reserved": m.total_reserved[sel],
            "nbytes": m.nbytes[sel],
            "track": m.track[sel],
        }
    return out


def _op_at(trace: Trace, track: int, ts: int) -> str | None:
    """The innermost cpu_op on `track` running at `ts` (latest start among the enclosing ones)."""
    on = np.flatnonzero((trace.track == track) & (trace.kind == KIND_CPU_OP)
                        & (trace.ts <= ts) & (trace.end >= ts))  # fmt: skip
    if on.size == 0:
        return None
    return trace.strings[trace.name[on[np.argmax(trace.ts[on])]]]


def memory_summary(trace: Trace) -> dict[str, Any]:
    """Per device: peak allocated bytes, when and in which op it was reached, peak reserved,
    allocation and free counts, bytes allocated in total."""
    out = {}
    for device, tl in timelines(trace).items():
        i = int(np.argmax(tl["allocated"]))
        reserved = tl["reserved"]
        out[device] = {
            "events": int(tl["ts"].size),
            "allocations": int((tl["nbytes"] > 0).sum()),
            "frees": int((tl["nbytes"] < 0).sum()),
            "allocated_bytes_total": int(tl["nbytes"][tl["nbytes"] > 0].sum()),
            "peak_allocated": int(tl["allocated"][i]),
            "peak_ts_ns": int(tl["ts"][i]),
            "peak_op": _op_at(trace, int(tl["track"][i]), int(tl["ts"][i])),
            "peak_reserved": int(reserved.max()) if (reserved >= 0).any() else None,
            "end_allocated": int(tl["allocated"][-1]),
        }
    return out
