"""scripts/ci/check_smoke.py, CI's judge of a torch-range smoke run: it passes a finished run whose
cases passed or say why not, and fails one with a failing case, an unexplained one, or cases not
run."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.support.paths import ROOT

_spec = importlib.util.spec_from_file_location("check_smoke", ROOT / "scripts/ci/check_smoke.py")
check_smoke = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_smoke)

EXCUSED = {
    "reason": "flex backward: torch 2.9.0 fails in inductor (pytorch/pytorch#169224)",
    "torch_limitation": {"status": "fail_compile"},
}


def _run(*results: tuple[str, dict], not_run: int = 0, kind: str = "finished") -> dict:
    counts: dict[str, int] = {}
    for status, _ in results:
        counts[status] = counts.get(status, 0) + 1
    total = len(results) + not_run
    return {
        "run": {"env": {"torch": "2.9.0+cu128"}},
        "state": {"kind": kind},
        "summary": {"all": {"counts": counts, "not_run": not_run, "total": total}},
        "results": [
            {"case_id": f"s/c{i}", "status": status, "diagnostics": diagnostics}
            for i, (status, diagnostics) in enumerate(results)
        ],
    }


def test_a_run_whose_cases_pass_or_say_why_passes():
    run = _run(("pass", {}), ("unsupported", EXCUSED), ("skipped", {"reason": "one rank"}))
    assert check_smoke.problems(run) == []
    lines = check_smoke.describe(run)
    assert lines[0] == "torch 2.9.0+cu128: 1 pass, 1 unsupported, 1 skipped"
    assert "[torch limitation, was fail_compile] s/c1: flex backward" in lines[1]


@pytest.mark.parametrize(
    ("run", "says"),
    [
        (_run(("pass", {}), ("fail_run", {"error": "boom"})), "s/c1: fail_run: boom"),
        (_run(("crash", {"error": "worker died: SIGSEGV"})), "s/c0: crash: worker died"),
        (_run(("fail_numerics", {})), "s/c0: fail_numerics: (no reason)"),
        (_run(("unsupported", {})), "s/c0: unsupported without a reason"),
        (_run(("pass", {}), not_run=2), "run finished: 2 of 3 cases not run"),
        (_run(("pass", {}), kind="interrupted"), "run interrupted"),
    ],
)
def test_a_failing_unexplained_or_unfinished_run_fails(run, says):
    found = check_smoke.problems(run)
    assert any(says in line for line in found), found


def test_main_reads_the_latest_report_of_a_store(tmp_path, capsys):
    runs = {
        "20261205-115814-a66536": _run(("fail_run", {"error": "x"})),
        "20261205-120207-7c7420": _run(("pass", {})),
    }
    for run_id, run in runs.items():
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "report.json").write_text(json.dumps({"runs": [run]}))
    assert check_smoke.main([str(tmp_path)]) == 0
    assert "1 pass" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no \\*/report.json"):
        check_smoke.main([str(tmp_path / "empty")])
