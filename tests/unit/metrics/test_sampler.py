"""The adaptive sampler on planted sample streams and a planted clock: exact, whatever the load."""

import math
import random
import threading

import pytest

from trainready.metrics import sampler
from trainready.metrics.sampler import (
    ALL,
    Rule,
    Sampler,
    Verdict,
    budget_why,
    inconclusive_text,
    sample,
)
from trainready.metrics.stats import order_interval


class Stream:
    """Samples drawn from a seeded lognormal about 1.0 whose noise `sigma(i)` may change, each
    costing `cost` seconds of a planted clock."""

    def __init__(self, sigma, cost=0.01, seed=0):
        self.sigma = sigma if callable(sigma) else (lambda i, s=sigma: s)
        self.cost, self.rng, self.now, self.i = cost, random.Random(seed), 0.0, 0

    def clock(self) -> float:
        return self.now

    def take(self) -> float:
        self.now += self.cost
        x = self.rng.lognormvariate(0.0, self.sigma(self.i))
        self.i += 1
        return x


def run(stream: Stream, **rule) -> tuple[list[float], Verdict]:
    return sample(stream.take, Rule(**rule), clock=stream.clock)


def test_a_quiet_stream_concludes_at_the_first_check():
    xs, v = run(Stream(0.005), budget_s=10.0)
    assert v.concluded and v.stopped == "concluded"
    assert v.samples == len(xs) == 5  # min_samples: nothing more was needed
    assert v.half_width <= 0.05 and v.needed_s is None and v.needed_samples is None
    assert v.interval[0] <= v.value <= v.interval[1]
    assert v.spent_s == pytest.approx(0.05)


def test_a_noisy_stream_runs_out_of_budget_and_says_how_much_more_would_do():
    stream = Stream(0.5, cost=0.01, seed=1)
    xs, v = run(stream, budget_s=1.0)
    assert not v.concluded and v.stopped == "budget"
    assert v.spent_s <= 1.0 + 1e-9  # never past the budget
    assert len(xs) >= 90  # and it used nearly all of it
    assert v.half_width > 0.05
    # 1/sqrt(n) from ~±8% at ~100 samples to ±5%: a few times as many samples, each 0.01 s.
    assert 0.5 < v.needed_s < 20 and v.needed_samples == pytest.approx(v.needed_s / 0.01, rel=0.01)
    # The estimate is sensible: the same stream given the estimated time (and a margin) concludes.
    _, again = run(Stream(0.5, cost=0.01, seed=1), budget_s=1.0 + 2 * v.needed_s)
    assert again.concluded
    # ... and not long before it: with a third of the extra time it does not.
    _, short = run(Stream(0.5, cost=0.01, seed=1), budget_s=1.0 + v.needed_s / 3)
    assert not short.concluded


def test_a_stream_whose_noise_drops_concludes_once_it_has():
    stream = Stream(lambda i: 0.6 if i < 20 else 0.002, seed=2)
    xs, v = run(stream, budget_s=100.0)
    assert v.concluded
    assert 20 < len(xs) < 200  # past the noisy stretch, then soon after
    assert v.spent_s < 2.0


def test_checks_come_at_growing_counts_not_after_every_sample():
    stream = Stream(0.3, seed=3)
    s = Sampler(Rule(budget_s=2.0), clock=stream.clock)
    while k := s.more():
        for _ in range(k):
            s.add(stream.take())
    counts = [n for n, _ in s.checks]
    assert counts[:4] == [5, 8, 12, 18]
    assert len(counts) <= 2 + math.log(len(s.samples) / 5, 1.5) + 1


def test_the_first_sample_is_always_taken_and_the_minimum_does_not_beat_the_budget():
    xs, v = run(Stream(0.001, cost=1.0), budget_s=0.5)
    assert len(xs) == 1 and not v.concluded and v.stopped == "budget"
    assert v.needed_samples == 4  # at least min_samples in all
    xs, v = run(Stream(0.001, cost=1.0), budget_s=3.5)
    assert len(xs) == 3 and v.spent_s == pytest.approx(3.0)


def test_extra_time_bounds_only_the_samples_past_the_minimum():
    xs, v = run(Stream(0.001, cost=1.0), extra_s=0.5)
    assert len(xs) == 5 and v.concluded  # the minimum, whatever the extra time
    xs, v = run(Stream(0.5, cost=1.0), extra_s=0.5)
    assert len(xs) == 5 and not v.concluded and v.stopped == "budget"
    xs, v = run(Stream(0.5, cost=1.0), extra_s=3.0)
    assert len(xs) == 8 and v.spent_s == pytest.approx(8.0)  # 3 s: three more samples
    xs, v = run(Stream(0.5, cost=1.0), extra_s=30.0, budget_s=6.5)
    assert len(xs) == 6  # the cap on all of it still holds


def test_a_cap_stops_a_call_with_no_budget():
    xs, v = run(Stream(0.5), max_samples=30)
    assert len(xs) == 30 and v.stopped == "cap" and not v.concluded


def test_min_total_holds_a_conclusion_until_enough_is_summed():
    xs, v = run(Stream(0.001), min_total=20.0, budget_s=100.0)
    assert v.concluded and sum(xs) >= 20.0 and sum(xs[:-1]) < 20.0 * 1.6


def test_shrink_rate_is_fitted_and_clamped():
    few = [(n, 1.0 / n) for n in (10, 20, 40)]
    assert sampler.shrink_rate(few) == sampler.SHRINK  # too few checks: 1/sqrt(n)
    halves = [(n, 1.0 / n) for n in (10, 20, 40, 80)]  # h ~ 1/n
    assert sampler.shrink_rate(halves) == pytest.approx(1.0)
    flat = [(n, 0.2) for n in (10, 20, 40, 80)]  # not shrinking at all: the slowest rate allowed
    assert sampler.shrink_rate(flat) == 0.4


def test_level_kind_samples_processes_with_a_t_interval():
    stream = Stream(0.01, cost=5.0, seed=4)
    xs, v = run(stream, kind="level", min_samples=3, budget_s=60.0)
    assert v.concluded and v.kind == "level" and len(xs) == 3
    xs, v = run(Stream(0.3, cost=5.0, seed=4), kind="level", min_samples=3, budget_s=30.0)
    assert not v.concluded and len(xs) == 6 and v.needed_s > 0


def test_ranks_that_agree_take_the_same_samples():
    """Two ranks, one quiet and one noisy, each deciding alone would stop at different counts;
    through `agree` (the minimum of their proposals, as an all_reduce would give) they take the
    same number, the quiet one continuing until the noisy one concludes or the budget ends."""
    barrier, proposals = threading.Barrier(2), [0, 0]

    def agree_for(rank):
        def agree(proposal: int) -> int:
            proposals[rank] = proposal
            barrier.wait()
            agreed = min(proposals)
            barrier.wait()
            return agreed

        return agree

    counts, verdicts = [0, 0], [None, None]

    def rank(r, sigma):
        stream = Stream(sigma, seed=10 + r)
        xs, v = sample(stream.take, Rule(budget_s=2.0), clock=stream.clock, agree=agree_for(r))
        counts[r], verdicts[r] = len(xs), v

    threads = [threading.Thread(target=rank, args=(r, s)) for r, s in ((0, 0.001), (1, 0.2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert counts[0] == counts[1] > 5
    assert verdicts[0].concluded  # the quiet rank's own interval concluded all along
    assert min(proposals) in (ALL, 0)  # they stopped together


def test_verdict_round_trips_and_reads_as_the_report_says_it():
    _, v = run(Stream(0.5, seed=1), budget_s=0.2)
    assert Verdict.from_json(v.to_json()) == v
    text = inconclusive_text(v.to_json(), "--set timing_s=3")
    assert text.startswith(f"budget ran out: {v.samples} samples in {v.spent_s:.3g} s reached ±")
    assert "(target ±5%)" in text and text.endswith("would likely conclude it (--set timing_s=3)")
    _, done = run(Stream(0.001), budget_s=1.0)
    assert inconclusive_text(done, "x") is None and inconclusive_text(None, "x") is None


def test_budget_why_sums_the_time_the_cases_need_and_names_the_neediest_option():
    short = [
        {"concluded": False, "needed_s": 2.0, "target": 0.05, "option": "--set timing_s=4"},
        {"concluded": False, "needed_s": 5.0, "target": 0.05, "option": "--set timing_s=7"},
    ]
    done = {"concluded": True}
    assert budget_why([done, None]) is None and budget_why([]) is None
    assert budget_why([*short, done]) == (
        "budget ran out in 2 of 3 cases (a median's 95% interval not within ±5%); about 7 s more "
        "in all would likely conclude them (--set timing_s=7)"
    )
    one = {**short[0], "samples": 9, "spent_s": 1.0, "half_width": 0.08}
    assert budget_why([one]).startswith("budget ran out: 9 samples in 1 s reached ±8.0%")


def test_order_interval_covers_the_median_as_often_as_it_claims():
    rng, hits, trials = random.Random(5), 0, 400
    for _ in range(trials):
        xs = [rng.expovariate(1.0) for _ in range(25)]
        lo, hi = order_interval(xs)
        hits += lo <= math.log(2) <= hi  # the exponential's true median
    assert hits / trials >= 0.93
    assert order_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few: the whole range


def test_prior_samples_count_in_the_interval_but_not_in_the_price():
    # Two processes already run (the planned ones), 5 s each before sampling began; each new one
    # costs 1 s. The interval counts all; a sample's price is the new ones' alone.
    stream = Stream(0.3, cost=1.0, seed=4)
    s = Sampler(
        Rule(kind="level", min_samples=2, extra_s=3.5), clock=stream.clock, prior=[1.0, 1.3]
    )
    assert s.more() == 1  # the first new sample is always taken: it prices the others
    s.add(stream.take())
    taken = 1
    while k := s.more():
        for _ in range(k):
            s.add(stream.take())
            taken += 1
    v = s.verdict()
    assert taken == 3 and v.samples == 5  # 3.5 s at 1 s each: three past the prior two
    assert not v.concluded and v.needed_s == pytest.approx(v.needed_samples * 1.0)
    # Enough agreeing prior samples conclude at once, taking none.
    quiet = Sampler(Rule(kind="level", min_samples=2, extra_s=3.5), prior=[1.0, 1.001, 1.002])
    assert quiet.more() == 0 and quiet.verdict().concluded
