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

Replies are JSON encoded with msgspec (`encode_json`); JSON has no NaN or infinity, so a NaN or
infinite number in a reply is sent as null (unknown).

Security: it binds 127.0.0.1 unless told otherwise, and answers only requests whose Host names it
(no DNS rebinding): on a loopback address a loopback name, elsewhere this machine's name, an IP
address, or a name given with `allow_hosts` (`--allow-host`). Bound beyond loopback it also
requires a random access token, printed at start in the page's URL (`?token=`), which the page
then keeps in a cookie; without it every request is refused. Uploads come only from its own page
(Origin / Sec-Fetch-Site). A trace id is a key of the listing, never a path: nothing outside the
served files can be read. An upload needs a Content-Length within the limit (refused before
reading the body), is validated by the trace loader before it is kept -- its decompressed text
capped at `UPLOAD_TEXT_FACTOR` times the upload limit, its compression ratio at the loader's
100x -- and is linked into place under a fresh name, so it never replaces an existing file. Its
part file is locked while written and parsed: one that no server holds (the server was killed) is
removed when a server next starts or takes an upload. At most `loads` traces are parsed at once
(a semaphore; the others wait, then get 503), so concurrent uploads cannot multiply the memory.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import msgspec
import numpy as np

from trainready.core.flock import try_lock
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
UPLOAD_TEXT_FACTOR = 4  # an upload's decompressed text: at most this many times the upload limit
DEFAULT_CACHE = 4  # traces kept loaded at once
DEFAULT_LOADS = 2  # traces parsed at once (each takes a few times its text in memory)
LOAD_WAIT_S = 60.0  # how long a request waits for a parsing slot before a 503
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
_WILDCARD = ("0.0.0.0", "::", "")
_PART_GLOB = ".upload-*.part"
_NEW_GLOB = ".upload-*.new"
_NEW_PART_AGE_S = 60.0
_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")  # ASCII digits only ("²".isdigit() is True)
_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")
_PORT = re.compile(r":[0-9]{1,5}")


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
        loads: int = DEFAULT_LOADS,
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
        self._parsing_slots = threading.BoundedSemaphore(max(1, loads))
        if self.directory is not None:
            self.sweep_parts()

    @property
    def max_upload_text_bytes(self) -> int:
        """The decompressed text an upload may hold: a small multiple of the upload limit."""
        return min(self.max_trace_bytes, UPLOAD_TEXT_FACTOR * self.max_upload_bytes)

    @contextlib.contextmanager
    def _parsing(self) -> Iterator[None]:
        """One of the few parsing slots, or a 503 when they stay busy."""
        if not self._parsing_slots.acquire(timeout=LOAD_WAIT_S):
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "busy parsing other traces; try again")
        try:
            yield
        finally:
            self._parsing_slots.release()

    def sweep_parts(self) -> list[str]:
        """Remove the part files of uploads whose server died: no one holds their lock (a part
        not yet renamed from `.new`, a moment's state, only once it is a minute old)."""
        removed = []
        now = time.time()
        for part in [*self.directory.glob(_PART_GLOB), *self.directory.glob(_NEW_GLOB)]:
            with contextlib.suppress(OSError), open(part, "rb") as f:
                young = now - os.fstat(f.fileno()).st_mtime < _NEW_PART_AGE_S
                if not (part.suffix == ".new" and young) and try_lock(f):
                    part.unlink()
                    removed.append(part.name)
        return removed

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
                with self._parsing():
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
        self.sweep_parts()
        token = secrets.token_hex(8)
        # Made under a name the sweep ignores, locked, then renamed: every part file a sweep sees
        # is locked by its live server from the start.
        fresh = self.directory / f".upload-{token}.new"
        part = self.directory / f".upload-{token}.part"
        with open(fresh, "xb") as f:
            try:
                with contextlib.suppress(OSError):  # a file system without locks: none to take
                    try_lock(f)
                os.rename(fresh, part)
                left = length
                while left:
                    chunk = read(min(left, MiB))
                    if not chunk:
                        raise ApiError(HTTPStatus.BAD_REQUEST, "upload ended before its length")
                    f.write(chunk)
                    left -= len(chunk)
                f.flush()
                with self._parsing():
                    try:
                        trace = load_trace(part, max_bytes=self.max_upload_text_bytes)
                    except TraceError as err:
                        message = str(err).replace(str(part), base)
                        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, message) from None
                    loaded = Loaded(trace)
                final = self._link_fresh(part, base)
            finally:
                for leftover in (fresh, part):
                    with contextlib.suppress(FileNotFoundError):
                        leftover.unlink()
        st = final.stat()
        trace.path = str(final)
        self._remember((str(final), st.st_size, st.st_mtime_ns), loaded)
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
    _new_cookie: str | None = None  # the access token, to keep in the page's cookie

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.verbose:
            super().log_message(format, *args)

    # -- dispatch ----------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch(self._get)

    def do_HEAD(self) -> None:  # GET's status and headers; _send writes no body for HEAD
        self._dispatch(self._get)

    def do_POST(self) -> None:
        self._dispatch(self._post)

    def _dispatch(self, route: Callable[[str, dict[str, list[str]]], None]) -> None:
        self._new_cookie = None
        try:
            self._check_host()
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            self._check_token(query)
            route(url.path, query)
        except ApiError as e:
            self._error(str(e), e.status)
        except (ConnectionError, TimeoutError):  # the client went away or stalled: nobody to tell
            self.close_connection = True
        except Exception as e:  # a bug must not kill the server; say what happened
            self._error(f"internal error: {type(e).__name__}: {e}", 500)

    def _error(self, message: str, status: int) -> None:
        try:
            self._json({"error": message}, status)
        except (ConnectionError, TimeoutError):  # e.g. an upload cut off: no one reads the reply
            self.close_connection = True

    def _check_host(self) -> None:
        if not self.server.host_allowed(self.headers.get("Host", "")):
            raise ApiError(HTTPStatus.FORBIDDEN, "unexpected Host header")

    def _check_token(self, query: dict[str, list[str]]) -> None:
        """Bound beyond loopback: the access token, from the URL (then kept in a cookie for the
        page's own requests) or from that cookie."""
        token = self.server.token
        if token is None:
            return
        given = query.get("token", [""])[0]
        if _same(given, token):
            self._new_cookie = token
            return
        if not _same(self._cookie(self.server.cookie_name), token):
            raise ApiError(
                HTTPStatus.FORBIDDEN,
                "this server needs its access token: open the URL it printed at start",
            )

    def _cookie(self, name: str) -> str:
        try:
            morsel = SimpleCookie(self.headers.get("Cookie", "")).get(name)
        except CookieError:
            return ""
        return morsel.value if morsel is not None else ""

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
        if raw_length is None or not _CONTENT_LENGTH.fullmatch(raw_length):
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
        self._send(encode_json(payload), "application/json", status)

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
        if self._new_cookie:
            self.send_header(
                "Set-Cookie",
                f"{self.server.cookie_name}={self._new_cookie}; Path=/; HttpOnly; SameSite=Strict",
            )
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _plain(value: Any) -> Any:
    """A numpy scalar (np.int64, np.float64, np.bool_) as the Python value it holds."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot encode a {type(value).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)


def encode_json(payload: Any) -> bytes:
    """A reply's JSON, with msgspec: the 326 KiB first window of a 1M-event trace in 0.8 ms, where
    json.dumps took 12.7 (benchmarks/explorer_first_paint.py). JSON has no NaN or infinity: a
    NaN, inf or -inf number is written as null (unknown), never as the invalid `NaN` /
    `Infinity` tokens, and never refuses the reply."""
    return _ENCODER.encode(payload)


def _same(given: str, token: str) -> bool:
    return bool(given) and secrets.compare_digest(given.encode(), token.encode())


def host_name(header: str) -> str | None:
    """The name in a Host header ('name', 'name:port', '[v6]:port'), lower-cased; None if it
    is not one."""
    header = header.strip().lower()
    if header.startswith("["):  # [v6] or [v6]:port
        name, bracket, port = header[1:].partition("]")
        ok = bracket and _is_ip(name) and (not port or _PORT.fullmatch(port))
        return name if ok else None
    if header.count(":") > 1:  # a bare IPv6 address
        return header if _is_ip(header) else None
    name, colon, port = header.partition(":")
    if not _NAME.fullmatch(name) or (colon and not _PORT.fullmatch(":" + port)):
        return None
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class ExplorerServer(ThreadingHTTPServer):
    """The explorer over HTTP. Bound to a loopback address it answers loopback Host names (and
    `allow_hosts`); bound beyond, it also answers this machine's name and IP addresses, and every
    request needs `token` (a random one unless given): see the module's Security note."""

    daemon_threads = True

    def __init__(
        self,
        library: Library,
        host: str = "127.0.0.1",
        port: int = 0,
        verbose: bool = False,
        *,
        token: str | None = None,
        allow_hosts: Iterable[str] = (),
    ):
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), Handler)
        self.library = library
        self.verbose = verbose
        self.loopback = host in _LOOPBACK
        self.token = token or (None if self.loopback else secrets.token_urlsafe(24))
        self.cookie_name = f"trainready_token_{self.server_address[1]}"
        names = {"127.0.0.1", "localhost", "::1"}
        if not self.loopback:
            names |= {socket.gethostname().lower()}
            if host not in _WILDCARD:
                names.add(host.lower())
        for given in allow_hosts:
            name = host_name(given)
            if name is None:
                raise ValueError(f"not a host name: {given!r}")
            names.add(name)
        self.allowed_names = frozenset(names)

    def host_allowed(self, header: str) -> bool:
        """A Host header this server answers: an allowed name, or off loopback any IP address
        (a browser sends one only when the user typed it, so DNS rebinding cannot)."""
        name = host_name(header)
        if name is None:
            return False
        return name in self.allowed_names or (not self.loopback and _is_ip(name))

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        if host in _WILDCARD:
            host = socket.gethostname()
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    @property
    def url(self) -> str:
        """The page's URL, with the access token when one is needed."""
        return self.base_url + (f"?token={quote(self.token)}" if self.token else "")

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
