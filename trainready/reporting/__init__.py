"""Reports of stored runs: Markdown, JSON, JUnit XML and a self-contained HTML scorecard.

    render(store, ["RUN", "REF"], "html")   # the first run is the primary; the others references
    write_reports(store, ["RUN"], "out/")   # every format, one file each

The terminal summary is `trainready.reporting.terminal.print_summary`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the renderers load on first use: `report.numbers` stays light to import
    from trainready.core.store import Store
    from trainready.reporting.model import Report

FORMATS = ("md", "json", "junit", "html")
FILE_NAMES = {
    "md": "report.md",
    "json": "report.json",
    "junit": "report.junit.xml",
    "html": "report.html",
}


def _renderers() -> dict[str, Callable[[Report], str]]:
    from trainready.reporting import html, json_report, junit, markdown

    return {
        "md": markdown.render,
        "json": json_report.render,
        "junit": junit.render,
        "html": html.render,
    }


def render(
    store: Store, run_ids: list[str], fmt: str, verdict_config: str | Path | None = None
) -> str:
    """One report of `run_ids` (primary first, compared with the rest) in format `fmt`;
    `verdict_config`: a TOML file of readiness thresholds (default: the built-in ones)."""
    from trainready.core.config import check_choice
    from trainready.reporting.build import build_report

    check_choice("report format", fmt, FORMATS)
    return _renderers()[fmt](build_report(store, run_ids, verdict_config))


def write_reports(
    store: Store,
    run_ids: list[str],
    out_dir: str | Path,
    formats: Iterable[str] = FORMATS,
    verdict_config: str | Path | None = None,
) -> dict[str, Path]:
    """Write each format to `out_dir` (report.md, report.json, ...) and return the paths."""
    from trainready.core.config import check_choice
    from trainready.reporting.build import build_report

    formats = [check_choice("report format", f, FORMATS) for f in formats]
    # Read the store once, whatever the number of formats.
    report = build_report(store, run_ids, verdict_config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths, renderers = {}, _renderers()
    for f in formats:
        paths[f] = out / FILE_NAMES[f]
        paths[f].write_text(renderers[f](report), encoding="utf-8")
    return paths


__all__ = ["FORMATS", "FILE_NAMES", "render", "write_reports"]
