"""The `trainready` command: a thin Typer layer over `trainready.api`.

Bad input (unknown device, suite, model, format; malformed --shard; a store or config that does not
parse) prints one line naming the problem and the valid choices, and exits with code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trainready import api
from trainready.clikit import console, fail, guard
from trainready.commands import register_all
from trainready.config import PRESETS, ConfigError

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
) -> None:
    """List the devices this machine can test, with memory and the peak FLOP/s used for MFU."""
    from trainready.core.store import Store
    from trainready.device import available_devices, device_info, resolve_peak

    table = Table(title="Devices")
    for col in ("device", "name", "memory", f"peak {dtype}", "peak source"):
        table.add_column(col)
    with Store(out) as store:
        for dev in available_devices():
            info = device_info(dev)
            mem = info.get("total_memory")
            peak = (
                resolve_peak(dev, dtype, store=store, recalibrate=recalibrate) if measure else None
            )
            table.add_row(
                dev,
                str(info.get("name", "?")),
                f"{mem / 2**30:.1f} GiB" if mem else "?",
                f"{peak['flops'] / 1e12:.2f} TFLOP/s" if peak else "-",
                peak["label"] if peak else "not measured (--no-measure)",
            )
    console.print(table)


@app.command()
@guard
def run(
    suites: Annotated[list[str], typer.Argument(help="Suites to run, e.g. matmul.")],
    device: Annotated[
        str, typer.Option(help="cpu, cuda, cuda:N, xpu, mps, neuron… or auto.")
    ] = "auto",
    preset: Annotated[
        str, typer.Option(help=f"Size of the sweep: {', '.join(PRESETS)}.")
    ] = "quick",
    out: Annotated[Path, typer.Option(help="Output directory (holds trainready.db).")] = Path(
        api.DEFAULT_OUT
    ),
    jobs: Annotated[int, typer.Option(help="Worker processes running cases in parallel.")] = 1,
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
        str | None, typer.Option(help="fp32, bf16, fp16 (default: per suite).")
    ] = None,
    mem_limit_mb: Annotated[
        int | None, typer.Option(help="Cap each worker's extra address space (CPU isolation).")
    ] = None,
    report: Annotated[
        bool, typer.Option(help="Write report files into OUT/RUN_ID/ at the end.")
    ] = True,
    executor: Annotated[
        str, typer.Option(help="local (worker processes here) or ray (tasks on a Ray cluster).")
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: start a local Ray instance).")
    ] = None,
    compile_backend: Annotated[
        str | None,
        typer.Option(
            help="torch.compile backend for compiled cases (default inductor).",
            rich_help_panel="Suite options",
        ),
    ] = None,
    nproc: Annotated[
        int | None,
        typer.Option(
            help="Processes (ranks) for distributed suites (train, dist).",
            rich_help_panel="Suite options",
        ),
    ] = None,
    pg_backend: Annotated[
        str | None,
        typer.Option(
            help="Process-group backend (default: per device: gloo, nccl, xccl…).",
            rich_help_panel="Suite options",
        ),
    ] = None,
    variants: Annotated[
        Path | None,
        typer.Option(
            help="Python file of extra FlexAttention variants (flex).",
            rich_help_panel="Suite options",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="A stored run to compare numerics against (parity): DIR or DIR:RUN_ID.",
            rich_help_panel="Suite options",
        ),
    ] = None,
    profile: Annotated[
        bool,
        typer.Option(
            help="train: after the timed steps of each mode's warm (else cold) scenario, record "
            "a few more with torch.profiler (shapes, stacks, memory); a gzipped trace and "
            "metadata.json per capture go to OUT/RUN_ID/artifacts/, named in the report.",
            rich_help_panel="Suite options",
        ),
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Any suite option as KEY=VALUE (VALUE parsed as JSON when it is).",
            rich_help_panel="Suite options",
        ),
    ] = None,
) -> None:
    """Run suites on a device. Results are stored as they arrive; Ctrl-C keeps them (--resume)."""
    from trainready.progress import RichObserver

    options = suite_options(
        set_,
        compile_backend=compile_backend,
        nproc=nproc,
        pg_backend=pg_backend,
        variants=str(variants.resolve()) if variants else None,
        baseline=baseline,
        profile=profile or None,
    )

    with RichObserver(console) as obs:
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
            )
        except KeyboardInterrupt:
            obs.progress.stop()
            fail("interrupted: finished cases are stored; rerun with --resume to finish", 130)
    _print_summary(out, summary.run_id)
    if report:
        _write_reports(out, [f"{out}:{summary.run_id}"], out / summary.run_id, None)


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


def _print_summary(out: Path, run_id: str) -> None:
    from trainready.core.store import Store
    from trainready.report.terminal import print_summary

    with Store(out, create=False) as store:
        print_summary(console, store, run_id)


def _write_reports(out: Path, refs: list[str], dest: Path, formats: list[str] | None) -> None:
    from trainready.report import FORMATS, write_reports

    store, run_ids = api.open_runs(refs)
    with store:
        paths = write_reports(store, run_ids, dest, formats or list(FORMATS))
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
) -> None:
    """Render a report for a run, optionally side by side with other runs."""
    from trainready.report import render

    store, run_ids = api.open_runs(list(runs) + list(compare or []))
    with store:
        text = render(store, run_ids, format)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console.print(f"wrote {output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


@app.command()
@guard
def merge(
    runs: Annotated[list[str], typer.Argument(help="Shard output directories to combine.")],
    out: Annotated[Path, typer.Option(help="Directory for the merged run.")] = Path("merged"),
) -> None:
    """Combine the outputs of `run --shard I/N` into one run."""
    run_id = api.merge(runs, out)
    console.print(f"merged {len(runs)} runs into {out}:{run_id}")
    _print_summary(out, run_id)


@app.command()
@guard
def mfu(
    model: Annotated[
        str, typer.Option(help="A named config (e.g. qwen3-8b) or a config.json path.")
    ],
    seq_len: Annotated[int, typer.Option(help="Sequence length T.")],
    tokens_per_s: Annotated[float, typer.Option(help="Total tokens/s across all devices.")],
    devices: Annotated[int, typer.Option(help="Number of devices D (X is their total).")],
    device_kind: Annotated[
        str | None, typer.Option(help="A key of the peak table (e.g. h100-sxm).")
    ] = None,
    peak_tflops: Annotated[float | None, typer.Option(help="Peak TFLOP/s per device.")] = None,
    dtype: Annotated[str, typer.Option(help="Dtype of the peak for --device-kind.")] = "bf16",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """MFU from a published throughput: FLOPs/token = 6·N + 12·L·H·Q·T (TorchTitan)."""
    from trainready.mfu import calculate, format_text

    result = calculate(
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
    app()


register_all(app)


if __name__ == "__main__":
    main()
