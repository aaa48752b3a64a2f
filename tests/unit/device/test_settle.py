"""The rule readings of a timed workload follow (`device/settle.py`), on planted timings."""

from __future__ import annotations

import pytest

from tests.support.fake_gemm import FakeGemm
from trainready.device import settle

WORK = 2.0 * 512**3  # FLOPs of one 512³ product
RULE = settle.Rule(sample_s=0.02)


def _measure(gemm: FakeGemm, rule: settle.Rule = RULE, **kw) -> settle.Settled:
    return settle.measure(gemm.timed, WORK, rule, now=gemm.now, **kw)


def _rate(gemm: FakeGemm) -> float:
    return WORK / gemm.product_s


def test_agree():
    assert settle.agree([100, 105, 110], 0.10)
    assert not settle.agree([100, 105, 111], 0.10)
    assert not settle.agree([], 0.10) and not settle.agree([0.0, 1.0], 0.10)


def test_a_slow_first_call_is_warm_up_and_does_not_size_the_samples():
    """The first call 30x a warm one, the second 3x (setup, a thread pool waking up): both are
    warm-up, never a sample, and the samples are sized from a warm call to last 20 ms."""
    gemm = FakeGemm(first=(30, 3))
    r = _measure(gemm)
    assert r.agreed and r.stopped == "agreed"
    assert r.rate == pytest.approx(_rate(gemm))
    assert len(r.warmup_s) == 4  # 30x, 3x, then two warm calls that agree
    assert r.per_sample == 34  # ceil(20 ms / 0.6 ms)
    assert gemm.durations[len(r.warmup_s) :] == pytest.approx([34 * 0.0006] * 3)
    assert r.samples == pytest.approx([_rate(gemm)] * 3)
    assert r.remeasured == [] and r.kept == [0, 1, 2]


def test_the_old_reading_sized_by_the_cold_call_timed_single_products():
    """What went wrong before: sized by a cold first call (4 ms samples), a sample was one 0.6 ms
    product. Sized from a warm call, a sample lasts at least 20 ms, a cold call or not."""
    cold = settle.per_sample(0.004, 30 * 0.0006)
    assert cold == 1
    assert settle.per_sample(0.02, settle.warm_time([30 * 0.0006, 0.0006, 0.0006])) == 34


def test_a_busy_neighbour_in_the_middle_is_re_measured_not_reported():
    """Other work halves the machine's speed for one sample's time in the middle of a reading:
    that sample disagrees with its neighbours and is taken again; the reading is the machine's
    own speed."""
    # two warm calls (1.2 ms), then samples of 20.4 ms: the second from 21.6 to 42 ms
    gemm = FakeGemm(slow=[(0.025, 0.038, 0.5)])
    r = _measure(gemm)
    assert r.agreed
    assert r.rate == pytest.approx(_rate(gemm))
    assert r.samples[1] < 0.8 * _rate(gemm)  # the disturbed sample was seen ...
    assert r.remeasured == [0, 1] and r.kept == [2, 3, 4]  # ... and taken again, never reported


def test_a_sustained_slowdown_is_read_as_the_new_speed():
    """The machine really slows to half in the middle of a reading and stays there: the reading
    is the new speed (the last three samples agree on it), so the drift between readings shows."""
    gemm = FakeGemm(slow=[(0.05, 1e9, 0.5)])
    r = _measure(gemm)
    assert r.agreed
    assert r.rate == pytest.approx(_rate(gemm) / 2)
    assert r.remeasured  # the samples before the change


def test_samples_that_never_agree_are_unstable_with_no_rate():
    """Speed that jumps between full and half every 20 ms: no three samples in a row agree within
    10%, so after 9 samples the reading is unstable and has no rate (no drift figure)."""
    slow = [(0.02 * k, 0.02 * (k + 1), 0.5) for k in range(1, 60, 2)]
    r = _measure(FakeGemm(slow=slow))
    assert not r.agreed and r.stopped == "unstable" and r.rate is None
    assert len(r.samples) == RULE.max_samples and r.kept == []
    assert r.to_json()["agreed"] is False and r.to_json()["samples"] == 9


def test_a_sample_too_short_to_time_is_sized_again():
    """Warm calls slowed by a loaded moment (10x, agreeing with each other) size a sample for
    2 ms at the warm speed: it is dropped and the count sized again from it."""
    gemm = FakeGemm(first=(10, 10))
    r = _measure(gemm)
    assert r.short == 1 and r.agreed
    assert r.per_sample == 34
    assert all(d >= RULE.sample_s for d in gemm.durations[len(r.warmup_s) + 1 :])


def test_warm_up_is_capped():
    gemm = FakeGemm(first=[1, 2] * 20)  # never two calls in a row within 25%
    times = settle.warm_up(gemm.timed, RULE, now=gemm.now)
    assert len(times) == RULE.warmup_calls


def test_a_deadline_stops_sampling_after_one_sample():
    gemm = FakeGemm()
    r = _measure(gemm, deadline=-1.0)
    assert r.stopped == "budget" and len(r.samples) == 1 and r.rate is None


def test_the_record_says_what_was_taken():
    gemm = FakeGemm(slow=[(0.03, 0.045, 0.5)])
    record = _measure(gemm).to_json()
    assert set(record) >= {"agreed", "stopped", "samples", "remeasured", "kept", "warmup_calls"}
    assert record["samples"] == len(record["samples_rate"])
    assert record["tolerance"] == 0.10 and record["window"] == 3 and record["sample_s"] == 0.02
