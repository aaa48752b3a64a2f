"""The explorer's HTTP server: its API on a real trace, and its security (Host check, no path
traversal, upload limits, gzip bombs refused in bounded memory, no overwrite, clear errors)."""

from __future__ import annotations

import gzip
import http.client
import json
import shutil
import tracemalloc
import zlib

import numpy as np
import pytest

from tests.support import paths
from trainready.profile.server import Library
from trainready.profile.trace import MiB, load_trace

TRACES = paths.DATA / "traces"  # real Kineto traces (see its README)
ALEXNET = "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
SMALL = "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def request(server, method, path, body=None, headers=None):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read()
        ctype = resp.getheader("Content-Type", "")
        return resp.status, (json.loads(raw) if ctype.startswith("application/json") else raw)
    finally:
        conn.close()


def get(server, path, **headers):
    return request(server, "GET", path, headers=headers)


def upload(server, name, body, **headers):
    return request(server, "POST", f"/api/traces?name={name}", body=body, headers=headers)


@pytest.fixture
def team_dir(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    shutil.copy(TRACES / SMALL, d / SMALL)
    return d


def test_api_on_a_real_trace(serve):
    server = serve(Library(files=[TRACES / ALEXNET]))
    status, listing = get(server, "/api/traces")
    assert status == 200 and listing["uploads"] is False
    assert [t["id"] for t in listing["traces"]] == [ALEXNET]

    status, meta = get(server, f"/api/traces/{ALEXNET}/meta")
    assert status == 200
    titles = [r["title"] for r in meta["rows"]]
    assert "stream 7 kernels" in titles and any(t.startswith("thread ") for t in titles)
    assert meta["rows"][0]["group"].startswith("device 0")  # device rows first

    status, view = get(server, f"/api/traces/{ALEXNET}/view?t0=0&t1={meta['duration_ns']}&px=800")
    assert status == 200
    sent = sum(len(r["ev"]["id"]) + sum(r["agg"]["n"]) for r in view["rows"])
    assert sent == meta["events"]  # every event is drawn, alone or in an aggregate

    trace = load_trace(TRACES / ALEXNET)
    kernel = int(np.flatnonzero(trace.kind == 4)[3])
    status, det = get(server, f"/api/traces/{ALEXNET}/events/{kernel}")
    assert status == 200 and det["event"]["kind"] == "kernel"
    launch = [d for d in det["dependencies"] if d["type"] == "launch"]
    assert len(launch) == 1 and launch[0]["place"]["name"] == "cudaLaunchKernel"
    corr = trace.correlation[kernel]
    assert trace.correlation[launch[0]["place"]["id"]] == corr
    assert {t["type"] for t in det["types"]} == {"launch", "stream"}

    status, summary = get(server, f"/api/traces/{ALEXNET}/summary")
    assert status == 200 and summary["device"] == "NVIDIA A100-PG509-200"
    assert summary["top_kernels"][0]["name"] == "ampere_sgemm_32x32_sliced1x4_tn"

    status, found = get(server, f"/api/traces/{ALEXNET}/search?q=SGEMM")
    names = trace.names()
    assert found["total"] == sum("sgemm" in n.lower() for n in names) > 0

    status, page = get(server, "/")
    assert status == 200 and b"<canvas" in page
    status, cmp = get(server, f"/api/compare?a={ALEXNET}&b={ALEXNET}")
    assert status == 200 and all(k["a_ns"] == k["b_ns"] for k in cmp["kernels"])


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/../../etc/passwd", 404),
        ("/api/traces/..%2F..%2Fetc%2Fpasswd/meta", 404),
        ("/api/traces/%2Fetc%2Fpasswd/meta", 404),
        ("/web/../server.py", 404),
        (f"/api/traces/{ALEXNET}/events/99999999", 404),
        (f"/api/traces/{ALEXNET}/events/-1", 404),
        (f"/api/traces/{ALEXNET}/view?t0=nan&t1=5", 400),
        (f"/api/traces/{ALEXNET}/view?t1=5", 400),
    ],
)
def test_serves_only_its_traces(serve, path, status):
    server = serve(Library(files=[TRACES / ALEXNET]))
    code, body = get(server, path)
    assert code == status and body["error"]


def test_symlink_out_of_the_directory_is_not_served(serve, team_dir, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"traceEvents": []}')
    (team_dir / "link.json").symlink_to(secret)
    server = serve(Library(directory=team_dir))
    _, listing = get(server, "/api/traces")
    assert [t["id"] for t in listing["traces"]] == [SMALL]
    assert get(server, "/api/traces/link.json/meta")[0] == 404


def test_foreign_host_header_is_refused(serve):
    server = serve(Library(files=[TRACES / ALEXNET]))
    status, body = get(server, "/api/traces", Host="attacker.example:80")
    assert status == 403 and "Host" in body["error"]


def test_binds_loopback_by_default(serve):
    server = serve(Library(files=[TRACES / ALEXNET]))
    assert server.server_address[0] == "127.0.0.1"


def test_upload_is_stored_listed_and_never_overwrites(serve, team_dir):
    server = serve(Library(directory=team_dir))
    body = (TRACES / ALEXNET).read_bytes()
    status, first = upload(server, "run.json.gz", body)
    assert status == 201 and first["id"] == "run.json.gz"
    original = (team_dir / SMALL).read_bytes()
    status, second = upload(server, SMALL, body)  # same name as a file already there
    assert status == 201 and second["id"] != SMALL and second["id"].endswith(".json.gz")
    assert (team_dir / SMALL).read_bytes() == original
    status, third = upload(server, "../../escape.json.gz", body)  # a path is reduced to a name
    assert status == 201 and third["id"] == "escape.json.gz"
    assert (team_dir / "escape.json.gz").read_bytes() == body
    _, listing = get(server, "/api/traces")
    ids = {t["id"] for t in listing["traces"]}
    assert ids == {SMALL, "run.json.gz", second["id"], "escape.json.gz"}
    assert get(server, f"/api/traces/{second['id']}/meta")[0] == 200
    assert not list(team_dir.glob(".upload-*"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "na', "truncated"),
        (b'{"hello": "world"}', "not a profiler trace"),
        (gzip.compress(b'{"traceEvents": [')[:-12], "gzip"),
        (b"\x00\x01binary", "not JSON"),
    ],
    ids=["truncated", "not-a-trace", "truncated-gzip", "binary"],
)
def test_bad_upload_is_one_clear_error_and_leaves_nothing(serve, team_dir, body, message):
    server = serve(Library(directory=team_dir))
    status, reply = upload(server, "bad.json", body)
    assert status == 422, reply
    assert message in reply["error"] and "\n" not in reply["error"]
    assert str(team_dir) not in reply["error"]  # no server paths in errors
    assert sorted(p.name for p in team_dir.iterdir()) == [SMALL]


def test_oversized_upload_is_refused_before_its_body_is_read(serve, team_dir):
    server = serve(Library(directory=team_dir, max_upload_bytes=1 * MiB))
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest("POST", "/api/traces?name=huge.json")
        conn.putheader("Content-Length", str(50 * 1024 * MiB))  # 50 GiB announced, none sent
        conn.endheaders()
        resp = conn.getresponse()
        assert resp.status == 413 and "over the limit" in json.loads(resp.read())["error"]
    finally:
        conn.close()
    assert sorted(p.name for p in team_dir.iterdir()) == [SMALL]


def test_upload_needs_a_length_and_our_origin(serve, team_dir):
    server = serve(Library(directory=team_dir))
    body = (TRACES / SMALL).read_bytes()
    status, reply = upload(server, "x.json.gz", body, Origin="http://evil.example")
    assert status == 403 and "this page" in reply["error"]
    status, reply = upload(server, "x.json.gz", body, **{"Sec-Fetch-Site": "cross-site"})
    assert status == 403
    status, reply = upload(server, "x.txt", body)
    assert status == 400 and ".json" in reply["error"]
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest("POST", "/api/traces?name=x.json", skip_accept_encoding=True)
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        resp = conn.getresponse()
        assert resp.status == 411
    finally:
        conn.close()
    assert sorted(p.name for p in team_dir.iterdir()) == [SMALL]


def test_uploads_are_off_when_exploring_files(serve):
    server = serve(Library(files=[TRACES / ALEXNET]))
    status, reply = upload(server, "x.json.gz", (TRACES / SMALL).read_bytes())
    assert status == 403 and "--serve" in reply["error"]


def gzip_bomb(decompressed_gib: int) -> bytes:
    """A small multi-member gzip file whose text is a trace header then GiBs of spaces."""
    block = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = block.compress(b" " * (4 * MiB)) + block.flush()  # 4 MiB in about 4 KiB
    head = gzip.compress(b'{"traceEvents": [')
    return head + member * (decompressed_gib * 256)


def test_gzip_bomb_is_refused_within_bounded_memory(serve, team_dir):
    bomb = gzip_bomb(4)  # 4 GiB of text in a few MiB
    assert len(bomb) < 32 * MiB
    server = serve(Library(directory=team_dir, max_upload_bytes=64 * MiB))
    tracemalloc.start()
    try:
        status, reply = upload(server, "bomb.json.gz", bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 422 and "refused" in reply["error"]
    assert peak < 256 * MiB, f"peak {peak / MiB:.0f} MiB while refusing a gzip bomb"
    assert sorted(p.name for p in team_dir.iterdir()) == [SMALL]


def test_reopening_a_trace_reads_the_parsed_cache(tmp_path, monkeypatch):
    from trainready.profile import cache as C

    Library(files=[TRACES / ALEXNET]).get(ALEXNET)  # parses and stores the columns
    assert len(list((tmp_path / "parsed").glob("*.npz"))) == 1

    def no_parse(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(C, "load_trace", no_parse)
    loaded = Library(files=[TRACES / ALEXNET]).get(ALEXNET)  # a new server: from the cache
    assert len(loaded.trace) == len(load_trace(TRACES / ALEXNET))
    assert Library(files=[TRACES / ALEXNET], parsed_cache=False).parsed is None


def _no_constants(token):
    raise AssertionError(f"{token} is not JSON")


def test_replies_write_nan_and_infinity_as_null(serve, monkeypatch):
    """JSON has no NaN: a NaN or infinite number in a reply (a Python or a numpy float) is sent
    as null, in a 200 reply the browser's JSON.parse reads, never as `NaN` / `Infinity`."""
    from trainready.profile import server as server_module

    odd = {"nan": float("nan"), "inf": [float("inf"), -float("inf")], "np_nan": np.float64("nan"),
           "np": [np.int64(3), np.float32(0.5), np.bool_(True)], "ok": 1.25}  # fmt: skip
    monkeypatch.setattr(server_module.Loaded, "summary", lambda self: odd)
    server = serve(Library(files=[TRACES / ALEXNET]))
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", f"/api/traces/{ALEXNET}/summary")
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    assert resp.status == 200
    assert json.loads(raw, parse_constant=_no_constants) == {
        "nan": None, "inf": [None, None], "np_nan": None, "np": [3, 0.5, True], "ok": 1.25
    }  # fmt: skip
    with pytest.raises(TypeError, match="cannot encode a object"):
        server_module.encode_json({"x": object()})
