"""Two full runs side by side: does every headline hold up on a rerun?

    python -m benchmarks.headline_stability [--store DIR] [--md FILE] [-- EXTRA RUN ARGS]

Runs the README's main job, `trainready run all --device cpu --preset quick`, twice into one
store (as a user reruns it: the peak is calibrated once), or, with `--store` naming a store that
already holds two runs, reads its last two. Prints, as Markdown, every headline of both reports
side by side, and for the timing headlines (`trainready.reporting.stability`: matmul MFU per M,
the train rates and break-even step, all_reduce bandwidth) each run's interval, whether it
concluded, and whether the two intervals share a value. The issue #39 targets: on a quiet
machine every matmul and train headline concludes, and no two conclusive intervals disagree.
Exit status 1 when two conclusive intervals disagree.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trainready.core.store import Store
from trainready.reporting.stability import Estimate, disagreements, estimates

COMMAND = ["run", "all", "--device", "cpu", "--preset", "quick"]


def _run(store: Path, extra: list[str]) -> float:
    """The main job once more into `store`; its wall time."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "trainready", *COMMAND, *extra, "--out", str(store)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _read(store: Path, run_id: str) -> tuple[dict[str, dict], dict[str, Estimate]]:
    with Store(store, create=False) as s:
        results = s.results(run_id)
    report = json.loads((store / run_id / "report.json").read_text())
    heads = {h["label"]: h for h in report["runs"][0]["headlines"]}
    return heads, estimates(results)


def _num(x: Any) -> str:
    if isinstance(x, dict):  # a table headline (parity by modality): the report shows it
        return "(a table)"
    if isinstance(x, float):
        return "∞" if math.isinf(x) else f"{x:.4g}"
    return str(x)


def _timing(e: Estimate | None) -> str:
    if e is None:
        return "—"
    lo, hi = e.interval
    stated = _num(e.value) if e.value is not None else "—"
    return f"{stated} [{_num(lo)}, {_num(hi)}]" + ("" if e.conclusive else " inconclusive")


def _agree(a: Estimate | None, b: Estimate | None) -> str:
    if a is None or b is None:
        return "—"
    if not (a.conclusive and b.conclusive):
        return "not both conclusive"
    return "no" if disagreements({"x": a}, {"x": b}) else "overlap"


def table(runs: list[tuple[dict[str, dict], dict[str, Estimate]]]) -> str:
    (h1, e1), (h2, e2) = runs
    lines = [
        "| headline | run 1 | run 2 | run 1 interval | run 2 interval | intervals |",
        "|---|---|---|---|---|---|",
    ]
    for label in dict.fromkeys([*h1, *h2, *e1, *e2]):
        cells = [
            _num((h.get(label) or {}).get("value", "—")) for h in (h1, h2)
        ]  # the report's own value
        a, b = e1.get(label), e2.get(label)
        lines.append(
            f"| {label} | {cells[0]} | {cells[1]} | {_timing(a)} | {_timing(b)} | {_agree(a, b)} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, help="read this store's last two runs; run nothing")
    ap.add_argument("--md", type=Path, help="also write the Markdown here")
    ap.add_argument("extra", nargs="*", help="more `trainready run` arguments (after --)")
    args = ap.parse_args()
    walls: list[float] = []
    store = args.store
    if store is None:
        store = Path(os.environ.get("TMPDIR", "/tmp")) / f"headline-stability-{os.getpid()}"
        for i in (1, 2):
            print(f"run {i} of 2 ...", file=sys.stderr, flush=True)
            walls.append(_run(store, args.extra))
    with Store(store, create=False) as s:
        listed = s.list_runs()
    if len(listed) < 2:
        sys.exit(f"error: {store} holds {len(listed)} run(s); two are compared")
    ids = [r.run_id for r in listed[-2:]]
    runs = [_read(store, run_id) for run_id in ids]
    found = disagreements(runs[0][1], runs[1][1])
    timing = [e for _, es in runs for e in es.values()]
    lines = [
        f"runs {ids[0]} and {ids[1]} in {store}"
        + (f" (wall {walls[0]:.0f} s and {walls[1]:.0f} s)" if walls else ""),
        f"host: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"load average at the end {os.getloadavg()[0]:.2f}",
        "",
        table(runs),
        "",
        f"timing headlines concluded: {sum(e.conclusive for e in timing)} of {len(timing)} "
        "(both runs)",
        "disagreeing conclusive intervals: " + ("; ".join(found) if found else "none"),
    ]
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.write_text(text + "\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
