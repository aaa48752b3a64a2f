"""The tables of a parity zoo's results file, as markdown (the zoo's benchmark pages).

    python -m benchmarks.zoo_table RESULTS.json [--previous OLD.json]

From `benchmarks.parity_zoo --out` results: the counts per modality and status, every type that
does not pass with its reason, and, with --previous, every type whose status changed.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

STATUSES = ("pass", "fail_numerics", "fail_run", "unsupported")
REASON_CHARS = 300


def _type(case_id: str) -> str:
    return case_id.split("/")[2]  # parity/hf/<type>/<mode>/<dtype>


def _row(cells: list[object]) -> str:
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


def tables(results: dict[str, dict], previous: dict[str, dict] | None = None) -> str:
    counts: dict[str, Counter] = {}
    for r in results.values():
        counts.setdefault(r.get("modality") or "unknown", Counter())[r["status"]] += 1
    total = Counter(r["status"] for r in results.values())
    others = sorted(set(total) - set(STATUSES))
    heads = [*STATUSES, *others]
    lines = [
        f"**{len(results)} types**: " + ", ".join(f"{s} {total[s]}" for s in heads if total[s]),
        "",
        _row(["modality", *heads]),
        _row(["---"] * (len(heads) + 1)),
    ]
    lines += [_row([m, *(counts[m][s] for s in heads)]) for m in sorted(counts)]
    lines += ["", "| type | modality | status | reason |", "| --- | --- | --- | --- |"]
    for case_id, r in sorted(results.items(), key=lambda kv: _type(kv[0])):
        if r["status"] != "pass":
            reason = " ".join(str(r.get("reason") or "").split())[:REASON_CHARS]
            lines.append(_row([_type(case_id), r.get("modality"), r["status"], reason]))
    if previous is not None:
        lines += ["", "| type | before | now |", "| --- | --- | --- |"]
        for case_id, r in sorted(results.items(), key=lambda kv: _type(kv[0])):
            before = previous.get(case_id, {}).get("status", "(absent)")
            if before != r["status"]:
                lines.append(_row([_type(case_id), before, r["status"]]))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--previous", type=Path, default=None)
    args = ap.parse_args()
    results = json.loads(args.results.read_text())["results"]
    previous = json.loads(args.previous.read_text())["results"] if args.previous else None
    print(tables(results, previous))


if __name__ == "__main__":
    main()
