"""Run cases as Ray tasks on a Ray cluster (`--executor ray`; optional extra `trainready[ray]`).

Each task runs its one case through the same local `Runner` the single-machine path uses, so a case
keeps every isolation guarantee (its own spawned worker, its budget, timeout with phase, crash with
signal) wherever Ray places it. The task asks Ray for the device the case needs: a GPU for cuda, a
custom resource named after the device type for other accelerators (start Ray nodes with e.g.
`--resources '{"neuron": 2}'`), a CPU otherwise. Results stream back into the store as tasks finish;
a Ray worker or node lost under a task becomes `crash` for that case.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from trainready.core.case import Case, Result
from trainready.core.runner import Job, Runner


def task_resources(device: str) -> dict[str, Any]:
    """Ray resource request for one case on `device` ("cpu", "cuda:0", "neuron", ...)."""
    kind = device.split(":")[0]
    if kind == "cpu":
        return {"num_cpus": 1}
    if kind == "cuda":
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": 1, "resources": {kind: 1}}


def _result_to_json(r: Result) -> dict[str, Any]:
    return {
        "case": r.case.to_json(),
        "status": r.status,
        "metrics": r.metrics,
        "diagnostics": r.diagnostics,
        "phase": r.phase,
        "started_at": r.started_at,
        "duration_s": r.duration_s,
    }


def _result_from_json(d: dict[str, Any]) -> Result:
    return Result(
        case=Case.from_json(d["case"]),
        status=d["status"],
        metrics=d["metrics"],
        diagnostics=d["diagnostics"],
        phase=d["phase"],
        started_at=d["started_at"],
        duration_s=d["duration_s"],
    )


def run_job_locally(job: Job, imports: list[str] | None = None) -> dict[str, Any]:
    """The body of a Ray task: one case through a one-worker local runner (which imports the run's
    --import modules), as JSON."""
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="trainready-ray-") as logs:
        runner = Runner(jobs=1, log_dir=logs, on_result=results.append, imports=imports)
        try:
            runner.run([job])
        finally:
            runner.close()
    return _result_to_json(results[0])


class RayExecutor:
    """Same interface as `Runner` (run, close) for the orchestration in `trainready.api`."""

    def __init__(
        self,
        address: str | None = None,
        on_start: Callable[[Case], None] | None = None,
        on_result: Callable[[Result], None] | None = None,
        imports: list[str] | None = None,
    ):
        self.address = address
        self.imports = list(imports or [])
        self.on_start = on_start or (lambda _c: None)
        self.on_result = on_result or (lambda _r: None)
        self._started_ray = False

    def _ray(self):
        try:
            import ray
        except ImportError:
            from trainready.config import ConfigError

            raise ConfigError("--executor ray needs Ray: pip install 'trainready[ray]'") from None
        if not ray.is_initialized():
            # A local instance binds to loopback only; a given address joins an existing cluster.
            kwargs = {"address": self.address} if self.address else {
                "_node_ip_address": "127.0.0.1", "include_dashboard": False
            }  # fmt: skip
            ray.init(log_to_driver=False, configure_logging=False, **kwargs)
            self._started_ray = True
        return ray

    def run(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        ray = self._ray()
        from ray.exceptions import RayError

        task = ray.remote(run_job_locally)
        pending: dict[Any, Job] = {}
        for job in jobs:
            options = task_resources(job.context["device"])
            pending[task.options(max_retries=0, **options).remote(job, self.imports)] = job
            self.on_start(job.case)
        try:
            while pending:
                [done], _ = ray.wait(list(pending), num_returns=1)
                job = pending.pop(done)
                try:
                    result = _result_from_json(ray.get(done))
                except RayError as e:
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    result = Result(
                        job.case,
                        "crash",
                        diagnostics={"error": f"ray task lost: {type(e).__name__}: {first}"},
                        phase="setup",
                    )
                self.on_result(result)
        finally:
            for ref in pending:  # interrupted: cases in flight are lost, finished ones stored
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False
