"""Where a run is named, the report says how far it came: finished at a time, interrupted (when,
by which signal, how many cases were done), or still in progress -- never "finished unfinished"."""

from __future__ import annotations

import json
import time

import pytest
from rich.console import Console

from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store
from trainready.reporting import render
from trainready.reporting.terminal import print_summary

AT = 1_780_000_000.0
CASES = [Case("faulty", f"{i:02d}-ok", {"i": i}) for i in range(3)]


def _local(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(epoch))


def _store(finished_at: float | None = None, env: dict | None = None) -> Store:
    store = Store.in_memory()
    record = RunRecord("r1", AT - 60, ["faulty"], "cpu", "quick", env=env or {}, planned=3)
    record.finished_at = finished_at
    store.add_run(record)
    store.add_planned("r1", CASES)
    store.add_result("r1", Result(CASES[0], "pass"))
    return store


STOPPED = {"interrupted": {"signal": "SIGTERM", "at": AT, "done": 1, "planned": 3}}


@pytest.mark.parametrize(
    ("finished_at", "env", "kind", "text"),
    [
        (AT, {}, "finished", f"finished at {_local(AT)}"),
        (None, STOPPED, "interrupted", f"interrupted at {_local(AT)} (SIGTERM), 1 of 3 cases done"),
        (None, {}, "in_progress", "in progress / not finished, 1 of 3 cases done"),
    ],
    ids=["finished", "interrupted", "in-progress"],
)
def test_every_format_names_the_runs_state(finished_at, env, kind, text):
    with _store(finished_at, env) as store:
        md, html = render(store, ["r1"], "md"), render(store, ["r1"], "html")
        state = json.loads(render(store, ["r1"], "json"))["runs"][0]["state"]
        console = Console(record=True, width=200)
        print_summary(console, store, "r1")
    assert f"quick preset, suites faulty, {text}" in md
    assert text in html and text in console.export_text()
    assert state["kind"] == kind and state["text"] == text
    assert (state["done"], state["planned"]) == (1, 3)
    assert "unfinished" not in md


def test_a_resumed_run_is_no_longer_interrupted(tmp_path):
    with Store(tmp_path) as store:
        store.add_run(RunRecord("r1", AT, ["faulty"], "cpu", "quick", env={"python": "3.11"}))
        store.update_env("r1", STOPPED)
        assert store.get_run("r1").env == {"python": "3.11", **STOPPED}
        store.update_env("r1", {"interrupted": None})  # api.run resuming it
        assert store.get_run("r1").env == {"python": "3.11"}
