"""Each scenario of a train case in its own fresh process(es), and what they gave back.

`run_modes` runs both modes scenario by scenario, taking turns (eager cold, compiled cold, eager
warm, ...), each mode with its own compile cache, empty at the start and shared by its scenarios
in order. One scenario is `python -m trainready.suites.train.loop` (`run_single`: a fork of the case's zygote
where `train_zygote.usable`, else a fresh interpreter), or
`rank_train` on fresh ranks under torchrun with FSDP2 (`run_ranks`, `combine_ranks`); with
`--profile`, the headline scenario runs profiled (`profile.py`). A process that fails gives a
`Scenario` with its status and the tail of its output, never a record.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainready.core.context import CaseContext
from trainready.core.procs import guarded_command
from trainready.device import compile_cache_env
from trainready.metrics.sampler import Rule, Sampler
from trainready.probes.compile import backend_unsupported
from trainready.suites.train import profile as train_profile
from trainready.suites.train import zygote as train_zygote
from trainready.suites.train.loop import TrainSpec
from trainready.suites.train.plan import MODES, process_timing_s, scenario_spec
from trainready.suites.train.rates import repeat_name, same_work, steady
from trainready.suites.train.scenario import Scenario

LOG_TAIL_CHARS = 3000


_KIND_STATUS = {
    "compile": "fail_compile",
    "oom": "oom",
    "run": "fail_run",
    "error": "fail_run",
    "unsupported": "unsupported",
}


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""


def run_single(
    spec: TrainSpec,
    env: dict[str, str],
    work: Path,
    timeout_s: float,
    profile: dict[str, Any] | None = None,
) -> Scenario:
    """`python -m trainready.suites.train.loop` with `env` added: forked by the zygote `run_modes` opened
    (`train_zygote.current`), else in a fresh interpreter; with `profile` (see
    `train_profile.profile_plan`), `python -m trainready.suites.train.profile` in a fresh one."""
    work.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, log_path = work / "spec.json", work / "result.json", work / "output.log"
    spec_path.write_text(json.dumps(spec.to_json()))
    module, args = "trainready.suites.train.loop", [str(spec_path), str(out_path)]
    if profile is not None:
        plan_path = work / "profile.json"
        plan_path.write_text(json.dumps(profile))
        module, args = train_profile.MODULE, [*args, str(plan_path)]
    zygote = train_zygote.current() if profile is None else None
    s = Scenario("", "")
    t0 = time.perf_counter()
    try:
        if zygote is not None:
            returncode = zygote.run(args, {**os.environ, **env}, str(log_path), timeout_s)
        else:
            returncode = _fresh_interpreter(
                [sys.executable, "-m", module, *args], env, log_path, timeout_s
            )
    except subprocess.TimeoutExpired:
        s.status, s.error = "timeout", f"exceeded the case budget ({timeout_s:.0f} s left)"
        s.detail = _tail(log_path)
        return s
    except train_zygote.ZygoteLost as e:
        train_zygote.forget(zygote)
        s.status, s.error = "crash", f"training process lost: {e}"
        s.detail = _tail(log_path)
        return s
    s.process_s = time.perf_counter() - t0
    result = json.loads(out_path.read_text()) if out_path.exists() else None
    if returncode == 0 and result is not None:
        s.record = result
    elif result is not None and "error" in result:
        s.status, s.error = _KIND_STATUS[result["kind"]], result["error"]
        s.detail = result.get("traceback", "")
    else:
        from trainready.core.runner import signal_name

        s.status, s.error = "crash", f"training process died: {signal_name(returncode)}"
        s.detail = _tail(log_path)
    return s


def _fresh_interpreter(
    cmd: list[str], env: dict[str, str], log_path: Path, timeout_s: float
) -> int:
    """`cmd` in a new interpreter with `env` added, its output in `log_path`: the exit code. It
    dies with this worker even outside its process group, and is refused once the run stopped."""
    cmd, guard_env = guarded_command(cmd)
    with open(log_path, "wb") as log:
        return subprocess.run(
            cmd,
            env={**os.environ, **env, **guard_env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
        ).returncode


def combine_ranks(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One record for a data-parallel step: the slowest rank's times (a step ends when every rank
    has finished it), the mean of the ranks' losses (each rank's loss is the mean over an equal
    share of the global batch, so their mean is the global loss), the largest peak memory."""
    head = dict(records[0])
    head["first_step_s"] = max(r["first_step_s"] for r in records)
    head["first_step_phases"] = {
        k: max(r["first_step_phases"][k] for r in records) for k in head["first_step_phases"]
    }
    head["step_times_s"] = [
        max(ts) for ts in zip(*(r["step_times_s"] for r in records), strict=True)
    ]
    head["losses"] = [sum(ls) / len(ls) for ls in zip(*(r["losses"] for r in records), strict=True)]
    peaks = [r["peak_memory_bytes"] for r in records if r.get("peak_memory_bytes") is not None]
    head["peak_memory_bytes"] = max(peaks) if peaks else None
    head["finite"] = all(r["finite"] for r in records)
    head["per_rank_first_step_s"] = [r["first_step_s"] for r in records]
    head.pop("rank", None)
    return head


def run_ranks(
    spec: TrainSpec,
    nproc: int,
    backend: str | None,
    env: dict[str, str],
    timeout_s: float,
    profile: dict[str, Any] | None = None,
) -> Scenario:
    """`rank_train` on `nproc` fresh ranks (torchrun), FSDP2 over them (with `profile`:
    `rank_train_profiled`, rank 0 profiled)."""
    from trainready.core.launch import LaunchError, launch

    s = Scenario("", "")
    t0 = time.perf_counter()
    target, args = "trainready.suites.train.loop:rank_train", {"spec": spec.to_json()}
    if profile is not None:
        target = f"{train_profile.MODULE}:rank_train_profiled"
        args = {**args, "profile": profile}
    try:
        res = launch(
            target,
            nproc,
            device=spec.device,
            backend=backend,
            args=args,
            timeout_s=timeout_s,
            env=env,
        )
    except LaunchError as e:
        s.status, s.error = "crash", "ranks did not start"
        s.detail = str(e)[-LOG_TAIL_CHARS:]
        return s
    s.process_s = time.perf_counter() - t0
    if res.ok:
        s.record = combine_ranks([r for r in res.per_rank if r is not None])
        return s
    if res.timed_out:
        s.status, s.error = "timeout", f"exceeded the case budget ({timeout_s:.0f} s left)"
    elif res.first_error is not None:
        rank, error = res.first_error
        kind = "compile" if error.startswith("CompileFailure") else res.kinds[rank]
        s.status = _KIND_STATUS.get(kind or "error", "unsupported")
        s.error = f"rank {rank}: {error}"
    else:
        s.status, s.error = "crash", f"ranks lost: {', '.join(res.status)}"
    s.detail = "\n".join(t for t in res.stderr_tails if t)[-LOG_TAIL_CHARS:]
    return s


def _run(
    p: dict[str, Any],
    spec: TrainSpec,
    env: dict[str, str],
    work: Path,
    deadline: float,
    profile: dict[str, Any] | None = None,
) -> Scenario:
    left = max(1.0, deadline - time.monotonic())
    if p["nproc"] > 1:
        return run_ranks(spec, p["nproc"], p["pg_backend"], env, left, profile)
    return run_single(spec, env, work, left, profile)


def _run_as_profiled(p, env, work, deadline, spec, profile) -> Scenario:  # noqa: ANN001
    """`_run` in the argument order `train_profile.Run` calls it: (spec, profile plan)."""
    return _run(p, spec, env, work, deadline, profile)


def profiled_scenario(p: dict[str, Any]) -> str | None:
    """The scenario --profile captures in each mode: the one the headline speed comes from."""
    if not p.get("profile"):
        return None
    return "warm" if "warm" in p["scenarios"] else "cold"


@dataclass
class _ModeRun:
    """One mode's scenarios so far, with the compile cache they share (empty at the start)."""

    mode: str
    env: dict[str, str]
    why_unsupported: str | None  # the backend cannot compile for the device: nothing runs
    done: list[Scenario] = field(default_factory=list)


def _mode_run(p: dict[str, Any], ctx: CaseContext, mode: str, root: Path) -> _ModeRun:
    why = backend_unsupported(p["compile_backend"], ctx.device) if mode == "compiled" else None
    return _ModeRun(mode, compile_cache_env(ctx.device, root / mode / "cache"), why)


def _run_next(
    p: dict[str, Any], ctx: CaseContext, m: _ModeRun, name: str, root: Path, deadline: float
) -> None:
    """Run scenario `name` of mode `m` (after the ones `m` has done) and add it to `m.done`."""
    spec = scenario_spec(p, ctx.device, m.mode, name)
    if m.why_unsupported is not None:  # known before starting a process: say so, spend nothing
        m.done.append(
            Scenario(
                m.mode, name, status="unsupported", error=m.why_unsupported, spec=spec.to_json()
            )
        )
        return
    if m.done and m.done[0].record is None:
        m.done.append(
            Scenario(m.mode, name, status="skipped", error="cold failed", spec=spec.to_json())
        )
        return
    work = root / m.mode / name
    with ctx.phase(f"{m.mode}/{name}"):
        if name == profiled_scenario(p):
            s = train_profile.run_profiled(
                functools.partial(_run_as_profiled, p, m.env, work, deadline),
                ctx, spec, m.env, work, (m.mode, name), p["dtype"],
            )  # fmt: skip
        else:
            s = _run(p, spec, m.env, work, deadline)
    s.mode, s.name, s.spec = m.mode, name, spec.to_json()
    m.done.append(s)


def run_mode(p: dict[str, Any], ctx: CaseContext, mode: str, root: Path, deadline: float):
    """The scenarios of one mode in order, sharing one compile cache that starts empty."""
    m = _mode_run(p, ctx, mode, root)
    for name in p["scenarios"]:
        _run_next(p, ctx, m, name, root, deadline)
    return m.done


def run_modes(
    p: dict[str, Any], ctx: CaseContext, root: Path, deadline: float
) -> dict[str, list[Scenario]]:
    """Both modes, scenario by scenario (eager cold, compiled cold, eager warm, ...): on a machine
    whose load drifts, both modes then run under much the same load, so the speedup stays fair.
    Each mode still has its own cache and runs its scenarios in order."""
    runs = [_mode_run(p, ctx, mode, root) for mode in MODES]
    with train_zygote.forking(ctx.device) if p["nproc"] == 1 else contextlib.nullcontext():
        for name in p["scenarios"]:
            for m in runs:
                _run_next(p, ctx, m, name, root, deadline)
        add_repeats(p, ctx, runs, root, deadline)
    return {m.mode: m.done for m in runs}


def add_repeats(
    p: dict[str, Any], ctx: CaseContext, runs: list[_ModeRun], root: Path, deadline: float
) -> None:
    """After the planned scenarios, more processes of the main configuration on warm caches
    ("repeat2", "repeat3", ...: one per mode, in turn) while the steady medians' interval over
    processes is wider than the sampler's target and the case's repeat budget
    (`plan.process_timing_s`) allows: the one sampler (`metrics.sampler`, kind "level": the
    process is the unit sampled), the planned cold and warm processes its prior samples. Only
    where at least two planned processes re-time the same work (cold and warm), so the scatter
    is measured, and only the modes whose planned processes all trained; a repeat that fails
    ends the repeats (its failure is the case's, as any scenario's)."""
    budget = process_timing_s(p, ctx.device)
    planned = [n for n in p["scenarios"] if same_work(n)]
    if budget <= 0 or len(planned) < 2:
        return
    samplers: dict[str, Sampler] = {}
    for m in runs:
        done = [s for s in m.done if same_work(s.name)]
        if len(done) == len(planned) and all(s.record for s in done):
            medians = [steady(s.record, p["warmup"]).median_s for s in done]
            rule = Rule(kind="level", min_samples=len(planned), extra_s=budget)
            samplers[m.mode] = Sampler(rule, prior=medians)
    k = len(planned)
    # Every sampler is asked each round (asking records its check): a pair runs while one wants.
    while any([s.more() for s in samplers.values()]) and time.monotonic() < deadline:
        k += 1
        for m in (m for m in runs if m.mode in samplers):
            _run_next(p, ctx, m, repeat_name(k), root, deadline)
            s = m.done[-1]
            if s.record is None:
                return
            samplers[m.mode].add(steady(s.record, p["warmup"]).median_s)
