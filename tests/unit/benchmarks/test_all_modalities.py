"""The all-modalities benchmark page (`benchmarks/all_modalities.py`): one row per shard read from
its store (commit, wall time, cases, cases per minute), the totals, the merged run's report; a
shard missing is refused unless --allow-partial, and the page then says it is partial."""

from __future__ import annotations

import pytest

from benchmarks.all_modalities import (
    STOPPED_S,
    model_types,
    page,
    read_shard,
    rejudge,
    running_wall,
    type_summary,
)
from trainready import api
from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store

SUITE = "tests.support.faulty_suite"
OPTIONS = {"kinds": ["ok"] * 6}


@pytest.fixture(scope="module")
def shard_dirs(tmp_path_factory) -> list:
    root = tmp_path_factory.mktemp("shards")
    dirs = []
    for i in range(2):
        out = root / f"s{i}"
        api.run([SUITE], device="cpu", out=out, shard=f"{i}/2", options=OPTIONS)
        dirs.append(out)
    return dirs


def test_each_shard_is_read_from_its_store(shard_dirs):
    shards = [read_shard(d) for d in shard_dirs]
    assert [s.shard for s in shards] == ["0/2", "1/2"]
    assert sum(s.done for s in shards) == len(OPTIONS["kinds"])
    assert all(s.finished and s.done == s.planned and s.wall_s > 0 for s in shards)
    assert all(s.git_sha for s in shards)


def test_the_page_has_a_row_per_shard_the_totals_and_the_merged_report(shard_dirs):
    text = page(shard_dirs, allow_partial=False)
    rows = [
        line for line in text.splitlines() if line.startswith("| 0/2") or line.startswith("| 1/2")
    ]
    assert len(rows) == 2 and all("cases/min" not in r for r in rows)
    total = next(line for line in text.splitlines() if line.startswith("| all |"))
    assert f"| {len(OPTIONS['kinds'])} of {len(OPTIONS['kinds'])} |" in total
    assert "# trainready scorecard" in text  # the merged run's report follows
    assert "**Partial**" not in text


def test_a_missing_shard_is_refused_unless_allowed_and_then_said(shard_dirs):
    with pytest.raises(SystemExit, match="missing shard"):
        page(shard_dirs[:1], allow_partial=False)
    assert "**Partial**" in page(shard_dirs[:1], allow_partial=True)


def test_a_stopped_stretch_is_left_out_of_a_shards_wall_time():
    # two cases, then the run stopped for an hour and resumed (--resume) for a third
    cases = [(0.0, 10.0), (5.0, 20.0), (3625.0, 30.0)]
    assert running_wall(0.0, 3655.0, cases) == 3655.0 - (3625.0 - 25.0)
    # gaps up to STOPPED_S (start-up, a worker between cases) stay in
    short = [(0.0, 10.0), (10.0 + STOPPED_S, 5.0)]
    assert running_wall(0.0, 15.0 + STOPPED_S, short) == 15.0 + STOPPED_S
    assert running_wall(0.0, 4.0, []) == 4.0


def _case(source: str, model: str, mode: str, status: str, **diag) -> dict:
    params = {"source": source, "model": model, "mode": mode, "dtype": "fp32"}
    return {"name": f"{source}/{model}/{mode}/fp32", "params": params, "status": status,
            "diagnostics": {"modality": "vision", **diag}}  # fmt: skip


def test_types_count_every_case_and_name_the_first_reason():
    results = [
        _case("hf", "llama", "eager", "pass"),
        _case("hf", "llama", "compile", "pass"),
        _case("hf_task", "vit", "eager", "pass"),
        _case("hf_task", "vit", "compile", "fail_numerics", error="x.grad rmse ratio 1.5 | y"),
        _case("hf_task", "dinat", "eager", "unsupported", reason="needs natten"),
        _case("diffusers", "unet2d", "eager", "pass"),
        {
            "name": "timm/unavailable",
            "params": {"source": "unavailable"},
            "status": "unsupported",
            "diagnostics": {"reason": "the timm zoo needs timm"},
        },  # fmt: skip
    ]
    types = {(t.zoo, t.name): t for t in model_types(results)}
    assert types[("transformers", "llama")].passes and not types[("transformers", "vit")].passes
    assert types[("transformers", "vit")].reason == "x.grad rmse ratio 1.5 | y"
    assert types[("timm", "(library not installed)")].reason == "the timm zoo needs timm"
    lines = type_summary(list(types.values()))
    assert "| transformers | 3 | 2 | 1 | 1 |" in lines  # types, eager, compiled, every case
    assert "| diffusers | 1 | 1 | 0 | 1 |" in lines
    assert "**Types that do not pass (3)**, with the first failing case's reason:" in lines
    # a table cell keeps the error's own '|' escaped
    assert any(line.startswith("| transformers | vit |") and "1.5 \\| y" in line for line in lines)


def _rerun(path, case_id: str) -> None:
    store = Store(path)
    store.add_run(RunRecord("rerun-1", 1.0, ["faulty"], "cpu", "quick", env={"git_sha": "abc1234"}))
    case = Case("faulty", case_id.split("/", 1)[1], {"kind": "ok"})
    store.add_result("rerun-1", Result(case, "fail_numerics", diagnostics={"error": "x | y"}))


def test_a_rerun_replaces_its_cases_and_is_listed_with_both_verdicts(shard_dirs, tmp_path):
    _rerun(tmp_path / "rerun", "faulty/00-ok")
    text = page(shard_dirs, allow_partial=False, reruns=[tmp_path / "rerun"])
    assert "**Re-run (1 case)**" in text
    assert "| faulty/00-ok | abc1234 | pass | fail_numerics: x \\| y |" in text
    assert "| faulty | 5 | 1 | 0 | 6 | 83.3% |" in text  # pass, fail_numerics, ..., total


def test_a_rerun_of_a_case_the_shards_lack_is_refused(shard_dirs, tmp_path):
    _rerun(tmp_path / "other", "faulty/99-ok")
    with pytest.raises(SystemExit, match="not a case of the merged shards"):
        page(shard_dirs, allow_partial=False, reruns=[tmp_path / "other"])


def test_a_zoo_run_apart_is_counted_in_the_types_and_said(shard_dirs, tmp_path):
    store = Store(tmp_path / "timm")
    run = RunRecord("timm-1", 1.0, ["parity"], "cpu", "standard", env={"git_sha": "def5678"})
    store.add_run(run)
    for mode, status in (("eager", "pass"), ("compile", "fail_numerics")):
        params = {"source": "timm", "model": "test_vit", "mode": mode, "dtype": "fp32"}
        case = Case("parity", f"timm/test_vit/{mode}/fp32", params)
        store.add_result("timm-1", Result(case, status, started_at=2.0, duration_s=60.0))
    text = page(shard_dirs, allow_partial=False, extras=[tmp_path / "timm"])
    assert "| timm | 1 | 1 | 0 | 0 |" in text  # types, eager, compiled, every case
    assert "| timm | test_vit |" in text  # among the types that do not pass
    assert "- timm zoo, run apart from the shards (its library installed): commit def5678, " in text


def test_a_rerun_may_add_a_mode_of_a_type_the_shards_planned(shard_dirs, tmp_path):
    """A type planned eager only where its library was missing gets its compiled case from a
    re-run in an environment that has it; a type the shards never planned is refused."""
    store = Store(tmp_path / "env")
    store.add_run(RunRecord("env-1", 1.0, ["faulty"], "cpu", "quick", env={"git_sha": "abc1234"}))
    for mode in ("eager", "compile"):
        params = {"kind": "ok", "source": "faulty", "model": "m", "mode": mode}
        store.add_result("env-1", Result(Case("faulty", f"00-ok/{mode}", params), "pass"))
    with pytest.raises(SystemExit, match="not a case of the merged shards"):
        page(shard_dirs, allow_partial=False, reruns=[tmp_path / "env"])


def _parity(mode: str, status: str) -> Result:
    params = {"source": "hf_task", "model": "timm_wrapper", "mode": mode, "dtype": "fp32"}
    return Result(Case("parity", f"hf/timm_wrapper/{mode}/fp32", params), status)


def _merged_eager_unsupported(path) -> None:
    """A merged run whose one case, timm_wrapper eager, was unsupported."""
    merged = Store(path)
    merged.add_run(RunRecord("m", 0.0, ["parity"], "cpu", "standard", env={}, planned=1))
    eager = _parity("eager", "unsupported")
    merged.add_planned("m", [eager.case])
    merged.add_result("m", eager)


def _rerun_of(path, *results: Result) -> None:
    rerun = Store(path)
    rerun.add_run(RunRecord("r", 1.0, ["parity"], "cpu", "standard", env={"git_sha": "f00ba12"}))
    for r in results:
        rerun.add_result("r", r)


def test_a_rerun_adds_the_missing_mode_of_a_planned_type_to_the_plan(tmp_path):
    _merged_eager_unsupported(tmp_path / "merged")
    _rerun_of(tmp_path / "rerun", _parity("eager", "pass"), _parity("compile", "pass"))
    rows = rejudge(tmp_path / "merged", [tmp_path / "rerun"])
    assert [(x.case_id, x.before, x.after) for x in rows] == [
        ("parity/hf/timm_wrapper/compile/fp32", "not planned", "pass"),
        ("parity/hf/timm_wrapper/eager/fp32", "unsupported", "pass"),
    ]
    again = Store(tmp_path / "merged", create=False)
    assert again.latest_run().planned == 2 and len(again.planned("m")) == 2
    assert {r.status for r in again.results("m")} == {"pass"}


def test_of_two_reruns_of_a_case_the_last_counts_and_is_listed_once(tmp_path):
    _merged_eager_unsupported(tmp_path / "merged")
    for i, status in enumerate(("fail_numerics", "pass")):
        _rerun_of(tmp_path / f"rerun{i}", _parity("eager", status))
    rows = rejudge(tmp_path / "merged", [tmp_path / "rerun0", tmp_path / "rerun1"])
    assert [(x.before, x.after) for x in rows] == [("unsupported", "pass")]
    assert [r.status for r in Store(tmp_path / "merged", create=False).results("m")] == ["pass"]
