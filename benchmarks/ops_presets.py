"""Time the ops suite's presets through the CLI, each into an empty store, and write the figures.

    python -m benchmarks.ops_presets [--device cpu] [--presets smoke,quick] [--out FILE.md]

Each preset runs as `trainready run ops --device D --preset P` in a fresh process (op_db's import
and the catalog's child process included; the catalog cache is kept), timed by wall clock, with
the run's tally and the number of distinct entries that reached a verdict read from its report.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(device: str, preset: str, imports: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "trainready", "run", "ops", "--device", device]
        cmd += [a for m in imports for a in ("--import", m)] + ["--preset", preset, "--out", out]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        reports = list(Path(out).glob("*/report.json"))
        if done.returncode not in (0, 1) or not reports:
            raise SystemExit(f"{preset}: exit {done.returncode}: {done.stderr[-2000:]}")
        results = json.loads(reports[0].read_text())["runs"][0]["results"]
    tally = collections.Counter(r["status"] for r in results)
    verdicts = {r["case_id"].split("/")[1] for r in results if r["status"] != "skipped"}
    passed = sum(tally[s] for s in ("pass",))
    judged = sum(n for s, n in tally.items() if s != "skipped")
    return {
        "preset": preset,
        "wall_s": round(wall, 1),
        "cases": len(results),
        "tally": dict(tally),
        "entries_with_a_verdict": len(verdicts),
        "pass_share_of_verdicts": round(passed / judged, 4) if judged else None,
    }


def in_process(device: str, preset: str) -> dict:
    """The preset's cases run one after another in this process (no runner, no CLI): the
    suite's own cost. Import a device's module first (`--import`)."""
    from trainready.core.config import RunConfig
    from trainready.core.context import CaseContext
    from trainready.suites.ops import suite

    cfg = RunConfig(suites=["ops"], device=device, preset=preset)
    ctx = CaseContext(device=device, dtype=None, budget_s=suite.DEFAULT_BUDGET_S)
    t0 = time.perf_counter()
    tally: collections.Counter = collections.Counter()
    for case in suite.cases(cfg):
        tally[suite.execute(case, ctx).status] += 1
    return {"preset": preset, "wall_s": round(time.perf_counter() - t0, 1), "tally": dict(tally)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--presets", default="smoke,quick")
    parser.add_argument("--import", dest="imports", action="append", default=[])
    parser.add_argument("--out", help="a Markdown file to append the table to")
    parser.add_argument(
        "--in-process", action="store_true", help="run the cases in this process, no CLI"
    )
    args = parser.parse_args(argv)
    if args.in_process:
        import importlib
        import warnings

        warnings.simplefilter("ignore")
        for module in args.imports:
            importlib.import_module(module)
        for p in args.presets.split(","):
            print(json.dumps(in_process(args.device, p)))
        return 0
    rows = [run(args.device, p, args.imports) for p in args.presets.split(",")]
    load = os.getloadavg()[0]
    lines = [
        f"| {r['preset']} | {r['cases']} | {r['wall_s']} | {r['entries_with_a_verdict']} | "
        f"{r['pass_share_of_verdicts']} | {json.dumps(r['tally'])} |"
        for r in rows
    ]
    table = "\n".join(
        [
            f"Device {args.device}; load average at the end {load:.1f}; "
            f"`python -m benchmarks.ops_presets --device {args.device} --presets {args.presets}`",
            "",
            "| preset | cases | wall s (whole CLI run) | entries with a verdict | pass share of "
            "verdicts | statuses |",
            "|---|---|---|---|---|---|",
            *lines,
        ]
    )
    print(table)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
