"""A suite of sleeping cases that record where and when they ran (runner scheduling tests)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from trainready.core.case import Case, Outcome

NAME = "sched"
DEFAULT_DTYPE = None
DEFAULT_BUDGET_S = 60.0
KIND = "correctness"


def cases(cfg) -> list[Case]:
    sleep_s = float(cfg.options.get("sleep_s", 1.0))
    n = int(cfg.options.get("n", 4))
    return [Case(NAME, f"c{i}", {"sleep_s": sleep_s}) for i in range(n)]


def execute(case: Case, ctx) -> Outcome:
    import torch

    start = time.time()
    if "barrier" in case.params:  # wait for the others: proof that `parties` workers are up
        barrier = Path(case.params["barrier"])
        (barrier / str(os.getpid())).touch()
        deadline = time.monotonic() + 30
        while len(list(barrier.iterdir())) < case.params["parties"] and time.monotonic() < deadline:
            time.sleep(0.01)
    time.sleep(case.params["sleep_s"])
    return Outcome(
        "pass",
        metrics={
            "pid": float(os.getpid()),
            "start": start,
            "end": time.time(),
            "threads": float(torch.get_num_threads()),
        },
    )
