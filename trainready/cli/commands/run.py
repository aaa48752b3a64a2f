"""`trainready run`: run suites on a device, store results as they arrive, report at the end."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from trainready import api
from trainready.cli.common import (
    IMPORT_OPTION,
    VERDICT_CONFIG_OPTION,
    console,
    guard,
    print_error,
    print_run_summary,
)
from trainready.core.config import DTYPES, PRESETS, ConfigError
from trainready.suites import FLAG_USERS, SUITES, expand, ignored_flags


def register(app: typer.Typer) -> None:
    app.command()(guard(run))


def _flag_help(text: str, option: str) -> str:
    return f"{text} ({', '.join(FLAG_USERS[option])})."


def unused_flag_warnings(suites: list[str], flags: dict[str, object]) -> list[str]:
    """A line per suite flag given that no suite of the run reads (see FLAG_USERS)."""
    return [
        f"--{key.replace('_', '-')} is ignored by {', '.join(expand(suites))}; used by "
        f"{', '.join(FLAG_USERS[key])}"
        for key in ignored_flags(suites, [k for k, v in flags.items() if v is not None])
    ]


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
    price_per_hour: Annotated[
        float | None,
        typer.Option(
            help=_flag_help(
                "Price of one device-hour, in your currency (same as --set price_per_hour=P): "
                "the report adds the money to N steps and at the compiled break-even step, "
                "cost = (the run's failed attempts + time to N steps) x P / 3600; without it, "
                '"no price given", never 0',
                "price_per_hour",
            ),
            rich_help_panel="Suite options",
            show_default=False,
        ),
    ] = None,
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
        "price_per_hour": price_per_hour,
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
    print_run_summary(out, summary.run_id, verdict_config)
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
            print_run_summary(out, summary.run_id, verdict_config)
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
