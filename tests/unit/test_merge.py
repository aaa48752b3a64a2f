"""merge combines the shards of one run and refuses what would misstate it: a case given twice
(the same run twice included), a missing shard (unless allowed, then the run says it is partial),
shards of different counts, and runs with other settings. Inputs are DIR or DIR:RUN_ID."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.clirun import cli
from trainready import api
from trainready.api import _MergeInput, _missing_shards
from trainready.core.config import ConfigError
from trainready.core.store import RunRecord, Store

SUITE = "tests.support.faulty_suite"
OPTIONS = {"kinds": ["ok"] * 6}


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[str]:
    """`run --shard I/2` of one run, each in its own directory, as DIR:RUN_ID."""
    root = tmp_path_factory.mktemp("shards")
    refs = []
    for i in range(2):
        out = root / f"s{i}"
        summary = api.run([SUITE], device="cpu", out=out, shard=f"{i}/2", options=OPTIONS)
        assert summary.planned > 0, "both shards should hold cases"
        refs.append(f"{out}:{summary.run_id}")
    return refs


def _merged(out: Path, run_id: str) -> tuple[RunRecord, list[str]]:
    with Store(out, create=False) as store:
        return store.get_run(run_id), [r.case_id for r in store.results(run_id)]


def test_every_shard_merges_into_the_whole_run(shards, tmp_path):
    run_id = api.merge(shards, tmp_path)  # DIR:RUN_ID inputs
    run, ids = _merged(tmp_path, run_id)
    assert run.planned == len(ids) == len(set(ids)) == len(OPTIONS["kinds"])
    assert run.finished_at is not None and "partial_merge" not in run.env


def test_a_directory_means_its_latest_run(shards, tmp_path):
    dirs = [ref.rpartition(":")[0] for ref in shards]
    run, ids = _merged(tmp_path, api.merge(dirs, tmp_path))
    assert len(ids) == len(OPTIONS["kinds"])


def test_the_same_run_twice_is_refused(shards, tmp_path):
    with pytest.raises(ConfigError, match=r"is in both .* \(the same run given twice\)"):
        api.merge([shards[0], shards[0], shards[1]], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_missing_shard_is_refused_unless_allowed(shards, tmp_path):
    with pytest.raises(ConfigError, match="missing shard 1/2: .* --allow-partial"):
        api.merge([shards[0]], tmp_path / "m")
    assert not (tmp_path / "m").exists()
    run, ids = _merged(tmp_path, api.merge([shards[0]], tmp_path, allow_partial=True))
    assert run.env["partial_merge"] == {"shards": ["0/2"], "missing_shards": ["1/2"]}
    assert run.finished_at is None  # a partial run is not a finished one
    assert 0 < len(ids) < len(OPTIONS["kinds"])
    report = api.report(tmp_path, fmt="md")
    assert "a partial merge: shards 1/2 missing, their cases are not counted" in report


def test_runs_with_other_settings_are_refused(shards, tmp_path):
    other = api.run(
        [SUITE], device="cpu", out=tmp_path / "x", shard="1/2", options={"kinds": ["ok"] * 5}
    )
    with pytest.raises(ConfigError, match="other settings"):
        api.merge([shards[0], f"{tmp_path / 'x'}:{other.run_id}"], tmp_path / "m")


def test_unknown_run_id_is_one_line(shards, tmp_path):
    store_dir = shards[0].rpartition(":")[0]
    with pytest.raises(api.StoreError, match="no run 'nope'"):
        api.merge([f"{store_dir}:nope"], tmp_path / "m")


def _shard_input(shard: str | None) -> _MergeInput:
    record = RunRecord("r", 0.0, [SUITE], "cpu", "quick", config={"shard": shard})
    return _MergeInput(f"d:{shard}", record, [], [], Path("none"))


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (["0/2", "0/2", "1/2"], "shard 0/2 given more than once"),  # empty shards do not overlap
        (["0/2", "1/3"], r"shards of different counts \(/2, /3\)"),
        (["0/2", None], "d:None is not a shard"),
    ],
)
def test_shard_sets_that_are_not_one_run(given, error):
    with pytest.raises(ConfigError, match=error):
        _missing_shards([_shard_input(s) for s in given])


def test_shard_sets_name_what_is_missing():
    assert _missing_shards([_shard_input(s) for s in ("2/4", "0/4")]) == ["1/4", "3/4"]
    assert _missing_shards([_shard_input(None)]) == []


def test_cli_refusal_is_one_line_and_exit_2(shards, tmp_path):
    p = cli("merge", shards[0], shards[0], "--out", str(tmp_path / "m"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "same run given twice" in lines[0], p.stderr
    assert not (tmp_path / "m").exists()
