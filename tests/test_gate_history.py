"""`gate` fails on a planted regression and passes without one; `history` shows every run."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from trainready.cli import app
from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store
from trainready.gate import evaluate, parse_threshold

CASES = [Case("matmul", f"m/op{i}/M128/fwd", {"M": 128, "N": 64, "K": 64}) for i in range(5)]


def _add_run(store: Store, run_id: str, tflops: list[float], statuses: list[str] | None = None):
    store.add_run(
        RunRecord(run_id, time.time(), ["matmul"], "cpu", "quick",
                  env={"torch": "2.13.0", "device": {"name": "AMD EPYC"}}, planned=len(CASES))
    )  # fmt: skip
    store.add_planned(run_id, CASES)
    for case, t, st in zip(CASES, tflops, statuses or ["pass"] * len(CASES), strict=True):
        metrics = {"tflops": t, "mfu": t / 10, "time_ms": 1 / t} if st == "pass" else {}
        store.add_result(
            run_id, Result(case, st, metrics, {"error": "boom"} if st != "pass" else {})
        )


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path) as s:
        _add_run(s, "base", [1.0, 1.0, 1.0, 1.0, 1.0])
        _add_run(s, "same", [1.02, 0.99, 0.97, 1.01, 1.0])  # noise within 5%
        _add_run(s, "slow", [0.8, 0.7, 0.9, 0.8, 0.85])  # planted 20% regression
        _add_run(s, "broken", [1.0, 1.0, 1.0, 1.0, 1.0], ["pass"] * 4 + ["fail_numerics"])
        yield s


def test_threshold_parsing():
    assert parse_threshold("5%") == pytest.approx(0.05) and parse_threshold("0.1") == 0.1
    with pytest.raises(ValueError, match="malformed threshold"):
        parse_threshold("fast")


def test_gate_verdicts(store):
    assert evaluate(store, "same", "base", 0.05).passed
    slow = evaluate(store, "slow", "base", 0.05)
    assert not slow.passed
    failing = {m.metric for m in slow.metrics if not m.ok}
    assert failing == {"tflops", "mfu", "time_ms"}  # time_ms: lower is better, and it rose
    broken = evaluate(store, "broken", "base", 0.05)
    assert not broken.passed
    assert broken.newly_failing == [("matmul/m/op4/M128/fwd", "pass", "fail_numerics")]


def test_gate_cli_exit_codes_and_junit(store, tmp_path):
    runner = CliRunner()
    d = str(store.dir)
    ok = runner.invoke(app, ["gate", f"{d}:same", "--baseline", f"{d}:base"])
    assert ok.exit_code == 0, ok.output
    junit = tmp_path / "gate.xml"
    bad = runner.invoke(
        app,
        [
            "gate",
            f"{d}:slow",
            "--baseline",
            f"{d}:base",
            "--max-slowdown",
            "5%",
            "--junit",
            str(junit),
        ],
    )
    assert bad.exit_code == 1 and "REGRESSION" in bad.output
    root = ET.parse(junit).getroot()
    assert int(root.get("failures")) == 3
    loose = runner.invoke(
        app, ["gate", f"{d}:slow", "--baseline", f"{d}:base", "--max-slowdown", "50%"]
    )
    assert loose.exit_code == 0


def test_history(store):
    runner = CliRunner()
    res = runner.invoke(app, ["history", "--out", str(store.dir), "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["run_id"] for r in rows] == ["base", "same", "slow", "broken"]
    assert rows[3]["pass_rate"]["matmul"] == pytest.approx(0.8)
    assert rows[2]["headline"]["median matmul MFU"] == pytest.approx(0.08)
    html = runner.invoke(app, ["history", "--out", str(store.dir), "--format", "html"]).output
    assert "<svg" in html and "broken" in html
    none = runner.invoke(app, ["history", "--out", str(store.dir), "--device", "tpu"])
    assert none.exit_code == 0 and "broken" not in none.output
