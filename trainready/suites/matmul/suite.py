"""Matmul suite: MFU of `F.linear` over the projection shapes of real models, with a numerics check.

Every GEMM of a training step of `y = F.linear(x, W)`, x[M,K], W[N,K] (shapes from
`trainready/data/model_shapes.json`), is its own case, run the way eager autograd runs it:

- `fwd`: y[M,N] = F.linear(x, W)
- `dX`:  grad_x[M,K] = grad_y[M,N] @ W[N,K]            (both row-major)
- `dW`:  grad_W[N,K] = grad_y.t()[N,M] @ x[M,K]         (grad_y.t() a transposed view)

All three cost 2*M*N*K FLOPs.

Case names are `{model}/{op}/M{M}/{pass}`, e.g. `Llama-3.1-8B/q_proj/M128/fwd`, stable across runs.

Presets:
- `smoke`: Llama-3.1-8B's k_proj at M=128, fwd/dX/dW (three cases).
- `full`: every model x every projection (fused concatenations included) x M in {1, 128, 2048}
  x {fwd, dX, dW}.
- `standard`: as `full` without the fused projections (`fused: true` in the JSON).
- `quick`: about a minute on a 2-core CPU in bf16: unfused shapes of four representative models
  (`QUICK`: dense Llama-3.1-8B; Qwen3-8B's FFN; Qwen3-235B-A22B's routed expert and router;
  DeepSeek-V3's MLA projections), M in {1, 128}, fwd for each listed op and dX/dW for a few;
  no lm_head (the largest GEMM of every model, seconds per call on a CPU).

Params (what reports group by): model, family, op, fused (bool), M, N, K, pass ("fwd" | "dX" |
"dW"), dtype ("bf16" unless the run sets one).

Metrics: gflop (2*M*N*K/1e9), time_ms (median), time_ms_min, time_ms_max, spread (IQR / median),
tflops (from the median), mfu (only when a peak FLOP/s for the dtype is known), repeats,
concluded, half_width, timing_s and needed_s (the adaptive sampler's verdict:
`probes.timing.TimingStats.sampling_metrics`), max_rel_err and rmse (of the numerics spot-check).

Timing: at least REPEATS timed calls, then more until the median's 95% interval is within ±5%
(`metrics.sampler`), for at most `--set timing_s` seconds more (TIMING_S; the whole timed loop
never over TIMING_SHARE of the case budget). Diagnostics' `sampling` holds the verdict and, when the budget ran out, the
option that gives it the time it would likely need.

Diagnostics: peak_label and peak_source (what the MFU is against), clock (how time was measured),
check (what the spot-check compared), sample (its rows, columns and regions), numerics (the
probe's verdict with its errors), ops (the ops probe's record of the first, untimed call: which
ops fell back to the host, by the dispatcher and by the backend's record) and drift_reference
(`probes.drift.drift_record`: the reference GEMM's speed just before and just after the timed
loop, and at the peak's calibration). A GEMM or a peak calibration that went through a host
fallback says so in `host_fallback` and in the MFU's label: that MFU is the host's, not the
device's.

Numerics: each case computes sampled entries of its output again in float64 on the CPU from the
same inputs -- the first and last EDGE rows and columns (the edge and corner tiles of a tiled
kernel) and INTERIOR random ones in between (`bands`; the whole dimension when it is at most
CHECK_SIZE) -- and `trainready.probes.numerics.judge` judges each region (four corners, four
edges, the interior) on its own, against the noise of an honest computation of the same entries:
the CPU in the case dtype, or, on the CPU itself (where that would be the device result), the
product in another reduction order accumulated in fp32 and rounded once. `check` says what was
sampled, `sample` the bands and each region's ratio to its allowance. A failed check is
`fail_numerics`. Out-of-memory propagates: the runner records it as `oom`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trainready.core.case import Case, Outcome
from trainready.core.config import RunConfig
from trainready.core.context import CaseContext
from trainready.data import model_entries
from trainready.device import read_reference, torch_dtype
from trainready.metrics.flops import (
    linear_flops,
    linear_grad_input_flops,
    linear_grad_weight_flops,
    peak_diagnostics,
)
from trainready.probes.drift import drift_record
from trainready.probes.numerics import Verdict, judge, noise_rmse, over_allowance
from trainready.probes.ops import OpsProbe
from trainready.probes.timing import (
    TIMING_OPTION,
    TimingStats,
    benchmark,
    rotating,
    sampling_record,
    timing_budget,
    timing_option,
)

NAME = "matmul"
DEFAULT_DTYPE = "bf16"
DEFAULT_BUDGET_S = 120.0
# The --set options this suite reads, checked before a run starts (see core/options.py).
OPTIONS: dict = {TIMING_OPTION: float}

M_VALUES = (1, 128, 2048)
PASSES = ("fwd", "dX", "dW")

QUICK_M = (1, 128)
_FWD = ("fwd",)
# model -> {op: passes}. One shape family each: dense attention + MLP, a different FFN width, an
# MoE expert and router, MLA's low-rank projections.
QUICK: dict[str, dict[str, tuple[str, ...]]] = {
    "Llama-3.1-8B": {
        "q_proj": PASSES,
        "k_proj": _FWD,
        "o_proj": _FWD,
        "gate_proj": _FWD,
        "down_proj": PASSES,
    },
    "Qwen3-8B": {"gate_proj": _FWD, "down_proj": _FWD},
    "Qwen3-235B-A22B": {"expert_gate_proj": PASSES, "expert_down_proj": _FWD, "router": _FWD},
    "DeepSeek-V3": {
        "q_a_proj": _FWD,
        "q_b_proj": _FWD,
        "kv_a_proj_with_mqa": _FWD,
        "kv_b_proj": PASSES,
    },
}

# smoke: one projection's three GEMMs at one M.
SMOKE, SMOKE_M = ("Llama-3.1-8B", "k_proj"), 128

SEED = 0
CHECK_SIZE = 64  # the spot-check covers at most CHECK_SIZE rows x CHECK_SIZE columns of the output
WARMUP = 3
REPEATS = 10  # the fewest timed repeats; the sampler adds more until the median is within ±5%
TIMING_SHARE = 0.25  # of the case budget, at most, for the timed loop; the rest: setup, check
# Seconds for repeats past REPEATS (`--set timing_s`): a quiet machine concludes in the 10; a
# noisy one samples this much longer, then reads inconclusive with the time it would need. One
# second bounds what sampling adds to the quick preset's 44 cases to under a minute (on a CPU a
# repeat's L2 flush costs about 0.25 s of it).
TIMING_S = 1.0


# --- cases ----------------------------------------------------------------------------------------


def _selection(
    preset: str, model: str, proj: dict[str, Any]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(M values, passes) that `preset` runs for one projection; empty when it skips it."""
    if preset == "smoke":
        return ((SMOKE_M,), PASSES) if (model, proj["op"]) == SMOKE else ((), ())
    if preset == "full":
        return M_VALUES, PASSES
    if proj.get("fused", False):
        return (), ()
    if preset == "standard":
        return M_VALUES, PASSES
    passes = QUICK.get(model, {}).get(proj["op"], ())
    return (QUICK_M if passes else ()), passes


def _case(model: dict[str, Any], proj: dict[str, Any], m: int, pass_: str, dtype: str) -> Case:
    params = {
        "model": model["name"],
        "family": model["family"],
        "op": proj["op"],
        "fused": bool(proj.get("fused", False)),
        "M": m,
        "N": proj["N"],
        "K": proj["K"],
        "pass": pass_,
        "dtype": dtype,
    }
    return Case(NAME, f"{model['name']}/{proj['op']}/M{m}/{pass_}", params)


def cases(cfg: RunConfig) -> list[Case]:
    dtype = cfg.dtype or DEFAULT_DTYPE
    out = []
    for model in model_entries():
        for proj in model["projections"]:
            m_values, passes = _selection(cfg.preset, model["name"], proj)
            out += [_case(model, proj, m, p, dtype) for m in m_values for p in passes]
    return out


# --- the three GEMMs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gemm:
    """One GEMM of F.linear's training step: its stored operands, how eager runs it, and the same
    product written as `a @ b` (for the reference)."""

    shapes: Callable[[int, int, int], tuple[tuple[int, int], tuple[int, int]]]
    reduction: Callable[[int, int, int], int]
    flops: Callable[[int, int, int], int]
    run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    as_ab: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


# F.linear without bias dispatches to aten.mm(x, W.t()); its MmBackward computes grad_x as
# mm(grad_y, W) and, because W.t() is column-major, grad_W as mm(grad_y.t(), x) (torch/csrc/autograd/
# FunctionsManual.cpp, mm_mat1_backward / mm_mat2_backward). These are those calls and layouts.
GEMMS: dict[str, Gemm] = {
    "fwd": Gemm(
        shapes=lambda m, n, k: ((m, k), (n, k)),
        reduction=lambda m, n, k: k,
        flops=linear_flops,
        run=lambda x, w: F.linear(x, w),
        as_ab=lambda x, w: (x, w.t()),
    ),
    "dX": Gemm(
        shapes=lambda m, n, k: ((m, n), (n, k)),
        reduction=lambda m, n, k: n,
        flops=linear_grad_input_flops,
        run=lambda grad_y, w: torch.matmul(grad_y, w),
        as_ab=lambda grad_y, w: (grad_y, w),
    ),
    "dW": Gemm(
        shapes=lambda m, n, k: ((m, n), (m, k)),
        reduction=lambda m, n, k: m,
        flops=linear_grad_weight_flops,
        run=lambda grad_y, x: torch.matmul(grad_y.t(), x),
        as_ab=lambda grad_y, x: (grad_y.t(), x),
    ),
}


def product(pass_: str, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The GEMM under test (a module-level seam, so tests can plant a wrong result)."""
    return GEMMS[pass_].run(first, second)


def operands(
    pass_: str, m: int, n: int, k: int, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded inputs with unit variance, the first scaled by 1/sqrt(reduction length) so every
    output entry has unit variance too (well inside the range of bf16 and fp16)."""
    gemm = GEMMS[pass_]
    first_shape, second_shape = gemm.shapes(m, n, k)
    torch.manual_seed(SEED)
    # Uniform on [-sqrt(3), sqrt(3)] has unit variance and fills big weights faster than randn.
    bound = math.sqrt(3.0)
    first = torch.empty(first_shape, dtype=dtype, device=device).uniform_(-bound, bound)
    second = torch.empty(second_shape, dtype=dtype, device=device).uniform_(-bound, bound)
    first.mul_(1.0 / math.sqrt(gemm.reduction(m, n, k)))
    return first, second


# --- numerics spot-check ------------------------------------------------------------------------

# The spot-check's rows (and, alike, columns): the first EDGE and the last EDGE, where the edge and
# corner tiles of a tiled GEMM kernel sit (a remainder tile, a boundary mask: where kernels go
# wrong), and INTERIOR drawn at random (seeded) in between; an output no larger than CHECK_SIZE
# along a dimension is checked whole along it.
EDGE = 16
INTERIOR = 32
CHECK_SIZE = 2 * EDGE + INTERIOR


@dataclass(frozen=True)
class Band:
    """Sampled indices along one output dimension: a name ("top", "bottom", "left", "right",
    "interior", or "all" when the whole dimension is checked) and the indices."""

    name: str
    index: torch.Tensor


def bands(size: int, salt: int, edges: tuple[str, str]) -> list[Band]:
    """The sampled bands of one dimension of `size`, the same on every run."""
    if size <= CHECK_SIZE:
        return [Band("all", torch.arange(size))]
    gen = torch.Generator().manual_seed(SEED + salt)
    interior = torch.randperm(size - 2 * EDGE, generator=gen)[:INTERIOR] + EDGE
    return [
        Band(edges[0], torch.arange(EDGE)),
        Band("interior", interior.sort().values),
        Band(edges[1], torch.arange(size - EDGE, size)),
    ]


def region_name(row: str, col: str) -> str:
    """'top-left corner', 'top edge', 'interior', ... of a row band and a column band."""
    if row == "all" and col == "all":
        return "whole output"
    if row in ("all", "interior") and col in ("all", "interior"):
        return "interior" if "interior" in (row, col) else "whole output"
    if row in ("top", "bottom") and col in ("left", "right"):
        return f"{row}-{col} corner"
    return f"{row if row in ('top', 'bottom') else col} edge"


def _independent(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The same product on the CPU another way: the reduction in a random (seeded) order,
    accumulated in at least fp32, rounded once to `dtype` -- the honest second computation when
    the device is the CPU itself."""
    acc = torch.promote_types(dtype, torch.float32)
    perm = torch.randperm(a.shape[1], generator=torch.Generator().manual_seed(SEED + 3))
    return (a[:, perm].to(acc) @ b[perm].to(acc)).to(dtype)


def spot_check(
    pass_: str, first: torch.Tensor, second: torch.Tensor, out: torch.Tensor, dtype: str
) -> tuple[Verdict, str, dict[str, Any]]:
    """Compare sampled entries of `out` with the same dot products in float64 on the CPU: the
    edge and corner tiles and a random interior sample (`bands`), each region judged on its own
    with the numerics rule, so an error confined to one tile is not averaged away. Returns the
    worst region's verdict (ok only if every region passed), what was checked, and the sample
    (rows and columns per band, each region's ratio to its allowance)."""
    a, b = GEMMS[pass_].as_ab(first, second)
    expected = (a.shape[0], b.shape[1])
    if tuple(out.shape) != expected:
        errors = {
            "shape_mismatch": True,
            "ref_shape": list(expected),
            "actual_shape": list(out.shape),
        }
        return Verdict(False, "shape", errors), "output shape", {}
    row_bands = bands(a.shape[0], salt=1, edges=("top", "bottom"))
    col_bands = bands(b.shape[1], salt=2, edges=("left", "right"))
    rows = torch.cat([band.index for band in row_bands])
    cols = torch.cat([band.index for band in col_bands])
    a_sub = a.index_select(0, rows.to(a.device)).cpu()
    b_sub = b.index_select(1, cols.to(b.device)).cpu()
    got = out.index_select(0, rows.to(out.device)).index_select(1, cols.to(out.device)).cpu()
    ref64 = a_sub.double() @ b_sub.double()
    if out.device.type == "cpu":
        # The same-dtype CPU result would be the device result itself, a baseline that passes
        # anything: the product in another reduction order instead.
        honest, rule = _independent(a_sub, b_sub, got.dtype), "noise_vs_independent"
        baseline = "the CPU in another reduction order (fp32 accumulation, rounded once)"
    else:
        honest, rule = a_sub @ b_sub, "noise_vs_cpu"
        baseline = "the CPU in the same dtype"
    verdicts: dict[str, Verdict] = {}
    r0 = 0
    for rb in row_bands:
        c0 = 0
        for cb in col_bands:
            at = (slice(r0, r0 + len(rb.index)), slice(c0, c0 + len(cb.index)))
            noise = noise_rmse(ref64[at], honest[at])
            verdicts[region_name(rb.name, cb.name)] = judge(ref64[at], got[at], noise, dtype, rule)
            c0 += len(cb.index)
        r0 += len(rb.index)
    ratios = {name: over_allowance(v) for name, v in verdicts.items()}
    worst = max(verdicts, key=lambda name: (not verdicts[name].ok, ratios[name]))
    verdict = verdicts[worst]
    verdict = Verdict(
        all(v.ok for v in verdicts.values()),
        verdict.rule,
        {**verdict.errors, "region": worst},
        verdict.threshold,
    )
    sample = {
        "rows": {band.name: len(band.index) for band in row_bands},
        "cols": {band.name: len(band.index) for band in col_bands},
        "regions": ratios,
        "interior_seed": SEED,
    }
    what = (
        f"{len(rows)}x{len(cols)} of {out.shape[0]}x{out.shape[1]} entries vs float64 on the CPU"
        f" (rows {_describe(row_bands)}; columns {_describe(col_bands)}; {len(verdicts)} "
        f"regions judged apart); baseline: {baseline}"
    )
    return verdict, what, sample


def _describe(found: list[Band]) -> str:
    if len(found) == 1:
        return "all"
    return ", ".join(f"{b.name} {len(b.index)}" for b in found)


# --- execute --------------------------------------------------------------------------------------


def _metrics(flop: float, stats: TimingStats, peak: dict[str, Any] | None) -> dict[str, float]:
    metrics = {
        "gflop": flop / 1e9,
        "time_ms": stats.median_s * 1e3,
        "time_ms_min": stats.min_s * 1e3,
        "time_ms_max": stats.max_s * 1e3,
        "spread": stats.spread,
        "tflops": flop / stats.median_s / 1e12,
        "repeats": float(stats.repeats),
        **stats.sampling_metrics(),
    }
    if peak and peak.get("flops"):
        metrics["mfu"] = flop / stats.median_s / peak["flops"]
    return metrics


def execute(case: Case, ctx: CaseContext) -> Outcome:
    p = case.params
    pass_, dtype = p["pass"], p["dtype"]
    first, second = operands(pass_, p["M"], p["N"], p["K"], torch_dtype(dtype), ctx.device)

    with ctx.phase("run"):
        # The first call is a warm-up whose result the check reuses: no extra call on big shapes.
        # It runs under the ops probe (untimed), which says whether the GEMM left the device.
        with OpsProbe(ctx.device) as probe:
            out = product(pass_, first, second)
        # The drift reference just before and after the timed loop: how far the machine's speed
        # moved over the run shows across all cases' readings (`report.sections.matmul`).
        readings = [read_reference(ctx.device, dtype)]
        cold = rotating(functools.partial(product, pass_), (first, second), ctx.device)
        stats = benchmark(
            cold.call,
            ctx.device,
            warmup=WARMUP - 1,
            repeats=REPEATS,
            flush_l2=cold.flush,
            max_time_s=TIMING_SHARE * ctx.budget_s,
            extra_s=timing_budget(ctx.options, TIMING_S),
        )
        readings.append(read_reference(ctx.device, dtype))
        cold_inputs = cold.describe()
        del cold  # the copies

    with ctx.phase("check"):
        verdict, what, sample = spot_check(pass_, first, second, out, dtype)

    peak = ctx.peak(dtype)
    metrics = _metrics(GEMMS[pass_].flops(p["M"], p["N"], p["K"]), stats, peak)
    for name, key in (("max_rel_err", "max_rel"), ("rmse", "rmse")):
        if key in verdict.errors:
            metrics[name] = verdict.errors[key]
    fell_back = probe.report.fell_back()
    diagnostics = {
        **peak_diagnostics(peak, dtype, metrics.get("mfu"), fell_back),
        "ops": probe.report.to_json(),
        "clock": stats.clock,
        "cold_inputs": cold_inputs,
        "check": what,
        "sample": sample,
        "numerics": verdict.to_json(),
        "drift_reference": drift_record(ctx.device, dtype, readings, peak),
        "sampling": sampling_record(
            stats, lambda total: timing_option(total, TIMING_SHARE, ctx.budget_s)
        ),
    }
    return Outcome("pass" if verdict.ok else "fail_numerics", metrics, diagnostics)
