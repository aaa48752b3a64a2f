"""Property-based fuzzing of the trace loader: whatever the bytes, `load_trace` returns a valid
trace or raises `TraceError` (one line), never another exception.

Three generators: documents built from events whose fields are the loader's own keys with values of
any JSON type (and times written every way JSON allows, out of range included), the same
documents gzipped and cut anywhere, and byte-level mutations of a real Kineto trace. Examples are
derandomized (the same inputs on every run, so CI is deterministic) and bounded in number and
size; the whole module takes a few seconds (TRAINREADY_FUZZ_EXAMPLES=N runs N fresh ones each).
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import paths
from trainready.profile import summary as rank_summary
from trainready.profile.trace import Trace, TraceError, load_trace
from trainready.profile.viewport import Viewport, summary

TRACES = paths.DATA / "traces"
SEED_TRACE = TRACES / "critical_path__cuda_event_sync__event_sync_trace.json.gz"

# TRAINREADY_FUZZ_EXAMPLES=5000 explores further, with fresh random inputs each time.
_EXAMPLES = os.environ.get("TRAINREADY_FUZZ_EXAMPLES")
FUZZ = settings(
    max_examples=int(_EXAMPLES or 120),
    deadline=None,
    derandomize=_EXAMPLES is None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
# Times as Kineto writes them (decimal text of us), and everything else JSON can spell.
times = st.one_of(
    st.integers(min_value=0, max_value=10**16),
    st.decimals(min_value=-(10**18), max_value=10**18, places=3, allow_nan=False).map(
        lambda d: float(d)
    ),
    st.sampled_from(["1e400", "-1e400", "1e30", "0.0005", "-0", "12.3456789"]),
    json_values,
)
ARG_KEYS = ["correlation", "External id", "Sequence number", "Fwd thread id", "bytes",
            "Python id", "Python parent id", "wait_on_stream", "stream", "device",
            "wait_on_cuda_event_record_corr_id", "Input Dims", "Input type", "Concrete Inputs",
            "grid", "block", "Addr", "Bytes", "Total Allocated", "Device Type", "name"]  # fmt: skip
args = st.one_of(st.dictionaries(st.sampled_from(ARG_KEYS), json_values, max_size=5), json_values)
events = st.fixed_dictionaries(
    {"ph": st.sampled_from(list("XBEstfiIMCb")) | json_values},
    optional={
        "name": st.sampled_from(["[memory]", "process_name", "thread_name", "k"]) | json_values,
        "cat": st.sampled_from(
            [
                "kernel",
                "cpu_op",
                "cuda_runtime",
                "ac2g",
                "mtia_ccp_events",
                "gpu_memcpy",
                "cuda_sync",
            ]
        )
        | json_values,  # fmt: skip
        "pid": st.integers(-2, 3) | json_values,
        "tid": st.integers(-2, 3) | json_values,
        "ts": times,
        "dur": times,
        "id": st.integers(-1, 5) | json_values,
        "bp": st.just("e") | json_values,
        "args": args,
    },
)
documents = st.one_of(
    st.lists(events, max_size=12),
    st.fixed_dictionaries(
        {"traceEvents": st.lists(events, max_size=12) | json_values},
        optional={"distributedInfo": json_values, "deviceProperties": json_values},
    ),
    json_values,
)


def _text(doc) -> bytes:
    """The document as JSON, times given as raw strings written without quotes."""
    text = json.dumps(doc, allow_nan=True)
    for raw in ("1e400", "-1e400", "1e30", "0.0005", "-0", "12.3456789"):
        text = text.replace(f'"{raw}"', raw)
    return text.encode()


def _check(data: bytes) -> None:
    """Load `data` from a file: a valid trace, or a one-line TraceError; nothing else."""
    fd, name = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            trace = load_trace(name)
        except TraceError as e:
            assert "\n" not in str(e) and str(e).startswith(name)
            return
        _valid(trace)
    finally:
        os.unlink(name)


def _valid(trace: Trace) -> None:
    n = len(trace)
    for column in ("dur", "name", "cat", "kind", "track", "correlation", "input_dims", "grid"):
        assert getattr(trace, column).shape == (n,)
    assert (trace.dur >= 0).all()
    assert (trace.ts <= np.iinfo(np.int64).max - trace.dur).all()
    if n:
        assert trace.track.min() >= 0 and trace.track.max() < len(trace.tracks)
        assert trace.name.max() < len(trace.strings)
        trace.event(n - 1)  # every kept value decodes for display
    rank_summary.summary(trace)  # every analysis runs on whatever the loader accepts
    view = Viewport(trace)  # and the explorer's index, its first view and its summary
    view.window(0, max(1, int(view.meta()["duration_ns"])), 200)
    summary(view)


@FUZZ
@given(documents)
def test_any_document(doc):
    _check(_text(doc))


@FUZZ
@given(documents, st.integers(min_value=0, max_value=4096), st.booleans())
def test_any_document_gzipped_and_cut(doc, cut, gz):
    data = gzip.compress(_text(doc)) if gz else _text(doc)
    _check(data[: max(0, len(data) - cut)])


_SEED = gzip.decompress(SEED_TRACE.read_bytes())


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=len(_SEED) - 1),
            st.sampled_from(["flip", "insert", "delete"]),
            st.binary(min_size=1, max_size=4)
            | st.sampled_from([b"[", b"{", b'"', b"-", b"e9999", b"\\u0000", b"\xff", b"]}"]),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_real_trace(edits):
    data = bytearray(_SEED)
    for at, how, piece in edits:
        at = min(at, len(data) - 1)
        if how == "flip":
            data[at : at + len(piece)] = piece
        elif how == "insert":
            data[at:at] = piece
        else:
            del data[at : at + len(piece)]
    _check(bytes(data))
