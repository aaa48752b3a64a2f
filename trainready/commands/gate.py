"""`trainready gate` and `trainready history`: CI gating against a baseline, and the trajectory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainready import api
from trainready.clikit import console, guard


def gate(
    run: Annotated[
        str, typer.Argument(help="The run to judge: DIR (its latest run) or DIR:RUN_ID.")
    ],
    baseline: Annotated[str, typer.Option(help="The reference run: DIR or DIR:RUN_ID.")],
    max_slowdown: Annotated[
        str, typer.Option(help="Allowed regression of a suite's median metric ratio, e.g. 5%.")
    ] = "5%",
    junit: Annotated[Path | None, typer.Option(help="Write the verdict as JUnit XML here.")] = None,
) -> None:
    """Exit 1 when a case that did not fail in the baseline fails now, or a metric regresses."""
    from trainready import gate as gating

    threshold = gating.parse_threshold(max_slowdown)
    store, (run_id, baseline_id) = api.open_runs([run, baseline])
    with store:
        result = gating.evaluate(store, run_id, baseline_id, threshold)
    for case_id, was, now in result.newly_failing:
        console.print(f"[bold red]newly failing[/] {case_id}: {was} → {now}", highlight=False)
    for m in result.metrics:
        style = "green" if m.ok else "bold red"
        console.print(
            f"[{style}]{'ok' if m.ok else 'REGRESSION'}[/] {m.describe()}", highlight=False
        )
    if junit:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(gating.junit(result))
        console.print(f"wrote {junit}")
    verdict = "passes" if result.passed else "FAILS"
    console.print(f"gate {verdict}: {run_id} against baseline {baseline_id}")
    if not result.passed:
        raise typer.Exit(1)


def history(
    out: Annotated[Path, typer.Option(help="The store directory.")] = Path(api.DEFAULT_OUT),
    device: Annotated[
        str | None, typer.Option(help="Only runs on this device (string or name).")
    ] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="md, json or html.")] = "md",  # noqa: A002
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to a file.")] = None,
) -> None:
    """Pass rates and headline metrics over the runs in a store, as a table and a chart."""
    from trainready.core.store import Store
    from trainready.history import collect, render

    with Store(out, create=False) as store:
        text = render(collect(store, device), format)
    if output:
        output.write_text(text)
        console.print(f"wrote {output}")
    else:
        typer.echo(text)


def register(app: typer.Typer) -> None:
    app.command("gate")(guard(gate))
    app.command("history")(guard(history))
