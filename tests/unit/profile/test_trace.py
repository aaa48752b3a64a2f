"""The trace loader: columns, exact times, hardware-unit rows, and refusing bad input."""

from __future__ import annotations

import gzip
import json
import tracemalloc

import numpy as np
import pytest

from tests.support import paths
from tests.support.profile_traces import DEV, PID, TID, annotation, cpu, document, launch, write
from trainready.profile import trace as T
from trainready.profile.trace import TraceError, load, load_trace

DATA = paths.DATA / "traces"


def test_real_traces_load_into_consistent_columns():
    for path in sorted(DATA.glob("*.json.gz")):
        t = load_trace(path)
        n = len(t)
        assert n > 0, path.name
        for col in ("ts", "dur", "name", "cat", "kind", "track", "correlation", "external_id",
                    "seq", "input_dims", "grid"):  # fmt: skip
            assert getattr(t, col).shape == (n,), (path.name, col)
        assert t.ts.dtype == np.int64 and t.name.dtype == np.int32
        assert t.name.max() < len(t.strings) and t.track.max() < len(t.tracks)
        assert (t.dur >= 0).all(), path.name
        assert not t.skipped or set(t.skipped) <= {"C"}, (path.name, t.skipped)


def test_counts_match_a_plain_json_read():
    path = DATA / "timeline_analysis__sampled_rank-0.json.gz"
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    t = load_trace(path)
    assert len(t) == sum(e.get("ph") == "X" for e in events)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert int((t.kind == T.KIND_KERNEL).sum()) == len(kernels)
    assert sorted(t.correlation[t.kind == T.KIND_KERNEL].tolist()) == sorted(
        e["args"]["correlation"] for e in kernels
    )


def test_times_are_exact_nanoseconds(tmp_path):
    # 1712195495519689.047 us is not representable as a float64 (spacing 0.25 us there).
    text = json.dumps(document([cpu("aten::mm", 0, 1)]))
    text = text.replace('"ts": 0', '"ts": 1712195495519689.047').replace(
        '"dur": 1', '"dur": 63.8135'
    )
    path = tmp_path / "t.json"
    path.write_text(text)
    t = load_trace(path)
    assert t.ts[0] == 1712195495519689047
    assert t.dur[0] == 63814  # 63.8135 us, rounded half up to whole ns


def test_rows_kinds_and_args(tmp_path):
    events = [
        annotation("ProfilerStep#3", 0, 100),
        cpu("aten::mm", 1, 50, **{"External id": 9, "Input Dims": [[4, 8], [8, 2]],
                                   "Input type": ["float", "float"], "Sequence number": 5}),
        *launch("gemm_kernel", 10, 5, 20, 30, corr=77),
        *launch("Memcpy HtoD (Pageable -> Device)", 40, 5, 60, 2, corr=78, cat="gpu_memcpy",
                api="cudaMemcpyAsync"),
        {"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": DEV, "tid": 7, "ts": 70,
         "dur": 3, "args": {"device": DEV, "stream": 7, "correlation": 80}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "main"}},
    ]  # fmt: skip
    t = load_trace(write(tmp_path / "t.json.gz", document(events)))
    assert t.names() == ["ProfilerStep#3", "aten::mm", "cudaLaunchKernel", "gemm_kernel",
                         "cudaMemcpyAsync", "Memcpy HtoD (Pageable -> Device)", "Event Sync"]  # fmt: skip
    kinds = [T.KIND_NAMES[k] for k in t.kind]
    assert kinds == ["user_annotation", "cpu_op", "runtime", "kernel", "runtime", "memcpy", "sync"]
    stream_tracks = {t.tracks[i].title for i in t.track[t.device_mask]}
    assert stream_tracks == {"device 0 stream 7"}
    assert t.tracks[t.track[0]].label == "main"
    mm = t.event(1)
    assert mm["input_dims"] == [[4, 8], [8, 2]] and mm["external_id"] == 9 and mm["seq"] == 5
    assert t.event(3)["correlation"] == 77
    # Flow arrows: starts on the host thread, finishes on the stream row.
    fin = t.flows.phase == ord("f")
    assert {t.tracks[i].kind for i in t.flows.track[fin]} == {T.TRACK_STREAM}
    assert t.flows.bind_enclosing[fin].all() and not t.flows.bind_enclosing[~fin].any()
    assert t.device_name() == "NVIDIA H100 80GB HBM3"
    assert t.symbol("gemm_kernel") >= 0 and t.symbol("nope") == -1


def test_begin_end_pairs_memory_and_array_format(tmp_path):
    events = [
        {"ph": "B", "name": "outer", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "name": "inner", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 12},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 15},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 30.5},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 20, "s": "t",
         "args": {"Addr": 4096, "Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2048,
                  "Device Type": 1, "Device Id": 0}},
        {"ph": "C", "name": "counter", "pid": 1, "ts": 5, "args": {"v": 1}},
    ]  # fmt: skip
    t = load_trace(write(tmp_path / "a.json", events))  # a bare JSON array of events
    assert t.names() == ["inner", "outer"]
    assert t.dur.tolist() == [3000, 20500]
    assert t.memory.nbytes.tolist() == [512] and t.memory.total_allocated.tolist() == [1024]
    assert t.memory.device_type.tolist() == [1]
    assert t.skipped == {"C": 1}


def test_directory_of_ranks(tmp_path):
    for rank in (1, 0):
        doc = document([cpu("aten::add", rank, 1)], distributedInfo={"rank": rank})
        write(tmp_path / f"rank{rank}.json.gz", doc)
    (tmp_path / "metadata.json").write_text("{}")
    traces = load(tmp_path)
    assert [t.rank for t in traces] == [0, 1]
    assert [t.ts[0] for t in traces] == [0, 1000]


def test_large_streamed_file_matches_small_batches(tmp_path):
    """Many events, across several read chunks and decode batches, including a name with
    '},{' inside a string (a cut there must not split the event)."""
    events = []
    for i in range(20000):
        name = "weird },{ name" if i % 997 == 0 else f"op{i % 50}"
        events.append(cpu(name, i * 2.5, 1.25, **{"External id": i}))
    path = write(tmp_path / "big.json", document(events))
    t = load_trace(path)
    assert len(t) == 20000
    assert t.external_id.tolist() == list(range(20000))
    assert t.ts[-1] == 19999 * 2500 and (t.dur == 1250).all()
    assert t.names()[997] == "weird },{ name"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"hello", "not JSON"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts"', "truncated"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2} {"ph": "X"}]}', "expected ','"),
        (b'{"schemaVersion": 1}', "without 'traceEvents'"),
        (b'{"traceEvents": [1, 2]}', "not a JSON object"),
        (b'{"traceEvents": [{"ph": "X", "ts": "soon", "dur": 1}]}', "malformed trace event"),
        (b'{"traceEvents": []} trailing', "unexpected data"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as err:
        load_trace(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_truncated_gzip(tmp_path):
    good = write(tmp_path / "g.json.gz", document([cpu("a", 0, 1)] * 200))
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(TraceError, match="corrupt or truncated gzip"):
        load_trace(cut)


def test_gzip_bomb_is_refused_in_bounded_memory(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    # A gzip file may be several members back to back: 1 MiB of whitespace compresses to ~1 KiB,
    # so 256 copies make a valid 256 MiB trace prefix in a quarter of a MiB.
    spaces = gzip.compress(b" " * (1 << 20), compresslevel=9)
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [') + spaces * 256)
    assert bomb.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match="gzip bomb"):
            load_trace(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 << 20


def test_size_cap(tmp_path):
    path = write(tmp_path / "t.json", document([cpu("a", 0, 1)] * 1000))
    with pytest.raises(TraceError, match="more than"):
        load_trace(path, max_bytes=10_000)


def test_missing_paths(tmp_path):
    with pytest.raises(TraceError, match="no such"):
        load(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="no .json"):
        load(tmp_path)


def test_begin_end_slices_keep_their_place_among_complete_ones(tmp_path):
    events = [
        cpu("first", 0, 1),
        {"ph": "B", "name": "pair", "cat": "cpu_op", "pid": PID, "tid": TID, "ts": 2},
        cpu("second", 3, 1),
        {"ph": "E", "pid": PID, "tid": TID, "ts": 5, "args": {"External id": 4}},
        cpu("third", 6, 1),
    ]
    t = load_trace(write(tmp_path / "t.json", document(events)))
    assert t.names() == ["first", "second", "pair", "third"]
    assert t.external_id.tolist() == [-1, -1, 4, -1] and t.dur[2] == 3000


def test_odd_field_types_are_read_leniently(tmp_path):
    events = [cpu("a", 0, 1, **{"External id": 1}) for _ in range(50)]
    events[7]["args"] = ["not", "an", "object"]  # dropped, as a missing args would be
    events[9]["ts"] = "1.5e1"  # exponent notation: exact through the slow path
    events[11]["args"]["External id"] = "12"  # an id written as text
    t = load_trace(write(tmp_path / "t.json", document(events)))
    assert len(t) == 50 and t.external_id[7] == -1 and t.external_id[11] == 12
    assert t.ts[9] == 15000


def _cache(tmp_path, **kw):
    from trainready.profile.cache import TraceCache

    return TraceCache(tmp_path / "cache", **kw)


def test_cache_hit_gives_the_same_trace_without_parsing(tmp_path, monkeypatch):
    from trainready.profile import cache as C

    src = DATA / "critical_path__cuda_event_sync__event_sync_trace.json.gz"
    path = tmp_path / src.name
    path.write_bytes(src.read_bytes())
    cache = _cache(tmp_path)
    first = cache.load(path)
    assert len(list(cache.directory.glob("*.npz"))) == 1

    def no_parse(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(C, "load_trace", no_parse)
    again = cache.load(path)
    for col in ("ts", "dur", "name", "kind", "track", "correlation", "input_dims", "grid"):
        assert np.array_equal(getattr(first, col), getattr(again, col)), col
    assert again.strings == first.strings and again.tracks == first.tracks
    assert again.meta == first.meta and again.rank == first.rank
    assert np.array_equal(again.flows.ts, first.flows.ts)
    assert again.event(3) == first.event(3)


def test_cache_entries_keep_their_names_with_cpython_s_own_sha256(tmp_path):
    """The entry's name is the SHA-256 of its key, as hashlib spells it (the cache takes
    CPython's built-in SHA-256 so as not to load OpenSSL): entries written before still hit."""
    import hashlib

    from trainready.profile.cache import FORMAT

    path = write(tmp_path / "t.json", document([cpu("a", 0, 1)]))
    st = path.stat()
    key = f"{FORMAT}\0{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert _cache(tmp_path).entry(path).name == digest[:32] + ".npz"


def test_cache_misses_when_the_file_changes(tmp_path):
    path = write(tmp_path / "t.json", document([cpu("old", 0, 1)]))
    cache = _cache(tmp_path)
    assert cache.load(path).names() == ["old"]
    write(path, document([cpu("new", 0, 1), cpu("more", 1, 1)]))
    assert cache.load(path).names() == ["new", "more"]


def test_corrupt_cache_entry_is_ignored_and_replaced(tmp_path):
    path = write(tmp_path / "t.json", document([cpu("a", 0, 1)]))
    cache = _cache(tmp_path)
    cache.load(path)
    entry = cache.entry(path)
    entry.write_bytes(b"PK\x03\x04 not really a zip")
    assert cache.load(path).names() == ["a"]
    assert cache.load(path).names() == ["a"] and entry.stat().st_size > 100


def test_cache_reapplies_the_limits_and_stays_bounded(tmp_path):
    path = write(tmp_path / "t.json", document([cpu("a", 0, 1)] * 1000))
    cache = _cache(tmp_path, max_bytes=1)
    cache.load(path)
    assert not list(cache.directory.glob("*.npz"))  # over the bound: trimmed away
    cache = _cache(tmp_path)
    cache.load(path)
    with pytest.raises(TraceError, match="more than"):
        cache.load(path, max_bytes=10_000)  # a hit never admits what parsing would refuse


def test_cache_can_be_turned_off(tmp_path, monkeypatch):
    from trainready.profile.cache import default_dir, load_cached

    monkeypatch.setenv("TRAINREADY_CACHE_DIR", "off")
    assert default_dir() is None
    assert load_cached(write(tmp_path / "t.json", document([cpu("a", 0, 1)]))).names() == ["a"]
    monkeypatch.setenv("TRAINREADY_CACHE_DIR", str(tmp_path / "c"))
    assert default_dir() == tmp_path / "c"


def test_a_stray_value_deep_in_a_large_array_is_one_clear_error(tmp_path):
    events = [cpu(f"op{i}", i, 1) for i in range(30000)]
    text = json.dumps(document(events))
    at = text.index('{"ph": "X", "cat": "cpu_op", "name": "op20000"')
    path = tmp_path / "t.json"
    path.write_text(text[:at] + "7, " + text[at:])
    with pytest.raises(TraceError, match="not a JSON object") as err:
        load_trace(path)
    assert "\n" not in str(err.value)


def test_fast_time_parsing_matches_the_exact_slow_path():
    import random

    import msgspec

    from trainready.profile.columns import _ns_each, ns_array

    rng = random.Random(0)
    texts = ["0", "7", "0.5", "63.8135", "0.00045", "0.00055", "12.3456789012345678"]
    for _ in range(300):
        whole = str(rng.randrange(0, 10 ** rng.randrange(1, 17)))
        places = rng.randrange(0, 7)
        decimals = "".join(rng.choice("0123456789") for _ in range(places))
        texts.append(f"{whole}.{decimals}" if places else whole)
    decimals = [t for t in texts if "." in t]
    ints = [t for t in texts if "." not in t]
    signed = [f"-{t}" if i % 2 else t for i, t in enumerate(decimals)]  # numpy's string calls
    assert len(signed) >= 32  # (fewer are converted one by one)
    for group in (decimals, ints, texts, signed, ["-1.5", "2.25"], ["1e3", "1.5"], ['"12.5"']):
        raws = [msgspec.Raw(t.encode()) for t in group]
        plain = [msgspec.json.Decoder(float_hook=str).decode(t.encode()) for t in group]
        assert ns_array(raws).tolist() == _ns_each(plain).tolist(), group


def test_compact_json_matches_json_dumps():
    from trainready.profile.columns import compact_json

    cases = [b"[[64, 512], [512, 512]]", b'["float", "float"]', b'["", "1", "False"]',
             b"[128, 1, 1]", b"[-0]", b"[-1, -2]", b'["a b", "c\\"d"]', b"[1.5, 2]",
             b'{"a": 1, "a": 2}', '["\u00e9"]'.encode(), b'["\x7f"]', b"[[], [ ]]",
             b'[ "x" , [ 1 , 2 ] ]', b'"plain"', b"12", b"[true, null]", b"[1e5]"]  # fmt: skip
    for raw in cases:
        expected = json.dumps(json.loads(raw, parse_float=str), separators=(",", ":"))
        assert compact_json(raw) == expected, raw


def test_gzip_members_padding_and_the_zlib_fallback(tmp_path, monkeypatch):
    import zlib

    events = [cpu(f"op{i}", i, 1, **{"External id": i}) for i in range(3000)]
    text = json.dumps(document(events)).encode()
    half = len(text) // 2
    path = tmp_path / "t.json.gz"  # two gzip members and zero padding, as gzip reads them
    path.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]) + b"\0" * 8)
    first = load_trace(path)
    assert len(first) == 3000 and first.external_id.tolist() == list(range(3000))
    monkeypatch.setattr(T, "_inflate_lib", zlib)  # without isal
    again = load_trace(path)
    assert again.ts.tolist() == first.ts.tolist() and again.text_bytes == len(text)
    path.write_bytes(gzip.compress(text) + b"junk")
    with pytest.raises(TraceError, match="corrupt or truncated gzip"):
        load_trace(path)


def test_phases_of_other_kinds_are_counted_not_loaded(tmp_path):
    events = [cpu("a", 0, 1), {"ph": "C", "name": "c", "pid": 1, "ts": 1, "args": {"v": 1}},
              {"ph": "Q", "name": "odd", "ts": 2}, {"name": "no phase", "ts": 3},
              {"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 4, "dur": 1,
               "args": None}]  # fmt: skip
    t = load_trace(write(tmp_path / "t.json", document(events)))
    assert t.names() == ["a", "b"] and t.skipped == {"C": 1, "Q": 1, "None": 1}
