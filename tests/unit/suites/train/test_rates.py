"""The train suite's steady rates as a rerun must find them: the interval over processes (each
scenario is one process; a rerun's new processes land where this run's scatter says they may),
the drift reference read inside every training process, and when a rate is inconclusive. Fast:
synthetic step times through `judge`, no training."""

from __future__ import annotations

import math

import pytest

from trainready.metrics.ledger import Mode, break_even_range
from trainready.metrics.stats import (
    MAX_DRIFT,
    between_processes,
    hull,
    level_interval,
    median_interval,
    t_quantile,
)
from trainready.suites.train.suite import MODES, Scenario, judge

JITTER = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.01]  # 1% step noise: the bootstrap's share
PEAK = {"flops": 1e9, "label": "vs measured peak", "source": "measured"}


def train_record(
    first_s: float, step_s: float, reference: list[float] | None, unstable: int = 0
) -> dict:
    """One training process's record: steady steps at `step_s` with 1% jitter after a warm-up
    step, and the drift reference's readings where given (also tests/test_headline_stability)."""
    steps = [step_s * j for j in JITTER]
    record = {
        "first_step_s": first_s,
        "first_step_phases": {},
        "step_times_s": [steps[0], *steps],  # one warm-up step, then 7 steady ones
        "clock": "wall",
        "losses": [6.0, 5.5, 5.2, 5.0, 4.9, 4.8, 4.7, 4.6],
        "tokens_per_step": 64,
        "params": 1000,
        "flops_per_token": 6000,
        "world_size": 1,
    }
    if reference is not None:
        record["reference_flops"] = reference
        record["reference_workload"] = "512³ bf16 matmul"
        record["reference_unstable"] = unstable
    return record


def _case(
    steps: dict[str, float],
    reference: dict[str, list[float]] | None = None,
    calibration: float | None = None,
    compiled_x: float = 0.5,
    unstable: dict[str, int] | None = None,
):
    """A case whose eager steady steps ran at `steps[scenario]` seconds (compiled at
    `compiled_x` of it), each scenario's processes reading the drift reference at
    `reference[scenario]` (FLOP/s, after the first step and after the last)."""
    runs = {
        mode: [
            Scenario(
                mode,
                name,
                train_record(
                    first, scale * step, (reference or {}).get(name), (unstable or {}).get(name, 0)
                ),
            )
            for name, step in steps.items()
        ]
        for mode, first, scale in (("eager", 1.0, 1.0), ("compiled", 5.0, compiled_x))
    }
    peak = {**PEAK, "reference_flops": calibration} if calibration else PEAK
    params = {"scenarios": list(steps), "warmup": 1, "dtype": "fp32"}
    return judge(params, runs, peak).diagnostics


def _meets(a: list[float], b: list[float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


# --- the statistics --------------------------------------------------------------------------------


def test_t_quantiles_are_students():
    assert t_quantile(1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile(11) == pytest.approx(2.201, abs=2e-3)  # the expansion past the table
    assert t_quantile(30) == pytest.approx(2.042, abs=2e-3)
    assert t_quantile(5, 0.90) == pytest.approx(2.015, abs=5e-3)
    with pytest.raises(ValueError):
        t_quantile(0)


def test_between_processes_pools_each_groups_scatter_on_the_log_scale():
    # Each group (a mode) two processes 15% apart: one degree of freedom each.
    sd, df = between_processes([[0.1, 0.115], [0.05, 0.0575]])
    assert df == 2 and sd == pytest.approx(math.log(1.15) / math.sqrt(2))
    # A group with one process measures no scatter; none at all: (0, 0).
    assert between_processes([[0.1, 0.115], [0.05]]) == (pytest.approx(sd), 1)
    assert between_processes([[0.1], [0.05]]) == (0.0, 0)
    assert level_interval([0.1], 0.0, 0) is None
    # The level's interval: the geometric mean, +- t(df) sd / sqrt(k) on the log scale.
    lo, hi = level_interval([0.1, 0.115], sd, df)
    centre, half = math.log(0.1 * 0.115) / 2, 4.303 * sd / math.sqrt(2)
    assert (lo, hi) == (
        pytest.approx(math.exp(centre - half)),
        pytest.approx(math.exp(centre + half)),
    )
    assert lo < 0.1 and hi > 0.115  # with two processes, well beyond both
    assert hull([1, 2], None, [0.5, 1.5]) == [0.5, 2]


# --- the rates ------------------------------------------------------------------------------------


def test_processes_that_agree_give_the_steps_noise_and_a_machine_that_held_still():
    d = _case({"cold": 0.1, "warm": 0.1}, {"cold": [1e11, 1e11], "warm": [1e11, 1e11]})
    rate = d["rates"]["main"]["compiled"]
    assert rate["process_step_s"] == pytest.approx([0.05, 0.05])
    assert d["drift_reference"]["between_processes"] == {"sd": pytest.approx(0.0), "df": 2}
    assert d["drift_reference"]["reference"]["moved"] == pytest.approx(0.0)
    assert rate["step_s_interval"] == pytest.approx(rate["step_s_noise_interval"])
    assert not rate["why"] and d["rates"]["main"]["speedup"]["conclusive"]


def test_processes_that_disagree_widen_the_rate_to_where_a_rerun_may_land():
    """Cold and warm (one process each) 15% apart: the rate's interval is the t interval over
    the processes, wide enough for a rerun whose processes both land at either level."""
    d = _case({"cold": 0.1, "warm": 0.115})
    rate = d["rates"]["main"]["compiled"]
    sd, df = between_processes([[0.1, 0.115], [0.05, 0.0575]])
    assert rate["step_s_process_interval"] == pytest.approx(level_interval([0.05, 0.0575], sd, df))
    assert rate["step_s_interval"] == pytest.approx(
        hull(rate["step_s_noise_interval"], rate["step_s_process_interval"])
    )
    assert not rate["why"]
    for level in (0.1, 0.115):  # a rerun's processes both fast, or both slow
        rerun = _case({"cold": level, "warm": level})["rates"]["main"]["compiled"]
        assert _meets(rate["tokens_per_s_interval"], rerun["tokens_per_s_interval"])
    # The speedup: per scenario a ratio of two processes, so its scatter is sd * sqrt 2; the
    # ratios here agree (2x in both), and it stays conclusive.
    sp = d["rates"]["main"]["speedup"]
    assert sp["conclusive"] and sp["interval"][0] > 1
    assert sp["process_interval"] == pytest.approx(level_interval([2, 2], sd * math.sqrt(2), df))


def test_processes_apart_beyond_max_drift_make_the_rate_inconclusive():
    d = _case({"cold": 0.1, "warm": 0.13})
    for mode in MODES:
        why = d["rates"]["main"][mode]["why"]
        assert "processes' steady medians differ by 30% (over 25%)" in why
    assert not d["rates"]["main"]["speedup"]["conclusive"]
    assert not d["ledger"]["cold"]["conclusive"]


def test_a_machine_that_slowed_within_a_process_shows_in_its_reference_reading():
    """The processes' medians agree, but the drift reference read after warm's steps ran 20%
    slower than before them: the rate may be that much off; widened, still a number. 30%:
    inconclusive, the move named."""
    still = _case({"cold": 0.1, "warm": 0.1}, {"cold": [1e11, 1e11], "warm": [1e11, 1e11]})
    slowed = {"cold": [1e11, 1e11], "warm": [1e11, 0.83e11]}
    d = _case({"cold": 0.1, "warm": 0.1}, slowed)
    moved = d["drift_reference"]["reference"]["moved"]
    assert moved == pytest.approx(1 / 0.83 - 1)
    assert d["drift_reference"]["moved"] == pytest.approx(moved)
    rate = d["rates"]["main"]["compiled"]
    lo, hi = rate["step_s_noise_interval"]
    assert rate["step_s_interval"] == pytest.approx([lo / (1 + moved), hi * (1 + moved)])
    assert not rate["why"]
    assert not d["ledger"]["cold"]["why"]
    # A rerun on the machine as it was at the end (20% slower throughout) meets it.
    slow = _case({"cold": 0.12, "warm": 0.12})["rates"]["main"]["compiled"]
    assert _meets(rate["tokens_per_s_interval"], slow["tokens_per_s_interval"])
    assert not _meets(
        still["rates"]["main"]["compiled"]["tokens_per_s_interval"], slow["tokens_per_s_interval"]
    )
    far = _case({"cold": 0.1, "warm": 0.1}, {"cold": [1e11, 1e11], "warm": [1e11, 0.77e11]})
    why = far["rates"]["main"]["compiled"]["why"]
    assert why.startswith("the machine's speed moved 30% during the case (drift reference")
    assert not far["rates"]["main"]["speedup"]["conclusive"]


def test_an_unstable_drift_reading_is_said_never_used_as_the_machines_speed():
    """A reading whose samples never agreed (`device/settle.py`) has no speed: the training
    process records None and counts it; the case's rates read inconclusive saying so, and the
    note names it, instead of taking the steady readings alone as the machine's drift."""
    from trainready.core.case import Case, Result
    from trainready.reporting.sections.train import drift_text

    runs = {"cold": [1e11, None], "warm": [1e11, 1e11]}
    d = _case({"cold": 0.1, "warm": 0.1}, runs, unstable={"cold": 1})
    ref = d["drift_reference"]["reference"]
    assert (ref["unstable"], ref["taken"], ref["readings_flops"]) == (2, 8, [1e11] * 6)
    why = d["rates"]["main"]["compiled"]["why"]
    assert why == (
        "the drift reference was unstable in 2 of 8 readings in the training processes (their "
        "samples never agreed: the machine was not steady)"
    )
    result = Result(Case("train", "c"), "pass", {}, d, "run", 0.0, 1.0)
    assert "GFLOP/s in the training processes; unstable in 2 of 8 readings" in drift_text(result)


def test_a_machine_slower_than_at_the_peaks_calibration_widens_rates_not_the_speedup():
    """Every reading of this case 20% below the one taken with the peak's calibration: the
    machine is not the one the peak (and the last run) saw. The rates and MFU widen by the move;
    the speedup, a ratio of modes timed in turn on the machine as it is now, does not."""
    readings = {"cold": [0.83e11, 0.83e11], "warm": [0.83e11, 0.83e11]}
    d = _case({"cold": 0.12, "warm": 0.12}, readings, calibration=1e11)
    ref = d["drift_reference"]["reference"]
    assert ref["moved_in_case"] == pytest.approx(0.0)
    assert ref["moved"] == pytest.approx(1 / 0.83 - 1)
    rate = d["rates"]["main"]["compiled"]
    lo, hi = rate["step_s_noise_interval"]
    assert rate["step_s_interval"] == pytest.approx(
        [lo / (1 + ref["moved"]), hi * (1 + ref["moved"])]
    )
    assert rate["mfu_interval"][0] < rate["mfu"] / 1.2
    sp = d["rates"]["main"]["speedup"]
    assert sp["interval"] == pytest.approx(sp["noise_interval"])
    # A run at the calibration's speed meets it.
    fast = _case({"cold": 0.1, "warm": 0.1})["rates"]["main"]["compiled"]
    assert _meets(rate["tokens_per_s_interval"], fast["tokens_per_s_interval"])
    far = _case({"cold": 0.13, "warm": 0.13}, {"cold": [0.77e11] * 2, "warm": [0.77e11] * 2}, 1e11)
    assert (
        "during the case and since the peak's calibration" in far["rates"]["main"]["eager"]["why"]
    )


def test_a_pool_of_one_process_takes_the_cases_scatter():
    """shape_change is one process per mode: no scatter of its own, but the case measured how
    far a process lands from its level, and a rerun's shape_change process is one more draw."""
    d = _case({"cold": 0.1, "warm": 0.11, "shape_change": 0.05})
    sd, df = d["drift_reference"]["between_processes"].values()
    assert df == 2 and sd > 0
    rate = d["rates"]["shape_change"]["compiled"]
    assert rate["step_s_process_interval"] == pytest.approx(level_interval([0.025], sd, df))
    lo, hi = rate["step_s_interval"]
    assert lo < 0.025 / 1.1 and hi > 0.025 * 1.1


def test_one_process_per_mode_measures_no_scatter_and_says_so_by_its_sample():
    """Cold only (the smoke preset): nothing measured between processes, the interval is the
    steps' noise, as before; the drift is unknown without a reference."""
    d = _case({"cold": 0.1})
    rate = d["rates"]["main"]["compiled"]
    assert rate["step_s_process_interval"] is None
    assert rate["step_s_interval"] == pytest.approx(median_interval([0.05 * j for j in JITTER]))
    assert d["drift_reference"]["between_processes"]["df"] == 0
    assert d["drift_reference"]["moved"] is None


def test_the_ledger_uses_the_same_interval():
    """The break-even range spans the speedup's interval and first steps moved by the drift."""
    d = _case({"cold": 0.1, "warm": 0.1}, {"cold": [1e11, 1e11], "warm": [1e11, 0.85e11]})
    sp, entry = d["rates"]["main"]["speedup"], d["ledger"]["cold"]
    e, c = (Mode(m, entry["first_step_s"][m], entry["tokens_per_s"][m]) for m in MODES)
    as_measured = break_even_range(e, c, entry["tokens_per_step"], sp["interval"])
    lo, hi = entry["break_even_range"]
    assert lo < as_measured[0] <= entry["break_even_step"] <= as_measured[1] < hi
    assert entry["tokens_per_s"]["compiled"] == d["rates"]["main"]["compiled"]["tokens_per_s"]
    assert MAX_DRIFT == 0.25


def test_a_machine_far_slower_than_at_calibration_leaves_the_speedup_a_number():
    """30% below the calibration's reading, steady within the case: the rates (and MFU, a share
    of that peak) are inconclusive, the speedup and the break-even steps are not."""
    still = {"cold": [0.77e11] * 2, "warm": [0.77e11] * 2}
    d = _case({"cold": 0.13, "warm": 0.13}, still, calibration=1e11)
    assert "since the peak's calibration" in d["rates"]["main"]["compiled"]["why"]
    sp = d["rates"]["main"]["speedup"]
    assert sp["conclusive"] and not sp["why"] and d["ledger"]["cold"]["conclusive"]
    # Moved as far within the case: the speedup too is inconclusive.
    moving = {"cold": [1e11] * 2, "warm": [1e11, 0.77e11]}
    d = _case({"cold": 0.13, "warm": 0.13}, moving, calibration=1e11)
    assert "moved 30% during the case (" in d["rates"]["main"]["speedup"]["why"]


def test_steady_steps_short_of_the_target_say_how_much_more_time_would_do():
    """Only when the pooled steps' interval is wider than ±5% and a process's budget ran out."""
    from trainready.suites.train.rates import processes_needed, steps_short

    short = {
        "concluded": False,
        "samples": 9,
        "spent_s": 0.9,
        "half_width": 0.2,
        "target": 0.05,
        "extra_s": 0.5,
        "needed_s": 1.1,
        "option": "--set step_timing_s=2",
    }
    by = {"cold": {"sampling": short}, "warm": {"sampling": {"concluded": True}}}
    assert steps_short(by, ["cold", "warm"], 0.04) is None  # the pooled steps are tight enough
    assert steps_short(by, ["cold", "warm"], 0.08) == (
        "budget ran out in 1 of 2 processes' steady steps (a median's 95% interval not within "
        "±5%); about 1.1 s more in all would likely conclude them (--set step_timing_s=2)"
    )
    # Processes as the unit: ±~24% over two processes 10% apart needs many more of them.
    wide = processes_needed([0.1, 0.11], [0.08, 0.14], process_s=4.0)
    assert not wide["concluded"] and wide["more"] > 10 and wide["more_s"] == 4.0 * wide["more"]
    assert processes_needed([0.1, 0.1], [0.099, 0.101], 4.0)["concluded"]
    assert processes_needed([0.1], None, 4.0) is None
