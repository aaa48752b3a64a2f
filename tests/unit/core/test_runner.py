"""Runner isolation with real faulty cases: each gets its status and the run completes the rest."""

from __future__ import annotations

import pytest

from tests.support.faulty_suite import ABORT_MARKER, KINDS
from trainready import api
from trainready.core.store import Store

SUITE = "tests.support.faulty_suite"


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("faulty")
    summary = api.run(
        [SUITE],
        device="cpu",
        out=out,
        budget_s=4,
        mem_limit_mb=1024,
    )
    with Store(out) as store:
        results = {r.case.params["kind"]: r for r in store.results(summary.run_id)}
    return summary, results


@pytest.mark.slow
def test_every_case_gets_a_result(faulty_run):
    summary, results = faulty_run
    assert summary.planned == len(KINDS) == 9
    assert set(results) == set(KINDS)


@pytest.mark.slow
def test_statuses(faulty_run):
    _, r = faulty_run
    assert r["ok"].status == "pass"
    assert r["ok"].metrics["value"] == 42.0
    assert r["raises"].status == "fail_run"
    assert "planted failure" in r["raises"].diagnostics["error"]
    assert "ValueError" in r["raises"].diagnostics["traceback"]
    assert r["abort"].status == "crash"
    assert r["abort"].diagnostics["signal"] == "SIGABRT"
    assert ABORT_MARKER in r["abort"].diagnostics["stderr_tail"]
    assert r["hang"].status == "timeout"
    assert r["hang"].phase == "run"
    assert r["hang_in_compile"].status == "timeout"
    assert r["hang_in_compile"].phase == "compile"
    assert 3.5 < r["hang_in_compile"].duration_s < 30
    assert r["alloc"].status == "oom"
    assert r["unsupported"].status == "unsupported"
    assert "no such thing" in r["unsupported"].diagnostics["reason"]
    # The run went on after every fault, on a healthy (replaced) worker.
    assert r["ok_after"].status == "pass"
    assert r["ok_after"].metrics["pid"] != r["ok"].metrics["pid"]


@pytest.mark.slow
def test_a_segfault_leaves_its_python_stack_in_the_stderr_tail(faulty_run):
    crash = faulty_run[1]["segfault"]
    assert crash.status == "crash" and crash.diagnostics["signal"] == "SIGSEGV"
    tail = crash.diagnostics["stderr_tail"]
    # faulthandler's report: the fault, then the stack down to the line that faulted.
    assert "Fatal Python error: Segmentation fault" in tail
    assert "most recent call first" in tail
    assert 'faulty_suite.py", line' in tail and "in execute" in tail
    assert ABORT_MARKER not in tail  # the tail starts at this case, not at an earlier one


def test_worker_is_reused_while_healthy(tmp_path):
    summary = api.run(
        [SUITE], device="cpu", out=tmp_path, options={"kinds": ["ok", "raises", "ok_after"]}
    )
    with Store(tmp_path) as store:
        pids = {r.metrics.get("pid") for r in store.results(summary.run_id) if r.status == "pass"}
    assert len(pids) == 1  # an exception does not cost the worker


def test_parallel_jobs_run_everything(tmp_path):
    kinds = ["ok"] * 6 + ["abort", "ok_after"]
    summary = api.run([SUITE], device="cpu", out=tmp_path, jobs=2, options={"kinds": kinds})
    assert summary.counts["pass"] == 7 and summary.counts["crash"] == 1


class _Cycle:
    """An object in a reference cycle: only the cyclic garbage collector frees it."""

    def __init__(self):
        self.me = self


def test_case_collector_frees_a_cases_cycles_and_later_the_frozen_ones():
    import gc
    import weakref

    from trainready.core.worker import CaseCollector

    collector = CaseCollector(every=4)
    try:
        made_in_case = _Cycle()
        dead = weakref.ref(made_in_case)
        del made_in_case
        collector.after_case()  # the case's own cycle: freed right after it
        assert dead() is None

        survivor = _Cycle()  # alive across a collection: frozen with everything else
        collector.after_case()
        dies_later = weakref.ref(survivor)
        del survivor
        collector.after_case()  # a frozen cycle is not traversed ...
        assert dies_later() is not None
        collector.after_case()  # ... until the every-4th full collection
        assert dies_later() is None
    finally:
        gc.unfreeze()
