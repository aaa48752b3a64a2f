"""The verdict on one sample's outputs (or gradients): the device's against the CPU's and float64.

Per output, in order (`judge_sample`):

- the device must return as many outputs as the CPU, each of the CPU's shape and dtype
  (`invariants`: all that is judged for outputs that are not a function of the inputs);
- a floating (or complex, as real pairs) output is judged by the numerics rule
  (probes/numerics.py), at its own dtype's allowance (an fp32 output of a bf16 case is fp32's),
  against the float64 reference, its noise measured: the CPU's same-dtype
  result's distance from float64 ("noise_vs_cpu"). In fp64 there is nothing finer to measure
  the CPU against: the noise is the CPU's fp32 result's distance, scaled by the ratio of the two
  unit roundoffs, 2^-29 ("noise_vs_cpu_fp32_scaled"; the floor alone when fp32 did not run), or
  the CPU's own fp64 distance where that is larger (a sample holding fp32 tensors);
- where the CPU's own result is non-finite at a position where float64 is finite (or the
  reverse: an overflow in bf16), the CPU's value is the reference there: the device must match
  the CPU's pattern, and is not blamed for the dtype's range, unless it kept float64's finite
  value there (more range than the CPU): then it is judged against float64 at that position;
- an integer or bool output must equal the CPU's exactly, except indices that may pick any of
  tied values (database.TIED_INDICES): shape and dtype only.

A device result closer to float64 than the CPU's same-dtype result passes, and is said so
(`closer`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from trainready.probes.numerics import judge_many, noise_rmse, nonfinite_mismatch, over_allowance

# fp64's unit roundoff over fp32's: the scale from the CPU's measured fp32 noise to fp64's.
FP64_PER_FP32 = 2.0**-29


@dataclass
class SampleVerdict:
    ok: bool
    rule: str  # "noise_vs_cpu", "noise_vs_cpu_fp32_scaled", "invariants", "exact"...
    worst: str | None = None  # the output that decided it ("out[1]", "grad[0]")
    over: float | None = None  # its error over its allowance (numerics only)
    closer: bool = False  # every judged floating output closer to float64 than the CPU's
    problem: str | None = None  # what failed, one line

    def to_json(self) -> dict[str, Any]:
        over = self.over if self.over is None or math.isfinite(self.over) else "inf"
        return {"ok": self.ok, "rule": self.rule, "worst": self.worst, "over": over}


def _tensor(x: Any) -> Any:
    """Numbers as tensors, sparse and other layouts as dense tensors (their values compared)."""
    if isinstance(x, (bool, int, float, complex)):
        return torch.tensor(x)
    if isinstance(x, torch.Tensor) and x.layout != torch.strided:
        return x.detach().to_dense()
    return x


def _real(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    if t.is_complex():
        return torch.view_as_real(t.resolve_conj()).to(torch.float64)
    return t.to(torch.float64)


def _invariant_problem(name: str, cpu: Any, dev: Any) -> str | None:
    if (cpu is None) != (dev is None):
        return f"{name}: the CPU returned {type(cpu).__name__}, the device {type(dev).__name__}"
    if not isinstance(cpu, torch.Tensor):
        return None if cpu == dev or not isinstance(dev, torch.Tensor) else f"{name}: type"
    if not isinstance(dev, torch.Tensor):
        return f"{name}: the device returned {type(dev).__name__}, not a tensor"
    if tuple(cpu.shape) != tuple(dev.shape):
        return f"{name}: shape {list(dev.shape)}, the CPU's {list(cpu.shape)}"
    if cpu.dtype != dev.dtype:
        return f"{name}: dtype {dev.dtype}, the CPU's {cpu.dtype}"
    return None


# An output's dtype by the names the rule knows (complex outputs by their real part's).
_NAMES = {
    torch.float32: "fp32",
    torch.complex64: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.complex32: "fp16",
    torch.float64: "fp64",
    torch.complex128: "fp64",
}


def output_dtype(t: torch.Tensor, case_dtype: str) -> str:
    """The dtype an output is judged at: its own (`softmax(dtype=float64)` in a bf16 case is an
    fp64 result), or the case's for a dtype the rule has no name for."""
    return _NAMES.get(t.dtype, case_dtype)


def _noise(ref: torch.Tensor, cpu: torch.Tensor, fp32: Any, dtype: str) -> tuple[float, str]:
    own = noise_rmse(ref, _real(cpu))
    if dtype != "fp64":
        return own, "noise_vs_cpu"
    # The CPU's fp64 result is the reference itself unless the sample holds lower-precision
    # tensors (cov's fp32 `aweights`): then its own distance is measured noise too.
    if isinstance(fp32, torch.Tensor) and tuple(fp32.shape) == tuple(cpu.shape):
        scaled = noise_rmse(ref, _real(fp32)) * FP64_PER_FP32
        if math.isfinite(scaled) and scaled >= own:
            return scaled, "noise_vs_cpu_fp32_scaled"
    if own > 0:
        return own, "noise_vs_cpu"
    return 0.0, "floor_only"


def judge_sample(
    ref: list[Any],
    cpu: list[Any],
    dev: list[Any],
    dtype: str,
    how: str = "numerics",
    fp32: list[Any] | None = None,
    tied_indices: bool = False,
    label: str = "out",
) -> SampleVerdict:
    """The verdict on a device's flattened outputs `dev` against the CPU's (`cpu`, same dtype)
    and the float64 reference's (`ref`); `fp32`: the CPU's fp32 outputs, for an fp64 case's
    noise; `how`: "numerics" or "invariants"."""
    if len(dev) != len(cpu):
        return SampleVerdict(False, "invariants", problem=f"{len(dev)} outputs, the CPU {len(cpu)}")
    if len(ref) != len(cpu):  # the float64 path returns another structure: nothing to judge by
        ref, how = cpu, "invariants"
    named: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    rules = set()
    cpu_rmse: dict[str, float] = {}
    dtypes: dict[str, str] = {}
    for i, (r, c, d) in enumerate(zip(ref, cpu, dev, strict=True)):
        name = f"{label}[{i}]"
        c, d, r = _tensor(c), _tensor(d), _tensor(r)
        problem = _invariant_problem(name, c, d)
        if problem:
            return SampleVerdict(False, "invariants", worst=name, problem=problem)
        if how != "numerics" or not isinstance(c, torch.Tensor):
            continue
        if c.is_floating_point() or c.is_complex():
            r64, c64 = _real(r), _real(c)
            if tuple(r64.shape) != tuple(c64.shape):
                continue  # the reference itself took another shape: nothing to judge against
            d64 = _real(d)
            cpu_range = nonfinite_mismatch(r64, c64)  # the CPU left its dtype's range there
            # The device keeps float64's finite value there (it computed in more range, as
            # torch itself does under a dispatch mode for masked.prod's fp16 backward): judged
            # against float64 at those positions; otherwise it must match the CPU's value.
            kept_range = cpu_range & torch.isfinite(r64) & torch.isfinite(d64)
            device_ref = torch.where(cpu_range & ~kept_range, c64, r64)
            r64 = torch.where(cpu_range, c64, r64)
            f32 = _tensor(fp32[i]) if fp32 is not None and i < len(fp32) else None
            at = output_dtype(c, dtype)
            noise, rule = _noise(r64, c, f32, at)
            rules.add(rule)
            named[name] = (device_ref, d64, noise)
            dtypes[name] = at
            if rule == "noise_vs_cpu" and noise > 0:
                cpu_rmse[name] = noise
        elif not tied_indices and not torch.equal(c, d.cpu()):
            wrong = int((c != d.cpu()).sum())
            return SampleVerdict(
                False, "exact", name, problem=f"{name}: {wrong} of {c.numel()} entries differ"
            )
    if not named:
        return SampleVerdict(True, "invariants" if how != "numerics" else "exact")
    verdicts: dict[str, Any] = {}
    for at in sorted(set(dtypes.values())):  # each output under its own dtype's allowance
        group = {n: t for n, t in named.items() if dtypes[n] == at}
        verdicts |= judge_many(group, at, "+".join(sorted(rules)))[2]
    worst = max(verdicts, key=lambda n: (not verdicts[n].ok, over_allowance(verdicts[n])))
    ok, v = all(x.ok for x in verdicts.values()), verdicts[worst]
    closer = bool(cpu_rmse) and all(
        verdicts[n].errors.get("rmse", math.inf) < noise for n, noise in cpu_rmse.items()
    )
    problem = None
    if not ok:
        if v.threshold is None:
            problem = f"{worst}: {v.rule} mismatch"
        else:
            problem = (
                f"{worst}: rmse {v.errors['rmse']:.3g} > allowed {v.threshold:.3g} "
                f"(the CPU's {named[worst][2]:.3g})"
            )
    return SampleVerdict(ok, v.rule, worst, over_allowance(v), closer, problem)
