"""The FlexAttention pass table as an evaluation publishes it: "89/96 passed", by variant and by
(B, S), the failure categories, compile time and speed per case, and a heat map of the grid.

Counts are over planned cases: a case without a result counts as "not run", never as a pass.
TFLOP/s comes twice, labelled: the work of the blocks the mask keeps (what the kernel must do)
and the dense-equivalent work (what the same time would be worth without the mask). A median
TFLOP/s reads "inconclusive" when a case's adaptive sampling (`metrics.sampler`) ran out of budget
before its median time's 95% interval came within ±5%, with the time and option that would
likely conclude it.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html import escape

from trainready.core.case import Case, Result
from trainready.metrics.sampler import budget_why
from trainready.reporting import fmt
from trainready.reporting.blocks import STATUS, Block, Chart, Column, Stat, Stats, Table, num
from trainready.reporting.model import NOT_RUN, Report, RunView, compile_note, finite, reason

SUITE = "flex"
KEY_METRICS = ("compile_s", "run_ms", "tflops", "tflops_dense")
METRIC_GOALS = {
    "compile_s": "lower",
    "run_ms": "lower",
    "tflops": "higher",
    "tflops_dense": "higher",
}
PASSES = {"fwd": "fwd", "fwd_bwd": "fwd+bwd"}


@dataclass(frozen=True)
class Entry:
    """A planned case and how it ended (NOT_RUN when it has no result)."""

    case: Case
    status: str
    phase: str | None
    result: Result | None

    @property
    def pass_(self) -> str:
        return str(self.case.params.get("pass", "?"))

    @property
    def category(self) -> str:
        """'timeout (compile)', 'fail_numerics', ...: the status, with the phase for timeouts."""
        if self.status == "timeout" and self.phase:
            return f"timeout ({self.phase})"
        return fmt.status(self.status)


def entries(run: RunView) -> list[Entry]:
    done = [Entry(r.case, r.status, r.phase, r) for r in run.in_suite(SUITE)]
    return done + [Entry(c, NOT_RUN, None, None) for c in run.not_run_in(SUITE)]


def _passes(items: Iterable[Entry]) -> list[str]:
    present = {e.pass_ for e in items}
    return [p for p in PASSES if p in present] + sorted(present - set(PASSES))


def pass_count(items: list[Entry]) -> str:
    """'89/96'."""
    return f"{sum(e.status == 'pass' for e in items)}/{len(items)}"


def categories(items: list[Entry]) -> str:
    """'7 timeout (compile), 1 oom': every way the non-passing cases ended, most common first."""
    counts = Counter(e.category for e in items if e.status != "pass")
    return ", ".join(f"{n} {c}" for c, n in counts.most_common())


# --- headlines and the pass tables ----------------------------------------------------------------


def headlines(run: RunView) -> list[Stat]:
    items = entries(run)
    return [
        Stat(f"flex {PASSES.get(p, p)} passed", pass_count(at), note=categories(at))
        for p in _passes(items)
        if (at := [e for e in items if e.pass_ == p])
    ]


def _shape_key(case: Case) -> tuple:
    p = case.params
    return tuple(p.get(k, 0) for k in ("B", "Hq", "Hkv", "S", "D"))


def pass_table(
    report: Report, title: str, group_name: str, key: Callable[[Case], tuple], label: str
) -> Table:
    """One row per group (per run): passed/planned for each pass, and how the rest ended."""
    passes = _passes(e for run in report.runs for e in entries(run))
    columns = [
        *([Column("run")] if report.multi else []),
        Column(group_name),
        *(Column(PASSES.get(p, p)) for p in passes),
        Column("not passed"),
    ]
    rows = []
    for run in report.runs:
        groups: dict[tuple, list[Entry]] = defaultdict(list)
        for e in entries(run):
            groups[key(e.case)].append(e)
        for group in sorted(groups, key=lambda g: tuple(str(x) for x in g)):
            items = groups[group]
            cells = [pass_count([e for e in items if e.pass_ == p]) for p in passes]
            rows.append(
                [
                    *([run.label] if report.multi else []),
                    label.format(*group),
                    *cells,
                    categories(items),
                ]
            )
    return Table(columns, rows, title)


def _variant_order(case: Case) -> tuple:
    return (str(case.params.get("variant", "?")),)


def _batch_seq(case: Case) -> tuple:
    return (case.params.get("B", 0), case.params.get("S", 0))


def categories_table(report: Report) -> Table:
    """Every (pass, category) that did not pass: how many, one example case and its reason."""
    columns = [
        *([Column("run")] if report.multi else []),
        Column("pass"),
        STATUS,
        Column("phase"),
        num("cases"),
        Column("example"),
        Column("reason"),
    ]
    rows = []
    for run in report.runs:
        groups: dict[tuple, list[Entry]] = defaultdict(list)
        for e in entries(run):
            if e.status != "pass":
                groups[(e.pass_, e.status, e.phase or "")].append(e)
        for (pass_, status, phase), items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            first = items[0]
            rows.append(
                [
                    *([run.label] if report.multi else []),
                    PASSES.get(pass_, pass_),
                    status,
                    phase or None,
                    len(items),
                    first.case.id,
                    reason(first.result) if first.result else "planned, no result",
                ]
            )
    return Table(columns, rows, "Failure categories (and unsupported or not run)")


# --- compile time and speed per case ------------------------------------------------------------------


def speed_table(report: Report) -> Table:
    columns = [
        *([Column("run")] if report.multi else []),
        Column("variant"),
        Column("pass"),
        num("B"),
        Column("Hq/Hkv"),
        num("S"),
        num("D"),
        num("compile s"),
        num("run ms"),
        num("TFLOP/s (kept blocks)"),
        num("TFLOP/s (dense-equiv.)"),
        num("kept blocks %", lambda v: f"{v * 100:.0f}"),
        STATUS,
        Column("note"),
    ]
    rows = []
    for run in report.runs:
        for e in sorted(entries(run), key=lambda e: (_variant_order(e.case), _shape_key(e.case))):
            p, m = e.case.params, (e.result.metrics if e.result else {})
            rows.append(
                [
                    *([run.label] if report.multi else []),
                    p.get("variant"),
                    PASSES.get(e.pass_, e.pass_),
                    p.get("B"),
                    f"{p.get('Hq')}/{p.get('Hkv')}",
                    p.get("S"),
                    p.get("D"),
                    m.get("compile_s"),
                    m.get("run_ms"),
                    m.get("tflops"),
                    m.get("tflops_dense"),
                    m.get("block_share"),
                    e.status,
                    compile_note(e.result),
                ]
            )
    dtypes = sorted(
        {str(d) for run in report.runs for e in entries(run) if (d := e.case.params.get("dtype"))}
    )
    caption = "Compile time (first call) and speed per case" + (
        f" ({', '.join(dtypes)})" if dtypes else ""
    )
    caption += (
        "; TFLOP/s counts the work of the blocks the mask keeps, and the dense-equivalent work"
        " over the same time"
    )
    threads = sorted(
        {
            int(n)
            for run in report.runs
            for e in entries(run)
            if e.result and finite(n := e.result.diagnostics.get("cpu_threads"))
        }
    )
    if threads:  # a CPU run: each case on CPU_CORES threads (suites/flex/suite.py)
        caption += f"; timed on {'/'.join(map(str, threads))} CPU thread(s) per case"
    return Table(columns, rows, caption, drill_down=True)


def _median(results: list[Result], metric: str) -> float | None:
    values = [r.metrics[metric] for r in results if finite(r.metrics.get(metric))]
    return statistics.median(values) if values else None


def speed_stats(report: Report) -> Stats | None:
    stats = []
    for run in report.runs:
        prefix = f"{run.label}: " if report.multi else ""
        passed = [e.result for e in entries(run) if e.result and e.status == "pass"]
        for p in _passes(e for e in entries(run) if e.status == "pass"):
            at = [r for r in passed if r.case.params.get("pass") == p]
            label = PASSES.get(p, p)
            compile_s, tflops = _median(at, "compile_s"), _median(at, "tflops")
            if compile_s is not None:
                stats.append(Stat(f"{prefix}median {label} compile", compile_s, _seconds))
            if tflops is not None:
                stats.append(tflops_stat(f"{prefix}median {label} TFLOP/s", tflops, at))
    return Stats(stats) if stats else None


def tflops_stat(label: str, tflops: float, results: list[Result]) -> Stat:
    """The median TFLOP/s of these cases, or "inconclusive" where a case's sampling budget ran
    out (`sampler.budget_why`), the measured median then in the note."""
    why = budget_why([r.diagnostics.get("sampling") for r in results])
    if why:
        return Stat(label, "inconclusive", fmt.text, f"{why}; measured {fmt.number(tflops)}")
    return Stat(label, tflops, fmt.number, "kept blocks")


def _seconds(value: float) -> str:
    return f"{fmt.number(value)} s"


# --- the heat map ---------------------------------------------------------------------------------

CELL, GAP, LEFT, TOP = 18, 2, 190, 120  # px: cell side, gap, row labels' width, header height
LABEL_RIGHT = 70  # px a column label at -60 degrees reaches right of its column
CHAR_W = 7  # px per character at font-size 11, roughly


def _column_label(key: tuple) -> str:
    b, hq, hkv, s, d = key
    return f"B{b} H{hq}/{hkv} S{s} D{d}"


def heat_map(run: RunView) -> str:
    """Status of every case as an SVG grid: a row per (variant, pass), a column per shape."""
    items = entries(run)
    rows = sorted({(str(e.case.params.get("variant")), e.pass_) for e in items})
    cols = sorted({_shape_key(e.case) for e in items})
    at = {(str(e.case.params.get("variant")), e.pass_, _shape_key(e.case)): e for e in items}
    present = [s for s in fmt.STATUS_COLORS if any(e.status == s for e in items)]
    # Room for the last column's label, which leans right, and for the legend.
    width = max(LEFT + len(cols) * (CELL + GAP) + LABEL_RIGHT, _legend_end(present))
    grid_h = len(rows) * (CELL + GAP)
    height = TOP + grid_h + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" role="img" aria-label="FlexAttention status over the grid"'
        ' class="chart" font-family="system-ui, sans-serif" font-size="11"'
        ' style="max-width:100%;height:auto">'
    ]
    for j, key in enumerate(cols):
        x = LEFT + j * (CELL + GAP) + CELL / 2
        out.append(
            f'<text transform="translate({x:.0f},{TOP - 6}) rotate(-60)">'
            f"{escape(_column_label(key))}</text>"
        )
    for i, (variant, pass_) in enumerate(rows):
        y = TOP + i * (CELL + GAP)
        out.append(
            f'<text x="{LEFT - 6}" y="{y + CELL - 5}" text-anchor="end">'
            f"{escape(variant)} {escape(PASSES.get(pass_, pass_))}</text>"
        )
        for j, key in enumerate(cols):
            e = at.get((variant, pass_, key))
            if e is not None:
                out.append(_cell(e, LEFT + j * (CELL + GAP), y))
    out.append(_legend(present, TOP + grid_h + 20))
    out.append("</svg>")
    return "".join(out)


def _cell(e: Entry, x: int, y: int) -> str:
    why = reason(e.result) if e.result else ""
    tip = f"{e.case.id}: {e.category}" + (f" — {why}" if why else "")
    color = fmt.STATUS_COLORS.get(e.status, "#000000")
    return (
        f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{color}">'
        f"<title>{escape(tip)}</title></rect>"
    )


def _legend_step(status: str) -> int:
    return 24 + CHAR_W * len(fmt.status(status))


def _legend_end(statuses: list[str]) -> int:
    return LEFT + sum(_legend_step(s) for s in statuses)


def _legend(statuses: list[str], y: int) -> str:
    parts, x = [], LEFT
    for s in statuses:
        parts.append(
            f'<rect x="{x}" y="{y - 10}" width="12" height="12" '
            f'fill="{fmt.STATUS_COLORS[s]}"/><text x="{x + 16}" y="{y}">{escape(fmt.status(s))}</text>'
        )
        x += _legend_step(s)
    return "".join(parts)


# --- the section ----------------------------------------------------------------------------------


def section(report: Report, suite: str) -> list[Block]:
    blocks: list[Block] = []
    stats = speed_stats(report)
    if stats:
        blocks.append(stats)
    blocks.append(pass_table(report, "Pass table by variant", "variant", _variant_order, "{}"))
    blocks.append(
        pass_table(report, "Pass table by batch and sequence", "B, S", _batch_seq, "B={} S={}")
    )
    blocks.append(categories_table(report))
    for run in report.runs:
        if entries(run):
            caption = "Status over the grid: a row per variant and pass, a column per shape"
            caption += f" ({run.label})" if report.multi else ""
            blocks.append(Chart(heat_map(run), caption))
    blocks.append(speed_table(report))
    return blocks
