"""Planning a run: enumerate the suites' cases, filter them, and take this shard's share."""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
from dataclasses import dataclass
from types import ModuleType

from trainready.core.case import Case
from trainready.core.config import ConfigError, RunConfig
from trainready.core.options import check_options
from trainready.suites import FLAG_USERS, load_suite


def shard_of(case_id: str, num_shards: int) -> int:
    """Deterministic shard of a case: a hash of its stable id, so every machine agrees and adding
    a case elsewhere does not move the others between shards."""
    digest = hashlib.sha1(case_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % num_shards


# How many case ids a --filter that matches nothing names as examples.
FILTER_EXAMPLES = 3


def matching(cases: list[Case], pattern: str | None) -> list[Case]:
    """The cases whose id matches the --filter glob (all of them without one)."""
    if not pattern:
        return cases
    return [c for c in cases if fnmatch.fnmatchcase(c.id, pattern)]


def select(cases: list[Case], pattern: str | None, shard: tuple[int, int] | None) -> list[Case]:
    cases = matching(cases, pattern)
    if shard:
        index, count = shard
        cases = [c for c in cases if shard_of(c.id, count) == index]
    return cases


@dataclass
class PlannedSuite:
    name: str
    module_path: str  # what workers import
    module: ModuleType
    cases: list[Case]

    def budget_s(self, cfg: RunConfig, case: Case) -> float:
        """The user's explicit --budget-s (the most deliberate choice), else the case's own (what
        its suite or a variants file set for it, narrower than a suite-wide value), else the
        suite's default."""
        if cfg.budget_s is not None:
            return cfg.budget_s
        if "budget_s" in case.params:
            return float(case.params["budget_s"])
        return float(getattr(self.module, "DEFAULT_BUDGET_S", 300.0))

    def dtype(self, cfg: RunConfig, case: Case) -> str | None:
        return case.params.get("dtype") or cfg.dtype or getattr(self.module, "DEFAULT_DTYPE", None)


def check_filter(pattern: str | None, cases: list[Case]) -> None:
    """A --filter that matches none of the run's cases is a typo, not an empty run: say so with
    the ids that look most like it. (A shard left empty by a matching filter is fine.)"""
    if not pattern or matching(cases, pattern):
        return
    ids = [c.id for c in cases]
    near = difflib.get_close_matches(pattern, ids, n=FILTER_EXAMPLES, cutoff=0.0)
    examples = f"; closest case ids: {', '.join(near)}" if near else ""
    raise ConfigError(f"--filter {pattern!r} matches none of the {len(ids)} cases{examples}")


def _enumerate(name: str, module: ModuleType, cfg: RunConfig) -> tuple[ModuleType, list[Case]]:
    cases = module.cases(cfg)
    if len({c.id for c in cases}) != len(cases):
        raise ConfigError(f"suite {name!r} produced duplicate case ids")
    return module, cases


def plan(cfg: RunConfig) -> list[PlannedSuite]:
    """Every suite's cases, filtered, then this shard's share. Raises ConfigError before anything
    is written for an unknown or invalid suite option, when the suites have no case at all with
    these options, and when the --filter matches no case."""
    modules = {name: load_suite(name) for name in cfg.suites}
    check_options(cfg.options, modules, set(FLAG_USERS))
    enumerated = {name: _enumerate(name, module, cfg) for name, module in modules.items()}
    every = [c for _, cases in enumerated.values() for c in cases]
    if not every:
        raise ConfigError(
            f"no cases to run: {', '.join(cfg.suites)} enumerate none with these options"
        )
    check_filter(cfg.filter, every)
    return [
        PlannedSuite(
            getattr(module, "NAME", name), name, module, select(cases, cfg.filter, cfg.shard)
        )
        for name, (module, cases) in enumerated.items()
    ]
