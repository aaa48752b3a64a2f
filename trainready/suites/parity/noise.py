"""The honest computation a parity run is judged against: what its noise is, and the runs that
measure it.

On a device, or compiled, it is the CPU running the case eagerly at the case dtype (one run: a
borderline failure against it is judged again with independently rounded runs pooled in,
`rejudge.pooled`). Where the device run *is* that run (eager on the CPU), it is
independently rounded CPU runs (`probes/perturb.py`), whose disagreement is the noise
(`independent`; `more_runs` adds seeds for a borderline failure; `reference_noise` measures the
float64 reference's own rounding). A model
that routes by top-k (MoE), eager, has the device's routing replayed in the reference and the
baselines (`pin`, `probes/routing.py`), so a near-tie decided the other way is judged on its own.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from trainready.core.case import Outcome
from trainready.device import is_oom
from trainready.probes.numerics import (
    SMALL_NUMEL,
    Verdict,
    curve_noise,
    noise_rmse,
    spread_noise,
)
from trainready.probes.perturb import KAPPA2, IndependentRounding
from trainready.probes.rounded import ROUNDED_TO, RoundedOutputs
from trainready.probes.routing import Flips, Routing, flips
from trainready.suites.parity.engine import Data, Spec, Trace, train
from trainready.suites.parity.models import Subject

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
# The seed of the float64 reference's independently rounded rerun (`reference_noise`).
REFERENCE_SEED = 1


@dataclass
class Baseline:
    """The honest computation at the case dtype a device run is judged against.

    `kind` "cpu": the CPU running the case eagerly at the dtype (one run); "independent": two CPU
    runs at the dtype whose roundings are independent of the plain run's and of each other
    (`IndependentRounding`), for eager on the CPU, where the plain run is the device run itself;
    "pooled": the "cpu" run first, then independently rounded runs, each one more sample of how
    far an honest run at the dtype lands from float64 (`rejudge.pooled`): the noise is
    the rms of their distances, each over its rounding's kappa.
    `routed`: the model routes tokens by a top-k (MoE), so a rounding can flip a near-tie and move
    a run by more than rounding noise. Eager runs pin the routing instead (`pin`: every run
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
    # the float64 reference's own rounding noise per tensor, where measured (`reference_noise`)
    reference_noise: dict[str, float] = field(default_factory=dict)
    # the float64 code path with every op's output rounded to the dtype (`rounded`): its distance
    # from float64 is one more sample of the noise, with what every run at the dtype shares
    rounded: Trace | None = None

    @property
    def rule(self) -> str:
        if self.kind == "cpu":
            return "noise_vs_cpu"
        if self.kind == "pooled":
            return "noise_vs_cpu_pooled"
        return "noise_vs_independent_routed" if self.routed else "noise_vs_independent"

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"the CPU, eager, {self.dtype}"
        if self.kind == "pooled":
            return (
                f"the CPU, eager, {self.dtype}, and {len(self.runs) - 1} CPU runs rounding "
                "independently; noise = the rms of their distances from float64"
            )
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
        if self.rounded is not None:
            text += (
                f", or where larger the distance from float64 of the float64 code path rounded to "
                f"{self.dtype} at every op's output"
            )
        return text

    def _kappa(self) -> float:
        return math.sqrt(KAPPA2[self.dtype])

    def _kappas(self) -> list[float]:
        """Each run's rounding over a plain run's (the pooled kind's first run is plain)."""
        return [1.0] + [self._kappa()] * (len(self.runs) - 1)

    @staticmethod
    def _pooled(distances: list[float]) -> float:
        return math.sqrt(sum(d * d for d in distances) / len(distances))

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
            if self.kind == "pooled":
                own = [noise_rmse(r, t[n]) / k for t, k in zip(named, self._kappas(), strict=True)]
                out[n] = math.hypot(self._pooled(own), self.reference_noise.get(n, 0.0))
                continue
            out[n] = spread_noise(r, [t[n] for t in named], KAPPA2[self.dtype])
            # A tensor of a few entries estimates its noise from a few values, and some (a Mamba
            # layer's dt_bias gradient: a sum over every token) scatter far from Gaussian: the
            # runs' own distances from float64 are two more samples of it. (So are they where a
            # routing flip moved a run.)
            if self.routed or r.numel() < SMALL_NUMEL:
                own = max(noise_rmse(r, t[n]) for t in named) / self._kappa()
                out[n] = max(out[n], own)
            out[n] = max(out[n], self._rounded_noise(n, r))
            # The device's distance from the reference holds the reference's own rounding error
            # too, independent of the device's: their variances add.
            out[n] = math.hypot(out[n], self.reference_noise.get(n, 0.0))
        return out

    def exact_zeros(self, ref: dict[str, torch.Tensor]) -> frozenset[str]:
        """The pre-step tensors every run of the baseline has exactly zero where the float64
        reference does not: there the runs' distance from float64 is float64's own residue,
        not a sample of the residue an honest run in another order leaves
        (`verdicts.borderline`)."""
        named = [r.named(after_step=False) for r in self.runs]
        return frozenset(
            n
            for n, r in ref.items()
            if bool(r.any())
            and all(n in t and t[n].shape == r.shape and not bool(t[n].any()) for t in named)
        )

    def _rounded_noise(self, name: str, ref: torch.Tensor) -> float:
        """The rounded float64 run's distance from the reference on a tensor (0 where there is
        no such run, or it went non-finite where the reference did not: a float64 constant
        such as finfo(float64).min rounds to inf, which says nothing of the noise)."""
        run = None if self.rounded is None else self.rounded.named(after_step=False).get(name)
        if run is None or run.shape != ref.shape:
            return 0.0
        d = noise_rmse(ref, run)
        return d if math.isfinite(d) else 0.0

    def curve(self, ref: list[float]) -> list[float]:
        """Per step, the relative deviation of an honest run's loss from the reference's (for
        the independent runs: the largest of their spread and their own deviations, in a plain
        run's rounding noise)."""
        if self.kind == "cpu":
            return curve_noise(ref, self.runs[0].curve)
        if self.kind == "pooled":
            own = [curve_noise(ref, run.curve) for run in self.runs]
            kappas = self._kappas()
            return [
                self._pooled([o[i] / k for o, k in zip(own, kappas, strict=True)])
                for i in range(len(ref))
            ]
        kappa = self._kappa()
        # Each run's deviation is within rounding noise of the other's: their difference is the
        # spread, (x - r) - (y - r) = x - y, relative to the reference (over consecutive runs,
        # where `more_runs` added some).
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
        if self.rounded is not None:  # one more sample, where finite (as `_rounded_noise`)
            rounded = curve_noise(ref, self.rounded.curve)
            out = [max(x, r) if math.isfinite(r) else x for x, r in zip(out, rounded, strict=True)]
        return out


def routed(traits: dict[str, str]) -> bool:
    return str(traits.get("moe", "dense")) not in ("dense", "")


# The IndependentRounding counts of ops it rounded differently from the plain run.
ROUNDED = (
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


def replaying(replay: list[torch.Tensor] | None) -> contextlib.AbstractContextManager:
    """A run following a recorded routing (`replay`: the device run's top-k decisions), or a
    plain one (None)."""
    return Routing(replay=replay) if replay is not None else contextlib.nullcontext()


def independent(
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
            with mode, replaying(replay):
                runs.append(train(subject.model, data, Spec("cpu", dtype, steps)))
        except Exception as e:  # noqa: BLE001 - the baseline failed, not the device
            if is_oom(e):
                raise
            text = " ".join(str(e).split())[:300]
            return None, f"the independently rounded runs failed: {type(e).__name__}: {text}"
        counts.update(mode.counts)
    if not sum(counts[k] for k in ROUNDED):
        return None, "the independently rounded runs rounded no op differently"
    return Baseline("independent", tuple(runs), dtype, routed(subject.traits), dict(counts)), None


def more_runs(
    subject: Subject,
    data: Data,
    steps: int,
    base: Baseline,
    out: Outcome,
    phase: Callable,
    replay: list[torch.Tensor] | None,
    pointwise: bool = True,
) -> Baseline:
    """`MORE_SEEDS` more independently rounded runs (elementwise ops too where `pointwise`, as
    `base`'s were) where they fit the budget (the time of `base`'s runs says), recorded in
    `independent_runs`; `base` as it is where they do not fit or fail."""
    spent = out.metrics.get("t_independent_full_s") or out.metrics.get("t_independent_s")
    per_run = (spent or math.inf) / len(INDEPENDENT_SEEDS)
    if per_run * len(MORE_SEEDS) > MORE_SEEDS_BUDGET_S:
        out.diagnostics["independent_runs"] = (
            f"{len(INDEPENDENT_SEEDS)}: {len(MORE_SEEDS)} more would take about "
            f"{per_run * len(MORE_SEEDS):.0f} s (budget {MORE_SEEDS_BUDGET_S:.0f} s)"
        )
        return base
    with phase("independent_more"):
        more, why = independent(subject, data, base.dtype, steps, MORE_SEEDS, replay, pointwise)
    out.diagnostics["independent_runs"] = len(INDEPENDENT_SEEDS) + len(MORE_SEEDS) if more else why
    return replace(base, runs=base.runs + more.runs) if more else base


def reference_noise(
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
        replaying(replay),
    ):
        again = train(subject.model, data, Spec("cpu", "fp64", 1)).named(after_step=False)
    first = ref.named(after_step=False)
    return {
        n: spread_noise(first[n], [first[n], again[n]], 1.0)
        for n in failing
        if n in again and again[n].shape == first[n].shape
    }


def rounded(
    subject: Subject,
    data: Data,
    dtype: str,
    steps: int,
    replay: list[torch.Tensor] | None,
) -> tuple[Trace | None, str]:
    """The case trained in float64 with every op's output rounded to `dtype`
    (`probes/rounded.py`), following the routing `replay` where given: (the run, "") or (None,
    why there is none)."""
    if dtype not in ROUNDED_TO:
        return None, f"no rounded float64 run at {dtype} (fp32 only)"
    mode = RoundedOutputs(dtype)
    try:
        with mode, replaying(replay):
            return train(subject.model, data, Spec("cpu", "fp64", steps)), ""
    except Exception as e:  # noqa: BLE001 - the run failed, not the device
        if is_oom(e):
            raise
        return None, f"the rounded float64 run failed: {type(e).__name__}: {str(e)[:300]}"


def pinnable(kind: str, dtype: str) -> bool:
    """Whether the baselines of `kind` exist at `dtype` to replay a routing in."""
    return not (kind == "independent" and dtype not in KAPPA2)


def pin(
    subject: Subject,
    data: Data,
    spec: Spec,
    recorded: Trace,
    recorder: Routing,
    kind: str,
    dtype: str,
    out: Outcome,
    pool_within: float | None = None,
) -> tuple[Trace, Trace, Baseline, Flips] | None:
    """For a model that routes by top-k, eager: the device's routing decisions, recorded by
    `recorder` in the device run (`recorded`), replayed in the float64 reference and in the
    baselines of `kind` at `dtype` (`probes/routing.py`): (reference, device run, baseline, the
    decisions judged), or None when there is nothing to pin (no top-k calls), the runs' top-k
    calls do not line up, or a pinned run fails (the unpinned path then runs, and says why where
    it fails too). It runs before any unpinned reference or baseline: when pinning works, those
    are never needed. Against the CPU's one run (kind "cpu"), decisions beyond the noise by at
    most `pool_within` are judged again with independently rounded runs replaying the routing
    pooled in (`_pooled_flips`): one run's noise and flips are one sample of an honest run's."""
    if not recorder.log:
        return None
    seeds = INDEPENDENT_SEEDS if kind == "independent" else (None,)
    reference = Routing(replay=recorder.log)
    try:
        with reference:
            ref = train(subject.model, data, Spec("cpu", "fp64", spec.steps))
        runs, modes, counts = _replaying(subject, data, spec, recorder.log, dtype, seeds)
    except Exception as e:  # noqa: BLE001 - the unpinned path reports what fails there
        if is_oom(e):
            raise
        return None
    if not all(math.isfinite(x) for x in ref.curve):
        return None
    if kind == "independent" and not sum(counts[k] for k in ROUNDED):
        return None
    kappa2 = KAPPA2[dtype] if kind == "independent" else None
    report = flips(reference, modes, dtype, kappa2)
    pinned = Baseline(kind, tuple(runs), dtype, routed=False, counts=dict(counts))
    borderline = pool_within is not None and 0 < report.worst_ratio <= pool_within
    if kind == "cpu" and report.beyond_noise and borderline and dtype in KAPPA2:
        pinned, report = _pooled_flips(
            subject, data, spec, recorder.log, (reference, pinned, modes)
        )
    out.diagnostics["routing"] = {**report.to_json(), "pinned": report.diverged is None}
    if report.diverged is not None:
        return None
    return ref, recorded, pinned, report


def _replaying(
    subject: Subject,
    data: Data,
    spec: Spec,
    log: list[torch.Tensor],
    dtype: str,
    seeds: tuple[int | None, ...],
    budget_s: float = math.inf,
) -> tuple[list[Trace], list[Routing], Counter]:
    """CPU runs at `dtype` replaying the routing `log`, one per seed (None: plain; else
    independently rounded), while the runs so far leave room for one more within `budget_s`:
    (runs, their routings, the rounding counts)."""
    runs, modes, counts, spent = [], [], Counter(), 0.0
    for seed in seeds:
        if runs and spent / len(runs) * (len(runs) + 1) > budget_s:
            break
        start = time.perf_counter()
        replay = Routing(replay=log)
        rounding = IndependentRounding(dtype, seed) if seed else None
        with rounding or contextlib.nullcontext(), replay:
            runs.append(train(subject.model, data, Spec("cpu", dtype, spec.steps)))
        modes.append(replay)
        counts.update(rounding.counts if rounding else {})
        spent += time.perf_counter() - start
    return runs, modes, counts


def _pooled_flips(
    subject: Subject,
    data: Data,
    spec: Spec,
    log: list[torch.Tensor],
    judged: tuple[Routing, Baseline, list[Routing]],
) -> tuple[Baseline, Flips]:
    """The CPU's one replaying run pooled with independently rounded ones replaying the same
    routing (INDEPENDENT_SEEDS, then MORE_SEEDS within MORE_SEEDS_BUDGET_S): the score noise is
    the rms of their distances from float64 (each over its kappa), and the worst flip an honest
    run makes is the worst of theirs; the baseline, "pooled", judges the tensors too. The ones
    given where no independently rounded run can be made."""
    reference, base, modes = judged
    dtype, seeds = base.dtype, (*INDEPENDENT_SEEDS, *MORE_SEEDS)
    try:
        runs, more, counts = _replaying(subject, data, spec, log, dtype, seeds, MORE_SEEDS_BUDGET_S)
    except Exception as e:  # noqa: BLE001 - judged by the one run, as before
        if is_oom(e):
            raise
        return base, flips(reference, modes, dtype)
    if not sum(counts[k] for k in ROUNDED):
        return base, flips(reference, modes, dtype)
    kappa2 = [1.0] + [KAPPA2[dtype]] * len(more)
    pooled = Baseline("pooled", base.runs + tuple(runs), dtype, counts=dict(counts))
    return pooled, flips(reference, modes + more, dtype, pooled_kappa2=kappa2)
