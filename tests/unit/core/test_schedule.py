"""Scheduling: the rule (core/schedule.py), what may start beside what and in which order; the
runner following it (correctness cases share the workers, a timing case runs with nothing beside
it); and how many workers, with how many threads, a run gets (core/concurrency.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from trainready import api
from trainready.core import concurrency
from trainready.core import runner as runner_module
from trainready.core.case import Case
from trainready.core.runner import Job, Runner
from trainready.core.schedule import may_start, next_startable
from trainready.core.store import Store


@dataclass(frozen=True)
class J:
    name: str
    alone: bool = False
    cores: int | None = None


C = J("correctness")
T = J("timing (whole machine)", alone=True)
T1 = J("timing (one core)", alone=True, cores=1)
T2 = J("timing (two cores)", alone=True, cores=2)


@pytest.mark.parametrize(
    ("job", "running", "starting", "expected"),
    [
        (C, [C, C, C], 0, True),  # correctness cases: as many as there are workers
        (C, [T], 0, False),  # nothing beside a whole-machine timing case
        (T, [C], 0, False),
        (T, [], 1, False),  # nor beside a worker importing torch
        (T, [], 0, True),
        (T1, [C], 0, True),  # 1 share + 1 core <= 2 cores
        (T1, [C, C], 0, False),  # the cores are taken
        (T1, [], 1, True),
        (T1, [C], 1, False),  # the starting worker's core counts
        (T1, [T1], 0, False),  # never two timing cases at once
        (C, [T1], 0, True),  # beside a one-core timing case, on the other core
        (C, [T1, C], 0, False),  # but not past the cores
        (C, [T2], 0, False),  # a two-core timing case on two cores leaves none
        (J("four cores", True, 4), [], 0, True),  # more than the machine has: the whole of it
        (J("four cores", True, 4), [C], 0, False),
    ],
)
def test_what_may_start_beside_what(job, running, starting, expected):
    assert may_start(job, running, starting, total=2, share=1) is expected


def test_correctness_cases_pass_one_core_timing_cases_waiting_for_one_that_runs():
    pending = [J("flex 2", True, 1), J("flex 3", True, 1), J("parity 1"), J("parity 2")]
    assert next_startable(pending, [J("flex 1", True, 1)], 0, total=2, share=1) == 2
    # the timing case ends: the next one starts first, in order
    assert next_startable(pending, [J("parity 0")], 0, total=2, share=1) == 0


def test_nothing_passes_a_case_that_waits_for_correctness_cases_to_end():
    # No timing case runs: the one-core case waits for a core, and no correctness case may take
    # it first (with --jobs above the cores they would never leave one free).
    pending = [J("flex 1", True, 1), J("parity 9")]
    assert next_startable(pending, [C, C], 0, total=2, share=1) is None


def test_a_whole_machine_case_is_never_passed():
    pending = [J("train", True), J("parity 1")]
    assert next_startable(pending, [J("flex", True, 1)], 0, total=2, share=1) is None
    pending = [J("flex 2", True, 1), J("train", True), J("dist", True)]
    assert next_startable(pending, [J("flex 1", True, 1)], 0, total=2, share=1) is None


def test_in_order_when_everything_fits():
    pending = [J("a"), J("b", True, 1), J("c")]
    assert next_startable(pending, [], 0, total=4, share=1) == 0
    assert next_startable(pending[1:], [J("a")], 0, total=4, share=1) == 0


# --- the runner following the rule ---------------------------------------------------------------

SUITE = "tests.support.sched_suite"


def _run_jobs(
    tmp_path, alone: list[bool], jobs: int = 2, sleep_s: float = 1.0, cores=None, warm=False
):
    """Run sleeping cases; `warm`: first bring all `jobs` workers up (cases that wait for each
    other), so that no worker's start-up, slower than a case on a loaded machine, shifts the
    order under test."""
    results = []
    runner = Runner(jobs=jobs, log_dir=tmp_path / "logs", on_result=results.append)
    ctx = {"device": "cpu", "dtype": None, "budget_s": 60.0}
    cores = cores or [None] * len(alone)
    work = [
        Job(Case("sched", f"c{i}", {"sleep_s": sleep_s}), SUITE, 60.0, ctx, alone=a, cores=n)
        for i, (a, n) in enumerate(zip(alone, cores, strict=True))
    ]
    try:
        if warm:
            barrier = {"sleep_s": 0.0, "barrier": str(tmp_path / "barrier"), "parties": jobs}
            (tmp_path / "barrier").mkdir()
            runner.run(
                [
                    Job(Case("sched", f"w{i}", barrier), SUITE, 60.0, ctx, alone=False)
                    for i in range(jobs)
                ]
            )
            assert [r.status for r in results] == ["pass"] * jobs
            assert len({r.metrics["pid"] for r in results}) == jobs  # all up, side by side
            results.clear()
        runner.run(work)
    finally:
        runner.close()
    assert all(r.status == "pass" for r in results), [r.diagnostics for r in results]
    return {r.case.name: r.metrics for r in results}


def _overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


@pytest.mark.slow
def test_correctness_cases_run_side_by_side_and_a_timing_case_alone(tmp_path):
    pattern = [False, False, False, True, False, False, False]
    m = _run_jobs(tmp_path, pattern, warm=True)
    alone = m.pop("c3")
    assert not any(_overlap(alone, other) for other in m.values())
    before, after = [m["c0"], m["c1"], m["c2"]], [m["c4"], m["c5"], m["c6"]]
    assert any(_overlap(a, b) for a in before for b in before if a is not b)
    assert any(_overlap(a, b) for a in after for b in after if a is not b)
    assert not any(_overlap(a, alone) for a in before + after)
    assert all(a["end"] <= alone["start"] for a in before)  # order kept: nothing overtakes it
    assert all(alone["end"] <= a["start"] for a in after)
    # A case beside others gets its share of the cores; one alone keeps torch's default.
    share = concurrency.threads_per_worker(2)
    assert {x["threads"] for x in before + after} == {share}
    assert len({x["pid"] for x in before + after}) == 2


@pytest.mark.slow
def test_one_core_timing_cases_take_turns_on_one_core_while_correctness_cases_use_the_other(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(concurrency, "usable_cores", lambda: 2)
    monkeypatch.setattr(runner_module, "usable_cores", lambda: 2)
    alone = [True, True, True, False, False, False]
    m = _run_jobs(tmp_path, alone, sleep_s=1.0, cores=[1, 1, 1, None, None, None], warm=True)
    timing, correctness = [m[f"c{i}"] for i in range(3)], [m[f"c{i}"] for i in range(3, 6)]
    assert not any(_overlap(a, b) for a in timing for b in timing if a is not b)
    assert not any(_overlap(a, b) for a in correctness for b in correctness if a is not b)
    # the correctness cases started while the timing ones ran, ahead of the later ones
    assert correctness[0]["start"] < timing[1]["start"]
    assert any(_overlap(t, c) for t in timing for c in correctness)
    assert {x["threads"] for x in timing} == {1.0}  # CPU_CORES threads, beside others or not
    assert {x["threads"] for x in correctness} == {1.0}  # their share of 2 cores over 2 jobs
    assert len({x["pid"] for x in timing + correctness}) == 2


def test_timing_cases_never_overlap_and_need_one_worker(tmp_path):
    m = _run_jobs(tmp_path, [True, True, True], jobs=2, sleep_s=0.3)
    runs = list(m.values())
    assert not any(_overlap(a, b) for a in runs for b in runs if a is not b)
    assert len({x["pid"] for x in runs}) == 1  # no second worker was started for them


# --- how many workers and threads; which suites run alone, on how many cores ---------------------


def test_the_runs_jobs_default_to_what_the_device_allows(tmp_path, monkeypatch):
    monkeypatch.setattr(concurrency, "usable_cores", lambda: 3)
    summary = api.run([SUITE], device="cpu", out=tmp_path, options={"n": 1, "sleep_s": 0})
    with Store(tmp_path) as store:
        assert store.get_run(summary.run_id).config["jobs"] == concurrency.default_jobs("cpu")


@pytest.mark.parametrize(
    ("device", "cores", "memory_gib", "expected"),
    [
        ("cpu", 2, 24, 2),  # one per core
        ("cpu", 16, 24, 8),  # each worker keeps WORKER_MEMORY_GIB
        ("cuda:0", 16, 128, 4),  # shared accelerators: a few
        ("mps", 1, 16, 1),
        ("neuron", 16, 128, 1),  # a device a process may hold alone
        ("emu:1", 16, 128, 1),  # any other PrivateUse1 backend
        ("cpu", 4, None, 4),  # memory unknown: cores decide
    ],
)
def test_default_jobs(monkeypatch, device, cores, memory_gib, expected):
    monkeypatch.setattr(concurrency, "usable_cores", lambda: cores)
    monkeypatch.setattr(concurrency, "_memory_gib", lambda: memory_gib)
    assert concurrency.default_jobs(device) == expected


def test_threads_per_worker_shares_the_cores(monkeypatch):
    monkeypatch.setattr(concurrency, "usable_cores", lambda: 8)
    assert [concurrency.threads_per_worker(n) for n in (1, 2, 3, 16)] == [8, 4, 2, 1]


def test_a_suite_kind_outside_the_two_is_refused():
    import types

    from trainready.core.config import ConfigError
    from trainready.suites import runs_alone

    assert runs_alone(types.ModuleType("no_kind")) is True  # the safe default: alone
    odd = types.ModuleType("odd")
    odd.KIND = "fast"
    with pytest.raises(ConfigError, match="KIND 'fast'; valid: correctness, timing"):
        runs_alone(odd)


def test_cpu_cores_apply_to_a_cpu_run_only_and_must_be_a_count():
    import types

    from trainready.core.config import ConfigError
    from trainready.suites import cpu_cores

    one = types.ModuleType("one")
    one.CPU_CORES = 1
    assert cpu_cores(one, "cpu") == 1
    assert cpu_cores(one, "cuda:0") is None  # an accelerator's timing case runs alone
    assert cpu_cores(one, "emu:0") is None  # and a PrivateUse1 device's (the reference device)
    assert cpu_cores(types.ModuleType("none"), "cpu") is None  # the whole machine
    for bad in (0, 1.5, True, "1"):
        one.CPU_CORES = bad
        with pytest.raises(ConfigError, match="CPU_CORES"):
            cpu_cores(one, "cpu")
