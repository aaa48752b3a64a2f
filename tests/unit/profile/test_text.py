"""`analyze`'s printing: plain text into a file or a pipe, rich on a terminal (end to end, through
the console entry: tests/e2e/test_profile_cli.py)."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.support import paths
from trainready.profile import text
from trainready.profile.text import Line, Table, plain_lines

SMALL = paths.DATA / "traces" / "trace_filter__sampled_rank-1.json.gz"
TERMINAL_ENV = ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")


def _table() -> Table:
    t = Table("Idle time per stream")
    t.add_column("stream", justify="right")
    t.add_column("kernel")
    t.add_row("7", "ampere_sgemm_128x64_nn")
    t.add_row("20", "nccl")
    return t


def test_plain_tables_are_aligned_and_set_off_by_blank_lines():
    blocks = [Line("trace.json rank 0", bold="trace.json"), _table(), _table(), Line("launches: 3")]
    table = ["Idle time per stream",
             "stream  kernel",
             "------  ----------------------",
             "     7  ampere_sgemm_128x64_nn",
             "    20  nccl"]  # fmt: skip
    assert plain_lines(blocks) == ["trace.json rank 0", "", *table, "", *table, "", "launches: 3"]
    # no blank line before the first block or after the last
    assert plain_lines([_table()]) == table


def test_a_table_without_rows_is_its_title_header_and_rule():
    t = Table("Profiler steps")
    t.add_column("step", justify="right")
    assert plain_lines([t]) == ["Profiler steps", "step", "----"]


@pytest.mark.parametrize(
    ("env", "isatty", "terminal"),
    [({}, False, False), ({}, True, True), ({"TTY_COMPATIBLE": "1"}, False, True),
     ({"TTY_COMPATIBLE": "0"}, True, False), ({"FORCE_COLOR": "1"}, False, True),
     ({"FORCE_COLOR": ""}, True, False), ({"TTY_COMPATIBLE": "2"}, True, True)],
)  # fmt: skip
def test_terminal_as_rich_decides_it(monkeypatch, env, isatty, terminal):
    """stdout_is_terminal follows rich's Console.is_terminal; rich itself is asked the same."""
    from rich.console import Console

    for name in TERMINAL_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stream = type("Stream", (), {"isatty": lambda self: isatty, "write": lambda self, s: None})()
    monkeypatch.setattr(sys, "stdout", stream)
    assert text.stdout_is_terminal() is terminal
    assert Console(file=stream).is_terminal is terminal


def test_the_traces_of_a_directory_are_a_blank_line_apart(tmp_path, capsys, monkeypatch):
    for name in ("a.json.gz", "b.json.gz"):
        shutil.copy(SMALL, tmp_path / name)
    for name in TERMINAL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRAINREADY_CACHE_DIR", "off")
    text.run(tmp_path)
    lines = capsys.readouterr().out.splitlines()
    heads = [i for i, line in enumerate(lines) if line.endswith("last profiler step left out")]
    assert len(heads) == 2 and heads[0] == 0 and lines[heads[1] - 1] == ""


@pytest.mark.parametrize("fails", [False, True])
@pytest.mark.parametrize("was_on", [True, False])
def test_the_quick_path_runs_without_the_cyclic_gc_and_restores_it(monkeypatch, fails, was_on):
    """`quick_main` turns the cyclic collector off while it runs (a whole analyze makes few
    cycles; its passes cost time) and leaves it as it found it, on success or error."""
    import gc

    seen = []

    def run(trace, **kwargs):
        seen.append(gc.isenabled())
        if fails:
            raise OSError(2, "gone", str(trace))

    monkeypatch.setattr(text, "run", run)
    monkeypatch.setattr("trainready.cli.common.print_error", lambda message: None)
    before = gc.isenabled()
    (gc.enable if was_on else gc.disable)()
    try:
        code = text.quick_main(["analyze", str(SMALL)])
        after = gc.isenabled()
    finally:
        (gc.enable if before else gc.disable)()
    assert seen == [False]
    assert code == (1 if fails else 0)
    assert after is was_on


@pytest.mark.parametrize("as_json", [False, True])
def test_the_timeline_rows_are_computed_only_for_json(monkeypatch, capsys, as_json):
    """The text does not print the timeline's rows: only --json asks for them."""
    asked = []

    def summaries(trace, **kwargs):
        asked.append(kwargs["rows"])
        return []

    monkeypatch.setattr("trainready.profile.per_rank.summaries", summaries)
    text.run(SMALL, as_json=as_json)
    assert asked == [as_json]
