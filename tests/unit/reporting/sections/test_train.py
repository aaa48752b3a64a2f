"""The train section's full bill, from stored results shaped as the suite writes them: the run's
failed attempts (crash or timeout before a valid step, their time in the store), each mode's
first valid result, and money at the run's price per device-hour ("no price given" without one).
Hand-computed: the fake case below has eager first 1 s + 0.2 s a step, compiled first 9 s +
0.1 s a step (tests/unit/suites/train/test_suite.py's `_runs`), break-even at step 81 where
eager's total is 1 + 80 * 0.2 = 17 s and compiled's 9 + 80 * 0.1 = 17 s."""

from __future__ import annotations

import json

import pytest

from tests.unit.suites.train.test_suite import LOSSES, PARAMS, PEAK, _runs
from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store
from trainready.reporting import render
from trainready.reporting.model import build_run
from trainready.reporting.sections import train as section
from trainready.suites.train.suite import SCENARIOS, Scenario, judge

NAME = "qwen3-debug/T64/B4/fp32"


def _passed(params: dict, compiled_losses=LOSSES) -> Result:
    out = judge(PARAMS, _runs(compiled_losses=compiled_losses), PEAK)
    return Result(Case("train", NAME, params), out.status, out.metrics, out.diagnostics)


def _timed_out(params: dict, duration_s: float) -> Result:
    """A case the runner stopped past its budget: no record of the suite's, its time stored."""
    diagnostics = {"error": f"exceeded budget of {duration_s:g} s in phase 'compiled/cold'"}
    case = Case("train", f"{NAME}/whole-model", params)
    return Result(case, "timeout", {}, diagnostics, phase="compiled/cold", duration_s=duration_s)


def _compiled_crashed(params: dict, duration_s: float) -> Result:
    """A case the suite judged `crash`: eager trained (a valid step), compiled's cold process
    died, and its later scenarios were skipped."""
    runs = _runs()
    runs["compiled"] = [
        Scenario("compiled", n, status="crash" if n == "cold" else "skipped", error="SIGSEGV")
        for n in SCENARIOS
    ]
    out = judge(PARAMS, runs, PEAK)
    assert out.status == "crash"
    case = Case("train", f"{NAME}/ac", params)
    return Result(case, out.status, out.metrics, out.diagnostics, duration_s=duration_s)


def _view(*results: Result):
    record = RunRecord("r1", 1.7e9, ["train"], "cpu", "quick", "fp32", planned=len(results))
    return build_run(record, list(results), "cpu")


def test_failed_attempts_are_charged_to_each_mode_without_a_valid_step():
    price = {"price_per_hour": 2.0}
    run = _view(_passed(price), _timed_out(price, 600.0), _compiled_crashed(price, 90.0))
    failed = section.failed_attempts(run)
    assert [r.case.name for r in failed.results] == [f"{NAME}/whole-model", f"{NAME}/ac"]
    # The timeout left no record: both modes paid it. The crash had valid eager steps: compiled.
    assert failed.seconds() == {"eager": 600.0, "compiled": 690.0}
    # A passing case, or a failure of another kind, is no failed attempt.
    assert section.failed_attempts(_view(_passed({}))).results == []


def test_the_bill_adds_the_failed_attempts_and_prices_it():
    price = {"price_per_hour": 2.0}
    run = _view(_passed(price), _timed_out(price, 600.0), _compiled_crashed(price, 90.0))
    r = run.in_suite("train")[0]
    bill = section.scenario_bill(r, "cold", section.failed_attempts(run), steps=(10, 100))
    # Eager: 600 + 1 + 9 * 0.2 = 602.8 s to 10 steps, 600 + 1 + 99 * 0.2 = 620.8 s to 100;
    # compiled: 690 + 9 + 0.9 = 699.9 s and 690 + 9 + 9.9 = 708.9 s. At 2 per device-hour
    # (/ 1800): 0.334889, 0.344889; 0.388833, 0.393833.
    assert bill["seconds"]["eager"] == pytest.approx({10: 602.8, 100: 620.8})
    assert bill["seconds"]["compiled"] == pytest.approx({10: 699.9, 100: 708.9})
    assert bill["cost"]["eager"] == pytest.approx({10: 0.334889, 100: 0.344889}, abs=1e-6)
    assert bill["cost"]["compiled"] == pytest.approx({10: 0.388833, 100: 0.393833}, abs=1e-6)
    # Compiled carries 90 s more: 98 s behind at the start, 0.1 s a step back -> N = 1 + 980 =
    # 981, where eager's bill is 600 + 1 + 980 * 0.2 = 797 s and compiled's 690 + 9 + 98 = 797 s
    # (0.442778 each).
    assert bill["break_even_step"] == 981
    assert bill["at_break_even"]["seconds"] == pytest.approx({"eager": 797.0, "compiled": 797.0})
    assert bill["at_break_even"]["cost"] == pytest.approx(
        {"eager": 0.442778, "compiled": 0.442778}, abs=1e-6
    )


def test_the_report_shows_the_bill_in_time_and_money(tmp_path):
    price = {"price_per_hour": 2.0}
    with Store(tmp_path) as store:
        store.add_run(RunRecord("r1", 1.7e9, ["train"], "cpu", "quick", "fp32", planned=2))
        store.add_result("r1", _passed(price))
        store.add_result("r1", _timed_out(price, 600.0))
        md = render(store, ["r1"], "md")
        doc = json.loads(render(store, ["r1"], "json"))
    heads = {h["label"]: h for h in doc["runs"][0]["headlines"]}
    failed = heads["train failed attempts"]
    # 600 s at 2 per device-hour: 600 / 1800 = 0.333.
    assert failed["note"].endswith("cost 0.333 at 2.00 per device-hour")
    assert "charged to eager 600.0 s, compiled 600.0 s" in failed["note"]
    # Charged to both, the break-even stays at 81: 617 s each, 617 / 1800 = 0.343.
    note = heads["break-even step (cold)"]["note"]
    assert "breaks even at step 81: compiled 617.0 s = 0.343, eager 617.0 s = 0.343" in note
    # The bill's rows: first valid step 1 (the first step), 1 s / 9 s to it, 600 s failed, the
    # totals to N = 10 .. 10,000 in seconds then money, the break-even on compiled's row.
    assert (
        "| cold | compiled | 1 | 9.00 | 600.0 | 609.9 | 618.9 | 708.9 | 1,609 "
        "| 0.339 | 0.344 | 0.394 | 0.894 | 81 | 617.0 | 0.343 |  |" in md
    )
    assert "the full bill" in md and "cost = bill s × 2.00 (the price per device-hour)" in md


def test_without_a_price_the_report_says_no_price_given_never_zero(tmp_path):
    with Store(tmp_path) as store:
        store.add_run(RunRecord("r1", 1.7e9, ["train"], "cpu", "quick", "fp32", planned=1))
        store.add_result("r1", _passed({}))
        md = render(store, ["r1"], "md")
    assert "cost: no price given (--price-per-hour P or --set price_per_hour=P)" in md
    assert "N=10 cost" not in md and "at break-even cost" not in md
    # No failed attempts: no headline for them, and the bill is the ledger's totals.
    assert "train failed attempts" not in md
    assert "| cold | compiled | 1 | 9.00 | 0 | 9.90 | 18.90 | 108.9 | 1,009 | 81 | 17.00 |  |" in md


def test_a_run_stored_before_first_valid_steps_reads_its_first_steps():
    r = _passed({})
    for entry in r.diagnostics["ledger"].values():
        for key in ("first_valid_step", "first_valid_s"):
            entry.pop(key, None)
    for by in r.diagnostics["scenarios"].values():
        for summary in by.values():
            summary.pop("first_valid_step")
            summary.pop("first_valid_s")
    table = section.bill_table(r, "old", section.failed_attempts(_view(r)))
    cold = next(row for row in table.rows if row[:2] == ["cold", "compiled"])
    assert cold[2:5] == [1, 9.0, 0.0] and cold[-3:] == ["81", pytest.approx(17.0), ""]
