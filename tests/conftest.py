"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# pytest-xdist's workers (the README's test command runs two) start with COLUMNS=80 in their
# environment, where plain pytest has none; the CLI's rich consoles read it once, when first
# imported, and a test that widens the output with COLUMNS would find them frozen at 80.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)


@pytest.fixture(autouse=True)
def _own_trace_cache(tmp_path, monkeypatch):
    """Parsed traces cached under each test's own directory, never the user's
    (~/.cache/trainready/traces), so no test sees another's entries."""
    monkeypatch.setenv("TRAINREADY_CACHE_DIR", str(tmp_path / "parsed"))


@pytest.fixture(scope="session")
def scorecard_html(tmp_path_factory) -> Path:
    """The HTML scorecard of a small real run (matmul on the CPU, Qwen3-8B's 4 shapes), built
    once for the browser tests of every browser."""
    from trainready import api
    from trainready.core.store import Store
    from trainready.reporting import write_reports

    out = tmp_path_factory.mktemp("scorecard")
    summary = api.run(["matmul"], device="cpu", out=out, filter="matmul/Qwen3-8B/*")
    with Store(out) as store:
        return write_reports(store, [summary.run_id], out / "report", ["html"])["html"]


@pytest.fixture
def serve():
    """`serve(library, **options)` starts an explorer server on a free port; every one started
    is stopped after the test."""
    from trainready.profile.server import ExplorerServer

    started: list[ExplorerServer] = []

    def start(library, **options) -> ExplorerServer:
        server = ExplorerServer(library, **options)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()
