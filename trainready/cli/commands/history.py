"""`trainready history`: pass rates and headline metrics over the runs in a store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainready import api
from trainready.cli.common import console, guard


def register(app: typer.Typer) -> None:
    app.command("history")(guard(history))


def history(
    out: Annotated[Path, typer.Option(help="The store directory.")] = Path(api.DEFAULT_OUT),
    device: Annotated[
        str | None, typer.Option(help="Only runs on this device (string or name).")
    ] = None,
    format: Annotated[  # noqa: A002
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="md, json or html (default: a table drawn for the terminal; with -o, md).",
        ),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to a file.")] = None,
) -> None:
    """Pass rates and headline metrics over the runs in a store, as a table and a chart."""
    from trainready.core.config import check_choice
    from trainready.core.store import Store
    from trainready.reporting.history import FORMATS, collect, print_terminal, render

    if format is not None:
        check_choice("history format", format, FORMATS)
    with Store(out, create=False) as store:
        rows = collect(store, device)
    if format is None and output is None:
        print_terminal(console, rows)
        return
    text = render(rows, format or "md")
    if output:
        output.write_text(text)
        console.print(f"wrote {output}")
    else:
        typer.echo(text)
