"""The trace loader: columns, exact times, hardware-unit rows, and refusing bad input."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from tests.profile_traces import DEV, PID, TID, annotation, cpu, document, launch, write
from trainready.profile import trace as T
from trainready.profile.trace import TraceError, load, load_trace

DATA = Path(__file__).parent / "data" / "traces"


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
