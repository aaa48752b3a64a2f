"""Both clocks of training Qwen3, eager against compiled, and the break-even step between them.

Runs the train suite through the API (each scenario in a fresh process: cold and warm compile
caches, an architecture change, a shape change) and prints, per mode and scenario, the first step,
steady tokens/s and MFU, and per scenario the step from which compiled mode is ahead in total
time. Defaults follow the suite: on an accelerator Qwen3-1.7B at sequence length 4096 in bf16,
on the CPU the tiny debug model.

    python -m benchmarks.train_qwen3 [--device auto] [--model 1.7B] [--seq-len 4096]
        [--batch-size 2] [--steps 30] [--compile blocks|model] [--precision autocast|bf16_params]
        [--ac] [--nproc N] [--scenarios cold,...] [--out runs-train] [--json FILE]

`--json FILE` also writes the summary there, with the command that made it (what
benchmarks/results/ keeps).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainready import api
from trainready.core.store import Store


def _options(args: argparse.Namespace) -> dict[str, Any]:
    names = (
        "model",
        "seq_len",
        "batch_size",
        "steps",
        "warmup",
        "compile",
        "precision",
        "ac",
        "nproc",
        "scenarios",
    )
    return {k: v for k in names if (v := getattr(args, k)) is not None}


def summarise(result: Any) -> dict[str, Any]:
    d = result.diagnostics
    rows = {}
    for mode, by_scenario in d.get("scenarios", {}).items():
        for name, s in by_scenario.items():
            if s is None:
                continue
            # The steady rate is its pool's (the suite's metrics), the step time the scenario's own.
            pooled = f"{mode}_{name}_"
            rows[f"{mode}/{name}"] = {
                "first_step_s": s["first_step_s"],
                "steady_step_ms": s["step_s"] * 1e3,
                "spread": s["spread"],
                "tokens_per_s": result.metrics.get(pooled + "tokens_per_s"),
                "mfu": result.metrics.get(pooled + "mfu"),
                "compile_s": s.get("compile", {}).get("compile_s"),
                "compile_phases_s": s.get("compile", {}).get("phases"),
                "peak_memory_gib": (s["peak_memory_bytes"] or 0) / 2**30,
            }
    return {
        "case": result.case.id,
        "status": result.status,
        "error": d.get("error"),
        "peak_label": d.get("peak_label"),
        "scenarios": rows,
        "break_even_step": {k: v["break_even_step"] for k, v in d.get("ledger", {}).items()},
        "parity_max_rel_dev": result.metrics.get("parity_max_rel_dev"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model")
    ap.add_argument("--seq-len", dest="seq_len", type=int)
    ap.add_argument("--batch-size", dest="batch_size", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--warmup", type=int, help="steps left out of the steady speed")
    ap.add_argument("--compile", choices=("blocks", "model"))
    ap.add_argument("--precision", choices=("autocast", "bf16_params"))
    # None when absent, so the suite's default (no checkpointing) stays the suite's to set.
    ap.add_argument("--ac", action="store_true", default=None, help="activation checkpointing")
    ap.add_argument("--nproc", type=int)
    ap.add_argument("--scenarios", help="comma-separated, cold first (default: every scenario)")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--out", default="runs-train")
    ap.add_argument("--json", type=Path, help="also write the summary here")
    args = ap.parse_args()
    summary = api.run(
        ["train"], device=args.device, out=args.out, dtype=args.dtype, options=_options(args)
    )
    with Store(args.out, create=False) as store:
        results = [summarise(r) for r in store.results(summary.run_id)]
    print(json.dumps(results, indent=2))
    if args.json:
        command = "python -m benchmarks.train_qwen3 " + " ".join(sys.argv[1:])
        args.json.write_text(json.dumps({"command": command, "cases": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
