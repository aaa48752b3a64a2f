"""Sharding and filtering: deterministic, shards disjoint, union is the whole run."""

from __future__ import annotations

import pytest

from trainready.config import ConfigError, RunConfig, parse_shard
from trainready.core.case import Case
from trainready.core.plan import select, shard_of
from trainready.suites import SUITES, expand, load_suite

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
    with pytest.raises(ConfigError, match="valid: quick, standard, full"):
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
