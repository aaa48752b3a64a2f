"""What a suite's `execute` sees inside a worker: the device, the budget, and a phase reporter."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


class Unsupported(Exception):  # noqa: N818 - it is a verdict, not an error
    """Raise from a case when the backend cannot do what the case asks (becomes `unsupported`)."""


@dataclass
class CaseContext:
    device: str
    dtype: str | None
    budget_s: float
    preset: str = "quick"
    options: dict[str, Any] = field(default_factory=dict)
    peaks: dict[str, dict[str, Any]] = field(default_factory=dict)
    _report_phase: Callable[[str], None] = field(default=lambda _p: None, repr=False)
    current_phase: str = "setup"

    def set_phase(self, name: str) -> None:
        """Tell the runner which phase the case is in, so a timeout names it (e.g. 'compile')."""
        self.current_phase = name
        self._report_phase(name)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        previous = self.current_phase
        self.set_phase(name)
        try:
            yield
        finally:
            self.set_phase(previous)

    def peak(self, dtype: str) -> dict[str, Any] | None:
        """The peak FLOP/s record for `dtype` ({"flops", "source", "label"}) or None if unknown."""
        return self.peaks.get(dtype)
