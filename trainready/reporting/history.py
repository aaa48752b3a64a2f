"""The trajectory over runs: pass rates and headline numbers of every run in a store, oldest first,
so a device's progress (or a regression) across software versions is visible at a glance."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainready.core.store import RunRecord, Store
from trainready.reporting import fmt
from trainready.reporting.blocks import Chart, Column, Section, Table, num
from trainready.reporting.charts import Axis, Point, Series, xy_chart
from trainready.reporting.model import build_run
from trainready.reporting.sections import headlines


@dataclass
class HistoryRow:
    run_id: str
    created_at: float
    device: str
    torch: str
    git_sha: str
    preset: str
    pass_rate: dict[str, float | None]  # suite -> passed / planned (and "all")
    headline: dict[str, float] = field(default_factory=dict)  # numeric headline stats
    # How each headline reads (MFU as a percentage...), as the scorecard shows it; not in JSON.
    shows: dict[str, Callable[[Any], str]] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "shows"}


def _device_name(run: RunRecord) -> str:
    device = run.env.get("device")
    return (
        str(device.get("name")) if isinstance(device, dict) and device.get("name") else run.device
    )


def collect(store: Store, device: str | None = None) -> list[HistoryRow]:
    """One row per run, oldest first; `device` filters by device string or device name."""
    rows = []
    for rec in store.list_runs():
        name = _device_name(rec)
        if device and device not in (rec.device, name):
            continue
        view = build_run(rec, store.results(rec.run_id), name, store.planned(rec.run_id))
        rates = {s: summary.pass_rate for s, summary in view.suites.items()}
        rates["all"] = view.total.pass_rate
        numeric = [st for st in headlines(view) if isinstance(st.value, (int, float))]
        stats = {st.label: float(st.value) for st in numeric}
        rows.append(
            HistoryRow(
                run_id=rec.run_id,
                created_at=rec.created_at,
                device=name,
                torch=str(rec.env.get("torch", "?")),
                git_sha=str(rec.env.get("git_sha") or "")[:12],
                preset=rec.preset,
                pass_rate=rates,
                headline=stats,
                shows={st.label: st.show for st in numeric},
            )
        )
    return rows


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def sections(rows: list[HistoryRow]) -> list[Section]:
    suites = list(dict.fromkeys(s for r in rows for s in r.pass_rate))
    stats = list(dict.fromkeys(k for r in rows for k in r.headline))
    columns = [Column("run"), Column("date (UTC)"), Column("device"), Column("torch"),
               Column("git"), Column("preset")]  # fmt: skip
    columns += [num(f"pass {s}", fmt.percent) for s in suites]
    shows = {k: show for r in rows for k, show in r.shows.items()}
    columns += [num(k, shows.get(k, fmt.number)) for k in stats]
    table_rows = [
        [r.run_id, _when(r.created_at), r.device, r.torch, r.git_sha, r.preset]
        + [r.pass_rate.get(s) for s in suites]
        + [r.headline.get(k) for k in stats]
        for r in rows
    ]
    table = Table(columns, table_rows, "Runs, oldest first", drill_down=True)
    series = [
        Series(
            f"pass rate {s}",
            [
                Point(
                    i + 1,
                    100 * r.pass_rate[s],
                    f"{r.run_id} {r.device}: {fmt.percent(r.pass_rate[s])}",
                )
                for i, r in enumerate(rows)
                if r.pass_rate.get(s) is not None
            ],
            line=True,
        )
        for s in suites
    ]
    chart = Chart(
        xy_chart(
            series,
            Axis("run (oldest first)", integer=True),
            Axis("pass rate %", zero=True),
            title="Pass rate over runs",
        ),  # fmt: skip
        "Pass rate (passed / planned) per suite over the runs in this store",
    )
    return [Section("History", [chart, table], "history")]


FORMATS = ("md", "json", "html")
# What Markdown and the terminal say where the chart would be: the command that draws it.
CHART_NOTE = "trainready history -f html -o history.html draws it"


def render(rows: list[HistoryRow], fmt_name: str) -> str:
    from trainready.core.config import check_choice

    check_choice("history format", fmt_name, FORMATS)
    if fmt_name == "json":
        return json.dumps([r.to_json() for r in rows], indent=2, sort_keys=True)
    if fmt_name == "md":
        from trainready.reporting.markdown import page as md_page

        return md_page("trainready history", sections(rows), chart_note=CHART_NOTE)
    from trainready.reporting.html import page as html_page

    return html_page("trainready history", fmt.plural(len(rows), "run"), sections(rows))


def print_terminal(console: Any, rows: list[HistoryRow]) -> None:
    """The history for a terminal: the table, drawn (no Markdown), and where the chart is."""
    from trainready.reporting.terminal import print_sections

    print_sections(console, sections(rows), chart_note=CHART_NOTE)
