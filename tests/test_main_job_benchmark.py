"""The main-job benchmark's account of where a run's time went, read from a run's store."""

from __future__ import annotations

import json
import sqlite3

from benchmarks.main_job import where_time_goes


def _store(path, rows):
    con = sqlite3.connect(path)
    con.execute(
        "create table results (suite, params, metrics, diagnostics, started_at, duration_s)"
    )
    con.executemany("insert into results values (?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()


def test_where_time_goes_splits_compile_from_the_rest(tmp_path):
    db = tmp_path / "trainready.db"
    process = {"process_s": 6.0, "first_step_s": 2.5, "compile": {"compile_s": 2.25}}
    _store(
        db,
        [
            ("parity", json.dumps({"mode": "eager"}), "{}", "{}", 105.0, 1.5),
            ("parity", json.dumps({"mode": "compile"}), '{"compile_s": 8.0}', "{}", 107.0, 9.0),
            ("flex", "{}", '{"compile_s": 3.0}', "{}", 103.0, 3.5),
            ("flex", "{}", "{}", "{}", 104.0, 0.25),  # unsupported: no compile
            ("train", "{}", "{}", json.dumps({"scenarios": {"compiled": {"cold": process}}}),
             120.0, 7.0),
        ],
    )  # fmt: skip
    out = where_time_goes(db, t0=100.0)
    assert out["first_case_started_s"] == 3.0
    assert out["parity_by_mode"] == {
        "eager": {"cases": 1, "case_s": 1.5, "compile_s": 0.0},
        "compile": {"cases": 1, "case_s": 9.0, "compile_s": 8.0},
    }
    assert out["flex"] == {"cases": 2, "case_s": 3.8, "compile_s": 3.0}
    assert out["train_processes"] == [
        {"process": "compiled cold", "process_s": 6.0, "first_step_s": 2.5, "compile_s": 2.2}
    ]
