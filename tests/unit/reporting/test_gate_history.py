"""`gate` fails on a planted regression and passes without one; `history` shows every run."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from trainready.cli.app import app
from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store
from trainready.reporting.gate import evaluate, parse_threshold

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
    assert rows[2]["headline"]["matmul MFU at M=128"] == pytest.approx(0.08)
    html = runner.invoke(app, ["history", "--out", str(store.dir), "--format", "html"]).output
    assert "<svg" in html and "broken" in html
    none = runner.invoke(app, ["history", "--out", str(store.dir), "--device", "tpu"])
    assert none.exit_code == 0 and "broken" not in none.output


def test_gate_names_baseline_cases_not_run_and_fails_without_allow_missing(store, tmp_path):
    """A candidate that ran fewer cases than the baseline cannot have passed the ones it
    skipped: the gate names them, and fails unless --allow-missing."""
    store.add_run(
        RunRecord("partial", time.time(), ["matmul"], "cpu", "quick", planned=2,
                  env={"device": {"name": "AMD EPYC"}})
    )  # fmt: skip
    store.add_planned("partial", CASES[:2])
    for case in CASES[:2]:
        metrics = {"tflops": 1.0, "mfu": 0.1, "time_ms": 1.0}
        store.add_result("partial", Result(case, "pass", metrics))
    result = evaluate(store, "partial", "base", 0.05)
    assert not result.passed and not result.newly_failing and all(m.ok for m in result.metrics)
    assert [case_id for case_id, _ in result.missing] == [c.id for c in CASES[2:]]
    assert result.describe_missing().startswith("3 cases the baseline ran have no result here")
    assert evaluate(store, "partial", "base", 0.05, allow_missing=True).passed

    runner, d = CliRunner(), str(store.dir)
    junit = tmp_path / "gate.xml"
    args = ["gate", f"{d}:partial", "--baseline", f"{d}:base", "--junit", str(junit)]
    bad = runner.invoke(app, args)
    assert bad.exit_code == 1
    text = " ".join(bad.output.split())
    assert "MISSING 3 cases the baseline ran have no result here (matmul 3)" in text
    assert CASES[2].id in text and "--allow-missing" in text
    failure = ET.parse(junit).getroot().find(".//testcase[@name='baseline cases run']/failure")
    assert failure.get("type") == "missing" and CASES[4].id in failure.text
    ok = runner.invoke(app, [*args, "--allow-missing"])
    assert ok.exit_code == 0 and "allowed 3 cases" in " ".join(ok.output.split())
    skipped = ET.parse(junit).getroot().find(".//testcase[@name='baseline cases run']/skipped")
    assert skipped is not None


def test_history_reads_right_in_a_terminal(store):
    """No raw Markdown on a terminal; MFU as a percentage as everywhere; one run is one tick."""
    res = CliRunner().invoke(app, ["history", "--out", str(store.dir)])
    assert res.exit_code == 0, res.output
    assert "<details>" not in res.output and "| " not in res.output
    assert "Runs, oldest first" in res.output and "broken" in res.output
    assert "trainready history -f html -o history.html draws it" in " ".join(res.output.split())
    md = CliRunner().invoke(app, ["history", "--out", str(store.dir), "-f", "md"]).output
    assert "(in the HTML report)" not in md and "trainready history -f html" in md
    assert "| 10.0% |" in md  # matmul MFU 0.1: a percentage, as the scorecard shows it


def test_history_of_one_run(tmp_path):
    with Store(tmp_path) as s:
        _add_run(s, "only", [1.0] * 5)
    html = CliRunner().invoke(app, ["history", "--out", str(tmp_path), "-f", "html"]).output
    assert "1 run<" in html  # the subtitle: "1 run", not "1 runs"
    svg = html[html.index("<svg") : html.index("</svg>")]
    ticks = re.findall(r'text-anchor="middle">([^<]+)</text>', svg)
    assert "1" in ticks and not {"0.4", "0.6", "1.4", "1.6", "0.5", "1.5"} & set(ticks)
