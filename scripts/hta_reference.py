"""Produce the HolisticTraceAnalysis reference values that tests/unit/profile/test_hta.py checks.

Not a dependency of trainready: run it by hand after `pip install holistictraceanalysis`:

    python scripts/hta_reference.py [TRACE_DIR] [--out tests/data/hta_reference/hta_reference.json]

TRACE_DIR defaults to ../shared/data/traces beside the repository. For every trace it runs, on that
trace alone as rank 0's file, HTA's temporal breakdown, kernel-type breakdown (memory kernels
included), idle-time breakdown, communication/computation overlap and CUDA kernel launch
statistics, and records the numbers (or the error HTA raised). It is run twice: with HTA's
default rounding of nanosecond timestamps to whole microseconds (`rounded`), and with
HTA_DISABLE_NS_ROUNDING=1 (`exact`), which keeps the fractional microseconds; trainready keeps
nanoseconds, so `exact` is what it is compared against (see docs in tests/data/hta_reference).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "data" / "traces"
DEFAULT_OUT = REPO / "tests" / "data" / "hta_reference" / "hta_reference.json"


def _num(x: Any) -> Any:
    """numpy / pandas scalars -> JSON numbers; NaN and inf -> None."""
    try:
        value = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _run(name: str, fn: Any, out: dict[str, Any], errors: dict[str, str]) -> None:
    try:
        out[name] = fn()
    except Exception as e:  # HTA's own failure is a finding to record, not a crash
        errors[name] = f"{type(e).__name__}: {e}"


def analyse(trace: Path) -> dict[str, Any]:
    """Every reference number for one trace, computed by HTA in this process."""
    from hta.trace_analysis import TraceAnalysis

    result: dict[str, Any] = {}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        link = Path(tmp) / (trace.name if trace.name.endswith(".gz") else trace.name + ".gz")
        link.symlink_to(trace.resolve())
        try:
            ta = TraceAnalysis(trace_files={0: str(link)}, trace_dir=tmp)
        except Exception as e:
            return {"errors": {"load": f"{type(e).__name__}: {e}"}}

        def temporal() -> dict[str, Any]:
            df = ta.get_temporal_breakdown(visualize=False)
            row = df.iloc[0]
            return {k: _num(row[k]) for k in df.columns if k != "rank"}

        def kernel_types() -> dict[str, Any]:
            kt, _ = ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
            return {
                str(r["kernel_type"]): {"sum": _num(r["sum"]), "percentage": _num(r["percentage"])}
                for _, r in kt.iterrows()
            }

        def idle_time() -> list[dict[str, Any]]:
            df, _ = ta.get_idle_time_breakdown(visualize=False)
            return [
                {
                    "stream": _num(r["stream"]),
                    "idle_category": str(r["idle_category"]),
                    "idle_time": _num(r["idle_time"]),
                    "idle_time_ratio": _num(r["idle_time_ratio"]),
                }
                for _, r in df.iterrows()
            ]

        def overlap() -> Any:
            df = ta.get_comm_comp_overlap(visualize=False)
            return _num(df.iloc[0]["comp_comm_overlap_pctg"])

        def launch_stats() -> dict[str, Any]:
            df = ta.get_cuda_kernel_launch_stats(visualize=False)[0]
            return {
                "count": len(df),
                "launch_delay_sum": _num(df["launch_delay"].sum()),
                "cpu_duration_sum": _num(df["cpu_duration"].sum()),
                "gpu_duration_sum": _num(df["gpu_duration"].sum()),
            }

        for name, fn in (
            ("temporal", temporal),
            ("kernel_types", kernel_types),
            ("idle_time", idle_time),
            ("overlap_pctg", overlap),
            ("launch_stats", launch_stats),
        ):
            _run(name, fn, result, errors)
    if errors:
        result["errors"] = errors
    return result


def _child(trace_dir: Path) -> None:
    """Run in a fresh process so the HTA option read from the environment takes effect."""
    logging.disable(logging.WARNING)
    out = {p.name: analyse(p) for p in sorted(trace_dir.glob("*.json.gz"))}
    json.dump(out, sys.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace_dir", nargs="?", type=Path, default=DEFAULT_TRACES)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.trace_dir)
        return
    import importlib.metadata

    modes = {}
    for mode, flag in (("exact", "1"), ("rounded", "0")):
        env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": flag}
        proc = subprocess.run(
            [sys.executable, __file__, str(args.trace_dir), "--child"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        modes[mode] = json.loads(proc.stdout)
    doc = {
        "producer": "scripts/hta_reference.py",
        "holistictraceanalysis": importlib.metadata.version("holistictraceanalysis"),
        "settings": {
            "idle_time_breakdown": {"consecutive_kernel_delay": 30},
            "gpu_kernel_breakdown": {"include_memory_kernels": True},
            "launch_stats": {"include_memory_events": True},
            "include_last_profiler_step": False,
        },
        "modes": modes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
