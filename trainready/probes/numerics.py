"""Numerics probe: how far a device result is from a float64 CPU reference, and is that acceptable.

The verdict follows the rule PyTorch's own benchmark harness uses (`torch._dynamo.utils.same`, its
`fp64_ref` branch, as of torch 2.13):

1. pass if `allclose(device, ref64)` at the dtype's tolerance (`DTYPE_TOL`);
2. else pass if `rmse(ref64, device) <= m * rmse(ref64, baseline) + atol / 10`, with m = 2 for
   fp32/fp64 and 3 for bf16/fp16 (the harness raises m for half types to avoid false alarms):
   the device may be at most m times as wrong as the CPU at the same dtype.

The baseline is `cpu_lowp`, the same computation on the CPU in the case dtype (rule
`"rmse_vs_cpu"`). Without one -- notably when the device *is* the CPU, where its own result would
be a baseline that always passes -- the baseline is the reference rounded to the dtype, the error
of the best result that dtype can hold (rule `"rmse_vs_rounded"`).

Where this departs from same(): allclose is taken against the float64 reference (same() uses the
eager result in the same dtype); the tolerance is torch.testing's per dtype rather than one `tol`
used as both atol and rtol (its atol plays `tol` in the slack term); and there is no larger
multiplier for small tensors.

Before either rule: a shape mismatch fails (`"shape"`), and so does a non-finite value where the
reference has a finite one, or any other difference in the non-finite pattern (`"nonfinite"`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from trainready.config import DTYPES, check_choice
from trainready.device import torch_dtype


class Tol(NamedTuple):
    atol: float
    rtol: float


# torch.testing.assert_close's defaults per dtype (torch/testing/_comparison.py _DTYPE_PRECISIONS).
DTYPE_TOL: dict[str, Tol] = {
    "fp64": Tol(atol=1e-7, rtol=1e-7),
    "fp32": Tol(atol=1e-5, rtol=1.3e-6),
    "bf16": Tol(atol=1e-5, rtol=1.6e-2),
    "fp16": Tol(atol=1e-5, rtol=1e-3),
}

# How many times the CPU's error at the same dtype the device may reach (the `multiplier` of same()).
MULTIPLIER: dict[str, float] = {"fp64": 2.0, "fp32": 2.0, "bf16": 3.0, "fp16": 3.0}

# Relative errors are taken against max(|ref|, REL_FLOOR * rms(ref)): entries far below the
# tensor's typical magnitude (cancellations in a dot product) would otherwise dominate max_rel.
REL_FLOOR = 0.1
_TINY = 1e-30

RULES = ("allclose", "rmse_vs_cpu", "rmse_vs_rounded", "nonfinite", "shape")


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


def _nonfinite_mismatch(ref: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
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
        "nonfinite": int(_nonfinite_mismatch(ref, actual).sum().item()),
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


def _tol_ratio(ref: torch.Tensor, actual: torch.Tensor, tol: Tol) -> float:
    """max |a - r| / (atol + rtol |r|): allclose holds exactly when this is <= 1."""
    finite = torch.isfinite(ref) & torch.isfinite(actual)
    r, a = ref[finite], actual[finite]
    if not r.numel():
        return 0.0
    return ((a - r).abs() / (tol.atol + tol.rtol * r.abs())).max().item()


def _baseline(ref: torch.Tensor, cpu_lowp: torch.Tensor | None, dtype: str) -> tuple[float, str]:
    """RMSE of the same-dtype baseline against the reference, and the rule it stands for."""
    if cpu_lowp is None:
        finite = ref[torch.isfinite(ref)]
        rounded = finite.to(torch_dtype(dtype)).double()
        # A value past the dtype's range rounds to inf: no result in that dtype can do better.
        return (_rms(rounded - finite) if rounded.isfinite().all() else math.inf), "rmse_vs_rounded"
    if tuple(cpu_lowp.shape) != tuple(ref.shape):
        raise ValueError(f"cpu_lowp shape {list(cpu_lowp.shape)} != reference {list(ref.shape)}")
    base = _f64(cpu_lowp)
    if _nonfinite_mismatch(ref, base).any():
        # The CPU itself overflowed where the reference did not: a finite device result is better.
        return math.inf, "rmse_vs_cpu"
    return _rms(base - ref), "rmse_vs_cpu"


def compare(
    ref64: torch.Tensor,
    device_out: torch.Tensor,
    cpu_lowp: torch.Tensor | None = None,
    dtype: str = "bf16",
) -> Verdict:
    """The verdict on `device_out` against the float64 reference (rule in the module docstring)."""
    check_choice("dtype", dtype, DTYPES)
    shape_errors = _shape_errors(ref64, device_out)
    if shape_errors:
        return Verdict(False, "shape", shape_errors)
    ref, actual = _f64(ref64), _f64(device_out)
    errors = _errors(ref, actual)
    if errors["nonfinite"]:
        return Verdict(False, "nonfinite", errors)
    tol = DTYPE_TOL[dtype]
    errors["tol_ratio"] = _tol_ratio(ref, actual, tol)
    if errors["tol_ratio"] <= 1.0:
        return Verdict(True, "allclose", errors)
    baseline_rmse, rule = _baseline(ref, cpu_lowp, dtype)
    threshold = MULTIPLIER[dtype] * baseline_rmse + tol.atol / 10.0
    errors["baseline_rmse"] = baseline_rmse
    return Verdict(errors["rmse"] <= threshold, rule, errors, threshold)


def _severity(v: Verdict) -> tuple[bool, float]:
    """Sort key, worst last: failures after passes, then the share of the allowed error used."""
    if v.rule in ("shape", "nonfinite"):
        return (not v.ok, math.inf)
    if v.threshold is None:
        return (not v.ok, v.errors["tol_ratio"])
    return (not v.ok, v.errors["rmse"] / v.threshold)


def compare_many(
    named: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]], dtype: str
) -> tuple[bool, str | None, dict[str, Verdict]]:
    """Compare several tensors (loss, logits, every gradient): `{name: (ref64, device, cpu_lowp)}`
    -> (all passed, the name of the worst tensor or None if there are none, verdict per name)."""
    verdicts = {name: compare(r, d, c, dtype) for name, (r, d, c) in named.items()}
    worst = max(verdicts, key=lambda name: _severity(verdicts[name]), default=None)
    return all(v.ok for v in verdicts.values()), worst, verdicts


def _rel_dev(ref: float, dev: float) -> float:
    if not math.isfinite(ref) or not math.isfinite(dev):
        same = ref == dev or (math.isnan(ref) and math.isnan(dev))
        return 0.0 if same else math.inf
    return abs(dev - ref) / max(abs(ref), _TINY)


def loss_curve_compare(
    ref_losses: Sequence[float], dev_losses: Sequence[float], rel_tol: float
) -> dict[str, Any]:
    """Step-by-step relative deviation of a loss curve from a reference curve (steps 0-based).

    A step missing from either curve counts as diverging there, so a run that stopped early fails.
    """
    ref, dev = [float(x) for x in ref_losses], [float(x) for x in dev_losses]
    devs = [
        _rel_dev(ref[i], dev[i]) if i < len(ref) and i < len(dev) else math.inf
        for i in range(max(len(ref), len(dev)))
    ]
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
