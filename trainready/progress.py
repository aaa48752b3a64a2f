"""A rich progress bar for runs: cases done of planned, a live pass/fail count, the case in
flight, and an ETA. One line per failing case is printed above the bar as it happens."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from trainready.api import Observer
from trainready.clikit import warn
from trainready.core.case import FAILING, Case, Result

STATUS_STYLE = {
    "pass": "green",
    "unsupported": "yellow",
    "skipped": "dim",
}


def status_style(status: str) -> str:
    return STATUS_STYLE.get(status, "bold red" if status in FAILING else "white")


class RichObserver(Observer):
    """Draws the run's progress on `console`. `warnings` go to stderr once the run is planned (its
    input valid, so bad input stays one line); the bar starts then too, so a run refused before
    it starts prints nothing on stdout."""

    def __init__(self, console: Console, warnings: list[str] | None = None):
        self.console = console
        self.warnings = list(warnings or [])
        self.counts: Counter[str] = Counter()
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tally]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("[dim]{task.fields[current]}"),
            console=console,
            transient=False,
        )
        self.task = None

    def __enter__(self) -> RichObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the bar if it started (stopping one that did not would print an empty line)."""
        if self.progress.live.is_started:
            self.progress.stop()

    def _tally(self) -> str:
        passed = self.counts["pass"]
        failed = sum(n for s, n in self.counts.items() if s in FAILING)
        other = sum(self.counts.values()) - passed - failed
        return f"[green]{passed} pass[/] [red]{failed} fail[/] [yellow]{other} other[/]"

    def on_message(self, text: str) -> None:
        self.console.print(f"[dim]{text}[/]")

    def on_plan(self, run_id: str, total: int, already_done: int) -> None:
        for line in self.warnings:
            warn(line)
        self.progress.start()
        self.console.print(
            f"run [bold]{run_id}[/]: {total} cases"
            + (f", {already_done} already done (resuming)" if already_done else "")
        )
        self.task = self.progress.add_task(
            "cases", total=total, completed=already_done, tally=self._tally(), current=""
        )

    def on_start(self, case: Case) -> None:
        if self.task is not None:
            self.progress.update(self.task, current=case.id)

    def on_result(self, result: Result) -> None:
        self.counts[result.status] += 1
        if result.failed:
            reason = str(result.diagnostics.get("error", ""))[:160]
            self.console.print(
                f"[{status_style(result.status)}]{result.status:>13}[/] {result.case_id}  [dim]{reason}"
            )
        if self.task is not None:
            self.progress.update(self.task, advance=1, tally=self._tally())
