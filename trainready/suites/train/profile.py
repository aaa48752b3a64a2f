"""`trainready run train --profile`: a few steps after a scenario's timed ones, recorded.

The profiled scenario runs `capture.extra_steps(PROFILE_STEPS, PROFILE_WARMUP)` more steps than
its spec; `capture.profile_after` only counts the timed ones and starts torch.profiler after them,
so the timed steps, the first step and the peak memory are measured as without profiling, and the
child cuts its record back to them (`timed_record`). One process: `python -m
trainready.suites.train.profile SPEC.json OUT.json PROFILE.json` (`profiled_main`); several ranks:
the `rank_train_profiled` launch target, rank 0 recording. The trace and metadata.json go to the
case's artifacts directory; the suite's diagnostics carry their run-relative paths and a short
analysis (`describe_capture`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainready.core.context import CaseContext
from trainready.profile import capture
from trainready.suites.train.loop import TrainSpec
from trainready.suites.train.scenario import Scenario

MODULE = "trainready.suites.train.profile"  # the profiled loop's entry point (profiled_main)

# Steps recorded after the timed ones, and the profiler's warm-up before them.
PROFILE_STEPS = 3
PROFILE_WARMUP = 1
PROFILE_STARTED = "profile_started.json"  # the child's note: timed steps done, profiler starting

Run = Callable[[TrainSpec, "dict[str, Any] | None"], Scenario]


def profile_plan(out_dir: Path, spec: TrainSpec, started: Path, scenario: str) -> dict[str, Any]:
    """What the child needs: where the capture goes, how many steps are timed (the profiler
    starts after them), where to note that they are done, and what the metadata should say."""
    return {
        "dir": str(out_dir),
        "after": spec.steps,
        "started": str(started),
        "metadata": {"suite": "train", "scenario": scenario, "timed_spec": spec.to_json()},
    }


def run_profiled(
    run: Run,
    ctx: CaseContext,
    spec: TrainSpec,
    env: dict[str, str],
    work: Path,
    scenario: tuple[str, str],
    dtype: str,
) -> Scenario:
    """The scenario (mode, name), with `capture.extra_steps` more steps profiled after its timed
    ones into ARTIFACTS/MODE-NAME/; `.profile` says what was captured, or why nothing was.
    `run(spec, profile_plan_or_None)` runs one scenario the way the suite does."""
    try:
        out_dir = ctx.artifacts() / "-".join(scenario)
    except OSError as e:
        s = run(spec, None)
        s.profile = {"error": f"not captured: {e}"}
        return s
    work.mkdir(parents=True, exist_ok=True)
    started = work / PROFILE_STARTED
    extra = capture.extra_steps(PROFILE_STEPS, PROFILE_WARMUP)
    # The profiler's schedule counts steps: the planned ones exactly, no adaptive extra ones.
    longer = dataclasses.replace(spec, steps=spec.steps + extra, timing_s=0.0)
    plan = profile_plan(out_dir, spec, started, "/".join(scenario))
    s = run(longer, plan)
    if s.record is None and started.exists():
        # The timed steps were done: profiling, not the scenario, failed. Measure it again
        # without (cold from an empty cache again: the failed run filled it).
        error = f"the profiled process failed after its timed steps ({s.status}: {s.error})"
        if scenario[1] == "cold":
            for path in env.values():
                shutil.rmtree(path, ignore_errors=True)
        s = run(spec, None)
        s.profile = {**capture_files(ctx, out_dir), "error": error + "; measured again without"}
        return s
    s.profile = describe_capture(ctx, out_dir, ctx.peak(dtype))
    return s


def capture_files(ctx: CaseContext, out_dir: Path) -> dict[str, Any]:
    """The capture's files that exist, relative to the run directory."""
    files = {"trace": out_dir / capture.TRACE_NAME, "metadata": out_dir / capture.METADATA_NAME}
    return {k: ctx.run_relative(path) for k, path in files.items() if path.exists()}


def describe_capture(
    ctx: CaseContext, out_dir: Path, peak: dict[str, Any] | None
) -> dict[str, Any]:
    """Files, what the metadata says of the schedule, and a short analysis of the trace."""
    info = capture_files(ctx, out_dir)
    meta: dict[str, Any] = {}
    if "metadata" in info:
        meta = json.loads((out_dir / capture.METADATA_NAME).read_text())
        info["steps"] = meta.get("active_steps_recorded")
        info["complete"] = meta.get("complete")
    if meta.get("error"):
        info["error"] = f"capture failed: {meta['error']}"
    if "trace" not in info:
        info.setdefault("error", "no trace written")
        return info
    try:
        info["summary"] = capture.trace_brief(
            out_dir / capture.TRACE_NAME, peak_flops=(peak or {}).get("flops")
        )
    except Exception as e:  # noqa: BLE001 - the trace stays for `trainready analyze`
        info["summary_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return info


def timed_record(record: dict[str, Any], timed_steps: int, memory: dict[str, Any] | None):
    """A profiled run's record cut back to its timed steps, with the peak memory they reached."""
    out = dict(record)
    out["step_times_s"] = record["step_times_s"][: timed_steps - 1]
    out["losses"] = record["losses"][:timed_steps]
    out["finite"] = all(math.isfinite(x) for x in out["losses"])
    if memory and memory.get("peak_allocated") is not None:
        out["peak_memory_bytes"] = memory["peak_allocated"]
    return out


def _profiled_train(plan: dict[str, Any], device: str, profiled: bool, train_fn):
    """Run `train_fn()` (the longer spec) with its steps after plan["after"] profiled (when
    `profiled`), noting the timed steps' memory as the profiler starts; returns (what train_fn
    returned, that memory)."""
    from trainready.device import memory_stats

    memory: dict[str, Any] = {}
    if not profiled:
        return train_fn(), memory

    def on_start() -> None:
        memory.update(memory_stats(device) or {})
        Path(plan["started"]).write_text(json.dumps(memory))

    with capture.profile_after(
        plan["dir"],
        after=plan["after"],
        steps=PROFILE_STEPS,
        warmup=PROFILE_WARMUP,
        on_start=on_start,
        device=device,
        metadata=plan.get("metadata"),
    ):
        value = train_fn()
    return value, memory


def profiled_main(argv: list[str]) -> int:
    """python -m trainready.suites.train.suite SPEC.json OUT.json PROFILE.json: what `python -m
    trainready.suites.train.loop SPEC.json OUT.json` does, with the steps after the timed ones profiled;
    OUT.json keeps what the timed steps measured."""
    from trainready.suites.train import loop

    spec_path, out_path, plan_path = (Path(a) for a in argv)
    plan = json.loads(plan_path.read_text())
    device = json.loads(spec_path.read_text())["device"]
    code, memory = _profiled_train(
        plan, device, True, lambda: loop.main([str(spec_path), str(out_path)])
    )
    if code == 0:
        record = json.loads(out_path.read_text())
        out_path.write_text(json.dumps(timed_record(record, plan["after"], memory)))
    return code


def rank_train_profiled(env: Any, spec: dict[str, Any], profile: dict[str, Any]) -> dict:
    """`trainready.core.launch` target: `loop.rank_train` with the steps after the timed ones
    profiled on rank 0 (every rank runs them: FSDP's collectives need all ranks)."""
    from trainready.suites.train.loop import rank_train

    record, memory = _profiled_train(
        profile, env.device, env.rank == 0, lambda: rank_train(env, spec)
    )
    return timed_record(record, profile["after"], memory)


if __name__ == "__main__":
    sys.exit(profiled_main(sys.argv[1:]))
