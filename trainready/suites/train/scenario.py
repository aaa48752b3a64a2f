"""`Scenario`: what one scenario's training process(es) gave back, a record or why there is none.
Made by `processes` (a plain or torchrun scenario) and `profile` (a profiled one), read by
`rates` and the suite."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Scenario:
    """What one scenario's process(es) gave back: a record, or why there is none."""

    mode: str
    name: str
    record: dict[str, Any] | None = None
    status: str = "pass"  # pass, or the failing status the scenario alone earned
    error: str | None = None
    detail: str = ""  # traceback or output tail
    process_s: float = 0.0  # the whole process(es), start-up included (a fork: torch imported)
    spec: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None  # the capture (--profile): files, summary or error
