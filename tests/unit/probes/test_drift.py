"""The drift reference as a case keeps it (`probes/drift.py`), read on a fake GEMM: what is the
machine's drift and what is not. Planted timings only (`tests/support/fake_gemm.py`)."""

from __future__ import annotations

import math
import statistics

import pytest

from tests.support.fake_gemm import FakeGemm
from trainready.core.case import Case, Result
from trainready.device import read_reference
from trainready.metrics.stats import MAX_DRIFT, drift, drift_why
from trainready.probes.drift import drift_record
from trainready.reporting.sections.matmul import drift_text, mfu_at_m, run_drift

WORK = 2.0 * 512**3
PEAK = {"flops": 1e12, "reference_flops": WORK / 0.0006}  # read at calibration on a quiet machine


def _read(gemm: FakeGemm):
    return read_reference("cpu", "bf16", timed=gemm.timed)


def _moved(record: dict) -> float | None:
    return drift([*record["readings_flops"], record["calibration_flops"]])


def _old_reading(gemm: FakeGemm) -> float:
    """The reading before issue #39: sized by the first call (which pays the setup) for 4 ms
    samples, the median of 3 samples, no warm-up."""
    first = gemm.timed(1)
    count = max(1, math.ceil(0.004 / first))
    return statistics.median(WORK * count / gemm.timed(count) for _ in range(3))


def test_a_slow_first_call_is_not_drift():
    """A process's first product pays kernel selection and allocation, and the next few a thread
    pool waking up (30x, 3x, 2x, 1.5x a warm call). The old reading took those calls as its
    samples and read the machine at half speed; now they are warm-up, and the readings before
    and after a case agree with each other and with the calibration's."""
    cold = (30, 3, 2, 1.5)
    old = _old_reading(FakeGemm(first=cold))
    assert old < 0.6 * PEAK["reference_flops"]  # the bug, reproduced on the fake

    gemm = FakeGemm(first=cold)
    before, after = _read(gemm), _read(gemm)
    record = drift_record("cpu", "bf16", [before, after], PEAK)
    assert record["readings_flops"] == pytest.approx([PEAK["reference_flops"]] * 2)
    assert _moved(record) == pytest.approx(0.0, abs=1e-9)
    first = record["readings"][0]
    assert first["agreed"] and first["warmup_calls"] == 6  # 30x 3x 2x 1.5x, then two that agree
    assert first["samples"] == 3 and first["remeasured"] == []
    assert first["products_per_sample"] == 34  # 20 ms of warm products
    assert record["unstable"] == 0


def test_a_busy_neighbour_in_the_middle_of_a_reading_is_not_drift():
    """Other work halves the machine's speed for 55 ms in the middle of the second reading, over
    two of its first three samples (a median of three would read it 36% slow): those samples
    are re-measured, and the reading is the machine's own speed."""
    gemm = FakeGemm()
    before = _read(gemm)
    t = gemm.now_s  # the second reading: two warm calls, then samples of 20.4 ms
    gemm.slow = [(t + 0.025, t + 0.08, 0.5)]
    after = _read(gemm)
    record = drift_record("cpu", "bf16", [before, after], PEAK)
    assert _moved(record) == pytest.approx(0.0, abs=1e-9)
    disturbed = record["readings"][1]
    first_three = disturbed["samples_flops"][:3]
    assert statistics.median(first_three) < 0.7 * PEAK["reference_flops"]  # it was seen
    assert disturbed["agreed"] and disturbed["remeasured"] == [0, 1, 2]
    assert disturbed["flops"] == pytest.approx(PEAK["reference_flops"])  # and not reported


def test_a_sustained_slowdown_is_still_drift():
    """The machine really slows to half between two readings and stays there: the second reading
    agrees on the new speed, and the drift says so (and makes a headline inconclusive)."""
    gemm = FakeGemm()
    before = _read(gemm)
    gemm.slow = [(gemm.now_s, math.inf, 0.5)]
    after = _read(gemm)
    record = drift_record("cpu", "bf16", [before, after], PEAK)
    assert record["readings_flops"][1] == pytest.approx(record["readings_flops"][0] / 2)
    assert _moved(record) == pytest.approx(1.0)
    assert drift_why(_moved(record), "during the run") is not None
    assert _moved(record) > MAX_DRIFT


def test_a_slowdown_in_the_middle_of_a_reading_is_read_as_the_new_speed():
    gemm = FakeGemm()
    before = _read(gemm)
    gemm.slow = [(gemm.now_s + 0.03, math.inf, 0.5)]
    after = _read(gemm)
    record = drift_record("cpu", "bf16", [before, after], PEAK)
    assert record["readings"][1]["remeasured"]
    assert _moved(record) == pytest.approx(1.0)


def _unsteady() -> FakeGemm:
    """A machine whose speed jumps between full and half every 20 ms, from now on."""
    return FakeGemm(slow=[(0.02 * k, 0.02 * (k + 1), 0.5) for k in range(0, 200, 2)])


def test_an_unstable_reading_is_counted_and_is_no_drift_figure():
    gemm = _unsteady()
    unstable = _read(gemm)
    assert unstable.flops is None and not unstable.agreed
    steady = _read(FakeGemm())
    record = drift_record("cpu", "bf16", [unstable, steady], PEAK)
    assert record["unstable"] == 1
    assert record["readings_flops"] == pytest.approx([PEAK["reference_flops"]])
    assert record["readings"][0]["stopped"] == "unstable"
    assert record["readings"][0]["samples"] == 9


def test_bare_speeds_still_make_a_record():
    """A caller that kept only the speeds (float, or None for an unstable reading)."""
    record = drift_record("cpu", "bf16", [7e9, None], None)
    assert record["readings_flops"] == [7e9] and record["unstable"] == 1
    assert record["calibration_flops"] is None
    assert record["workload"] == "512³ bf16 matmul"


def _case(record: dict, mfu: float = 0.9) -> Result:
    params = {"model": "m", "op": "q", "M": 128, "pass": "fwd", "dtype": "bf16"}
    return Result(
        Case("matmul", "m/q/M128/fwd", params),
        "pass",
        {"mfu": mfu, "spread": 0.02},
        {"drift_reference": record},
    )


def test_the_report_says_unstable_not_a_drift_number():
    """An unstable reading makes the MFU headline inconclusive by name ("unstable"), never by a
    drift computed from it; readings that agreed give a conclusive one."""
    steady = [_read(FakeGemm()) for _ in range(2)]
    ok = [_case(drift_record("cpu", "bf16", steady, PEAK)) for _ in range(3)]
    assert mfu_at_m(ok, run_drift(ok)).why == ""
    assert run_drift(ok).unstable == 0 and run_drift(ok).taken == 6

    shaky = [*ok[:2], _case(drift_record("cpu", "bf16", [_read(_unsteady()), steady[0]], PEAK))]
    machine = run_drift(shaky)
    assert machine.unstable == 1 and machine.taken == 6 and machine.moved == pytest.approx(0.0)
    why = mfu_at_m(shaky, machine).why
    assert "unstable in 1 of 6 readings" in why and "moved" not in why
    assert "unstable in 1 of 6 readings" in drift_text(machine)


def test_a_reading_both_neighbours_contradict_is_a_transient_not_the_drift():
    """The quiet quick run of 2026-12-06: 87 readings at 702-808 GFLOP/s and one of 1071 (three
    samples of a 60 ms burst agreed), between neighbours of 722 and 721: the machine did not
    move 53% over the run. A move that lasts, a slow reading (a busy neighbour) and a burst at
    either end are told apart."""
    from trainready.metrics.stats import transients, unstable_why, without_transients

    assert transients([754, 722, 1071, 721, 747]) == [2]  # a burst: set aside
    assert transients([754, 740, 380, 745, 747]) == [2]  # a busy neighbour: set aside
    assert transients([750, 750, 750, 520, 520, 520]) == []  # a move that lasts: drift
    assert transients([750, 1070, 1070, 750]) == []  # two readings on a level: not one's word
    assert transients([1071, 722, 721]) == [] and transients([722, 721, 1071]) == []  # the ends
    assert transients([700, 900, 1100]) == []  # a ramp: each agrees with neither, nor they
    kept, aside = without_transients([754, 722, 1071, 721, 747])
    assert kept == [754, 722, 721, 747] and aside == 1

    def gemm(mfu: float, started: float, readings: list[float]) -> Result:
        record = {"workload": "512³ bf16 matmul", "readings_flops": readings, "readings": [{}] * 2}
        record["calibration_flops"] = 758e9
        params = {"model": "m", "op": f"q{started}", "M": 128, "pass": "fwd", "dtype": "bf16"}
        r = Result(Case("matmul", f"m/q{started}/M128/fwd", params), "pass")
        r.metrics, r.diagnostics = {"mfu": mfu, "spread": 0.03}, {"drift_reference": record}
        r.started_at = started
        return r

    # Stored by case id, read in the order run: the burst sits between two agreeing readings.
    run = [
        gemm(0.63, 3.0, [1071e9, 721e9]),
        gemm(0.64, 1.0, [754e9, 740e9]),
        gemm(0.75, 2.0, [740e9, 722e9]),
        gemm(0.74, 4.0, [747e9, 736e9]),
    ]
    machine = run_drift(run)
    assert machine.transient == 1 and machine.moved == pytest.approx(758 / 721 - 1, rel=1e-3)
    assert "1 transient reading set aside" in drift_text(machine)
    assert mfu_at_m(run, machine).why == ""
    # The same burst as the run's first reading has one neighbour only: no word against it.
    run[0].started_at = 0.0
    assert run_drift(run).transient == 0 and run_drift(run).moved > 0.45
    # One unsteady reading among many is no reason to withhold a figure; more than 10% is.
    assert unstable_why(1, 88) is None and unstable_why(1, 6) and unstable_why(9, 88)
