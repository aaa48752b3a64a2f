"""The matmul MFU headline over cases timed by the adaptive sampler."""

from trainready.core.case import Case, Result
from trainready.reporting.sections.matmul import mfu_at_m


def _case(i: int) -> Case:
    params = {"model": "m", "op": f"op{i}", "M": 128, "N": 4096, "K": 4096, "pass": "fwd"}
    return Case("matmul", f"m/op{i}/M128/fwd", params)


def timed(i: int, mfu: float, interval: list[float], concluded: bool = True, **extra) -> Result:
    sampling = {
        "samples": 40,
        "value": 1.0,
        "interval": interval,
        "half_width": (interval[1] - interval[0]) / 2,
        "concluded": concluded,
        "spent_s": 2.0,
        "target": 0.05,
        **extra,
    }
    metrics = {"mfu": mfu, "spread": 0.02}
    return Result(_case(i), "pass", metrics, {"sampling": sampling}, "run", 0.0, 1.0)


def test_cases_that_concluded_leave_the_headline_to_its_other_rules():
    e = mfu_at_m([timed(0, 0.3, [0.96, 1.04]), timed(1, 0.3, [0.98, 1.02])])
    assert not e.why and e.value == 0.3


def test_a_case_whose_budget_ran_out_makes_the_headline_inconclusive_with_the_time_needed():
    short = timed(1, 0.3, [0.8, 1.2], concluded=False, needed_s=6.5, option="--set timing_s=9")
    e = mfu_at_m([timed(0, 0.3, [0.97, 1.03]), short])
    assert e.why == (
        "budget ran out in 1 of 2 cases (a median's 95% interval not within ±5%); about 6.5 s "
        "more in all would likely conclude them (--set timing_s=9)"
    )
    # A spread over the limit is still said when the sampling concluded.
    wide = timed(0, 0.3, [0.97, 1.03])
    wide.metrics["spread"] = 0.6
    assert mfu_at_m([wide]).why.startswith("timed repeats (median over the cases) spread 60%")
