"""`analyze`'s printing: plain text into a file or a pipe, rich on a terminal."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainready.profile import text
from trainready.profile.text import Line, Table, plain_lines

SMALL = Path(__file__).parent / "data" / "traces" / "trace_filter__sampled_rank-1.json.gz"
ENTRY = "import sys; sys.argv[0] = 'trainready'; from trainready.entry import main; main()"
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


def _analyze_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_ENV}
    return {**env, "TRAINREADY_CACHE_DIR": "off"}


def test_a_pipe_gets_whole_lines_without_rich():
    """Piped (`trainready analyze T > file`): no line is wrapped at 80 columns, no box drawing,
    and rich is never imported."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", ENTRY, "analyze", str(SMALL)],
                       capture_output=True, text=True, env=_analyze_env(), stdin=subprocess.DEVNULL)  # fmt: skip
    assert p.returncode == 0, p.stderr
    loaded = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if "|" in line}
    assert not any(m == "rich" or m.startswith("rich.") for m in loaded)
    lines = p.stdout.splitlines()
    launches = next(line for line in lines if line.startswith("launches: "))
    assert len(launches) > 80 and launches.endswith("ran shorter than their launch call")
    assert "Idle time per stream" in lines and not any(ch in p.stdout for ch in "┃━│┏")


def test_a_terminal_gets_rich_tables():
    """On a pseudo-terminal the same command draws rich's tables."""
    leader, follower = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-c", ENTRY, "analyze", str(SMALL)],
                             stdout=follower, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env=_analyze_env())  # fmt: skip
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert p.wait(timeout=60) == 0, p.stderr.read()
        p.stderr.close()
    finally:
        os.close(leader)
    shown = out.decode("utf-8", "replace")
    assert "Idle time per stream" in shown and "┃" in shown and "━" in shown


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
