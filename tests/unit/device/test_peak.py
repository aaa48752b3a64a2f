"""The peak calibration's warm-up and agreement (`device/peak.py` by `device/settle.py`'s rule),
on planted timings: a fake `_time_matmuls` on a fake clock, never the test machine's speed."""

from __future__ import annotations

import pytest

from tests.support.fake_gemm import FakeGemm, SizedGemm
from trainready.device import peak, read_reference

RATE = 1e12


@pytest.fixture
def planted(monkeypatch):
    """calibrate_peak on a SizedGemm (returned; tests set its disturbances), with a steady drift
    reference and no fallback probe."""
    gemm = SizedGemm(rate=RATE)
    monkeypatch.setattr(peak, "_time_matmuls", gemm)
    monkeypatch.setattr(
        peak, "read_reference", lambda d, t: read_reference(d, t, timed=FakeGemm().timed)
    )
    monkeypatch.setattr(peak, "_host_fallbacks", lambda d, t: {})
    return gemm


def _calibrate(**kw):
    return peak.calibrate_peak("cpu", "bf16", start_n=64, max_n=256, budget_s=30.0, **kw)


def _cache():
    kept: dict = {}
    puts: list = []

    def put(key, dtype, flops, details):  # noqa: ANN001, ANN202
        puts.append(flops)
        kept[(key, dtype)] = {"peak_flops": flops, **details}

    return peak.PeakCache(lambda k, t: kept.get((k, t)), put), puts


def test_a_cold_first_call_at_every_size_is_warm_up(planted):
    """Every size's first product is 30x slow: warm-up at each size, so the growth reaches the
    largest size and the samples, sized from a warm call, read the device's rate and agree."""
    c = _calibrate()
    assert c["n"] == 256
    assert c["peak_flops"] == pytest.approx(RATE)
    assert c["agreement"]["agreed"] and c["agreement"]["samples"] == 3
    assert c["agreement"]["warmup_calls"] == 3  # the cold call, then two that agree
    assert c["products_per_sample"] == 1491  # 50 ms of warm 256³ products (33.6 µs)
    assert c["tflops_samples"] == pytest.approx([RATE / 1e12] * 3)


def test_a_disturbed_stretch_is_re_measured_and_the_peak_confirmed(planted):
    """Other work slows two samples in the middle: they disagree with the ones after them and are
    taken again; the peak is the device's, confirmed by three samples in a row."""
    planted.slow = [(0.06, 0.14, 0.3)]
    c = _calibrate()
    assert c["agreement"]["agreed"] and c["agreement"]["remeasured"]
    assert min(c["tflops_samples"]) < 0.8 * RATE / 1e12
    assert c["peak_flops"] == pytest.approx(RATE)


def test_a_calibration_that_never_settles_is_unconfirmed_and_not_cached(planted, monkeypatch):
    """Speed that jumps every 50 ms: no three samples in a row agree. The run still gets a peak
    (the fastest sample), labelled unconfirmed, and the cache keeps none: the next run measures
    again rather than reuse a figure no two samples backed."""
    planted.slow = [(0.05 * k, 0.05 * (k + 1), 0.5) for k in range(0, 100, 2)]
    c = _calibrate()
    assert not c["agreement"]["agreed"] and c["agreement"]["stopped"] == "unstable"
    assert c["agreement"]["samples"] == 9
    cache, puts = _cache()
    record = peak._measured_record(None, "bf16", c, "key")
    assert "unconfirmed: its 9 samples never had 3 in a row agree within 10%" in record["label"]
    peak_calls = []
    real = peak.calibrate_peak

    def counted(device, dtype):  # noqa: ANN001, ANN202
        peak_calls.append(dtype)
        return real(device, dtype, start_n=64, max_n=256, budget_s=30.0)

    monkeypatch.setattr(peak, "calibrate_peak", counted)
    first = peak.resolve_peak("cpu", "bf16", cache)
    peak.resolve_peak("cpu", "bf16", cache)
    assert "unconfirmed" in first["label"] and first["agreement"]["agreed"] is False
    assert puts == [] and peak_calls == ["bf16", "bf16"]  # measured again, never cached


def test_a_confirmed_calibration_is_cached_with_its_agreement_and_reference(planted):
    cache, puts = _cache()
    first = peak.resolve_peak("cpu", "bf16", cache)
    assert len(puts) == 1 and first["agreement"]["agreed"]
    assert "unconfirmed" not in first["label"]
    assert first["reference_flops"] == pytest.approx(2.0 * 512**3 / 0.0006)
    assert first["reference"]["agreed"] and first["reference"]["samples"] == 3
    again = peak.resolve_peak("cpu", "bf16", cache)
    assert len(puts) == 1 and again["flops"] == first["flops"]


def test_a_budget_spent_before_the_samples_agree_is_unconfirmed(planted):
    c = peak.calibrate_peak("cpu", "bf16", start_n=64, max_n=256, budget_s=0.0)
    assert c["agreement"]["stopped"] == "budget" and c["agreement"]["samples"] == 1
    label = peak._measured_record(None, "bf16", c, "key")["label"]
    assert "unconfirmed: its budget ended after 1 of the 3 samples" in label


def test_a_bigger_size_that_runs_slower_is_not_taken(planted):
    """At 256³ the device runs at half the rate of 128³ (a disturbed or a worse kernel): the
    smaller size is sampled, so a slow large product is not taken as the peak."""
    planted.rates = {256: RATE / 2}
    c = _calibrate()
    assert c["n"] == 128 and c["peak_flops"] == pytest.approx(RATE)


def test_an_old_calibration_without_an_agreement_reads_as_before():
    record = peak._measured_record(None, "fp32", {"peak_flops": 1e12, "n": 512}, "key")
    assert record["label"] == "vs measured peak (fp32 matmul calibration, 512³)"
    assert record["agreement"] is None and record["reference"] is None


def test_a_size_slowed_by_a_passing_disturbance_is_warmed_up_again_not_dropped(planted):
    """Other work slows the first warm-up at 256³ (its calls agree, at a third of the rate): the
    size is warmed up again before it may end the growth, and the growth reaches it."""
    planted.slow = [(0.0011, 0.0014, 0.3)]  # over the calls after 256³'s cold first one
    c = _calibrate()
    assert c["n"] == 256 and c["peak_flops"] == pytest.approx(RATE)
    assert c["agreement"]["warmup_calls"] > 3
