"""Parity zoo throughput, measured in one run on this machine (not a test: machines are noisy).

    python -m benchmarks.parity_zoo [--zoo causal|task] [--types N] [--shard I/K] [--only A,B]
                                    [--jobs J] [--steps S] [--out FILE.json]

Runs a Hugging Face zoo (`causal`: the causal-LM types, the default; `task`: every other type
with a task head, `models/zoo/hf_tasks.py`), the first N types or every K-th from the I-th (a shard),
in eager fp32 through `trainready.run`, then reports:
- cases per minute, from the first to the last stored result (steady state, workers warm);
- the runner overhead share: the part of the workers' busy time not spent inside cases,
  1 - sum(case durations) / (jobs * steady wall time);
- worker start-up to the first result (spawn, importing torch and transformers, the first case);
- where a case's time goes: the median seconds of each phase (the suite's `t_*_s` metrics);
- with --out, every case's status, modality and reason (for the zoo's table of results).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from trainready import api
from trainready.models.zoo import hf_tasks
from trainready.models.zoo.hf_causal import model_types


class _Marks(api.Observer):
    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.times: list[float] = []
        self.durations: list[float] = []
        self.statuses: dict[str, int] = {}
        self.phases: dict[str, list[float]] = {}
        self.cases: dict[str, dict] = {}

    def on_result(self, result) -> None:
        self.times.append(time.perf_counter())
        self.durations.append(result.duration_s)
        self.statuses[result.status] = self.statuses.get(result.status, 0) + 1
        d = result.diagnostics
        self.cases[result.case_id] = {
            "status": result.status,
            "modality": d.get("modality"),
            "reason": d.get("error") or d.get("reason"),
            "s": round(result.duration_s, 2),
        }
        if d.get("text_only"):  # a multimodal LM judged on its text alone
            self.cases[result.case_id]["text_only"] = d["text_only"]
        for name, value in result.metrics.items():
            if name.startswith("t_"):
                self.phases.setdefault(name, []).append(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", type=int, default=None, help="first N model types (default all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--zoo", choices=("causal", "task"), default="causal")
    ap.add_argument("--shard", default="0/1", help="I/K: every K-th type from the I-th")
    ap.add_argument("--out", type=Path, default=None, help="write every case's result here")
    ap.add_argument("--only", default=None, help="these types only (comma-separated)")
    args = ap.parse_args()
    i, k = (int(x) for x in args.shard.split("/"))
    types = model_types() if args.zoo == "causal" else hf_tasks.model_types()
    types = (types[: args.types] if args.types else types)[i::k]
    if args.only:
        types = [t for t in types if t in args.only.split(",")]
    marks = _Marks()
    with tempfile.TemporaryDirectory() as tmp:
        api.run(
            ["parity"],
            device="cpu",
            out=Path(tmp),
            jobs=args.jobs,
            options={"zoo": "hf", "hf_types": types, "modes": "eager", "steps": args.steps},
            observer=marks,
        )
    steady_s = marks.times[-1] - marks.times[0]
    steady_cases = len(marks.times) - 1
    # Cases that ended inside the steady window (their start may slightly precede it).
    busy = sum(marks.durations[1:])
    result = {
        "cases": len(marks.times),
        "jobs": args.jobs,
        "steps": args.steps,
        "statuses": marks.statuses,
        "cases_per_minute": 60.0 * steady_cases / steady_s if steady_s > 0 else None,
        "runner_overhead_share": 1.0 - busy / (args.jobs * steady_s) if steady_s > 0 else None,
        "first_result_s": marks.times[0] - marks.start,
        "median_case_s": statistics.median(marks.durations),
        "median_phase_s": {k: statistics.median(v) for k, v in sorted(marks.phases.items())},
        "total_s": marks.times[-1] - marks.start,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps({**result, "results": marks.cases}, indent=1))


if __name__ == "__main__":
    main()
