"""`trainready devices`: the devices this machine can test, with memory and peak FLOP/s."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trainready import api
from trainready.cli.common import IMPORT_OPTION, console, guard
from trainready.core.config import DTYPES, check_choice

if TYPE_CHECKING:
    from rich.table import Table


def register(app: typer.Typer) -> None:
    app.command()(guard(devices))


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
