"""The HTML scorecard of a real run in Firefox (Debian's firefox-esr, headless, driven over
WebDriver BiDi by tests/support/firefox_bidi.py), as tests/e2e/test_report_browser.py checks it in Chromium:
it opens offline without console errors, its SVG charts render with one marker per passing case,
and the drill-down filter (text, status) and the header sort work with real input.

Set TRAINREADY_REPORT_FIREFOX_SCREENSHOT=report-firefox.png to save a screenshot."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("websockets", reason="needs websockets (pip install websockets)")
from tests.support.browser_marks import browser_marks  # noqa: E402
from tests.support.firefox_bidi import FIREFOX, Firefox  # noqa: E402

pytestmark = browser_marks(FIREFOX, "Firefox", "firefox-esr")

# the drill-down of all the suite's cases (the last of its drill-down tables)
DRILL = "[...document.querySelectorAll('#suite-matmul .drill')].at(-1)"
COUNT = f"() => {DRILL}.querySelector('.count').textContent"
# the first cell of every row that is shown, in table order
SHOWN_IDS = f"""() => [...{DRILL}.querySelectorAll('tbody tr')]
    .filter(tr => !tr.hidden).map(tr => tr.cells[0].textContent)"""
# (scrolled into view first: the readiness verdict opens the page, so the suites start lower)
CENTER = f"""s => {{
    const el = {DRILL}.querySelector(s);
    el.scrollIntoView({{block: "center"}});
    const r = el.getBoundingClientRect();
    return [r.x + r.width / 2, r.y + r.height / 2];
}}"""


@pytest.fixture(scope="module")
def page(scorecard_html):
    with Firefox() as firefox:
        pg = firefox.new_page(1300, 1800)
        pg.goto(scorecard_html.as_uri())
        yield pg


def test_opens_offline_without_errors(page, scorecard_html):
    assert page.evaluate("() => document.readyState") == "complete"
    assert page.evaluate("() => location.href") == scorecard_html.as_uri()
    assert page.errors() == []
    # nothing fetched from anywhere (Firefox reports http(s) requests, not the file:// page)
    assert page.requests() == []


def test_svg_charts_render(page):
    # every chart is laid out with a size, and the MFU chart draws one marker per passing case
    sizes = page.evaluate(
        "() => [...document.querySelectorAll('svg')].map(s => s.getBoundingClientRect())"
        ".map(r => [r.width, r.height])"
    )
    assert sizes and all(w > 0 and h > 0 for w, h in sizes)
    chart = page.evaluate(
        """() => {
            const svg = document.querySelector('#suite-matmul svg');
            svg.scrollIntoView({block: "center"});  // below the verdict: bring it on screen
            const box = svg.getBoundingClientRect();
            const markers = [...svg.querySelectorAll('circle')].filter(c => c.querySelector('title'));
            return {
                width: box.width,
                height: box.height,
                titles: markers.map(c => c.querySelector('title').textContent),
                // laid out with its radius, and the topmost things at its centre include it
                drawn: markers.map(c => {
                    const r = c.getBoundingClientRect();
                    const at = document.elementsFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                    return r.width >= 6 && r.height >= 6 && at.includes(c);
                }),
            };
        }"""
    )
    assert chart["width"] > 300 and chart["height"] > 200
    assert len(chart["titles"]) == 4  # one marker per passing case: Qwen3-8B's 4 shapes
    assert all("Qwen3-8B" in t and "MFU" in t for t in chart["titles"])
    assert all(chart["drawn"])
    if shot := os.environ.get("TRAINREADY_REPORT_FIREFOX_SCREENSHOT"):
        page.screenshot(shot)


def test_drill_down_filter_and_sort(page):
    assert page.evaluate(COUNT) == "4 of 4 rows"
    page.click(*page.evaluate(CENTER, "input"))
    page.type("gate_proj")  # typed for real: the filter runs on each input event
    assert page.evaluate(COUNT) == "2 of 4 rows"
    shown = page.evaluate(SHOWN_IDS)
    assert len(shown) == 2 and all("gate_proj" in t for t in shown)
    for _ in "gate_proj":
        page.press("\ue003")  # Backspace
    assert page.evaluate(COUNT) == "4 of 4 rows"

    # the status filter: the keyboard picks the option after "all statuses" ("pass")
    page.evaluate(f"() => {DRILL}.querySelector('select').focus()")
    page.press("\ue015")  # ArrowDown
    assert page.evaluate(f"() => {DRILL}.querySelector('select').value") == "pass"
    assert page.evaluate(COUNT) == "4 of 4 rows"

    page.click(*page.evaluate(CENTER, "thead th"))  # sort by the first column, then back
    ids = page.evaluate(SHOWN_IDS)
    assert len(ids) == 4 and ids == sorted(ids)
    page.click(*page.evaluate(CENTER, "thead th"))
    assert page.evaluate(SHOWN_IDS) == sorted(ids, reverse=True)
    assert page.errors() == []
