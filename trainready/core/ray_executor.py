"""Run cases on a Ray cluster through long-lived actors (`--executor ray`; extra `trainready[ray]`).

One actor per slot holds one local `Runner` for the whole run, so its worker process, the torch
import and the compile caches are reused across the cases of that slot, and each case keeps every
isolation guarantee of the single-machine path (its budget, timeout with phase, crash with signal; a
dead or timed-out worker is replaced inside the actor). Slots: the run's --jobs, capped at what the
cluster holds of the resource each actor asks for: a GPU for cuda, a custom resource named after the
device type for other accelerators (a local instance declares it for this machine's devices;
start a cluster's nodes with e.g. `--resources '{"neuron": 2}'`), a CPU otherwise. The driver
hands each free actor the next case, and results stream back into the store as they finish. An
actor lost under a case (its process killed, its node gone) makes that case `crash`; a new actor
takes its place and the run goes on.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from trainready.core.case import Case, Result
from trainready.core.concurrency import threads_per_worker, usable_cores
from trainready.core.config import ConfigError
from trainready.core.runner import Job, Runner
from trainready.core.schedule import next_startable

CLOSE_TIMEOUT_S = 10.0  # an actor's graceful stop (its worker exits between cases) before the kill


def task_resources(device: str) -> dict[str, Any]:
    """Ray resource request of one actor for `device` ("cpu", "cuda:0", "neuron", ...)."""
    kind = device.split(":")[0]
    if kind == "cpu":
        return {"num_cpus": 1}
    if kind == "cuda":
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": 1, "resources": {kind: 1}}


def cluster_slots(request: dict[str, Any], total: dict[str, float]) -> int:
    """How many actors asking for `request` fit in the cluster's `total` resources at once."""
    need = {"CPU": request.get("num_cpus", 0), "GPU": request.get("num_gpus", 0)}
    need.update(request.get("resources", {}))
    return min(int(total.get(name, 0) // amount) for name, amount in need.items() if amount)


def local_resources(device: str) -> dict[str, float]:
    """The custom resource a local instance declares for `device`'s actors (`task_resources`):
    one unit per device of its type on this machine ("emu": 2), which Ray cannot detect itself;
    none for the CPU, and for cuda Ray counts the GPUs."""
    kind = device.split(":")[0]
    if kind in ("cpu", "cuda"):
        return {}
    from trainready.device import available_devices

    count = sum(d.split(":")[0] == kind for d in available_devices())
    return {kind: float(count)} if count else {}


def local_init_kwargs(jobs: int = 1, device: str = "cpu") -> dict[str, Any]:
    """`ray.init` arguments for a local instance: loopback only, no dashboard, CPUs for at
    least `jobs` actors (so --jobs is followed on a machine with fewer cores, as locally), and
    `device`'s own resource (`local_resources`)."""
    resources = local_resources(device)
    return {
        "_node_ip_address": "127.0.0.1",
        "include_dashboard": False,
        "num_cpus": max(os.cpu_count() or 1, jobs),
        "log_to_driver": False,
        "configure_logging": False,
        **({"resources": resources} if resources else {}),
    }


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


class CaseActor:
    """The body of a Ray actor: one `Runner`, kept for the actor's life, that runs the cases it is
    sent one at a time (a Ray actor runs one method call at a time), so on one worker.

    `slots` is the run's actor count, given to the runner as its jobs so that a correctness case
    gets its share of the cores (`threads_per_worker`) as beside local workers; sent one case at a
    time, the runner never starts a second worker."""

    def __init__(
        self, imports: list[str], preload: list[str], mem_limit_mb: int | None, slots: int = 1
    ):
        self._logs = tempfile.TemporaryDirectory(prefix="trainready-ray-")
        self._results: list[Result] = []
        self._runner = Runner(
            jobs=slots,
            log_dir=self._logs.name,
            mem_limit_mb=mem_limit_mb,
            on_result=self._results.append,
            preload=preload,
            imports=imports,
        )

    def run(self, job: Job) -> dict[str, Any]:
        """One case through the runner (its worker started on the first call, then reused)."""
        self._results.clear()
        self._runner.run([job])
        return _result_to_json(self._results[-1])

    def close(self) -> None:
        try:
            self._runner.close()
        finally:
            self._logs.cleanup()


def _lost(e: Exception) -> str:
    """One line for a case whose actor call failed: the actor died, or the call raised in it."""
    from ray.exceptions import RayActorError

    cause = getattr(e, "cause", None)  # a RayTaskError carries what the method raised
    if isinstance(cause, BaseException) and not isinstance(e, RayActorError):
        e = cause
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    how = "lost" if isinstance(e, RayActorError) else "failed"
    return f"ray actor {how}: {type(e).__name__}: {first}".rstrip(": ")


class RayExecutor:
    """Same interface as `Runner` (run, close) for the orchestration in `trainready.api`."""

    def __init__(
        self,
        address: str | None = None,
        on_start: Callable[[Case], None] | None = None,
        on_result: Callable[[Result], None] | None = None,
        imports: list[str] | None = None,
        jobs: int = 1,
        mem_limit_mb: int | None = None,
    ):
        self.address = address
        self.imports = list(imports or [])
        self.jobs = max(1, jobs)
        self.mem_limit_mb = mem_limit_mb
        self.on_start = on_start or (lambda _c: None)
        self.on_result = on_result or (lambda _r: None)
        self._started_ray = False

    def _ray(self, device: str):
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'trainready[ray]'") from None
        if not ray.is_initialized():
            # A given address joins an existing cluster; otherwise a local, loopback-only one.
            if self.address:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)
            else:
                ray.init(**local_init_kwargs(self.jobs, device))
            self._started_ray = True
        return ray

    def _slots(self, ray, device: str, n_jobs: int) -> int:
        request = task_resources(device)
        total = ray.cluster_resources()
        fits = cluster_slots(request, total)
        if fits < 1:
            have = ", ".join(f"{k}={v:g}" for k, v in sorted(total.items()) if "node:" not in k)
            custom = ", ".join(f'"{k}": N' for k in request.get("resources") or {})
            hint = f"; start its nodes with `ray start --resources '{{{custom}}}'`, N the devices"
            hint = hint + " on each" if custom else ""
            raise ConfigError(
                f"--executor ray: the Ray cluster cannot hold one actor for device {device!r} "
                f"(it asks for {request}; the cluster has {have or 'nothing'}){hint}"
            )
        return min(self.jobs, fits, n_jobs)

    def run(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        devices = {job.context["device"] for job in jobs}
        if len(devices) != 1:
            raise ValueError(f"one device per run, got {sorted(devices)}")
        device = devices.pop()
        ray = self._ray(device)
        from ray.exceptions import RayError

        preload = list(dict.fromkeys(job.suite_path for job in jobs))
        actor_class = ray.remote(CaseActor).options(
            max_restarts=0, max_task_retries=0, **task_resources(device)
        )

        def new_actor(slots: int):
            return actor_class.remote(self.imports, preload, self.mem_limit_mb, slots)

        slots = self._slots(ray, device, len(jobs))
        idle = [new_actor(slots) for _ in range(slots)]
        pending = deque(jobs)
        in_flight: dict[Any, tuple[Any, Job, float, float]] = {}  # ref -> actor, job, start times
        # CPU actors share their machine's cores: there the local runner's rule decides what
        # may start beside what (`core/schedule.py`). An accelerator actor owns its device.
        shared = device.split(":")[0] == "cpu"
        cores, share = usable_cores(), threads_per_worker(slots)
        finished = False
        try:
            while pending or in_flight:
                while idle and pending:
                    busy = [j for _, j, *_ in in_flight.values()]
                    i = next_startable(pending, busy, 0, cores, share) if shared else 0
                    if i is None:
                        break
                    actor, job = idle.pop(), pending[i]
                    del pending[i]
                    self.on_start(job.case)
                    ref = actor.run.remote(job)
                    in_flight[ref] = (actor, job, time.time(), time.monotonic())
                [done], _ = ray.wait(list(in_flight), num_returns=1)
                actor, job, started, t0 = in_flight.pop(done)
                try:
                    result = _result_from_json(ray.get(done))
                    idle.append(actor)
                except RayError as e:
                    result = Result(
                        job.case,
                        "crash",
                        diagnostics={"error": _lost(e)},
                        phase=None,  # the phase died with the actor's runner: unknown here
                        started_at=started,
                        duration_s=time.monotonic() - t0,
                    )
                    with contextlib.suppress(RayError):
                        ray.kill(actor, no_restart=True)  # a failed one may still be alive
                    idle.append(new_actor(slots))
                self.on_result(result)
            finished = True
        finally:
            # Done: stop each actor's worker between cases, then the actors. Interrupted: kill at
            # once (the cases in flight are lost, finished ones stored); a killed actor's worker
            # dies with it (PR_SET_PDEATHSIG), and its whole process group with the worker.
            actors = idle + [a for a, *_ in in_flight.values()]
            if finished:
                closing = [a.close.remote() for a in actors]
                with contextlib.suppress(RayError):
                    ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)
            for actor in actors:
                with contextlib.suppress(RayError):
                    ray.kill(actor, no_restart=True)

    def close(self) -> None:
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False
