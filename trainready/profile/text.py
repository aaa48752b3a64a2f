"""`trainready analyze TRACE`: the command's body, its terminal output, and its quick path.

Kept light on purpose: this module imports only the standard library at the top, so the console
entry (`trainready.cli.entry`) runs the plain form of `analyze` without Typer, rich, the runner or the
report package -- a whole `trainready analyze` is Python's start, numpy, the parse, the analyses and
the printing. The Typer command (`trainready.cli.commands.profile.analyze`) runs the same body.

Output: the summary is a list of lines and tables (`summary_blocks`), drawn on a terminal by rich
through the CLI's console (`trainready.cli.console`, rich alone: not Typer), and into a file or a
pipe as plain text (`plain_lines`: whole lines, columns aligned, no rich loaded). Numbers read as
everywhere else (`trainready.reporting.numbers`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainready.reporting.numbers import number, percent

PEAK_TFLOPS_MIN = 0.001

# The flags of `analyze` that the quick path reads, as Typer declares them (a test holds the two
# together): flag -> (parameter, value).
QUICK_FLAGS = {"--json": ("as_json", True), "--all-steps": ("all_steps", True),
               "--no-all-steps": ("all_steps", False)}  # fmt: skip
QUICK_NUMBER = "--peak-tflops"
_PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def parse_quick(argv: list[str]) -> tuple[Path, dict[str, Any]] | None:
    """(trace, options) when `argv` is the plain form of `analyze`: `analyze TRACE [--json]
    [--all-steps | --no-all-steps] [--peak-tflops P]` (each at most once, P a decimal number at or
    above the option's minimum); anything else (help, another or a repeated option, a value to
    check) is None: Typer parses it."""
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
    return trace, kwargs


def quick_main(argv: list[str]) -> int | None:
    """The console entry's `analyze`: its exit code when `argv` is the plain form (the same
    output, errors and codes as the Typer command), else None."""
    parsed = parse_quick(argv)
    if parsed is None:
        return None
    trace, kwargs = parsed
    with _no_cyclic_gc():
        try:
            run(trace, **kwargs)
        except Exception as e:  # noqa: BLE001 - sorted below as cli.common.guard sorts them
            return _error_code(e)
    return 0


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block, then as it was. Why: a whole `analyze`
    is short and makes few cycles (every trace, column and summary is freed by reference
    counting), while the collector's passes over numpy's import, the parse and the analyses
    cost 2-5 % of it."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _error_code(error: Exception) -> int:
    """cli.common.guard's one line for a user-input error (2) or an OSError (1); anything else is
    raised as it would be there. cli.common (rich, Typer) loads only here, on the error path."""
    from trainready.core.config import ConfigError

    if not isinstance(error, (ConfigError, OSError)):
        raise error
    from trainready.cli.common import os_message, print_error

    if isinstance(error, ConfigError):
        print_error(str(error))
        return 2
    print_error(os_message(error))
    return 1


def run(
    trace: Path, as_json: bool = False, all_steps: bool = False, peak_tflops: float | None = None
) -> None:
    """Load the trace(s) at `trace` (through the parsed-column cache), analyse, print."""
    if "numpy" not in sys.modules:  # OpenBLAS starts a thread per core when numpy loads; no
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # analysis multiplies matrices
    from trainready.profile.per_rank import summaries as summaries_of

    peak = None if peak_tflops is None else peak_tflops * 1e12
    # a directory's ranks side by side; a second analyze reads the cache's parsed columns; the
    # timeline's rows only for JSON (the text does not print them)
    summaries = summaries_of(trace, trim_last_step=not all_steps, peak_flops=peak, rows=as_json)
    if as_json:
        sys.stdout.write(json.dumps(summaries, indent=1) + "\n")
        return
    for i, s in enumerate(summaries):
        if i:  # the traces of a directory, one after another
            sys.stdout.write("\n")
        print_summary(s)


def _short_kernel(name: str) -> str:
    """'void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>(Params)' -> the telling part."""
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(.*$", "", name)
    name = re.sub(r"^cutlass::Kernel<(.*)>$", r"\1", name)
    return name if len(name) <= 56 else name[:55] + "…"


def _ms(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f} ms"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}%"


# -- what is printed: lines and tables -------------------------------------------------------------


@dataclass
class Line:
    """A printed line: `text` as written, `bold` a prefix of it shown bold (rich markup)."""

    text: str
    bold: str = ""


@dataclass
class Table:
    """A rich.Table as this module draws it: a title, columns (header, justify), rows of str."""

    title: str
    columns: list[tuple[str, str]] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    def add_column(self, header: str, justify: str = "left") -> None:
        self.columns.append((header, justify))

    def add_row(self, *cells: str) -> None:
        self.rows.append(list(cells))


def summary_blocks(s: dict[str, Any]) -> list[Line | Table]:
    """The output of `analyze` for one summary, in order."""
    out: list[Line | Table] = []
    head = (
        f" rank {s['rank']} - {s['events']:,} events"
        + (f" - {s['device']}" if s["device"] else "")
        + (" - last profiler step left out" if s["window"]["trimmed_last_step"] else "")
    )
    out.append(Line(f"{s['path']}{head}", bold=str(s["path"])))
    if s.get("device_activity", True):
        _device_tables(s, out)
    else:
        out.append(Line(no_device_activity(s)))
    _host_tables(s, out)
    return out


def no_device_activity(s: dict[str, Any]) -> str:
    """What a trace without device kernels, copies or launches says about the device. Its
    allocator's memory events name a device the run used (a backend with no profiler plugin for
    its kernels, as a PrivateUse1 one often is); without them it may be a CPU-only run or a
    backend that reports nothing: the line does not claim which."""
    used = s.get("unrecorded_devices") or []
    if used:
        return (
            f"no device activity in this trace, though the run allocated memory on "
            f"{', '.join(used)}: its backend recorded no kernels, copies or launches for the "
            "profiler, so device time, kernel types, idle streams, launches and communication "
            "overlap are unknown"
        )
    return (
        "no device activity in this trace (a CPU-only run, or a device whose backend reports "
        "neither kernels nor memory to the profiler): no device time, kernel types, idle "
        "streams, launches or communication overlap to show"
    )


def _device_tables(s: dict[str, Any], out: list[Line | Table]) -> None:
    """What ran on the device: its time, kernel types, idle streams, launches, overlap."""
    t = s["temporal"]
    table = Table("Device time (first to last activity)")
    for col in ("span", "idle", "compute", "non-compute"):
        table.add_column(col, justify="right")
    table.add_row(
        _ms(t["span_ns"]),
        f"{_ms(t['idle_ns'])} ({_pct(t['idle_pct'])})",
        f"{_ms(t['compute_ns'])} ({_pct(t['compute_pct'])})",
        f"{_ms(t['non_compute_ns'])} ({_pct(t['non_compute_pct'])})",
    )
    out.append(table)
    kt = Table("Kernel types (share of busy time)")
    kt.add_column("type")
    kt.add_column("time", justify="right")
    kt.add_column("share", justify="right")
    for label, v in s["kernel_types"]["types"].items():
        kt.add_row(label, _ms(v["ns"]), _pct(v["pct"]))
    out.append(kt)
    it = Table("Idle time per stream")
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
    out.append(it)
    lc = s["launches"]
    ov = s["overlap"]["overlap_pct"]
    out.append(
        Line(
            f"launches: {lc['count']:,} ({lc['kernels']:,} kernels, {lc['memory']:,} memory; "
            f"{lc['multi_launches']:,} multi-activity calls), launch delay p50 "
            f"{_ms(lc['delay_ns']['p50'])} p90 {_ms(lc['delay_ns']['p90'])}; "
            f"{lc['short_kernels']:,} ran shorter than their launch call"
        )
    )
    out.append(
        Line(
            "communication overlapped by computation: "
            + ("no communication" if ov is None else _pct(ov))
        )
    )


def _host_tables(s: dict[str, Any], out: list[Line | Table]) -> None:
    """FLOPs and MFU per op, dependencies, critical path, memory, your code, steps."""
    on_device = s.get("device_activity", True)
    fl = s["flops"]
    if fl["ops"]:
        ft = Table(f"Matmul/conv/attention FLOPs: {fl['ops']:,} op calls, "
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
                "-" if g["tflops"] is None else number(g["tflops"]),
                "-" if g["mfu"] is None else percent(g["mfu"]),
            )
        out.append(ft)
        out.append(Line("MFU " + "; ".join(sorted({g["peak"] for g in fl["top"]}))))
        kt = Table("Kernels of those ops")
        for col in ("kernel", "calls", "time", "TFLOP/s", "MFU"):
            kt.add_column(col, justify="left" if col == "kernel" else "right")
        for g in fl["kernels"][:5]:
            kt.add_row(
                _short_kernel(g["kernel"]),
                str(g["calls"]),
                _ms(g["time_ns"]),
                "-" if g["tflops"] is None else number(g["tflops"]),
                "-" if g["mfu"] is None else percent(g["mfu"]),
            )
        if fl["kernels"]:
            out.append(kt)
    deps = ", ".join(f"{n:,} {k}" for k, n in s["dependencies"].items() if n)
    out.append(Line(f"dependencies: {deps or 'none'}"))
    for cp in s["critical_path"]:
        if cp["length_ns"]:
            parts = ", ".join(
                f"{k} {100 * v / cp['length_ns']:.0f}%" for k, v in cp["by_category"].items()
            )
            out.append(
                Line(
                    f"critical path of step {cp['step']}: {_ms(cp['length_ns'])} over "
                    f"{cp['events']:,} events ({parts})"
                )
            )
    for device, mem in s["memory"].items():
        out.append(
            Line(
                f"memory {device}: peak {mem['peak_allocated'] / 2**20:,.1f} MiB allocated"
                + (f" in {mem['peak_op']}" if mem["peak_op"] else "")
                + (
                    f", {mem['peak_reserved'] / 2**20:,.1f} MiB reserved"
                    if mem["peak_reserved"]
                    else ""
                )  # fmt: skip
                + f"; {mem['allocations']:,} allocations, {mem['frees']:,} frees"
            )
        )
    if s["source"]:
        src = Table(f"Your code by {s['source'][0]['timed_on']} time")
        head = "your code → the call it made"
        for col in (head, "time", "events"):
            src.add_column(col, justify="left" if col == head else "right")
        for row in s["source"]:
            src.add_row(row["line"], _ms(row["time_ns"]), f"{row['events']:,}")
        out.append(src)
    if s["steps"]:
        st = Table("Profiler steps")
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
        out.append(st)


# -- drawing ---------------------------------------------------------------------------------------


def print_summary(s: dict[str, Any]) -> None:
    """Print one trace's summary on stdout: on a terminal through the CLI's rich console, else
    as plain text (a file or a pipe gets whole lines at any width, and the process does not
    load rich)."""
    blocks = summary_blocks(s)
    if stdout_is_terminal():
        print_rich(blocks)
    else:
        sys.stdout.write("".join(line + "\n" for line in plain_lines(blocks)))


def stdout_is_terminal() -> bool:
    """Whether rich's console would take stdout for a terminal (rich.console.Console.is_terminal,
    without importing rich): TTY_COMPATIBLE=1 or 0 says so, a non-empty FORCE_COLOR says yes,
    else stdout's isatty()."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def plain_lines(blocks: list[Line | Table]) -> list[str]:
    """The blocks as plain text: a line as it is; a table as its title, its header, a rule and
    its rows, columns two spaces apart and each justified as declared, set off by blank lines."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Line):
            out.append(block.text)
            continue
        header = [h for h, _ in block.columns]
        widths = [max(len(c) for c in cells) for cells in zip(header, *block.rows, strict=True)]
        out += ["", block.title] if out and out[-1] else [block.title]
        for cells in (header, ["-" * w for w in widths], *block.rows):
            padded = (c.rjust(w) if justify == "right" else c.ljust(w)
                      for c, w, (_, justify) in zip(cells, widths, block.columns, strict=True))  # fmt: skip
            out.append("  ".join(padded).rstrip())
        out.append("")
    return out[:-1] if out and not out[-1] else out


def print_rich(blocks: list[Line | Table]) -> None:
    """The blocks through the CLI's rich console (`trainready.cli.console.console`)."""
    from rich.table import Table as RichTable

    from trainready.cli.console import console

    for block in blocks:
        if isinstance(block, Table):
            table = RichTable(title=block.title)
            for header, justify in block.columns:
                table.add_column(header, justify=justify)  # type: ignore[arg-type]
            for cells in block.rows:
                table.add_row(*cells)
            console.print(table)
        elif block.bold:
            rest = block.text[len(block.bold) :]
            console.print(f"[bold]{block.bold}[/]{rest}")
        else:
            console.print(block.text)
