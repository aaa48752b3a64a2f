"""The explorer in Firefox (issue #6: Chromium and Firefox both work): Debian's firefox-esr, headless,
driven over WebDriver BiDi by tests/support/firefox_bidi.py. The same trace as the Chromium test: the page
paints the timeline with data, a real click on a kernel shows its details and its dependencies,
the wheel and the keyboard zoom, a drag pans, and the console stays free of errors.

Set TRAINREADY_EXPLORER_FIREFOX_SCREENSHOT=docs/explorer-firefox.png to save the page after the
click.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from benchmarks.explorer_first_paint import write_trace
from trainready.profile.server import ExplorerServer, Library
from trainready.profile.trace import KIND_KERNEL

pytest.importorskip("websockets", reason="needs websockets (pip install websockets)")
from tests.support.browser_marks import browser_marks  # noqa: E402
from tests.support.firefox_bidi import FIREFOX, Firefox  # noqa: E402

pytestmark = browser_marks(FIREFOX, "Firefox", "firefox-esr")

ENTER = "\ue007"  # WebDriver's key code for Enter
# wait until the timeline shows data for exactly the current view and includes event `id`
# the time under page coordinate x (the timeline's plot starts 230 px into the canvas)
TIME_AT = """x => {
    const r = document.querySelector('#canvas').getBoundingClientRect(), s = explorer.state;
    return s.t0 + (x - r.left - 230) / (r.width - 230) * (s.t1 - s.t0);
}"""
SHOWS = "id => explorer.settled() && explorer.state.data.rows.some(r => r.ev.id.includes(id))"


@pytest.fixture(scope="module")
def firefox():
    with Firefox() as browser:
        yield browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "train_step.json"
    write_trace(path, 6_000)
    srv = ExplorerServer(Library(files=[path]))
    srv.start()
    yield srv
    srv.close()


@pytest.fixture
def page(firefox, server):
    """A 1600x640 tab on the explorer, after its first paint."""
    pg = firefox.new_page(1600, 640)
    pg.goto(server.url)
    pg.wait_for("() => document.body.dataset.painted === '1'", timeout=20)
    yield pg
    pg.close()


def test_first_paint_draws_the_timeline_with_data(page):
    marks = page.evaluate(
        "() => performance.getEntriesByName('timeline-first-paint').map(m => m.startTime)"
    )
    assert len(marks) == 1 and marks[0] > 0
    assert page.evaluate("() => explorer.state.data.rows.some(r => r.ev.id.length > 0)")
    # the canvas holds coloured event boxes, not only the white background and labels
    coloured = page.evaluate(
        """() => {
            const c = document.querySelector('#canvas');
            const px = c.getContext('2d').getImageData(240, 30, c.width - 240, c.height - 100).data;
            let n = 0;
            for (let i = 0; i < px.length; i += 4) {
                const [r, g, b] = [px[i], px[i + 1], px[i + 2]];
                if (Math.max(r, g, b) - Math.min(r, g, b) > 40) n++;  // saturated: an event's colour
            }
            return n;
        }"""
    )
    assert coloured > 2_000
    assert page.text("#summary").count("NVIDIA H100") == 1
    assert page.errors() == []


def test_click_an_event_shows_details_and_dependencies(page, server):
    loaded = server.library.get(next(iter(server.library.entries())))
    trace = loaded.trace
    kernel = int(np.flatnonzero(trace.kind == KIND_KERNEL)[40])
    name = trace.strings[trace.name[kernel]]
    place = loaded.view.place(kernel)
    page.evaluate("p => explorer.reveal(p)", place)
    page.wait_for(SHOWS, kernel)
    xy = page.evaluate("p => explorer.locate(p)", place)

    page.mouse_move(xy["x"], xy["y"])
    assert page.wait_for("() => document.querySelector('#tip').innerText").startswith(name)
    page.click(xy["x"], xy["y"])  # a real click on the drawn kernel
    page.wait_for("n => document.querySelector('#event-name')?.textContent === n", name)
    details = page.text("#event")
    assert "kernel" in details and "[132,1,1]" in details.replace(" ", "")
    assert "of aten::addmm, which launched it" in details and "TFLOP/s" in details
    assert "model.py:1" in details  # the user source line its launch came from
    assert "h100-sxm bf16 datasheet peak" in details  # MFU against a named peak
    launch = "#event ul.deps li[data-type='launch']"
    assert page.evaluate("s => document.querySelectorAll(s).length", launch) == 1
    assert "cudaLaunchKernel" in page.text(launch)
    stream = "#event ul.deps li[data-type='stream']"
    assert page.evaluate("s => document.querySelectorAll(s).length", stream) == 2
    legend = page.text("#legend")
    assert "launch → kernel" in legend and "same-stream order" in legend

    # the click focused the canvas: zoom out with the keyboard until the launch is in view
    assert page.evaluate("() => document.activeElement.id") == "canvas"
    launched = page.evaluate("() => explorer.state.details.dependencies[0].place")
    span = page.evaluate("() => explorer.state.t1 - explorer.state.t0")
    for _ in range(30):
        if page.evaluate("t => explorer.state.t0 < t", launched["ts"]):
            break
        page.press("s")
    assert page.evaluate("() => explorer.state.t1 - explorer.state.t0") > span
    page.wait_for(SHOWS, launched["id"])
    if shot := os.environ.get("TRAINREADY_EXPLORER_FIREFOX_SCREENSHOT"):
        page.mouse_move(1, 1)  # no hover tooltip in the picture
        page.wait_for("() => document.querySelector('#tip').hidden")
        page.screenshot(shot)

    page.click_selector(launch)  # follow it to the host side
    page.wait_for("() => document.querySelector('#event-name')?.textContent === 'cudaLaunchKernel'")
    assert "model.py(" in page.text("#event ul.stack")  # its python stack

    page.click_selector("#search")
    page.type("nccl")
    page.press(ENTER)
    page.wait_for("() => document.querySelector('#search-results.active')")
    assert "4 events match" in page.text("#search-results")
    assert page.errors() == []


def test_wheel_and_keys_zoom_drag_pans(page):
    view = "() => [explorer.state.t0, explorer.state.t1]"
    x, y = page.evaluate(
        "() => { const r = document.querySelector('#canvas').getBoundingClientRect();"
        " return [r.x + r.width * 0.6, r.y + 100]; }"
    )
    t0, t1 = page.evaluate(view)
    before = page.evaluate(TIME_AT, x)
    page.wheel(x, y, delta_y=-400)  # wheel up: zoom in around the pointer
    page.wait_for("s => explorer.state.t1 - explorer.state.t0 < s * 0.75", t1 - t0)
    z0, z1 = page.evaluate(view)
    assert page.evaluate(TIME_AT, x) == pytest.approx(before, abs=(t1 - t0) * 0.005)

    page.drag(x, y, x - 200, y)  # drag left: later times come into view
    d0, d1 = page.evaluate(view)
    assert d0 > z0 and d1 - d0 == pytest.approx(z1 - z0)

    page.press("w")  # the canvas has the focus since the drag's mousedown
    w0, w1 = page.evaluate(view)
    assert w1 - w0 == pytest.approx((d1 - d0) * 0.8)
    page.press("0")  # fit: the whole trace again
    assert page.evaluate(view) == pytest.approx([t0, t1])
    page.wait_for("() => explorer.settled()")
    assert page.errors() == []
