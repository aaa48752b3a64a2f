"""benchmarks/headline_stability.py: two runs' headlines side by side, each timing headline's
interval and whether the two share a value (`reporting.stability`)."""

from __future__ import annotations

from benchmarks.headline_stability import table
from trainready.core.case import Case, Result
from trainready.reporting.stability import Estimate, disagreements, estimates


def _all_reduce(busbw: float, t: float, interval: list[float], concluded: bool) -> Result:
    params = {"family": "coll", "op": "all_reduce_sum", "tensor_dtype": "fp32"}
    metrics = {"busbw_gbps": busbw, "algbw_gbps": busbw, "size_bytes": 2**20, "nranks": 2}
    sampling = {"value": t, "interval": interval, "concluded": concluded}
    return Result(Case("dist", "coll/all_reduce", params), "pass", metrics, {"sampling": sampling})


def test_the_bandwidth_headline_takes_its_interval_from_its_timing():
    # Bandwidth is bytes over time: a time interval of [0.9, 1.2] x the median reads as
    # [1/1.2, 1/0.9] x the bandwidth.
    (label, e), *_ = estimates([_all_reduce(1.0, 1e-3, [0.9e-3, 1.2e-3], True)]).items()
    assert label == "best all_reduce bus bandwidth" and e.conclusive
    assert e.interval[0] == 1 / 1.2 and abs(e.interval[1] - 1 / 0.9) < 1e-12
    short = estimates([_all_reduce(1.0, 1e-3, [0.5e-3, 2e-3], False)])[label]
    assert not short.conclusive


def test_the_table_says_which_intervals_overlap_and_which_do_not():
    first = {"a": Estimate(True, [1.0, 2.0], 1.5), "b": Estimate(True, [1.0, 2.0], 1.5)}
    second = {"a": Estimate(True, [1.8, 3.0], 2.0), "b": Estimate(True, [2.5, 3.0], 2.7)}
    heads = [{"a": {"value": 1.5}}, {"a": {"value": 2.0}}]
    md = table([(heads[0], first), (heads[1], second)])
    rows = {line.split(" | ")[0].strip("| "): line for line in md.splitlines()[2:]}
    assert rows["a"].endswith("| overlap |") and rows["b"].endswith("| no |")
    assert disagreements(first, second) == ["b: [1.0, 2.0] in one run, [2.5, 3.0] in the other"]
    third = {"a": Estimate(False, [5.0, 6.0], 5.5)}
    assert "not both conclusive" in table([(heads[0], first), ({}, third)])
