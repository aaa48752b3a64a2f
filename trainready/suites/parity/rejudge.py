"""A failing parity case judged again, with what the first judgement does not see.

`escalated` (CPU eager cases, whose baseline is independently rounded runs): the float64
reference's own rounding noise on the failing tensors, independent runs that round elementwise
ops too, more seeds where every failure is borderline, and, where something still fails, the
float64 code path rounded to the dtype at every op (`probes/rounded.py`: what every run at the
dtype shares, which the runs' spread cannot see). `pooled` (cases judged against the CPU's one
eager run: compiled, or on a device, where every failure is borderline, or where near-kink
decisions are more than `kink_flips` settles): that run's distance from float64 pooled with
independently rounded runs' distances. `kink_flips` (any case whose tensors fail): the
reference with one near-kink ReLU decision flipped, a decision an honest run at the dtype may
take either way (`probes/kinks.py`). Each returns the problems left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from trainready.core.case import Outcome
from trainready.probes.kinks import Kink, flipping, name_kinks, near_kinks
from trainready.probes.numerics import Verdict
from trainready.probes.rounded import ROUNDED_TO
from trainready.suites.parity.engine import Data, Spec, Trace, first_step
from trainready.suites.parity.models import Subject
from trainready.suites.parity.noise import (
    INDEPENDENT_SEEDS,
    Baseline,
    independent,
    more_runs,
    reference_noise,
    replaying,
    rounded,
)
from trainready.suites.parity.verdicts import borderline, check

# Kinks (`kink_flips`): elements of a ReLU-family input within this share of the input's rms
# from a kink are decisions an honest run at the dtype may take either way (fp32 rounding of
# activations of rms ~1 is ~1e-7; the flips measured: 7.9e-7 (hgnet_v2), 8.0e-7 (mobilenet_v1)).
# bf16/fp16 put too many elements that near to try them one by one.
KINK_REL_TOL = {"fp32": 1e-5}
MAX_KINKS = 8  # the nearest this many are tried, each one float64 first step; none if more
# The rounded float64 run (`_with_rounded`): a dispatch mode over every op of a float64 run costs
# 1.6-1.85 times the reference's own time (HF jev, wav2vec2-bert, fun_asr_nano); run only where
# that fits the budget.
ROUNDED_COST = 2.0
ROUNDED_BUDGET_S = 120.0


def escalated(
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
    times the cost, so only here); where every failure is still borderline (`borderline`),
    `MORE_SEEDS` more such runs; and where anything still fails, the rounded float64 run
    (`_with_rounded`). Every run follows the device's routing where the case's runs were pinned
    to it (`replay`). (The baseline and the problems found.)"""
    ref, dev, base = checked
    noise = reference_noise(subject, data, ref, verdicts, phase, replay)
    if noise:
        out.diagnostics["reference_noise"] = {n: float(v) for n, v in noise.items()}
    base = replace(base, reference_noise=base.reference_noise | noise)
    if base.dtype == "fp32":
        with phase("independent_full"):
            full, why = independent(
                subject, data, base.dtype, steps, INDEPENDENT_SEEDS, replay, pointwise=True
            )
        if full is not None:
            base = replace(full, reference_noise=base.reference_noise)
            out.diagnostics["independent_rounding"] = full.counts
        else:
            out.diagnostics["independent_full"] = why
    with phase("check"):
        problems, verdicts = check(subject, ref, dev, base, base.dtype, out)
    if problems and borderline(out, verdicts):
        base = more_runs(subject, data, steps, base, out, phase, replay)
        with phase("check"):
            problems, verdicts = check(subject, ref, dev, base, base.dtype, out)
    if problems and base.dtype in ROUNDED_TO:
        base = _with_rounded(subject, data, steps, (ref, base), out, phase, replay)
        if base.rounded is not None:
            with phase("check"):
                problems, _ = check(subject, ref, dev, base, base.dtype, out)
    return base, problems


def _with_rounded(
    subject: Subject,
    data: Data,
    steps: int,
    judged_by: tuple[Trace, Baseline],
    out: Outcome,
    phase: Callable,
    replay: list[torch.Tensor] | None,
) -> Baseline:
    """`base` with the float64 code path rounded to its dtype at every op (`rounded`), where
    that run fits ROUNDED_BUDGET_S (estimated at ROUNDED_COST times the reference's own time);
    recorded in `rounded_run`."""
    ref, base = judged_by
    estimate = ROUNDED_COST * (ref.first_step_s + max(0, steps - 1) * ref.step_s)
    if estimate > ROUNDED_BUDGET_S:
        out.diagnostics["rounded_run"] = (
            f"not run: about {estimate:.0f} s (budget {ROUNDED_BUDGET_S:.0f} s)"
        )
        return base
    with phase("rounded"):
        run, why = rounded(subject, data, base.dtype, steps, replay)
    out.diagnostics["rounded_run"] = "run" if run is not None else why
    return replace(base, rounded=run) if run is not None else base


def pooled(
    subject: Subject,
    data: Data,
    steps: int,
    checked: tuple[Trace, Trace, Baseline],
    out: Outcome,
    phase: Callable,
    verdicts: dict[str, Verdict],
    replay: list[torch.Tensor] | None,
    problems: list[str],
) -> tuple[Baseline, list[str], dict[str, Verdict]]:
    """A case judged against the CPU's one eager run (compiled, or on a device) judged again
    against a baseline of more samples: that run's distance from float64 is one sample of an
    honest run's, and so is each independently rounded CPU run's (two, then `MORE_SEEDS` where
    they fit the budget); the noise is their rms, with the reference's own rounding noise on the
    failing tensors added. A lucky run (one that lands nearer float64 than honest runs do) no
    longer sets the bar. The caller pools only what more honest runs can settle: failures that
    are all borderline (`borderline`), or a model whose near-kink decisions the one-by-one
    flips do not settle (`kink_flips`), which independently rounded runs take either way as
    rounding does. (The baseline, the problems and the verdicts: the ones given where no
    independently rounded run can be made, why in `pooled_baseline`.)"""
    ref, dev, base = checked
    noise = reference_noise(subject, data, ref, verdicts, phase, replay)
    if noise:
        out.diagnostics["reference_noise"] = {n: float(v) for n, v in noise.items()}
    with phase("independent"):
        more, why = independent(subject, data, base.dtype, steps, INDEPENDENT_SEEDS, replay)
    if more is None:
        out.diagnostics["pooled_baseline"] = f"none: {why}"
        return base, problems, verdicts
    more = more_runs(subject, data, steps, more, out, phase, replay, pointwise=False)
    out.diagnostics["independent_rounding"] = more.counts
    out.diagnostics["pooled_baseline"] = 1 + len(more.runs)
    base = Baseline("pooled", base.runs + more.runs, base.dtype, base.routed, more.counts, noise)
    out.diagnostics["same_dtype_baseline"] = base.describe()
    with phase("check"):
        problems, verdicts = check(subject, ref, dev, base, base.dtype, out)
    return base, problems, verdicts


def kink_flips(
    subject: Subject,
    data: Data,
    checked: tuple[Trace, Trace, Baseline],
    dtype: str,
    out: Outcome,
    phase: Callable,
    replay: list[torch.Tensor] | None,
    problems: list[str],
) -> tuple[list[str], bool]:
    """A case whose tensors failed, judged again against the reference with one decision of a
    ReLU-family module flipped, for each element the reference's first step puts within
    KINK_REL_TOL of its input's rms from a kink (the nearest MAX_KINKS; none tried where there
    are more): honest runs may take such a decision either way (`probes/kinks.py`). The noise
    stays the baselines' distance from the plain reference. (The problems left, [] where one
    flip explains the device's run, named in `kinks.flipped`; and whether near-kink decisions
    were found that this did not settle: more than MAX_KINKS, or none alone explains the run,
    which may have taken several.)"""
    ref, dev, base = checked
    rel_tol = KINK_REL_TOL.get(dtype)
    if rel_tol is None or not name_kinks(subject.model):
        return problems, False
    found: list[Kink] = []
    reference = Spec("cpu", "fp64", 1)
    with phase("kinks"), near_kinks(rel_tol, found, MAX_KINKS), replaying(replay):
        first_step(subject.model, data, reference)
    report: dict[str, Any] = {"near": len(found), "tried": 0}
    out.diagnostics["kinks"] = report
    if not found or len(found) > MAX_KINKS:
        if found:
            report["near"] = f"more than {MAX_KINKS}: none tried"
        return problems, bool(found)
    for kink in found:
        with phase("kinks"), flipping(kink), replaying(replay):
            flipped = first_step(subject.model, data, reference)
        report["tried"] += 1
        one = replace(
            ref, loss=flipped.loss, logits=flipped.logits, grads=flipped.grads, aux=flipped.aux
        )
        with phase("check"):
            left, _ = check(subject, one, dev, base, dtype, out, noise_ref=ref)
        if not left:
            report["flipped"] = kink.to_json()
            return [], False
    with phase("check"):  # the diagnostics of the plain judgement again
        left, _ = check(subject, ref, dev, base, dtype, out)
    return left, True
