"""Numerics probe: how far a device result is from a float64 CPU reference, and is that acceptable.

The rule (`judge`, `judge_many`; docs/numerics.md says why, and what was measured):

    pass  iff  rmse(device, ref64) <= ALLOWANCE[dtype] * sampling(n) * noise + u(dtype) * rms(ref64)

- `noise` is the rms error an honest computation at the same dtype makes on this very tensor,
  measured, never assumed: on a device, the CPU's same-dtype run's distance from float64
  (`noise_rmse`, rule "noise_vs_cpu"); on the CPU itself, the disagreement of two runs whose
  roundings are independent (`spread_noise`, rule "noise_vs_independent", see probes/perturb.py);
  for the optimizer step, the CPU's fp32 AdamW from the same gradients.
- `ALLOWANCE` (2 in bf16/fp16, 4 in fp32) multiplies the measured noise only; the floor is
  added, never multiplied.
- `sampling(n)`: an rms over n entries is a sample, and so is its honest counterpart; the
  allowance is widened by exp(3.5 / sqrt(n)) (x1.06 at 4096 entries, x1.55 at 64).
- The floor is relative: u(dtype) (unit roundoff: 2^-24 fp32, 2^-8 bf16, 2^-11 fp16) times the
  tensor's own rms, one rounding of the tensor -- so a gradient with an rms of 7e-5 gets a floor
  of 4e-12 in fp32, not an absolute 1e-6. Below the dtype's normal range one rounding loses
  more than u (a subnormal's fewer bits; zero below the smallest subnormal): there the floor is
  what rounding the reference once to the dtype really loses (`rounding_floor`).
- Tensors of fewer than SMALL_NUMEL elements estimate their own noise from a handful of values:
  their noise is at least the case's median relative noise times their rms (`pooled`).
- No allclose shortcut: an elementwise rtol of 1.6e-2 (bf16) passes a 1% error in every entry.

Before the rule: a shape mismatch fails (`"shape"`), and so does a non-finite value where the
reference has a finite one, or any other difference in the non-finite pattern (`"nonfinite"`).

Loss curves: `curve_tolerance` turns the per-step relative deviation of honest runs (the CPU's
same-dtype curve, or the independent runs' spread) into one relative tolerance,
CURVE_ALLOWANCE times the largest of them plus CURVE_FLOOR; `loss_curve_compare` applies it.

Every suite that judges numerics uses this rule (parity, matmul's spot-check, flex, dist); each
says which honest computation measures its noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trainready.core.config import DTYPES, check_choice

# Relative errors are taken against max(|ref|, REL_FLOOR * rms(ref)): entries far below the
# tensor's typical magnitude (cancellations in a dot product) would otherwise dominate max_rel.
REL_FLOOR = 0.1
_TINY = 1e-30


@dataclass
class Verdict:
    """The outcome of one comparison: `rule` names what decided it; `threshold` is the RMSE bound
    the device had to stay under (only for the rmse rules)."""

    ok: bool
    rule: str
    errors: dict[str, Any] = field(default_factory=dict)
    threshold: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "rule": self.rule, "threshold": self.threshold, **self.errors}


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(device="cpu", dtype=torch.float64)


def nonfinite_mismatch(ref: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
    """Positions where either side is non-finite and the two are not the same inf or both NaN."""
    either = ~(torch.isfinite(ref) & torch.isfinite(actual))
    same = (ref == actual) | (torch.isnan(ref) & torch.isnan(actual))
    return either & ~same


def _rms(t: torch.Tensor) -> float:
    return math.sqrt(torch.mean(torch.square(t)).item()) if t.numel() else 0.0


def _cosine(ref: torch.Tensor, actual: torch.Tensor) -> float:
    ref_norm, actual_norm = ref.norm().item(), actual.norm().item()
    if ref_norm == 0.0 or actual_norm == 0.0:
        # Two all-zero tensors agree perfectly; one all-zero tensor has no direction to agree with.
        return 1.0 if ref_norm == actual_norm else 0.0
    return torch.dot(ref, actual).item() / (ref_norm * actual_norm)


def _errors(ref: torch.Tensor, actual: torch.Tensor) -> dict[str, Any]:
    """Error measures of float64 CPU tensors of equal shape, over the positions finite in both."""
    finite = torch.isfinite(ref) & torch.isfinite(actual)
    r, a = ref[finite], actual[finite]
    diff = (a - r).abs()
    ref_rms = _rms(r)
    denom = torch.clamp(r.abs(), min=max(REL_FLOOR * ref_rms, _TINY))
    return {
        "shape_mismatch": False,
        "numel": ref.numel(),
        "nonfinite": int(nonfinite_mismatch(ref, actual).sum().item()),
        "max_abs": diff.max().item() if diff.numel() else 0.0,
        "max_rel": (diff / denom).max().item() if diff.numel() else 0.0,
        "rmse": _rms(a - r),
        "cosine": _cosine(r, a),
        "ref_rms": ref_rms,
    }


def _shape_errors(ref64: torch.Tensor, actual: torch.Tensor) -> dict[str, Any] | None:
    if tuple(ref64.shape) == tuple(actual.shape):
        return None
    return {
        "shape_mismatch": True,
        "ref_shape": list(ref64.shape),
        "actual_shape": list(actual.shape),
    }


def tensor_errors(ref64: torch.Tensor, actual: torch.Tensor) -> dict[str, Any]:
    """max_abs, max_rel (guarded denominators), rmse, cosine of `actual` against `ref64`, plus
    `nonfinite` (positions whose non-finite pattern differs) and `shape_mismatch`."""
    return _shape_errors(ref64, actual) or _errors(_f64(ref64), _f64(actual))


def _measure(
    ref64: torch.Tensor, device_out: torch.Tensor, dtype: str
) -> tuple[Verdict | None, torch.Tensor, torch.Tensor, dict[str, Any]]:
    """What every rule starts from: (a failing verdict for a shape or non-finite mismatch, else
    None; the reference and the result in float64; their errors)."""
    check_choice("dtype", dtype, DTYPES)
    shape_errors = _shape_errors(ref64, device_out)
    if shape_errors:
        return Verdict(False, "shape", shape_errors), ref64, device_out, shape_errors
    ref, actual = _f64(ref64), _f64(device_out)
    errors = _errors(ref, actual)
    if errors["nonfinite"]:
        return Verdict(False, "nonfinite", errors), ref, actual, errors
    return None, ref, actual, errors


def over_allowance(v: Verdict) -> float:
    """How far over its allowance a tensor is: its rmse over the rule's threshold; where nothing
    was allowed (no noise and no floor: a reference and a baseline both exactly 0), 0 if it is
    exact and inf if not; inf for a shape or non-finite mismatch (no threshold)."""
    if v.threshold is None:
        return math.inf
    if not v.threshold:
        return math.inf if v.errors.get("rmse") else 0.0
    return v.errors["rmse"] / v.threshold


def _severity(v: Verdict) -> tuple[bool, float]:
    """Sort key, worst last: failures after passes, then the share of the allowed error used."""
    return (not v.ok, over_allowance(v))


def _rel_dev(ref: float, dev: float) -> float:
    if not math.isfinite(ref) or not math.isfinite(dev):
        same = ref == dev or (math.isnan(ref) and math.isnan(dev))
        return 0.0 if same else math.inf
    return abs(dev - ref) / max(abs(ref), _TINY)


def _curve_deviations(ref_losses: Sequence[float], dev_losses: Sequence[float]) -> list[float]:
    """Each step's relative deviation of `dev_losses` from `ref_losses`; inf where either lacks
    the step."""
    ref, dev = [float(x) for x in ref_losses], [float(x) for x in dev_losses]
    return [
        _rel_dev(ref[i], dev[i]) if i < len(ref) and i < len(dev) else math.inf
        for i in range(max(len(ref), len(dev)))
    ]


def accepted_losses(
    ref_losses: Sequence[float], dev_losses: Sequence[float], rel_tol: float
) -> list[bool]:
    """Per step of `dev_losses`, whether the loss-curve check accepts its loss: finite, and
    within `rel_tol` of the reference curve's loss at that step (`loss_curve_compare`'s rule,
    step by step). Pass a curve as its own reference for the finiteness check alone."""
    devs = _curve_deviations(ref_losses, dev_losses)
    return [math.isfinite(float(loss)) and devs[i] <= rel_tol for i, loss in enumerate(dev_losses)]


def loss_curve_compare(
    ref_losses: Sequence[float], dev_losses: Sequence[float], rel_tol: float
) -> dict[str, Any]:
    """Step-by-step relative deviation of a loss curve from a reference curve (steps 0-based).

    A step missing from either curve counts as diverging there, so a run that stopped early fails.
    """
    devs = _curve_deviations(ref_losses, dev_losses)
    first = next((i for i, d in enumerate(devs) if d > rel_tol), None)
    worst = max(range(len(devs)), key=devs.__getitem__, default=None)
    return {
        "ok": first is None,
        "steps": len(devs),
        "rel_tol": rel_tol,
        "first_diverging_step": first,
        "max_rel_dev": devs[worst] if worst is not None else 0.0,
        "max_rel_dev_step": worst,
    }


# --- the rule: noise measured per tensor, a relative floor ----------------------------------------

# Unit roundoff (half an ulp of 1): the relative error of one rounding to nearest, at most.
UNIT_ROUNDOFF: dict[str, float] = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "bf16": 2.0**-8,
    "fp16": 2.0**-11,
}
# How many times an honest same-dtype computation's error a result may reach. bf16/fp16: 2, not the
# harness's 3, so that a 2% error in a bf16 gradient fails; fp32: 4, because what every fp32 run
# rounds alike escapes the CPU's own independently rounded runs (docs/numerics.md, "The rule").
ALLOWANCE: dict[str, float] = {"fp64": 4.0, "fp32": 4.0, "bf16": 2.0, "fp16": 2.0}
SMALL_NUMEL = 64  # fewer entries: the tensor's own noise estimate is pooled with the case's
# An rms over n entries is a sample: two honest runs' rms errors differ by a factor whose log has
# a standard deviation of about 2 / sqrt(n) (F(n, n) for independent entries). The allowance is
# widened by exp(SAMPLING_Z / sqrt(n)), 3.5 such deviations: x1.06 at 4096 entries, x1.55 at 64
# (a norm's scale), x5.8 at 4, x33 for a scalar (the loss, which the loss curve judges instead).
SAMPLING_Z = 3.5
NOISE_RULES = (
    "noise_vs_cpu",
    "noise_vs_cpu_pooled",  # the CPU's run and independently rounded ones (a borderline fail)
    "noise_vs_independent",
    "noise_vs_independent_routed",
    "noise_vs_cpu_optimizer",
    "noise_vs_single_process",  # dist: the same computation in one process at the same dtype
)
# Loss curves: one relative tolerance from the largest per-step deviation of honest runs. A curve's
# deviation is a chaotic divergence that neighbouring steps share, so its largest over 20 steps is
# about one sample, not twenty: hence 10 (docs/numerics.md, "Loss curves"). The floor is 16
# roundings of an fp32 loss (every case computes its loss in at least fp32), for curves that agree
# to the last bit.
CURVE_ALLOWANCE = 10.0
CURVE_FLOOR = 2.0**-20


# The dtype whose range bounds a case dtype's results (fp64: none below its own).
_RANGE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def rounding_floor(ref: torch.Tensor, dtype: str, ref_rms: float) -> float:
    """The error of rounding the reference once to `dtype`: u(dtype) times its rms, or, where
    entries lie below the dtype's normal range (smallest normal: 1.2e-38 in fp32 and bf16,
    6.1e-5 in fp16), the rms of what that rounding really loses there, whichever is larger. A
    subnormal keeps fewer bits than u promises, and a value below the smallest subnormal
    (1.4e-45 in fp32) rounds to zero: no computation at the dtype can return it (HF
    efficientnet's stem gradients, rms 1e-97 in float64: exactly 0 in every fp32 run)."""
    floor = UNIT_ROUNDOFF[dtype] * ref_rms
    low = _RANGE.get(dtype)
    if low is None or not ref.numel():
        return floor
    finite = ref[torch.isfinite(ref)]
    small = finite.abs() < torch.finfo(low).tiny
    if not small.any():
        return floor
    # the loss where it exceeds u's promise, as an rms over the whole tensor (a tensor that
    # rounds to zero throughout loses exactly its own rms, computed as rmse computes it)
    lost = torch.where(small, finite - finite.to(low).to(finite.dtype), 0.0)
    return max(floor, _rms(lost))


def noise_rmse(ref64: torch.Tensor, baseline: torch.Tensor) -> float:
    """The rms error of an honest same-dtype result `baseline` against the reference; inf where
    it went non-finite and the reference did not (then no finite result can be judged worse)."""
    ref, base = _f64(ref64), _f64(baseline)
    if tuple(ref.shape) != tuple(base.shape):
        raise ValueError(f"baseline shape {list(base.shape)} != reference {list(ref.shape)}")
    if nonfinite_mismatch(ref, base).any():
        return math.inf
    finite = torch.isfinite(ref)
    return _rms(base[finite] - ref[finite])


def spread_noise(ref64: torch.Tensor, runs: Sequence[torch.Tensor], kappa2: float) -> float:
    """The rms rounding noise of a plain run, from K >= 2 runs whose roundings are independent of
    it and of each other, each with kappa2 times a plain rounding's variance (probes/perturb.py):
    the square root of the entries' mean sample variance over the runs, over kappa2 -- for two
    runs, rmse(first - second) / sqrt(2 kappa2). What the runs share (a systematic error)
    cancels."""
    ref = _f64(ref64)
    xs = [_f64(r) for r in runs]
    if any(nonfinite_mismatch(ref, x).any() for x in xs):
        return math.inf
    finite = torch.isfinite(ref)
    var = torch.stack([x[finite] for x in xs]).var(dim=0, correction=1)
    return math.sqrt(float(var.mean()) / kappa2) if var.numel() else 0.0


def sampling(numel: int) -> float:
    """The allowance's widening for an rms over `numel` entries (SAMPLING_Z)."""
    return math.exp(SAMPLING_Z / math.sqrt(max(numel, 1)))


def judge(
    ref64: torch.Tensor,
    device_out: torch.Tensor,
    noise: float,
    dtype: str,
    rule: str = "noise_vs_cpu",
    allowance: float | None = None,
) -> Verdict:
    """The verdict on `device_out` against the float64 reference, given the measured `noise`
    (rms error of an honest computation at `dtype` on this tensor): the module docstring's rule,
    the allowance widened by `sampling(numel)`."""
    failed, ref, actual, errors = _measure(ref64, device_out, dtype)
    if failed is not None:
        return failed
    floor = rounding_floor(ref, dtype, errors["ref_rms"])
    widen = sampling(int(torch.isfinite(ref).sum()))
    allowance = ALLOWANCE[dtype] if allowance is None else allowance
    threshold = allowance * widen * noise + floor
    errors |= {"noise_rmse": noise, "floor": floor, "sampling": widen}
    return Verdict(errors["rmse"] <= threshold, rule, errors, threshold)


def _pooled(named: dict[str, tuple[torch.Tensor, torch.Tensor, float]]) -> float | None:
    """The median relative noise (noise / rms of the reference) of the tensors with at least
    SMALL_NUMEL entries, or None when there are none."""
    rel = []
    for ref, _, noise in named.values():
        if ref.numel() < SMALL_NUMEL or not math.isfinite(noise):
            continue
        scale = _rms(_f64(ref)[torch.isfinite(_f64(ref))])
        if scale > 0:
            rel.append(noise / scale)
    if not rel:
        return None
    rel.sort()
    return rel[len(rel) // 2]


def judge_many(
    named: dict[str, tuple[torch.Tensor, torch.Tensor, float]],
    dtype: str,
    rule: str = "noise_vs_cpu",
    allowance: float | None = None,
) -> tuple[bool, str | None, dict[str, Verdict]]:
    """`judge` for several tensors, `{name: (ref64, device, noise)}` -> (all passed, the worst
    tensor's name or None, verdict per name). A tensor of fewer than SMALL_NUMEL entries is
    judged against at least the pooled relative noise times its own rms (`noise_pooled` set)."""
    pooled = _pooled(named)
    verdicts = {}
    for name, (ref, dev, noise) in named.items():
        lifted = False
        if pooled is not None and ref.numel() < SMALL_NUMEL:
            finite = _f64(ref)[torch.isfinite(_f64(ref))]
            floor_noise = pooled * _rms(finite)
            if floor_noise > noise:
                noise, lifted = floor_noise, True
        v = judge(ref, dev, noise, dtype, rule, allowance)
        if lifted and v.threshold is not None:
            v.errors["noise_pooled"] = True
        verdicts[name] = v
    worst = max(verdicts, key=lambda name: _severity(verdicts[name]), default=None)
    return all(v.ok for v in verdicts.values()), worst, verdicts


def curve_noise(ref_losses: Sequence[float], honest: Sequence[float]) -> list[float]:
    """Per step, the relative deviation of an honest same-dtype curve from the reference curve
    (inf where one of them is not finite, or a step is missing)."""
    out = []
    for i in range(len(ref_losses)):
        r = float(ref_losses[i])
        h = float(honest[i]) if i < len(honest) else math.nan
        if not (math.isfinite(r) and math.isfinite(h)):
            out.append(math.inf)
        else:
            out.append(abs(h - r) / max(abs(r), _TINY))
    return out


def curve_tolerance(noise: Sequence[float], allowance: float = CURVE_ALLOWANCE) -> float:
    """The relative per-step tolerance of a loss curve: `allowance` times the largest honest
    per-step deviation, plus CURVE_FLOOR (inf if an honest curve was not finite)."""
    worst = max((float(x) for x in noise), default=0.0)
    return allowance * worst + CURVE_FLOOR if math.isfinite(worst) else math.inf
