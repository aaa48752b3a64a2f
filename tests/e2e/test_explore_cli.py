"""`trainready explore`: bad input is one line and exit code 2; a served trace answers over HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from tests.support.clirun import default_signals
from trainready.cli.app import app


def explore(*args: str, cwd: Path, monkeypatch) -> Result:
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(app, ["explore", *args, "--no-open"])


@pytest.mark.parametrize(
    ("setup", "args", "expected"),
    [
        (None, ["missing.json"], "no such trace file or directory: missing.json"),
        ("emptydir", ["empty"], "empty: directory holds no .json or .json.gz trace files"),
        ("corrupt", ["bad.json"], "truncated or corrupt JSON"),
        ("notrace", ["bad.json"], "not a profiler trace"),
        (None, [], "give trace files to explore, or --serve DIR"),
        ("notrace", ["bad.json", "--serve", "."], "give trace files to explore, or --serve DIR"),
        (None, ["--serve", "nodir"], "nodir: not a directory"),
        (None, ["--serve", ".", "--max-upload-mb", "0"], "--max-upload-mb must be positive"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, setup, args, expected):
    if setup == "corrupt":
        (tmp_path / "bad.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1,')
    elif setup == "notrace":
        (tmp_path / "bad.json").write_text('{"rows": [1, 2, 3]}')
    elif setup == "emptydir":
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "metadata.json").write_text("{}")  # not a trace
    p = explore(*args, cwd=tmp_path, monkeypatch=monkeypatch)
    assert p.exit_code == 2, p.output
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], p.stderr


def test_serve_answers_and_stops(tmp_path):
    (tmp_path / "t.json").write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "name": "op",
                        "cat": "cpu_op",
                        "ts": 1,
                        "dur": 2,
                        "pid": 1,
                        "tid": 1,
                    }
                ]
            }
        )  # fmt: skip
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainready", "explore", "--serve", ".", "--no-open"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,  # Ctrl-C below
    )
    try:
        line = proc.stdout.readline()
        assert "explorer at http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split("explorer at ")[1].split()[0]
        with urllib.request.urlopen(url + "api/traces", timeout=30) as r:
            listing = json.load(r)
        assert listing["uploads"] is True and [t["id"] for t in listing["traces"]] == ["t.json"]
        # Ctrl-C, as the banner says: a clean stop, exit code 0, no traceback.
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # it did not stop: never leave a server behind
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err
    # Stopped means the port is closed, not just the process gone.
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(url + "api/traces", timeout=5)
    assert isinstance(refused.value.reason, ConnectionRefusedError)


def test_explore_takes_the_folder_profile_wrote(tmp_path):
    """`trainready profile` prints `analyze DIR`; `explore DIR` opens the same traces (its
    metadata.json left aside), not 'no such trace file'."""
    out = tmp_path / "profile"
    out.mkdir()
    event = {"ph": "X", "name": "op", "cat": "cpu_op", "ts": 1, "dur": 2, "pid": 1, "tid": 1}
    (out / "trace.json").write_text(json.dumps({"traceEvents": [event]}))
    (out / "metadata.json").write_text(json.dumps({"steps": 3}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainready", "explore", str(out), "--no-open"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,  # Ctrl-C below
    )
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].startswith(f"loading {out / 'trace.json'} ("), lines  # one line, whole
        assert "explorer at http://127.0.0.1:" in lines[1], lines
        url = lines[1].split("explorer at ")[1].split()[0]
        with urllib.request.urlopen(url + "api/traces", timeout=30) as r:
            listing = json.load(r)
        assert len(listing["traces"]) == 1  # the trace, not the metadata
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
