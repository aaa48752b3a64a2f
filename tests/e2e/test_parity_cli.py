"""The parity suite end to end through the CLI: a handful of HF types and a planted fault in an
isolated worker, and the report's parity section. (--baseline: tests/unit/suites/parity/test_suite.py.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.clirun import cli

ROOT = paths.ROOT


def _results(out: Path, run_id: str) -> dict[str, tuple[str, dict]]:
    db = sqlite3.connect(out / "trainready.db")
    rows = db.execute(
        "SELECT name, status, diagnostics FROM results WHERE run_id=?", (run_id,)
    ).fetchall()
    return {name: (status, json.loads(diag)) for name, status, diag in rows}


def _run_id(out: Path) -> str:
    db = sqlite3.connect(out / "trainready.db")
    return db.execute("SELECT run_id FROM runs ORDER BY created_at DESC").fetchone()[0]


@pytest.mark.slow
def test_hf_types_and_a_planted_fault_through_the_cli(tmp_path):
    out = tmp_path / "runs"
    common = ["--device", "cpu", "--out", str(out), "--set", "steps=3", "--set", "modes=eager"]
    p = cli(
        "run",
        "parity",
        *common,
        "--set",
        "zoo=hf",
        "--set",
        "hf_types=llama,qwen3_moe,no_such_type",
        "--set",
        "models=tests.support.parity_faults:wrong_backward",
    )
    assert p.returncode == 0, p.stderr[-2000:]
    first = _run_id(out)
    results = _results(out, first)
    assert results["hf/llama/eager/fp32"][0] == "pass"
    assert results["hf/qwen3_moe/eager/fp32"][0] == "pass"
    assert results["hf/qwen3_moe/eager/fp32"][1]["traits"]["moe"] == "moe"
    assert results["hf/no_such_type/eager/fp32"][0] == "unsupported"
    status, diag = results["custom/tests.support.parity_faults:wrong_backward/eager/fp32"]
    assert status == "fail_numerics" and diag["error"].startswith("down.weight.grad")

    md = (out / first / "report.md").read_text()
    for heading in (
        "Parity pass rate by architecture trait",
        "Parity failure categories",
        "Every parity case",
    ):
        assert heading in md
    assert "no_such_type" in md  # an unbuildable type is shown, never dropped
