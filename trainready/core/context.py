"""What a suite's `execute` sees inside a worker: the device, the budget, a phase reporter, and a
directory of its own for files (traces, logs) that belong to the run."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARTIFACTS = "artifacts"  # RUN_DIR/artifacts/<case>/: files a case writes
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Unsupported(Exception):  # noqa: N818 - it is a verdict, not an error
    """Raise from a case when the backend cannot do what the case asks (becomes `unsupported`)."""


def is_unsupported(exc: BaseException) -> bool:
    """Whether an error a case raised means the backend cannot do what it asks: `Unsupported`,
    or the device layer's MissingCapability (training needs what the backend lacks: autocast)."""
    from trainready.core.errors import root_cause
    from trainready.device.capabilities import MissingCapability

    return isinstance(root_cause(exc), (Unsupported, MissingCapability))


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
    # The run's directory (OUT/RUN_ID), and this case's own directory under it (emptied for each
    # attempt by the worker: `prepare_artifacts`); None when the case runs outside a stored run.
    run_dir: str | None = None
    artifacts_dir: str | None = None
    # CPU threads of a case that shares the machine with others (the runner's share of the
    # cores); None: the case runs alone and keeps torch's default.
    cpu_threads: int | None = None

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

    def artifacts(self) -> Path:
        """This case's directory for files, made on first use; raises OSError when there is none
        (no run directory) or it cannot be made (a suite records that as a diagnostic)."""
        if self.artifacts_dir is None:
            raise OSError("no artifacts directory: the case runs outside a stored run")
        path = Path(self.artifacts_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run_relative(self, path: str | Path) -> str:
        """`path` as results record it: relative to the run directory, so a report (written
        there) and a merged or moved run still find it."""
        if self.run_dir is None:
            return Path(path).as_posix()
        return Path(os.path.relpath(path, self.run_dir)).as_posix()


def artifacts_name(case_id: str) -> str:
    """A case id as one path component: readable, and still unique where characters had to be
    replaced (the hash is of the id itself)."""
    safe = _UNSAFE.sub("_", case_id).strip("._-")[:100]
    return f"{safe}-{hashlib.sha1(case_id.encode()).hexdigest()[:8]}"


def prepare_artifacts(ctx: CaseContext, case_id: str) -> None:
    """Point the case at RUN_DIR/artifacts/<case>/, emptied of what an earlier attempt (a rerun,
    --resume) left; it is made when the case first asks for it (`ctx.artifacts()`), so cases
    that write nothing leave no directory."""
    if ctx.run_dir is None:
        return
    path = Path(ctx.run_dir) / ARTIFACTS / artifacts_name(case_id)
    shutil.rmtree(path, ignore_errors=True)
    ctx.artifacts_dir = str(path)
