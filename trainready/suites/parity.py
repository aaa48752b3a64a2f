"""Parity suite: does a model train the same on this device as in float64 on the CPU?

Cases: every causal-LM type of the installed transformers (built tiny, `models/hf.py`), every
other transformers type with a task head (masked LM, seq2seq, vision, audio, video, multimodal...:
`models/hf_tasks.py`, a `TaskModel` each), the timm and diffusers zoos (`models/timm_zoo.py`,
`diffusers_zoo.py`, when installed), the synthetic architecture matrix (`models/synthetic.py`), and
any model factories the user names (`--set models=pkg.mod:fn[,pkg.mod:fn2]`), each in a mode (`eager`, or `compile` with
`--compile-backend`, default inductor) and a dtype (fp32; bf16 = autocast over fp32 weights).

One case, on the device under test: forward, loss, backward and one AdamW step, then a short
training run (`steps`, default 20) on one fixed batch. The reference is the same model, weights
and data in float64 on the CPU. The numerics probe judges the loss, the logits, every gradient
and every parameter after the step (`judge_many`; DESIGN.md's rule), each against the noise an
honest computation at the case dtype makes on that very tensor, and the loss curve step by step
against a tolerance from the honest runs' own per-step deviation. The honest computation
(`Baseline`): on a device, or compiled, the CPU running the case eagerly at the case dtype; where
the device run *is* that run (eager on the CPU), two runs of the case whose roundings are
independent of it (`probes/perturb.py`), whose disagreement is the noise; where neither exists
(fp64 on the CPU, or the independent runs fail) the case is `unsupported` with "numerics not
judged", never a pass. The optimizer step is judged at the dtype the parameters are kept in
(fp32 under autocast) against the CPU's fp32 AdamW from the device's own gradients. A model that
routes by top-k (MoE), eager: the device's routing decisions are recorded and replayed in the
reference and the baselines, and judged on their own (`_pin`, `probes/routing.py`); its
auxiliary loss is compared as a tensor of its own. A case whose tensors fail is judged again
against the reference with one near-kink ReLU decision flipped (`_kink_flips`,
`probes/kinks.py`): a decision within rounding of its kink is one honest runs take either way.

Also per case: eager runs the first step under the ops probe, records its aten ops, host
round-trips and CPU fallbacks (`probes/ops.py`), and reports any difference from the training
run's own first step (non-determinism); compile records graph breaks, recompiles, frames left to
eager and compile time (`probes/compile.py`).

Shared CPU runs: the cases of one model in a stored run (eager and compiled, fp32 and bf16) need
the same float64 reference and the same plain CPU run at a dtype (the compiled case's baseline,
on the CPU also the eager case's device run): the first case to need one computes it, the others
load its very tensors from RUN_DIR/parity_shared/ (`parity_cache.py`; `shared_runs` names what a
case loaded). A compiled case compiles first, so the eager case beside it computes those runs
meanwhile. A routed eager case records its routing in its device run (no second device run).

Statuses: `unsupported` (the model cannot be built here, or its numerics cannot be judged here,
with the reason), `fail_run` (the model
raises, in the reference or on the device), `fail_compile` (it runs eagerly but raises compiled),
`fail_numerics` (naming the worst tensors, e.g. `layers.1.mlp.w2.weight.grad rmse ratio 7.3`, or
the first diverging step), else `pass`.

Presets: quick = the causal-LM zoo eager fp32, a sample of the task zoo (`QUICK_TASK_TYPES`, two
or three per modality) eager fp32 (the timm and diffusers zoos only when `--set zoo=` names them,
then their first models), + the synthetic base and one-axis variants, eager and compile, fp32; standard = every HF type (causal and task) and every
timm and diffusers model, eager and compiled, + the synthetic combinations; full = all of it in
fp32 and bf16. `--dtype` runs one dtype only; `--set modes=eager` (or compile), `--set
zoo=hf,timm,diffusers,synthetic` (or `none`; a modality name -- text-decoder, text-encoder,
seq2seq, vision, audio, video, multimodal, diffusion, other -- narrows the model zoos to it, e.g.
`zoo=vision` or `zoo=hf,audio`), `--set hf_types=llama,vit` (causal and task types alike),
`--set steps=N` narrow it further; `--set
threads=N` sets the CPU threads per case (default 1: tiny models run fastest single-threaded).
`--baseline DIR[:RUN_ID]` compares every case with the same case of a stored run (another device)
through the small summaries each case stores (`parity_baseline.py`).

Compile caches: inductor's on-disk caches (FX graph, kernels) live in its default cache directory
(or TORCHINDUCTOR_CACHE_DIR), which every worker of a run (and later runs) share: a graph two
cases compile alike is compiled once; `torch._dynamo.reset()` before each compiled
case clears only dynamo's in-memory state, so recompiles and graph breaks are counted per case.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from trainready.config import RunConfig
from trainready.core.case import Case, Outcome
from trainready.core.concurrency import cpu_threads
from trainready.core.context import CaseContext, Unsupported
from trainready.device import device_type, is_oom, torch_dtype
from trainready.models.families import MODALITIES
from trainready.probes import ties
from trainready.probes.compile import CompileProbe, backend_unsupported
from trainready.probes.kinks import Kink, flipping, name_kinks, near_kinks
from trainready.probes.numerics import (
    SMALL_NUMEL,
    Verdict,
    curve_noise,
    curve_tolerance,
    judge_many,
    loss_curve_compare,
    noise_rmse,
    spread_noise,
)
from trainready.probes.ops import OpsProbe, OpsReport
from trainready.probes.perturb import KAPPA2, IndependentRounding
from trainready.probes.routing import Flips, Routing, flips
from trainready.suites import parity_baseline
from trainready.suites.parity_cache import Shared
from trainready.suites.parity_engine import (
    Data,
    Spec,
    TaskData,
    Trace,
    determinism,
    first_step,
    optimizer_step_baseline,
    optimizer_step_reference,
    train,
)
from trainready.suites.parity_models import (
    Subject,
    declared_traits,
    hf_modality,
    load,
    zoo_module,
)

NAME = "parity"
DEFAULT_DTYPE = "fp32"
DEFAULT_BUDGET_S = 600.0
USES_PEAK = False  # numerics and compile behaviour, no MFU
# Cases judge numerics and compile behaviour, so they run side by side (--jobs); the times they
# record (compile_s, step_s) are then under shared load: the train suite is where time is judged.
KIND = "correctness"
# The --set options this suite reads, checked before a run starts (see core/options.py).
# Model sources and modalities `--set zoo=` selects by (a modality narrows the model zoos).
SOURCES = ("hf", "timm", "diffusers", "synthetic", "none")
OPTIONS = {
    "zoo": [*SOURCES, *MODALITIES],
    "modes": ["eager", "compile"],
    "hf_types": list,
    "models": list,  # module:function factories: imported and called
    "steps": range(1, 100_001),
    "threads": range(1, 1025),
    "compile_backend": str,
    "baseline": str,
}

MODES = ("eager", "compile")
DEFAULT_BACKEND = "inductor"
STEPS = 20
SEED = 0
# The seeds of the two independently rounded runs that are the CPU's own baseline.
INDEPENDENT_SEEDS = (1, 2)
# More independently rounded runs, only for a case that fails on its loss curve alone or on
# tensors that all miss their bound by at most BORDERLINE: a model whose honest runs jump
# discretely (ResNet's BatchNorm: 5 of 8 seeds jump at steps 3-5) gets too tight a curve
# tolerance from two runs that did not, and a tensor's noise from two runs is one sample of it
# (a weight gradient's error is nearly low-rank: far fewer independent entries than it has).
# Run while they cost at most MORE_SEEDS_BUDGET_S (estimated from the first two).
MORE_SEEDS = (3, 4, 5, 6, 7, 8)
MORE_SEEDS_BUDGET_S = 60.0
BORDERLINE = 2.0
# Kinks (`_kink_flips`): elements of a ReLU-family input within this share of the input's rms
# from a kink are decisions an honest run at the dtype may take either way (fp32 rounding of
# activations of rms ~1 is ~1e-7; the flips measured: 7.9e-7 (hgnet_v2), 8.0e-7 (mobilenet_v1)).
# bf16/fp16 put too many elements that near to try them one by one.
KINK_REL_TOL = {"fp32": 1e-5}
MAX_KINKS = 8  # the nearest this many are tried, each one float64 first step; none if more
# The seed of the float64 reference's independently rounded rerun (`_reference_noise`).
REFERENCE_SEED = 1
# The smoke preset's Hugging Face types: one dense decoder and one MoE.
SMOKE_HF_TYPES = ("llama", "qwen3_moe")
# The quick preset's sample of the task zoo: fast types, two or three per modality (the whole
# zoo is the standard preset's).
QUICK_TASK_TYPES = (
    "albert",
    "distilbert",
    "t5",
    "m2m_100",
    "vit",
    "convnext",
    "wav2vec2",
    "speech_to_text",
    "vivit",
    "videomae",
    "clip",
    "llava",
    "patchtst",
)
QUICK_ZOO_MODELS = 2  # first models of the timm and diffusers zoos when quick names them
DEFAULT_ZOO = ("hf", "timm", "diffusers", "synthetic")
# smoke and quick leave the library zoos out unless `--set zoo=` names them: importing diffusers
# alone costs seconds before the first case, and their conv models still need the CPU's fp32
# baseline to reorder convolutions (the standard preset runs them, each with its status).
QUICK_ZOO = ("hf", "synthetic")
WORST_SHOWN = 3
OPS_SHOWN = 40


# --- cases ----------------------------------------------------------------------------------------


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _grid(cfg: RunConfig) -> dict[str, list[tuple[str, str]]]:
    """(mode, dtype) pairs per model source for the preset, narrowed by --dtype and --set modes."""
    dtypes = ["fp32", "bf16"] if cfg.preset == "full" else ["fp32"]
    if cfg.dtype:
        dtypes = [cfg.dtype]
    return _pairs(cfg.preset, dtypes, cfg.options)


def _pairs(
    preset: str, dtypes: list[str], options: dict[str, Any]
) -> dict[str, list[tuple[str, str]]]:
    modes = _list(options.get("modes")) or list(MODES)
    hf_modes = ["eager"] if preset in ("smoke", "quick") else list(MODES)
    pairs = {
        "hf": [(m, d) for m in hf_modes for d in dtypes if m in modes],
        "synthetic": [(m, d) for m in MODES for d in dtypes if m in modes],
        "factory": [(m, d) for m in MODES for d in dtypes if m in modes],
    }
    return pairs


def _case(name: str, params: dict[str, Any], mode: str, dtype: str, cfg: RunConfig) -> Case:
    params = {**params, "mode": mode, "dtype": dtype, "steps": int(cfg.options.get("steps", STEPS))}
    # planned with the case, so a case that ends before recording it (a crash, a raise) still
    # counts under its modality
    params["modality"] = _declared_modality(params)
    if mode == "compile":
        params["compile_backend"] = cfg.options.get("compile_backend") or DEFAULT_BACKEND
    return Case(NAME, f"{name}/{mode}/{dtype}", params)


def _zoo(cfg: RunConfig) -> tuple[list[str], list[str]]:
    """(sources, modalities) `--set zoo=` selects: modality names narrow the model zoos (hf,
    timm, diffusers, or those named) to those modalities; without a source they select from
    all three."""
    zoo = _list(cfg.options.get("zoo")) or list(
        QUICK_ZOO if cfg.preset in ("smoke", "quick") else DEFAULT_ZOO
    )
    modalities = [z for z in zoo if z in MODALITIES]
    sources = [z for z in zoo if z not in MODALITIES]
    if modalities and not sources:
        sources = ["hf", "timm", "diffusers"]
    return sources, modalities


def _hf_cases(cfg: RunConfig, modalities: list[str]) -> list[Case]:
    """The transformers zoo: causal LMs (`hf`) and every other type with a task head
    (`hf_task`), ids hf/<type>/<mode>/<dtype> for both."""
    try:
        from trainready.models import hf_tasks
        from trainready.models.hf import model_types

        causal, tasks = model_types(), hf_tasks.model_types()
    except ImportError as e:  # the zoo needs transformers: say so in a case, never drop it
        why = f"the Hugging Face zoo needs transformers: {e}"
        return [Case(NAME, "hf/unavailable", {"source": "unavailable", "reason": why})]
    types = _list(cfg.options.get("hf_types"))
    if not types and cfg.preset == "smoke":
        types = list(SMOKE_HF_TYPES)
    elif not types:
        sample = cfg.preset in ("smoke", "quick")
        types = causal + (list(QUICK_TASK_TYPES) if sample else tasks)
    if modalities:
        types = [t for t in types if hf_modality(t) in modalities]
    grid = _grid(cfg)["hf"]
    out = []
    for t in types:
        p = {"source": "hf_task" if t in tasks else "hf", "model": t}
        out += [_case(f"hf/{t}", p, m, d, cfg) for m, d in grid]
    return out


def _library_cases(source: str, cfg: RunConfig, modalities: list[str]) -> list[Case]:
    """The timm or diffusers zoo (`models/timm_zoo.py`, `diffusers_zoo.py`); one unavailable case
    saying why when the library or the zoo is not installed."""
    try:
        names = zoo_module(source).model_names()
    except ImportError as e:
        why = f"the {source} zoo needs {source}: {e}"
        p = {"source": "unavailable", "reason": why, "modality": LIBRARY_MODALITY[source]}
        return [Case(NAME, f"{source}/unavailable", p)]
    if modalities and LIBRARY_MODALITY[source] not in modalities:
        return []
    if cfg.preset in ("smoke", "quick"):
        names = names[:QUICK_ZOO_MODELS]
    p = {"source": source}
    grid = _grid(cfg)["hf"]
    return [_case(f"{source}/{n}", {**p, "model": n}, m, d, cfg) for n in names for m, d in grid]


# The modality of every model of a library zoo.
LIBRARY_MODALITY = {"timm": "vision", "diffusers": "diffusion"}


def cases(cfg: RunConfig) -> list[Case]:
    sources, modalities = _zoo(cfg)
    grid = _grid(cfg)
    out: list[Case] = []
    if "hf" in sources:
        out += _hf_cases(cfg, modalities)
    for source in ("timm", "diffusers"):
        if source in sources:
            out += _library_cases(source, cfg, modalities)
    if "synthetic" in sources:
        from trainready.models.synthetic import variants

        for name, config in variants(cfg.preset, SEED):
            p = {"source": "synthetic", "model": name, "config": config}
            out += [_case(f"synthetic/{name}", p, m, d, cfg) for m, d in grid["synthetic"]]
    for path in _list(cfg.options.get("models")):
        p = {"source": "factory", "model": path, "factory": path}
        out += [_case(f"custom/{path}", p, m, d, cfg) for m, d in grid["factory"]]
    return out


# --- verdicts -------------------------------------------------------------------------------------


def _ratio(v: Verdict) -> float:
    """How far over its allowance a tensor is: rmse over the rule's threshold, or the allclose
    tolerance ratio where no rmse rule was needed; inf for shape and non-finite failures."""
    if v.rule in ("shape", "nonfinite"):
        return float("inf")
    if v.threshold:
        return v.errors["rmse"] / v.threshold
    return v.errors.get("tol_ratio", 0.0)


def _worst(verdicts: dict[str, Verdict], n: int) -> list[dict[str, Any]]:
    ranked = sorted(verdicts.items(), key=lambda kv: (kv[1].ok, -_ratio(kv[1])))
    return [
        {"tensor": name, "ok": v.ok, "rule": v.rule, "ratio": _ratio(v), **_short(v)}
        for name, v in ranked[:n]
    ]


def _short(v: Verdict) -> dict[str, Any]:
    keys = ("rmse", "ref_rms", "noise_rmse", "floor", "max_abs", "max_rel", "cosine", "nonfinite",
            "missing_on_device")  # fmt: skip
    return {k: v.errors[k] for k in keys if k in v.errors}


def describe(entry: dict[str, Any]) -> str:
    if entry.get("missing_on_device"):
        return f"{entry['tensor']} missing on the device"
    if entry["rule"] in ("shape", "nonfinite"):
        return f"{entry['tensor']} {entry['rule']} mismatch"
    return f"{entry['tensor']} rmse ratio {entry['ratio']:.3g}"


def judge(
    ref: dict[str, torch.Tensor],
    dev: dict[str, torch.Tensor],
    noise: dict[str, float],
    dtype: str,
    rule: str = "noise_vs_cpu",
) -> tuple[bool, dict[str, Verdict]]:
    """Every reference tensor the device also has, against its measured noise (inf where none
    was measured); a tensor the device lacks fails as a shape mismatch."""
    missing = sorted(ref.keys() - dev.keys())
    named = {n: (r, dev[n], noise.get(n, math.inf)) for n, r in ref.items() if n in dev}
    ok, _, verdicts = judge_many(named, dtype, rule)
    for name in missing:  # a gradient the reference has and the device lacks
        verdicts[name] = Verdict(False, "shape", {"missing_on_device": True})
    return ok and not missing, verdicts


# --- execute --------------------------------------------------------------------------------------


def _ops_step(subject: Subject, data: Data, spec: Spec):
    """The first step under the ops probe: (its trace, the probe's report). A step that raises
    only under the probe is run again plainly, and the report says its ops went unrecorded and
    why: PyTorch takes other code paths while a Python dispatch mode is on (ops that check
    `areAnyTensorSubclassLike`: ctc_loss then divides by its target lengths where they are, on
    the host, beside the device's losses). A step that raises plainly too raises that error."""
    probe = OpsProbe(spec.device)
    try:
        return first_step(subject.model, data, spec, around=probe), probe.report
    except Exception as e:  # noqa: BLE001 - judged by the plain step below
        if is_oom(e):
            raise
        under_probe = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    trace = first_step(subject.model, data, spec)
    why = f"the first step raised only under the ops probe's dispatch mode ({under_probe})"
    return trace, OpsReport.unrecorded(spec.device, why)


def _ops_json(report) -> dict[str, Any]:
    d = report.to_json()
    d["ops"] = dict(list(d["ops"].items())[:OPS_SHOWN])
    return d


def _reference(subject: Subject, data: Data, steps: int, shared: Shared):
    """The float64 CPU run (computed once per run for every case of the model: `shared`). A model
    that runs in float32 but not in float64 (it hard-codes a float32 tensor somewhere, or its
    float64 path overflows to NaN) has no reference here: `unsupported`, with the error --
    nothing a device does could be judged against it."""
    try:
        ref = shared.train(subject.model, data, Spec("cpu", "fp64", steps), "reference")
    except Exception as e:
        if is_oom(e):
            raise
        train(subject.model, data, Spec("cpu", "fp32", 1))  # raises if the model is just broken
        text = " ".join(str(e).split())[:300]
        raise Unsupported(f"no float64 CPU reference: {type(e).__name__}: {text}") from None
    if subject.is_task and ref.logits.dtype != torch.float64:  # a causal LM's loss is ours
        raise Unsupported(
            f"no float64 CPU reference: the model computes its output in {ref.logits.dtype} "
            "with float64 weights (a cast inside the model)"
        )
    if all(math.isfinite(x) for x in ref.curve):
        return ref
    fp32 = train(subject.model, data, Spec("cpu", "fp32", 1))
    if not math.isfinite(fp32.curve[0]):
        raise RuntimeError("the loss is not finite in float32 or in float64 on the CPU")
    step = next(i for i, x in enumerate(ref.curve) if not math.isfinite(x))
    raise Unsupported(
        f"no float64 CPU reference: its loss is {ref.curve[step]} at step {step} while float32 "
        "on the CPU is finite (the model's float64 path)"
    )


def execute(case: Case, ctx: CaseContext) -> Outcome:
    # tiny models run fastest on one CPU thread (parallel kernels cost more than they save)
    with cpu_threads(int(ctx.options.get("threads", 1))):
        out = Outcome("pass")
        try:
            return _execute(case, ctx, out)
        except Unsupported as e:  # found after the build (no float64 reference...): what the
            out.status, out.diagnostics["reason"] = "unsupported", str(e)  # case found stays
            return out


class _Timed:
    """`ctx.phase` that also adds the phase's seconds to metrics[f"t_{phase}_s"]."""

    def __init__(self, ctx: CaseContext, metrics: dict[str, float]):
        self.ctx, self.metrics = ctx, metrics

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        # set_phase, not ctx.phase: a phase that raises stays the case's phase in the result.
        self.ctx.set_phase(name)
        try:
            yield
        finally:
            key = f"t_{name}_s"
            self.metrics[key] = self.metrics.get(key, 0.0) + time.perf_counter() - t0


class _CompileFailed(Exception):  # noqa: N818 - carries the compile error, not a new one
    pass


def _eager(
    subject: Subject,
    data: Data,
    spec: Spec,
    phase: _Timed,
    out: Outcome,
    shared: Shared | None,
    around: contextlib.AbstractContextManager | None = None,
) -> Trace:
    """Eager on the device: the first step under the ops probe, then the run (on the CPU the
    same run as a compiled case's CPU baseline: `shared`; under `around`, a routing recorder,
    where given), whose first step is the probed one's second (determinism)."""
    with phase("ops"):
        probed, ops = _ops_step(subject, data, spec)
    out.diagnostics["ops"] = _ops_json(ops)
    out.metrics |= ops.metrics()
    try:
        with phase("train"), around or contextlib.nullcontext():
            if shared is None:
                dev = train(subject.model, data, spec)
            else:
                dev = shared.train(subject.model, data, spec, "device run")
    except Exception:
        with phase("ops"):  # the run failed: its first step again on its own
            _determinism(probed, first_step(subject.model, data, spec), out)
        raise
    _determinism(probed, dev, out)
    return dev


def _determinism(probed: Trace, again: Trace, out: Outcome) -> None:
    """Two eager first steps on the device, bit for bit (`again`'s first step: a run's)."""
    det = determinism(probed, again)
    out.diagnostics["determinism"] = det.__dict__
    out.metrics["nondeterministic_tensors"] = float(len(det.differing))


def _compiled(subject: Subject, data: Data, spec: Spec, ctx: CaseContext, out: Outcome) -> Trace:
    """Compiled on the device under the compile probe; raises _CompileFailed when compiling (not
    the model) breaks the run."""
    why = backend_unsupported(spec.compile_backend, spec.device)
    if why is not None:
        ctx.set_phase("compile")
        raise Unsupported(why)
    torch._dynamo.reset()
    probe = CompileProbe()
    try:
        with probe, ctx.phase("compile"):
            dev = train(subject.model, data, spec, on_first_step=lambda: ctx.set_phase("train"))
    except Exception as e:  # noqa: BLE001 - eager ran at this dtype: compiling broke it
        if is_oom(e):
            raise
        if device_type(spec.device) != "cpu":  # eager on the device must work to blame compile
            first_step(subject.model, data, Spec(spec.device, spec.dtype, 1))
        out.diagnostics["compile"] = probe.report.to_json()
        raise _CompileFailed(f"{type(e).__name__}: {' '.join(str(e).split())[:500]}") from e
    out.diagnostics["compile"] = probe.report.to_json()
    out.metrics |= probe.report.metrics()
    out.metrics["compile_s"] = max(0.0, dev.first_step_s - dev.step_s)
    return dev


@dataclass
class Baseline:
    """The honest computation at the case dtype a device run is judged against.

    `kind` "cpu": the CPU running the case eagerly at the dtype (one run); "independent": two CPU
    runs at the dtype whose roundings are independent of the plain run's and of each other
    (`IndependentRounding`), for eager on the CPU, where the plain run is the device run itself.
    `routed`: the model routes tokens by a top-k (MoE), so a rounding can flip a near-tie and move
    a run by more than rounding noise. Eager runs pin the routing instead (`_pin`: every run
    follows the device's decisions, judged on their own) and judge with routed=False; where
    that is not possible (compiled), the independent runs' own distance from float64 joins their
    spread as noise (honest runs flip too; a systematic fault in the model's low-precision path
    then hides behind it in the tensors a flip moves), and against the CPU's run a flip the CPU
    did not make fails."""

    kind: str
    runs: tuple[Trace, ...]
    dtype: str
    routed: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    # the float64 reference's own rounding noise per tensor, where measured (`_reference_noise`)
    reference_noise: dict[str, float] = field(default_factory=dict)

    @property
    def rule(self) -> str:
        if self.kind == "cpu":
            return "noise_vs_cpu"
        return "noise_vs_independent_routed" if self.routed else "noise_vs_independent"

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"the CPU, eager, {self.dtype}"
        how = (
            "fp32 compute, stochastically rounded to the dtype at every op"
            if self.dtype != "fp32"
            else "GEMMs, sums, convolutions (channels, batch, mirrored positions), norms, scans "
            "and triangular solves in fp32 in a random reduction order; grid-sample coordinates "
            "moved an ulp"
        )
        if self.counts.get("pointwise"):
            how += "; elementwise ops rounded stochastically from float64"
        text = f"two CPU runs at {self.dtype} rounding independently ({how}); noise = their spread"
        if self.routed:
            text += ", or their own distance from float64 where larger (top-k routing flips)"
        return text

    def _kappa(self) -> float:
        return math.sqrt(KAPPA2[self.dtype])

    def noise(self, ref: dict[str, torch.Tensor]) -> dict[str, float]:
        """The measured noise of each pre-step tensor (loss, logits, gradients)."""
        named = [r.named(after_step=False) for r in self.runs]
        out = {}
        for n, r in ref.items():
            if any(n not in t or t[n].shape != r.shape for t in named):
                out[n] = math.inf  # nothing honest to measure it by: not failed on that
                continue
            if self.kind == "cpu":
                out[n] = noise_rmse(r, named[0][n])
                continue
            out[n] = spread_noise(r, [t[n] for t in named], KAPPA2[self.dtype])
            # A tensor of a few entries estimates its noise from a few values, and some (a Mamba
            # layer's dt_bias gradient: a sum over every token) scatter far from Gaussian: the
            # runs' own distances from float64 are two more samples of it. (So are they where a
            # routing flip moved a run.)
            if self.routed or r.numel() < SMALL_NUMEL:
                own = max(noise_rmse(r, t[n]) for t in named) / self._kappa()
                out[n] = max(out[n], own)
            # The device's distance from the reference holds the reference's own rounding error
            # too, independent of the device's: their variances add.
            out[n] = math.hypot(out[n], self.reference_noise.get(n, 0.0))
        return out

    def curve(self, ref: list[float]) -> list[float]:
        """Per step, the relative deviation of an honest run's loss from the reference's (for
        the independent runs: the largest of their spread and their own deviations, in a plain
        run's rounding noise)."""
        if self.kind == "cpu":
            return curve_noise(ref, self.runs[0].curve)
        kappa = self._kappa()
        # Each run's deviation is within rounding noise of the other's: their difference is the
        # spread, (x - r) - (y - r) = x - y, relative to the reference (over consecutive runs,
        # where `_more_runs` added some).
        own = [curve_noise(ref, run.curve) for run in self.runs]
        out = []
        for i, r in enumerate(ref):
            steps = [run.curve[i : i + 1] for run in self.runs]
            if not (all(steps) and math.isfinite(sum(x[0] for x in steps) + r)):
                out.append(math.inf)
                continue
            spread = max(
                abs(x[0] - y[0]) / max(abs(r), 1e-30) / (math.sqrt(2.0) * kappa)
                for x, y in zip(steps, steps[1:], strict=False)
            )
            # Each run's own deviation is more samples of the curve's noise: a curve's largest
            # deviation over its steps is about one sample (neighbouring steps share it), too
            # few to bound a correct run's by. (A systematic error the runs share loosens the
            # curve then; the tensors judge that one.)
            out.append(max(spread, *(o[i] / kappa for o in own)))
        return out


def _routed(traits: dict[str, str]) -> bool:
    return str(traits.get("moe", "dense")) not in ("dense", "")


def _check(
    subject: Subject,
    ref: Trace,
    dev: Trace,
    base: Baseline,
    dtype: str,
    out: Outcome,
    noise_ref: Trace | None = None,
) -> tuple[list[str], dict[str, Verdict]]:
    """Every tensor and the loss curve against the reference: the problems found, as text, and
    the verdict on each tensor. The baselines' noise is measured against `noise_ref` where given
    (the plain reference, when `ref` is one with a decision flipped: `_kink_flips`)."""
    pre = ref.named(after_step=False)
    noise = base.noise((noise_ref or ref).named(after_step=False))
    _, verdicts = judge(pre, dev.named(after_step=False), noise, dtype, base.rule)
    # The optimizer step, at the dtype the parameters are kept in: float64 AdamW from the
    # device's own gradients is what it should have produced, the CPU's fp32 AdamW from the same
    # gradients is how close an honest fp32 step comes.
    step_dtype = "fp64" if dtype == "fp64" else "fp32"
    expected = optimizer_step_reference(subject.model, dev.grads)
    honest = optimizer_step_baseline(subject.model, dev.grads, torch_dtype(step_dtype))
    step_noise = {n: noise_rmse(t, honest[n]) for n, t in expected.items()}
    after = {f"{n}.after_step": p for n, p in dev.params.items()}
    _, step_verdicts = judge(expected, after, step_noise, step_dtype, "noise_vs_cpu_optimizer")
    verdicts |= step_verdicts
    curve = loss_curve_compare(ref.curve, dev.curve, curve_tolerance(base.curve(ref.curve)))
    worst = _worst(verdicts, WORST_SHOWN)
    out.diagnostics |= {
        "worst": worst,
        "tensors_compared": len(verdicts),
        "tensors_failing": sum(not v.ok for v in verdicts.values()),
        "curve": {**curve, "reference": ref.curve, "device": dev.curve},
    }
    out.metrics |= {
        "loss": float(dev.loss),
        "worst_ratio": worst[0]["ratio"] if worst else 0.0,
        "curve_max_rel_dev": float(curve["max_rel_dev"]),
        "curve_rel_tol": float(curve["rel_tol"]),
        "first_step_s": dev.first_step_s,
        "step_s": dev.step_s,
    }
    problems = []
    failing = [w for w in worst if not w["ok"]]
    if failing:
        problems.append("; ".join(describe(w) for w in failing))
    if not curve["ok"]:
        problems.append(
            f"loss curve diverges from the reference at step {curve['first_diverging_step']}"
            f" (max rel dev {curve['max_rel_dev']:.3g} > {curve['rel_tol']:.3g})"
        )
    return problems, verdicts


# The IndependentRounding counts of ops it rounded differently from the plain run.
_ROUNDED = (
    "recomputed",
    "gemm",
    "sum",
    "conv",
    "norm",
    "grid",
    "scan",
    "solve",
    "pointwise",
    "inplace",
)


def _replaying(replay: list[torch.Tensor] | None) -> contextlib.AbstractContextManager:
    """A run following a recorded routing (`replay`: the device run's top-k decisions), or a
    plain one (None)."""
    return Routing(replay=replay) if replay is not None else contextlib.nullcontext()


def _independent(
    subject: Subject,
    data: Data,
    dtype: str,
    steps: int,
    seeds: tuple[int, ...] = INDEPENDENT_SEEDS,
    replay: list[torch.Tensor] | None = None,
    pointwise: bool = False,
) -> tuple[Baseline | None, str | None]:
    """The CPU's own baseline: independently rounded runs (two by default; following the routing
    `replay` where given; elementwise ops rounded independently too where `pointwise`), or
    (None, why there is none)."""
    if dtype not in KAPPA2:
        return None, (
            f"the device is the CPU and {dtype} is the reference's own dtype: there is no second "
            "computation to judge it by"
        )
    runs, counts = [], Counter()
    for seed in seeds:
        mode = IndependentRounding(dtype, seed, pointwise)
        try:
            with mode, _replaying(replay):
                runs.append(train(subject.model, data, Spec("cpu", dtype, steps)))
        except Exception as e:  # noqa: BLE001 - the baseline failed, not the device
            if is_oom(e):
                raise
            text = " ".join(str(e).split())[:300]
            return None, f"the independently rounded runs failed: {type(e).__name__}: {text}"
        counts.update(mode.counts)
    if not sum(counts[k] for k in _ROUNDED):
        return None, "the independently rounded runs rounded no op differently"
    return Baseline("independent", tuple(runs), dtype, _routed(subject.traits), dict(counts)), None


def _borderline(out: Outcome, verdicts: dict[str, Verdict]) -> bool:
    """Whether the case failed on its loss curve alone, or on tensors that all miss their bound
    by at most BORDERLINE (what more honest runs can settle)."""
    failing = [v for v in verdicts.values() if not v.ok]
    return all(v.threshold is not None and _ratio(v) <= BORDERLINE for v in failing) and (
        bool(failing) or not out.diagnostics["curve"]["ok"]
    )


def _more_runs(
    subject: Subject,
    data: Data,
    steps: int,
    base: Baseline,
    out: Outcome,
    phase: Callable,
    replay: list[torch.Tensor] | None,
) -> Baseline:
    """`MORE_SEEDS` more runs like `base`'s (pointwise rounding included) where they fit the
    budget (the time of `base`'s runs says), recorded in `independent_runs`; `base` as it is
    where they do not fit or fail."""
    spent = out.metrics.get("t_independent_full_s") or out.metrics.get("t_independent_s")
    per_run = (spent or math.inf) / len(INDEPENDENT_SEEDS)
    if per_run * len(MORE_SEEDS) > MORE_SEEDS_BUDGET_S:
        out.diagnostics["independent_runs"] = (
            f"{len(INDEPENDENT_SEEDS)}: {len(MORE_SEEDS)} more would take about "
            f"{per_run * len(MORE_SEEDS):.0f} s (budget {MORE_SEEDS_BUDGET_S:.0f} s)"
        )
        return base
    with phase("independent_more"):
        more, why = _independent(subject, data, base.dtype, steps, MORE_SEEDS, replay, True)
    out.diagnostics["independent_runs"] = len(INDEPENDENT_SEEDS) + len(MORE_SEEDS) if more else why
    return replace(base, runs=base.runs + more.runs) if more else base


def _reference_noise(
    subject: Subject,
    data: Data,
    ref: Trace,
    verdicts: dict[str, Verdict],
    phase: Callable,
    replay: list[torch.Tensor] | None,
) -> dict[str, float]:
    """The float64 reference's own rounding noise on each failing tensor: its first step rerun
    with its sums in another order (`IndependentRounding("fp64")`); each run carries the
    reference's rounding error once. Decisive where a tensor is zero in exact arithmetic and
    the reference holds nothing but float64 rounding residue (a zero-initialised query's
    gradients: ~1e-22, with the fp32 runs returning exactly 0)."""
    failing = [n for n, v in verdicts.items() if not v.ok and not n.endswith(".after_step")]
    if not failing:
        return {}
    with (
        phase("reference_noise"),
        IndependentRounding("fp64", REFERENCE_SEED),
        _replaying(replay),
    ):
        again = train(subject.model, data, Spec("cpu", "fp64", 1)).named(after_step=False)
    first = ref.named(after_step=False)
    return {
        n: spread_noise(first[n], [first[n], again[n]], 1.0)
        for n in failing
        if n in again and again[n].shape == first[n].shape
    }


def _escalated(
    subject: Subject,
    data: Data,
    steps: int,
    checked: tuple[Trace, Trace, Baseline],
    out: Outcome,
    phase: Callable,
    verdicts: dict[str, Verdict],
    replay: list[torch.Tensor] | None,
) -> tuple[Baseline, list[str]]:
    """A CPU eager fp32 case that failed, judged again with what its first baseline does not
    see: the reference's own rounding noise on the failing tensors; the independent runs redone
    with elementwise ops rounded independently too (`IndependentRounding(pointwise=True)`, three
    times the cost, so only here); and, where every failure is still borderline (`_borderline`),
    `MORE_SEEDS` more such runs. Every run follows the device's routing where the case's runs
    were pinned to it (`replay`). (The baseline and the problems found.)"""
    ref, dev, base = checked
    noise = _reference_noise(subject, data, ref, verdicts, phase, replay)
    if noise:
        out.diagnostics["reference_noise"] = {n: float(v) for n, v in noise.items()}
    base = replace(base, reference_noise=base.reference_noise | noise)
    if base.dtype == "fp32":
        with phase("independent_full"):
            full, why = _independent(
                subject, data, base.dtype, steps, INDEPENDENT_SEEDS, replay, pointwise=True
            )
        if full is not None:
            base = replace(full, reference_noise=base.reference_noise)
            out.diagnostics["independent_rounding"] = full.counts
        else:
            out.diagnostics["independent_full"] = why
    with phase("check"):
        problems, verdicts = _check(subject, ref, dev, base, base.dtype, out)
    if problems and _borderline(out, verdicts):
        base = _more_runs(subject, data, steps, base, out, phase, replay)
        with phase("check"):
            problems, _ = _check(subject, ref, dev, base, base.dtype, out)
    return base, problems


def _kink_flips(
    subject: Subject,
    data: Data,
    checked: tuple[Trace, Trace, Baseline],
    dtype: str,
    out: Outcome,
    phase: Callable,
    replay: list[torch.Tensor] | None,
    problems: list[str],
) -> list[str]:
    """A case whose tensors failed, judged again against the reference with one decision of a
    ReLU-family module flipped, for each element the reference's first step puts within
    KINK_REL_TOL of its input's rms from a kink (the nearest MAX_KINKS; none tried where there
    are more): honest runs may take such a decision either way (`probes/kinks.py`). The noise
    stays the baselines' distance from the plain reference. The problems left ([] where one
    flip explains the device's run, named in `kinks.flipped`)."""
    ref, dev, base = checked
    rel_tol = KINK_REL_TOL.get(dtype)
    if rel_tol is None or not name_kinks(subject.model):
        return problems
    found: list[Kink] = []
    reference = Spec("cpu", "fp64", 1)
    with phase("kinks"), near_kinks(rel_tol, found, MAX_KINKS), _replaying(replay):
        first_step(subject.model, data, reference)
    report: dict[str, Any] = {"near": len(found), "tried": 0}
    out.diagnostics["kinks"] = report
    if not found or len(found) > MAX_KINKS:
        if found:
            report["near"] = f"more than {MAX_KINKS}: none tried"
        return problems
    for kink in found:
        with phase("kinks"), flipping(kink), _replaying(replay):
            flipped = first_step(subject.model, data, reference)
        report["tried"] += 1
        one = replace(
            ref, loss=flipped.loss, logits=flipped.logits, grads=flipped.grads, aux=flipped.aux
        )
        with phase("check"):
            left, _ = _check(subject, one, dev, base, dtype, out, noise_ref=ref)
        if not left:
            report["flipped"] = kink.to_json()
            return []
    with phase("check"):  # the diagnostics of the plain judgement again
        left, _ = _check(subject, ref, dev, base, dtype, out)
    return left


def _pinnable(kind: str, dtype: str) -> bool:
    """Whether the baselines of `kind` exist at `dtype` to replay a routing in."""
    return not (kind == "independent" and dtype not in KAPPA2)


def _pin(
    subject: Subject,
    data: Data,
    spec: Spec,
    recorded: Trace,
    recorder: Routing,
    kind: str,
    dtype: str,
    out: Outcome,
) -> tuple[Trace, Trace, Baseline, Flips] | None:
    """For a model that routes by top-k, eager: the device's routing decisions, recorded by
    `recorder` in the device run (`recorded`), replayed in the float64 reference and in the
    baselines of `kind` at `dtype` (`probes/routing.py`): (reference, device run, baseline, the
    decisions judged), or None when there is nothing to pin (no top-k calls), the runs' top-k
    calls do not line up, or a pinned run fails (the unpinned path then runs, and says why where
    it fails too). It runs before any unpinned reference or baseline: when pinning works, those
    are never needed."""
    if not recorder.log:
        return None
    seeds = INDEPENDENT_SEEDS if kind == "independent" else (None,)
    reference, modes, runs, counts = Routing(replay=recorder.log), [], [], Counter()
    try:
        with reference:
            ref = train(subject.model, data, Spec("cpu", "fp64", spec.steps))
        for seed in seeds:
            replay = Routing(replay=recorder.log)
            rounding = IndependentRounding(dtype, seed) if seed else None
            with rounding or contextlib.nullcontext(), replay:
                runs.append(train(subject.model, data, Spec("cpu", dtype, spec.steps)))
            modes.append(replay)
            counts.update(rounding.counts if rounding else {})
    except Exception as e:  # noqa: BLE001 - the unpinned path reports what fails there
        if is_oom(e):
            raise
        return None
    if not all(math.isfinite(x) for x in ref.curve):
        return None
    if kind == "independent" and not sum(counts[k] for k in _ROUNDED):
        return None
    kappa2 = KAPPA2[dtype] if kind == "independent" else None
    report = flips(reference, modes, dtype, kappa2)
    out.diagnostics["routing"] = {**report.to_json(), "pinned": report.diverged is None}
    if report.diverged is not None:
        return None
    pinned = Baseline(kind, tuple(runs), dtype, routed=False, counts=dict(counts))
    return ref, recorded, pinned, report


def _against_baseline(ref: str, case: Case, out: Outcome) -> list[str]:
    rel_tol = float(out.diagnostics["curve"]["rel_tol"])
    cmp = parity_baseline.compare(ref, case.id, out.diagnostics["summary"], rel_tol)
    out.diagnostics["baseline"] = cmp
    if cmp["ok"] is not None:
        out.metrics["baseline_curve_max_rel_dev"] = float(cmp["curve"]["max_rel_dev"])
    if cmp["ok"] is False:
        step = cmp["curve"]["first_diverging_step"]
        return [
            f"loss curve diverges from baseline {cmp['device']} ({cmp['run_id']}) at step {step}"
        ]
    return []


def _declared_modality(p: dict[str, Any]) -> str:
    """The modality of a case's model from its params alone (for a model that did not build)."""
    source = p.get("source")
    if source in ("hf", "hf_task"):
        return hf_modality(str(p["model"]))
    if source in ("synthetic", "factory"):
        return "text-decoder"  # both feed token ids to a causal LM
    return str(p.get("modality") or LIBRARY_MODALITY.get(str(source), "unknown"))


# Params that do not change a CPU run of the model: the cases that differ only in them share it.
_MODE_PARAMS = ("mode", "dtype", "compile_backend")


def _shared(ctx: CaseContext, p: dict[str, Any], dtype: str, state: dict[str, Any]) -> Shared:
    """The CPU runs this case shares with the other cases of its model in the run
    (`parity_cache.py`): the float64 reference (every case of the model computes it) and the
    plain CPU run at a dtype (the eager case's device run on the CPU, or its CPU baseline
    elsewhere; the compiled case's CPU baseline). Written only when another planned case needs
    it (`users`); nothing is shared outside a stored run."""
    source = {"synthetic": "synthetic", "factory": "factory"}.get(str(p.get("source")), "hf")
    dtypes = ["fp32", "bf16"] if ctx.preset == "full" else ["fp32"]
    pairs = _pairs(ctx.preset, sorted({*dtypes, dtype}), ctx.options)[source]

    def users(spec: Spec) -> int:
        if spec.dtype == "fp64":
            return len(pairs)
        return sum(d == spec.dtype for _, d in pairs)

    identity = {k: v for k, v in p.items() if k not in _MODE_PARAMS} | state
    directory = None if ctx.run_dir is None else f"{ctx.run_dir}/parity_shared"
    return Shared(directory, identity, users)


def _execute(case: Case, ctx: CaseContext, out: Outcome) -> Outcome:
    p = case.params
    dtype = p.get("dtype") or ctx.dtype or DEFAULT_DTYPE
    mode, steps = p.get("mode", "eager"), int(p.get("steps", STEPS))
    out.diagnostics |= {"mode": mode, "dtype": dtype, "model": p.get("model")}
    phase = _Timed(ctx, out.metrics)

    with phase("build"):
        try:
            subject = load(p, SEED)
        except Unsupported as e:
            out.status = "unsupported"
            out.diagnostics |= {"reason": str(e), "traits": declared_traits(p)}
            out.diagnostics["modality"] = _declared_modality(p)
            return out
    out.diagnostics["traits"] = subject.traits
    out.diagnostics["modality"] = subject.modality
    text_only = getattr(subject.model, "text_only_reason", None)
    if text_only:  # a multimodal LM whose image inputs did not run: its text alone is judged
        out.diagnostics["text_only"] = f"vision tower not exercised; images failed: {text_only}"
    out.metrics["params"] = float(sum(t.numel() for t in subject.model.parameters()))
    fails = getattr(subject.model, "router_loss_fails_on", None)
    why_not = fails(ctx.device) if callable(fails) else None
    if why_not:  # every run of the case then trains without it
        out.diagnostics["router_loss"] = (
            f"not trained: the model's router loss fails here: {why_not}"
        )
    data = (
        TaskData(subject.model.make_batch(SEED))
        if subject.is_task
        else Data.fixed(subject.vocab_size, subject.seq_len, SEED)
    )

    spec = Spec(ctx.device, dtype, steps, p.get("compile_backend") if mode == "compile" else None)
    kind = "independent" if device_type(ctx.device) == "cpu" and mode == "eager" else "cpu"
    shared = _shared(ctx, p, dtype, {"router_loss": why_not, "text_only": text_only})
    pinned = None
    routed_eager = _routed(subject.traits) and mode == "eager"
    if routed_eager:
        # Routed eager: the device run first, recording its routing, then reference and
        # baselines replaying it (`_pin`); the unpinned ones below only when pinning does not
        # work, against a plain device run (timed under the recorder where pinned).
        recorder = Routing() if _pinnable(kind, dtype) else None
        dev = _eager(subject, data, spec, phase, out, None, recorder)
        if recorder is not None:
            with phase("routing"):
                pinned = _pin(subject, data, spec, dev, recorder, kind, dtype, out)
            if pinned is None:
                with phase("train"):
                    dev = train(subject.model, data, spec)
    compiled, compile_error = None, None
    if mode == "compile":
        # Compiled first: the eager case of the model, beside it, meanwhile computes the CPU runs
        # both need (`shared`). What compiling raised waits until the reference and the baseline
        # have run, so the case ends as it would with them first.
        before = ctx.current_phase
        try:
            compiled = _compiled(subject, data, spec, ctx, out)
        except Exception as e:  # noqa: BLE001 - re-raised (or fail_compile) below
            compile_error, failed_in = e, ctx.current_phase
    if pinned is not None:
        ref, dev, base, flipped = pinned
        why = None
    else:
        flipped = None
        with phase("reference"):
            ref = _reference(subject, data, steps, shared)
        base, why = None, None
        if kind == "independent":
            if not routed_eager:  # (a routed one ran first, above)
                # the device run, on the CPU the compiled case's baseline (`shared`)
                dev = _eager(subject, data, spec, phase, out, shared)
            with phase("independent"):
                base, why = _independent(subject, data, dtype, steps)
        else:
            with phase("cpu_same_dtype"):
                low = shared.train(subject.model, data, Spec("cpu", dtype, steps), "cpu baseline")
            base = Baseline("cpu", (low,), dtype, _routed(subject.traits))
    out.diagnostics["same_dtype_baseline"] = base.describe() if base else f"none: {why}"
    if base is not None and base.counts:
        out.diagnostics["independent_rounding"] = base.counts
    if shared.reused:
        out.diagnostics["shared_runs"] = list(shared.reused)

    if mode == "compile":
        if compile_error is not None and failed_in != before:
            ctx.set_phase(failed_in)  # (one that left its phase ends in it, as it did first)
        if isinstance(compile_error, _CompileFailed):
            out.status, out.diagnostics["error"] = "fail_compile", str(compile_error)
            return out
        if compile_error is not None:
            raise compile_error
        dev = compiled
    elif not routed_eager and kind != "independent":  # (else it ran above)
        dev = _eager(subject, data, spec, phase, out, shared)

    out.diagnostics["summary"] = parity_baseline.summary(dev.curve, dev.logits, ctx.device, dtype)
    if base is None:  # ran, but nothing honest to judge its numbers by: never a numerics pass
        out.status, out.diagnostics["reason"] = "unsupported", f"numerics not judged: {why}"
        out.diagnostics["numerics_judged"] = False
        return out
    with phase("check"):
        problems, verdicts = _check(subject, ref, dev, base, dtype, out)
    replay = recorder.log if pinned is not None else None
    if problems and base.kind == "independent" and not dev.broken_ties:
        checked = (ref, dev, base)
        base, problems = _escalated(subject, data, steps, checked, out, phase, verdicts, replay)
    if problems and out.diagnostics["tensors_failing"] and not dev.broken_ties:
        checked = (ref, dev, base)
        problems = _kink_flips(subject, data, checked, dtype, out, phase, replay, problems)
    if dev.broken_ties:  # the cause of what the tensors show: named first
        out.diagnostics["broken_ties"] = [list(g) for g in dev.broken_ties]
        problems.insert(0, ties.describe(dev.broken_ties, ctx.device))
    if flipped is not None and flipped.beyond_noise:
        problems.append(
            f"top-k routing: {flipped.beyond_noise} of {flipped.flipped} decisions that differ "
            f"from float64 are not near-ties (worst {flipped.worst_ratio:.3g}x what the score "
            "noise allows)"
        )
    if ctx.options.get("baseline"):
        with phase("baseline"):
            problems += _against_baseline(str(ctx.options["baseline"]), case, out)
    if problems:
        out.status, out.diagnostics["error"] = "fail_numerics", " | ".join(problems)
    return out
