"""Killing the parent mid-run loses no finished result, and --resume finishes the run."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import paths
from trainready import api
from trainready.core.store import Store

ROOT = paths.ROOT
SUITE = "tests.support.faulty_suite"
KINDS = ["ok"] * 8


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as con:
            return con.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # busy: a new store appears with its tables, never before them


@pytest.mark.slow
def test_kill_parent_then_resume(tmp_path):
    out = tmp_path / "out"
    # Same options the API call below uses, through the CLI in its own process.
    code = (
        "from trainready import api; "
        f"api.run([{SUITE!r}], device='cpu', out={str(out)!r}, "
        f"options={{'kinds': {KINDS!r}, 'sleep_s': 0.4}})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    db = out / "trainready.db"
    deadline = time.monotonic() + 120
    while _stored(db) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # no cleanup, no finally blocks
    proc.wait()
    with Store(out) as store:
        run = store.latest_run()
        before = {r.case_id: r for r in store.results(run.run_id)}
    assert 3 <= len(before) < len(KINDS), "kill should land mid-run"
    assert run.finished_at is None

    summary = api.run(
        [SUITE], device="cpu", out=out, resume=True, options={"kinds": KINDS, "sleep_s": 0.4}
    )
    assert summary.resumed and summary.run_id == run.run_id
    with Store(out) as store:
        after = {r.case_id: r for r in store.results(run.run_id)}
        assert store.get_run(run.run_id).finished_at is not None
        assert len(store.list_runs()) == 1
    assert len(after) == len(KINDS)
    assert all(r.status == "pass" for r in after.values())
    for case_id, r in before.items():  # finished results were kept, not redone
        assert after[case_id].started_at == r.started_at


def test_resume_of_finished_run_runs_nothing(tmp_path):
    opts = {"kinds": ["ok", "ok"]}
    first = api.run([SUITE], device="cpu", out=tmp_path, options=opts)
    again = api.run([SUITE], device="cpu", out=tmp_path, resume=True, options=opts)
    assert again.run_id == first.run_id and again.done == 2
