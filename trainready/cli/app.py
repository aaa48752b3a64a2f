"""The `trainready` command: a thin Typer layer over `trainready.api`.

Bad input (unknown device, suite, model, format; malformed --shard; a store or config that does not
parse; a missing option or a value of the wrong type) prints one line naming the problem and the
valid choices, and exits with code 2.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from trainready import api
from trainready.cli.commands import register_all
from trainready.cli.commands.profile import quick_analyze
from trainready.cli.common import (
    IMPORT_OPTION,
    ClickException,
    NoArgsIsHelpError,
    UsageError,
    console,
    guard,
    print_error,
    usage_message,
)
from trainready.core.config import DTYPES, PRESETS, ConfigError, check_choice
from trainready.metrics.peaks import KINDS
from trainready.models.specs import list_specs
from trainready.suites import FLAG_USERS, SUITES, expand, ignored_flags

if TYPE_CHECKING:
    from rich.table import Table

app = typer.Typer(
    name="trainready",
    help="Is this PyTorch device ready for research training? Run suites, get a scorecard.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
@guard
def devices(
    out: Annotated[Path, typer.Option(help="Store that caches measured peaks.")] = Path(
        api.DEFAULT_OUT
    ),
    dtype: Annotated[str, typer.Option(help="Dtype of the peak FLOP/s to show.")] = "bf16",
    measure: Annotated[
        bool, typer.Option(help="Calibrate devices missing from the peak table (takes seconds).")
    ] = True,
    recalibrate: Annotated[
        bool,
        typer.Option(
            help="Measure the peak again and replace the cached one (do it on an idle machine: "
            "a peak measured under load is too low and inflates every MFU against it)."
        ),
    ] = False,
    imports: Annotated[list[str] | None, IMPORT_OPTION] = None,
) -> None:
    """List the devices this machine can test, with memory and the peak FLOP/s used for MFU."""
    check_choice("dtype", dtype, DTYPES)
    rows = api.devices(out, dtype, measure=measure, recalibrate=recalibrate, imports=imports)
    console.print(_devices_table(rows, dtype))


def _devices_table(rows: list[dict[str, Any]], dtype: str) -> Table:
    from rich.table import Table

    table = Table(title="Devices")
    for col in ("device", "name", "memory", f"peak {dtype}", "peak source"):
        table.add_column(col)
    for row in rows:
        mem, peak = row["info"].get("total_memory"), row["peak"]
        table.add_row(
            row["device"],
            str(row["info"].get("name", "?")),
            f"{mem / 2**30:.1f} GiB" if mem else "?",
            f"{peak['flops'] / 1e12:.2f} TFLOP/s" if peak else "-",
            peak["label"] if peak else "not measured (--no-measure)",
        )
    return table


VERDICT_CONFIG_OPTION = typer.Option(
    metavar="FILE",
    help="A TOML file of readiness thresholds, in place of the built-in ones "
    "(trainready/reporting/verdict.toml; give only the keys you change).",
)


def _flag_help(text: str, option: str) -> str:
    return f"{text} ({', '.join(FLAG_USERS[option])})."


def unused_flag_warnings(suites: list[str], flags: dict[str, object]) -> list[str]:
    """A line per suite flag given that no suite of the run reads (see FLAG_USERS)."""
    return [
        f"--{key.replace('_', '-')} is ignored by {', '.join(expand(suites))}; used by "
        f"{', '.join(FLAG_USERS[key])}"
        for key in ignored_flags(suites, [k for k, v in flags.items() if v is not None])
    ]


@app.command()
@guard
def run(
    suites: Annotated[
        list[str],
        typer.Argument(help=f"Suites to run: {', '.join(SUITES)}, or all (every one of them)."),
    ],
    device: Annotated[
        str, typer.Option(help="cpu, cuda, cuda:N, xpu, mps, neuron… or auto.")
    ] = "auto",
    preset: Annotated[
        str, typer.Option(help=f"Size of the sweep: {', '.join(PRESETS)}.")
    ] = "quick",
    out: Annotated[Path, typer.Option(help="Output directory (holds trainready.db).")] = Path(
        api.DEFAULT_OUT
    ),
    jobs: Annotated[
        int | None,
        typer.Option(
            help="Worker processes. Correctness cases (parity) run side by side on them; timing "
            "cases (matmul, train, dist) run alone, and flex's alone too except on the CPU, "
            "where each takes one core and correctness cases the others. Default: what the "
            "device allows (cpu: one per core; cuda/xpu/mps: up to 4; other backends: 1).",
            show_default=False,
        ),
    ] = None,
    budget_s: Annotated[
        float | None, typer.Option(help="Wall-clock budget per case, seconds (default: per suite).")
    ] = None,
    shard: Annotated[
        str | None, typer.Option(help="Run only shard I of N, as I/N (0-based).")
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(help="Finish the latest run with the same settings instead of a new one."),
    ] = False,
    filter: Annotated[
        str | None, typer.Option(help="Glob over case ids, e.g. 'matmul/Qwen3*'.")
    ] = None,  # noqa: A002
    dtype: Annotated[
        str | None, typer.Option(help=f"{', '.join(DTYPES)} (default: per suite).")
    ] = None,
    mem_limit_mb: Annotated[
        int | None, typer.Option(help="Cap each worker's extra address space (CPU isolation).")
    ] = None,
    report: Annotated[
        bool, typer.Option(help="Write report files into OUT/RUN_ID/ at the end.")
    ] = True,
    verdict_config: Annotated[Path | None, VERDICT_CONFIG_OPTION] = None,
    executor: Annotated[
        str,
        typer.Option(
            help="local (worker processes here) or ray (one actor per slot on a Ray cluster, each "
            "reusing its worker across cases)."
        ),
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: start a local Ray instance).")
    ] = None,
    imports: Annotated[list[str] | None, IMPORT_OPTION] = None,
    compile_backend: Annotated[
        str | None,
        typer.Option(
            help=_flag_help(
                "torch.compile backend for compiled cases (default inductor)", "compile_backend"
            ),
            rich_help_panel="Suite options",
        ),
    ] = None,
    nproc: Annotated[
        int | None,
        typer.Option(
            help=_flag_help("Processes (ranks) per distributed case", "nproc"),
            rich_help_panel="Suite options",
        ),
    ] = None,
    pg_backend: Annotated[
        str | None,
        typer.Option(
            help=_flag_help(
                "Process-group backend (default: per device: gloo, nccl, xccl…)", "pg_backend"
            ),
            rich_help_panel="Suite options",
        ),
    ] = None,
    variants: Annotated[
        Path | None,
        typer.Option(
            help=_flag_help(
                "Python file of extra FlexAttention variants: imported and executed, as a script "
                "you run is (use only files you trust)",
                "variants",
            ),
            rich_help_panel="Suite options",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            help=_flag_help(
                "A stored run to compare numerics against: DIR or DIR:RUN_ID", "baseline"
            ),
            rich_help_panel="Suite options",
        ),
    ] = None,
    profile: Annotated[
        bool,
        typer.Option(
            help=_flag_help(
                "After the timed steps of each mode's warm (else cold) scenario, record a few "
                "more with torch.profiler (shapes, stacks, memory); a gzipped trace and "
                "metadata.json per capture go to OUT/RUN_ID/artifacts/, named in the report",
                "profile",
            ),
            rich_help_panel="Suite options",
        ),
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Any suite option as KEY=VALUE (VALUE parsed as JSON when it is); an unknown "
            "KEY or a bad VALUE is refused. models=pkg.mod:fn (parity) imports pkg.mod and "
            "calls fn: it runs that code (use only code you trust).",
            rich_help_panel="Suite options",
        ),
    ] = None,
) -> None:
    """Run suites on a device. Results are stored as they arrive; Ctrl-C keeps them (--resume)."""
    from trainready.cli.progress import observer_for
    from trainready.reporting.verdict import load_rules

    load_rules(verdict_config)  # a bad thresholds file is one line now, not after the run
    flags = {
        "compile_backend": compile_backend,
        "nproc": nproc,
        "pg_backend": pg_backend,
        "variants": str(variants.resolve()) if variants else None,
        "baseline": baseline,
        "profile": profile or None,
    }
    options = suite_options(set_, **flags)

    # Printed once the run is planned, i.e. its input is valid: bad input stays one line.
    with observer_for(console, warnings=unused_flag_warnings(suites, flags)) as obs:
        try:
            summary = api.run(
                suites,
                device=device,
                preset=preset,
                out=out,
                jobs=jobs,
                budget_s=budget_s,
                shard=shard,
                resume=resume,
                filter=filter,
                dtype=dtype,
                mem_limit_mb=mem_limit_mb,
                options=options,
                observer=obs,
                executor=executor,
                ray_address=ray_address,
                imports=imports,
            )
        except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM, SIGHUP (core.shutdown)
            _interrupted(obs, stop, out, report, verdict_config)
    _print_summary(out, summary.run_id, verdict_config)
    if report:
        refs = [f"{out}:{summary.run_id}"]
        _write_reports(out, refs, out / summary.run_id, None, verdict_config)


def _interrupted(
    obs: Any, stop: KeyboardInterrupt, out: Path, report: bool, verdict_config: Path | None
) -> NoReturn:
    """A stopped run: its report files (what finished is stored), its summary, one line, and
    the shell's code for the signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
    from trainready.core.shutdown import Interrupted

    stop = stop if isinstance(stop, Interrupted) else Interrupted(signal.SIGINT)
    summary = stop.summary
    # A hangup may have taken the terminal with it: printing then fails, the rest must not.
    with contextlib.suppress(OSError):
        obs.stop(f"interrupted ({stop.signal_name})")
    if summary is not None:
        with contextlib.suppress(OSError):
            if report:
                refs = [f"{out}:{summary.run_id}"]
                _write_reports(out, refs, out / summary.run_id, None, verdict_config)
            _print_summary(out, summary.run_id, verdict_config)
    with contextlib.suppress(OSError):
        print_error(
            f"interrupted ({stop.signal_name}): finished cases are stored; "
            "rerun with --resume to finish"
        )
    raise typer.Exit(stop.exit_code)


def suite_options(pairs: list[str] | None, **flags: object) -> dict[str, object]:
    """Suite options from the named flags that were given, plus --set KEY=VALUE pairs."""
    options: dict[str, object] = {k: v for k, v in flags.items() if v is not None}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"malformed --set {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def _print_summary(out: Path, run_id: str, verdict_config: Path | None = None) -> None:
    from trainready.core.store import Store
    from trainready.reporting.terminal import print_summary

    with Store(out, create=False) as store:
        print_summary(console, store, run_id, verdict_config)


def _write_reports(
    out: Path,
    refs: list[str],
    dest: Path,
    formats: list[str] | None,
    verdict_config: Path | None = None,
) -> None:
    from trainready.reporting import FORMATS, write_reports

    store, run_ids = api.open_runs(refs)
    with store:
        paths = write_reports(store, run_ids, dest, formats or list(FORMATS), verdict_config)
    for fmt, path in paths.items():
        console.print(f"{fmt:>6}: {path}")


@app.command()
@guard
def report(
    runs: Annotated[
        list[str],
        typer.Argument(help="Run(s): DIR (its latest run) or DIR:RUN_ID. First is primary."),
    ],
    compare: Annotated[
        list[str] | None, typer.Option(help="Another run to compare against (repeatable).")
    ] = None,
    format: Annotated[  # noqa: A002
        str, typer.Option("--format", "-f", help="md, json, junit or html.")
    ] = "md",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
    verdict_config: Annotated[Path | None, VERDICT_CONFIG_OPTION] = None,
) -> None:
    """Render a report for a run, optionally side by side with other runs."""
    text = api.report(*runs, compare=compare, fmt=format, verdict_config=verdict_config)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console.print(f"wrote {output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


@app.command()
@guard
def merge(
    runs: Annotated[
        list[str], typer.Argument(help="Runs to combine: DIR (its latest run) or DIR:RUN_ID.")
    ],
    out: Annotated[Path, typer.Option(help="Directory for the merged run.")] = Path("merged"),
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial",
            help="Merge even if shards of the run are missing; the merged run records which and "
            "stays unfinished.",
        ),
    ] = False,
) -> None:
    """Combine the outputs of `run --shard I/N` into one run (refused if shards overlap, differ in
    settings or are missing, unless --allow-partial)."""
    run_id = api.merge(runs, out, allow_partial=allow_partial)
    console.print(f"merged {len(runs)} runs into {out}:{run_id}")
    _print_summary(out, run_id)


@app.command()
@guard
def mfu(
    model: Annotated[
        str,
        typer.Option(
            help=f"A named config ({', '.join(list_specs())}; case-insensitive, HF ids work "
            "too) or a path to a Hugging Face config.json."
        ),
    ],
    seq_len: Annotated[int, typer.Option(help="Sequence length T.")],
    tokens_per_s: Annotated[float, typer.Option(help="Total tokens/s across all devices.")],
    devices: Annotated[
        int,
        typer.Option(
            help="Number of devices D (X is their total), counted as the peak is given: GPUs "
            "for GPU kinds, chips for the -chip and TPU kinds, logical NeuronCores for the "
            "trn*-core kinds (LNC=2, 4 per chip: a trn2.48xlarge is 64), and for "
            "--peak-tflops whatever that peak is per."
        ),
    ],
    device_kind: Annotated[
        str | None, typer.Option(help=f"A key of the peak table: {', '.join(KINDS)}.")
    ] = None,
    peak_tflops: Annotated[float | None, typer.Option(help="Peak TFLOP/s per device.")] = None,
    dtype: Annotated[str, typer.Option(help="Dtype of the peak for --device-kind.")] = "bf16",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """MFU from a published throughput: FLOPs/token = 6·N + 12·L·H·Q·T (TorchTitan)."""
    from trainready.metrics.mfu import format_text

    result = api.mfu(
        model,
        seq_len=seq_len,
        tokens_per_s=tokens_per_s,
        devices=devices,
        device_kind=device_kind,
        peak_tflops=peak_tflops,
        dtype=dtype,
    )
    if as_json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    else:
        console.print(format_text(result), highlight=False)


def main() -> None:
    """The Typer app, except that a usage error (a missing option, a value of the wrong type, no
    such command) is one line and exit code 2, as all bad input is, where Typer would draw a box
    of several. The console script is `trainready.cli.entry:main`, which runs the plain `analyze`
    before this module (Typer, rich, the runner) loads and hands everything else to this."""
    quick = quick_analyze(sys.argv[1:])  # `analyze TRACE`, parsed without Typer's pydantic
    if quick is not None:
        sys.exit(quick)
    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as e:  # the help is printed when the error is made
        sys.exit(e.exit_code)
    except UsageError as e:
        print_error(usage_message(e))
        sys.exit(2)
    except ClickException as e:
        print_error(" ".join(e.format_message().split()))
        sys.exit(e.exit_code)
    except typer.Abort:
        print_error("aborted")
        sys.exit(1)
    # A command's own exit code (typer.Exit), or None: success.
    sys.exit(code if isinstance(code, int) else 0)


register_all(app)


if __name__ == "__main__":
    main()
