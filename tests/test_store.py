"""The SQLite store: runs, results as they arrive, calibrations, and clear errors."""

from __future__ import annotations

import time

import pytest

from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store, StoreError, new_run_id


def _run(run_id: str | None = None) -> RunRecord:
    return RunRecord(
        run_id=run_id or new_run_id(),
        created_at=time.time(),
        suites=["matmul"],
        device="cpu",
        preset="quick",
        config={"suites": ["matmul"]},
        env={"torch": "x"},
        planned=2,
    )


def test_results_round_trip(tmp_path):
    with Store(tmp_path) as store:
        run = _run()
        store.add_run(run)
        case = Case("matmul", "m/q/M1/fwd", {"M": 1, "N": 64})
        store.add_result(
            run.run_id,
            Result(
                case, "fail_numerics", {"mfu": 0.5}, {"error": "x"}, phase="check", duration_s=1.5
            ),
        )
        [got] = store.results(run.run_id)
    assert got.case == case and got.case.params == {"M": 1, "N": 64}
    assert (got.status, got.metrics, got.diagnostics, got.phase) == (
        "fail_numerics",
        {"mfu": 0.5},
        {"error": "x"},
        "check",
    )
    with Store(tmp_path, create=False) as again:  # persisted, WAL readable by a second connection
        assert again.get_run(run.run_id).planned == 2
        assert again.done_case_ids(run.run_id) == {"matmul/m/q/M1/fwd"}


def test_calibration_cache(tmp_path):
    with Store(tmp_path) as store:
        assert store.get_calibration("cpu|x", "bf16") is None
        store.put_calibration("cpu|x", "bf16", 1.5e11, {"n": 2048})
        cal = store.get_calibration("cpu|x", "bf16")
    assert cal["peak_flops"] == 1.5e11 and cal["n"] == 2048


def test_errors_are_one_line(tmp_path):
    with pytest.raises(StoreError, match="no trainready store"):
        Store(tmp_path / "missing", create=False)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "trainready.db").write_text("this is not sqlite " * 100)
    with pytest.raises(StoreError, match="not a trainready store"):
        Store(bad)
    with Store(tmp_path / "empty") as store, pytest.raises(StoreError, match="no runs"):
        store.latest_run()


def test_copy_run_into_memory(tmp_path):
    with Store(tmp_path) as src, Store.in_memory() as mem:
        run = _run("r1")
        src.add_run(run)
        src.add_result("r1", Result(Case("matmul", "a", {}), "pass"))
        mem.copy_run(src, "r1")
        assert [r.case_id for r in mem.results("r1")] == ["matmul/a"]
