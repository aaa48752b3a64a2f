"""Planning a run: enumerate the suites' cases, filter them, and take this shard's share."""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass
from types import ModuleType

from trainready.config import ConfigError, RunConfig
from trainready.core.case import Case
from trainready.suites import load_suite


def shard_of(case_id: str, num_shards: int) -> int:
    """Deterministic shard of a case: a hash of its stable id, so every machine agrees and adding
    a case elsewhere does not move the others between shards."""
    digest = hashlib.sha1(case_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % num_shards


def select(cases: list[Case], pattern: str | None, shard: tuple[int, int] | None) -> list[Case]:
    if pattern:
        cases = [c for c in cases if fnmatch.fnmatchcase(c.id, pattern)]
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
        """A case may carry its own budget; then the user's --budget-s; then the suite default."""
        if "budget_s" in case.params:
            return float(case.params["budget_s"])
        if cfg.budget_s is not None:
            return cfg.budget_s
        return float(getattr(self.module, "DEFAULT_BUDGET_S", 300.0))

    def dtype(self, cfg: RunConfig, case: Case) -> str | None:
        return case.params.get("dtype") or cfg.dtype or getattr(self.module, "DEFAULT_DTYPE", None)


def plan(cfg: RunConfig) -> list[PlannedSuite]:
    planned = []
    for name in cfg.suites:
        module = load_suite(name)
        cases = select(module.cases(cfg), cfg.filter, cfg.shard)
        ids = [c.id for c in cases]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"suite {name!r} produced duplicate case ids")
        planned.append(PlannedSuite(getattr(module, "NAME", name), name, module, cases))
    return planned
