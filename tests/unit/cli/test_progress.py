"""Progress on the console: a bar on a terminal, plain lines on a schedule anywhere else."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from trainready.cli.progress import (
    LINE_INTERVAL_S,
    LineObserver,
    RichObserver,
    duration,
    observer_for,
)
from trainready.core.case import Case, Result

A, B, C, D = (Case("faulty", f"{i:02d}-x", {"i": i}) for i in range(4))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _log() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=80), buf  # a file: not a terminal


def _lines(buf: io.StringIO) -> list[str]:
    return [ln for ln in buf.getvalue().splitlines() if ln.startswith("progress ")]


def test_a_log_gets_lines_a_terminal_gets_the_bar(monkeypatch):
    monkeypatch.delenv("TRAINREADY_PROGRESS_INTERVAL_S", raising=False)
    log, _ = _log()
    obs = observer_for(log)
    assert isinstance(obs, LineObserver) and obs.interval_s == LINE_INTERVAL_S == 15.0
    assert isinstance(observer_for(Console(file=io.StringIO(), force_terminal=True)), RichObserver)
    monkeypatch.setenv("TRAINREADY_PROGRESS_INTERVAL_S", "2.5")
    assert observer_for(log).interval_s == 2.5


def test_lines_at_start_every_interval_and_at_the_end():
    console, buf = _log()
    clock = FakeClock()
    obs = LineObserver(console, interval_s=15, clock=clock, background=False)
    with obs:
        obs.on_plan("run-1", total=4)
        # The first line right away, before any case has run.
        assert _lines(buf) == ["progress 0/4 done: 0 pass, 0 fail, 0 other; elapsed 0:00:00, ETA ?"]
        obs.on_start(A)
        clock.now += 10
        obs.on_result(Result(A, "pass"))
        obs.on_start(B)
        obs.on_start(C)
        obs.tick()  # 10 s in: not due yet
        assert len(_lines(buf)) == 1
        clock.now += 10
        obs.tick()
        obs.tick()  # once per interval, however often the timer wakes
        assert _lines(buf)[1:] == [
            "progress 1/4 done: 1 pass, 0 fail, 0 other; elapsed 0:00:20, ETA 0:01:00; "
            "running faulty/01-x (+1 more)"
        ]
        obs.on_result(Result(B, "fail_numerics", diagnostics={"error": "rmse 0.3 > 0.01"}))
        obs.on_result(Result(C, "unsupported"))
        clock.now += 16
        obs.tick()
        assert _lines(buf)[-1] == (
            "progress 3/4 done: 1 pass, 1 fail, 1 other; elapsed 0:00:36, ETA 0:00:12"
        )
        obs.on_start(D)
        obs.on_result(Result(D, "pass"))
    # The last line, from stop (the context's exit): no ETA, no case in flight.
    assert (
        _lines(buf)[-1] == "progress 4/4 done: 2 pass, 1 fail, 1 other; elapsed 0:00:36; finished"
    )
    assert "fail_numerics faulty/01-x  rmse 0.3 > 0.01" in buf.getvalue()  # failures as they come
    obs.stop()
    assert len(_lines(buf)) == 4  # stopping twice prints one last line


def test_a_resumed_run_counts_what_was_done_with_its_statuses_and_paces_on_this_invocation():
    console, buf = _log()
    clock = FakeClock()
    obs = LineObserver(console, interval_s=15, clock=clock, background=False)
    obs.on_plan("run-1", total=10, earlier={"pass": 4, "fail_numerics": 1, "skipped": 1})
    obs.on_start(A)
    clock.now += 30
    obs.on_result(Result(A, "pass"))
    obs.stop("interrupted (SIGTERM)")
    assert "6 already done (resuming)" in buf.getvalue()
    first, last = _lines(buf)
    assert first.startswith("progress 6/10 done: 4 pass, 1 fail, 1 other;")
    assert (
        last
        == "progress 7/10 done: 5 pass, 1 fail, 1 other; elapsed 0:00:30; interrupted (SIGTERM)"
    )
    clock.now += 15
    obs.tick()  # stopped: nothing more
    assert len(_lines(buf)) == 2


def test_the_timer_thread_prints_while_a_case_runs():
    console, buf = _log()
    obs = LineObserver(console, interval_s=0.1)
    with obs:
        obs.on_plan("run-1", total=1)
        obs.on_start(A)
        # Wait for two ticks, however late a loaded machine runs the thread (no fixed sleep).
        deadline = time.monotonic() + 30
        while buf.getvalue().count("running faulty/00-x") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = _lines(buf)
    assert len(lines) >= 4, lines  # the plan's line, two ticks at least, the last
    assert all("running faulty/00-x" in ln for ln in lines[1:-1])
    assert lines[-1].endswith("; finished")


def test_nothing_is_printed_for_a_run_refused_before_it_started():
    console, buf = _log()
    with LineObserver(console, background=False):
        pass  # api.run raised a ConfigError before on_plan
    assert buf.getvalue() == ""


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0:00:00"), (59.9, "0:00:59"), (61, "0:01:01"), (3725, "1:02:05")]
)
def test_durations_read_as_the_bar_shows_them(seconds, text):
    assert duration(seconds) == text


def test_an_80_column_bar_keeps_the_count_and_times_and_cuts_the_case_id():
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    obs = RichObserver(console)
    obs.on_plan("r", 397)
    for case in (A, B, C):
        obs.on_result(Result(case, "pass"))
    long_id = "parity/hf/a_model_type_with_a_really_long_name/compile/bf16"
    obs.on_start(Case("parity", long_id.removeprefix("parity/")))
    obs.progress.refresh()
    obs.stop()
    line = buf.getvalue().split("\r\x1b[2K")[-1].splitlines()[0]
    assert len(line) <= 80
    for kept in ("3/397", "3 pass 0 fail 0 other", "0:00:0", "ETA"):
        assert kept in line, line
    assert "parity/hf/" in line and long_id not in line and line.rstrip().endswith("…")
