"""Capture a profiler trace of training steps: of an unmodified script, or of a step loop.

`python -m trainready.profile.capture [--steps N] [--wait W] [--warmup U] --out DIR -- SCRIPT ARGS`
runs SCRIPT (or `-m MODULE`) as `__main__` in this process with torch.profiler running on a
wait / warm-up / active schedule that advances on every optimizer step: a global
`torch.optim.Optimizer` step post-hook calls `profiler.step()`, so the script needs no change.
After the active steps the trace is written and the profiler stops, so the rest of the script
runs at full speed. `--steps 0` profiles the whole script instead (inference, no optimizer).

In code, around a step loop:

    with profile_steps(out_dir, steps=3) as step:
        for batch in data:
            train_step(batch)
            step()

or around code that times its own steps, leaving those untouched (what `trainready run train
--profile` uses: `after` timed steps, then the profiled ones):

    with profile_after(out_dir, after=timed_steps, steps=3):
        train(steps=timed_steps + extra_steps(3))

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

    def __init__(
        self,
        out_dir: str | Path,
        steps: int = 3,
        wait: int = 1,
        warmup: int = 1,
        device: str | None = None,
    ):
        import torch.profiler

        if steps < 0 or wait < 0 or warmup < 0:
            raise ValueError("steps, wait and warmup must be >= 0")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.steps, self.wait, self.warmup = steps, wait, warmup
        self.device = device  # for the metadata's environment snapshot (None: the default)
        self.seen = 0  # steps completed while profiling
        self.started = False
        self.done = False
        self._backend_named = False  # memory.BACKEND_KEY written (or nothing to write)
        self.error: str | None = None  # why the capture failed, for the metadata
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
        self.started = True
        self._prof.start()
        self._name_backend()

    def step(self) -> None:
        """Mark the end of one training step."""
        if self.done:
            return
        self.seen += 1
        self._prof.step()
        if self.done:  # the schedule's active steps are written: stop paying for profiling
            self._prof.stop()
        else:
            self._name_backend()

    def _name_backend(self) -> None:
        """Write the PrivateUse1 backend's name into the trace (memory.BACKEND_KEY), once, when
        the profiler records (metadata added before that is dropped); nothing for a run whose
        PrivateUse1 is unnamed, i.e. unused. Called at every step: done, it returns first."""
        if self._backend_named:
            return
        import torch
        from torch.profiler import ProfilerAction

        from trainready.profile.memory import BACKEND_KEY

        if self._prof.current_action not in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            return
        self._backend_named = True
        name = torch._C._get_privateuse1_backend_name()
        if name != "privateuseone":
            self._prof.add_metadata(BACKEND_KEY, name)

    def stop(self) -> None:
        """Stop profiling; a run that ended inside the active steps still writes what it has."""
        if self.started and not self.done:
            with contextlib.suppress(RuntimeError):  # already stopped by an exception path
                self._prof.stop()

    def write_metadata(self, extra: dict[str, Any] | None = None) -> None:
        from trainready.core.env import snapshot
        from trainready.device import resolve

        meta = {
            "trace": TRACE_NAME if self.trace_path.exists() else None,
            "schedule": {"wait": self.wait, "warmup": self.warmup, "active": self.steps},
            "steps_seen": self.seen,
            "active_steps_recorded": self.recorded_steps,
            "complete": self.trace_path.exists() and self.recorded_steps == self.steps,
            "started_at": self.started_at,
            "wall_s": time.time() - self.started_at,
            "env": snapshot(self.device or resolve("auto")),
            **({"error": self.error} if self.error else {}),
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


def _error_head(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]


def extra_steps(steps: int = 3, warmup: int = 1) -> int:
    """Optimizer steps `profile_after` needs after its `after` ones: the one that starts the
    profiler, the warm-up ones and the recorded ones."""
    return 1 + warmup + steps


class _AfterHook:
    """A global optimizer step post-hook: counts steps, starts the profiler at the end of step
    `after` + 1, then advances it. A profiler error stops the capture, never the training."""

    def __init__(self, prof: StepProfiler, after: int, on_start: Callable[[], None] | None):
        self.prof, self.after, self.on_start = prof, after, on_start
        self.count = 0

    def __call__(self, *_: Any) -> None:
        self.count += 1
        if self.count <= self.after or self.prof.done or self.prof.error:
            return
        try:
            if self.prof.started:
                self.prof.step()
            else:
                if self.on_start is not None:
                    self.on_start()
                self.prof.start()
        except Exception as e:  # noqa: BLE001 - a failed capture is a finding, not a crash
            self.prof.error = _error_head(e)
            with contextlib.suppress(Exception):
                self.prof.stop()
            self.prof.done = True  # nothing more to record


@contextlib.contextmanager
def profile_after(
    out_dir: str | Path,
    after: int,
    steps: int = 3,
    warmup: int = 1,
    on_start: Callable[[], None] | None = None,
    device: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Iterator[StepProfiler]:
    """Profile the optimizer steps that follow the first `after` ones, which run untouched.

    For code that times its own steps: until `after` steps are done the hook only counts, and
    the profiler starts at the end of the next step (so the step that pays for starting it is
    not a timed one either; `on_start()` runs just before, e.g. to read the timed steps' peak
    memory). Then `warmup` steps warm it up and `steps` are recorded: run at least
    `after + extra_steps(steps, warmup)` steps. Errors of the profiler end up in the metadata
    (and `.error`), not in the training.
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook

    prof = StepProfiler(out_dir, steps=steps, wait=0, warmup=warmup, device=device)
    handle = register_optimizer_step_post_hook(_AfterHook(prof, after, on_start))
    try:
        yield prof
    finally:
        handle.remove()
        prof.stop()
        try:
            prof.write_metadata({"after_steps": after, **(metadata or {})})
        except Exception as e:  # noqa: BLE001 - the training's own result must still count
            prof.error = prof.error or _error_head(e)
            print(f"trainready profile: no metadata written: {prof.error}", file=sys.stderr)


_OP_FIELDS = ("op", "input_dims", "dtype", "calls", "timed_on", "tflops", "mfu")


def _top_kernels(trace: Any, rows: Any, top: int) -> list[dict[str, Any]]:
    """Device kernels by total time: name, calls, ms."""
    import numpy as np

    if not len(rows):
        return []
    ids, inverse = np.unique(trace.name[rows], return_inverse=True)
    total = np.bincount(inverse, weights=trace.dur[rows].astype(np.float64))
    calls = np.bincount(inverse)
    order = np.argsort(-total, kind="stable")[:top].tolist()
    return [
        {"name": trace.strings[int(ids[i])], "calls": int(calls[i]), "ms": total[i] / 1e6}
        for i in order
    ]


def trace_brief(path: str | Path, top: int = 5, peak_flops: float | None = None) -> dict[str, Any]:
    """A few numbers that say where a captured trace's time goes, for a result's diagnostics:
    the median profiler step, device idle and compute shares (None without device activity, e.g.
    on the CPU), the kernels with the most device time and the matmul/conv/attention ops with the
    most time (with TFLOP/s and MFU against `peak_flops`). `trainready analyze` has the rest."""
    import numpy as np

    from trainready.profile import analysis
    from trainready.profile.opflops import mfu_summary
    from trainready.profile.trace import KIND_KERNEL, load_trace

    trace = load_trace(path)
    win = analysis.window(trace)
    steps = analysis.step_breakdown(trace)
    kept = steps[:-1] if win.trimmed_last_step else steps
    temporal = analysis.temporal_breakdown(trace, win)
    ops = mfu_summary(trace, top=top, peak=peak_flops)["top"]
    kernels = np.flatnonzero(win.keep & (trace.kind == KIND_KERNEL))
    return {
        "events": len(trace),
        "steps": len(kept),
        "step_ms": float(np.median([s["step_ns"] for s in kept])) / 1e6 if kept else None,
        "device_idle_pct": temporal["idle_pct"],
        "device_compute_pct": temporal["compute_pct"],
        "top_kernels": _top_kernels(trace, kernels, top),
        "top_ops": [{**{k: g[k] for k in _OP_FIELDS}, "ms": g["time_ns"] / 1e6} for g in ops],
    }


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m trainready.profile.capture",
        description="Profile the optimizer steps of an unmodified training script.",
    )
    ap.add_argument("--steps", type=int, default=3, help="active (recorded) steps; 0: whole run")
    ap.add_argument("--wait", type=int, default=1, help="steps to skip before warming up")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up steps (profiled, discarded)")
    ap.add_argument("--out", type=Path, required=True, help="directory for the trace")
    ap.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE before the script (repeatable; adds to TRAINREADY_IMPORT)",
    )
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

    from trainready.core.imports import ImportFailed, import_modules, requested

    imports = requested(args.imports)
    try:  # before the script touches a device: a module may register it
        import_modules(imports)
    except ImportFailed as e:
        print(f"trainready profile: error: {e}", file=sys.stderr)
        return 2

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
        prof.write_metadata({"command": args.target, "exit_code": code, "imports": imports})
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
