"""Run the `trainready` CLI in a fresh interpreter, as a user would, for end-to-end tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m trainready ARGS` in `cwd` (the repository by default, so workers can import
    the tests' planted-fault modules), output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "trainready", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
