"""The explorer in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright
loads a trace, a click on a kernel shows its details and its dependencies, search finds names.

Set TRAINREADY_EXPLORER_SCREENSHOT=docs/explorer.png to save the page after the click.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from benchmarks.explorer_first_paint import CHROMIUM, CHROMIUM_ARGS, write_trace
from tests.support.browser_marks import browser_marks
from trainready.profile.server import Library
from trainready.profile.trace import KIND_KERNEL

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="needs Playwright for Python (pip install playwright)"
)
pytestmark = browser_marks(CHROMIUM, "Chromium", "chromium")


@pytest.fixture
def server(tmp_path, serve):
    path = tmp_path / "train_step.json"
    write_trace(path, 6_000)
    return serve(Library(files=[path]))


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    pg = browser.new_page(viewport={"width": 1600, "height": 640})
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(f"{e}\n{e.stack}"))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield pg, errors
    pg.close()


def test_click_an_event_shows_details_and_dependencies(server, page):
    pg, errors = page
    pg.goto(server.url)
    pg.wait_for_selector("body[data-painted='1']", timeout=20_000)
    assert pg.locator("#summary").inner_text().count("NVIDIA H100") == 1

    library = server.library
    loaded = library.get(next(iter(library.entries())))
    trace = loaded.trace
    kernel = int(np.flatnonzero(trace.kind == KIND_KERNEL)[40])
    name = trace.strings[trace.name[kernel]]
    place = loaded.view.place(kernel)
    pg.evaluate("p => explorer.reveal(p)", place)
    pg.wait_for_function(
        "id => explorer.settled() && explorer.state.data.rows.some(r => r.ev.id.includes(id))",
        arg=kernel,
        timeout=10_000,
    )
    xy = pg.evaluate("p => explorer.locate(p)", place)
    pg.mouse.move(xy["x"], xy["y"])
    assert pg.locator("#tip").inner_text().startswith(name)  # hover names it
    pg.mouse.click(xy["x"], xy["y"])  # a real click on the drawn kernel

    pg.wait_for_function(
        "name => document.querySelector('#event-name')?.textContent === name", arg=name
    )
    details = pg.locator("#event").inner_text()
    assert "kernel" in details and "[132,1,1]" in details.replace(" ", "")
    assert "of aten::addmm, which launched it" in details and "TFLOP/s" in details
    assert "model.py:1" in details  # the user source line its launch came from
    assert "h100-sxm bf16 datasheet peak" in details  # MFU against a named peak
    launch = pg.locator("#event ul.deps li[data-type='launch']")
    assert launch.count() == 1 and "cudaLaunchKernel" in launch.inner_text()
    assert pg.locator("#event ul.deps li[data-type='stream']").count() == 2  # before and after
    legend = pg.locator("#legend").inner_text()
    assert "launch → kernel" in legend and "same-stream order" in legend

    pg.focus("#canvas")
    launched_at = launch.evaluate("() => explorer.state.details.dependencies[0].place.ts")
    for _ in range(30):  # zoom out with the keyboard until the launch is in view
        if pg.evaluate("t => explorer.state.t0 < t", launched_at):
            break
        pg.keyboard.press("s")
    pg.wait_for_function(
        "id => explorer.settled() && explorer.state.data.rows.some(r => r.ev.id.includes(id))",
        arg=int(pg.evaluate("explorer.state.details.dependencies[0].place.id")),
    )
    if shot := os.environ.get("TRAINREADY_EXPLORER_SCREENSHOT"):
        pg.mouse.move(1, 1)  # no hover tooltip in the picture
        pg.screenshot(path=shot)

    pg.locator("#event ul.deps li[data-type='launch']").click()  # follow it to the host side
    pg.wait_for_function(
        "() => document.querySelector('#event-name')?.textContent === 'cudaLaunchKernel'"
    )
    assert "model.py(" in pg.locator("#event ul.stack").inner_text()  # its python stack

    pg.fill("#search", "nccl")
    pg.press("#search", "Enter")
    pg.wait_for_selector("#search-results.active")
    assert "4 events match" in pg.locator("#search-results").inner_text()
    assert errors == []


def test_upload_from_the_page_then_compare(tmp_path, serve, page):
    pg, errors = page
    team = tmp_path / "team"
    team.mkdir()
    write_trace(team / "before.json", 3_000)
    srv = serve(Library(directory=team))
    pg.goto(srv.url)
    pg.wait_for_selector("body[data-painted='1']", timeout=20_000)
    assert pg.locator("#upload").is_visible()

    box = pg.locator("#canvas").bounding_box()
    x, y = box["x"] + box["width"] * 0.6, box["y"] + 100
    span = pg.evaluate("explorer.state.t1 - explorer.state.t0")
    pg.mouse.move(x, y)
    pg.mouse.wheel(0, -400)  # wheel: zoom in around the pointer
    pg.wait_for_function("s => explorer.state.t1 - explorer.state.t0 < s * 0.75", arg=span)
    t0 = pg.evaluate("explorer.state.t0")
    pg.mouse.down()
    pg.mouse.move(x - 200, y, steps=5)  # drag left: later times come into view
    pg.mouse.up()
    assert pg.evaluate("explorer.state.t0") > t0
    pg.wait_for_function("() => explorer.settled()")

    write_trace(tmp_path / "after.json", 6_000, steps=3)
    pg.set_input_files("#upload-file", str(tmp_path / "after.json"))  # the page's upload button
    pg.wait_for_function("() => explorer.state.id === 'after.json' && explorer.state.meta")
    assert (team / "after.json").read_bytes() == (tmp_path / "after.json").read_bytes()

    pg.select_option("#compare", "before.json")
    pg.wait_for_selector("#comparison table")
    text = pg.locator("#comparison").inner_text()
    assert "step time" in text and "sm90_xmma_gemm" in text

    pg.set_input_files(
        "#upload-file",
        files=[{"name": "junk.json", "mimeType": "application/json", "buffer": b'{"a": 1}'}],
    )
    pg.wait_for_selector("#error:not([hidden])")
    assert "not a profiler trace" in pg.locator("#error").inner_text()
    assert sorted(p.name for p in team.iterdir()) == ["after.json", "before.json"]
    assert [e for e in errors if "422" not in e] == []  # the refused upload logs its 422
