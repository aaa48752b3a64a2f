"""`trainready profile -- python train.py ARGS` (capture) and `trainready analyze TRACE` (summary)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from trainready.cli.common import IMPORT_OPTION, console, fail, guard
from trainready.core.imports import import_modules, requested
from trainready.profile.text import PEAK_TFLOPS_MIN, QUICK_FLAGS, QUICK_NUMBER, parse_quick
from trainready.profile.text import run as run_analyze

__all__ = ["PEAK_TFLOPS_MIN", "QUICK_FLAGS", "QUICK_NUMBER", "analyze", "quick_analyze", "register"]


def _target(command: list[str]) -> list[str]:
    """`python train.py ARGS` / `train.py ARGS` / `python -m pkg ARGS` -> what capture runs."""
    if command and Path(command[0]).name.startswith("python"):
        command = command[1:]
    if not command:
        fail("give the training command after --, e.g. trainready profile -- python train.py")
    if command[0] == "-m":
        if len(command) < 2:
            fail("-m needs a module name")
        return command
    if not Path(command[0]).is_file():
        fail(f"{command[0]}: no such script")
    return command


def _run_child(cmd: list[str]) -> int:
    """Run the capture in a fresh Python: the user's script gets a clean interpreter."""
    return subprocess.run(cmd, env=os.environ.copy()).returncode


def register(app: typer.Typer) -> None:
    @app.command(
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    @guard
    def profile(
        ctx: typer.Context,
        steps: Annotated[int, typer.Option(min=0, help="Profiled steps (0: the whole run).")] = 3,
        wait: Annotated[int, typer.Option(min=0, help="Steps to skip first.")] = 1,
        warmup: Annotated[int, typer.Option(min=0, help="Warm-up steps (not kept).")] = 1,
        out: Annotated[Path, typer.Option(help="Directory for trace and metadata.")] = Path(
            "profile"
        ),
        imports: Annotated[list[str] | None, IMPORT_OPTION] = None,
    ) -> None:
        """Profile an unmodified training script: trainready profile -- python train.py ARGS.

        Optimizer steps drive a wait/warm-up/active schedule; the trace (shapes, stacks,
        memory) goes to OUT/trace.json.gz, the environment to OUT/metadata.json.
        """
        target = _target(list(ctx.args))
        modules = requested(imports)
        import_modules(modules)  # a bad module is one line here, before the script starts
        cmd = [sys.executable, "-m", "trainready.profile.capture", "--steps", str(steps)]
        cmd += ["--wait", str(wait), "--warmup", str(warmup), "--out", str(out)]
        cmd += [a for m in modules for a in ("--import", m)]  # the child imports them first
        code = _run_child([*cmd, "--", *target])
        if code:
            raise typer.Exit(code)
        console.print(f"trace: {out / 'trace.json.gz'}   analyse: trainready analyze {out}")

    app.command()(guard(analyze))


def analyze(
    trace: Annotated[Path, typer.Argument(help="Trace file (.json/.json.gz) or directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    all_steps: Annotated[
        bool, typer.Option(help="Keep the last profiler step (dropped by default).")
    ] = False,
    peak_tflops: Annotated[
        float | None,
        typer.Option(
            help="Peak TFLOP/s for MFU (default: the device's datasheet peak).",
            min=PEAK_TFLOPS_MIN,
        ),
    ] = None,
) -> None:
    """Summarise a profiler trace: device idle/compute time, kernel types, idle causes,
    communication overlap, kernel launches, steps."""
    run_analyze(trace, as_json=as_json, all_steps=all_steps, peak_tflops=peak_tflops)


def quick_analyze(argv: list[str]) -> int | None:
    """Run `analyze` when `argv` is its plain form (`trainready.profile.text.parse_quick`);
    returns its exit code, or None: Typer parses `argv`. Why: Typer's parsing imports pydantic
    and builds its validators, a fifth of a whole `trainready analyze` of a small trace. (The
    console entry, `trainready.cli.entry`, goes further: it runs the plain form before loading Typer
    at all.)"""
    parsed = parse_quick(argv)
    if parsed is None:
        return None
    trace, kwargs = parsed
    try:
        guard(analyze)(trace, **kwargs)
    except typer.Exit as e:
        return e.exit_code
    return 0
