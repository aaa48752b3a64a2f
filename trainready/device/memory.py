"""Memory in use on a device (the allocator's counters, or the process's RSS on the cpu), and
telling an out-of-memory error from other failures."""

from __future__ import annotations

import os
import re
import resource
import sys
from pathlib import Path
from typing import Any

import torch

from trainready.device.compat import accelerator_api


# -- memory ---------------------------------------------------------------------------------------
def _proc_status_bytes(field: str) -> int | None:
    """A 'kB' field of /proc/self/status (Linux), in bytes."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{field}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _peak_rss_bytes() -> int:
    # VmHWM honours reset_peak_memory (clear_refs); ru_maxrss is the lifetime peak.
    hwm = _proc_status_bytes("VmHWM")
    if hwm is not None:
        return hwm
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, KiB on Linux


def _total_ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    try:
        m = re.search(r"^MemTotal:\s+(\d+)\s+kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def _optional(
    fn: Any, *args: Any, unavailable: dict[str, str] | None = None, metrics: tuple[str, ...] = ()
) -> Any:
    """Call a backend query that a given backend may not implement; None when it does not.

    With `unavailable`, the reason is recorded there for each of `metrics` (what the query would
    have given), so a metric the backend or torch cannot give is reported, never dropped silently.
    """
    try:
        return fn(*args)
    except (RuntimeError, NotImplementedError, AttributeError, ValueError, TypeError) as e:
        if unavailable is not None:
            name = getattr(fn, "__qualname__", None) or repr(fn)
            message = str(e).strip().splitlines()[0] if str(e).strip() else ""
            why = f"{name} raised {type(e).__name__}" + (f": {message}" if message else "")
            unavailable.update(dict.fromkeys(metrics, why))
        return None


def memory_stats(device: str) -> dict[str, Any] | None:
    """Bytes in use on the device: allocated, reserved, peak_allocated, total (those known).

    `source` says what the numbers are: "allocator" (the backend's caching allocator) on
    accelerators, "process-rss" (resident set of this process) on the cpu. A metric that cannot
    be had (this torch lacks the API, or the backend raises) is in `unavailable` with the reason:
    {metric: why}. None if nothing is known and there is no reason to give.
    """
    dev = torch.device(device)
    unavailable: dict[str, str] = {}
    if dev.type == "cpu":
        stats = {
            "allocated": _proc_status_bytes("VmRSS"),
            "peak_allocated": _peak_rss_bytes(),
            "total": _total_ram_bytes(),
        }
        source = "process-rss"
    else:

        def query(api: str, *metrics: str) -> Any:
            fn = accelerator_api(api)
            if fn is None:  # an older torch than the one this was written for
                why = f"torch {torch.__version__} has no torch.accelerator.{api}"
                unavailable.update(dict.fromkeys(metrics, why))
                return None
            return _optional(fn, dev, unavailable=unavailable, metrics=metrics)

        mem_info = query("get_memory_info", "total")
        stats = {
            "allocated": query("memory_allocated", "allocated"),
            "reserved": query("memory_reserved", "reserved"),
            "peak_allocated": query("max_memory_allocated", "peak_allocated"),
            "total": mem_info[1] if mem_info else None,
        }
        source = "allocator"
    known = {k: int(v) for k, v in stats.items() if v is not None}
    if not known and not unavailable:
        return None
    return {**known, "source": source, **({"unavailable": unavailable} if unavailable else {})}


def reset_peak_memory(device: str) -> bool:
    """Start a new peak-memory window; False when the device cannot reset its peak."""
    dev = torch.device(device)
    if dev.type != "cpu":
        try:
            torch.accelerator.reset_peak_memory_stats(dev)
        except (RuntimeError, NotImplementedError, AttributeError, ValueError):
            return False
        return True
    try:
        # Linux >= 4.0: writing 5 resets VmHWM (the peak RSS) to the current RSS.
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def is_oom(exc: BaseException) -> bool:
    """Whether an exception means the device or host ran out of memory."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc).lower()
        return any(
            s in text for s in ("can't allocate memory", "not enough memory", "out of memory")
        )
    return False
