"""Which waiting case may start now, given the cases running: one rule for the local runner and the
Ray executor (on a CPU run, where all actors share one machine's cores).

- A correctness case (suite KIND "correctness") runs on its share of the cores (`share`:
  `threads_per_worker`) beside other correctness cases, as many as there are workers.
- A timing case runs with no other timing case beside it. One that needs the whole machine
  (`cores` None) runs with nothing beside it. One that needs `cores` cores (a CPU run of a suite
  with CPU_CORES, e.g. flex: its timed work runs on that many threads) runs beside correctness
  cases as long as their shares and its cores fit the machine's `total` cores.
- Cases start in plan order. The one exception: while a timing case that needs only some cores
  runs, correctness cases later in the plan may start beside it, ahead of the timing cases
  waiting for it (so on two cores flex's one-core cases take one, one after another, while
  parity's cases take the other). Nothing else is overtaken.

`starting` counts workers still starting (importing torch loads a core): a timing case waits for
them as for running correctness cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Schedulable(Protocol):
    alone: bool  # a timing case
    cores: int | None  # the cores a timing case needs; None: the whole machine


def may_start(
    job: Schedulable, running: Sequence[Schedulable], starting: int, total: int, share: int
) -> bool:
    """Whether `job` may start beside the cases `running` (and `starting` workers)."""
    timing = [j for j in running if j.alone]
    correctness = len(running) - len(timing)
    if job.alone:
        if timing:
            return False
        if job.cores is None or job.cores >= total:  # the whole machine
            return not running and not starting
        return (correctness + starting) * share + job.cores <= total
    if not timing:
        return True
    cores = timing[0].cores
    return cores is not None and (correctness + 1) * share + cores <= total


def next_startable(
    pending: Sequence[Schedulable],
    running: Sequence[Schedulable],
    starting: int,
    total: int,
    share: int,
) -> int | None:
    """The index in `pending` (plan order) of the case to start next, or None (module docstring)."""
    timing_runs = any(j.alone for j in running)
    for i, job in enumerate(pending):
        if may_start(job, running, starting, total, share):
            return i
        if not (timing_runs and job.alone and job.cores is not None):
            return None  # order kept: nothing overtakes this one
    return None
