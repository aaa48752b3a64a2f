"""The Python API; the CLI is a thin layer over it.

import trainready
summary = trainready.run(["matmul"], device="cpu", preset="quick", out="runs")
trainready.report(summary.store_path, [summary.run_id], "md")
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trainready.config import ConfigError, RunConfig, check_choice, parse_shard
from trainready.core.case import Case, Result
from trainready.core.context import ARTIFACTS
from trainready.core.plan import PlannedSuite, plan
from trainready.core.runner import Job, Runner
from trainready.core.store import RunRecord, Store, StoreError, new_run_id
from trainready.suites import expand

DEFAULT_OUT = "runs"
EXECUTORS = ("local", "ray")


class Observer:
    """Progress callbacks for a run; the CLI draws a progress bar with them. All optional."""

    def on_message(self, text: str) -> None: ...

    def on_plan(self, run_id: str, total: int, already_done: int) -> None: ...

    def on_start(self, case: Case) -> None: ...

    def on_result(self, result: Result) -> None: ...


@dataclass
class RunSummary:
    run_id: str
    store_path: Path
    counts: Counter = field(default_factory=Counter)
    planned: int = 0
    resumed: bool = False

    @property
    def done(self) -> int:
        return sum(self.counts.values())


def _peaks(cfg: RunConfig, suites: list[PlannedSuite], store: Store, obs: Observer):
    """The peak FLOP/s for every dtype the run uses, resolved once (a calibration costs seconds)."""
    from trainready.device import resolve_peak

    dtypes = sorted(
        {
            d
            for s in suites
            if getattr(s.module, "USES_PEAK", True)
            for c in s.cases
            if (d := s.dtype(cfg, c))
        }
    )
    peaks = {}
    for dtype in dtypes:
        obs.on_message(f"peak FLOP/s for {cfg.device} {dtype}…")
        peaks[dtype] = resolve_peak(cfg.device, dtype, store=store)
    return peaks


def _find_resumable(store: Store, cfg: RunConfig) -> RunRecord | None:
    identity = cfg.identity()
    for run in reversed(store.list_runs()):
        if RunConfig.from_json(run.config).identity() == identity:
            return run
    return None


def run(
    suites: list[str],
    device: str = "auto",
    preset: str = "quick",
    out: str | Path = DEFAULT_OUT,
    *,
    jobs: int = 1,
    budget_s: float | None = None,
    shard: str | None = None,
    resume: bool = False,
    filter: str | None = None,  # noqa: A002 - mirrors the CLI flag
    dtype: str | None = None,
    mem_limit_mb: int | None = None,
    options: dict[str, Any] | None = None,
    observer: Observer | None = None,
    executor: str = "local",
    ray_address: str | None = None,
) -> RunSummary:
    """Run suites on a device; results land in `out`/trainready.db as they arrive.

    executor: "local" (worker processes on this machine) or "ray" (Ray tasks on a Ray cluster at
    `ray_address`, or a local Ray instance when None).
    """
    from trainready.device import resolve
    from trainready.env import snapshot

    obs = observer or Observer()
    check_choice("executor", executor, EXECUTORS)
    if not suites:
        raise ConfigError("no suite given")
    cfg = RunConfig(
        suites=expand(suites),
        device=resolve(device),
        preset=preset,
        dtype=dtype,
        budget_s=budget_s,
        filter=filter,
        shard=parse_shard(shard),
        jobs=jobs,
        mem_limit_mb=mem_limit_mb,
        options=dict(options or {}),
    )
    planned = plan(cfg)
    total = sum(len(s.cases) for s in planned)
    store = Store(out)
    try:
        previous = _find_resumable(store, cfg) if resume else None
        if resume and previous is None:
            obs.on_message("nothing to resume with these settings: starting a new run")
        cfg.peaks = _peaks(cfg, planned, store, obs)
        if previous is not None:
            run_id = previous.run_id
            done = store.done_case_ids(run_id)
        else:
            run_id, done = new_run_id(), set()
            env = snapshot(cfg.device)
            store.add_run(
                RunRecord(
                    run_id=run_id,
                    created_at=time.time(),
                    suites=cfg.suites,
                    device=cfg.device,
                    preset=cfg.preset,
                    dtype=cfg.dtype,
                    shard=f"{cfg.shard[0]}/{cfg.shard[1]}" if cfg.shard else None,
                    config=cfg.to_json(),
                    env=env,
                    command=env["command"],
                    planned=total,
                )
            )
            store.add_planned(run_id, [c for s in planned for c in s.cases])
        summary = RunSummary(run_id, store.db_path, planned=total, resumed=previous is not None)
        for r in store.results(run_id):
            summary.counts[r.status] += 1
        obs.on_plan(run_id, total, len(done))

        def on_result(result: Result) -> None:
            store.add_result(run_id, result)  # committed before anything else sees it
            summary.counts[result.status] += 1
            obs.on_result(result)

        if executor == "ray":
            from trainready.core.ray_executor import RayExecutor

            runner = RayExecutor(ray_address, on_start=obs.on_start, on_result=on_result)
        else:
            runner = Runner(
                jobs=cfg.jobs,
                log_dir=store.dir / "logs" / run_id,
                mem_limit_mb=cfg.mem_limit_mb,
                on_start=obs.on_start,
                on_result=on_result,
                preload=[s.module_path for s in planned if s.cases],
            )
        try:
            runner.run(_jobs(cfg, planned, done, store.dir / run_id))
        finally:
            runner.close()
        store.finish_run(run_id)
        return summary
    finally:
        store.close()


def _jobs(cfg: RunConfig, planned: list[PlannedSuite], done: set[str], run_dir: Path) -> list[Job]:
    jobs = []
    for s in planned:
        for case in s.cases:
            if case.id in done:
                continue
            ctx = {
                "device": cfg.device,
                "dtype": s.dtype(cfg, case),
                "budget_s": s.budget_s(cfg, case),
                "preset": cfg.preset,
                "options": cfg.options,
                "peaks": cfg.peaks,
                "run_dir": str(run_dir.resolve()),  # where the case's files go (artifacts)
            }
            jobs.append(Job(case, s.module_path, ctx["budget_s"], ctx))
    return jobs


def merge(sources: list[str | Path], out: str | Path) -> str:
    """Combine shard outputs (each a store directory; its latest run) into one run in `out`."""
    if not sources:
        raise ConfigError("merge needs at least one run directory")
    shards: list[tuple[RunRecord, list[Case], list[Result]]] = []
    artifacts: list[Path] = []  # each shard's RUN_DIR/artifacts (results name files under it)
    for src in sources:
        with Store(src, create=False) as s:
            rec = s.latest_run()
            shards.append((rec, s.planned(rec.run_id), s.results(rec.run_id)))
            artifacts.append(s.dir / rec.run_id / ARTIFACTS)
    head = shards[0][0]

    def settings(rec: RunRecord) -> dict[str, Any]:
        return {**RunConfig.from_json(rec.config).identity(), "shard": None}

    owner: dict[str, str] = {}
    for rec, planned_cases, results in shards:
        if settings(rec) != settings(head):
            raise ConfigError(
                f"run {rec.run_id} was made with other settings than {head.run_id}; "
                "only shards of one run can be merged"
            )
        for case_id in {c.id for c in planned_cases} | {r.case_id for r in results}:
            if owner.setdefault(case_id, rec.run_id) != rec.run_id:
                raise ConfigError(f"case {case_id} is in both {owner[case_id]} and {rec.run_id}")
    run_id = new_run_id()
    with Store(out) as store:
        store.add_run(
            replace(
                head,
                run_id=run_id,
                created_at=time.time(),
                finished_at=None,
                shard=None,
                config={**head.config, "shard": None},
                env={**head.env, "merged_from": [rec.run_id for rec, _, _ in shards]},
                planned=sum(rec.planned or 0 for rec, _, _ in shards),
            )
        )
        for _, planned_cases, results in shards:
            store.add_planned(run_id, planned_cases)
            for r in results:
                store.add_result(run_id, r)
        for src_dir in artifacts:  # shards hold disjoint cases, so their directories too
            if src_dir.is_dir():
                shutil.copytree(src_dir, store.dir / run_id / ARTIFACTS, dirs_exist_ok=True)
        if all(rec.finished_at for rec, _, _ in shards):
            store.finish_run(run_id)
    return run_id


def _resolve(ref: str) -> tuple[Store, str]:
    """'DIR', 'DIR/trainready.db' or 'DIR:RUN_ID' -> (store, run id); a bare DIR means its latest."""
    path, run_id = ref, ""
    if ":" in ref and not Path(ref).exists():
        path, _, run_id = ref.rpartition(":")
    store = Store(path, create=False)
    return store, (store.get_run(run_id).run_id if run_id else store.latest_run().run_id)


def open_runs(refs: list[str]) -> tuple[Store, list[str]]:
    """One store holding every referenced run (copied into memory when they live in several)."""
    resolved = [_resolve(ref) for ref in refs]
    run_ids = [rid for _, rid in resolved]
    if len({s.db_path for s, _ in resolved}) == 1:
        for s, _ in resolved[1:]:
            s.close()
        return resolved[0][0], run_ids
    merged = Store.in_memory()
    for s, rid in resolved:
        merged.copy_run(s, rid)
        s.close()
    return merged, run_ids


__all__ = ["Observer", "RunSummary", "run", "merge", "open_runs", "StoreError", "DEFAULT_OUT"]
