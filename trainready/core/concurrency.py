"""How many worker processes a device allows (`--jobs` when not given).

Only correctness cases run side by side (`core/suite.py`: KIND); a timing case has the
machine to itself, or on a CPU run the cores it declares (CPU_CORES, `core/schedule.py`). So the
default is how many correctness cases the device can hold at once:

- cpu: one per usable core (each case then runs on one thread), capped so each worker has
  WORKER_MEMORY_GIB of the machine's memory;
- cuda, xpu, mps: processes share the device; up to SHARED_DEVICE_WORKERS, within the same caps
  (the host's cores still compile and feed the tiny correctness models);
- anything else (PrivateUse1 backends, neuron, hpu, xla): 1, because a device there may be held
  by one process at a time (the Neuron runtime gives each NeuronCore to one process) and nothing
  generic says otherwise. `--jobs N` overrides it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

SHARED_DEVICE_TYPES = ("cuda", "xpu", "mps")
SHARED_DEVICE_WORKERS = 4
WORKER_MEMORY_GIB = 3.0


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def default_jobs(device: str) -> int:
    """The default worker count for a run on `device` (a resolved device string)."""
    dev_type = device.split(":", 1)[0]
    if dev_type == "cpu":
        n = usable_cores()
    elif dev_type in SHARED_DEVICE_TYPES:
        n = min(usable_cores(), SHARED_DEVICE_WORKERS)
    else:
        return 1
    memory = _memory_gib()
    if memory is not None:
        n = min(n, max(1, int(memory // WORKER_MEMORY_GIB)))
    return max(1, n)


def threads_per_worker(jobs: int) -> int:
    """CPU threads for a correctness case running beside `jobs - 1` others: the cores shared out,
    so side-by-side cases never oversubscribe the machine."""
    return max(1, usable_cores() // max(1, jobs))


@contextlib.contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op CPU threads set to `n` for the block (None: left as they are)."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
