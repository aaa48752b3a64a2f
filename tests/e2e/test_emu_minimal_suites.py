"""Every suite's smoke preset on emu's minimal profile: a young backend with an allocator, copies,
views and the CPU fallback, and no synchronize, events, memory statistics, generator, pinned
memory or autocast (trainready/testing/emu, TRAINREADY_EMU_PROFILE=minimal).

What the tool wanted and the backend lacks must never fail a case: synchronize and timing take
their stated substitutes, memory goes unmeasured, and the report lists each. What training itself
needs and the backend lacks (autocast for a bf16 autocast run) makes a case `unsupported`, with the
reason. emu is imported only in the CLI's processes."""

from __future__ import annotations

import pytest

from tests.e2e.test_emu_suites import IMPORT, cli, report

pytestmark = pytest.mark.slow
MINIMAL = {"TRAINREADY_EMU_PROFILE": "minimal"}
SYNC_REFUSAL = "Backend doesn't support synchronizing all streams on device"
# Ends that blame the device for a run that broke: none may come from a missing instrument.
BROKE = ("fail_run", "crash", "timeout")


def why(result: dict) -> str:
    d = result["diagnostics"]
    return str(d.get("reason") or d.get("error") or "")


@pytest.fixture(scope="module")
def minimal(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("emu-minimal")
    args = ("run", "all", "--device", "emu", *IMPORT, "--preset", "smoke", "--out", str(out))
    p = cli(*args, env=MINIMAL)
    assert p.returncode in (0, 1), p.stderr[-3000:]  # 1: some case did not pass
    md = next(out.glob("*/report.md")).read_text()
    return report(out), md


def test_every_suite_reaches_verdicts_and_no_case_breaks_on_a_missing_instrument(minimal):
    run, _ = minimal
    suites = {r["suite"] for r in run["results"]}
    assert suites == {"parity", "ops", "matmul", "flex", "train", "dist"}
    broke = [(r["case_id"], r["status"]) for r in run["results"] if r["status"] in BROKE]
    assert not broke, broke
    for r in run["results"]:
        assert SYNC_REFUSAL not in str(r["diagnostics"]), r["case_id"]
        if r["status"] != "pass":
            assert why(r), f"{r['case_id']} ended {r['status']} without a reason"


def test_eager_training_and_the_matmul_sweep_pass_with_the_substitutes(minimal):
    run, _ = minimal
    passed = {r["case_id"] for r in run["results"] if r["status"] == "pass"}
    assert any(c.startswith("parity/") and "/eager/" in c for c in passed), passed
    assert any(c.startswith("matmul/") for c in passed), passed


def test_a_bf16_autocast_run_is_unsupported_because_the_backend_has_no_autocast(minimal):
    run, _ = minimal
    train = [r for r in run["results"] if r["suite"] == "train"]
    assert train and all(r["status"] == "unsupported" for r in train), train
    assert all("has no autocast" in why(r) for r in train), [why(r) for r in train]


def test_the_run_records_and_the_report_lists_what_stood_in(minimal):
    run, md = minimal
    caps = {c["name"]: c for c in run["run"]["env"]["device_capabilities"]}
    assert caps["synchronize"]["status"] == "substitute"
    assert SYNC_REFUSAL in caps["synchronize"]["why"]  # the backend's own words
    assert "device-to-host copy" in caps["synchronize"]["how"]
    assert caps["events"]["status"] == "substitute" and "wall clock" in caps["events"]["how"]
    assert caps["memory_stats"]["status"] == "absent"
    assert caps["autocast"]["status"] == "absent"
    assert "device_guard" not in caps  # what the backend has is not listed
    section = md.split("## Device capabilities")[1].split("\n## ")[0]
    for name in ("synchronize", "events", "memory_stats", "generator", "autocast"):
        assert name in section
