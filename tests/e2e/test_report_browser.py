"""The HTML scorecard of a real run in a real browser (Debian's Chromium via Playwright): it opens
offline without console errors, its chart renders one marker per passing case, and the drill-down
filter and sort work; a comparison of two runs (`report RUN --compare RUN2`) shows both runs'
values side by side, their ratio, what newly fails and its loss curves.
Set TRAINREADY_REPORT_SCREENSHOT=docs/report.png to save a screenshot."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from benchmarks.explorer_first_paint import CHROMIUM, CHROMIUM_ARGS
from tests.support.browser_marks import browser_marks
from trainready.cli.app import app
from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="needs Playwright for Python (pip install playwright)"
)
pytestmark = browser_marks(CHROMIUM, "Chromium", "chromium")


@contextlib.contextmanager
def opened(html: Path, width: int = 1300):
    """(page, console errors, requested URLs) of `html` in headless Chromium, closed after."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 1800})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            yield page, errors, requests
        finally:
            browser.close()


def test_scorecard_in_a_real_browser(scorecard_html):
    with opened(scorecard_html) as (page, errors, requests):
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

        # The verdict first, in the first screen: a line per dimension, linked to its evidence.
        readiness = page.locator("#readiness")
        assert readiness.bounding_box()["y"] < 400
        assert page.locator("main > section").first.get_attribute("id") == "readiness"
        rows = readiness.locator("tbody tr")
        assert rows.count() == 9
        badges = readiness.locator("tbody .vd").all_inner_texts()
        assert set(badges) <= {"ready", "partial", "not ready", "not tested"}
        assert badges[0] == "not tested"  # correctness: this run has no parity suite
        assert "not tested" in readiness.locator(".stat .v").inner_text() or "partial" in (
            readiness.locator(".stat .v").inner_text()
        )
        link = rows.filter(has_text="throughput").locator("a")
        assert link.inner_text() == "Suite: matmul"
        link.click()
        assert page.evaluate("location.hash") == "#suite-matmul"
        # Wide tables scroll inside their box: the page itself never scrolls sideways.
        assert page.evaluate("document.documentElement.scrollWidth") <= 1300

        shot = os.environ.get("TRAINREADY_REPORT_SCREENSHOT")
        if shot:
            page.screenshot(path=shot, full_page=False)


def test_scorecard_at_a_narrow_width(scorecard_html):
    """On a phone-sized window the verdict still opens the page, and tables wider than the
    window scroll inside their own box instead of widening the page."""
    with opened(scorecard_html, width=400) as (page, errors, _):
        assert errors == []
        assert page.evaluate("document.documentElement.scrollWidth") <= 400
        assert page.locator("#readiness").bounding_box()["y"] < 600
        boxes = page.evaluate(
            """() => [...document.querySelectorAll('.tablebox')].map(b => ({
                scrolls: b.scrollWidth > b.clientWidth, right: b.getBoundingClientRect().right}))"""
        )
        assert all(b["right"] <= 400 for b in boxes)
        assert sum(b["scrolls"] for b in boxes) >= 2  # e.g. the verdict and the matmul shapes
        table = page.locator("#suite-matmul .drill .tablebox").first
        table.evaluate("b => { b.scrollLeft = b.scrollWidth; }")
        assert table.evaluate("b => b.scrollLeft") > 0  # scrolled to its last column


# Two hand-made runs with planted differences: a parity case that passes on the reference and
# fails on the primary, a matmul case 1.5x faster on the primary; and a case whose loss is NaN on
# both (an infinite deviation: the worst, wherever a table is sorted).
LLAMA = Case("parity", "hf/llama/eager/fp32", {"source": "hf", "model": "llama", "dtype": "fp32"})
NAN = Case("parity", "hf/mixtral/eager/fp32", {"source": "hf", "model": "mixtral", "dtype": "fp32"})
MATMUL = Case("matmul", "Qwen3-8B/q_proj/M128/fwd", {"model": "Qwen3-8B", "op": "q_proj", "M": 128})
REF_CURVE = [7.0 - 0.5 * i for i in range(8)]


def _llama(status: str, drift: float) -> Result:
    device = [r * (1 + drift * i) for i, r in enumerate(REF_CURVE)]
    curve = {"rel_tol": 5e-3, "reference": REF_CURVE, "device": device}
    error = "loss curve diverges from the reference at step 2" if status != "pass" else ""
    return Result(LLAMA, status, {"curve_max_rel_dev": drift * 7}, {"curve": curve, "error": error})


def _store(path: Path, device: str, llama: Result, tflops: float) -> None:
    nan = [*REF_CURVE[:3], float("nan")]
    diagnostics = {"curve": {"rel_tol": 5e-3, "reference": REF_CURVE, "device": nan}}
    with Store(path) as store:
        env = {"device": {"name": device}}
        store.add_run(RunRecord(device, 1.7e9, ["parity", "matmul"], device, "quick", env=env))
        store.add_result(device, llama)
        metrics = {"curve_max_rel_dev": float("inf")}
        store.add_result(device, Result(NAN, "fail_numerics", metrics, diagnostics))
        store.add_result(device, Result(MATMUL, "pass", {"tflops": tflops}))


@pytest.fixture(scope="module")
def comparison_html(tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    root = tmp_path_factory.mktemp("compare")
    _store(root / "h200", "H200", _llama("fail_numerics", 0.004), tflops=450.0)
    _store(root / "ref", "B200", _llama("pass", 0.0001), tflops=300.0)
    out = root / "cmp.html"
    args = ["report", str(root / "h200"), "--compare", str(root / "ref"), "-f", "html", "-o"]
    result = CliRunner().invoke(app, [*args, str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_comparison_in_a_real_browser(comparison_html):
    with opened(comparison_html) as (page, errors, _):
        assert errors == []

        # What newly fails, named where a reader looks first.
        newly = page.locator("#compare-B200 table", has_text="Newly failing")
        assert newly.is_visible()
        row = newly.locator("tbody tr")
        assert row.count() == 1
        assert row.inner_text().split("\t")[:3] == [LLAMA.id, "pass", "fail_numerics"]
        assert "loss curve diverges" in row.inner_text()
        # Filtering the changes by status looks at every run's: the primary's fail_numerics
        # (the second status column) is found too.
        changes = page.locator("#compare-B200 .drill", has_text="All status changes")
        changes.locator("select").select_option("fail_numerics")
        assert changes.locator(".count").inner_text() == "1 of 1 row"
        changes.locator("select").select_option("pass")
        assert changes.locator(".count").inner_text() == "1 of 1 row"

        # Side by side: both runs' values of the aligned case, and their ratio.
        side = page.locator("#suite-matmul .drill", has_text="matmul side by side")
        head = side.locator("thead th").all_inner_texts()
        assert head == [
            "case", "H200", "B200", "tflops H200", "tflops B200", "tflops ratio vs B200"
        ]  # fmt: skip
        cells = side.locator("tbody tr").first.locator("td").all_inner_texts()
        assert cells == [MATMUL.id, "pass", "pass", "450.0", "300.0", "1.5×"]
        assert side.locator(".count").inner_text() == "1 of 1 row"

        # The parity case that fails on one run: both runs' curves in its panel, drawn.
        chart = page.locator("#suite-parity figure", has_text="Loss curves of")
        assert chart.is_visible()
        box = chart.locator("svg").bounding_box()
        assert box and box["width"] > 500 and box["height"] > 200
        panel = chart.locator("g.panel", has_text=LLAMA.name)  # titled without "parity/"
        names = [g.get_attribute("data-name") for g in panel.locator("g.series").all()]
        assert names == ["B200", "H200", "float64 reference"]
        for name in names:
            line = panel.locator(f'g.series[data-name="{name}"] polyline')
            assert line.bounding_box()["width"] > 100  # rendered across the plot

        # Sorted by deviation, worst first: the infinite one leads (it is no blank).
        cases = page.locator("#suite-parity .drill", has_text="H200: Every parity case")
        header = cases.locator("thead th", has_text="curve max rel dev")
        header.click()
        header.click()
        first = cases.locator("tbody tr").first.inner_text()
        assert "mixtral" in first and "inf" in first


def _matmul_store(path: Path, device: str, mfu: dict[int, float]) -> None:
    with Store(path) as store:
        env = {"device": {"name": device}}
        store.add_run(RunRecord(path.name, 1.7e9, ["matmul"], device, "quick", env=env))
        for m, value in mfu.items():
            case = Case("matmul", f"Qwen3-8B/q_proj/M{m}/fwd", {"M": m, "N": 4096, "K": 4096})
            metrics = {"mfu": value, "tflops": value * 900, "gflop": 2 * m * 4096 * 4096 / 1e9}
            diagnostics = {"peak_label": "vs datasheet peak"}
            store.add_result(path.name, Result(case, "pass", metrics, diagnostics))


def test_a_comparison_chart_keeps_every_legend_name_readable(tmp_path):
    """Runs named by long device names: the MFU chart's legend moves below the plot, and every
    entry (which run, which M) is drawn whole inside the chart, none over another."""
    from typer.testing import CliRunner

    _matmul_store(tmp_path / "a", "AMD Instinct MI300X OAM (gfx942)", {1: 0.02, 128: 0.4})
    _matmul_store(tmp_path / "b", "NVIDIA H200 141GB HBM3e (SXM)", {1: 0.03, 128: 0.5})
    out = tmp_path / "cmp.html"
    args = ["report", str(tmp_path / "a"), "--compare", str(tmp_path / "b"), "-f", "html"]
    assert CliRunner().invoke(app, [*args, "-o", str(out)]).exit_code == 0
    with opened(out) as (page, errors, _):
        assert errors == []
        legend = page.evaluate(
            """() => {
                const svg = document.querySelector('#suite-matmul svg');
                const box = svg.getBoundingClientRect();
                return [...svg.querySelectorAll('.legend text')].map(t => {
                    const r = t.getBoundingClientRect();
                    return {text: t.textContent, left: r.left - box.left, right: r.right - box.left,
                            top: r.top, bottom: r.bottom, width: box.width};
                });
            }"""
        )
        names = sorted(e["text"] for e in legend)
        assert names == sorted(
            f"{d} M={m}"
            for d in ("AMD Instinct MI300X OAM (gfx942)", "NVIDIA H200 141GB HBM3e (SXM)")
            for m in (1, 128)
        )
        for e in legend:
            assert e["left"] >= 0 and e["right"] <= e["width"], e  # whole, inside the chart
        for a in legend:
            for b in legend:
                if a is not b:
                    apart = a["right"] <= b["left"] or b["right"] <= a["left"]
                    assert apart or a["bottom"] <= b["top"] or b["bottom"] <= a["top"], (a, b)
