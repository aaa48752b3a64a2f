"""`trainready explore TRACE...` and `trainready explore --serve DIR`: the local trace explorer."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from trainready.clikit import console, fail, guard


def register(app: typer.Typer) -> None:
    app.command()(guard(explore))


def explore(
    traces: Annotated[
        list[Path] | None,
        typer.Argument(help="Trace files (.json / .json.gz) to explore; two or more to compare."),
    ] = None,
    serve: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="Serve every trace in DIR for a team, and accept uploads into it."
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on (default: this machine only).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free port).")] = 0,
    max_upload_mb: Annotated[
        int, typer.Option(help="Largest upload accepted, MiB (--serve only).")
    ] = 512,
    open_browser: Annotated[
        bool,
        typer.Option(
            "--open/--no-open",
            help="Open the page in a browser when there is a display (not with --serve).",
        ),
    ] = True,
) -> None:
    """Explore profiler traces in a local web page: timeline, event details and dependencies,
    summary, search and comparison."""
    from trainready.profile.server import ApiError, ExplorerServer, Library
    from trainready.profile.trace import MiB

    if bool(traces) == (serve is not None):
        fail("give trace files to explore, or --serve DIR (not both)")
    if max_upload_mb <= 0:
        fail(f"--max-upload-mb must be positive, got {max_upload_mb}")
    if serve is not None:
        if not serve.is_dir():
            fail(f"{serve}: not a directory")
        library = Library(directory=serve, max_upload_bytes=max_upload_mb * MiB)
    else:
        missing = [str(t) for t in traces if not t.is_file()]
        if missing:
            fail(f"no such trace file: {', '.join(missing)}")
        library = Library(files=traces)
        for entry in library.entries().values():  # load now: a bad file is one line, exit 2
            console.print(f"loading {entry.path} ({entry.size / MiB:.1f} MiB)", highlight=False)
            try:
                library.get(entry.id)
            except ApiError as e:
                fail(str(e))
    try:
        server = ExplorerServer(library, host=host, port=port)
    except OSError as e:
        fail(f"cannot listen on {host}:{port}: {e.strerror or e}")
    console.print(f"explorer at [bold]{server.url}[/]  (Ctrl-C to stop)", highlight=False)
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]listening on {host}: reachable from other machines[/]")
    if open_browser and serve is None and _has_display():
        import webbrowser

        with contextlib.suppress(webbrowser.Error):  # no browser here: the URL is printed above
            webbrowser.open(server.url)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
    finally:
        server.server_close()


def _has_display() -> bool:
    """A graphical session to open a browser in (never a text browser in this terminal)."""
    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
