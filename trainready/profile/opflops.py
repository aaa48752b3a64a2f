"""FLOPs of matmul, convolution and attention ops from recorded shapes -> achieved FLOP/s and MFU.

Needs a trace recorded with shapes (`record_shapes=True`, as `trainready profile` does). Counted
ops (the leaf aten ops, so a `linear` -> `addmm` or `matmul` -> `mm` chain counts once):

- `aten::mm` [M,K]x[K,N], `aten::addmm` (bias, [M,K], [K,N]), `aten::_scaled_mm` (fp8: [M,K]x
  [K,N] with scales): 2*M*N*K; `aten::bmm` [B,M,K]x[B,K,N], `aten::baddbmm`: 2*B*M*N*K
  (trainready.metrics.flops.linear_flops); `aten::_grouped_mm` (MoE experts: [M,K] rows split
  among G weights [G,K,N], or [G,M,K]x[G,K,N]): 2*M*N*K over all rows
- `aten::convolution`, `aten::_convolution`, `aten::convolution_overrideable` (input, weight,
  bias, stride, padding, dilation, transposed, output padding, groups) and
  `aten::cudnn_convolution` (input, weight, padding, stride, dilation, groups):
  2 * N * C_out * prod(out spatial) * C_in/groups * prod(kernel); `convolution_backward`: that
  once for the input gradient and once for the weight gradient, as its output mask says
- `aten::_scaled_dot_product_{flash,efficient,cudnn}_attention` and `..._flash_attention_for_cpu`
  (q [B,H,L,E], k [B,H,S,E], v [B,H,S,Ev]; is_causal from the recorded scalars), and the kernels
  under them, `aten::_flash_attention_forward` and `aten::_efficient_attention_forward` (q
  [B,L,H,E]; causal from is_causal, or custom_mask_type 1 or 2): attention_flops, and twice that
  for their `_backward` ops.

These are the ops torch.utils.flop_counter.FlopCounterMode counts (its registry, torch 2.13) but
for the nested-tensor (varlen) attention forms, plus the CPU's flash attention and
`_grouped_mm`, which it does not count. Two intended differences (tests/unit/metrics/test_flops.py checks
the formulas against FlopCounterMode's): causal attention counts the (query, key) pairs the mask
keeps, what a kernel that skips masked blocks does, where FlopCounterMode counts the dense
product; and an attention backward is twice its forward (no recompute of q @ k^T, PaLM's
convention), where FlopCounterMode's fused-kernel backward formulas count 2.5 times. (Its
`_flash_attention_*` / `_efficient_attention_*` formulas also read the kernels' [B, L, H, E] as
[B, H, L, E]; these do not.)

Time of an op: its device kernels (joined through the "External id" Kineto writes on the op and on
the kernels it launched) where it launched any, else its own host duration (CPU execution).
MFU is against the datasheet peak of the trace's device (trainready.metrics.peaks) at the op's dtype; a
device or dtype without a table entry gives no MFU rather than a guess.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from trainready.metrics.flops import attention_backward_flops, attention_flops, linear_flops
from trainready.metrics.peaks import PEAKS, match_kind
from trainready.profile import intervals
from trainready.profile.analysis import profiler_steps
from trainready.profile.trace import DEVICE_KINDS, KIND_CPU_OP, KIND_RUNTIME, Trace

_DTYPES = {
    "float": "fp32",
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}


_match_kind = functools.lru_cache(maxsize=64)(match_kind)  # a regex sweep per call otherwise


def _prod(xs: list[int]) -> int:
    return math.prod(xs) if xs else 1


def _mm(dims: list[Any], _: list[Any]) -> int | None:
    a, b = dims[0], dims[1]
    if len(a) != 2 or len(b) != 2:
        return None
    return linear_flops(a[0], b[1], a[1])


def _addmm(dims: list[Any], c: list[Any]) -> int | None:
    return _mm(dims[1:3], c)


def _grouped_mm(dims: list[Any], _: list[Any]) -> int | None:
    """2*M*N*K over every row: rows [M,K] split among G weights [G,K,N] by offsets (MoE), or
    batched [G,M,K]x[G,K,N] (also [M,K]x[K,N_total] split along N, 2D x 2D)."""
    a, b = dims[0], dims[1]
    if len(a) == 2 and len(b) == 3:
        return linear_flops(a[0], b[2], a[1])
    if len(a) == 3 and len(b) == 3:
        return a[0] * linear_flops(a[1], b[2], a[2])
    if len(a) == 2 and len(b) == 2:
        return linear_flops(a[0], b[1], a[1])
    if len(a) == 3 and len(b) == 2:
        return a[0] * linear_flops(a[1], b[1], a[2])
    return None


def _bmm(dims: list[Any], _: list[Any]) -> int | None:
    a, b = dims[0], dims[1]
    if len(a) != 3 or len(b) != 3:
        return None
    return a[0] * linear_flops(a[1], b[2], a[2])


def _baddbmm(dims: list[Any], c: list[Any]) -> int | None:
    return _bmm(dims[1:3], c)


def _scalars(concrete: list[Any], i: int) -> list[int] | None:
    """A recorded int-list argument, e.g. '[1, 1]' -> [1, 1]."""
    if i >= len(concrete) or not concrete[i]:
        return None
    try:
        value = json.loads(concrete[i]) if isinstance(concrete[i], str) else concrete[i]
    except ValueError:
        return None
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _conv_macs(dims: list[Any], concrete: list[Any]) -> int | None:
    """Multiply-accumulates of a forward convolution, from input and weight shapes and args."""
    x, w = dims[0], dims[1]
    if len(x) < 3 or len(w) != len(x):
        return None
    spatial = len(x) - 2
    stride = _scalars(concrete, 3) or [1]
    padding = _scalars(concrete, 4) or [0]
    dilation = _scalars(concrete, 5) or [1]
    transposed = concrete[6] if len(concrete) > 6 else ""
    if transposed not in ("", "False", False):
        return None  # transposed convolutions: not counted rather than miscounted
    groups = (_scalars(concrete, 8) or [1])[0]
    out = []
    for d in range(spatial):
        s, p, di = (v[d] if len(v) > d else v[0] for v in (stride, padding, dilation))
        out.append((x[2 + d] + 2 * p - di * (w[2 + d] - 1) - 1) // s + 1)
    # weight [C_out, C_in / groups, k...]: each output element costs C_in/groups * prod(k) MACs.
    return x[0] * w[0] * _prod(out) * w[1] * _prod(w[2:]) if min(out) > 0 and groups > 0 else None


def _conv(dims: list[Any], concrete: list[Any]) -> int | None:
    macs = _conv_macs(dims, concrete)
    return None if macs is None else 2 * macs


def _cudnn_conv(dims: list[Any], concrete: list[Any]) -> int | None:
    # cudnn_convolution(input, weight, padding, stride, dilation, groups, benchmark, ...)
    fwd = ["", "", "", _at(concrete, 3), _at(concrete, 2), _at(concrete, 4), "False", "",
           _at(concrete, 5)]  # fmt: skip
    return _conv([dims[0], dims[1]], fwd)


def _at(concrete: list[Any], i: int) -> Any:
    return concrete[i] if i < len(concrete) else ""


def _conv_backward(dims: list[Any], concrete: list[Any]) -> int | None:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #                      transposed, output_padding, groups, output_mask)
    fwd_concrete = ["", "", "", *concrete[4:10]]
    macs = _conv_macs([dims[1], dims[2]], fwd_concrete)
    if macs is None:
        return None
    mask = concrete[10] if len(concrete) > 10 else ""
    try:
        flags = json.loads(mask.lower()) if isinstance(mask, str) and mask else [True, True]
    except ValueError:
        flags = [True, True]
    return 2 * macs * (int(bool(flags[0])) + int(bool(flags[1] if len(flags) > 1 else True)))


def _is_causal(concrete: list[Any], index: int) -> bool:
    return index < len(concrete) and str(concrete[index]).lower() == "true"


def _mask_causal(concrete: list[Any], index: int) -> bool:
    """The efficient-attention kernels' custom_mask_type: 1 (top-left) and 2 (bottom-right) are
    causal. (Bottom-right keeps more pairs when queries are fewer than keys: counted as
    top-left, the common case of equal lengths being exact.)"""
    try:
        return index < len(concrete) and int(str(concrete[index])) in (1, 2)
    except ValueError:
        return False


def _sdpa(
    causal_arg: int, backward: bool, heads_second: bool = True, mask_type: bool = False
) -> Callable[[list[Any], list[Any]], int | None]:
    """FLOPs of an attention op from q, k, v dims: [B, H, L, E] (`heads_second`) or the
    kernels' [B, L, H, E]; causal from the is_causal scalar at `causal_arg`, or from the
    custom_mask_type there (`mask_type`)."""

    def flops(dims: list[Any], concrete: list[Any]) -> int | None:
        q, k, v = (dims[i] for i in ((1, 2, 3) if backward else (0, 1, 2)))
        if len(q) != 4 or len(k) != 4 or len(v) != 4:
            return None
        if not heads_second:
            q, k, v = ([t[0], t[2], t[1], t[3]] for t in (q, k, v))
        fn = attention_backward_flops if backward else attention_flops
        args = (q[0], q[1], q[2], k[2], q[3], v[3])
        causal = (
            _mask_causal(concrete, causal_arg) if mask_type else _is_causal(concrete, causal_arg)
        )
        return fn(*args, causal=causal)

    return flops


# op name -> FLOPs from (input dims, concrete inputs). The is_causal position is per signature.
OPS: dict[str, Callable[[list[Any], list[Any]], int | None]] = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::_scaled_mm": _mm,
    "aten::_grouped_mm": _grouped_mm,
    "aten::bmm": _bmm,
    "aten::baddbmm": _baddbmm,
    "aten::convolution": _conv,
    "aten::_convolution": _conv,
    "aten::convolution_overrideable": _conv,
    "aten::cudnn_convolution": _cudnn_conv,
    "aten::convolution_backward": _conv_backward,
    "aten::_scaled_dot_product_flash_attention": _sdpa(4, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _sdpa(4, False),
    "aten::_scaled_dot_product_efficient_attention": _sdpa(6, False),
    "aten::_scaled_dot_product_cudnn_attention": _sdpa(7, False),
    "aten::_scaled_dot_product_flash_attention_backward": _sdpa(9, True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa(7, True),
    "aten::_scaled_dot_product_efficient_attention_backward": _sdpa(11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _sdpa(14, True),
    "aten::_flash_attention_forward": _sdpa(8, False, heads_second=False),
    "aten::_flash_attention_backward": _sdpa(11, True, heads_second=False),
    "aten::_efficient_attention_forward": _sdpa(9, False, heads_second=False, mask_type=True),
    "aten::_efficient_attention_backward": _sdpa(14, True, heads_second=False, mask_type=True),
}


def op_flops(name: str, dims: list[Any] | None, concrete: list[Any] | None) -> int | None:
    """FLOPs of one op call from its recorded shapes, or None when it is not a counted op."""
    fn = OPS.get(name)
    if fn is None or not dims:
        return None
    try:
        return fn(dims, concrete or [])
    except (IndexError, TypeError, ValueError):
        return None  # shapes that do not fit the op's signature: not counted


def _device_time(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Total duration of the device activity each op launched (-1 where it launched none), and
    for every row of the trace the index into `ops` of the op that launched it (-1: none).

    An op's launches are the runtime calls on its thread inside its time range (the counted ops
    are leaves, so nothing else launches from there), joined to activities by correlation id.
    That holds in every Kineto version, unlike External id links, which older ones fill with the
    correlation id.
    """
    out = np.full(ops.size, -1, dtype=np.int64)
    owner = np.full(len(trace), -1, dtype=np.int64)
    run = np.flatnonzero((trace.kind == KIND_RUNTIME) & (trace.correlation >= 0))
    dev = np.flatnonzero(trace.of_kind(*DEVICE_KINDS) & (trace.correlation >= 0))
    if run.size == 0 or dev.size == 0 or ops.size == 0:
        return out, owner
    corr, inverse = np.unique(trace.correlation[dev], return_inverse=True)
    corr_ns = np.bincount(inverse.reshape(-1), weights=trace.dur[dev].astype(np.float64))
    pos = np.minimum(np.searchsorted(corr, trace.correlation[run]), corr.size - 1)
    run_ns = np.where(corr[pos] == trace.correlation[run], corr_ns[pos], -1.0)
    launched = run_ns >= 0
    run, run_ns = run[launched], run_ns[launched]
    order = np.lexsort((trace.ts[run], trace.track[run]))
    run, run_ns = run[order], run_ns[order]
    cum = np.concatenate([[0.0], np.cumsum(run_ns)])
    # The launches inside each op: [a, b) in `run`, sorted by (thread, start).
    a = np.zeros(ops.size, dtype=np.int64)
    b = np.zeros(ops.size, dtype=np.int64)
    run_track, op_track = trace.track[run], trace.track[ops]
    for track in intervals.unique(op_track).tolist():
        lo = np.searchsorted(run_track, track, side="left")
        hi = np.searchsorted(run_track, track, side="right")
        sel = np.flatnonzero(op_track == track)
        ts = trace.ts[run[lo:hi]]
        a[sel] = lo + np.searchsorted(ts, trace.ts[ops[sel]], side="left")
        b[sel] = lo + np.searchsorted(ts, trace.end[ops[sel]], side="left")
    some = b > a
    out[some] = np.round(cum[b[some]] - cum[a[some]]).astype(np.int64)
    run_owner = _paint(a, b, run.size)
    # Activities inherit the op of the runtime call with their correlation id.
    by_corr = np.argsort(trace.correlation[run], kind="stable")
    run_corr = trace.correlation[run][by_corr]
    at = np.minimum(np.searchsorted(run_corr, trace.correlation[dev]), run_corr.size - 1)
    hit = run_corr[at] == trace.correlation[dev]
    owner[dev[hit]] = run_owner[by_corr][at[hit]]
    return out, owner


def _paint(a: np.ndarray, b: np.ndarray, size: int) -> np.ndarray:
    """out[a[i]:b[i]] = i for every i in order (a later i wins where ranges overlap)."""
    out = np.full(size, -1, dtype=np.int64)
    idx = np.flatnonzero(b > a)
    idx = idx[np.argsort(a[idx], kind="stable")]
    if idx.size and (b[idx][:-1] <= a[idx][1:]).all():  # disjoint (leaf ops): one pass
        lens = b[idx] - a[idx]
        starts = np.repeat(a[idx] - np.r_[0, np.cumsum(lens)[:-1]], lens)
        out[np.arange(lens.sum()) + starts] = np.repeat(idx, lens)
        return out
    for i in np.sort(idx).tolist():
        out[a[i] : b[i]] = i
    return out


def kernel_table(
    trace: Trace, peak: float | None = None, table: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Per kernel name: the FLOPs of the counted ops that launched it (an op's FLOPs split over
    its kernels by duration), its time, achieved TFLOP/s and MFU. `table`: op_table's result,
    when the caller has it already."""
    table = op_table(trace, peak) if table is None else table
    rows = np.array([r["row"] for r in table], dtype=np.int64)
    _, owner = _device_time(trace, rows)
    kernels = np.flatnonzero(owner >= 0)
    if kernels.size == 0:
        return []
    op_ns = np.array([max(r["time_ns"], 1) for r in table], dtype=np.float64)
    share = trace.dur[kernels] / op_ns[owner[kernels]]
    flops = share * np.array([r["flops"] for r in table], dtype=np.float64)[owner[kernels]]
    names, first, inverse = np.unique(trace.name[kernels], return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    calls = np.bincount(inverse)
    total_flops = np.bincount(inverse, weights=flops)
    time_ns = np.zeros(names.size, dtype=np.int64)
    np.add.at(time_ns, inverse, trace.dur[kernels])
    result = []
    # by time, ties in order of first appearance (as a dict filled in row order sorts)
    for g in sorted(np.argsort(first, kind="stable").tolist(), key=lambda g: -time_ns[g]):
        t_ns = int(time_ns[g])
        rate = float(total_flops[g]) / (t_ns * 1e-9) if t_ns else None
        dtype = table[int(owner[kernels[first[g]]])]["dtype"]
        g_peak, label = peak_flops(trace, dtype, peak, rate)
        result.append({"kernel": trace.strings[int(names[g])], "calls": int(calls[g]),
                       "flops": int(round(float(total_flops[g]))), "time_ns": t_ns,
                       "dtype": dtype, "tflops": None if rate is None else rate / 1e12,
                       "peak": label,
                       "mfu": None if rate is None or g_peak is None else rate / g_peak})  # fmt: skip
    return result


def peak_flops(
    trace: Trace, dtype: str, given: float | None = None, rate: float | None = None
) -> tuple[float | None, str]:
    """Peak FLOP/s for MFU at `dtype`: `given` (e.g. a measured peak), else the datasheet peak
    of the trace's device; and a label saying which, or why there is none.

    fp32 matmuls may run on TF32 tensor cores (PyTorch's allow_tf32 / matmul precision), which a
    trace does not record: when an fp32 op's achieved `rate` beats the fp32 peak, the TF32 peak
    is used and the label says so, instead of reporting an MFU above 100 %.
    """
    if given is not None:
        return given, f"vs given peak {given / 1e12:.1f} TFLOP/s"
    name = trace.memo("device_name", lambda: trace.device_name(0) or "")  # once per trace
    if not name:
        return None, "device name not recorded in the trace: no peak"
    kind = _match_kind(name)
    if kind is None:
        return None, f"{name!r} is not in the peak table: no MFU"
    table = PEAKS[kind]
    peak = table.get(dtype)
    if peak is None:
        return None, f"no {dtype} peak for {kind}"
    if dtype == "fp32" and rate is not None and rate > peak and "tf32" in table:
        return table["tf32"], f"vs {kind} tf32 datasheet peak (fp32 ops ran above the fp32 peak)"
    return peak, f"vs {kind} {dtype} datasheet peak"


# An op's time where it may have run on a device the trace records no kernels of: its host
# time, i.e. its dispatch, from which no rate follows.
DISPATCH = "host dispatch"


def _unrecorded_label(devices: list[str]) -> str:
    return (
        f"rate unknown: the run used {', '.join(devices)}, whose kernels the trace does not "
        "record, so an op's host time is its dispatch, not its compute"
    )


def op_table(trace: Trace, peak: float | None = None) -> list[dict[str, Any]]:
    """One row per counted op call: name, shapes, dtype, FLOPs, time, TFLOP/s, MFU.

    `peak` (FLOP/s) replaces the datasheet peak, e.g. for a CPU or a device not in the table;
    without it, ops timed on the host get no MFU. Where the run used a device whose kernels the
    trace does not record (`memory.unrecorded_devices`), an op without a kernel may have run
    there: its host time is its dispatch, so its rate is unknown (None), and the label says why.
    """
    from trainready.profile.memory import unrecorded_devices

    hidden = unrecorded_devices(trace)
    rows = np.flatnonzero((trace.kind == KIND_CPU_OP) & (trace.input_dims >= 0))
    wanted = {trace.symbol(n) for n in OPS} - {-1}
    rows = rows[intervals.isin(trace.name[rows], np.array(sorted(wanted), dtype=np.int32))]
    device_ns, _ = _device_time(trace, rows)
    # Calls repeat a few shapes many times: decode and count each distinct one once.
    parsed: dict[int, Any] = {}
    counted: dict[tuple[int, int, int], int | None] = {}
    dtypes: dict[int, str] = {}

    def json_of(sid: int) -> Any:
        if sid not in parsed:
            parsed[sid] = json.loads(trace.strings[sid])
        return parsed[sid]

    out = []
    columns = (trace.name[rows], trace.input_dims[rows], trace.concrete_inputs[rows],
               trace.input_types[rows], trace.dur[rows])  # fmt: skip
    for r, dev_ns, name_id, dims_id, conc_id, types_id, dur in zip(
        rows.tolist(), device_ns.tolist(), *(c.tolist() for c in columns), strict=True
    ):
        key = (name_id, dims_id, conc_id)
        if key not in counted:
            concrete = json_of(conc_id) if conc_id >= 0 else []
            counted[key] = op_flops(trace.strings[name_id], json_of(dims_id), concrete)
        flops = counted[key]
        if flops is None:
            continue
        if types_id not in dtypes:
            types = json_of(types_id) if types_id >= 0 else []
            first = next((t for t in types if t in _DTYPES), None)
            dtypes[types_id] = _DTYPES.get(first, "?") if first else "?"
        dtype = dtypes[types_id]
        on_device = dev_ns >= 0
        ns = dev_ns if on_device else dur
        rate = flops / (ns * 1e-9) if ns > 0 and (on_device or not hidden) else None
        if hidden and not on_device:
            op_peak, label = None, _unrecorded_label(hidden)
        elif on_device or peak is not None:
            op_peak, label = peak_flops(trace, dtype, peak, rate)
        else:
            op_peak, label = None, "host execution: no peak given"
        out.append(
            {
                "row": r,
                "op": trace.strings[name_id],
                "input_dims": json_of(dims_id),
                "dtype": dtype,
                "flops": flops,
                "time_ns": ns,
                "timed_on": "device" if on_device else DISPATCH if hidden else "host",
                "tflops": None if rate is None else rate / 1e12,
                "mfu": None if rate is None or op_peak is None else rate / op_peak,
                "peak": label,
            }
        )
    return out


def mfu_summary(trace: Trace, top: int = 10, peak: float | None = None) -> dict[str, Any]:
    """Counted FLOPs and time in total, per profiler step, and the ops (by name, shapes and
    dtype) that took the most time, with achieved TFLOP/s and MFU."""
    table = op_table(trace, peak)
    groups: dict[tuple, dict[str, Any]] = {}
    for row in table:
        key = (row["op"], int(trace.input_dims[row["row"]]), row["dtype"])  # same shapes text
        g = groups.setdefault(key, {"op": row["op"], "input_dims": row["input_dims"],
                                    "dtype": row["dtype"], "calls": 0, "flops": 0,
                                    "time_ns": 0, "peak": row["peak"], "mfu": None,
                                    "timed_on": row["timed_on"]})  # fmt: skip
        g["calls"] += 1
        g["flops"] += row["flops"]
        g["time_ns"] += row["time_ns"]
    ranked = sorted(groups.values(), key=lambda g: -g["time_ns"])
    for g in ranked:
        rate = (
            g["flops"] / (g["time_ns"] * 1e-9)
            if g["time_ns"] and g["timed_on"] != DISPATCH
            else None
        )
        g["tflops"] = None if rate is None else rate / 1e12
        if rate is not None and (g["timed_on"] == "device" or peak is not None):
            g_peak, g["peak"] = peak_flops(trace, g["dtype"], peak, rate)
            g["mfu"] = rate / g_peak if g_peak else None
    steps = []
    starts = [(number, start, end) for number, start, end in profiler_steps(trace)]
    op_ts = np.array([int(trace.ts[r["row"]]) for r in table], dtype=np.int64)
    op_flops_arr = np.array([r["flops"] for r in table], dtype=np.float64)
    for number, start, end in starts:
        inside = (op_ts >= start) & (op_ts < end)
        flops = float(op_flops_arr[inside].sum()) if op_ts.size else 0.0
        steps.append({"step": number, "flops": int(flops), "host_ns": end - start,
                      "tflops_over_host_time": flops / ((end - start) * 1e-9) / 1e12
                      if end > start else None})  # fmt: skip
    total_flops = sum(r["flops"] for r in table)
    total_ns = sum(r["time_ns"] for r in table)
    return {
        "ops": len(table),
        "flops": total_flops,
        "time_ns": total_ns,
        "tflops": total_flops / (total_ns * 1e-9) / 1e12 if total_ns else None,
        "steps": steps,
        "top": ranked[:top],
        "kernels": kernel_table(trace, peak, table)[:top],
    }
