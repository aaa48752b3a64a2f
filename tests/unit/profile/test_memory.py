"""Memory timeline from allocator events, and source mapping from Python stacks."""

from __future__ import annotations

import numpy as np

from tests.support.profile_traces import PID, TID, cpu, document, launch, write
from trainready.profile import memory as M
from trainready.profile import source as S
from trainready.profile.trace import load_trace


def _mem(ts: float, nbytes: int, total: int | None, device: int = 0, dtype: int = 1) -> dict:
    args = {"Addr": 1 << 20, "Bytes": nbytes, "Device Type": dtype, "Device Id": device}
    if total is not None:
        args |= {"Total Allocated": total, "Total Reserved": 4 << 20}
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": PID, "tid": TID, "ts": ts,
            "args": args}  # fmt: skip


def _py(name: str, ts: float, dur: float, pyid: int) -> dict:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": PID, "tid": TID, "ts": ts,
            "dur": dur, "args": {"Python id": pyid}}  # fmt: skip


def test_memory_peak_and_where(tmp_path):
    events = [
        cpu("aten::empty", 0, 5), cpu("aten::matmul", 10, 10), cpu("aten::mm", 11, 8),
        _mem(1, 1000, 1000), _mem(12, 3000, 4000), _mem(15, -1000, 3000), _mem(30, -3000, 0),
        _mem(2, 64, 64, device=1),
    ]  # fmt: skip
    t = load_trace(write(tmp_path / "m.json", document(events)))
    summary = M.memory_summary(t)
    assert set(summary) == {"cuda:0", "cuda:1"}
    s = summary["cuda:0"]
    assert (s["peak_allocated"], s["peak_ts_ns"], s["peak_op"]) == (4000, 12000, "aten::mm")
    assert (s["allocations"], s["frees"], s["end_allocated"]) == (2, 2, 0)
    assert s["peak_reserved"] == 4 << 20
    assert M.timelines(t)["cuda:0"]["allocated"].tolist() == [1000, 4000, 3000, 0]


def test_privateuse1_memory_goes_by_its_backends_name_where_the_trace_records_it(tmp_path):
    events = [_mem(1, 64, 64, dtype=M.PRIVATEUSE1), _mem(2, 64, 64, dtype=0, device=-1)]
    named = {M.BACKEND_KEY: "npu"}
    t = load_trace(write(tmp_path / "named.json", document(events, **named)))
    assert set(M.memory_summary(t)) == {"npu:0", "cpu"}
    t = load_trace(write(tmp_path / "unnamed.json", document(events)))
    assert set(M.memory_summary(t)) == {"privateuseone:0", "cpu"}  # c10's own name
    odd = {M.BACKEND_KEY: "npu:0; rm"}  # not a device type name: c10's own name, not this text
    t = load_trace(write(tmp_path / "odd.json", document(events, **odd)))
    assert set(M.memory_summary(t)) == {"privateuseone:0", "cpu"}


def test_memory_without_running_totals_is_the_cumulative_sum(tmp_path):
    events = [_mem(1, 100, None), _mem(2, 50, None), _mem(3, -100, None)]
    t = load_trace(write(tmp_path / "m.json", document(events)))
    assert M.timelines(t)["cuda:0"]["allocated"].tolist() == [100, 150, 50]
    assert M.memory_summary(t)["cuda:0"]["peak_reserved"] is None


def test_source_lines_skip_framework_frames(tmp_path):
    events = [
        _py("train.py(3): <module>", 0, 100, 1),
        _py("train.py(20): train_step", 10, 50, 2),
        _py("torch/nn/modules/module.py(1500): _call_impl", 12, 30, 3),
        _py("/usr/lib/python3.11/site-packages/torch/nn/functional.py(10): linear", 13, 20, 4),
        cpu("aten::linear", 14, 10),
        *launch("gemm", 15, 2, 30, 40, corr=1),  # launched inside train_step
        *launch("relu_kernel", 70, 2, 80, 5, corr=2),  # launched from module level
    ]  # fmt: skip
    t = load_trace(write(tmp_path / "s.json", document(events)))
    linear = np.flatnonzero(t.name == t.symbol("aten::linear"))
    assert S.user_frames(t, linear) == ["train.py:20 train_step"]
    ranked = S.time_by_line(t)
    # The user frame and the call it made (wrappers such as _call_impl looked through); a
    # module-level frame without its line, which is only where profiling started.
    assert [(r["line"], r["time_ns"]) for r in ranked] == [
        ("train.py:20 train_step → linear (torch/nn/functional.py)", 40_000),
        ("train.py <module>", 5_000),
    ]
    assert ranked[0]["timed_on"] == "device"


def test_a_module_level_loop_splits_into_its_calls_and_the_tool_frames_are_not_yours(tmp_path):
    """A training loop at module level, run by `trainready profile` (runpy and its capture above
    it): each step's call gets its own row, never the tool's frames or one <module> line."""
    capture = "/opt/venv/src/trainready/profile/capture.py"
    events = [
        _py("<frozen runpy>(88): _run_code", 0, 1000, 1),
        _py(f"{capture}(337): main", 1, 998, 2),
        _py("tiny_train.py(17): <module>", 2, 996, 3),
        _py("torch/nn/modules/module.py(1773): _wrapped_call_impl", 10, 100, 4),
        _py("torch/nn/modules/module.py(1782): _call_impl", 11, 98, 5),
        _py("nn.Module: Sequential_0", 12, 96, 6),
        cpu("aten::linear", 20, 50),
        _py("torch/_tensor.py(566): backward", 200, 300, 7),
        cpu("aten::mm", 210, 200),
        _py("torch/optim/optimizer.py(509): wrapper", 600, 200, 8),
        _py("torch/optim/adam.py(214): step", 605, 150, 9),
        cpu("aten::add_", 610, 100),
        _py(f"{capture}(324): <lambda>", 770, 20, 10),  # the hook on the optimizer's step
        cpu("aten::zeros", 775, 5),
    ]  # fmt: skip
    t = load_trace(write(tmp_path / "loop.json", document(events)))
    ranked = {r["line"]: r["time_ns"] for r in S.time_by_line(t)}
    # aten::zeros ran in the capture's own hook: the tool's work, in nobody's row.
    assert ranked == {
        "tiny_train.py <module> → backward (torch/_tensor.py)": 200_000,
        "tiny_train.py <module> → step (torch/optim/adam.py)": 100_000,
        "tiny_train.py <module> → Sequential_0 (nn.Module)": 50_000,
    }
    assert not any("capture.py" in line or "runpy" in line for line in ranked)
    assert S.is_tool_frame(f"{capture}(337): main") and S.is_tool_frame("<frozen runpy>(88): x")
    assert S.is_tool_frame("/usr/lib/python3.11/runpy.py(198): _run_module_as_main")
    assert not S.is_tool_frame("tiny_train.py(17): <module>")
    assert not S.is_user_frame(capture)


def test_frame_parsing():
    assert S.parse_frame("a/b.py(12): forward") == ("a/b.py", 12, "forward")
    assert S.parse_frame("<built-in method add of type object>") is None
    assert S.is_user_frame("models/llama.py") and not S.is_user_frame("torch/nn/x.py")
    assert not S.is_user_frame("<frozen runpy>")
