"""Check a `trainready run ... --preset smoke` store the way CI's torch-range step requires.

    python scripts/ci/check_smoke.py STORE_DIR

Passes (exit 0) when the store's latest run finished every planned case, no case failed
(`fail_run`, `fail_compile`, `fail_numerics`, `timeout`, `crash`, `oom`), and every case that did
not pass says why (its report reason); prints one line per case that did not pass, marking those
that trainready.device.compat excused as a known bug of this torch. Otherwise prints what is wrong
and exits 1. Reads the run's report.json only: no torch, no trainready import, any python3.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FAILING = {"fail_numerics", "fail_compile", "fail_run", "timeout", "crash", "oom"}
REASON_KEYS = ("error", "reason", "message")  # where a result says why, as reporting/model.py
EXCUSED_KEY = "torch_limitation"  # trainready.device.compat.EXCUSED_KEY


def latest_report(store: Path) -> dict:
    """The latest run's report.json in a store directory (one folder per run, named by its run
    id, which starts with the date and time: the last by name is the latest)."""
    reports = sorted(store.glob("*/report.json"))
    if not reports:
        raise SystemExit(f"error: no */report.json under {store}")
    return json.loads(reports[-1].read_text())["runs"][0]


def reason(result: dict) -> str:
    diagnostics = result.get("diagnostics") or {}
    text = next((str(diagnostics[k]) for k in REASON_KEYS if diagnostics.get(k)), "")
    return text.strip().splitlines()[0] if text.strip() else ""


def problems(run: dict) -> list[str]:
    """Everything that fails the check, one line each (empty: it passes)."""
    found = []
    state, total = run["state"], run["summary"]["all"]
    if state["kind"] != "finished" or total["not_run"]:
        found.append(f"run {state['kind']}: {total['not_run']} of {total['total']} cases not run")
    for r in run["results"]:
        if r["status"] in FAILING:
            found.append(f"{r['case_id']}: {r['status']}: {reason(r) or '(no reason)'}")
        elif r["status"] != "pass" and not reason(r):
            found.append(f"{r['case_id']}: {r['status']} without a reason")
    return found


def describe(run: dict) -> list[str]:
    """The run's tally and each case that did not pass, with its reason."""
    torch = run["run"]["env"].get("torch", "?")
    counts = {k: n for k, n in run["summary"]["all"]["counts"].items() if n}
    lines = [f"torch {torch}: " + ", ".join(f"{n} {k}" for k, n in counts.items())]
    for r in run["results"]:
        if r["status"] == "pass":
            continue
        excused = (r.get("diagnostics") or {}).get(EXCUSED_KEY)
        mark = f" [torch limitation, was {excused['status']}]" if excused else ""
        lines.append(f"  {r['status']}{mark} {r['case_id']}: {reason(r)}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    run = latest_report(Path(argv[0]))
    print("\n".join(describe(run)))
    found = problems(run)
    for line in found:
        print(f"FAIL {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
