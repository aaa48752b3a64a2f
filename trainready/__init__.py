"""trainready: is this PyTorch device ready for research training?

The Python API mirrors the CLI (run, report, merge, devices, mfu). Runs spawn worker processes
that re-import the main script, so a script that runs suites guards its top level:

    import trainready

    if __name__ == "__main__":
        summary = trainready.run(["matmul"], device="cpu", preset="quick", out="runs")
        print(trainready.report(f"runs:{summary.run_id}", fmt="md"))
"""

from __future__ import annotations

# `trainready.report` (a subpackage) and `trainready.mfu` (a module) share their names with API
# functions. Python sets a submodule as its package's attribute when the submodule is first
# imported, which would replace the function; importing both here, before the functions are bound
# below (plain imports sort before `from` imports), means that has happened for good.
import trainready.mfu as _mfu_module
import trainready.report as _report_package
from trainready.api import devices, merge, mfu, report, run

del _mfu_module, _report_package

__version__ = "0.1.0"

__all__ = ["run", "report", "merge", "devices", "mfu", "__version__"]
