import json
import warnings
from pathlib import Path

import torch

from tests.support import paths
from trainready.core.case import Case, Result
from trainready.device import (
    fallback_watch,
    parse_fallback_warnings,
    xla_fallback_counts,
)
from trainready.probes.compile import (
    FIRST_COMPILE_KEY,
    CompileProbe,
    cache_counts,
    cache_sentence,
    first_compile_in_process,
    parse_graph_break,
    parse_recompile,
)
from trainready.probes.ops import OpsProbe
from trainready.reporting.model import compile_note

DATA = paths.DATA / "parity"

# A graph_breaks log record as torch 2.13's dynamo writes it (trimmed).
GRAPH_BREAK = """Graph break in user code at /src/model.py:12
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Unsupported Tensor.item() call with capture_scalar_outputs=False
  Explanation: Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.

User code traceback:
  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1789, in _call_impl
    return forward_call(*args, **kwargs)
  File "/src/model.py", line 12, in forward
    s = x.max().item()
        ^^^^^^^^^^^^^^

"""


def test_parse_graph_break_names_reason_location_and_user_frames():
    gb = parse_graph_break(GRAPH_BREAK)
    assert gb.reason == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert gb.where == "/src/model.py:12"
    assert gb.user_stack[-1] == 'File "/src/model.py", line 12, in forward | s = x.max().item()'


def test_parse_recompile_names_function_and_first_guard():
    text = (
        "Recompiling function f in /src/m.py:10\n"
        "    triggered by the following guard failure(s):\n"
        "    - 0/0: tensor 'x' size mismatch at index 0. expected 4, actual 5"
    )
    assert parse_recompile(text) == (
        "f in /src/m.py:10: 0/0: tensor 'x' size mismatch at index 0. expected 4, actual 5"
    )


def _item_then_cos(x):
    if x.sum().item() > 0:
        x = x * 2
    return x.cos()


def test_compile_probe_counts_breaks_recompiles_and_stack():
    torch._dynamo.reset()
    fn = torch.compile(_item_then_cos, backend="eager", dynamic=False)
    with CompileProbe() as probe:
        fn(torch.ones(4))
        fn(torch.ones(5))  # a new static shape: a recompile
    r = probe.report
    assert r.graph_breaks >= 1
    assert any("item()" in why for why in r.break_reasons)
    assert r.recompiles >= 1 and "size mismatch" in " ".join(r.recompile_reasons)
    assert r.breaks[0].where.endswith(
        f"{Path(__file__).name}:{_item_then_cos.__code__.co_firstlineno + 1}"
    )
    assert any("_item_then_cos" in frame for frame in r.breaks[0].user_stack)
    assert r.frames >= 1 and r.eager_frames == 0


def test_ops_probe_sees_ops_host_reads_and_their_line():
    x = torch.randn(3, 3)
    with OpsProbe("cpu") as probe:
        y = (x @ x).relu()
        y.sum().item()  # line A
        z = y.cpu()  # line B
    r = probe.report
    assert r.ops["aten.mm@cpu"] == 1 and r.ops["aten.relu@cpu"] == 1
    assert r.scalar_reads == 1
    sites = {op: site for (op, site) in r.host_calls}
    assert sites["Tensor.item"].endswith(f"{Path(__file__).name}:{_line('# line A')}")
    assert sites["Tensor.cpu"].endswith(f"{Path(__file__).name}:{_line('# line B')}")
    assert r.host_round_trips == 3  # .item(), .cpu(), and the item's scalar read
    assert z is y  # the probe changes nothing: .cpu() of a CPU tensor is the tensor
    assert r.fallback_source.startswith("none")


def _line(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if ln.rstrip().endswith(marker))


def test_mps_fallback_warnings_recorded():
    text = (DATA / "mps_fallback_warnings.txt").read_text()
    assert parse_fallback_warnings([text]) == {
        "aten::_linalg_solve_ex.result": 2,
        "aten::nonzero": 1,
    }


def test_xpu_fallback_warning_recorded():
    text = (DATA / "xpu_fallback_warnings.txt").read_text()
    assert parse_fallback_warnings([text]) == {"aten::_cdist_forward": 1}


def test_unrelated_warnings_are_not_fallbacks():
    assert parse_fallback_warnings(["The operator 'aten::mm' is deprecated", "falls back"]) == {}


def test_xla_counters_keep_nonzero_aten_ops_only():
    # the scalar read (_local_scalar_dense, 20 here) is a host round-trip, not a fallback
    counters = json.loads((DATA / "xla_counters.json").read_text())
    assert xla_fallback_counts(counters) == {"aten::nonzero": 2}


def test_fallback_watch_catches_warnings_on_an_accelerator_type():
    """The warning path, driven by a warning of the boxed-fallback format on a non-CPU type."""
    watch = fallback_watch("meta")
    with watch:
        warnings.warn(
            "The operator 'aten::foo' is not currently supported on the MPS backend and will fall "
            "back to run on the CPU.",
            UserWarning,
            stacklevel=1,
        )
    assert watch.ops == {"aten::foo": 1}
    assert "warnings" in watch.source


def test_fallback_watch_on_cpu_reports_nothing_to_fall_back_from():
    with fallback_watch("cpu") as w:
        torch.randn(2).sum()
    assert w.ops == {} and "CPU" in w.source


def test_only_a_processs_first_compile_per_device_type_and_backend_is_first():
    # Backends no other test compiles with, so the answer does not depend on test order.
    assert first_compile_in_process("cpu", "probe-test-a") is True
    assert first_compile_in_process("cpu", "probe-test-a") is False
    assert first_compile_in_process("cpu:0", "probe-test-a") is False  # same device type
    assert first_compile_in_process("emu:0", "probe-test-a") is True
    assert first_compile_in_process("cpu", "probe-test-b") is True


def test_the_reports_note_names_only_a_first_compile():
    case = Case("parity", "synthetic/base/compile/fp32", {})
    first = Result(case, "pass", diagnostics={FIRST_COMPILE_KEY: True})
    later = Result(case, "pass", diagnostics={FIRST_COMPILE_KEY: False})
    assert "one-time start-up" in compile_note(first)
    assert compile_note(later) == compile_note(Result(case, "pass")) == compile_note(None) == ""


def test_a_backend_without_a_compile_cache_looks_none_up_and_is_said_to_compile_cold():
    """aot_eager keeps no cache: a compile with it moves none of torch's cache counters (the
    Inductor half, hits in a warm process, is the train suite's test)."""
    before = cache_counts()
    f = torch.compile(lambda x: (x.sin() * 2).sum(), backend="aot_eager")
    f(torch.randn(4, requires_grad=True)).backward()
    after = cache_counts()
    assert after == before and set(after) >= {"fxgraph_hit", "aot_autograd_hit"}
    zero = dict.fromkeys(after, 0)
    assert cache_sentence(zero, "aot_eager") == (
        "no compile cache looked up (backend aot_eager keeps none): a cold compile"
    )


def test_the_cache_sentence_counts_hits_over_lookups_and_says_when_nothing_was_recorded():
    counts = {"fxgraph_hit": 3, "fxgraph_miss": 1, "aot_autograd_hit": 1, "aot_autograd_miss": 0}
    assert cache_sentence(counts, "inductor") == "4 of 5 compile-cache lookups hit"
    missed = dict.fromkeys(counts, 0) | {"fxgraph_miss": 2}
    assert cache_sentence(missed, "inductor") == "no compile-cache hit: 2 lookups missed"
    assert cache_sentence(None, "inductor") == "compile-cache lookups not recorded"
