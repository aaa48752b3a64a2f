"""The explorer's level of detail: what a window sends (events a pixel wide or more, aggregates of
the rest, idle gaps), lanes for nesting, the memory track, dependencies; and that the answer for a
big trace is bounded by the pixels, not the events."""

from __future__ import annotations

import json

import pytest

from benchmarks.explorer_first_paint import write_trace
from tests.support import paths
from trainready.profile.trace import load_trace
from trainready.profile.viewport import (
    Graph,
    OpFlops,
    Viewport,
    compare,
    event_details,
    summary,
)


def slice_(name, cat, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            "args": args}  # fmt: skip


def kernel(name, ts, dur, corr, stream=7):
    return slice_(name, "kernel", ts, dur, pid=0, tid=stream, device=0, stream=stream,
                  correlation=corr)  # fmt: skip


@pytest.fixture
def small(tmp_path):
    """A hand-made trace: a nested host op that launches two kernels, tiny kernels, a bubble."""
    events = [
        slice_("ProfilerStep#1", "user_annotation", 0, 1000),
        slice_("aten::linear", "cpu_op", 10, 100, **{"External id": 1}),
        slice_("aten::addmm", "cpu_op", 20, 50, **{"External id": 1,
               "Input Dims": [[64], [32, 128], [128, 64]], "Input type": ["float"] * 3}),
        slice_("cudaLaunchKernel", "cuda_runtime", 30, 10, correlation=11),
        slice_("cudaLaunchKernel", "cuda_runtime", 45, 10, correlation=12),
        kernel("gemm", 100, 200, 11),
        kernel("gemm", 300, 100, 12),  # touches the previous kernel: no gap
        *[kernel("tiny", 600 + i, 0.2, 100 + i) for i in range(10)],  # 10 x 0.2 us in 10 us
        kernel("late", 900, 50, 13),  # 290 us bubble before it
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 100,
         "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 1000, "Bytes": 1000}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 500,
         "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 300, "Bytes": -700}},
    ]  # fmt: skip
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return Viewport(load_trace(path))


def row_named(view, title):
    return next(r for r in view.rows if r.title == title)


def test_rows_are_hardware_units_grouped_with_lanes_for_nesting(small):
    titles = [(r.group, r.title) for r in small.rows]
    assert titles == [("device 0", "stream 7 kernels"), ("process 1", "thread 1")]
    host = row_named(small, "thread 1")
    assert host.lanes == 4  # step > linear > addmm > launch
    place = small.place(3)  # the first cudaLaunchKernel, inside addmm inside linear
    assert place["lane"] == 3 and place["row"] == host.id


def test_window_sends_wide_events_and_aggregates_the_rest(small):
    k = row_named(small, "stream 7 kernels")
    w = small.window(0, 1_000_000, px=100, rows=[k.id])  # 10 us per pixel
    (row,) = w["rows"]
    names = [w["names"][i] for i in row["ev"]["name"]]
    assert names == ["gemm", "gemm", "late"]
    assert row["ev"]["ts"] == [100_000, 300_000, 900_000] and row["ev"]["dur"][0] == 200_000
    agg = row["agg"]
    assert agg["x"] == [60] and agg["n"] == [10]  # ten tiny kernels in one pixel column
    assert agg["fill"] == [0.2]  # they cover 2 us of its 10 us
    assert small.trace.strings[small.trace.name[agg["rep"][0]]] == "tiny"
    assert row["gaps"] == [[400_000, 600_000], [609_200, 900_000]]  # gaps under 1 px: not sent


def test_window_clips_to_time_and_keeps_long_events_that_start_before_it(small):
    host = row_named(small, "thread 1")
    w = small.window(60_000, 80_000, px=200, rows=[host.id])
    names = sorted(w["names"][i] for i in w["rows"][0]["ev"]["name"])
    assert names == ["ProfilerStep#1", "aten::addmm", "aten::linear"]  # launches end before


def test_search_and_hits_in_the_window(small):
    found = small.search("GEMM")
    assert found["total"] == 2 and found["names"] == [{"name": "gemm", "count": 2}]
    w = small.window(0, 1_000_000, px=100, query="tiny")
    k = next(r for r in w["rows"] if r["row"] == row_named(small, "stream 7 kernels").id)
    assert k["ev"]["hit"] == [] and k["agg"]["hit"] == [10]


def test_memory_track_keeps_min_and_max_per_pixel(small):
    m = small.memory(0, 1_000_000, px=1)
    (s,) = m["series"]
    assert s["max"] == [1000] and s["min"] == [300] and s["last"] == [300] and s["peak"] == 1000
    later = small.memory(600_000, 1_000_000, px=10)["series"][0]
    assert later["start"] == 300 and later["x"] == []  # the value in force, nothing new


def test_event_details_types_dependencies_both_ways(small):
    graph = Graph(small.trace)
    det = event_details(small, 5, graph=graph)  # the first gemm
    deps = {(d["type"], d["place"]["name"]) for d in det["dependencies"]}
    after = {(d["type"], d["place"]["name"]) for d in det["dependents"]}
    # the step's critical path runs launch 3 -> gemm 5 -> gemm 6 (deps.critical_path)
    assert deps == {("launch", "cudaLaunchKernel"), ("critical", "cudaLaunchKernel")}
    assert after == {("stream", "gemm"), ("critical", "gemm")}
    assert {t["type"] for t in det["types"]} == {"launch", "stream", "critical"}
    launch = event_details(small, 3, graph=graph)
    assert ("launch", 5) in [(d["type"], d["place"]["id"]) for d in launch["dependents"]]
    assert ("host", 4) in [(d["type"], d["place"]["id"]) for d in launch["dependents"]]


def test_kernel_details_carry_the_flops_of_the_op_that_launched_it(small):
    flops = OpFlops(small.trace)
    f = event_details(small, 5, flops)["flops"]  # the first gemm, launched inside addmm
    assert f["op"] == "aten::addmm" and not f["of_this_event"]
    assert f["flops"] == 2 * 32 * 64 * 128 and f["dtype"] == "fp32"
    assert f["tflops_per_s"] == pytest.approx(2 * 32 * 64 * 128 / 300e-6 / 1e12)  # both gemms
    assert f["mfu"] is None and "not recorded" in f["peak"]  # no device name: no made-up peak
    assert event_details(small, 2, flops)["flops"]["of_this_event"]  # addmm itself
    assert event_details(small, 13, flops)["flops"] is None  # a tiny kernel, no counted op


def test_cross_stream_sync_on_a_real_trace():
    path = paths.DATA / "traces"
    trace = load_trace(
        path / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz"
    )
    view, graph = Viewport(trace), Graph(trace)
    is_sync = graph.type == graph.types.index("sync")
    sync = list(zip(graph.src[is_sync], graph.dst[is_sync], strict=True))
    assert sync, "the trace synchronises streams through CUDA events"
    src, dst = map(int, sync[0])
    det = event_details(view, dst, graph=graph)
    waits = [d for d in det["dependencies"] if d["type"] == "sync"]
    assert src in [d["place"]["id"] for d in waits]
    assert {"type": "sync", "label": "cross-stream / host sync (CUDA events)"} in det["types"]


def test_summary_and_compare(small):
    s = summary(small)
    assert s["top_kernels"][0]["name"] == "gemm" and s["top_kernels"][0]["total_ns"] == 300_000
    assert s["steps"] == 1 and s["step_time_ns"] is not None
    c = compare(s, s)
    assert c["a"]["step_time_ns"] == c["b"]["step_time_ns"]
    assert {k["name"] for k in c["kernels"]} == {"gemm", "tiny", "late"}


def test_answer_is_bounded_by_pixels_not_events(tmp_path):
    path = tmp_path / "big.json"
    write_trace(path, 20_000)
    view = Viewport(load_trace(path))
    w = view.window(0, view.end_ns, px=300)
    items = sum(len(r["ev"]["id"]) + len(r["agg"]["x"]) + len(r["gaps"]) for r in w["rows"])
    lanes = sum(r.lanes for r in view.rows)
    assert items <= 2 * 300 * lanes  # each lane: at most a wide event or an aggregate per pixel
    assert sum(len(r["ev"]["id"]) + sum(r["agg"]["n"]) for r in w["rows"]) == len(view.trace)
    assert len(view.trace) > 10 * items  # most events travel as aggregates
