"""A case that leaves garbage slow to collect, and records when it ran (a test that a worker frees
a case's garbage before it reports the case done: tests/unit/core/test_worker.py)."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

from trainready.core.case import Case, Outcome

NAME = "litter"
DEFAULT_DTYPE = None
DEFAULT_BUDGET_S = 60.0
KIND = "correctness"


class _SlowToFree:
    """In a reference cycle, so only the cyclic collector frees it; freeing it takes `seconds`,
    then writes the time it was freed to `path`."""

    def __init__(self, path: str, seconds: float):
        self.me, self.path, self.seconds = self, path, seconds

    def __del__(self):
        time.sleep(self.seconds)
        Path(self.path).write_text(repr(time.time()))


def cases(cfg) -> list[Case]:  # noqa: ARG001 - the test builds its jobs itself
    return []


def execute(case: Case, ctx) -> Outcome:  # noqa: ARG001
    start = time.time()
    gc.disable()  # only the worker's own collection after the case frees the cycle
    _SlowToFree(case.params["freed"], case.params["free_s"])
    time.sleep(case.params.get("sleep_s", 0.0))
    return Outcome("pass", metrics={"pid": float(os.getpid()), "start": start, "end": time.time()})
