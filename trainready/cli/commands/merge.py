"""`trainready merge`: combine the shards of a run (`run --shard I/N`) into one run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainready import api
from trainready.cli.common import console, guard, print_run_summary


def register(app: typer.Typer) -> None:
    app.command()(guard(merge))


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
    print_run_summary(out, run_id)
