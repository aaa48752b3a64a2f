"""Trim a large Kineto trace to the events trainready's HTA comparison reads, and prove nothing it
compares changed.

    python tests/data/traces/trim.py SOURCE.json.gz [...] --out tests/data/traces

Kept: the top-level device and rank metadata (schemaVersion, deviceProperties, distributedInfo,
displayTimeUnit); metadata ("M") events; every device activity (kernel, memcpy, memset, sync);
the runtime calls that launched one of them (same correlation id); the ProfilerStep#N annotations
(they set the analysis window); and the trace's earliest slice (the origin HTA measures time
from). Device activity keeps args device/stream/correlation and the sync records' wait_on_*
fields; every other slice keeps no args beyond its correlation id. Dropped: host operators,
python frames, flow arrows, instants and the job metadata. Numbers are copied as written (times
are decimal text: a float would lose the nanoseconds).

After writing, the trimmed file is loaded beside the original and every analysis that
tests/test_profile_hta.py compares with HTA must give the same numbers, or the script exits 1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

META_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit")
DEVICE_CATS = {"kernel", "Kernel", "mtia_ccp_events", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset",
               "cuda_sync"}  # fmt: skip
DEVICE_ARGS = ("device", "stream", "correlation", "wait_on_stream",
               "wait_on_cuda_event_record_corr_id")  # fmt: skip
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "xpu_runtime", "xpu_driver", "mtia_runtime",
                "privateuse1_runtime", "privateuse1_driver"}  # fmt: skip
STEP = re.compile(r"^ProfilerStep\s*#\s*\d+$")


def _dump(value: Any) -> str:
    """JSON text, with Decimal numbers written exactly as they were read."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _slim(event: dict[str, Any], arg_keys: tuple[str, ...]) -> dict[str, Any]:
    out = {k: event[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur") if k in event}
    args = {k: event["args"][k] for k in arg_keys if k in event.get("args", {})}
    if args:
        out["args"] = args
    return out


def trim(doc: dict[str, Any]) -> dict[str, Any]:
    events = doc["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X"]
    device = [e for e in slices if e.get("cat") in DEVICE_CATS]
    launched = {e["args"]["correlation"] for e in device if "correlation" in e.get("args", {})}
    first = min(slices, key=lambda e: Decimal(e["ts"]))
    kept = []
    for e in events:
        if e.get("ph") == "M":
            kept.append(e)
        elif e.get("ph") != "X":
            continue
        elif e.get("cat") in DEVICE_CATS:
            kept.append(_slim(e, DEVICE_ARGS))
        elif e.get("cat") in RUNTIME_CATS and e.get("args", {}).get("correlation") in launched:
            kept.append(_slim(e, ("correlation",)))
        elif e is first or STEP.match(str(e.get("name", ""))):
            kept.append(_slim(e, ()))
    return {**{k: doc[k] for k in META_KEYS if k in doc}, "traceEvents": kept}


def write(doc: dict[str, Any], path: Path) -> None:
    head = ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in doc.items() if k != "traceEvents")
    body = ",\n".join(_dump(e) for e in doc["traceEvents"])
    text = "{" + head + ',"traceEvents":[\n' + body + "\n]}\n"
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(text.encode())  # mtime 0: the same input gives the same bytes


def analyses(path: Path) -> dict[str, Any]:
    """What tests/test_profile_hta.py compares with HTA, minus row numbers (trimming renumbers)."""
    from trainready.profile import analysis as A
    from trainready.profile.trace import load_trace

    trace = load_trace(path)
    win = A.window(trace)
    gaps = {
        stream: {k: g[k].tolist() for k in ("ts", "end", "launch_ts", "gap_ns")}
        | {"dur": trace.dur[g["rows"]].tolist()}
        for stream, g in A.stream_gaps(trace, win).items()
    }
    pairs = A.launches(trace, win)
    return {
        "origin_ns": int(trace.ts.min()),
        "window": (win.trimmed_last_step, win.last_step_start_ns),
        "temporal": A.temporal_breakdown(trace, win),
        "kernel_types": A.kernel_type_breakdown(trace, win),
        "idle_time": A.idle_time_breakdown(trace, win),
        "overlap": A.comm_comp_overlap(trace, win),
        "launch_stats": A.launch_stats(trace, win),
        "launch_names": sorted(set(trace.names(pairs["launch"]))),
        "stream_gaps": gaps,
        "devices": [trace.device_name(d) for d in np.unique(trace.device_of()).tolist()],
        "rank": trace.rank,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    ok = True
    for source in args.sources:
        with gzip.open(source, "rt") as f:
            doc = json.load(f, parse_float=Decimal)
        trimmed = trim(doc)
        dest = args.out / source.name
        write(trimmed, dest)
        same = analyses(source) == analyses(dest)
        ok &= same
        print(f"{source.name}: {len(doc['traceEvents'])} -> {len(trimmed['traceEvents'])} events, "
              f"{source.stat().st_size} -> {dest.stat().st_size} bytes, "
              f"analyses {'identical' if same else 'DIFFER'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
