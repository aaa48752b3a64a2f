import time

import pytest
import torch

from trainready.probes import timing
from trainready.probes.timing import TimingStats, benchmark


def test_stats_on_known_samples():
    s = TimingStats.from_samples([5.0, 1.0, 4.0, 2.0, 3.0], clock="wall")
    assert s.median_s == 3.0
    assert (s.min_s, s.max_s, s.mean_s) == (1.0, 5.0, 3.0)
    assert s.stdev_s == pytest.approx(1.5811388, rel=1e-6)  # sample stdev of 1..5
    assert s.iqr_s == pytest.approx(2.0)  # quartiles 2 and 4 (inclusive method)
    assert s.spread == pytest.approx(2.0 / 3.0)
    assert s.repeats == 5 and s.clock == "wall"
    assert s.samples == [5.0, 1.0, 4.0, 2.0, 3.0]  # in the order measured


def test_stats_on_one_sample():
    s = TimingStats.from_samples([0.25], clock="events")
    assert (s.median_s, s.min_s, s.max_s, s.mean_s) == (0.25, 0.25, 0.25, 0.25)
    assert s.stdev_s == 0.0 and s.iqr_s == 0.0 and s.spread == 0.0


def test_stats_need_samples():
    with pytest.raises(ValueError, match="at least one sample"):
        TimingStats.from_samples([], clock="wall")


def test_benchmark_calls_fn_warmup_plus_repeats_times():
    calls = []
    stats = benchmark(lambda: calls.append(1), "cpu", warmup=3, repeats=7, flush_l2=False)
    assert len(calls) == 10
    assert stats.repeats == 7 and len(stats.samples) == 7
    assert stats.clock == "wall"


class FakeClock:
    """`time.perf_counter` that moves only when a test says so: exact timings, whatever the load."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, s: float) -> None:
        self.now += s


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(time, "perf_counter", fake)  # timing.py and the device Timer read it
    return fake


def test_benchmark_times_fn_and_not_the_flush(monkeypatch, clock):
    monkeypatch.setattr(timing, "flush_cache", lambda device: clock.advance(0.05))
    stats = benchmark(lambda: clock.advance(0.01), "cpu", warmup=0, repeats=3, flush_l2=True)
    assert stats.samples == pytest.approx([0.01] * 3)


def test_benchmark_flushes_before_each_timed_repeat_only(monkeypatch):
    events = []
    monkeypatch.setattr(timing, "flush_cache", lambda device: events.append("flush"))
    benchmark(lambda: events.append("fn"), "cpu", warmup=2, repeats=3, flush_l2=True)
    assert events == ["fn", "fn"] + ["flush", "fn"] * 3


def test_benchmark_keeps_each_result_until_its_wait(monkeypatch):
    """A lazy backend (xla) computes only what is alive at its step boundary: a result dropped
    before the clock stops would be timed as no work at all."""
    import weakref

    class Result:
        pass

    alive_at_wait: list[bool] = []
    last: list[weakref.ref] = []

    def fn() -> Result:
        r = Result()
        last[:] = [weakref.ref(r)]
        return r

    monkeypatch.setattr(
        timing, "synchronize", lambda device: alive_at_wait.append(last[0]() is not None)
    )
    monkeypatch.setattr(timing, "Timer", _WaitingTimer.factory(alive_at_wait, last))
    benchmark(fn, "cpu", warmup=2, repeats=3, flush_l2=False)
    assert alive_at_wait == [True] * 5


class _WaitingTimer:
    """A Timer whose stop() records whether the last result is still alive, as a wait would."""

    def __init__(self, seen: list[bool], last: list):
        self.seen, self.last, self.clock = seen, last, "wall"

    @classmethod
    def factory(cls, seen: list[bool], last: list):
        return lambda device: cls(seen, last)

    def start(self) -> None:
        pass

    def stop(self) -> float:
        self.seen.append(self.last[0]() is not None)
        return 0.001


def test_benchmark_time_cap_stops_early_but_times_once(clock):
    calls = []

    def slow():
        calls.append(1)
        clock.advance(0.02)

    t0 = clock.now
    stats = benchmark(slow, "cpu", warmup=2, repeats=100, flush_l2=False, max_time_s=0.11)
    # 2 warm-ups and 3 repeats end at 0.10 s; a fourth would end past the cap at 0.12 s.
    assert (len(calls), stats.repeats) == (5, 3)
    assert clock.now - t0 == pytest.approx(0.10)
    # Even a budget already spent by one call gets one timed repeat.
    stats = benchmark(slow, "cpu", warmup=1, repeats=5, flush_l2=False, max_time_s=0.001)
    assert stats.repeats == 1


def test_benchmark_min_run_repeats_until_enough_time_is_measured():
    stats = benchmark(
        lambda: time.sleep(0.002), "cpu", warmup=0, repeats=2, min_run_s=0.1, flush_l2=False
    )
    assert stats.repeats > 2  # past `repeats`, until the sum and the interval both allow it
    assert sum(stats.samples) >= 0.1 and stats.sampling.concluded


def test_benchmark_a_real_matmul_with_cache_flush():
    a = torch.randn(256, 256)
    stats = benchmark(lambda: a @ a, "cpu", warmup=1, repeats=5)
    assert stats.repeats == 5
    assert 0 < stats.min_s <= stats.median_s <= stats.max_s < 1.0


def test_benchmark_samples_until_the_interval_concludes_or_the_budget_ends(clock):
    """The sampler sets the repeats: a steady fn concludes at `repeats`; a noisy one goes on
    until its budget, then says how much more time would likely have concluded it."""
    steady = benchmark(lambda: clock.advance(0.01), "cpu", warmup=0, repeats=5, max_time_s=10)
    assert steady.repeats == 5 and steady.sampling.concluded
    assert steady.sampling_metrics() == pytest.approx(
        {"concluded": 1.0, "half_width": 0.0, "timing_s": 0.05}
    )
    import random

    rng = random.Random(0)
    noisy = benchmark(
        lambda: clock.advance(rng.lognormvariate(-4.6, 0.6)),
        "cpu",
        warmup=0,
        repeats=5,
        flush_l2=False,
        max_time_s=1.0,
    )
    v = noisy.sampling
    assert not v.concluded and v.stopped == "budget" and noisy.repeats > 20
    assert v.spent_s <= 1.0 + max(noisy.samples) and v.needed_s > 0  # priced at the mean
    assert set(noisy.sampling_metrics()) == {"concluded", "half_width", "timing_s", "needed_s"}


def test_benchmark_rejects_zero_repeats():
    with pytest.raises(ValueError, match="repeats"):
        benchmark(lambda: None, "cpu", repeats=0)


def test_drift_is_fastest_over_slowest_reading_and_widens_both_ways():
    from trainready.metrics.stats import MAX_DRIFT, drift, drift_why, widen

    assert drift([100.0, 80.0, 90.0]) == pytest.approx(0.25)
    assert drift([5.0]) is None and drift([]) is None  # one reading shows no movement
    assert drift([5.0, 0.0]) is None  # a reading of nothing is no speed
    assert drift([5.0], anchor=4.0) == pytest.approx(0.25)  # the calibration counts whole
    # From 10 readings on, the central 80%: a burst in one process of a case that read the
    # reference 32 times is not the machine's drift; the calibration still stretches the band.
    run = [760.0] * 8 + [720.0, 800.0, 830.0, 897.0]
    assert drift(run) == pytest.approx(830 / 760 - 1)  # 720 and 897: the tails
    assert drift(run, anchor=700.0) == pytest.approx(830 / 700 - 1)
    assert drift([100.0] * 6 + [77.0] * 6) == pytest.approx(100 / 77 - 1)  # a move that lasts
    assert widen([2.0, 3.0], 0.25) == pytest.approx([1.6, 3.75])
    assert widen([2.0, 3.0], None) == [2.0, 3.0] and widen([2.0, 3.0], 0.0) == [2.0, 3.0]
    assert drift_why(MAX_DRIFT, "during the run") is None and drift_why(None, "x") is None
    assert drift_why(0.3, "during the run") == (
        "the machine's speed moved 30% during the run (drift reference; over 25%)"
    )


def test_the_drift_reference_reads_a_speed_and_the_calibration_keeps_one(monkeypatch):
    from tests.support.fake_gemm import FakeGemm, SizedGemm
    from trainready.device import peak, read_reference, reference_workload

    torch.manual_seed(3)
    first = torch.rand(1)
    torch.manual_seed(3)
    # The real GEMM, on whatever this machine's load is: a reading, agreed or unstable, that says
    # what it took (the rule itself is tested on planted timings: tests/unit/device/test_settle.py).
    reading = read_reference("cpu", "fp32").to_json()
    assert reading["samples"] >= 1 and reading["warmup_calls"] >= 2
    assert (reading["flops"] is not None and reading["flops"] > 0) == reading["agreed"]
    assert torch.rand(1) == first  # it draws from its own generator: a case's seeds stay put
    assert reference_workload("cpu", "bf16") == "512³ bf16 matmul"
    # A measured peak keeps a reading taken with its calibration, in the cache and the record
    # (planted timings: a steady machine, so the calibration is confirmed and cached).
    monkeypatch.setattr(peak, "_time_matmuls", SizedGemm(rate=1e12))
    monkeypatch.setattr(
        peak, "read_reference", lambda d, t: read_reference(d, t, timed=FakeGemm().timed)
    )
    small = peak.calibrate_peak
    monkeypatch.setattr(peak, "calibrate_peak", lambda d, t: small(d, t, max_n=128, budget_s=0.5))
    monkeypatch.setattr(peak, "_host_fallbacks", lambda d, t: {})  # seconds of dispatch tables
    kept: dict = {}
    cache = peak.PeakCache(
        lambda k, t: kept.get((k, t)),
        lambda k, t, f, d: kept.update({(k, t): {"peak_flops": f, **d}}),
    )
    record = peak.resolve_peak("cpu", "fp32", cache)
    assert record["reference_flops"] > 0 and record["reference"]["agreed"]
    assert peak.resolve_peak("cpu", "fp32", cache)["reference_flops"] == record["reference_flops"]


def test_rotating_inputs_replace_the_flush_on_the_cpu_and_cycle_through_every_copy(monkeypatch):
    """On the CPU (a flush of twice a 480 MiB cache took 73 ms, against ~1 ms for a GEMV) the
    timed call cycles through enough copies of its inputs to cover twice the cache, each call
    the next copy; an accelerator flushes instead, and so do inputs whose copies would exceed
    MAX_ROTATION_BYTES."""
    from trainready.device import runtime

    monkeypatch.setattr(runtime, "_flush_bytes", lambda device: 4096)
    a, b = torch.ones(8, 16), torch.full((16,), 2.0)  # 512 + 64 bytes: 8 copies cover 4096
    seen = []
    cold = timing.rotating(lambda x, y: seen.append((x.data_ptr(), y.data_ptr())), (a, b), "cpu")
    assert not cold.flush and cold.copies == 8 and "8 copies" in cold.describe()
    for _ in range(16):
        cold.call()
    assert len(set(seen)) == 8 and seen[:8] == seen[8:]  # every copy, in turn, and again
    assert seen[0] == (a.data_ptr(), b.data_ptr())  # the originals are one of them
    # The copies hold the same values: every repeat computes the same product.
    x = timing.rotating(lambda x, y: x @ y, (a, b), "cpu")
    assert all(torch.equal(x.call(), a @ b) for _ in range(9))
    assert runtime.rotation_copies("cuda:0", 512) is None  # accelerators flush
    assert timing.rotating(lambda x: x, (a,), "cuda:0").flush
    assert runtime.rotation_copies("cpu", 1) == 4096
    monkeypatch.setattr(runtime, "_flush_bytes", lambda device: 8192)
    assert runtime.rotation_copies("cpu", 1) is None  # tiny inputs, 8192 copies: flushed
    monkeypatch.setattr(runtime, "_flush_bytes", lambda device: 4096)
    monkeypatch.setattr(runtime, "MAX_ROTATION_BYTES", 2048)
    assert runtime.rotation_copies("cpu", 512) is None and runtime.rotation_copies("cpu", 4096) == 1
