"""Capture a profiler trace of training steps: of an unmodified script, or of a step loop.

`python -m trainready.profile.capture [--steps N] [--wait W] [--warmup U] --out DIR -- SCRIPT ARGS`
runs SCRIPT (or `-m MODULE`) as `__main__` in this process with torch.profiler running on a
wait / warm-up / active schedule that advances on every optimizer step: a global
`torch.optim.Optimizer` step post-hook calls `profiler.step()`, so the script needs no change.
After the active steps the trace is written and the profiler stops, so the rest of the script
runs at full speed. `--steps 0` profiles the whole script instead (inference, no optimizer).

In code (what `trainready run train --profile` uses):

    with profile_steps(out_dir, steps=3) as step:
        for batch in data:
            train_step(batch)
            step()

Both record shapes, Python stacks and memory, and write DIR/trace.json.gz (Kineto JSON, gzipped)
and DIR/metadata.json (environment snapshot, schedule, the command, step count seen).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import runpy
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TRACE_NAME = "trace.json.gz"
METADATA_NAME = "metadata.json"


def _activities() -> list[Any]:
    """CPU plus whatever accelerator activity this torch build can record (CUDA, XPU, ...)."""
    from torch.profiler import ProfilerActivity, supported_activities

    return sorted(supported_activities(), key=lambda a: a.value) or [ProfilerActivity.CPU]


def _write_gzip(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, gzip.open(dst, "wb", compresslevel=6) as fout:
        shutil.copyfileobj(fin, fout, 4 << 20)
    src.unlink()


class StepProfiler:
    """torch.profiler on a wait/warm-up/active schedule, writing DIR/trace.json.gz when done."""

    def __init__(self, out_dir: str | Path, steps: int = 3, wait: int = 1, warmup: int = 1):
        import torch.profiler

        if steps < 0 or wait < 0 or warmup < 0:
            raise ValueError("steps, wait and warmup must be >= 0")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.steps, self.wait, self.warmup = steps, wait, warmup
        self.seen = 0  # steps completed while profiling
        self.done = False
        self.started_at = time.time()
        schedule = (
            torch.profiler.schedule(wait=wait, warmup=warmup, active=steps, repeat=1)
            if steps > 0
            else None
        )
        self._prof = torch.profiler.profile(
            activities=_activities(),
            schedule=schedule,
            on_trace_ready=self._save,
            record_shapes=True,
            with_stack=True,
            profile_memory=True,
        )

    @property
    def recorded_steps(self) -> int:
        """Active steps in the trace: fewer than asked when the run ended early."""
        return max(0, min(self.steps, self.seen - self.wait - self.warmup))

    @property
    def trace_path(self) -> Path:
        return self.out_dir / TRACE_NAME

    def _save(self, prof: Any) -> None:
        raw = self.out_dir / "trace.json"
        prof.export_chrome_trace(str(raw))
        _write_gzip(raw, self.trace_path)
        self.done = True

    def start(self) -> None:
        self._prof.start()

    def step(self) -> None:
        """Mark the end of one training step."""
        if self.done:
            return
        self.seen += 1
        self._prof.step()
        if self.done:  # the schedule's active steps are written: stop paying for profiling
            self._prof.stop()

    def stop(self) -> None:
        """Stop profiling; a run that ended inside the active steps still writes what it has."""
        if not self.done:
            with contextlib.suppress(RuntimeError):  # already stopped by an exception path
                self._prof.stop()

    def write_metadata(self, extra: dict[str, Any] | None = None) -> None:
        from trainready.device import resolve
        from trainready.env import snapshot

        meta = {
            "trace": TRACE_NAME if self.trace_path.exists() else None,
            "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.steps},
            "steps_seen": self.seen,
            "active_steps_recorded": self.recorded_steps,
            "complete": self.trace_path.exists() and self.recorded_steps == self.steps,
            "started_at": self.started_at,
            "wall_s": time.time() - self.started_at,
            "env": snapshot(resolve("auto")),
            **(extra or {}),
        }
        (self.out_dir / METADATA_NAME).write_text(json.dumps(meta, indent=1, default=str))


@contextlib.contextmanager
def profile_steps(
    out_dir: str | Path, steps: int = 3, wait: int = 1, warmup: int = 1
) -> Iterator[Callable[[], None]]:
    """Profile a step loop: yields `step()`, to call after every training step."""
    prof = StepProfiler(out_dir, steps=steps, wait=wait, warmup=warmup)
    prof.start()
    try:
        yield prof.step
    finally:
        prof.stop()
        prof.write_metadata()


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m trainready.profile.capture",
        description="Profile the optimizer steps of an unmodified training script.",
    )
    ap.add_argument("--steps", type=int, default=3, help="active (recorded) steps; 0: whole run")
    ap.add_argument("--wait", type=int, default=1, help="steps to skip before warming up")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up steps (profiled, discarded)")
    ap.add_argument("--out", type=Path, required=True, help="directory for the trace")
    ap.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT ARGS, or -m MODULE ARGS")
    args = ap.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target:
        ap.error("give the script to run: -- SCRIPT ARGS")
    args.target = target
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    prof = StepProfiler(args.out, steps=args.steps, wait=args.wait, warmup=args.warmup)
    handle = register_optimizer_step_post_hook(
        lambda *_: prof.step()  # every optimizer's step(), whatever the script builds
    )
    module = args.target[1] if args.target[0] == "-m" and len(args.target) > 1 else None
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = args.target[1:] if module else list(args.target)
    code = 0
    prof.start()
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script = Path(sys.argv[0])
            sys.path.insert(0, str(script.resolve().parent))
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        handle.remove()
        sys.argv, sys.path[:] = saved_argv, saved_path
        prof.stop()
        prof.write_metadata({"command": args.target, "exit_code": code})
    if not prof.trace_path.exists():
        print(
            f"trainready profile: no trace written: {prof.seen} optimizer step(s) seen, "
            f"the schedule needs {args.wait + args.warmup + args.steps} "
            "(use fewer --steps/--wait/--warmup, or --steps 0 for the whole run)",
            file=sys.stderr,
        )
        return code or 3
    partial = (
        ""
        if prof.recorded_steps == args.steps
        else (f" (only {prof.recorded_steps} of {args.steps} active steps: the run ended first)")
    )
    print(f"trainready profile: wrote {prof.trace_path}{partial}", file=sys.stderr)
    return code


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
