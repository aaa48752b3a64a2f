"""Compile probe: what torch.compile did while a region ran.

Graph breaks (count, unique reasons, where in user code, the user stack), recompiles (with the
guard that failed), frames that fell back to eager, and dynamo's own compile time -- from
`torch._dynamo.utils.counters`, `compilation_time_metrics` and dynamo's `graph_breaks` and
`recompiles` log artifacts, captured for the duration of a `with CompileProbe() as probe:` block.

The counters are process-global and cumulative, so the probe reports the difference between the
end and the start of the block.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
RECOMPILE_LOGGER = "torch._dynamo.guards.__recompiles"
COMPILE_METRIC = "_compile.compile_inner"  # dynamo's time per frame compile, backend included
MAX_STACK_LINES = 12

_INTERNAL_DIRS = tuple(
    str(Path(spec.origin).parent) + "/"
    for spec in (importlib.util.find_spec("torch"), importlib.util.find_spec("trainready"))
    if spec and spec.origin
)
_LOCATION = re.compile(r"in user code at (?P<where>\S+)")
_FUNCTION = re.compile(r"Recompiling function (?P<fn>.+?)\s*$", re.MULTILINE)


@dataclass
class GraphBreak:
    reason: str  # the first line of dynamo's explanation, e.g. "Unsupported Tensor.item() call…"
    where: str  # file:line in user code
    user_stack: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "where": self.where, "user_stack": self.user_stack}


@dataclass
class CompileReport:
    graph_breaks: int = 0
    break_reasons: dict[str, int] = field(default_factory=dict)  # unique reason -> count
    breaks: list[GraphBreak] = field(default_factory=list)  # one per distinct (reason, where)
    recompiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)
    frames: int = 0
    frames_ok: int = 0
    graphs: int = 0
    compile_s: float = 0.0
    # A lazy backend's own graph counts (torch_xla: graphs compiled, cache hits, executions), the
    # analogue of recompiles for the graphs it builds under dynamo's: `device.counted`.
    backend_counters: dict[str, float] = field(default_factory=dict)

    @property
    def eager_frames(self) -> int:
        """Frames dynamo tried and left to run eagerly (it failed or declined to compile them)."""
        return max(0, self.frames - self.frames_ok)

    def metrics(self) -> dict[str, float]:
        return {
            "graph_breaks": float(self.graph_breaks),
            "recompiles": float(self.recompiles),
            "eager_frames": float(self.eager_frames),
            "graphs": float(self.graphs),
            "dynamo_compile_s": self.compile_s,
            **self.backend_counters,
        }

    def to_json(self) -> dict[str, Any]:
        backend = {"backend_counters": self.backend_counters} if self.backend_counters else {}
        return {
            "graph_breaks": self.graph_breaks,
            "break_reasons": self.break_reasons,
            "breaks": [b.to_json() for b in self.breaks],
            "recompiles": self.recompiles,
            "recompile_reasons": self.recompile_reasons,
            "frames": self.frames,
            "frames_ok": self.frames_ok,
            "eager_frames": self.eager_frames,
            "graphs": self.graphs,
            "dynamo_compile_s": self.compile_s,
            **backend,
        }


def first_line(reason: str) -> str:
    return next((ln.strip() for ln in reason.splitlines() if ln.strip()), reason.strip())


def parse_graph_break(message: str) -> GraphBreak:
    """One `graph_breaks` log record -> reason, location and the user stack."""
    where_m = _LOCATION.search(message)
    where = where_m.group("where") if where_m else "?"
    lines = message.splitlines()
    reason = ""
    if "Graph Break Reason:" in message:
        after = message.split("Graph Break Reason:", 1)[1].splitlines()
        # The header ("Encountered graph break when attempting to trace …") then a blank line
        # then dynamo's specific explanation: the specific one names the cause.
        body = [ln.strip() for ln in after[1:] if ln.strip()]
        reason = body[0] if body and not body[0].startswith("User code") else first_line(after[0])
    stack: list[str] = []
    if "User code traceback:" in lines:
        start = lines.index("User code traceback:") + 1
        frames: list[list[str]] = []
        for ln in lines[start:]:
            if not ln.strip():
                break
            text = ln.strip()
            if text.startswith("File "):
                frames.append([text])
            elif frames and not set(text) <= {"^", "~", " "}:
                frames[-1].append(text)
        stack = [" | ".join(f) for f in frames if not _internal(f[0])]
    return GraphBreak(reason or "?", where, stack[-MAX_STACK_LINES:])


def _internal(frame: str) -> bool:
    """A frame of torch itself or of trainready's harness, not of the model."""
    m = re.match(r'File "(?P<path>[^"]+)"', frame)
    return bool(m) and m.group("path").startswith(_INTERNAL_DIRS)


def parse_recompile(message: str) -> str:
    """One `recompiles` record -> "fn: first failed guard"."""
    fn = _FUNCTION.search(message)
    guards = [
        ln.strip().lstrip("- ").strip() for ln in message.splitlines() if ln.strip().startswith("-")
    ]
    head = fn.group("fn") if fn else "?"
    return f"{head}: {guards[0]}" if guards else head


def _counters() -> dict[str, Counter]:
    from torch._dynamo.utils import counters

    return {k: Counter(v) for k, v in copy.deepcopy(dict(counters)).items()}


# torch's own counters of its compile caches: Inductor's FX-graph cache and AOTAutograd's cache
# (Inductor only). A backend without a cache (aot_eager, eager, most vendors' before they adopt
# them) counts none of them: a process whose counts stay 0 compiled without looking one up.
_CACHE_COUNTERS = {
    "fxgraph_hit": ("inductor", "fxgraph_cache_hit"),
    "fxgraph_miss": ("inductor", "fxgraph_cache_miss"),
    "aot_autograd_hit": ("aot_autograd", "autograd_cache_hit"),
    "aot_autograd_miss": ("aot_autograd", "autograd_cache_miss"),
    "aot_autograd_bypass": ("aot_autograd", "autograd_cache_bypass"),
}


def cache_counts() -> dict[str, int]:
    """Compile-cache lookups so far in this process (`_CACHE_COUNTERS`), by outcome."""
    from torch._dynamo.utils import counters

    return {name: int(counters[group][key]) for name, (group, key) in _CACHE_COUNTERS.items()}


def cache_sentence(counts: dict[str, int] | None, backend: str | None) -> str:
    """What a compile's cache lookups say about a first step with warm caches, in a few words."""
    if not counts:
        return "compile-cache lookups not recorded"
    hits = counts.get("fxgraph_hit", 0) + counts.get("aot_autograd_hit", 0)
    lookups = hits + sum(counts.get(k, 0) for k in ("fxgraph_miss", "aot_autograd_miss"))
    if hits:
        return f"{hits} of {lookups} compile-cache lookups hit"
    if lookups:
        return f"no compile-cache hit: {lookups} lookups missed"
    return f"no compile cache looked up (backend {backend or 'unknown'} keeps none): a cold compile"


def _compile_seconds() -> list[float]:
    from torch._dynamo.utils import compilation_time_metrics

    return list(compilation_time_metrics.get(COMPILE_METRIC, []))


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.getMessage()))


class CompileProbe:
    """`with CompileProbe() as probe: ...` then `probe.report` (a CompileReport). Given the
    `device`, the report also counts what its backend compiled itself (`backend_counters`)."""

    def __init__(self, device: str | None = None) -> None:
        self.report = CompileReport()
        self._capture = _Capture()
        # imported here: the reports read this module's keys and must not load torch
        from trainready.device import counted  # noqa: PLC0415

        self._counting = counted(device) if device else None

    def __enter__(self) -> CompileProbe:
        import torch

        self._before = _counters()
        self._times_before = len(_compile_seconds())
        self._rose = self._counting.__enter__() if self._counting else {}
        torch._logging.set_logs(graph_breaks=True, recompiles=True)
        self._loggers = [logging.getLogger(GRAPH_BREAK_LOGGER), logging.getLogger(RECOMPILE_LOGGER)]
        for lg in self._loggers:
            lg.addHandler(self._capture)
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        for lg in self._loggers:
            lg.removeHandler(self._capture)
        torch._logging.set_logs()
        if self._counting:
            self._counting.__exit__(None, None, None)
            self.report.backend_counters = dict(self._rose)
        after = _counters()

        def delta(group: str) -> Counter:
            return after.get(group, Counter()) - self._before.get(group, Counter())

        r = self.report
        breaks = delta("graph_break")
        r.graph_breaks = sum(breaks.values())
        reasons: Counter = Counter()
        for reason, n in breaks.items():
            reasons[first_line(reason)] += n
        r.break_reasons = dict(reasons.most_common())
        frames = delta("frames")
        r.frames, r.frames_ok = frames.get("total", 0), frames.get("ok", 0)
        r.graphs = delta("stats").get("unique_graphs", 0)
        r.compile_s = sum(_compile_seconds()[self._times_before :])
        seen: set[tuple[str, str]] = set()
        for name, message in self._capture.records:
            if name == GRAPH_BREAK_LOGGER:
                gb = parse_graph_break(message)
                if (gb.reason, gb.where) not in seen:
                    seen.add((gb.reason, gb.where))
                    r.breaks.append(gb)
                elif gb.user_stack:  # dynamo prints the stack once; keep it where it appears
                    for known in r.breaks:
                        if (known.reason, known.where) == (
                            gb.reason,
                            gb.where,
                        ) and not known.user_stack:
                            known.user_stack = gb.user_stack
            elif name == RECOMPILE_LOGGER:
                r.recompile_reasons.append(parse_recompile(message))
        r.recompiles = len(r.recompile_reasons)


# What a case's diagnostics say when its compile was the first of its process for the device type
# and backend (`first_compile_in_process`); the reports read it by this key.
FIRST_COMPILE_KEY = "first_compile_in_process"
_COMPILED_IN_PROCESS: set[tuple[str, str]] = set()


def first_compile_in_process(device: str, backend: str) -> bool:
    """True the first time this process asks for (device type, backend), False every time after.

    The first compile of a process pays the compiler's one-time start-up beside the model's own
    work: importing inductor, starting its compile workers, and on the CPU probing the vector ISA
    (and, on a fresh machine, building the precompiled C++ header): 7-12 s in the 2-core CPU main
    job, as much as a small model's whole compile. A per-case compile time is the model's alone
    only where this was False; the reports say so next to the cases where it was True.
    """
    key = (device.partition(":")[0], backend)
    first = key not in _COMPILED_IN_PROCESS
    _COMPILED_IN_PROCESS.add(key)
    return first


def backend_unsupported(backend: str | None, device: str) -> str | None:
    """Why `torch.compile(backend=...)` cannot generate code for `device`, where that is known
    before trying, else None. Inductor needs a code generator registered for the device type
    (`torch._inductor.codegen.common.register_backend_for_device`); an out-of-tree backend
    without one fails deep in lowering with an assertion that names no cause."""
    if backend != "inductor":
        return None
    dev_type = device.partition(":")[0]
    from torch._inductor.codegen.common import (  # noqa: PLC0415 - imports inductor, slow
        get_scheduling_for_device,
        init_backend_registration,
    )

    init_backend_registration()
    if get_scheduling_for_device(dev_type) is not None:
        return None
    return (
        f"inductor has no code generator for device type {dev_type!r} (none registered with "
        "torch._inductor.codegen.common.register_backend_for_device); a backend that does not "
        "generate code, e.g. --compile-backend aot_eager, can still run"
    )
