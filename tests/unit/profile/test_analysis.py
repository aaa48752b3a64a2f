"""Trace analyses on a hand-built timeline whose every number can be checked on paper.

Times in us. Steps 1-3 are [0,100), [100,200), [200,300). Device activity:

    k1 gemm     stream 7   [20, 50)   launched at 10-15    computation
    k2 gemm     stream 7   [55, 60)   launched at 30-35    computation
    k3 nccl     stream 20  [45, 75)   launched at 40-45    communication
    k4 memcpy   stream 7   [120,130)  launched at 110-115  memory
    k5 gemm     stream 7   [200,240)  launched at 125-127  computation
    k6 gemm     stream 7   [250,260)  launched at 210-215  (last step: left out by default)
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.profile_traces import annotation, document, kernel, launch, runtime, write
from trainready.profile import analysis as A
from trainready.profile import intervals
from trainready.profile.summary import summary
from trainready.profile.trace import load_trace

US = 1000


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    events = [
        annotation("ProfilerStep#1", 0, 100),
        annotation("ProfilerStep#2", 100, 100),
        annotation("ProfilerStep#3", 200, 100),
        *launch("gemm", 10, 5, 20, 30, corr=1),
        *launch("gemm", 30, 5, 55, 5, corr=2),
        *launch("ncclKernel_AllReduce_RING_LL_Sum_float", 40, 5, 45, 30, corr=3, stream=20),
        *launch("Memcpy HtoD (Pinned -> Device)", 110, 5, 120, 10, corr=4, cat="gpu_memcpy",
                api="cudaMemcpyAsync"),
        *launch("gemm", 125, 2, 200, 40, corr=5),
        *launch("gemm", 210, 5, 250, 10, corr=6),
    ]  # fmt: skip
    path = tmp_path_factory.mktemp("t") / "t.json.gz"
    return load_trace(write(path, document(events)))


def test_window_leaves_out_the_last_step(trace):
    win = A.window(trace)
    assert win.trimmed_last_step and win.last_step_start_ns == 200 * US
    kept = set(trace.names(np.flatnonzero(win.keep & trace.device_mask)))
    assert len(np.flatnonzero(win.keep & trace.device_mask)) == 5 and "gemm" in kept
    assert A.window(trace, trim_last_step=False).keep.all()


def test_temporal_breakdown(trace):
    t = A.temporal_breakdown(trace)
    assert t["span_ns"] == 220 * US
    assert t["idle_ns"] == 115 * US
    assert t["compute_ns"] == 75 * US
    assert t["non_compute_ns"] == 30 * US
    assert t["idle_pct"] == pytest.approx(100 * 115 / 220)


def test_kernel_type_breakdown(trace):
    kt = A.kernel_type_breakdown(trace)
    assert kt["busy_ns"] == 105 * US
    got = {k: v["ns"] // US for k, v in kt["types"].items()}
    assert got == {
        "computation": 65,
        "communication": 20,
        "computation overlapping communication": 10,
        "memory": 10,
    }


def test_comm_comp_overlap(trace):
    ov = A.comm_comp_overlap(trace)
    assert ov["communication_ns"] == 30 * US and ov["overlap_ns"] == 10 * US
    assert ov["overlap_pct"] == pytest.approx(100 / 3)


def test_idle_time_by_cause(trace):
    streams = {s["stream"]: s for s in A.idle_time_breakdown(trace)["streams"]}
    s7 = streams[7]
    assert (s7["kernel_wait_ns"], s7["host_wait_ns"], s7["other_ns"]) == (5 * US, 60 * US, 70 * US)
    assert s7["idle_ns"] == 135 * US
    assert streams[20]["idle_ns"] == 0 and streams[20]["host_wait_pct"] is None


def test_launch_stats(trace):
    ls = A.launch_stats(trace)
    assert (ls["count"], ls["kernels"], ls["memory"], ls["multi_launches"]) == (5, 4, 1, 0)
    assert ls["delay_ns"]["sum"] == (5 + 20 + 0 + 5 + 73) * US
    assert ls["delay_ns"]["max"] == 73 * US
    assert ls["short_kernels"] == 0  # every activity here outlasts its 2-5 us launch call


def test_steps_bill_device_work_to_the_launching_step(trace):
    steps = {s["step"]: s for s in A.step_breakdown(trace)}
    assert steps[1]["device_busy_ns"] == 55 * US and steps[1]["compute_ns"] == 35 * US
    assert steps[1]["step_ns"] == 100 * US
    assert steps[2]["activities"] == 2 and steps[2]["device_busy_ns"] == 50 * US
    assert steps[2]["device_end_ns"] == 240 * US and steps[2]["step_ns"] == 140 * US
    assert steps[3]["device_busy_ns"] == 10 * US


def test_hardware_rows(trace):
    rows = {r["row"]: r for r in A.hardware_rows(trace)}
    assert rows["device 0 stream 7 kernels"]["events"] == 4
    assert rows["device 0 stream 7 memory"]["busy_ns"] == 10 * US
    assert rows["device 0 stream 20 kernels"]["busy_ns"] == 30 * US


def test_summary_is_json_ready(trace):
    import json

    s = summary(trace)
    assert json.loads(json.dumps(s))["temporal"]["span_ns"] == 220 * US


def test_overlapping_activities_on_one_stream_are_not_negative_idle(tmp_path):
    events = [*launch("a", 0, 1, 10, 20, corr=1), *launch("b", 2, 1, 25, 10, corr=2),
              *launch("c", 3, 1, 40, 5, corr=3)]  # fmt: skip
    t = load_trace(write(tmp_path / "o.json", document(events)))
    s = A.idle_time_breakdown(t)["streams"][0]
    assert A.stream_gaps(t)[7]["gap_ns"].tolist() == [-5 * US, 5 * US]
    assert s["idle_ns"] == 5 * US  # HTA would report 0: -5 + 5


def test_graph_launch_is_counted_apart(tmp_path):
    events = [runtime("cudaGraphLaunch", 0, 5, corr=9), kernel("k1", 10, 2, 9),
              kernel("k2", 13, 2, 9), *launch("k3", 20, 1, 30, 1, corr=10)]  # fmt: skip
    t = load_trace(write(tmp_path / "g.json", document(events)))
    ls = A.launch_stats(t)
    assert (ls["count"], ls["multi_launches"], ls["multi_activities"]) == (1, 1, 2)


def test_kernel_type_rules():
    assert A.kernel_type_of("ncclDevKernel_AllGather_RING_LL", 4) == A.COMMUNICATION
    assert A.kernel_type_of("Memset (Device)", 6) == A.MEMORY
    assert A.kernel_type_of("dma_request", 4) == A.MEMORY
    assert A.kernel_type_of("cudaStreamSync kernel", 4) == A.OTHER
    assert A.kernel_type_of("ampere_sgemm_128x64_nn", 4) == A.COMPUTATION


def test_interval_helpers():
    s = np.array([0, 5, 10, 30]) * US
    e = np.array([10, 8, 20, 40]) * US
    us_, ue = intervals.union(s, e)
    assert (us_ // US).tolist() == [0, 30] and (ue // US).tolist() == [20, 40]
    assert intervals.total(s, e) == 30 * US
    a = (np.array([0, 50]), np.array([10, 60]))
    b = (np.array([5]), np.array([55]))
    assert intervals.intersection_total(a, b) == 10
    assert intervals.sweep([a, b]) == {1: 10, 3: 10, 2: 40}
    assert intervals.sweep([]) == {} and intervals.total(s[:0], e[:0]) == 0


def test_enclosing_matches_a_step_back_search():
    """The innermost-enclosing lookup (source lines, fwdbwd ends) against the plain search it
    replaces: the last interval by start with start <= t <= end."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(0, 40))
        starts = np.sort(rng.integers(0, 100, n))
        ends = starts + rng.integers(0, 50, n)
        at = rng.integers(-5, 160, 25)
        got = intervals.enclosing(starts, ends, at)
        for t, g in zip(at.tolist(), got.tolist(), strict=True):
            k = int(np.searchsorted(starts, t, side="right")) - 1
            while k >= 0 and ends[k] < t:
                k -= 1
            assert g == k
