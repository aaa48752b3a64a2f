"""Planted faults through the real runner: a wrong reduction, a rank that never joins."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainready
from tests.support.dist_faults import HANG_BUDGET_S, PICKED
from trainready.core.store import Store


@pytest.mark.slow
def test_wrong_reduction_and_hang_are_caught_and_the_next_case_runs(tmp_path: Path) -> None:
    summary = trainready.run(
        ["tests.support.dist_faults"], device="cpu", out=tmp_path, options={"nproc": 2}
    )
    with Store(tmp_path, create=False) as store:
        results = {r.case_id: r for r in store.results(summary.run_id)}
    wrong, ddp, hung, after = (results[i] for i in PICKED)

    assert wrong.status == "fail_numerics"
    assert wrong.diagnostics["error"] == "wrong result on ranks [1]"
    check = wrong.diagnostics["ranks"]["1"]["check"]
    assert check["rule"] == "bitwise" and check["mismatched"] == check["numel"]
    assert check["max_abs"] == 1.0

    assert ddp.status == "fail_numerics"
    assert ddp.diagnostics["error"] == "wrong result on ranks [0, 1]"
    failed = ddp.diagnostics["ranks"]["0"]["failed"]
    assert "step0/loss" in failed and any(k.startswith("step0/grad/") for k in failed)

    assert hung.status == "timeout"
    assert hung.duration_s < HANG_BUDGET_S + 1.0
    # rank 0 waits in the broadcast rank 1 skipped; rank 1 then waits too, in the timing's
    # per-check agreement on the sample count (metrics/sampler.py `agree`), which rank 0 never reaches
    assert hung.diagnostics["rank_status"] == ["lost", "lost"]
    assert hung.phase == "run on 2 ranks"  # the two ranks wait in different phases
    assert "(rank 0 in 'check'; rank 1 in 'time')" in hung.diagnostics["error"]

    assert after.status == "pass" and after.metrics["start_s"] > 0  # fresh ranks
