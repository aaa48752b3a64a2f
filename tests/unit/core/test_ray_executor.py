"""--executor ray on a local Ray instance (one per module): same statuses as the local runner,
results streamed into the store, one worker per actor reused across its cases, --jobs actors, and
a lost actor recorded as `crash` for its case and replaced."""

from __future__ import annotations

import itertools
import os

import pytest

from trainready import api
from trainready.core.case import Case
from trainready.core.config import ConfigError
from trainready.core.ray_executor import (
    RayExecutor,
    _lost,
    cluster_slots,
    local_init_kwargs,
    task_resources,
)
from trainready.core.runner import Job, RunnerError
from trainready.core.store import Store

ray = pytest.importorskip("ray", reason="the optional Ray extra is not installed")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module's runs (starting Ray takes seconds); the executors
    find it running and leave it be."""
    ray.init(**local_init_kwargs(jobs=2))
    yield
    ray.shutdown()


def test_resource_requests():
    assert task_resources("cpu") == {"num_cpus": 1}
    assert task_resources("cuda:3") == {"num_cpus": 1, "num_gpus": 1}
    assert task_resources("neuron") == {"num_cpus": 1, "resources": {"neuron": 1}}


def test_cluster_slots():
    assert cluster_slots(task_resources("cuda:0"), {"CPU": 16.0, "GPU": 2.0}) == 2
    assert cluster_slots(task_resources("cuda"), {"CPU": 1.0, "GPU": 8.0}) == 1  # CPU-bound
    assert cluster_slots(task_resources("cpu"), {"CPU": 3.0, "GPU": 1.0}) == 3
    assert cluster_slots(task_resources("neuron"), {"CPU": 8.0, "neuron": 2.0}) == 2
    assert cluster_slots(task_resources("neuron"), {"CPU": 8.0}) == 0


class _FakeRay:
    def __init__(self, total: dict[str, float]):
        self.total = total

    def cluster_resources(self) -> dict[str, float]:
        return self.total


def test_slots_follow_jobs_within_the_cluster():
    cpus = _FakeRay({"CPU": 8.0, "node:127.0.0.1": 1.0})
    assert RayExecutor(jobs=3)._slots(cpus, "cpu", n_jobs=10) == 3  # --jobs
    assert RayExecutor(jobs=3)._slots(cpus, "cpu", n_jobs=2) == 2  # no idle actor
    assert RayExecutor(jobs=20)._slots(cpus, "cpu", n_jobs=50) == 8  # what the cluster holds
    with pytest.raises(
        ConfigError, match=r"cannot hold one actor for device 'cuda:0'.*has CPU=8\)$"
    ):
        RayExecutor(jobs=2)._slots(cpus, "cuda:0", n_jobs=4)
    # A device Ray does not detect: the error says how to declare it on the cluster's nodes.
    with pytest.raises(ConfigError, match=r"ray start --resources '\{\"npu\": N\}'"):
        RayExecutor(jobs=2)._slots(cpus, "npu:0", n_jobs=4)


def test_a_local_instance_declares_the_devices_ray_cannot_detect(monkeypatch):
    """A PrivateUse1 or other accelerator's actors ask for a resource named after it: a local
    instance declares one per device of that type here, so they fit without any setup."""
    import trainready.device as device

    monkeypatch.setattr(device, "available_devices", lambda: ["cpu", "npu:0", "npu:1"])
    assert local_init_kwargs(2, "npu:1")["resources"] == {"npu": 2.0}
    assert cluster_slots(task_resources("npu:1"), {"CPU": 2.0, "npu": 2.0}) == 2
    assert "resources" not in local_init_kwargs(2, "cpu")  # nothing custom to declare
    assert "resources" not in local_init_kwargs(2, "cuda:0")  # Ray counts GPUs itself


def test_lost_names_a_dead_actor_or_what_raised_in_it():
    from ray.exceptions import ActorDiedError, RayTaskError

    assert _lost(ActorDiedError()).startswith("ray actor lost: ActorDiedError: The actor died")
    raised = RayTaskError("CaseActor.run", "Traceback ...", RunnerError("worker failed to start"))
    for e in (raised, raised.as_instanceof_cause()):  # ray.get raises the latter
        assert _lost(e) == "ray actor failed: RunnerError: worker failed to start"


def _jobs(kinds: list[str], alone: bool) -> list[Job]:
    ctx = {"device": "cpu", "dtype": None, "budget_s": 30, "preset": "quick", "options": {}}
    ctx["peaks"] = {}
    return [
        Job(
            Case("faulty", f"{i:02d}-{k}", {"kind": k}),
            "tests.support.faulty_suite",
            30,
            ctx,
            alone=alone,
        )
        for i, k in enumerate(kinds)
    ]


@pytest.mark.slow
def test_jobs_actors_each_reuse_one_worker(local_ray):
    """--jobs 2, cases that may share the machine: both actors take cases, and each runs all of
    its cases on one worker process (4 cases, 2 worker pids, none the driver's)."""
    results = []
    executor = RayExecutor(jobs=2, on_result=results.append)
    try:
        executor.run(_jobs(["ok"] * 4, alone=False))
    finally:
        executor.close()
    assert [r.status for r in results] == ["pass"] * 4
    pids = {r.metrics["pid"] for r in results}
    assert len(pids) == 2 and os.getpid() not in pids


@pytest.mark.slow
def test_lost_actor_is_crash_and_replaced(tmp_path, local_ray):
    """One actor: its worker serves case after case; the actor killed under a case (the case
    kills its worker's parent, the actor process) makes that case `crash`, and the rest run on a
    new actor, again on one reused worker."""
    kinds = ["ok", "ok", "kill_parent", "ok", "ok_after"]
    summary = api.run(
        ["tests.support.faulty_suite"],
        device="cpu",
        out=tmp_path,
        jobs=1,
        budget_s=30,
        executor="ray",
        options={"kinds": kinds},
    )
    with Store(tmp_path) as store:
        got = sorted(store.results(summary.run_id), key=lambda r: r.case.name)
    assert [r.status for r in got] == ["pass", "pass", "crash", "pass", "pass"]
    assert got[2].diagnostics["error"].startswith("ray actor lost: ")
    assert got[2].phase is None  # died with the actor: not known
    before, after = (
        {got[0].metrics["pid"], got[1].metrics["pid"]},
        {got[3].metrics["pid"], got[4].metrics["pid"]},
    )
    assert len(before) == 1 and len(after) == 1 and before != after


@pytest.mark.slow
def test_ray_run(tmp_path, local_ray):
    kinds = ["ok", "raises", "abort", "hang", "kill_parent", "ok_after"]
    streamed = []

    class Obs(api.Observer):
        def on_result(self, result):
            with Store(tmp_path) as s:  # already committed when the observer hears of it
                streamed.append(result.case_id in s.done_case_ids(s.latest_run().run_id))

    summary = api.run(
        ["tests.support.faulty_suite"],
        device="cpu",
        out=tmp_path,
        jobs=2,
        budget_s=5,
        executor="ray",
        options={"kinds": kinds},
        observer=Obs(),
    )
    with Store(tmp_path) as store:
        got = {r.case.params["kind"]: r for r in store.results(summary.run_id)}
    assert {k: got[k].status for k in kinds} == {
        "ok": "pass",
        "raises": "fail_run",
        "abort": "crash",
        "hang": "timeout",
        "kill_parent": "crash",
        "ok_after": "pass",
    }
    assert got["hang"].phase == "run"
    assert "worker died: SIGABRT" in got["abort"].diagnostics["error"]
    assert "ray actor lost" in got["kill_parent"].diagnostics["error"]
    assert streamed == [True] * len(kinds)
    # The faulty suite's cases run alone (timing kind): two CPU actors, never two cases at once.
    spans = sorted((r.started_at, r.started_at + r.duration_s) for r in got.values())
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))


@pytest.mark.slow
def test_one_core_timing_cases_share_the_cpu_with_correctness_cases_as_locally(
    local_ray, monkeypatch
):
    """The local runner's rule on CPU actors (core/schedule.py): one-core timing cases take turns
    while correctness cases run beside them, ahead of the timing cases still waiting."""
    from trainready.core import concurrency, ray_executor

    monkeypatch.setattr(concurrency, "usable_cores", lambda: 2)
    monkeypatch.setattr(ray_executor, "usable_cores", lambda: 2)
    ctx = {"device": "cpu", "dtype": None, "budget_s": 30}
    jobs = [
        Job(
            Case("sched", f"c{i}", {"sleep_s": 1.0}), "tests.support.sched_suite", 30, ctx, i < 3, 1
        )
        for i in range(3)
    ] + [
        Job(Case("sched", f"c{i}", {"sleep_s": 1.0}), "tests.support.sched_suite", 30, ctx, False)
        for i in range(3, 6)
    ]
    results, started = [], []
    executor = RayExecutor(
        jobs=2, on_start=lambda c: started.append(c.name), on_result=results.append
    )
    try:
        executor.run(jobs)
    finally:
        executor.close()
    m = {r.case.name: r.metrics for r in results}
    timing = [m[f"c{i}"] for i in range(3)]

    def overlap(a, b):
        return a["start"] < b["end"] and b["start"] < a["end"]

    assert not any(overlap(a, b) for a in timing for b in timing if a is not b)
    # The dispatch order, not the workers' clocks (an actor's start-up may take longer than a
    # case): the first correctness case went out beside the first timing case, ahead of the rest.
    assert started[:2] == ["c0", "c3"]
    assert [n for n in started if n in ("c0", "c1", "c2")] == ["c0", "c1", "c2"]
    assert {x["threads"] for x in timing} == {1.0}
