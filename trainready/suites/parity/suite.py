"""Parity suite: does a model train the same on this device as in float64 on the CPU?

Cases (`plan.py`): every causal-LM type of the installed transformers (built tiny,
`models/zoo/hf_causal.py`), every other transformers type with a task head
(`models/zoo/hf_tasks.py`, a `TaskModel` each), the timm and diffusers zoos (`models/zoo/timm.py`,
`models/zoo/diffusers.py`, when installed), the synthetic architecture matrix
(`models/synthetic.py`), and any model factories the user names (`--set
models=pkg.mod:fn[,pkg.mod:fn2]`), each in a mode (`eager`, or `compile` with `--compile-backend`,
default inductor) and a dtype (fp32; bf16 = autocast over fp32 weights). Case ids:
`<source>/<model>/<mode>/<dtype>`. Presets and `--set` options: `plan.py`, `OPTIONS`.

One case (`execute`), on the device under test: forward, loss, backward and one AdamW step, then a
short training run (`steps`, default 20) on one fixed batch. The reference is the same model,
weights and data in float64 on the CPU. The numerics probe judges the loss, the logits, every
gradient and every parameter after the step (`judge_many`, the rule of docs/numerics.md), each
against the noise an honest computation at the case dtype makes on that very tensor
(`noise.Baseline`: on a device, or compiled, the CPU running the case eagerly at the dtype; eager
on the CPU, two independently rounded runs, `probes/perturb.py`; where neither exists, fp64 on the
CPU, the case is `unsupported`, "numerics not judged", never a pass), and the loss curve step by
step. A failure is judged again before it stands (`rejudge.py`: escalation, pooling, kink flips;
`bisect.py` for a compiled case). An MoE model's top-k routing is recorded on the device and
replayed in the reference and the baselines (`noise.pin`, `probes/routing.py`). A model whose tied
parameters the move to the device breaks (`probes/ties.py`) fails on that, named first; the
numerics judged after it are the model's moved with its ties kept.

Also per case: eager runs the first step under the ops probe (aten ops, host round-trips and CPU
fallbacks, `probes/ops.py`) and reports any difference from the training run's own first step;
compile records graph breaks, recompiles, frames left to eager and compile time
(`probes/compile.py`), and whether the compile was its process's first. The CPU runs several
cases of one model need alike are computed once per stored run (`cache.py`). Each case stores a
small summary that `--baseline DIR[:RUN_ID]` compares with another device's run (`baseline.py`).

Statuses: `unsupported` (the model cannot be built here, or its numerics cannot be judged here,
with the reason), `fail_run` (the model raises, in the reference or on the device),
`fail_compile` (it runs eagerly but raises compiled; the error names the ops whose output layout
differs from their meta kernel's, `probes/layouts.py`), `fail_numerics` (naming the worst
tensors, e.g. `layers.1.mlp.w2.weight.grad rmse ratio 7.3`, or the first diverging step), else
`pass`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch

from trainready.core.case import Case, Outcome
from trainready.core.concurrency import cpu_threads
from trainready.core.context import CaseContext, Unsupported
from trainready.device import counted, device_type, is_oom
from trainready.models.zoo.families import MODALITIES
from trainready.probes import ties
from trainready.probes.compile import (
    FIRST_COMPILE_KEY,
    CompileProbe,
    backend_unsupported,
    first_compile_in_process,
)
from trainready.probes.layouts import LayoutCheck
from trainready.probes.ops import OpsProbe, OpsReport
from trainready.probes.routing import Routing
from trainready.suites.parity import baseline as parity_baseline
from trainready.suites.parity import bisect as parity_bisect
from trainready.suites.parity.cache import Shared
from trainready.suites.parity.engine import (
    Data,
    Spec,
    TaskData,
    Trace,
    determinism,
    first_step,
    train,
)
from trainready.suites.parity.models import Subject, declared_traits, load
from trainready.suites.parity.noise import Baseline, independent, pin, pinnable, routed
from trainready.suites.parity.plan import NAME, SEED, STEPS, cases, declared_modality, mode_pairs
from trainready.suites.parity.rejudge import escalated, kink_flips, pooled
from trainready.suites.parity.verdicts import BORDERLINE, borderline, check

__all__ = [
    "NAME",
    "DEFAULT_DTYPE",
    "DEFAULT_BUDGET_S",
    "USES_PEAK",
    "KIND",
    "OPTIONS",
    "cases",
    "execute",
]

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
OPS_SHOWN = 40


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
    """The ops probe's record, its per-op counts cut to the OPS_SHOWN most frequent, and every
    op the model dispatched by name (`op_names`: what the ops report's blockers count)."""
    d = report.to_json()
    d["op_names"] = sorted({key.split("@")[0] for key in d["ops"]})
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
    def __init__(self, message: str, phase: str):
        super().__init__(message)
        self.phase = phase  # where compiling broke: "compile", or "train" past the first step


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
        with phase("train"), around or contextlib.nullcontext(), counted(spec.device) as graphs:
            if shared is None:
                dev = train(subject.model, data, spec)
            else:
                dev = shared.train(subject.model, data, spec, "device run")
    except Exception:
        with phase("ops"):  # the run failed: its first step again on its own
            _determinism(probed, first_step(subject.model, data, spec), out)
        raise
    _determinism(probed, dev, out)
    if graphs:  # a lazy backend's graphs of the run (xla): its recompiles, if it keeps counting
        out.diagnostics["backend_counters"] = graphs
        out.metrics |= graphs
    return dev


def _tie_problems(dev: Trace, problems: list[str], device: str, out: Outcome) -> list[str]:
    """A run whose move broke tied parameters: that, first, as the case's failure (the model a
    user moves that way trains apart); then the numerics judged, which are the model's moved
    with its ties kept (`ties.move_keeping_ties`: whether the device computes the model built
    right), or, where the ties could not be kept, the untied model's, their cause."""
    out.diagnostics["broken_ties"] = [list(g) for g in dev.broken_ties]
    first = ties.describe(dev.broken_ties, device)
    if dev.ties_not_kept is not None:
        out.diagnostics["ties_kept"] = f"no: {dev.ties_not_kept}"
        return [first, *problems]
    out.diagnostics["ties_kept"] = True
    if not problems:
        return [f"{first}. With the ties kept: numerics pass (every tensor and the curve judged)"]
    return [f"{first}. With the ties kept: {problems[0]}", *problems[1:]]


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
    probe = CompileProbe(spec.device)
    out.diagnostics[FIRST_COMPILE_KEY] = first_compile_in_process(spec.device, spec.compile_backend)
    failed_in = "compile"
    try:
        with probe, ctx.phase("compile"):
            try:
                dev = train(subject.model, data, spec, on_first_step=lambda: ctx.set_phase("train"))
            except Exception:
                failed_in = ctx.current_phase  # (the with-block restores the phase before it)
                raise
    except Exception as e:  # noqa: BLE001 - eager ran at this dtype: compiling broke it
        if is_oom(e):
            raise
        out.diagnostics["compile"] = probe.report.to_json()
        # Eager on the device must work to blame compile; its first step, under the layout check,
        # names the ops whose layouts the traced graph got wrong (`probes/layouts.py`).
        layouts = LayoutCheck()
        with ctx.phase("layouts"):
            first_step(subject.model, data, Spec(spec.device, spec.dtype, 1), around=layouts)
        out.diagnostics["layouts"] = layouts.report.to_json()
        error = f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"
        raise _CompileFailed(f"{error}; {layouts.report.sentence()}", failed_in) from e
    out.diagnostics["compile"] = probe.report.to_json()
    out.metrics |= probe.report.metrics()
    out.metrics["compile_s"] = max(0.0, dev.first_step_s - dev.step_s)
    return dev


def _bisected(
    subject: Subject,
    data: Data,
    spec: Spec,
    judged_by: tuple[Trace, Trace, Baseline],
    ctx: CaseContext,
    out: Outcome,
    phase: _Timed,
) -> list[str]:
    """A failing compiled case (its run `dev_run`, judged against `ref` and `base`) run again
    with the backends below its own (`bisect.py`): where in the compiler stack the
    difference arises, as one more line of the error ([] when there is no backend below to try
    or the budget left the answer unknown)."""
    ref, dev_run, base = judged_by
    before = ctx.current_phase

    def judged(backend: str) -> tuple[str, str | None]:
        def run() -> Trace:
            return _compiled(
                subject, data, replace(spec, compile_backend=backend), ctx, Outcome("pass")
            )

        def judge(dev: Trace, scratch: Outcome) -> list[str]:
            return check(subject, ref, dev, base, spec.dtype, scratch)[0]

        with phase("bisect"):
            return parity_bisect.judge_run(run, judge)

    # a bisection run costs about what the failing run did (its compile and every step)
    estimate_s = dev_run.first_step_s + max(0, len(dev_run.curve) - 1) * dev_run.step_s
    where = parity_bisect.bisect(spec.compile_backend, judged, out, estimate_s)
    ctx.set_phase(before)
    return [f"compile bisection: the difference arises in {where}"] if where else []


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


# Params that do not change a CPU run of the model: the cases that differ only in them share it.
_MODE_PARAMS = ("mode", "dtype", "compile_backend")


def _shared(ctx: CaseContext, p: dict[str, Any], dtype: str, state: dict[str, Any]) -> Shared:
    """The CPU runs this case shares with the other cases of its model in the run
    (`cache.py`): the float64 reference (every case of the model computes it) and the
    plain CPU run at a dtype (the eager case's device run on the CPU, or its CPU baseline
    elsewhere; the compiled case's CPU baseline). Written only when another planned case needs
    it (`users`); nothing is shared outside a stored run."""
    source = {"synthetic": "synthetic", "factory": "factory"}.get(str(p.get("source")), "hf")
    dtypes = ["fp32", "bf16"] if ctx.preset == "full" else ["fp32"]
    pairs = mode_pairs(ctx.preset, sorted({*dtypes, dtype}), ctx.options)[source]

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
            out.diagnostics["modality"] = declared_modality(p)
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
    routed_eager = routed(subject.traits) and mode == "eager"
    if routed_eager:
        # Routed eager: the device run first, recording its routing, then reference and
        # baselines replaying it (`pin`); the unpinned ones below only when pinning does not
        # work, against a plain device run (timed under the recorder where pinned).
        recorder = Routing() if pinnable(kind, dtype) else None
        dev = _eager(subject, data, spec, phase, out, None, recorder)
        if recorder is not None:
            with phase("routing"):
                pinned = pin(
                    subject, data, spec, dev, recorder, kind, dtype, out, pool_within=BORDERLINE
                )
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
            compile_error = e
            failed_in = e.phase if isinstance(e, _CompileFailed) else ctx.current_phase
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
                base, why = independent(subject, data, dtype, steps)
        else:
            with phase("cpu_same_dtype"):
                low = shared.train(subject.model, data, Spec("cpu", dtype, steps), "cpu baseline")
            base = Baseline("cpu", (low,), dtype, routed(subject.traits))
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
        problems, verdicts = check(subject, ref, dev, base, dtype, out)
    replay = recorder.log if pinned is not None else None
    if problems and base.kind == "independent" and not dev.untied:
        checked = (ref, dev, base)
        base, problems = escalated(subject, data, steps, checked, out, phase, verdicts, replay)
        out.diagnostics["same_dtype_baseline"] = base.describe()
    elif (
        problems
        and not dev.untied
        and borderline(
            out,
            verdicts,
            zero_allowed=True,
            baseline_zeros=base.exact_zeros(ref.named(after_step=False)),
        )
    ):
        checked = (ref, dev, base)
        base, problems, verdicts = pooled(
            subject, data, steps, checked, out, phase, verdicts, replay, problems
        )
    if problems and out.diagnostics["tensors_failing"] and not dev.untied:
        checked = (ref, dev, base)
        problems, unsettled = kink_flips(
            subject, data, checked, dtype, out, phase, replay, problems
        )
        if problems and unsettled and base.kind == "cpu":
            # Near-kink decisions that one flip at a time does not settle: independently
            # rounded runs take them either way as rounding does (depth_pro on a PrivateUse1
            # device, its LayerNorm decomposed, took several of its head's).
            out.diagnostics["pooled_for"] = "near-kink decisions"
            base, problems, verdicts = pooled(
                subject, data, steps, checked, out, phase, verdicts, replay, problems
            )
    if flipped is not None and flipped.beyond_noise:
        problems.append(
            f"top-k routing: {flipped.beyond_noise} of {flipped.flipped} decisions that differ "
            f"from float64 are not near-ties (worst {flipped.worst_ratio:.3g}x what the score "
            "noise allows)"
        )
    if problems and mode == "compile" and not dev.untied:
        problems += _bisected(subject, data, spec, (ref, dev, base), ctx, out, phase)
    if dev.broken_ties:  # the case's failure, named first
        problems = _tie_problems(dev, problems, ctx.device, out)
    if ctx.options.get("baseline"):
        with phase("baseline"):
            problems += _against_baseline(str(ctx.options["baseline"]), case, out)
    if problems:
        out.status, out.diagnostics["error"] = "fail_numerics", " | ".join(problems)
    return out
