"""A small WebDriver BiDi client that drives Debian's Firefox ESR in the browser tests.

Playwright cannot drive the system's Firefox (its BiDi path needs commands Firefox 140 lacks, and
its own Firefox build is a download), but Firefox speaks the W3C WebDriver BiDi protocol itself:
started with `--remote-debugging-port=0` it prints `WebDriver BiDi listening on ws://HOST:PORT`,
and a WebSocket to that address + `/session` takes JSON commands (https://w3c.github.io/webdriver-bidi/).

    with Firefox() as firefox:
        page = firefox.new_page(1600, 640)
        page.goto("http://127.0.0.1:8000/")
        page.wait_for("() => document.body.dataset.painted === '1'")
        page.click(100, 200)
        assert page.errors() == []

Every Firefox gets a fresh profile (deleted afterwards) whose user.js stops its background
network traffic, and the process is always killed on close, even when a test fails.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

FIREFOX = "/usr/bin/firefox-esr"

# No updates, telemetry, captive-portal or connectivity checks, safe browsing lists, Normandy
# studies, remote settings, add-on or plugin downloads, nor a first-run page: a test browser talks
# only to the pages it is sent to.
PREFS: dict[str, bool | int | str] = {
    "app.update.auto": False,
    "app.update.checkInstallTime": False,
    "app.update.disabledForTesting": True,
    "app.normandy.enabled": False,
    "app.normandy.api_url": "",
    "app.shield.optoutstudies.enabled": False,
    "browser.aboutwelcome.enabled": False,
    "browser.newtabpage.enabled": False,
    "browser.ping-centre.telemetry": False,
    "browser.safebrowsing.blockedURIs.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.update.enabled": False,
    "browser.search.update": False,
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "browser.startup.page": 0,
    "browser.topsites.contile.enabled": False,
    "datareporting.healthreport.uploadEnabled": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.policy.dataSubmissionPolicyBypassNotification": True,
    "extensions.blocklist.enabled": False,
    "extensions.getAddons.cache.enabled": False,
    "extensions.systemAddon.update.enabled": False,
    "extensions.update.enabled": False,
    "media.gmp-manager.updateEnabled": False,
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "network.dns.disablePrefetch": True,
    "network.http.speculative-parallel-limit": 0,
    "network.prefetch-next": False,
    "services.settings.server": "data:,#remote-settings-dummy/v1",
    "toolkit.telemetry.enabled": False,
    "toolkit.telemetry.server": "data:,",
    "toolkit.telemetry.unified": False,
}


class BidiError(RuntimeError):
    """A command answered with an error, a script threw, or the browser did not start."""


class Firefox:
    """One headless Firefox and its BiDi session; a context manager that always ends the process."""

    def __init__(self, executable: str = FIREFOX, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = Path(tempfile.mkdtemp(prefix="trainready-firefox-"))
        (self.profile / "user.js").write_text(
            "".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in PREFS.items())
        )
        self._log = (self.profile / "firefox.log").open("w+")
        self.process = subprocess.Popen(
            [executable, "--headless", "--no-remote", "--remote-debugging-port=0"]
            + ["--profile", str(self.profile)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,  # its own process group: close() can end every process of it
        )
        self._next_id = 0
        self.events: list[dict] = []  # every event received, in order: {"method", "params"}
        self._exits = contextlib.ExitStack()  # the WebSocket, closed with the browser
        try:
            url = self._listening_url() + "/session"
            self.ws = self._exits.enter_context(connect(url, max_size=None, close_timeout=2))
            self.command("session.new", {"capabilities": {}})
            self.command(
                "session.subscribe", {"events": ["log.entryAdded", "network.beforeRequestSent"]}
            )
        except BaseException:
            self.close()
            raise

    def _listening_url(self) -> str:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            text = (self.profile / "firefox.log").read_text(errors="replace")
            if found := re.search(r"WebDriver BiDi listening on (ws://\S+)", text):
                return found.group(1)
            if self.process.poll() is not None:
                raise BidiError(f"firefox exited with {self.process.returncode}:\n{text[-2000:]}")
            time.sleep(0.05)
        raise BidiError(f"firefox did not open its BiDi port in {self.timeout:.0f} s")

    def command(
        self, method: str, params: dict | None = None, timeout: float | None = None
    ) -> dict:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        sent = self._next_id
        self.ws.send(json.dumps({"id": sent, "method": method, "params": params or {}}))
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.0, deadline - time.monotonic())))
            if message.get("type") == "event":
                self.events.append(message)
            elif message.get("id") == sent:
                if message.get("type") == "error":
                    raise BidiError(f"{method}: {message['error']}: {message.get('message')}")
                return message["result"]

    def new_page(self, width: int = 1280, height: int = 800) -> Page:
        """A new tab with a viewport of width x height CSS pixels."""
        context = self.command("browsingContext.create", {"type": "tab"})["context"]
        viewport = {"width": width, "height": height}
        self.command("browsingContext.setViewport", {"context": context, "viewport": viewport})
        return Page(self, context)

    def close(self) -> None:
        """End the session and the browser; kill it if it does not exit within a few seconds."""
        try:
            if hasattr(self, "ws"):
                with contextlib.suppress(Exception):  # the socket may close before the answer
                    self.command("browser.close", timeout=5)
            self._exits.close()
        finally:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):  # a content process left behind
                os.killpg(self.process.pid, signal.SIGKILL)
            self._log.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Firefox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """One browsing context (a tab): navigate, run scripts, click, type, wheel, screenshot."""

    def __init__(self, firefox: Firefox, context: str):
        self.firefox = firefox
        self.context = context

    def goto(self, url: str) -> None:
        """Navigate and wait for the load event."""
        params = {"context": self.context, "url": url, "wait": "complete"}
        self.firefox.command("browsingContext.navigate", params)

    def evaluate(self, function: str, *args: Any) -> Any:
        """Call a JavaScript function (source text) with JSON-like args; awaits a returned promise."""
        result = self.firefox.command(
            "script.callFunction",
            {
                "functionDeclaration": function,
                "arguments": [_local_value(a) for a in args],
                "target": {"context": self.context},
                "awaitPromise": True,
                "resultOwnership": "none",
            },
        )
        if result["type"] == "exception":
            details = result["exceptionDetails"]
            raise BidiError(f"{details.get('text')} in {function!r}")
        return _python_value(result["result"])

    def wait_for(self, function: str, *args: Any, timeout: float = 10.0) -> Any:
        """Call the function every 50 ms until it returns something truthy; return that."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(function, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{function!r} still false after {timeout} s")
            time.sleep(0.05)

    def text(self, selector: str) -> str:
        """The rendered text of the first element matching a CSS selector ('' if none)."""
        return self.evaluate("s => document.querySelector(s)?.innerText ?? ''", selector)

    def center(self, selector: str) -> tuple[float, float]:
        """The middle of the first element matching a CSS selector, in viewport coordinates."""
        box = self.evaluate(
            "s => { const r = document.querySelector(s).getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; }",
            selector,
        )
        return box[0], box[1]

    def _actions(self, *sources: dict) -> None:
        params = {"context": self.context, "actions": list(sources)}
        self.firefox.command("input.performActions", params)

    def mouse_move(self, x: float, y: float) -> None:
        move = {"type": "pointerMove", "x": round(x), "y": round(y)}
        self._actions({"type": "pointer", "id": "mouse", "actions": [move]})

    def click(self, x: float, y: float) -> None:
        """A real mouse click: the pointer moves to (x, y), presses and releases the left button."""
        steps = [
            {"type": "pointerMove", "x": round(x), "y": round(y)},
            {"type": "pointerDown", "button": 0},
            {"type": "pointerUp", "button": 0},
        ]
        self._actions({"type": "pointer", "id": "mouse", "actions": steps})

    def click_selector(self, selector: str) -> None:
        self.click(*self.center(selector))

    def drag(self, x: float, y: float, to_x: float, to_y: float, steps: int = 5) -> None:
        """Press at (x, y), move to (to_x, to_y) in `steps` moves, release."""
        moves = [
            {
                "type": "pointerMove",
                "x": round(x + (to_x - x) * i / steps),
                "y": round(y + (to_y - y) * i / steps),
            }
            for i in range(1, steps + 1)
        ]
        actions = [{"type": "pointerMove", "x": round(x), "y": round(y)}]
        actions += [
            {"type": "pointerDown", "button": 0},
            *moves,
            {"type": "pointerUp", "button": 0},
        ]
        self._actions({"type": "pointer", "id": "mouse", "actions": actions})

    def wheel(self, x: float, y: float, delta_x: int = 0, delta_y: int = 0) -> None:
        """Turn the mouse wheel over (x, y) by the given pixel deltas."""
        scroll = {"type": "scroll", "x": round(x), "y": round(y), "deltaX": delta_x}
        scroll["deltaY"] = delta_y
        self._actions({"type": "wheel", "id": "wheel", "actions": [scroll]})

    def press(self, key: str) -> None:
        """Press and release one key (a character, or a WebDriver key code such as '\\ue007')."""
        keys = [{"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]
        self._actions({"type": "key", "id": "keyboard", "actions": keys})

    def type(self, text: str) -> None:
        keys = []
        for ch in text:
            keys += [{"type": "keyDown", "value": ch}, {"type": "keyUp", "value": ch}]
        self._actions({"type": "key", "id": "keyboard", "actions": keys})

    def screenshot(self, path: str | os.PathLike | None = None) -> bytes:
        """A PNG of the viewport; also written to `path` when given."""
        params = {"context": self.context, "origin": "viewport"}
        png = base64.b64decode(
            self.firefox.command("browsingContext.captureScreenshot", params)["data"]
        )
        if path is not None:
            Path(path).write_bytes(png)
        return png

    def _events(self, method: str) -> list[dict]:
        self.firefox.command("session.status")  # a round trip: events sent before it are in
        return [
            e["params"]
            for e in self.firefox.events
            if e["method"] == method
            and self.context
            in (e["params"].get("source", {}).get("context"), e["params"].get("context"))
        ]

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions of this tab so far, as text."""
        return [
            f"{e['type']}: {e['text']}"
            for e in self._events("log.entryAdded")
            if e["level"] == "error"
        ]

    def requests(self) -> list[str]:
        """The URL of every request this tab has sent so far."""
        return [e["request"]["url"] for e in self._events("network.beforeRequestSent")]

    def close(self) -> None:
        self.firefox.command("browsingContext.close", {"context": self.context})


def _local_value(value: Any) -> dict:
    """A Python value as a BiDi LocalValue (the argument format of script.callFunction)."""
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean", "value": value}
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return {"type": "number", "value": "NaN" if math.isnan(value) else _inf(value)}
        return {"type": "number", "value": value}
    if isinstance(value, str):
        return {"type": "string", "value": value}
    if isinstance(value, (list, tuple)):
        return {"type": "array", "value": [_local_value(v) for v in value]}
    if isinstance(value, dict):
        return {"type": "object", "value": [[str(k), _local_value(v)] for k, v in value.items()]}
    raise TypeError(f"cannot pass {type(value).__name__} to the browser")


def _inf(value: float) -> str:
    return "Infinity" if value > 0 else "-Infinity"


_NUMBERS = {"NaN": math.nan, "-0": -0.0, "Infinity": math.inf, "-Infinity": -math.inf}


def _python_value(remote: dict) -> Any:
    """A BiDi RemoteValue as Python: primitives, lists and dicts; other objects stay as sent."""
    kind, value = remote["type"], remote.get("value")
    if kind in ("undefined", "null"):
        return None
    if kind == "number":
        return _NUMBERS.get(value, value) if isinstance(value, str) else value
    if kind in ("string", "boolean"):
        return value
    if kind == "bigint":
        return int(value)
    if kind in ("array", "set") and value is not None:
        return [_python_value(v) for v in value]
    if kind in ("object", "map") and value is not None:
        return {k if isinstance(k, str) else _python_value(k): _python_value(v) for k, v in value}
    return remote
