"""The SQLite store: runs, results as they arrive, calibrations, and clear errors."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from trainready.core.case import Case, Result
from trainready.core.store import DB_NAME, RunRecord, Store, StoreError, new_run_id

TABLES = {"runs", "results", "planned", "calibrations"}
CONNECT = sqlite3.connect  # the real one, for readers while a test watches the store's own


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


def _tables(db_path) -> set[str]:
    con = CONNECT(db_path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def test_a_new_store_file_exists_only_complete(tmp_path, monkeypatch):
    """Before every statement the store issues while being created, its file is either absent or
    has every table: a reader polling for it (a progress view, a benchmark) never sees it half-made."""
    db_path = tmp_path / "new" / DB_NAME
    seen: list[set[str] | None] = []

    class Watched(sqlite3.Connection):
        def _check(self) -> None:
            seen.append(_tables(db_path) if db_path.exists() else None)

        def execute(self, *args, **kwargs):
            self._check()
            return super().execute(*args, **kwargs)

        def executescript(self, *args, **kwargs):
            self._check()
            return super().executescript(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: CONNECT(*a, factory=Watched, **k))
    with Store(db_path.parent) as store:
        store.add_run(_run("r1"))
    assert None in seen and len(seen) > 2  # watched from before the file existed to after
    assert all(tables is None or tables >= TABLES for tables in seen), seen
    assert sorted(p.name for p in db_path.parent.iterdir()) == [DB_NAME]  # no temp files left


def test_concurrent_creators_and_a_reader(tmp_path):
    """Processes racing to create one store all succeed on the same file; a raw reader that finds
    the file finds its tables (what benchmarks/runner_overhead.py polls)."""
    db_path = tmp_path / DB_NAME
    start, errors = threading.Barrier(7), []

    def create(i: int) -> None:
        start.wait()
        with Store(tmp_path) as store:
            store.add_run(_run(f"r{i}"))

    def read() -> None:
        start.wait()
        deadline = time.monotonic() + 10
        while not db_path.exists() and time.monotonic() < deadline:
            pass
        try:
            with sqlite3.connect(db_path, timeout=5) as con:
                con.execute("SELECT count(*) FROM results").fetchone()
        except sqlite3.Error as e:
            errors.append(e)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
    threads.append(threading.Thread(target=read))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with Store(tmp_path, create=False) as store:
        assert sorted(r.run_id for r in store.list_runs()) == [f"r{i}" for i in range(6)]


def test_a_half_made_store_is_completed(tmp_path):
    """A store left with only some tables (made by a version that created them one by one and was
    killed midway) reads as it is, unchanged, and gets the rest when a writer opens it."""
    con = sqlite3.connect(tmp_path / DB_NAME)
    con.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY)")
    con.close()
    with Store(tmp_path, create=False) as store:  # read-only: the missing tables read as empty
        assert store.done_case_ids("r1") == set()
    assert _tables(tmp_path / DB_NAME) == {"runs"}
    with Store(tmp_path) as store:
        assert store.done_case_ids("r1") == set()
    assert _tables(tmp_path / DB_NAME) >= TABLES
