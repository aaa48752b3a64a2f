"""Dependencies (launch, stream, host, fwdbwd, event sync) and the critical path of a step."""

from __future__ import annotations

import numpy as np

from tests.support import paths
from tests.support.profile_traces import DEV, annotation, document, launch, write
from trainready.profile import deps as D
from trainready.profile.trace import load_trace

DATA = paths.DATA / "traces"
US = 1000


def _names(trace, edges):
    return [(trace.names(np.array([s]))[0], trace.names(np.array([d]))[0]) for s, d in edges]


def test_host_bound_step(tmp_path):
    """Short kernels launched slowly: the host sets the pace; the path is host time plus the
    last kernel."""
    events = [annotation("ProfilerStep#1", 0, 100),
              *launch("k1", 0, 10, 12, 2, corr=1), *launch("k2", 30, 10, 42, 2, corr=2),
              *launch("k3", 60, 10, 72, 2, corr=3)]  # fmt: skip
    t = load_trace(write(tmp_path / "h.json", document(events)))
    (cp,) = D.step_critical_paths(t)
    assert cp["length_ns"] == 74 * US  # from the first launch call to k3's end
    assert cp["by_category"] == {"host": 70 * US, "launch latency": 2 * US,
                                 "computation": 2 * US}  # fmt: skip
    assert sum(cp["by_category"].values()) == cp["length_ns"]


def test_device_bound_step(tmp_path):
    """Long kernels queued quickly: the stream sets the pace."""
    events = [annotation("ProfilerStep#1", 0, 100),
              *launch("k1", 0, 2, 5, 40, corr=1), *launch("k2", 3, 2, 45, 40, corr=2),
              *launch("k3", 6, 2, 85, 40, corr=3)]  # fmt: skip
    t = load_trace(write(tmp_path / "d.json", document(events)))
    cp = D.critical_path(t)
    assert cp["length_ns"] == 125 * US
    assert cp["by_category"] == {"computation": 120 * US, "launch latency": 3 * US,
                                 "host": 2 * US}  # fmt: skip
    assert _names(t, D.dependencies(t)["stream"]) == [("k1", "k2"), ("k2", "k3")]
    assert t.names(np.array(cp["events"])) == ["cudaLaunchKernel", "k1", "k2", "k3"]


def test_stream_wait_event_links_the_two_streams(tmp_path):
    sync = {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": DEV, "tid": 24,
            "ts": 31, "dur": 1, "args": {"device": DEV, "stream": 24, "correlation": 5,
                                         "wait_on_stream": 20,
                                         "wait_on_cuda_event_record_corr_id": 4}}  # fmt: skip
    events = [
        *launch("producer", 0, 5, 10, 50, corr=1, stream=20),
        *launch("unrelated", 20, 5, 30, 5, corr=2, stream=20),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecord", "pid": 100, "tid": 101,
         "ts": 8, "dur": 1, "args": {"correlation": 4}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 100,
         "tid": 101, "ts": 30, "dur": 1, "args": {"correlation": 5}},
        sync,
        *launch("consumer", 32, 5, 60, 5, corr=3, stream=24),
    ]  # fmt: skip
    t = load_trace(write(tmp_path / "s.json", document(events)))
    assert _names(t, D.dependencies(t)["sync"]) == [("producer", "consumer")]
    cp = D.critical_path(t)
    assert t.names(np.array(cp["events"]))[-2:] == ["producer", "consumer"]


def test_real_traces():
    t = load_trace(DATA / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert sorted(_names(t, D.dependencies(t)["fwdbwd"])) == [
        ("aten::addmm", "AddmmBackward0"), ("aten::mse_loss", "MseLossBackward0"),
        ("aten::relu", "ReluBackward0"), ("aten::t", "TBackward0"),
    ]  # fmt: skip
    t = load_trace(DATA / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz")
    sync = _names(t, D.dependencies(t)["sync"])
    assert ("ampere_sgemm_128x64_nn", "Memset (Device)") in sync  # Stream Wait Event
    assert ("ampere_sgemm_128x64_nn", "cudaDeviceSynchronize") in sync  # Context Sync
    cp = D.critical_path(t)
    assert sum(cp["by_category"].values()) == cp["length_ns"] > 0
