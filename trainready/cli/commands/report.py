"""`trainready report`: render a stored run, optionally side by side with others."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trainready import api
from trainready.cli.common import VERDICT_CONFIG_OPTION, console, guard


def register(app: typer.Typer) -> None:
    app.command()(guard(report))


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
