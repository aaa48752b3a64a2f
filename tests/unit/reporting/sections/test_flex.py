"""The flex speed headline over cases timed by the adaptive sampler."""

from trainready.core.case import Case, Result
from trainready.reporting.sections.flex import tflops_stat


def _result(i: int, sampling: dict | None) -> Result:
    case = Case("flex", f"v{i}/fwd", {"variant": f"v{i}", "pass": "fwd"})
    return Result(case, "pass", {"tflops": 1.0}, {"sampling": sampling}, "run", 0.0, 1.0)


def test_median_tflops_is_inconclusive_only_where_a_sampling_budget_ran_out():
    done = {"concluded": True}
    assert tflops_stat("t", 1.5, [_result(0, done), _result(1, None)]).value == 1.5
    short = {
        "concluded": False,
        "samples": 12,
        "spent_s": 2.0,
        "half_width": 0.09,
        "target": 0.05,
        "needed_s": 4.2,
        "option": "--set timing_s=7",
    }
    stat = tflops_stat("t", 1.5, [_result(0, short)])
    assert stat.value == "inconclusive"
    assert stat.note == (
        "budget ran out: 12 samples in 2 s reached ±9.0% (target ±5%); about 4.2 s more would "
        "likely conclude it (--set timing_s=7); measured 1.50"
    )
