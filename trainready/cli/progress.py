"""A run's progress on the console: cases done of planned, a live pass/fail count, the case in
flight, and an ETA. One line per failing case is printed as it happens.

On a terminal it is a rich progress bar (`RichObserver`). Where stdout is not one (a CI log, a
pipe), a bar draws nothing until the end, so progress is plain lines instead (`LineObserver`):
one when the run starts, one every `interval_s` seconds, and a last one when it ends.
`observer_for` picks.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

from trainready.api import Observer
from trainready.cli.common import warn
from trainready.core.case import FAILING, Case, Result
from trainready.reporting.fmt import plural

STATUS_STYLE = {
    "pass": "green",
    "unsupported": "yellow",
    "skipped": "dim",
}

# Seconds between progress lines in a log: often enough to see a run is alive, rare enough that a
# long run's log stays readable. TRAINREADY_PROGRESS_INTERVAL_S overrides it.
LINE_INTERVAL_S = 15.0
INTERVAL_ENV = "TRAINREADY_PROGRESS_INTERVAL_S"


def status_style(status: str) -> str:
    return STATUS_STYLE.get(status, "bold red" if status in FAILING else "white")


def observer_for(console: Console, warnings: list[str] | None = None) -> RunProgress:
    """A progress bar on a terminal, progress lines anywhere else."""
    if console.is_terminal:
        return RichObserver(console, warnings)
    return LineObserver(console, warnings)


def duration(seconds: float) -> str:
    """H:MM:SS, as rich's bar shows elapsed time."""
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class RunProgress(Observer):
    """What both views share: the tally, the cases in flight, the run's first line, warnings
    (stderr, once the run is planned: its input is valid then, so bad input stays one line) and
    a line per failing case. Use as a context manager; `stop` ends the view."""

    def __init__(self, console: Console, warnings: list[str] | None = None):
        self.console = console
        self.warnings = list(warnings or [])
        self.counts: Counter[str] = Counter()
        self.running: dict[str, None] = {}  # case ids in flight, oldest first
        self.planned = 0
        self.already_done = 0  # done by an earlier invocation (--resume)
        self.earlier: Counter[str] = Counter()  # their statuses

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, how: str = "finished") -> None:
        """End the view (`how` the run ended: "finished", "interrupted (SIGTERM)"…)."""

    @property
    def done(self) -> int:
        return self.already_done + sum(self.counts.values())

    def tally(self) -> tuple[int, int, int]:
        """(pass, fail, other) over every result of the run, an earlier invocation's included."""
        counts = self.counts + self.earlier
        passed = counts["pass"]
        failed = sum(n for s, n in counts.items() if s in FAILING)
        return passed, failed, sum(counts.values()) - passed - failed

    def on_message(self, text: str) -> None:
        self.console.print(f"[dim]{escape(text)}[/]")

    def on_plan(self, run_id: str, total: int, earlier: dict[str, int] | None = None) -> None:
        for line in self.warnings:
            warn(line)
        self.earlier = Counter(earlier or {})
        self.planned, self.already_done = total, sum(self.earlier.values())
        self.console.print(
            f"run [bold]{run_id}[/]: {plural(total, 'case')}"
            + (f", {self.already_done} already done (resuming)" if self.already_done else "")
        )

    def on_start(self, case: Case) -> None:
        self.running[case.id] = None

    def on_result(self, result: Result) -> None:
        self.running.pop(result.case_id, None)
        self.counts[result.status] += 1
        if result.failed:
            reason = str(result.diagnostics.get("error", ""))[:160]
            self.console.print(
                f"[{status_style(result.status)}]{result.status:>13}[/] "
                f"{escape(result.case_id)}  [dim]{escape(reason)}"
            )


# Width of the bar itself: what matters on the line is the count, the time and the ETA.
BAR_WIDTH = 12


def _fixed() -> Column:
    return Column(no_wrap=True)


class RichObserver(RunProgress):
    """The progress bar, for a terminal. It starts when the run is planned, so a run refused
    before it starts prints nothing on stdout. The line keeps the count, the tally, the elapsed
    time and the ETA whole; the case in flight takes what room is left (an 80-column terminal
    shows its start, cut with an ellipsis)."""

    def __init__(self, console: Console, warnings: list[str] | None = None):
        super().__init__(console, warnings)
        self.progress = Progress(
            SpinnerColumn(table_column=_fixed()),
            BarColumn(bar_width=BAR_WIDTH, table_column=_fixed()),
            MofNCompleteColumn(table_column=_fixed()),
            TextColumn("{task.fields[tally]}", table_column=_fixed()),
            TimeElapsedColumn(table_column=_fixed()),
            TextColumn("ETA", table_column=_fixed()),
            TimeRemainingColumn(table_column=_fixed()),
            TextColumn(
                "[dim]{task.fields[current]}",
                table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis", min_width=1),
            ),
            console=console,
            transient=False,
            expand=True,
        )
        self.task = None

    def stop(self, how: str = "finished") -> None:
        """Stop the bar if it started (stopping one that did not would print an empty line)."""
        if self.progress.live.is_started:
            self.progress.stop()

    def _tally(self) -> str:
        passed, failed, other = self.tally()
        return f"[green]{passed} pass[/] [red]{failed} fail[/] [yellow]{other} other[/]"

    def on_plan(self, run_id: str, total: int, earlier: dict[str, int] | None = None) -> None:
        super().on_plan(run_id, total, earlier)
        self.progress.start()
        self.task = self.progress.add_task(
            "cases", total=total, completed=self.already_done, tally=self._tally(), current=""
        )

    def on_start(self, case: Case) -> None:
        super().on_start(case)
        if self.task is not None:
            self.progress.update(self.task, current=escape(case.id))

    def on_result(self, result: Result) -> None:
        super().on_result(result)
        if self.task is not None:
            self.progress.update(self.task, advance=1, tally=self._tally())


def _interval_from_env() -> float:
    try:
        value = float(os.environ.get(INTERVAL_ENV, LINE_INTERVAL_S))
    except ValueError:
        return LINE_INTERVAL_S
    return value if value > 0 else LINE_INTERVAL_S


class LineObserver(RunProgress):
    """Progress as plain lines, for a log: one when the run is planned, then one every
    `interval_s` seconds (from a timer thread, so a long case still shows the run is alive),
    and a last one from `stop`. `clock` and `background=False` let a test drive `tick` itself."""

    def __init__(
        self,
        console: Console,
        warnings: list[str] | None = None,
        *,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        background: bool = True,
    ):
        super().__init__(console, warnings)
        self.interval_s = interval_s or _interval_from_env()
        self.clock = clock
        self.background = background
        self._lock = threading.Lock()  # the timer thread and the run's callbacks both print
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None
        self._next = 0.0

    def line(self, final: bool = False) -> str:
        """'3/10 done: 2 pass, 1 fail, 0 other; elapsed 0:00:45, ETA 0:01:45; running <case>'
        (the final line: counts and elapsed time only)."""
        assert self._t0 is not None
        elapsed = self.clock() - self._t0
        passed, failed, other = self.tally()
        parts = [
            f"{self.done}/{self.planned} done: {passed} pass, {failed} fail, {other} other",
            f"elapsed {duration(elapsed)}" + ("" if final else f", ETA {self._eta(elapsed)}"),
        ]
        if not final and self.running:
            first, *more = self.running
            parts.append(f"running {first}" + (f" (+{len(more)} more)" if more else ""))
        return "progress " + "; ".join(parts)

    def _eta(self, elapsed: float) -> str:
        finished = sum(self.counts.values())  # by this invocation, at the pace it keeps
        left = self.planned - self.done
        if left <= 0:
            return duration(0)
        return duration(elapsed / finished * left) if finished else "?"

    def _print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def on_plan(self, run_id: str, total: int, earlier: dict[str, int] | None = None) -> None:
        super().on_plan(run_id, total, earlier)
        with self._lock:
            self._t0 = self.clock()
            self._next = self._t0
        self.tick()
        if self.background:
            self._thread = threading.Thread(target=self._tick_until_stopped, daemon=True)
            self._thread.start()

    def _tick_until_stopped(self) -> None:
        while not self._stopped.wait(max(0.05, self._next - self.clock())):
            self.tick()

    def tick(self) -> None:
        """Print a progress line if one is due."""
        with self._lock:
            if self._t0 is None or self._stopped.is_set() or self.clock() < self._next:
                return
            self._next = self.clock() + self.interval_s
            self._print(self.line())

    def on_start(self, case: Case) -> None:
        with self._lock:
            super().on_start(case)

    def on_result(self, result: Result) -> None:
        with self._lock:
            super().on_result(result)

    def stop(self, how: str = "finished") -> None:
        """The last line (once), with how the run ended."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            if self._t0 is not None:
                self._print(f"{self.line(final=True)}; {how}")
