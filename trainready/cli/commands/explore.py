"""`trainready explore TRACE...` and `trainready explore --serve DIR`: the local trace explorer.

Bound beyond loopback (`--host 0.0.0.0`), the server needs the random access token it prints in
its URL, and answers only Host names it knows: this machine's name, IP addresses, and each
`--allow-host NAME` (a name the team reaches it by, e.g. through a proxy).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from trainready.cli.common import console, fail, guard


def register(app: typer.Typer) -> None:
    app.command()(guard(explore))


def explore(
    traces: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Trace files (.json / .json.gz), or directories of them such as the one "
            "`trainready profile` writes, to explore; two or more traces to compare."
        ),
    ] = None,
    serve: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="Serve every trace in DIR for a team, and accept uploads into it."
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on (default: this machine only). Any other address needs "
            "the access token printed in the URL at start."
        ),
    ] = "127.0.0.1",
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="Also answer requests for this Host name (repeatable), e.g. the name a proxy "
            "or DNS gives this machine; others are refused (no DNS rebinding).",
        ),
    ] = None,
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
    from trainready.profile.server import ApiError, ExplorerServer, Library, host_name
    from trainready.profile.trace import MiB

    if bool(traces) == (serve is not None):
        fail("give trace files to explore, or --serve DIR (not both)")
    if max_upload_mb <= 0:
        fail(f"--max-upload-mb must be positive, got {max_upload_mb}")
    for name in allow_host or []:
        if host_name(name) is None:
            fail(f"--allow-host {name!r} is not a host name (e.g. team.example or 10.0.0.5)")
    if serve is not None:
        if not serve.is_dir():
            fail(f"{serve}: not a directory")
        library = Library(directory=serve, max_upload_bytes=max_upload_mb * MiB)
    else:
        library = Library(files=_trace_files(traces))
        for entry in library.entries().values():  # load now: a bad file is one line, exit 2
            size = entry.size / MiB
            console.print(f"loading {entry.path} ({size:.1f} MiB)", highlight=False, soft_wrap=True)
            try:
                library.get(entry.id)
            except ApiError as e:
                fail(str(e))
    try:
        server = ExplorerServer(library, host=host, port=port, allow_hosts=allow_host or ())
    except OSError as e:
        fail(f"cannot listen on {host}:{port}: {e.strerror or e}")
    console.print(
        f"explorer at [bold]{server.url}[/]  (Ctrl-C to stop)", highlight=False, soft_wrap=True
    )
    if not server.loopback:
        names = ", ".join(sorted(server.allowed_names))
        console.print(
            f"[yellow]listening on {host}: reachable from other machines, with the token in this "
            f"URL only; Host names answered: {names} and IP addresses (more: --allow-host)[/]",
            highlight=False,
            soft_wrap=True,
        )
    if open_browser and serve is None and _has_display():
        import webbrowser

        with contextlib.suppress(webbrowser.Error):  # no browser here: the URL is printed above
            webbrowser.open(server.url)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
    finally:
        server.server_close()


def _trace_files(paths: list[Path]) -> list[Path]:
    """The files to open: each path that is a file, and the traces of each directory (as
    `analyze` takes them: every .json / .json.gz but metadata.json)."""
    from trainready.profile.trace import TraceError, trace_files

    missing = [str(t) for t in paths if not t.exists()]
    if missing:
        fail(f"no such trace file or directory: {', '.join(missing)}")
    files = []
    for path in paths:
        try:
            files += trace_files(path)
        except TraceError as e:
            fail(str(e))
    return list(dict.fromkeys(files))


def _has_display() -> bool:
    """A graphical session to open a browser in (never a text browser in this terminal)."""
    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
