"""FlexAttention suite: which attention variants compile, run and give the right numbers, and how fast.

Every case runs `torch.compile(flex_attention, fullgraph=True)` on one variant and one size, for
one pass:

- `fwd`: the forward kernel (inference: no gradients requested);
- `fwd_bwd`: forward plus backward, `torch.autograd.grad` of the output for q, k and v.

Variants (trainready/suites/flex/variants.py): noop, causal, alibi, sliding_window, prefix_lm,
document, softcap, rel_pos, head_bias, plus the user's from `--variants FILE.py`. Masks go through
`create_block_mask`, so the kernel skips blocks the mask drops.

Presets (Hq, Hkv = query and key/value heads; Hkv < Hq is GQA):
- `standard`: B in {2, 4} x (Hq, Hkv) in {(16, 16), (16, 4)} x S in {1024, 2048, 4096, 8192}
  x D in {64, 128} x {noop, causal, alibi, sliding_window}: 128 configurations, each `fwd` and
  `fwd_bwd` (256 cases).
- `full`: the same grid over every built-in variant (288 configurations).
- `quick`: every built-in variant at B=2, (Hq, Hkv) = (4, 2), S=256, D=32 (18 cases; on a 2-core
  CPU each forward case compiles for seconds to tens of seconds, less when inductor's on-disk
  cache hits, and the CPU refuses every backward).
User variants join every preset's grid, under their own `budget_s` when the file gives one (an
explicit `--budget-s` wins over it). Planning calls each user variant's code once on a tiny CPU
problem (`probe_user_variant`): a mod, builder or reference that raises, or returns the wrong
shape, stops the run with one line naming the file and variant, before any case is charged to the
device. Its values are not judged there; a wrong mod is the device run's `fail_numerics`.

Case names: `{variant}/B{B}/H{Hq}-{Hkv}/S{S}/D{D}/{pass}`, e.g. `causal/B2/H16-4/S1024/D64/fwd_bwd`.

CPU: a case runs on one core, torch's intra-op threads set to one (CPU_CORES = 1, recorded as
`diagnostics.cpu_threads`), whatever else the run holds: its compile is single-threaded either
way, so the run's correctness cases (parity) use the other cores meanwhile (core/schedule.py),
and `run_ms` is one core's time whether they ran beside it or not (beside it they share only the
last-level cache and the memory bus). On every other device a case runs alone.

Dtype: bf16 on accelerators, fp32 on the CPU (whose bf16 flex kernels are a curiosity, not what
anyone trains with); `--dtype` overrides.

Phases (a timeout names one): `setup` (the backend's refusal, inputs, block mask), `compile` (the
first call, compile included, timed as `compile_s`; dynamo is reset before it, so every case
compiles its own kernel), `run` (timed repeats), `check` (numerics). `diagnostics.inductor_cache`
counts the compile's hits and misses in inductor's on-disk cache: a hit makes `compile_s` a
warm-cache time; `diagnostics.first_compile_in_process` marks the case whose compile was its
process's first, so its `compile_s` includes the compiler's one-time start-up (the reports say so).

Verdicts:
- `unsupported`: the backend refuses the pass, with PyTorch's own message. Before compiling, a
  tiny eager `flex_attention` call on the device with the case's requires_grad asks it (today the
  CPU refuses every backward: "FlexAttention does not support backward on CPU..."; a device
  flex_attention does not know gets its ValueError); a compile error caused by a
  NotImplementedError is also `unsupported`.
- `fail_compile`: any other error from the first call (dynamo or inductor).
- `fail_numerics`: output (and grad_q, grad_k, grad_v for `fwd_bwd`) judged by
  `probes.numerics.judge_many` against the variant's dense reference in float64 (on the device
  when it has float64, else on the CPU), the noise measured per tensor (rule `noise_vs_cpu`): the
  same dense reference math as PyTorch's own math path runs it for the case dtype (scores and
  softmax in fp32, probabilities rounded to the dtype for `@ v`), eager on the CPU -- the honest
  same-dtype run of a compiled kernel, written from the variant's reference, not its mods, so a
  wrong mod cannot raise its own bar. The worst tensor and its error are in
  `diagnostics["error"]`.
- `unsupported` too for `--dtype fp64`: the same-dtype baseline would be the reference itself, so
  there is no honest noise ("numerics not judged").
- `timeout`, `oom`, `crash`, `fail_run`: from the runner.

Metrics: compile_s, run_ms, tflops (work of the blocks the mask keeps), tflops_dense (the
dense-equivalent work over the same time), gflop, gflop_dense, block_share (kept blocks / all
blocks), time_ms_min, spread, repeats, concluded, half_width, timing_s and needed_s (the adaptive
sampler's verdict), max_rel_err and rmse (of the worst tensor). FLOPs follow
`probes.flops.attention_flops` (backward = 2x forward; the backward's recompute of q @ k^T is not
counted, by convention).

Timing: at least REPEATS timed calls, then more until the median's 95% interval is within ±5%
(`metrics.sampler`), for at most `--set timing_s` seconds more (TIMING_S; the whole timed loop
never over TIMING_SHARE of the case budget nor half of what the compile left of it). Diagnostics' `sampling` holds the
verdict and, when the budget ran out, the option that gives it the time it would likely need.
"""

from __future__ import annotations

import math
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.attention.flex_attention as flex_module
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from trainready.core.case import Case, Outcome
from trainready.core.config import ConfigError, RunConfig
from trainready.core.context import CaseContext, Unsupported
from trainready.device import device_type, is_oom, synchronize, torch_dtype
from trainready.metrics.flops import attention_backward_flops, attention_flops
from trainready.probes.compile import FIRST_COMPILE_KEY, cache_counts, first_compile_in_process
from trainready.probes.numerics import judge_many, noise_rmse
from trainready.probes.timing import (
    TIMING_OPTION,
    TimingStats,
    benchmark,
    sampling_record,
    timing_budget,
    timing_option,
)
from trainready.suites.flex.variants import BUILTIN, Mods, Shape, Variant, variants

NAME = "flex"
DEFAULT_DTYPE = "bf16"  # on accelerators; cases() picks fp32 on the CPU
DEFAULT_BUDGET_S = 300.0
USES_PEAK = False  # reports TFLOP/s, not MFU: no peak to resolve
# On a CPU run a case takes one core (one intra-op thread) and correctness cases the others: its
# compile is single-threaded anyway (module docstring, "CPU").
CPU_CORES = 1
# The --set options this suite reads, checked before a run starts (see core/options.py).
OPTIONS = {"variants": str, TIMING_OPTION: float}  # variants: a Python file, imported and run
PASSES = ("fwd", "fwd_bwd")
STANDARD_VARIANTS = ("noop", "causal", "alibi", "sliding_window")


@dataclass(frozen=True)
class Grid:
    batches: tuple[int, ...]
    heads: tuple[tuple[int, int], ...]  # (Hq, Hkv)
    seqs: tuple[int, ...]
    dims: tuple[int, ...]
    variants: tuple[str, ...] | None  # None: every built-in

    def shapes(self) -> list[Shape]:
        return [
            Shape(b, hq, hkv, s, d)
            for b in self.batches
            for hq, hkv in self.heads
            for s in self.seqs
            for d in self.dims
        ]


_STANDARD_SIZES = dict(
    batches=(2, 4), heads=((16, 16), (16, 4)), seqs=(1024, 2048, 4096, 8192), dims=(64, 128)
)
GRIDS = {
    "smoke": Grid((1,), ((2, 1),), (128,), (32,), ("causal",)),
    "quick": Grid((2,), ((4, 2),), (256,), (32,), None),
    "standard": Grid(**_STANDARD_SIZES, variants=STANDARD_VARIANTS),
    "full": Grid(**_STANDARD_SIZES, variants=None),
}

SEED = 0
WARMUP = 2
REPEATS = 10  # the fewest timed calls; the sampler adds more until the median is within ±5%
TIMING_SHARE = 0.25  # of the case budget, at most, for the timed loop
TIMING_S = 1.0  # seconds for repeats past REPEATS (`--set timing_s`): see the module docstring


# --- cases ----------------------------------------------------------------------------------------


def default_dtype(device: str) -> str:
    return "fp32" if device_type(device) == "cpu" else DEFAULT_DTYPE


def case_name(variant: str, shape: Shape, pass_: str) -> str:
    return f"{variant}/B{shape.B}/H{shape.Hq}-{shape.Hkv}/S{shape.S}/D{shape.D}/{pass_}"


def _case(variant: Variant, shape: Shape, pass_: str, dtype: str) -> Case:
    params = {
        "variant": variant.name,
        "user": variant.source != "built-in",
        "B": shape.B,
        "Hq": shape.Hq,
        "Hkv": shape.Hkv,
        "S": shape.S,
        "D": shape.D,
        "pass": pass_,
        "dtype": dtype,
    }
    if variant.budget_s is not None:
        # The case's own budget: core.plan puts an explicit --budget-s above it.
        params["budget_s"] = variant.budget_s
    return Case(NAME, case_name(variant.name, shape, pass_), params)


def cases(cfg: RunConfig) -> list[Case]:
    grid = GRIDS[cfg.preset]
    table = variants(cfg.options)  # a broken --variants file fails here, before any case runs
    user = [n for n, v in table.items() if v.source != "built-in"]
    for name in user:
        probe_user_variant(table[name])
    names = [*(grid.variants or BUILTIN), *user]
    dtype = cfg.dtype or default_dtype(cfg.device)
    return [
        _case(table[n], shape, pass_, dtype)
        for n in names
        for shape in grid.shapes()
        for pass_ in PASSES
    ]


# --- inputs ---------------------------------------------------------------------------------------


@dataclass
class Inputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    grad_out: torch.Tensor


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, grad: bool) -> Inputs:
    """Seeded unit-variance q, k, v (scores of unit variance after the 1/sqrt(D) scale)."""
    gen = torch.Generator().manual_seed(SEED)

    def randn(heads: int) -> torch.Tensor:
        t = torch.randn(shape.B, heads, shape.S, shape.D, generator=gen).to(device, dtype)
        return t.requires_grad_(grad)

    q, k, v = randn(shape.Hq), randn(shape.Hkv), randn(shape.Hkv)
    return Inputs(q, k, v, randn(shape.Hq).detach())


def block_mask_for(mods: Mods, shape: Shape, device: str) -> BlockMask | None:
    if mods.mask_mod is None:
        return None
    b, h = (shape.B, shape.Hq) if mods.mask_uses_bh else (None, None)
    return create_block_mask(mods.mask_mod, b, h, shape.S, shape.S, device=device)


def block_share(block_mask: BlockMask | None) -> float:
    """Share of the (q block, kv block) tiles the kernel computes: 1.0 without a mask."""
    if block_mask is None:
        return 1.0
    kept = block_mask.kv_num_blocks.sum().item()
    if block_mask.full_kv_num_blocks is not None:
        kept += block_mask.full_kv_num_blocks.sum().item()
    total = block_mask.kv_num_blocks.numel() * block_mask.kv_indices.shape[-1]
    return min(1.0, kept / total)


# --- the kernel under test ------------------------------------------------------------------------


def attend(
    fn: Callable[..., torch.Tensor], x: Inputs, mods: Mods, block_mask: BlockMask | None
) -> torch.Tensor:
    return fn(
        x.q,
        x.k,
        x.v,
        score_mod=mods.score_mod,
        block_mask=block_mask,
        enable_gqa=x.q.shape[1] != x.k.shape[1],
    )


def step_fn(
    pass_: str, fn: Callable[..., torch.Tensor], x: Inputs, mods: Mods, bm: BlockMask | None
) -> Callable[[], dict[str, torch.Tensor]]:
    """One call of the pass: {"out"} for fwd, {"out", "grad_q", "grad_k", "grad_v"} for fwd_bwd."""

    def fwd() -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return {"out": attend(fn, x, mods, bm)}

    def fwd_bwd() -> dict[str, torch.Tensor]:
        out = attend(fn, x, mods, bm)
        grads = torch.autograd.grad(out, (x.q, x.k, x.v), x.grad_out)
        return {
            "out": out.detach(),
            **dict(zip(("grad_q", "grad_k", "grad_v"), grads, strict=True)),
        }

    return fwd if pass_ == "fwd" else fwd_bwd


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def refuse_if_unsupported(device: str, dtype: torch.dtype, grad: bool) -> None:
    """Ask the backend with a tiny eager call; raise Unsupported with its own message if it says no.

    flex_attention validates the device before anything else (torch/nn/attention/flex_attention.py
    `_validate_device`: NotImplementedError for a backward the device lacks, ValueError for a
    device it does not know); under fullgraph compile that refusal arrives wrapped in a dynamo
    error, so the eager call is where PyTorch's message is plain.
    """
    tiny = [torch.zeros(1, 1, 16, 16, dtype=dtype, device=device, requires_grad=grad)] * 3
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "called without torch.compile": intended here
            flex_attention(*tiny)
    except (NotImplementedError, ValueError) as e:
        raise Unsupported(str(e)) from e


def first_call(
    step: Callable[[], dict[str, torch.Tensor]], device: str
) -> tuple[dict[str, torch.Tensor], float]:
    """Compile and run once -> (result, seconds). Compile errors: NotImplementedError anywhere in
    the chain -> Unsupported; out of memory propagates (-> oom); the rest -> CompileError."""
    t0 = time.perf_counter()
    try:
        result = step()
        synchronize(device)
    except Exception as e:  # noqa: BLE001 - classified below, nothing swallowed
        chain = _chain(e)
        if any(is_oom(c) for c in chain):
            raise
        refusal = next((c for c in chain if isinstance(c, NotImplementedError)), None)
        if refusal is not None:
            raise Unsupported(str(refusal)) from e
        raise CompileError(e) from e
    return result, time.perf_counter() - t0


class CompileError(Exception):
    """The first call failed for a reason other than a refusal or out of memory."""

    def __init__(self, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


# --- the reference --------------------------------------------------------------------------------


def float64_device(device: str) -> str:
    """The device itself when it computes in float64 (MPS does not), else the CPU."""
    try:
        torch.ones(1, dtype=torch.float64, device=device).sum().item()
    except (TypeError, RuntimeError):
        return "cpu"
    return device


def _shape_error(value: Any, shape: torch.Size, whose: str) -> str | None:
    """Why `value` is not a tensor of `shape` ('returned float, not ...'), or None when it is."""
    if isinstance(value, torch.Tensor) and value.shape == shape:
        return None
    got = f"shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
    return f"returned {got}, not a tensor of {whose} shape {list(shape)}"


def _reference_scores(mods: Mods, scores: torch.Tensor, *index: torch.Tensor) -> torch.Tensor:
    """The reference applied to the dense scores, which it must return whole: a broadcast slip
    would otherwise flow on into the softmax as a wrong verdict rather than an error."""
    out = mods.reference(scores, *index)
    error = _shape_error(out, scores.shape, "the scores'")
    if error:
        raise ValueError(f"the reference {error}")
    return out


def _dense_group(
    x: Inputs, mods: Mods, b: int, g: int, dtype: torch.dtype, device: str, grad: bool
) -> dict[str, torch.Tensor]:
    """Dense attention of batch b and kv head g (its Hq/Hkv query heads), in `dtype` on `device`."""
    group = x.q.shape[1] // x.k.shape[1]
    heads = slice(g * group, (g + 1) * group)

    def take(t: torch.Tensor, sel: slice | int) -> torch.Tensor:
        part = t.detach()[b : b + 1, sel]
        part = part.unsqueeze(1) if isinstance(sel, int) else part
        return part.to(device, dtype).requires_grad_(grad)

    q, k, v = take(x.q, heads), take(x.k, g), take(x.v, g)
    # PyTorch's math path for flex_attention (torch/_higher_order_ops/flex_attention.py
    # math_attention): scores, mods and softmax in float32 (float64 for float64), and the
    # probabilities rounded to the case dtype for the product with v.
    work = torch.float64 if dtype == torch.float64 else torch.float32
    seq = q.shape[2]
    idx = torch.arange(seq, device=device)
    h = torch.arange(g * group, (g + 1) * group, device=device).view(1, group, 1, 1)
    b_idx = torch.full((1, 1, 1, 1), b, device=device)
    scores = (q.to(work) @ k.to(work).transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = _reference_scores(
        mods, scores, b_idx, h, idx.view(1, 1, seq, 1), idx.view(1, 1, 1, seq)
    )
    scores = scores.to(work)
    # A row the mask drops entirely gets output 0, as flex_attention gives it; zeroing its scores
    # first keeps softmax (and its gradient) free of NaN.
    alive = (scores != -math.inf).any(-1, keepdim=True)
    probs = torch.softmax(torch.where(alive, scores, 0.0), dim=-1) * alive
    out = probs.to(dtype) @ v
    result = {"out": out}
    if grad:
        grad_out = x.grad_out[b : b + 1, heads].to(device, dtype)
        grads = torch.autograd.grad(out, (q, k, v), grad_out)
        result.update(zip(("grad_q", "grad_k", "grad_v"), grads, strict=True))
    return {name: t.detach() for name, t in result.items()}


def dense_attention(
    x: Inputs, mods: Mods, dtype: torch.dtype, device: str, grad: bool
) -> dict[str, torch.Tensor]:
    """The variant's attention written densely (math path), on the CPU in float64 at the end.

    One (batch, kv head) group at a time: exact, since groups share nothing, and it keeps the
    S x S scores of one group in memory rather than B * Hq of them.
    """
    batches, kv_heads = x.q.shape[0], x.k.shape[1]
    parts = [
        [_dense_group(x, mods, b, g, dtype, device, grad) for g in range(kv_heads)]
        for b in range(batches)
    ]

    def gather(name: str) -> torch.Tensor:  # heads along dim 1, batches along dim 0
        rows = [torch.cat([p[name].cpu().double() for p in row], dim=1) for row in parts]
        return torch.cat(rows, dim=0)

    return {name: gather(name) for name in parts[0][0]}


# --- the planning probe of user variants ---------------------------------------------------------

PROBE = Shape(B=1, Hq=2, Hkv=1, S=128, D=16)  # GQA, one 128-token block: a fraction of a second


@contextmanager
def _plain_eager_flex() -> Iterator[None]:
    """flex_attention as plain Python: the mods run once, untraced (PyTorch's own debugging switch
    for them, which its 'without torch.compile' warning names), and that warning is silenced.
    Tracing would unroll a mod's loops: that cost is a compile's, for the device run to measure."""
    saved = getattr(flex_module, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", False)
    flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = saved


PROBE_LIMIT_S = 30.0  # per call: the probe's problem is tiny, so this is a hang, not slowness


class _ProbeHung(Exception):
    pass


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise _ProbeHung in the calling code after `seconds` (SIGALRM: Python code only, which a
    user's mod is). Where there is no alarm to set (not the main thread, not POSIX), no limit."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def hung(signum: int, frame: Any) -> None:
        raise _ProbeHung(f"did not return within {seconds:g} s on a {PROBE.S}-token problem")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _probed(where: str, what: str, call: Callable[[], Any]) -> Any:
    """call() -> its result; its error (or a hang past PROBE_LIMIT_S) as a ConfigError
    'WHERE: WHAT: Type: first line'."""
    try:
        with _time_limit(PROBE_LIMIT_S):
            return call()
    except ConfigError:
        raise  # already names the file and the variant (a builder's bad keys)
    except Exception as e:  # noqa: BLE001 - whatever the user's code raises is the file's error
        first = (str(e).strip().splitlines() or [""])[0]
        error = f"{type(e).__name__}: {first}" if first else type(e).__name__
        raise ConfigError(f"{where}: {what}: {error}") from e


def probe_user_variant(variant: Variant) -> None:
    """Call a user variant's code once on PROBE, on the CPU: its build, its mask_mod through
    create_block_mask, eager flex_attention with its mods, its dense reference. An error or a
    result of the wrong shape is a ConfigError naming the file and the variant. The values are
    not judged: a mod that runs but is wrong must reach the device run, as `fail_numerics`."""
    where = f"--variants {variant.source}: variant {variant.name!r}"
    mods = _probed(where, "build(shape, device)", lambda: variant.build(PROBE, "cpu"))
    x = make_inputs(PROBE, torch.float32, "cpu", grad=False)
    bm = _probed(where, "mask_mod in create_block_mask", lambda: block_mask_for(mods, PROBE, "cpu"))
    with _plain_eager_flex(), torch.no_grad():
        what = "eager flex_attention with its mods"
        out = _probed(where, what, lambda: attend(flex_attention, x, mods, bm))
    error = _shape_error(out, x.q.shape, "the query's")
    if error:
        raise ConfigError(f"{where}: {what}: {error}")
    _probed(
        where, "dense reference", lambda: dense_attention(x, mods, torch.float64, "cpu", grad=False)
    )


# --- execute --------------------------------------------------------------------------------------


def _inductor_cache() -> dict[str, int]:
    """Inductor's FX-graph cache hits and misses so far in this process."""
    counts = cache_counts()
    return {k: counts[f"fxgraph_{k}"] for k in ("hit", "miss")}


def _flops(shape: Shape, pass_: str, share: float) -> tuple[float, float]:
    """(work of the kept blocks, dense-equivalent work) of one call, in FLOPs."""
    dense = attention_flops(shape.B, shape.Hq, shape.S, shape.S, shape.D)
    if pass_ == "fwd_bwd":
        dense += attention_backward_flops(shape.B, shape.Hq, shape.S, shape.S, shape.D)
    return dense * share, float(dense)


def _metrics(
    shape: Shape,
    pass_: str,
    share: float,
    compile_s: float,
    stats: TimingStats,
    worst_errors: dict[str, Any],
) -> dict[str, float]:
    # The first metrics are the drill-down's columns (report.model.key_metrics takes the first 4).
    work, dense = _flops(shape, pass_, share)
    metrics = {
        "compile_s": compile_s,
        "run_ms": stats.median_s * 1e3,
        "tflops": work / stats.median_s / 1e12,
        "tflops_dense": dense / stats.median_s / 1e12,
        "gflop": work / 1e9,
        "gflop_dense": dense / 1e9,
        "block_share": share,
        "time_ms_min": stats.min_s * 1e3,
        "spread": stats.spread,
        "repeats": float(stats.repeats),
        **stats.sampling_metrics(),
    }
    for name, key in (("max_rel_err", "max_rel"), ("rmse", "rmse")):
        if key in worst_errors:
            metrics[name] = worst_errors[key]
    return metrics


def _verdict_text(name: str, errors: dict[str, Any], threshold: float | None) -> str:
    if "rmse" not in errors:
        return f"{name}: {errors}"
    bound = f" > allowed {threshold:.3g}" if threshold is not None else ""
    noise = f"noise {errors['noise_rmse']:.3g}, " if "noise_rmse" in errors else ""
    return f"{name}: rmse {errors['rmse']:.3g}{bound} ({noise}max_rel {errors['max_rel']:.3g})"


NOISE_RULE = "noise_vs_cpu"


def check(
    x: Inputs, mods: Mods, got: dict[str, torch.Tensor], dtype: str, device: str, grad: bool
) -> tuple[bool, str | None, dict[str, Any]]:
    """judge_many over the output (and gradients) -> (ok, worst tensor, verdicts as JSON). Each
    tensor's noise: the CPU's eager dense math at `dtype` against float64 (module docstring)."""
    ref64 = dense_attention(x, mods, torch.float64, float64_device(device), grad)
    base = dense_attention(x, mods, torch_dtype(dtype), "cpu", grad)
    named = {n: (ref64[n], got[n].detach().cpu(), noise_rmse(ref64[n], base[n])) for n in ref64}
    ok, worst, verdicts = judge_many(named, dtype, NOISE_RULE)
    return ok, worst, {n: v.to_json() for n, v in verdicts.items()}


def execute(case: Case, ctx: CaseContext) -> Outcome:
    p = case.params
    shape = Shape(p["B"], p["Hq"], p["Hkv"], p["S"], p["D"])
    pass_, dtype = p["pass"], p["dtype"]
    grad = pass_ == "fwd_bwd"
    started = time.perf_counter()

    if dtype == "fp64":
        # The same-dtype baseline would be the float64 reference itself: no honest noise.
        raise Unsupported("numerics not judged: in fp64 no computation is more exact to judge by")
    variant = variants(ctx.options)[p["variant"]]
    mods = variant.build(shape, ctx.device)
    refuse_if_unsupported(ctx.device, torch_dtype(dtype), grad)
    x = make_inputs(shape, torch_dtype(dtype), ctx.device, grad)
    bm = block_mask_for(mods, shape, ctx.device)

    # A fresh dynamo state per case: each case's compile is its own (no recompile limits, no
    # dynamic shapes learnt from earlier cases); inductor's on-disk cache still applies.
    torch._dynamo.reset()
    compiled = torch.compile(flex_attention, fullgraph=True, dynamic=False)
    step = step_fn(pass_, compiled, x, mods, bm)
    # set_phase, not `with ctx.phase`: a case that ends in a phase must be recorded in it.
    cache_before = _inductor_cache()
    first_compile = first_compile_in_process(ctx.device, "inductor")
    ctx.set_phase("compile")
    try:
        got, compile_s = first_call(step, ctx.device)
    except CompileError as e:
        return Outcome("fail_compile", diagnostics={"error": str(e).splitlines()[0][:500]})
    cache = {k: n - cache_before.get(k, 0) for k, n in _inductor_cache().items()}

    ctx.set_phase("run")
    left = ctx.budget_s - (time.perf_counter() - started)
    stats = benchmark(
        step,
        ctx.device,
        warmup=WARMUP,
        repeats=REPEATS,
        flush_l2=True,
        max_time_s=max(0.0, min(TIMING_SHARE * ctx.budget_s, left / 2)),
        extra_s=timing_budget(ctx.options, TIMING_S),
    )

    ctx.set_phase("check")
    ok, worst, verdicts = check(x, mods, got, dtype, ctx.device, grad)

    worst_errors = verdicts[worst]
    metrics = _metrics(shape, pass_, block_share(bm), compile_s, stats, worst_errors)
    diagnostics: dict[str, Any] = {
        "variant": variant.description,
        "variant_source": variant.source,
        "clock": stats.clock,
        # The CPU's intra-op threads the kernel was timed on (one on a CPU run: CPU_CORES).
        **({"cpu_threads": torch.get_num_threads()} if device_type(ctx.device) == "cpu" else {}),
        # Hits in inductor's on-disk cache make compile_s a warm-cache time: say which it was.
        "inductor_cache": cache,
        # The process's first compile: compile_s includes the compiler's one-time start-up.
        FIRST_COMPILE_KEY: first_compile,
        "worst": worst,
        "numerics": verdicts,
        "baseline": f"dense math rounded as PyTorch's flex math path does for {dtype}, CPU eager",
        "sampling": sampling_record(
            stats, lambda total: timing_option(total, TIMING_SHARE, ctx.budget_s)
        ),
    }
    if not ok:
        diagnostics["error"] = _verdict_text(worst, worst_errors, worst_errors.get("threshold"))
    return Outcome("pass" if ok else "fail_numerics", metrics, diagnostics)
