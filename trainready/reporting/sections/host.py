"""What left the device, for every suite that records it (parity, matmul, train): the ops that fell
back to the host by source, the ops that ran on host tensors, copies to the host and Python calls
that read device data. No SUITE here: the suites' sections call these.

Each result's `diagnostics["ops"]` is an `OpsReport.to_json()`. A fallback count is a claim, so it
is shown only where a source measured it: the dispatcher (a device with a backend key, over the
cases the ops probe ran on) or the backend's own record. Where neither did, the count is "unknown".

Apart from the fallbacks: the ops whose own kernel made a host round-trip (`dispatch_roundtrips`,
seen by the dispatch watch's nesting), "not measured" where the watch did not run (the CPU, a
compiled region, a record from before the rule).
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
ROUNDTRIP = "round-trip in kernel (dispatcher nesting)"


def roundtrip_label(op: str) -> str:
    """As `device.dispatch.roundtrip_label` words it (reporting imports no torch)."""
    return f"host round-trip inside {op}"


def _roundtrip_unmeasured(ops: dict) -> str | None:
    """Why a record did not measure host round-trips inside kernels, or None if it did."""
    if ops.get("dispatch_key") and "dispatch_roundtrips" in ops:
        return None
    source = str(ops.get("roundtrip_source") or "")
    if source.startswith("not measured: "):
        return source.removeprefix("not measured: ")
    if str(ops.get("device", "")).startswith("cpu"):
        return "the device is the CPU"
    return "no dispatcher key" if not ops.get("dispatch_key") else "recorded before the rule"


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
    roundtrip_cases: int = 0  # results whose record measured round-trips inside kernels
    roundtrip_calls: int = 0  # aten calls on the device the dispatch watch saw in those
    roundtrip_unmeasured: Counter = field(default_factory=Counter)  # why not -> results
    unwatched: int = 0  # results with no ops record (compiled regions are not watched)
    ops: Counter = field(default_factory=Counter)  # (kind, op) -> calls
    cases_of: dict = field(default_factory=lambda: defaultdict(set))  # (kind, op) -> names

    @property
    def measured(self) -> bool:
        return self.dispatcher_cases > 0 or self.vendor_cases > 0

    @property
    def fallback_ops(self) -> set[str]:
        return {op for kind, op in self.ops if kind in (DISPATCHER, VENDOR)}

    @property
    def roundtrip_ops(self) -> set[str]:
        """Labels ("host round-trip inside aten::mul.Tensor") of the ops whose kernel left."""
        return {op for kind, op in self.ops if kind == ROUNDTRIP}

    def roundtrip_stat(self, label: str = "host round-trips inside kernels") -> Stat:
        """The ops whose own kernel copied to and from the host, with what measured it; "not
        measured" (and why) where the dispatch watch ran in no case."""
        if not self.roundtrip_cases:
            return Stat(label, "not measured", fmt.text, self.roundtrip_gap() or "no case")
        ops = sorted(self.roundtrip_ops)
        note = self.roundtrip_sources() + (f"; {_first(ops)}" if ops else "")
        gap = self.roundtrip_gap()
        return Stat(label, len(ops), fmt.number, note + (f"; not measured in {gap}" if gap else ""))

    def roundtrip_sources(self) -> str:
        cases = fmt.plural(self.roundtrip_cases, "case")
        return f"dispatcher nesting over {cases}, {self.roundtrip_calls:,} aten calls"

    def roundtrip_gap(self) -> str:
        """The results the round-trip rule did not measure, by reason ("" if none)."""
        gaps = [f"{fmt.plural(n, 'case')}: {why}" for why, n in self.roundtrip_unmeasured.items()]
        if self.unwatched:
            why = "no ops record (a compiled case, or one that ended before its eager step)"
            gaps.append(f"{fmt.plural(self.unwatched, 'case')}: {why}")
        return "; ".join(gaps)

    def stat(self, label: str = "host-fallback ops") -> Stat:
        """The count of ops that fell back, with what measured it; "unknown" when nothing did."""
        if self.on_cpu and not self.measured:
            return Stat(label, "n/a", fmt.text, "the device is the CPU: nothing to fall back from")
        if not self.measured:
            why = "no case recorded the ops it ran" if not self.cases else "no source could tell"
            return Stat(label, "unknown", fmt.text, why)
        ops = sorted(self.fallback_ops)
        return Stat(
            label, len(ops), fmt.number, self.sources() + (f"; {_first(ops)}" if ops else "")
        )

    def sources(self) -> str:
        parts = []
        if self.dispatcher_cases:
            parts.append(f"dispatcher over {fmt.plural(self.dispatcher_cases, 'case')}")
        if self.vendor_cases:
            parts.append(f"backend record over {fmt.plural(self.vendor_cases, 'case')}")
        return " and ".join(parts)


def host_stats(fallbacks: Fallbacks) -> list[Stat]:
    """The host-fallback count and the host round-trips inside kernels ("not measured" where the
    dispatch watch did not run: the CPU among them)."""
    return [fallbacks.stat(), fallbacks.roundtrip_stat()]


def _first(ops: list[str], n: int = 4) -> str:
    return ", ".join(ops[:n]) + (f" (+{len(ops) - n})" if len(ops) > n else "")


def _roundtrips(ops: dict, out: Fallbacks) -> list[tuple[str, str, int]]:
    """The record's round-trips inside kernels as table entries, counting what measured them."""
    why = _roundtrip_unmeasured(ops)
    if why is not None:
        out.roundtrip_unmeasured[why] += 1
        return []
    out.roundtrip_cases += 1
    out.roundtrip_calls += int(sum((ops.get("dispatch_kinds") or {}).values()))
    return [(ROUNDTRIP, roundtrip_label(op), n) for op, n in ops["dispatch_roundtrips"].items()]


def collect(results: list[Result], name: Callable[[Result], str]) -> Fallbacks:
    out = Fallbacks()
    for r in results:
        ops = r.diagnostics.get("ops")
        if not isinstance(ops, dict):
            out.unwatched += 1
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
        entries += _roundtrips(ops, out)
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
    if fallbacks.roundtrip_cases:
        title += f"; round-trips inside kernels from {fallbacks.roundtrip_sources()}"
    columns = [Column("kind"), Column("op"), num("calls"), num("cases"), Column("e.g.")]
    return Table(columns, rows, title, True)
