"""trainready: is this PyTorch device ready for research training?

The Python API mirrors the CLI (run, report, merge, devices, mfu). Runs spawn worker processes
that re-import the main script, so a script that runs suites guards its top level:

    import trainready

    if __name__ == "__main__":
        summary = trainready.run(["matmul"], device="cpu", preset="quick", out="runs")
        print(trainready.report(f"runs:{summary.run_id}", fmt="md"))
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["run", "report", "merge", "devices", "mfu", "__version__"]

_API = frozenset(__all__[:-1])


def __getattr__(name: str) -> Any:
    """The API functions are `trainready.api`'s, imported on first use: a command that needs none
    of them (`trainready analyze`) does not load the runner, the reports or torch. No subpackage
    shares an API function's name, so an import of one never rebinds these."""
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    function = getattr(importlib.import_module("trainready.api"), name)
    globals()[name] = function
    return function


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API)
