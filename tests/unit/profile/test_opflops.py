"""FLOPs per op from recorded shapes, achieved TFLOP/s and MFU against the device's peak."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support import paths
from tests.support.profile_traces import annotation, cpu, document, launch, write
from trainready.metrics.flops import attention_flops
from trainready.metrics.peaks import PEAKS
from trainready.profile import opflops as F
from trainready.profile.trace import load_trace

DATA = paths.DATA / "traces"


def test_formulas():
    assert F.op_flops("aten::mm", [[4, 8], [8, 3]], []) == 2 * 4 * 3 * 8
    assert F.op_flops("aten::addmm", [[3], [4, 8], [8, 3], [], []], []) == 2 * 4 * 3 * 8
    assert F.op_flops("aten::bmm", [[5, 4, 8], [5, 8, 3]], []) == 5 * 2 * 4 * 3 * 8
    # conv2d: N=2, C=3 -> O=16, 32x32 input, 3x3 kernel, stride 1, padding 1 -> 32x32 output.
    conv = [[2, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []]
    concrete = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    assert F.op_flops("aten::convolution", conv, concrete) == 2 * 2 * 16 * 32 * 32 * 3 * 9
    strided = ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]
    assert F.op_flops("aten::convolution", conv, strided) == 2 * 2 * 16 * 15 * 15 * 3 * 9
    q = [2, 8, 128, 64]
    sdpa = F.op_flops("aten::_scaled_dot_product_flash_attention_for_cpu", [q, q, q], ["", "",
                      "", "0.0", "True"])  # fmt: skip
    assert sdpa == attention_flops(2, 8, 128, 128, 64, causal=True)
    assert F.op_flops("aten::relu", [[4]], []) is None
    assert F.op_flops("aten::mm", [[4, 8]], []) is None  # does not fit the signature


def _gemm_trace(tmp_path, name: str, dur_us: float) -> Path:
    m = n = k = 4096
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        cpu("aten::mm", 10, 20, **{"Input Dims": [[m, k], [k, n]],
                                    "Input type": ["c10::BFloat16", "c10::BFloat16"]}),
        *launch("sm90_xmma_gemm_bf16bf16", 12, 5, 40, dur_us, corr=1),
    ]  # fmt: skip
    return write(tmp_path / "g.json", document(events, deviceProperties=[{"id": 0,
                                                                          "name": name}]))  # fmt: skip


def test_device_time_and_mfu_against_the_datasheet_peak(tmp_path):
    t = load_trace(_gemm_trace(tmp_path, "NVIDIA H100 80GB HBM3", 200.0))
    (row,) = F.op_table(t)
    flops = 2 * 4096**3
    assert row["flops"] == flops and row["dtype"] == "bf16"
    assert row["timed_on"] == "device" and row["time_ns"] == 200_000
    assert row["tflops"] == pytest.approx(flops / 200e-6 / 1e12)
    assert row["mfu"] == pytest.approx(flops / 200e-6 / PEAKS["h100-sxm"]["bf16"])
    assert "h100-sxm bf16" in row["peak"]
    summary = F.mfu_summary(t)
    assert summary["steps"][0]["flops"] == flops
    assert summary["top"][0]["mfu"] == pytest.approx(row["mfu"])
    (kernel,) = summary["kernels"]
    assert kernel["kernel"] == "sm90_xmma_gemm_bf16bf16" and kernel["flops"] == flops
    assert kernel["mfu"] == pytest.approx(row["mfu"])


def test_unknown_device_gives_no_mfu_unless_a_peak_is_given(tmp_path):
    t = load_trace(_gemm_trace(tmp_path, "Mystery Accelerator 9000", 200.0))
    (row,) = F.op_table(t)
    assert row["mfu"] is None and "not in the peak table" in row["peak"]
    (row,) = F.op_table(t, peak=1e15)
    assert row["mfu"] == pytest.approx(2 * 4096**3 / 200e-6 / 1e15)


def test_fp32_faster_than_the_fp32_peak_is_rated_against_tf32(tmp_path):
    peak, label = F.peak_flops(load_trace(_gemm_trace(tmp_path, "NVIDIA A100-SXM4-80GB", 1)),
                               "fp32", rate=100e12)  # fmt: skip
    assert peak == PEAKS["a100-sxm"]["tf32"] and "tf32" in label


def test_ops_on_a_device_whose_kernels_are_not_recorded_have_no_rate(tmp_path):
    """A PrivateUse1 run whose backend records memory but no kernels: an op's host time is its
    dispatch, so no TFLOP/s or MFU (even against a given peak); on the CPU it is its compute."""
    mm = cpu("aten::mm", 10, 20, **{"Input Dims": [[64, 64], [64, 64]],
                                    "Input type": ["float", "float"]})  # fmt: skip
    mem = {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5,
           "args": {"Addr": 1, "Bytes": 64, "Device Type": 20, "Device Id": 0,
                    "Total Allocated": 64, "Total Reserved": 64}}  # fmt: skip
    doc = document([annotation("ProfilerStep#1", 0, 100), mm, mem], privateuse1Backend="npu")
    hidden = load_trace(write(tmp_path / "npu.json", doc))
    for peak in (None, 1e12):
        (row,) = F.op_table(hidden, peak=peak)
        assert row["timed_on"] == F.DISPATCH and row["tflops"] is None and row["mfu"] is None
        assert "the run used npu:0, whose kernels the trace does not record" in row["peak"]
        (group,) = F.mfu_summary(hidden, peak=peak)["top"]
        assert group["tflops"] is None and group["mfu"] is None
    mem["args"]["Device Type"] = 0  # the same op on the CPU: timed on the host, a rate
    (row,) = F.op_table(load_trace(write(tmp_path / "cpu.json", doc)))
    assert row["timed_on"] == "host" and row["tflops"] == pytest.approx(2 * 64**3 / 20e-6 / 1e12)


def test_real_trace_joins_ops_to_their_kernels():
    """Old Kineto format (External id = correlation): ops reach kernels through the runtime
    calls nested in them."""
    t = load_trace(DATA / "timeline_analysis__sampled_rank-0.json.gz")
    table = F.op_table(t)
    assert len(table) == 378 and all(r["timed_on"] == "device" for r in table)
    row = next(r for r in table if r["input_dims"] == [[2048, 606, 160], [2048, 160, 20]])
    assert row["flops"] == 2048 * 2 * 606 * 20 * 160
    op = row["row"]
    inside = np.flatnonzero((t.kind == 3) & (t.track == t.track[op]) & (t.ts >= t.ts[op])
                            & (t.ts < t.ts[op] + t.dur[op]))  # fmt: skip
    kernels = np.flatnonzero(np.isin(t.correlation, t.correlation[inside]) & t.device_mask)
    assert row["time_ns"] == t.dur[kernels].sum() > 0
    by_kernel = F.kernel_table(t)
    assert sum(k["time_ns"] for k in by_kernel) == sum(r["time_ns"] for r in table)
    assert sum(k["flops"] for k in by_kernel) == pytest.approx(sum(r["flops"] for r in table))


def test_the_ops_flop_counter_knows_are_counted_as_it_counts_them():
    """Every op of torch.utils.flop_counter's registry (torch 2.13) the trace analyser counts,
    against the registry's own formula on the same shapes. Differences: the attention backward
    (no recompute of q @ k^T: 2x the forward, the registry's 2.5x), causal masks (discounted
    here), and the fused kernels' layout, which the registry misreads."""
    import torch
    from torch.utils.flop_counter import conv_flop_count, flop_registry

    aten = torch.ops.aten
    assert F.op_flops("aten::_scaled_mm", [[64, 128], [128, 32], [], []], []) == flop_registry[
        aten._scaled_mm
    ]((64, 128), (128, 32), (), ())
    # 2D rows split among 4 expert weights (MoE), which the registry has no formula for.
    assert F.op_flops("aten::_grouped_mm", [[96, 64], [4, 64, 32], [4]], []) == 2 * 96 * 64 * 32

    x, w = [2, 3, 32, 32], [16, 3, 3, 3]
    conv = conv_flop_count(x, w, [2, 16, 32, 32])
    args = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    for op in ("aten::convolution", "aten::_convolution", "aten::convolution_overrideable"):
        assert F.op_flops(op, [x, w, [16]], args) == conv
    cudnn = ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"]
    assert F.op_flops("aten::cudnn_convolution", [x, w], cudnn) == conv

    b, h, s, d = 2, 4, 64, 32
    bshd = torch.empty(b, s, h, d, device="meta")  # the flash / efficient kernels' layout
    fwd = attention_flops(b, h, s, s, d)
    assert fwd == flop_registry[aten._scaled_dot_product_flash_attention](
        (b, h, s, d), (b, h, s, d), (b, h, s, d)
    )
    # The registry reads the kernels' [B, L, H, E] as [B, H, L, E] (a FlopCounterMode slip: it
    # swaps the sequence and the heads, 16x too few FLOPs here); the trace analyser does not.
    misread = flop_registry[aten._flash_attention_forward](bshd, bshd, bshd, None, None, s, s)
    assert misread == attention_flops(b, s, h, h, d) != fwd
    assert misread == flop_registry[aten._efficient_attention_forward](
        bshd, bshd, bshd, None, None, None, s, s
    )
    dims = [[b, s, h, d]] * 3
    assert F.op_flops("aten::_flash_attention_forward", dims, [""] * 8 + ["False"]) == fwd
    assert F.op_flops("aten::_efficient_attention_forward", dims, [""] * 9 + ["0"]) == fwd
    causal = attention_flops(b, h, s, s, d, causal=True)
    assert F.op_flops("aten::_flash_attention_forward", dims, [""] * 8 + ["True"]) == causal
    assert F.op_flops("aten::_efficient_attention_forward", dims, [""] * 9 + ["1"]) == causal

    bwd = flop_registry[aten._scaled_dot_product_cudnn_attention_backward](
        (b, h, s, d), (b, h, s, d), (b, h, s, d), (b, h, s, d)
    )
    assert bwd == 2.5 * fwd  # the registry's backward recomputes the scores
    grad = [[b, h, s, d]] * 4
    for op, causal_at in (
        ("aten::_scaled_dot_product_cudnn_attention_backward", 14),
        ("aten::_scaled_dot_product_flash_attention_backward", 9),
        ("aten::_scaled_dot_product_efficient_attention_backward", 11),
    ):
        assert F.op_flops(op, grad, [""] * causal_at + ["False"]) == 2 * fwd, op
    kernel_grad = [[b, s, h, d]] * 4
    assert F.op_flops("aten::_flash_attention_backward", kernel_grad, [""] * 11 + ["0"]) == 2 * fwd
    assert (
        F.op_flops("aten::_efficient_attention_backward", kernel_grad, [""] * 14 + ["2"])
        == 2 * causal
    )
