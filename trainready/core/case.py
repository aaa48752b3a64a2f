"""Cases and results: the two records every suite, the runner, the store and the reports share."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# One vocabulary for every suite. Order matters for reports: best first, worst last.
STATUSES = (
    "pass",
    "fail_numerics",
    "fail_compile",
    "fail_run",
    "timeout",
    "crash",
    "oom",
    "unsupported",
    "skipped",
)
FAILING = frozenset({"fail_numerics", "fail_compile", "fail_run", "timeout", "crash", "oom"})


def _canonical(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Case:
    """One unit of work. `id` is stable across runs so results from devices and days line up."""

    suite: str
    name: str
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"suite": self.suite, "name": self.name, "params": self.params}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Case:
        return cls(suite=d["suite"], name=d["name"], params=dict(d.get("params", {})))

    def params_json(self) -> str:
        return _canonical(self.params)


@dataclass
class Outcome:
    """What a suite's `execute` returns: a status, numbers, and text for people."""

    status: str = "pass"
    metrics: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; valid: {', '.join(STATUSES)}")


@dataclass
class Result:
    """A case's outcome as the runner records it: the outcome plus where and how long."""

    case: Case
    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    phase: str | None = None  # the phase the case was in when it ended (e.g. "compile" on timeout)
    started_at: float = 0.0
    duration_s: float = 0.0

    @property
    def case_id(self) -> str:
        return self.case.id

    @property
    def failed(self) -> bool:
        return self.status in FAILING
