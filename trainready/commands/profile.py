"""`trainready profile -- python train.py ARGS` (capture) and `trainready analyze TRACE` (summary)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from trainready.clikit import IMPORT_OPTION, console, fail, guard
from trainready.imports import import_modules, requested

PEAK_TFLOPS_MIN = 0.001


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


def _short_kernel(name: str) -> str:
    """'void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>(Params)' -> the telling part."""
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(.*$", "", name)
    name = re.sub(r"^cutlass::Kernel<(.*)>$", r"\1", name)
    return name if len(name) <= 56 else name[:55] + "…"


def _run_child(cmd: list[str]) -> int:
    """Run the capture in a fresh Python: the user's script gets a clean interpreter."""
    return subprocess.run(cmd, env=os.environ.copy()).returncode


def _ms(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f} ms"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}%"


def _print_summary(s: dict[str, Any]) -> None:

    console.print(
        f"[bold]{s['path']}[/] rank {s['rank']} - {s['events']:,} events"
        + (f" - {s['device']}" if s["device"] else "")
        + (" - last profiler step left out" if s["window"]["trimmed_last_step"] else "")
    )
    if s.get("device_activity", True):
        _print_device_tables(s)
    else:
        console.print(
            "no device activity in this trace (a CPU-only run): no device time, kernel types, "
            "idle streams, launches or communication overlap to show"
        )
    _print_host_tables(s)


def _print_device_tables(s: dict[str, Any]) -> None:
    """What ran on the device: its time, kernel types, idle streams, launches, overlap."""
    from rich.table import Table

    t = s["temporal"]
    table = Table(title="Device time (first to last activity)")
    for col in ("span", "idle", "compute", "non-compute"):
        table.add_column(col, justify="right")
    table.add_row(
        _ms(t["span_ns"]),
        f"{_ms(t['idle_ns'])} ({_pct(t['idle_pct'])})",
        f"{_ms(t['compute_ns'])} ({_pct(t['compute_pct'])})",
        f"{_ms(t['non_compute_ns'])} ({_pct(t['non_compute_pct'])})",
    )
    console.print(table)
    kt = Table(title="Kernel types (share of busy time)")
    kt.add_column("type")
    kt.add_column("time", justify="right")
    kt.add_column("share", justify="right")
    for label, v in s["kernel_types"]["types"].items():
        kt.add_row(label, _ms(v["ns"]), _pct(v["pct"]))
    console.print(kt)
    it = Table(title="Idle time per stream")
    for col in ("stream", "idle", "host wait", "kernel wait", "other"):
        it.add_column(col, justify="right")
    for st in s["idle_time"]["streams"]:
        it.add_row(
            str(st["stream"]),
            _ms(st["idle_ns"]),
            _pct(st["host_wait_pct"]),
            _pct(st["kernel_wait_pct"]),
            _pct(st["other_pct"]),
        )
    console.print(it)
    lc = s["launches"]
    ov = s["overlap"]["overlap_pct"]
    console.print(
        f"launches: {lc['count']:,} ({lc['kernels']:,} kernels, {lc['memory']:,} memory; "
        f"{lc['multi_launches']:,} multi-activity calls), launch delay p50 "
        f"{_ms(lc['delay_ns']['p50'])} p90 {_ms(lc['delay_ns']['p90'])}; "
        f"{lc['short_kernels']:,} ran shorter than their launch call"
    )
    console.print(
        "communication overlapped by computation: "
        + ("no communication" if ov is None else _pct(ov))
    )


def _print_host_tables(s: dict[str, Any]) -> None:
    """FLOPs and MFU per op, dependencies, critical path, memory, your code, steps."""
    from rich.table import Table

    on_device = s.get("device_activity", True)
    fl = s["flops"]
    if fl["ops"]:
        # The report package (for its number formats) loads only when there is a table.
        from trainready.report import fmt

        ft = Table(title=f"Matmul/conv/attention FLOPs: {fl['ops']:,} op calls, "
                   f"{fl['flops'] / 1e12:,.3f} TFLOP in {_ms(fl['time_ns'])}")  # fmt: skip
        for col in ("op", "shapes", "dtype", "calls", "time", "TFLOP/s", "MFU"):
            ft.add_column(col, justify="left" if col in ("op", "shapes") else "right")
        for g in fl["top"]:
            ft.add_row(
                g["op"].removeprefix("aten::"),
                " ".join("x".join(map(str, d)) for d in g["input_dims"] if d),
                g["dtype"],
                str(g["calls"]),
                _ms(g["time_ns"]),
                "-" if g["tflops"] is None else fmt.number(g["tflops"]),
                "-" if g["mfu"] is None else fmt.percent(g["mfu"]),
            )
        console.print(ft)
        console.print("MFU " + "; ".join(sorted({g["peak"] for g in fl["top"]})))
        kt = Table(title="Kernels of those ops")
        for col in ("kernel", "calls", "time", "TFLOP/s", "MFU"):
            kt.add_column(col, justify="left" if col == "kernel" else "right")
        for g in fl["kernels"][:5]:
            kt.add_row(
                _short_kernel(g["kernel"]),
                str(g["calls"]),
                _ms(g["time_ns"]),
                "-" if g["tflops"] is None else fmt.number(g["tflops"]),
                "-" if g["mfu"] is None else fmt.percent(g["mfu"]),
            )
        if fl["kernels"]:
            console.print(kt)
    deps = ", ".join(f"{n:,} {k}" for k, n in s["dependencies"].items() if n)
    console.print(f"dependencies: {deps or 'none'}")
    for cp in s["critical_path"]:
        if cp["length_ns"]:
            parts = ", ".join(
                f"{k} {100 * v / cp['length_ns']:.0f}%" for k, v in cp["by_category"].items()
            )
            console.print(
                f"critical path of step {cp['step']}: {_ms(cp['length_ns'])} over "
                f"{cp['events']:,} events ({parts})"
            )
    for device, mem in s["memory"].items():
        console.print(
            f"memory {device}: peak {mem['peak_allocated'] / 2**20:,.1f} MiB allocated"
            + (f" in {mem['peak_op']}" if mem["peak_op"] else "")
            + (
                f", {mem['peak_reserved'] / 2**20:,.1f} MiB reserved"
                if mem["peak_reserved"]
                else ""
            )  # fmt: skip
            + f"; {mem['allocations']:,} allocations, {mem['frees']:,} frees"
        )
    if s["source"]:
        src = Table(title=f"Your code by {s['source'][0]['timed_on']} time")
        head = "your code → the call it made"
        for col in (head, "time", "events"):
            src.add_column(col, justify="left" if col == head else "right")
        for row in s["source"]:
            src.add_row(row["line"], _ms(row["time_ns"]), f"{row['events']:,}")
        console.print(src)
    if s["steps"]:
        st = Table(title="Profiler steps")
        columns = ["step", "step time", "host"]
        columns += ["device busy", "compute", "activities"] if on_device else []
        for col in columns:
            st.add_column(col, justify="right")
        for step in s["steps"]:
            row = [str(step["step"]), _ms(step["step_ns"]), _ms(step["host_ns"])]
            if on_device:
                row += [
                    _ms(step["device_busy_ns"]),
                    _ms(step["compute_ns"]),
                    f"{step['activities']:,}",
                ]
            st.add_row(*row)
        console.print(st)


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
    if "numpy" not in sys.modules:  # OpenBLAS starts a thread per core when numpy loads; no
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # analysis multiplies matrices
    from trainready.profile.analysis import summary
    from trainready.profile.cache import load_cached
    from trainready.profile.trace import load

    peak = None if peak_tflops is None else peak_tflops * 1e12
    traces = load(trace, loader=load_cached)  # a second analyze reads the parsed columns
    summaries = [summary(t, trim_last_step=not all_steps, peak_flops=peak) for t in traces]
    if as_json:
        sys.stdout.write(json.dumps(summaries, indent=1) + "\n")
        return
    for s in summaries:
        _print_summary(s)


# The flags of `analyze` that quick_analyze reads, as Typer declares them (a test holds the two
# together): flag -> (parameter, value).
QUICK_FLAGS = {"--json": ("as_json", True), "--all-steps": ("all_steps", True),
               "--no-all-steps": ("all_steps", False)}  # fmt: skip
QUICK_NUMBER = "--peak-tflops"
_PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def quick_analyze(argv: list[str]) -> int | None:
    """Run `analyze` when `argv` is its plain form, `analyze TRACE [--json] [--all-steps |
    --no-all-steps] [--peak-tflops P]` (each at most once, P a decimal number at or above the
    option's minimum); returns its exit code. Anything else (help, another or a repeated
    option, a value to check) is None: Typer parses it. Why: Typer's parsing imports pydantic and
    builds its validators, a fifth of a whole `trainready analyze` of a small trace."""
    if not argv or argv[0] != "analyze":
        return None
    kwargs: dict[str, Any] = {}  # the options given; the others keep analyze's defaults
    trace = None
    args = iter(argv[1:])
    for arg in args:
        name, eq, value = arg.partition("=")
        if arg in QUICK_FLAGS:
            key, given = QUICK_FLAGS[arg]
        elif name == QUICK_NUMBER:
            value = value if eq else next(args, "")
            if not _PLAIN_NUMBER.fullmatch(value) or float(value) < PEAK_TFLOPS_MIN:
                return None
            key, given = "peak_tflops", float(value)
        elif arg and not arg.startswith("-") and trace is None:
            trace = Path(arg)
            continue
        else:
            return None
        if key in kwargs:  # given twice, or --all-steps with --no-all-steps
            return None
        kwargs[key] = given
    if trace is None:
        return None
    try:
        guard(analyze)(trace, **kwargs)
    except typer.Exit as e:
        return e.exit_code
    return 0
