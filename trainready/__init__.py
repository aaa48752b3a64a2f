"""trainready: is this PyTorch device ready for research training?

The Python API mirrors the CLI:

    import trainready
    summary = trainready.run(["matmul"], device="cpu", preset="quick", out="runs")
    print(trainready.report("runs", fmt="md"))
"""

from __future__ import annotations

from trainready.api import merge, run

__version__ = "0.1.0"


def report(*runs: str, fmt: str = "md") -> str:
    """Render runs ("DIR" or "DIR:RUN_ID"; the first is primary) in md, json, junit or html."""
    from trainready.api import open_runs
    from trainready.report import render

    store, run_ids = open_runs(list(runs))
    with store:
        return render(store, run_ids, fmt)


__all__ = ["run", "merge", "report", "__version__"]
