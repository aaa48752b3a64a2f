"""The Python API; the CLI is a thin layer over it (one function per command).

import trainready

if __name__ == "__main__":  # workers are spawned and re-import the main script
    summary = trainready.run(["matmul"], device="cpu", preset="quick", out="runs")
    print(trainready.report(f"runs:{summary.run_id}", fmt="md"))
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainready.core.case import Case, Result
from trainready.core.concurrency import default_jobs
from trainready.core.config import ConfigError, RunConfig, check_choice, parse_shard
from trainready.core.context import ARTIFACTS
from trainready.core.lock import RunLock
from trainready.core.plan import PlannedSuite, plan
from trainready.core.runner import Job, Runner
from trainready.core.shutdown import Interrupted, interrupt_on_signals
from trainready.core.store import DB_NAME, RunRecord, Store, StoreError, new_run_id
from trainready.metrics.mfu import calculate as calculate_mfu
from trainready.suites import cpu_cores, expand, runs_alone

if TYPE_CHECKING:
    from trainready.device import PeakCache

DEFAULT_OUT = "runs"
EXECUTORS = ("local", "ray")


class Observer:
    """Progress callbacks for a run; the CLI draws a progress bar with them. All optional."""

    def on_message(self, text: str) -> None: ...

    def on_plan(self, run_id: str, total: int, earlier: dict[str, int] | None = None) -> None:
        """The run is planned: `total` cases; `earlier`: the statuses of those an earlier
        invocation stored (--resume), as counts."""

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

    cache = _peak_cache(store)
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
        peaks[dtype] = resolve_peak(cfg.device, dtype, cache)
    return peaks


def _peak_cache(store: Store) -> PeakCache:
    """Measured peaks are kept in the store, per machine (the device layer never sees a Store)."""
    from trainready.device import PeakCache

    return PeakCache(store.get_calibration, store.put_calibration)


def _import_requested(imports: Sequence[str] | None, device: str | None = None) -> list[str]:
    """Import TRAINREADY_IMPORT's modules and then `imports`, before any device is resolved (one
    may register the device); returns the list, which the run's other processes import too.

    The module registering `device`'s type comes first where it has one (`--device xla` imports
    torch_xla), so `--import` is optional for it and the run's workers and ranks import it too."""
    from trainready.core.imports import import_modules, requested
    from trainready.device.backends import registering_module

    modules = requested(imports)
    backend = registering_module(device) if device else None
    if backend and backend not in modules:
        modules.insert(0, backend)
    import_modules(modules)
    return modules


def _find_resumable(store: Store, cfg: RunConfig) -> RunRecord | None:
    identity = cfg.identity()
    for run in reversed(store.list_runs()):
        try:
            if RunConfig.from_json(run.config).identity() == identity:
                return run
        except (ConfigError, TypeError):  # settings no longer accepted (e.g. --budget-s nan)
            continue
    return None


def run(
    suites: list[str],
    device: str = "auto",
    preset: str = "quick",
    out: str | Path = DEFAULT_OUT,
    *,
    jobs: int | None = None,
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
    imports: Sequence[str] | None = None,
) -> RunSummary:
    """Run suites on a device; results land in `out`/trainready.db as they arrive.

    executor: "local" (worker processes on this machine) or "ray" (Ray actors, one per slot, each
    holding one Runner whose worker is reused across cases, on a Ray cluster at
    `ray_address`, or a local Ray instance when None).
    jobs: worker processes (ray: actors); None: what the device allows
    (`core.concurrency.default_jobs`). Correctness cases share them; a timing case runs alone,
    or on a CPU run on the cores its suite declares, beside correctness cases (`core.schedule`).
    imports: modules to import first, here and in every worker and rank, after those
    TRAINREADY_IMPORT names (`--import`); one that fails to import is an ImportFailed.
    """
    from trainready.core.env import snapshot
    from trainready.device import resolve

    obs = observer or Observer()
    check_choice("executor", executor, EXECUTORS)
    if not suites:
        raise ConfigError("no suite given")
    modules = _import_requested(imports, device)
    resolved = resolve(device)
    cfg = RunConfig(
        suites=expand(suites),
        device=resolved,
        preset=preset,
        dtype=dtype,
        budget_s=budget_s,
        filter=filter,
        shard=parse_shard(shard),
        jobs=default_jobs(resolved) if jobs is None else jobs,
        mem_limit_mb=mem_limit_mb,
        options=dict(options or {}),
        imports=modules,
    )
    planned = plan(cfg)
    total = sum(len(s.cases) for s in planned)
    store = Store(out)
    lock: RunLock | None = None  # held while this process runs the run: a second is refused
    try:
        previous = _find_resumable(store, cfg) if resume else None
        if resume and previous is None:
            obs.on_message("nothing to resume with these settings: starting a new run")
        cfg.peaks = _peaks(cfg, planned, store, obs)
        if previous is not None:
            run_id = previous.run_id
            lock = RunLock(store.dir, run_id)
            lock.acquire()
            done = store.done_case_ids(run_id)
            store.update_env(run_id, {"interrupted": None})  # running again: no longer stopped
        else:
            run_id, done = new_run_id(), set()
            lock = RunLock(store.dir, run_id)
            lock.acquire()  # before the run is stored, where a --resume could find it
            env = snapshot(cfg.device, imports=cfg.imports)
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
        obs.on_plan(run_id, total, dict(summary.counts))

        def on_result(result: Result) -> None:
            store.add_result(run_id, result)  # committed before anything else sees it
            summary.counts[result.status] += 1
            obs.on_result(result)

        if executor == "ray":
            from trainready.core.ray_executor import RayExecutor

            runner = RayExecutor(
                ray_address,
                on_start=obs.on_start,
                on_result=on_result,
                imports=cfg.imports,
                jobs=cfg.jobs,
                mem_limit_mb=cfg.mem_limit_mb,
            )
        else:
            runner = Runner(
                jobs=cfg.jobs,
                log_dir=store.dir / "logs" / run_id,
                mem_limit_mb=cfg.mem_limit_mb,
                on_start=obs.on_start,
                on_result=on_result,
                preload=[s.module_path for s in planned if s.cases],
                imports=cfg.imports,
            )
        # SIGINT, SIGTERM and SIGHUP all unwind through the runner's cleanup (core.shutdown).
        with interrupt_on_signals():
            try:
                with contextlib.closing(runner):
                    runner.run(_jobs(cfg, planned, done, store.dir / run_id))
            except Interrupted as stop:  # the run's row says so; the caller decides the rest
                store.update_env(run_id, {"interrupted": stop.record(summary.done, total)})
                stop.summary = summary
                raise
        store.finish_run(run_id)
        return summary
    finally:
        if lock is not None:
            lock.release()
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
            alone, cores = runs_alone(s.module), cpu_cores(s.module, cfg.device)
            jobs.append(
                Job(case, s.module_path, ctx["budget_s"], ctx, alone, cores if alone else None)
            )
    return jobs


@dataclass
class _MergeInput:
    """One run given to merge: where it came from, its record, plan, results and artifacts."""

    label: str  # DIR:RUN_ID, as the user can type it back
    record: RunRecord
    planned: list[Case]
    results: list[Result]
    artifacts: Path  # RUN_DIR/artifacts (results name files under it)
    db_path: Path | None = None  # the store it is in

    @property
    def case_ids(self) -> set[str]:
        return {c.id for c in self.planned} | {r.case_id for r in self.results}

    @property
    def shard(self) -> tuple[int, int] | None:
        return parse_shard(self.record.config.get("shard"))

    def settings(self) -> dict[str, Any]:
        return {**RunConfig.from_json(self.record.config).identity(), "shard": None}


def _load_merge_input(ref: str | Path) -> _MergeInput:
    store, run_id = _resolve(str(ref))
    with store:
        return _MergeInput(
            label=f"{store.dir}:{run_id}",
            record=store.get_run(run_id),
            planned=store.planned(run_id),
            results=store.results(run_id),
            artifacts=store.dir / run_id / ARTIFACTS,
            db_path=store.db_path,
        )


def _check_same_settings(inputs: list[_MergeInput]) -> None:
    head = inputs[0]
    for other in inputs[1:]:
        if other.settings() != head.settings():
            raise ConfigError(
                f"{other.label} was made with other settings than {head.label}; "
                "only shards of one run can be merged"
            )


def _check_disjoint(inputs: list[_MergeInput]) -> None:
    """No case may come from two inputs (the same run given twice included)."""
    owner: dict[str, _MergeInput] = {}
    for item in inputs:
        for case_id in sorted(item.case_ids):
            first = owner.setdefault(case_id, item)
            if first is not item:
                same = first.record.run_id == item.record.run_id
                again = " (the same run given twice)" if same else ""
                raise ConfigError(
                    f"case {case_id} is in both {first.label} and {item.label}{again}"
                )


def _check_out_is_not_an_input(inputs: list[_MergeInput], out: Path) -> None:
    """Merging into an input's own store would add its cases there a second time, as a new
    run beside the original."""
    target = (out if out.suffix == ".db" else out / DB_NAME).resolve()
    for item in inputs:
        if item.db_path is not None and item.db_path.resolve() == target:
            raise ConfigError(
                f"--out {out} is the store of {item.label}: merging into it would store its "
                "cases twice; choose another --out"
            )


def _missing_shards(inputs: list[_MergeInput]) -> list[str]:
    """The shards I/N of a sharded run that the inputs lack; each given shard must be distinct,
    of the same N, and never mixed with unsharded runs."""
    shards = [item.shard for item in inputs]
    if all(s is None for s in shards):
        return []
    if any(s is None for s in shards):
        loose = next(item.label for item in inputs if item.shard is None)
        raise ConfigError(f"{loose} is not a shard; merge the shards of one run, or whole runs")
    counts = sorted({n for _, n in shards})
    if len(counts) > 1:
        raise ConfigError(f"shards of different counts ({', '.join(f'/{n}' for n in counts)})")
    n = counts[0]
    seen = Counter(i for i, _ in shards)
    if twice := sorted(i for i, k in seen.items() if k > 1):
        raise ConfigError(f"shard {', '.join(f'{i}/{n}' for i in twice)} given more than once")
    return [f"{i}/{n}" for i in range(n) if i not in seen]


def _merged_record(inputs: list[_MergeInput], run_id: str, missing: list[str]) -> RunRecord:
    head = inputs[0].record
    env = {**head.env, "merged_from": [item.record.run_id for item in inputs]}
    if missing:  # the record says the run is partial, with what is absent
        given = [f"{i}/{n}" for i, n in sorted(item.shard for item in inputs)]
        env["partial_merge"] = {"shards": given, "missing_shards": missing}
    return replace(
        head,
        run_id=run_id,
        created_at=time.time(),
        finished_at=None,
        shard=None,
        config={**head.config, "shard": None},
        env=env,
        planned=sum(item.record.planned or 0 for item in inputs),
    )


def merge(sources: list[str | Path], out: str | Path, *, allow_partial: bool = False) -> str:
    """Combine shard outputs into one run in `out`; returns its id.

    Each source is DIR (its latest run) or DIR:RUN_ID. Refused with a ConfigError: runs with other
    settings, a case in two inputs, shards of different counts or given twice, and (unless
    `allow_partial`) a shard of the run missing. A partial merge records its missing shards in
    the run's env ("partial_merge") and stays unfinished.
    """
    if not sources:
        raise ConfigError("merge needs at least one run directory")
    inputs = [_load_merge_input(src) for src in sources]
    _check_out_is_not_an_input(inputs, Path(out))
    _check_same_settings(inputs)
    _check_disjoint(inputs)
    missing = _missing_shards(inputs)
    if missing and not allow_partial:
        raise ConfigError(
            f"missing shard {', '.join(missing)}: merge every shard of the run, "
            "or pass --allow-partial to merge these alone"
        )
    run_id = new_run_id()
    with Store(out) as store:
        store.add_run(_merged_record(inputs, run_id, missing))
        for item in inputs:
            store.add_planned(run_id, item.planned)
            for r in item.results:
                store.add_result(run_id, r)
            if item.artifacts.is_dir():  # inputs hold disjoint cases, so their directories too
                shutil.copytree(item.artifacts, store.dir / run_id / ARTIFACTS, dirs_exist_ok=True)
        if not missing and all(item.record.finished_at for item in inputs):
            store.finish_run(run_id)
    return run_id


def report(
    *runs: str | Path,
    compare: str | Sequence[str] | None = None,
    fmt: str = "md",
    verdict_config: str | Path | None = None,
) -> str:
    """`trainready report RUN... [--compare RUN2] --format FMT` as a string. A RUN is DIR (its
    latest run) or DIR:RUN_ID; the first is the primary, the other runs and `compare` (one RUN or
    several) sit beside it. `verdict_config`: a TOML file of readiness thresholds
    (`--verdict-config`; default: trainready/reporting/verdict.toml)."""
    from trainready.reporting import render

    if not runs:
        raise ConfigError("report needs at least one run")
    compared = [compare] if isinstance(compare, (str, Path)) else list(compare or [])
    store, run_ids = open_runs([str(r) for r in (*runs, *compared)])
    with store:
        return render(store, run_ids, fmt, verdict_config)


def devices(
    out: str | Path = DEFAULT_OUT,
    dtype: str = "bf16",
    *,
    measure: bool = True,
    recalibrate: bool = False,
    imports: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """The rows of `trainready devices`: per device its string ("cpu", "cuda:0"), `name`,
    `total_memory` (bytes, None where unknown), `peak`, the peak FLOP/s at `dtype` that MFU is
    computed against (device.resolve_peak's record: flops, source, label; None unless `measure`),
    and `info`, everything device_info knows. Measured peaks are cached in the store at `out`
    (`recalibrate` replaces them); without `measure` no store is opened or created. `imports`:
    modules to import first (after TRAINREADY_IMPORT's), e.g. one that registers a backend."""
    from trainready.device import available_devices, torch_dtype

    _import_requested(imports)
    _import_installed_backends()
    torch_dtype(dtype)  # a bad dtype is a one-line error even when nothing is measured
    with Store(out) if measure else contextlib.nullcontext() as store:
        return [_device_row(dev, dtype, store, recalibrate) for dev in available_devices()]


def _import_installed_backends() -> None:
    """Import each installed module that registers a device type (torch_xla), so `devices`
    lists its devices unasked; one that fails to import is left out (`run --device` names the
    error)."""
    from trainready.core.imports import ImportFailed, import_modules
    from trainready.device.backends import installed_registering_modules

    for module in installed_registering_modules():
        with contextlib.suppress(ImportFailed):
            import_modules([module])


def _device_row(dev: str, dtype: str, store: Store | None, recalibrate: bool) -> dict[str, Any]:
    """One device's row; its peak only with a store to cache a measured one in."""
    from trainready.device import device_info, resolve_peak

    info = device_info(dev)
    peak = None
    if store is not None:
        peak = resolve_peak(dev, dtype, _peak_cache(store), recalibrate=recalibrate)
    return {
        "device": dev,
        "name": info.get("name"),
        "total_memory": info.get("total_memory"),
        "peak": peak,
        "info": info,
    }


# `trainready mfu ... --json` as a dict: the calculator itself, the one code both use.
mfu = calculate_mfu


def _resolve(ref: str) -> tuple[Store, str]:
    """'DIR', 'DIR/trainready.db' or 'DIR:RUN_ID' -> (store, run id); a bare DIR means its latest."""
    path, run_id = ref, ""
    if ":" in ref and not Path(ref).exists():
        path, _, run_id = ref.rpartition(":")
    store = Store(path, create=False)
    try:
        return store, (store.get_run(run_id).run_id if run_id else store.latest_run().run_id)
    except StoreError:
        store.close()
        raise


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


__all__ = [
    "Observer",
    "RunSummary",
    "run",
    "merge",
    "report",
    "devices",
    "mfu",
    "open_runs",
    "StoreError",
    "DEFAULT_OUT",
]
