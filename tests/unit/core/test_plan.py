"""Sharding and filtering: deterministic, shards disjoint, union is the whole run."""

from __future__ import annotations

import pytest

from tests.support import faulty_suite
from tests.support.clirun import cli
from trainready import api
from trainready.core.case import Case
from trainready.core.config import ConfigError, RunConfig, parse_shard
from trainready.core.plan import PlannedSuite, plan, select, shard_of
from trainready.suites import SUITES, expand, load_suite

FAULTY = "tests.support.faulty_suite"

CASES = [
    Case("s", f"model{m}/op{o}/M{M}", {}) for m in range(7) for o in range(5) for M in (1, 128)
]


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_shards_partition_the_cases(n):
    shards = [select(CASES, None, (i, n)) for i in range(n)]
    ids = [c.id for s in shards for c in s]
    assert sorted(ids) == sorted(c.id for c in CASES)  # union is everything, no overlap
    assert len(ids) == len(set(ids))
    if n <= 3:
        assert all(shards)  # few shards: every one gets work


def test_shard_assignment_is_stable():
    assert [shard_of(c.id, 4) for c in CASES] == [shard_of(c.id, 4) for c in list(CASES)]
    # Removing cases does not move the others to another shard.
    kept = select(CASES[::2], None, (1, 4))
    assert {c.id for c in kept} <= {c.id for c in select(CASES, None, (1, 4))}


def test_filter_glob():
    picked = select(CASES, "s/model3/*/M128", None)
    assert len(picked) == 5 and all(c.id.startswith("s/model3/") for c in picked)


@pytest.mark.parametrize("bad", ["3", "1/0", "4/4", "-1/2", "a/b", "1/2/3"])
def test_malformed_shard(bad):
    with pytest.raises(ConfigError, match="shard"):
        parse_shard(bad)


def test_config_errors_name_the_choices():
    with pytest.raises(ConfigError, match="valid: smoke, quick, standard, full"):
        RunConfig(suites=["matmul"], preset="huge")
    with pytest.raises(ConfigError, match="unknown suite 'nope'; valid: matmul"):
        load_suite("nope")


def test_all_expands_to_builtin_suites():
    assert expand(["all"]) == list(SUITES)
    assert expand(["matmul", "all"]) == list(SUITES)  # no repeats, registry order
    assert "matmul" in SUITES


def test_config_round_trips():
    cfg = RunConfig(suites=["matmul"], shard=(1, 3), dtype="bf16", options={"x": 1})
    assert RunConfig.from_json(cfg.to_json()) == cfg


def test_filter_matching_no_case_names_the_closest_ids():
    cfg = RunConfig(suites=[FAULTY], filter="faulty/*-abortt")
    with pytest.raises(ConfigError) as err:
        plan(cfg)
    message = str(err.value)
    assert "\n" not in message
    total = len(faulty_suite.cases(cfg))
    assert f"--filter 'faulty/*-abortt' matches none of the {total} cases" in message
    assert "faulty/02-abort" in message  # the near miss is among the examples


def test_filter_that_leaves_a_shard_empty_is_fine():
    one = "faulty/02-abort"
    empty = 1 - shard_of(one, 2)  # the shard that the only matching case is not in
    [suite] = plan(RunConfig(suites=[FAULTY], filter=one, shard=(empty, 2)))
    assert suite.cases == []


@pytest.mark.slow
def test_filter_matching_nothing_writes_nothing(tmp_path):
    with pytest.raises(ConfigError, match="matches none"):
        api.run([FAULTY], device="cpu", out=tmp_path / "out", filter="nope/*")
    assert not (tmp_path / "out").exists()
    p = cli("run", FAULTY, "--device", "cpu", "--filter", "nope/*", "--out", str(tmp_path / "o"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "faulty/0" in lines[0], p.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("user", "own", "expected"),
    [
        (None, None, faulty_suite.DEFAULT_BUDGET_S),  # the suite's default
        (None, 600, 600.0),  # the case's own (a variants file's budget_s) beats the suite's
        (5, 600, 5.0),  # an explicit --budget-s beats both
        (5, None, 5.0),
    ],
)
def test_budget_precedence(user, own, expected, tmp_path):
    params = {"kind": "ok"} | ({"budget_s": own} if own is not None else {})
    case = Case("faulty", "00-ok", params)
    cfg = RunConfig(suites=[FAULTY], budget_s=user)
    suite = PlannedSuite("faulty", FAULTY, faulty_suite, [case])
    assert suite.budget_s(cfg, case) == expected
    [job] = api._jobs(cfg, [suite], set(), tmp_path)  # what the runner is given
    assert job.budget_s == job.context["budget_s"] == expected
