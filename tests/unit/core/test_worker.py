"""The worker process: what it does around a case."""

from __future__ import annotations

from trainready.core.case import Case
from trainready.core.runner import Job, Runner

SCHED = "tests.support.sched_suite"
LITTER = "tests.support.litter_suite"
CTX = {"device": "cpu", "dtype": None, "budget_s": 60.0}


def test_a_case_is_done_only_once_its_garbage_is_freed_so_no_timing_case_starts_beside_that(
    tmp_path,
):
    """A case's garbage is collected before its result is sent (`CaseCollector.after_case`), so a
    timing case that waits for every running case (and reads the drift reference first thing)
    never starts while another worker is still freeing its last case: here a collection planted
    to take 1 s, on the second worker, while the timing case would start on the first."""
    results = []
    runner = Runner(jobs=2, log_dir=tmp_path / "logs", on_result=results.append)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    freed = tmp_path / "freed"
    try:
        # Both workers up first (two cases that wait for each other), so the plan below lands
        # the quick case on the first worker and the littering one on the second.
        warm = {"sleep_s": 0.0, "barrier": str(barrier), "parties": 2}
        runner.run([Job(Case("sched", f"w{i}", warm), SCHED, 60.0, CTX, False) for i in range(2)])
        assert len({r.metrics["pid"] for r in results}) == 2
        results.clear()
        litter = {"freed": str(freed), "free_s": 1.0, "sleep_s": 0.3}
        runner.run(
            [
                Job(Case("sched", "quick", {"sleep_s": 0.0}), SCHED, 60.0, CTX, alone=False),
                Job(Case("litter", "litter", litter), LITTER, 60.0, CTX, alone=False),
                Job(Case("sched", "timing", {"sleep_s": 0.0}), SCHED, 60.0, CTX, alone=True),
            ]
        )
    finally:
        runner.close()
    m = {r.case.name: r.metrics for r in results}
    assert [r.status for r in results] == ["pass"] * 3, [r.diagnostics for r in results]
    assert m["litter"]["pid"] != m["quick"]["pid"]  # the littering case had the second worker
    assert m["timing"]["start"] >= float(freed.read_text())
