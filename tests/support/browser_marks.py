"""The marks of a test module that drives a real browser: slow, and skipped where the browser is
not installed (CI installs Debian's chromium and firefox-esr; a bare machine skips with the
command that installs it)."""

from __future__ import annotations

from pathlib import Path

import pytest


def browser_marks(executable: str, name: str, package: str) -> list[pytest.MarkDecorator]:
    """`pytestmark` for a module that needs the browser `name` at `executable` (apt `package`)."""
    return [
        pytest.mark.slow,
        pytest.mark.skipif(
            not Path(executable).exists(),
            reason=f"needs {name} at {executable} (apt-get install {package})",
        ),
    ]
