"""Correctness cases share the workers; a timing case runs with nothing beside it."""

from __future__ import annotations

import pytest

from trainready import api
from trainready.core import concurrency
from trainready.core import runner as runner_module
from trainready.core.case import Case
from trainready.core.runner import Job, Runner
from trainready.core.store import Store

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
