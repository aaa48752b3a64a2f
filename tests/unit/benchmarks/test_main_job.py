"""The main-job benchmark's account of where a run's time went, read from a run's store."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from benchmarks.main_job import CpuSampler, cores_busy, summary, to_reference, where_time_goes


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
            ("parity", json.dumps({"mode": "eager"}), '{"t_independent_s": 0.5, "t_check_s": 0.2}',
             "{}", 105.0, 1.5),
            ("parity", json.dumps({"mode": "eager"}), '{"t_independent_s": 0.5}', "{}", 106.0, 1.0),
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
        "eager": {
            "cases": 2,
            "case_s": 2.5,
            "compile_s": 0.0,
            "phase_s": {"independent": 1.0, "check": 0.2},  # summed over the cases, per phase
        },
        "compile": {"cases": 1, "case_s": 9.0, "compile_s": 8.0, "phase_s": {}},
    }
    assert out["flex"] == {"cases": 2, "case_s": 3.8, "compile_s": 3.0}
    assert out["train_processes"] == [
        {"process": "compiled cold", "process_s": 6.0, "first_step_s": 2.5, "compile_s": 2.2}
    ]


def test_the_ratio_to_the_reference_is_over_the_mean_of_its_two_readings():
    runs = {"cold": {"wall_s": 300.0, "cpu_s": 500.0}, "warm": None}
    before, after = {"wall_s": 14.0, "cpu_s": 20.0}, {"wall_s": 16.0, "cpu_s": 30.0}
    mean, ratios = to_reference(runs, before, after)
    assert mean == {"wall_s": 15.0, "cpu_s": 25.0}
    assert ratios == {"cold": {"wall_s": 20.0, "cpu_s": 20.0}}  # no warm run, no warm ratio


def test_the_summary_states_the_ratio_and_where_the_time_went():
    run = {
        "wall_s": 300.0,
        "cpu_s": 500.0,
        "first_result_s": 9.5,
        "suites": {"parity": {"wall_s": 200.0, "case_s_summed": 390.0}},
        "cores_busy": {"parity": {"cores_busy_avg": 1.95, "idle_core_s": 10.0}},
        "where_time_goes": {
            "parity_by_mode": {"eager": {"cases": 2, "case_s": 2.5, "phase_s": {"check": 0.2}}}
        },
    }
    reading = {"wall_s": 15.0, "cpu_s": 25.0}
    text = summary(
        {
            "reference": {"before": reading, "after": reading, "mean": reading},
            "ratio_to_reference": {"cold": {"wall_s": 20.0, "cpu_s": 20.0}},
            "cold": run,
            "warm": None,
        }
    )
    assert "reference: 15.0 s before, 15.0 s after" in text
    assert "cold: 300.0 s, 20.0x the reference (CPU 500.0 s, 20.0x)" in text
    assert "1.95 cores busy" in text and "check 0.2" in text
    assert "warm" not in text


class _Samples:
    """A CpuSampler's samples without its thread: (epoch, busy core-seconds so far)."""

    def __init__(self, samples):
        self.samples = samples

    def busy_between(self, start, end):
        return CpuSampler.busy_between(self, start, end)


def test_cores_busy_per_span_from_the_busy_counter_interpolated():
    # 2 cores; busy counter: both cores busy from 0 to 10 s, one core from 10 to 20 s
    sampler = _Samples([(0.0, 0.0), (10.0, 20.0), (20.0, 30.0)])
    out = cores_busy(sampler, {"parity": (0.0, 10.0), "train": (10.0, 20.0), "x": (5.0, 15.0)}, 2)
    assert out["parity"] == {"cores_busy_avg": 2.0, "idle_core_s": 0.0}
    assert out["train"] == {"cores_busy_avg": 1.0, "idle_core_s": 10.0}
    assert out["x"] == {"cores_busy_avg": 1.5, "idle_core_s": 5.0}  # 10 + 5 busy core-s


def test_cores_busy_is_unknown_without_samples():
    assert cores_busy(None, {"parity": (0.0, 1.0)}, 2) == {"parity": "unknown"}


def test_the_sampler_reads_this_machines_busy_time_while_work_runs():
    if not CpuSampler.STAT.is_file():
        pytest.skip("no /proc/stat here: cores_busy says unknown (tested above)")
    with CpuSampler(interval_s=0.05) as sampler:
        t0 = time.time()
        end = time.process_time() + 0.3
        while time.process_time() < end:  # keep one core busy
            pass
        t1 = time.time()
    assert len(sampler.samples) >= 3
    busy = sampler.busy_between(t0, t1)
    assert busy >= 0.5 * (t1 - t0)  # at least most of the core this loop kept busy
