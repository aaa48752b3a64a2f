"""Small synthetic Kineto traces for the profiler tests: exact, hand-checkable timelines."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID, TID, DEV = 100, 101, 0


def cpu(name: str, ts: float, dur: float, tid: int = TID, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid, "ts": ts,
            "dur": dur, "args": args}  # fmt: skip


def annotation(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": PID, "tid": TID,
            "ts": ts, "dur": dur, "args": {}}  # fmt: skip


def runtime(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts,
            "dur": dur, "args": {"correlation": corr}}  # fmt: skip


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7,
           cat: str = "kernel") -> dict[str, Any]:  # fmt: skip
    return {"ph": "X", "cat": cat, "name": name, "pid": DEV, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": DEV, "stream": stream, "correlation": corr}}  # fmt: skip


def launch(name: str, cpu_ts: float, cpu_dur: float, ts: float, dur: float, corr: int,
           stream: int = 7, cat: str = "kernel",
           api: str = "cudaLaunchKernel") -> list[dict[str, Any]]:  # fmt: skip
    """A runtime call, its device activity, and the ac2g flow between them."""
    return [
        runtime(api, cpu_ts, cpu_dur, corr),
        kernel(name, ts, dur, corr, stream, cat),
        {"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": cpu_ts, "cat": "ac2g",
         "name": "ac2g"},
        {"ph": "f", "id": corr, "pid": DEV, "tid": stream, "ts": ts, "cat": "ac2g",
         "name": "ac2g", "bp": "e"},
    ]  # fmt: skip


def document(events: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    base = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    return {**base, **meta, "traceEvents": events}


def write(path: Path, doc: Any, *, compress: bool | None = None) -> Path:
    text = json.dumps(doc, indent=1)
    if compress if compress is not None else path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path
