"""The explorer's local HTTP server (stdlib `http.server`, one thread per request).

    GET  /                                   the page (index.html, app.js, style.css; offline)
    GET  /api/traces                         the traces it serves, and whether uploads are allowed
    POST /api/traces?name=FILE.json[.gz]     upload a trace (--serve only; raw body, size-limited)
    GET  /api/traces/ID/meta                 rows (hardware units grouped by process/device), span
    GET  /api/traces/ID/view?t0=&t1=&px=&rows=1,2&q=   what is visible in a window (viewport.py)
    GET  /api/traces/ID/memory?t0=&t1=&px=   the memory counter track of a window
    GET  /api/traces/ID/events/N             one event: details, stack, dependencies, dependents
    GET  /api/traces/ID/search?q=            events whose name contains q
    GET  /api/traces/ID/summary              step time, idle %, MFU, top kernels, overlap
    GET  /api/compare?a=ID&b=ID              step time and top-kernel deltas of two traces

Security: it binds 127.0.0.1 unless told otherwise; on a loopback address it answers only requests
whose Host names that address (no DNS rebinding), and takes uploads only from its own page (Origin /
Sec-Fetch-Site). A trace id is a key of the listing, never a path: nothing outside the served files
can be read. An upload needs a Content-Length within the limit (refused before reading the body),
is validated by the trace loader (which refuses gzip bombs in bounded memory) before it is kept, and
is linked into place under a fresh name, so it never replaces an existing file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from trainready.profile.cache import TraceCache, default_dir
from trainready.profile.trace import MiB, Trace, TraceError, load_trace
from trainready.profile.viewport import (
    Graph,
    OpFlops,
    Viewport,
    compare,
    event_details,
    summary,
)

DEFAULT_MAX_UPLOAD_BYTES = 512 * MiB
DEFAULT_MAX_TRACE_BYTES = 4096 * MiB  # decompressed JSON text of one trace
DEFAULT_CACHE = 4  # traces kept loaded at once
TRACE_SUFFIXES = (".json", ".json.gz")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_STATIC = {
    "/": "index.html",
    "/index.html": "index.html",
    "/app.js": "app.js",
    "/style.css": "style.css",
}
_CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ApiError(Exception):
    """A request the server refuses: an HTTP status and one line saying why."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Entry:
    id: str
    path: Path
    size: int
    mtime_ns: int


class Loaded:
    """A trace with its viewport index, and its analyses built once each when first asked for
    (each under its own lock, so a slow one never holds up the timeline or the others)."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.view = Viewport(trace)  # read-only once built: requests share it freely
        self._built: dict[str, Any] = {}
        self._locks = {name: threading.Lock() for name in ("summary", "flops", "graph")}

    def _once(self, name: str, build: Callable[[], Any]) -> Any:
        with self._locks[name]:
            if name not in self._built:
                self._built[name] = build()
            return self._built[name]

    def summary(self) -> dict:
        return self._once("summary", lambda: summary(self.view))

    def flops(self) -> OpFlops:
        return self._once("flops", lambda: OpFlops(self.trace))

    def graph(self) -> Graph:
        return self._once("graph", lambda: Graph(self.trace))


class Library:
    """The traces a server serves: fixed files (`explore TRACE...`) or a directory (`--serve DIR`),
    loaded on first use (parsed columns come from `cache.TraceCache` when it holds them) and kept
    in a small LRU cache."""

    def __init__(
        self,
        files: list[Path] | None = None,
        directory: Path | None = None,
        *,
        max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        cache: int = DEFAULT_CACHE,
        parsed_cache: TraceCache | None | bool = True,
    ):
        if (files is None) == (directory is None):
            raise ValueError("give either files or a directory")
        self.directory = directory.resolve() if directory is not None else None
        self.files = [Path(f).resolve() for f in files or []]
        self.max_trace_bytes = max_trace_bytes
        self.max_upload_bytes = max_upload_bytes
        self.cache_size = max(1, cache)
        if parsed_cache is True:  # the default: parsed columns kept on disk, per user
            directory = default_dir()
            parsed_cache = TraceCache(directory) if directory is not None else None
        self.parsed = parsed_cache or None  # reopening a trace reads columns, not JSON
        self._cache: OrderedDict[tuple, Loaded] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple, threading.Lock] = {}

    @property
    def uploads(self) -> bool:
        return self.directory is not None

    def entries(self) -> dict[str, Entry]:
        if self.directory is None:
            paths = self.files
        else:
            paths = sorted(
                p
                for p in self.directory.iterdir()
                if p.name.endswith(TRACE_SUFFIXES) and not p.name.startswith(".")
            )
        out: dict[str, Entry] = {}
        for p in paths:
            if self.directory is not None and (p.is_symlink() or not p.is_file()):
                continue  # a link could point anywhere: serve only regular files in DIR
            try:
                st = p.stat()
            except OSError:
                continue
            key, n = p.name, 2
            while key in out:
                key, n = f"{p.name}~{n}", n + 1
            out[key] = Entry(key, p, st.st_size, st.st_mtime_ns)
        return out

    def entry(self, trace_id: str) -> Entry:
        found = self.entries().get(trace_id)
        if found is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no trace {trace_id!r}")
        return found

    def get(self, trace_id: str) -> Loaded:
        e = self.entry(trace_id)
        key = (str(e.path), e.size, e.mtime_ns)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:  # one load per file at a time; others wait for it
            with self._lock:
                if key in self._cache:
                    return self._cache[key]
            try:
                loaded = Loaded(self._load(e.path))
            except TraceError as err:
                raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, _relative(str(err))) from None
            else:
                self._remember(key, loaded)
                return loaded
            finally:
                with self._lock:
                    self._loading.pop(key, None)

    def _load(self, path: Path) -> Trace:
        if self.parsed is None:
            return load_trace(path, max_bytes=self.max_trace_bytes)
        return self.parsed.load(path, max_bytes=self.max_trace_bytes)

    def _remember(self, key: tuple, loaded: Loaded) -> None:
        with self._lock:
            self._cache[key] = loaded
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def add(self, name: str, read: Callable[[int], bytes], length: int) -> Entry:
        """Store an upload of `length` bytes under a fresh name derived from `name`."""
        if self.directory is None:
            raise ApiError(HTTPStatus.FORBIDDEN, "uploads are off (start with --serve DIR)")
        if length > self.max_upload_bytes:
            raise ApiError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"upload of {length} bytes is over the limit of {self.max_upload_bytes} bytes",
            )
        base = safe_name(name)
        part = self.directory / f".upload-{secrets.token_hex(8)}.part"
        try:
            with open(part, "xb") as f:
                left = length
                while left:
                    chunk = read(min(left, MiB))
                    if not chunk:
                        raise ApiError(HTTPStatus.BAD_REQUEST, "upload ended before its length")
                    f.write(chunk)
                    left -= len(chunk)
            try:
                trace = load_trace(part, max_bytes=self.max_trace_bytes)
            except TraceError as err:
                message = str(err).replace(str(part), base)
                raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, message) from None
            final = self._link_fresh(part, base)
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
        st = final.stat()
        trace.path = str(final)
        self._remember((str(final), st.st_size, st.st_mtime_ns), Loaded(trace))
        return Entry(final.name, final, st.st_size, st.st_mtime_ns)

    def _link_fresh(self, part: Path, base: str) -> Path:
        """Hard-link `part` to `base` in the directory, or `stem-2.json`... when taken: a link
        never replaces an existing file, so an upload cannot overwrite another."""
        stem, suffix = split_suffix(base)
        for n in range(1, 10_000):
            final = self.directory / (base if n == 1 else f"{stem}-{n}{suffix}")
            try:
                os.link(part, final)
                return final
            except FileExistsError:
                continue
        raise ApiError(HTTPStatus.CONFLICT, f"too many uploads named {base!r}")


def split_suffix(name: str) -> tuple[str, str]:
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", *TRACE_SUFFIXES[::-1]):
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def safe_name(name: str) -> str:
    """An upload's file name reduced to a plain base name with a trace suffix."""
    base = _SAFE_NAME.sub("_", Path(name.replace("\\", "/")).name).lstrip(".")
    stem, suffix = split_suffix(base)
    if not suffix:
        raise ApiError(
            HTTPStatus.BAD_REQUEST, f"upload name {name!r} must end in .json or .json.gz"
        )
    if not stem.strip("._-"):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"upload name {name!r} has no usable characters")
    return base[:200] if len(base) <= 200 else stem[: 200 - len(suffix)] + suffix


def _relative(message: str) -> str:
    """A loader error without the server's directory layout (the client knows the file by id)."""
    return re.sub(r"^\S*/([^/:]+):", r"\1:", message)


def _number(query: dict[str, list[str]], key: str, default: float | None = None) -> float:
    raw = query.get(key, [None])[0]
    if raw is None:
        if default is None:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"missing query parameter {key!r}")
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{key}={raw!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{key}={raw!r} is not a finite number")
    return value


class Handler(BaseHTTPRequestHandler):
    server: ExplorerServer
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a connection may stall (e.g. an upload that stops sending)
    server_version = "trainready-explorer"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.verbose:
            super().log_message(format, *args)

    # -- dispatch ----------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch(self._get)

    def do_POST(self) -> None:
        self._dispatch(self._post)

    def _dispatch(self, route: Callable[[str, dict[str, list[str]]], None]) -> None:
        try:
            self._check_host()
            url = urlsplit(self.path)
            route(url.path, parse_qs(url.query))
        except ApiError as e:
            self._json({"error": str(e)}, e.status)
        except ConnectionError:  # the page gave up on the request (it scrolled on): nobody to tell
            self.close_connection = True
        except Exception as e:  # a bug must not kill the server; say what happened
            self._json({"error": f"internal error: {type(e).__name__}: {e}"}, 500)

    def _check_host(self) -> None:
        allowed = self.server.allowed_hosts
        if allowed is not None and self.headers.get("Host", "").lower() not in allowed:
            raise ApiError(HTTPStatus.FORBIDDEN, "unexpected Host header")

    def _get(self, path: str, query: dict[str, list[str]]) -> None:
        if path in _STATIC:
            return self._static(_STATIC[path])
        parts = [unquote(p) for p in path.split("/")[1:]]
        if parts[:2] == ["api", "traces"] and len(parts) == 2:
            lib = self.server.library
            return self._json(
                {
                    "uploads": lib.uploads,
                    "max_upload_bytes": lib.max_upload_bytes,
                    "traces": [
                        {"id": e.id, "size": e.size, "mtime_ns": e.mtime_ns}
                        for e in lib.entries().values()
                    ],
                }
            )
        if parts[:2] == ["api", "traces"] and len(parts) >= 4:
            return self._trace_route(parts[2], parts[3:], query)
        if parts == ["api", "compare"]:
            a = self.server.library.get(query.get("a", [""])[0])
            b = self.server.library.get(query.get("b", [""])[0])
            return self._json(compare(a.summary(), b.summary()))
        raise ApiError(HTTPStatus.NOT_FOUND, f"no such page {path!r}")

    def _trace_route(self, trace_id: str, rest: list[str], query: dict[str, list[str]]) -> None:
        loaded = self.server.library.get(trace_id)
        view = loaded.view
        q = query.get("q", [""])[0]
        if rest == ["meta"]:
            return self._json({"id": trace_id, **view.meta()})
        if rest == ["view"]:
            t0, t1 = _number(query, "t0"), _number(query, "t1")
            rows = None
            if "rows" in query:
                try:
                    rows = [int(r) for r in query["rows"][0].split(",") if r]
                except ValueError:
                    raise ApiError(HTTPStatus.BAD_REQUEST, "rows must be integers") from None
            px = int(_number(query, "px", 1000))
            return self._json(view.window(t0, t1, px, rows=rows, query=q))
        if rest == ["memory"]:
            t0, t1 = _number(query, "t0"), _number(query, "t1")
            return self._json(view.memory(t0, t1, int(_number(query, "px", 1000))))
        if rest == ["search"]:
            return self._json(view.search(q))
        if rest == ["summary"]:
            return self._json(loaded.summary())
        if len(rest) == 2 and rest[0] == "events":
            try:
                event = int(rest[1])
            except ValueError:
                raise ApiError(HTTPStatus.BAD_REQUEST, "event id must be an integer") from None
            if not 0 <= event < len(loaded.trace):
                raise ApiError(HTTPStatus.NOT_FOUND, f"no event {event} in {trace_id!r}")
            return self._json(event_details(view, event, loaded.flops(), loaded.graph()))
        raise ApiError(HTTPStatus.NOT_FOUND, f"no such trace page {'/'.join(rest)!r}")

    def _post(self, path: str, query: dict[str, list[str]]) -> None:
        if path != "/api/traces":
            raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint {path!r}")
        self.close_connection = True  # never reuse a connection whose body may be unread
        if self.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
            raise ApiError(HTTPStatus.FORBIDDEN, "uploads are accepted from this page only")
        origin = self.headers.get("Origin")
        if (
            origin is not None
            and origin.lower() != f"http://{self.headers.get('Host', '')}".lower()
        ):
            raise ApiError(HTTPStatus.FORBIDDEN, "uploads are accepted from this page only")
        raw_length = self.headers.get("Content-Length")
        if raw_length is None or not raw_length.isdigit():
            raise ApiError(HTTPStatus.LENGTH_REQUIRED, "an upload needs a Content-Length")
        name = query.get("name", [""])[0]
        entry = self.server.library.add(name, self.rfile.read, int(raw_length))
        self._json({"id": entry.id, "size": entry.size}, HTTPStatus.CREATED)

    # -- responses ---------------------------------------------------------------------------------
    def _static(self, name: str) -> None:
        body = (resources.files("trainready.profile") / "web" / name).read_bytes()
        ctype = _CONTENT_TYPES[Path(name).suffix] + "; charset=utf-8"
        self._send(body, ctype, HTTPStatus.OK)

    def _json(self, payload: Any, status: int = HTTPStatus.OK) -> None:
        body = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
        self._send(body, "application/json", status)

    def _send(self, body: bytes, ctype: str, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'",
        )
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class ExplorerServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, library: Library, host: str = "127.0.0.1", port: int = 0, verbose: bool = False
    ):
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), Handler)
        self.library = library
        self.verbose = verbose
        port = self.server_address[1]
        if host in _LOOPBACK:
            names = ("127.0.0.1", "localhost", "[::1]")
            self.allowed_hosts: set[str] | None = {f"{h}:{port}" for h in names}
        else:
            self.allowed_hosts = None  # told to listen beyond this machine: any Host

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = "[::1]" if host == "::1" else host
        return f"http://{host}:{port}/"

    def start(self) -> threading.Thread:
        """Serve in a background thread (tests, benchmarks); stop with `close()`."""
        thread = threading.Thread(
            target=self.serve_forever, args=(0.05,), name="explorer", daemon=True
        )
        thread.start()
        return thread

    def close(self) -> None:
        self.shutdown()
        self.server_close()
