"""The parity verdict: a run's tensors and loss curve against the float64 reference, each within
the noise its honest baseline (`noise.Baseline`) measures, and the worst of them named.

`judge` compares tensors (`probes/numerics.judge_many`, the rule of docs/numerics.md); `check` judges a whole
run: the loss, the logits and every gradient before the step, every parameter after the optimizer
step (against float64 AdamW from the device's own gradients, within the CPU's fp32 AdamW's
distance from it), and the loss curve step by step.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import torch

from trainready.core.case import Outcome
from trainready.device import torch_dtype
from trainready.probes.numerics import (
    Verdict,
    curve_tolerance,
    judge_many,
    loss_curve_compare,
    noise_rmse,
    over_allowance,
)
from trainready.suites.parity.engine import Trace, optimizer_step_baseline, optimizer_step_reference
from trainready.suites.parity.models import Subject
from trainready.suites.parity.noise import Baseline

WORST_SHOWN = 3
ZEROED_SHOWN = 5  # the zeroed tensors a problem line names
# A failure every tensor of which misses its bound by at most this much is borderline: more
# honest runs may settle it (`rejudge.escalated`, `rejudge.pooled`).
BORDERLINE = 2.0


def worst(verdicts: dict[str, Verdict], n: int) -> list[dict[str, Any]]:
    ranked = sorted(verdicts.items(), key=lambda kv: (kv[1].ok, -over_allowance(kv[1])))
    return [
        {"tensor": name, "ok": v.ok, "rule": v.rule, "ratio": over_allowance(v), **_short(v)}
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
    if math.isinf(entry["ratio"]):  # nothing was allowed: reference and baseline exactly 0
        return (
            f"{entry['tensor']} rmse {entry['rmse']:.3g} where the reference and the baseline are "
            "exactly 0"
        )
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


def check(
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
    (the plain reference, when `ref` is one with a decision flipped: `kink_flips`)."""
    pre, dev_pre = ref.named(after_step=False), dev.named(after_step=False)
    noise = base.noise((noise_ref or ref).named(after_step=False))
    _, verdicts = judge(pre, dev_pre, noise, dtype, base.rule)
    zeros = zeroed(pre, dev_pre, verdicts)
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
    shown = worst(verdicts, WORST_SHOWN)
    out.diagnostics |= {
        "worst": shown,
        "tensors_compared": len(verdicts),
        "tensors_failing": sum(not v.ok for v in verdicts.values()),
        "curve": {**curve, "reference": ref.curve, "device": dev.curve},
    }
    out.metrics |= {
        "loss": float(dev.loss),
        "worst_ratio": shown[0]["ratio"] if shown else 0.0,
        "curve_max_rel_dev": float(curve["max_rel_dev"]),
        "curve_rel_tol": float(curve["rel_tol"]),
        "first_step_s": dev.first_step_s,
        "step_s": dev.step_s,
    }
    problems = []
    if zeros:  # the cause of the ratios below: named first, and as what it is
        out.diagnostics["zeroed"] = zeros
        out.metrics["zeroed_tensors"] = float(len(zeros))
        more = f" and {len(zeros) - ZEROED_SHOWN} more" if len(zeros) > ZEROED_SHOWN else ""
        problems.append(
            f"{len(zeros)} tensors exactly zero on the device where the reference's are not: "
            f"{', '.join(zeros[:ZEROED_SHOWN])}{more}"
        )
    failing = [w for w in shown if not w["ok"]]
    if failing:
        problems.append("; ".join(describe(w) for w in failing))
    if not curve["ok"]:
        problems.append(
            f"loss curve diverges from the reference at step {curve['first_diverging_step']}"
            f" (max rel dev {curve['max_rel_dev']:.3g} > {curve['rel_tol']:.3g})"
        )
    return problems, verdicts


def zeroed(
    ref: dict[str, torch.Tensor], dev: dict[str, torch.Tensor], verdicts: dict[str, Verdict]
) -> list[str]:
    """The failing tensors the device returned as exactly zero where the reference's are not: a
    gradient that never arrived (a backward cut off, a kernel that wrote nothing), which no
    rounding makes. Only failing ones: a reference that is rounding residue where the device
    returns an exact 0 (float64 residue of a gradient zero in exact arithmetic) is within its
    noise and passes."""
    return sorted(
        n
        for n, v in verdicts.items()
        if not v.ok
        and n in dev
        and ref[n].shape == dev[n].shape
        and not bool(dev[n].any())
        and bool(ref[n].any())
    )


def borderline(
    out: Outcome,
    verdicts: dict[str, Verdict],
    zero_allowed: bool = False,
    baseline_zeros: Collection[str] = (),
) -> bool:
    """Whether the case failed on its loss curve alone, or on tensors that all miss their bound
    by at most BORDERLINE (what more honest runs can settle). With `zero_allowed`, a tensor
    allowed nothing counts too (the reference and a single baseline run both exactly 0 there),
    and so does a tensor in `baseline_zeros`, which the single baseline run has exactly 0 where
    float64 leaves its residue (a gradient zero in exact arithmetic, such as an attention key
    bias's, that the CPU's kernel cancels exactly): one run's exact zero says nothing of the
    residue another honest order of the same sums leaves."""

    def settles(name: str, v: Verdict) -> bool:
        if v.threshold is None:  # a shape or non-finite mismatch: no run settles it
            return False
        if zero_allowed and (v.threshold == 0 or name in baseline_zeros):
            return True
        return over_allowance(v) <= BORDERLINE

    failing = {n: v for n, v in verdicts.items() if not v.ok}
    return all(settles(n, v) for n, v in failing.items()) and (
        bool(failing) or not out.diagnostics["curve"]["ok"]
    )
