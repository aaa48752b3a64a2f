"""--executor ray on a local Ray instance: same statuses as the local runner, results streamed into
the store, and a lost Ray worker recorded as `crash` for its case."""

from __future__ import annotations

import pytest

from trainready import api
from trainready.core.ray_executor import task_resources
from trainready.core.store import Store

ray = pytest.importorskip("ray", reason="the optional Ray extra is not installed")


def test_resource_requests():
    assert task_resources("cpu") == {"num_cpus": 1}
    assert task_resources("cuda:3") == {"num_cpus": 1, "num_gpus": 1}
    assert task_resources("neuron") == {"num_cpus": 1, "resources": {"neuron": 1}}


@pytest.mark.slow
def test_ray_run(tmp_path):
    kinds = ["ok", "raises", "abort", "hang", "kill_parent", "ok_after"]
    streamed = []

    class Obs(api.Observer):
        def on_result(self, result):
            with Store(tmp_path) as s:  # already committed when the observer hears of it
                streamed.append(result.case_id in s.done_case_ids(s.latest_run().run_id))

    summary = api.run(
        ["tests.faulty_suite"],
        device="cpu",
        out=tmp_path,
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
    assert "ray task lost" in got["kill_parent"].diagnostics["error"]
    assert streamed == [True] * len(kinds)
