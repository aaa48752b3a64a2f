"""Do two runs' timing headlines agree? Each headline's estimate as the report reads it, and the
rule a rerun is held to.

A timing headline is stated with an interval (the timing noise, the processes' scatter and the
machine's drift the run's drift reference saw) or as "inconclusive" with the reason. Two runs
contradict each other only where both state a headline conclusively and their intervals share
no value: one of them claimed more than it measured. `tests/e2e/test_headline_stability.py`
holds CI's reruns to it; `benchmarks/headline_stability.py` shows two full runs side by side.

Pure Python over stored results: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainready.core.case import Result
from trainready.reporting.sections.dist import best_all_reduce
from trainready.reporting.sections.matmul import mfu_at_m, run_drift


@dataclass(frozen=True)
class Estimate:
    """One headline: its value (None: none stated), its interval, and whether it concludes."""

    conclusive: bool
    interval: list[float]
    value: float | None = None


def _matmul(results: list[Result]) -> dict[str, Estimate]:
    matmul = [r for r in results if r.case.suite == "matmul"]
    machine = run_drift(matmul)
    passed = [r for r in matmul if r.status == "pass" and "mfu" in r.metrics]
    found = {}
    for m in sorted({r.case.params["M"] for r in passed}):
        e = mfu_at_m([r for r in passed if r.case.params["M"] == m], machine)
        found[f"matmul MFU at M={m}"] = Estimate(not e.why, list(e.interval), e.value)
    return found


def _train(results: list[Result]) -> dict[str, Estimate]:
    """The main pool's headlines of each train case (labelled by the case where there are
    several)."""
    cases = [r for r in results if r.case.suite == "train" and "rates" in r.diagnostics]
    found = {}
    for train in cases:
        tag = f" [{train.case.id}]" if len(cases) > 1 else ""
        rates = train.diagnostics["rates"].get("main") or {}
        if "speedup" in rates:
            sp = rates["speedup"]
            found["compiled steady speedup" + tag] = Estimate(
                sp["conclusive"], sp["interval"], sp["value"]
            )
        if compiled := rates.get("compiled"):
            found["compiled tokens/s" + tag] = Estimate(
                not compiled["why"], compiled["tokens_per_s_interval"], compiled["tokens_per_s"]
            )
        if cold := (train.diagnostics.get("ledger") or {}).get("cold"):
            never = [math.inf if n is None else n for n in cold["break_even_range"]]
            step = cold.get("break_even_step")
            found["break-even step (cold)" + tag] = Estimate(cold["conclusive"], never, step)
    return found


def _all_reduce(results: list[Result]) -> dict[str, Estimate]:
    """The dist suite's bandwidth headline (`sections.dist.best_all_reduce`): its interval from
    its timing's (bandwidth is bytes over time), conclusive where its sampling concluded."""
    found = best_all_reduce([r for r in results if r.case.suite == "dist"])
    if found is None:
        return {}
    best, metric, called = found
    sampling = best.diagnostics.get("sampling") or {}
    bw, t = best.metrics[metric], sampling.get("value")
    lo, hi = sampling.get("interval") or [None, None]
    label = f"best all_reduce {called}"
    if not (t and lo and hi):
        return {label: Estimate(False, [bw, bw], bw)}
    return {label: Estimate(bool(sampling.get("concluded")), [bw * t / hi, bw * t / lo], bw)}


def estimates(results: list[Result]) -> dict[str, Estimate]:
    """{headline label: Estimate} of a run's timing headlines, from what the suites stored, as
    the report reads them: matmul MFU per M, the train rates and break-even, all_reduce busbw."""
    return {**_matmul(results), **_train(results), **_all_reduce(results)}


def disagreements(first: dict[str, Estimate], second: dict[str, Estimate]) -> list[str]:
    """The headlines two runs state conclusively with intervals that share no value: one of
    them claims more than it measured."""
    found = []
    for label in sorted(first.keys() & second.keys()):
        a, b = first[label], second[label]
        lo1, hi1 = a.interval
        lo2, hi2 = b.interval
        if a.conclusive and b.conclusive and not (lo1 <= hi2 and lo2 <= hi1):
            found.append(f"{label}: {a.interval} in one run, {b.interval} in the other")
    return found
