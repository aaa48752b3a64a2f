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
import sys
import types
from typing import Any

__version__ = "0.1.0"

__all__ = ["run", "report", "merge", "devices", "mfu", "__version__"]

_API = frozenset(__all__[:-1])


class _Package(types.ModuleType):
    """This package. Its API functions are `trainready.api`'s, imported on first use: a command
    that needs none of them (`trainready analyze`) does not load the runner, the reports or torch.

    `trainready.report` (a subpackage) and `trainready.mfu` (a module) share their names with API
    functions, and Python binds a submodule to its package's attribute when it first imports the
    submodule: that binding is ignored here, so the name stays the function in any import order.
    """

    def __getattr__(self, name: str) -> Any:
        if name not in _API:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        function = getattr(importlib.import_module("trainready.api"), name)
        super().__setattr__(name, function)
        return function

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | _API)


sys.modules[__name__].__class__ = _Package
