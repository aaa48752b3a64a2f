"""The Python API mirrors the CLI: report (with compare), devices, mfu, and names that stay bound."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time

import pytest

import trainready
from tests.support.clirun import ROOT, cli
from trainready.core.case import Case, Result
from trainready.core.config import ConfigError
from trainready.core.store import RunRecord, Store
from trainready.device import device_key


def _stored_run(out, run_id: str, device: str = "cpu") -> str:
    """A finished run of two cases in the store at `out`, written directly (no workers)."""
    with Store(out) as store:
        store.add_run(
            RunRecord(run_id, time.time(), ["matmul"], device, "quick", planned=2, env={})
        )
        cases = [Case("matmul", "a", {}), Case("matmul", "b", {})]
        store.add_planned(run_id, cases)
        store.add_result(run_id, Result(cases[0], "pass", {"mfu": 0.5}))
        store.add_result(run_id, Result(cases[1], "fail_run", diagnostics={"error": "boom"}))
        store.finish_run(run_id)
    return f"{out}:{run_id}"


def test_report_stays_callable_after_its_subpackage_is_imported(tmp_path):
    ref = _stored_run(tmp_path, "r1")
    first = trainready.report(ref, fmt="md")
    assert trainready.report(ref, fmt="md") == first  # a second call (the first imports render)
    importlib.import_module("trainready.reporting.html")
    importlib.import_module("trainready.metrics.mfu")
    assert trainready.report(ref, fmt="md") == first
    assert callable(trainready.mfu)


def test_api_names_are_functions_in_any_import_order():
    code = (
        "import trainready.reporting.html, trainready.metrics.mfu, trainready.reporting.json_report\n"
        "import trainready\n"
        "from trainready.reporting import render\n"
        "assert all(callable(getattr(trainready, n)) for n in trainready.__all__[:-1]), "
        "[getattr(trainready, n) for n in trainready.__all__]\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_report_compare(tmp_path):
    primary = _stored_run(tmp_path / "a", "r1")
    other = _stored_run(tmp_path / "b", "r2")
    got = json.loads(trainready.report(primary, compare=other, fmt="json"))
    assert [run["run"]["run_id"] for run in got["runs"]] == ["r1", "r2"]
    assert got["primary"] == "r1" and len(got["comparisons"]) == 1
    assert json.loads(trainready.report(primary, compare=[other], fmt="json")) == got
    assert json.loads(trainready.report(primary, other, fmt="json")) == got  # as `report A B`
    with pytest.raises(ConfigError, match="valid: md, json, junit, html"):
        trainready.report(primary, fmt="pdf")
    with pytest.raises(ConfigError, match="at least one run"):
        trainready.report(compare=other)


def test_mfu_is_the_cli_json():
    got = trainready.mfu(
        "qwen3-debugmodel", seq_len=128, tokens_per_s=1000, devices=2, peak_tflops=100
    )
    assert got["flops_per_token"] == 217_093_632 and got["params"] == 31_987_968
    p = cli("mfu", "--model", "qwen3-debugmodel", "--seq-len", "128", "--tokens-per-s", "1000",
            "--devices", "2", "--peak-tflops", "100", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == got
    with pytest.raises(ConfigError, match="unknown model 'gpt-17'"):
        trainready.mfu("gpt-17", seq_len=8, tokens_per_s=1, devices=1, peak_tflops=1)


def test_devices_without_measuring_touch_no_store(tmp_path):
    rows = trainready.devices(out=tmp_path / "store", measure=False)
    assert rows[0]["device"] == "cpu" and rows[0]["name"] and rows[0]["peak"] is None
    assert rows[0]["total_memory"] > 0 and rows[0]["info"]["type"] == "cpu"
    assert not (tmp_path / "store").exists()
    with pytest.raises(ConfigError, match="unknown dtype 'bf17'"):
        trainready.devices(out=tmp_path, dtype="bf17", measure=False)


def test_devices_use_the_cached_peak(tmp_path):
    with Store(tmp_path) as store:  # a calibration measured earlier on this machine
        store.put_calibration(device_key("cpu"), "fp32", 2.5e11, {"n": 1024})
    [cpu] = [
        row for row in trainready.devices(out=tmp_path, dtype="fp32") if row["device"] == "cpu"
    ]
    assert cpu["peak"]["flops"] == 2.5e11 and cpu["peak"]["source"] == "measured"
    assert cpu["peak"]["label"].startswith("vs measured peak")
