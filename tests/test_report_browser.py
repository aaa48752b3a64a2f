"""The HTML scorecard of a real run in a real browser (Debian's Chromium via Playwright): it opens
offline without console errors, its chart renders one marker per passing case, and the drill-down
filter and sort work. Set TRAINREADY_REPORT_SCREENSHOT=docs/report.png to save a screenshot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.explorer_first_paint import CHROMIUM, CHROMIUM_ARGS
from trainready import api
from trainready.core.store import Store
from trainready.report import write_reports

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="needs Playwright for Python (pip install playwright)"
)
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM} (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scorecard")
    summary = api.run(["matmul"], device="cpu", out=out, filter="matmul/Qwen3-8B/*")
    with Store(out) as store:
        paths = write_reports(store, [summary.run_id], out / "report", ["html"])
    return paths["html"]


def test_scorecard_in_a_real_browser(report_html):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1800})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report_html.as_uri())
            page.wait_for_load_state("load")

            assert errors == []
            assert all(u.startswith("file://") for u in requests)  # nothing fetched from anywhere
            # The MFU chart: one marker per passing case (4 Qwen3-8B shapes), drawn with a size.
            chart = page.locator("#suite-matmul svg").first
            box = chart.bounding_box()
            assert box and box["width"] > 300 and box["height"] > 200
            assert chart.locator("circle, path[d], rect").count() >= 4

            # The drill-down of all cases: filter by text, then by status, then sort.
            drill = page.locator("#suite-matmul .drill").last
            count = drill.locator(".count")
            assert count.inner_text() == "4 of 4 rows"
            drill.locator("input").fill("gate_proj")
            assert count.inner_text() == "2 of 4 rows"
            visible = drill.locator("tbody tr:not([hidden])")
            assert all("gate_proj" in t for t in visible.all_inner_texts())
            drill.locator("input").fill("")
            drill.locator("select").select_option("pass")
            assert count.inner_text() == "4 of 4 rows"
            header = drill.locator("thead th").first
            header.click()
            ids = [r.split("\t")[0] for r in drill.locator("tbody tr").all_inner_texts()]
            assert ids == sorted(ids)
            header.click()
            ids = [r.split("\t")[0] for r in drill.locator("tbody tr").all_inner_texts()]
            assert ids == sorted(ids, reverse=True)

            shot = os.environ.get("TRAINREADY_REPORT_SCREENSHOT")
            if shot:
                page.screenshot(path=shot, full_page=False)
        finally:
            browser.close()
