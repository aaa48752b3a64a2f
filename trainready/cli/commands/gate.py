"""`trainready gate`: CI gating of a run against a baseline run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainready import api
from trainready.cli.common import console, guard


def gate(
    run: Annotated[
        str, typer.Argument(help="The run to judge: DIR (its latest run) or DIR:RUN_ID.")
    ],
    baseline: Annotated[str, typer.Option(help="The reference run: DIR or DIR:RUN_ID.")],
    max_slowdown: Annotated[
        str, typer.Option(help="Allowed regression of a suite's median metric ratio, e.g. 5%.")
    ] = "5%",
    junit: Annotated[Path | None, typer.Option(help="Write the verdict as JUnit XML here.")] = None,
    allow_missing: Annotated[
        bool,
        typer.Option(
            "--allow-missing",
            help="Pass even though cases the baseline ran have no result in RUN (they are named "
            "either way).",
        ),
    ] = False,
) -> None:
    """Exit 1 when a case that did not fail in the baseline fails now, a metric regresses, or a
    case the baseline ran was not run (unless --allow-missing)."""
    from trainready.reporting import gate as gating

    threshold = gating.parse_threshold(max_slowdown)
    store, (run_id, baseline_id) = api.open_runs([run, baseline])
    with store:
        result = gating.evaluate(store, run_id, baseline_id, threshold, allow_missing)
    for case_id, was, now in result.newly_failing:
        console.print(f"[bold red]newly failing[/] {case_id}: {was} → {now}", highlight=False)
    if result.missing:
        style, word = ("yellow", "allowed") if allow_missing else ("bold red", "MISSING")
        hint = "" if allow_missing else " (--allow-missing to pass anyway)"
        console.print(
            f"[{style}]{word}[/] {result.describe_missing()}{hint}", highlight=False, soft_wrap=True
        )
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


def register(app: typer.Typer) -> None:
    app.command("gate")(guard(gate))
