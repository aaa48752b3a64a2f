"""What left the device, for every suite that records it (parity, matmul, train): the ops that fell
back to the host by source, the ops that ran on host tensors, copies to the host and Python calls
that read device data. No SUITE here: the suites' sections call these.

Each result's `diagnostics["ops"]` is an `OpsReport.to_json()`. A fallback count is a claim, so it
is shown only where a source measured it: the dispatcher (a device with a backend key, over the
cases the ops probe ran on) or the backend's own record. Where neither did, the count is "unknown".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from trainready.core.case import Result
from trainready.reporting import fmt
from trainready.reporting.blocks import Column, Stat, Table, num

TOP = 30
NAMED = 6
DISPATCHER = "fallback (dispatcher)"
VENDOR = "fallback (backend record)"


def _vendor_measured(ops: dict) -> bool:
    """Whether the backend's record measured anything: it named an op, or it is a record whose
    silence means none fell back (a silent fallback leaves warnings-based records empty)."""
    source = ops.get("fallback_source") or ""
    if not source or source.startswith("none"):
        return False
    return bool(ops.get("fallbacks")) or bool(ops.get("fallback_complete"))


@dataclass
class Fallbacks:
    """The fallback record of a set of results: which sources measured it, and what they saw."""

    cases: int = 0  # results with an ops record
    dispatcher_cases: int = 0
    vendor_cases: int = 0
    on_cpu: bool = False
    vendor_sources: set[str] = field(default_factory=set)
    ops: Counter = field(default_factory=Counter)  # (kind, op) -> calls
    cases_of: dict = field(default_factory=lambda: defaultdict(set))  # (kind, op) -> names

    @property
    def measured(self) -> bool:
        return self.dispatcher_cases > 0 or self.vendor_cases > 0

    @property
    def fallback_ops(self) -> set[str]:
        return {op for kind, op in self.ops if kind in (DISPATCHER, VENDOR)}

    def stat(self, label: str = "host-fallback ops") -> Stat:
        """The count of ops that fell back, with what measured it; "unknown" when nothing did."""
        if self.on_cpu and not self.measured:
            return Stat(label, "n/a", fmt.text, "the device is the CPU: nothing to fall back from")
        if not self.measured:
            why = "no case recorded the ops it ran" if not self.cases else "no source could tell"
            return Stat(label, "unknown", fmt.text, why)
        ops = sorted(self.fallback_ops)
        named = f"; {', '.join(ops[:4])}" + (f" (+{len(ops) - 4})" if len(ops) > 4 else "")
        return Stat(label, len(ops), fmt.number, self.sources() + (named if ops else ""))

    def sources(self) -> str:
        parts = []
        if self.dispatcher_cases:
            parts.append(f"dispatcher over {fmt.plural(self.dispatcher_cases, 'case')}")
        if self.vendor_cases:
            parts.append(f"backend record over {fmt.plural(self.vendor_cases, 'case')}")
        return " and ".join(parts)


def collect(results: list[Result], name: Callable[[Result], str]) -> Fallbacks:
    out = Fallbacks()
    for r in results:
        ops = r.diagnostics.get("ops")
        if not isinstance(ops, dict):
            continue
        out.cases += 1
        out.on_cpu = out.on_cpu or str(ops.get("device", "")).startswith("cpu")
        entries: list[tuple[str, str, int]] = []
        if ops.get("dispatch_key"):
            out.dispatcher_cases += 1
            entries += [
                (DISPATCHER, op, n) for op, n in (ops.get("dispatch_fallbacks") or {}).items()
            ]
            entries += [
                ("no kernel", op, n) for op, n in (ops.get("dispatch_missing") or {}).items()
            ]
        if _vendor_measured(ops):
            out.vendor_cases += 1
            out.vendor_sources.add(str(ops.get("fallback_source")))
            entries += [(VENDOR, op, n) for op, n in (ops.get("fallbacks") or {}).items()]
        entries += [("ran on host", op, n) for op, n in (ops.get("host_ops") or {}).items()]
        entries += [("copy", op, n) for op, n in (ops.get("host_copies") or {}).items()]
        entries += [
            ("host read", f"{c['op']} at {c['site']}", c["count"])
            for c in ops.get("host_calls") or []
        ]
        for kind, op, n in entries:
            out.ops[(kind, op)] += n
            out.cases_of[(kind, op)].add(name(r))
    return out


def _names(names: set[str]) -> str:
    shown = sorted(names)[:NAMED]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" (+{more})" if more > 0 else "")


def table(fallbacks: Fallbacks, title: str) -> Table:
    """Everything that left the device, most calls first, with the cases that did it."""
    rows = [
        [kind, op, n, len(fallbacks.cases_of[(kind, op)]), _names(fallbacks.cases_of[(kind, op)])]
        for (kind, op), n in fallbacks.ops.most_common(TOP)
    ]
    if fallbacks.measured:
        title += f" — fallbacks from the {fallbacks.sources()}"
    columns = [Column("kind"), Column("op"), num("calls"), num("cases"), Column("e.g.")]
    return Table(columns, rows, title, True)
