"""Top-k routing decisions, recorded from one run and replayed in another.

A mixture-of-experts model routes each token to the k experts with the best router scores. Where
two scores are within rounding noise of each other, a low-precision run may pick the other
expert: a discrete flip that moves the expert weights' gradients far more than rounding noise
moves anything, and that honest runs at the dtype make too. Judged against float64 as rounding
noise, a correct MoE run would fail whenever it flipped (measured: docs/numerics.md, "MoE
routing").

So the parity suite records the decisions of the device run (`Routing()`) and replays them in the
float64 reference and in the same-dtype baselines (`Routing(replay=log)`): every run then routes
every token as the device did, and the comparison measures the numerics of one routing. The
decisions themselves are judged on their own (`flips`): a flipped decision -- the device's pick
outside float64's top-k -- is honest when the float64 score of every expert the device picked
falls behind the k-th best by no more than the larger of FLIP_ALLOWANCE score noises (the rms
noise of the baselines' scores at that call, plus one rounding) and twice the worst flip the
honest baselines make themselves at the same calls; a decision beyond that is a routing fault (a
wrong router, a wrong top-k kernel). The allowance is several noises because the noise is an
rms while a tie is decided by the largest rounding of two scores, and because tie-prone routers
flip far in honest runs.

Every eager `aten::topk` call is recorded (`torch.topk`, `Tensor.topk`, or from C++: the top-k of
every MoE router here, HF's and the synthetic one's), through a Python kernel for that op alone
(`probes/intercept.py`); a model that routes by another op (sort, argmax), or calls topk from
inside a compiled region, is not pinned. Replay needs the runs to make the same sequence of
top-k calls of the same shapes; when they do not, replay stops and `diverged` says at which call.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from trainready.probes.intercept import intercept
from trainready.probes.numerics import UNIT_ROUNDOFF

FLIP_ALLOWANCE = 4.0


@dataclass
class Call:
    """One top-k call of a replaying run: its own scores and the decisions it would have made,
    and the recorded decisions it was made to follow (dim moved last)."""

    scores: torch.Tensor
    natural: torch.Tensor
    forced: torch.Tensor
    largest: bool


class Routing:
    """`with Routing() as r:` records every `topk`'s indices (`replay=None`), or, with
    `replay=log` (the `log` of a recording run), forces the recorded ones, call by call;
    `calls` keeps what each replayed call saw.

    A Python kernel for `aten::topk` alone, below autograd (`probes/intercept.py`): a forced
    call returns the recorded indices and the values they select, and autograd's own top-k
    backward scatters the gradient to them. (A torch-function mode saw every torch call of the
    run, ~1,000 a step on a tiny MoE model; a dispatch mode before it, every aten op of forward
    and backward: a replayed run took 2.2-2.5x a plain one.)"""

    def __init__(self, replay: list[torch.Tensor] | None = None):
        self.replay = replay
        self.log: list[torch.Tensor] = []
        self.calls: list[Call] = []
        self.diverged: int | None = None  # the first call that could not be replayed
        self._intercepted: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> Routing:
        self._intercepted = intercept({torch.ops.aten.topk.default: self._topk})
        self._intercepted.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        intercepted, self._intercepted = self._intercepted, None
        return intercepted.__exit__(*exc)

    def _topk(self, func: Any, args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = func(*args, **kwargs)
        i = len(self.log)
        self.log.append(indices.detach().to("cpu"))
        if self.replay is None or self.diverged is not None:
            return values, indices
        if i >= len(self.replay) or tuple(self.replay[i].shape) != tuple(indices.shape):
            self.diverged = i
            return values, indices
        dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
        forced = self.replay[i].to(indices.device)
        self.calls.append(
            Call(
                args[0].detach().to("cpu").movedim(dim, -1),
                indices.detach().to("cpu").movedim(dim, -1),
                forced.detach().to("cpu").movedim(dim, -1),
                bool(largest),
            )
        )
        return args[0].gather(dim, forced), forced


def _rms(t: torch.Tensor) -> float:
    return math.sqrt(torch.mean(torch.square(t.double())).item()) if t.numel() else 0.0


@dataclass
class Flips:
    """How the device's top-k decisions compare with float64's on the same trajectory."""

    calls: int = 0
    decisions: int = 0  # rows (tokens) decided, over all calls
    flipped: int = 0  # rows whose chosen set differs from float64's
    beyond_noise: int = 0  # flipped rows whose float64 gap exceeds the noise
    worst_ratio: float = 0.0  # the largest gap over its tolerance among flipped rows
    honest_worst: float = 0.0  # the largest gap, in noises, of a flip an honest run made
    baselines: int = 0  # the honest runs judged by (more where a borderline flip was pooled)
    diverged: int | None = None
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _gaps(scores: torch.Tensor, chosen: torch.Tensor, natural: torch.Tensor, largest: bool):
    """(rows whose chosen set differs from the natural one, how far the worst chosen score of
    each such row falls behind the natural k-th best)."""
    rows = scores.reshape(-1, scores.shape[-1]).double()
    chosen = chosen.reshape(-1, chosen.shape[-1])
    natural = natural.reshape(-1, natural.shape[-1])
    moved = (chosen.sort(-1).values != natural.sort(-1).values).any(-1)
    kth = rows.topk(chosen.shape[-1], -1, largest=largest).values[:, -1:]
    picked = rows.gather(-1, chosen)
    gap = ((kth - picked) if largest else (picked - kth)).clamp(min=0).amax(-1)
    return moved, gap[moved]


def flips(
    reference: Routing,
    baselines: list[Routing],
    dtype: str,
    kappa2: float | None = None,
    pooled_kappa2: list[float] | None = None,
) -> Flips:
    """Judge the recorded decisions against the float64 reference's scores (`reference`, a
    replaying float64 run), in units of the call's score noise: with two independently rounded
    baselines (`kappa2` given), their rms disagreement over sqrt(2 kappa2); pooled
    (`pooled_kappa2`: each baseline's rounding variance over a plain run's), the rms of the
    baselines' distances from float64, each over its kappa; with one (the CPU at the dtype),
    its rms distance from float64. A flip is honest within the larger of FLIP_ALLOWANCE noises
    and twice the worst flip the honest baselines would have made themselves (their own top-k
    of their own scores at the same call: a tie-prone router flips often and far in every
    run)."""
    out = Flips(calls=len(reference.calls), diverged=reference.diverged, baselines=len(baselines))
    for b in baselines:
        if b.diverged is not None and (out.diverged is None or b.diverged < out.diverged):
            out.diverged = b.diverged
    device, honest = [], 0.0
    for i, call in enumerate(reference.calls):
        out.decisions += call.forced.reshape(-1, call.forced.shape[-1]).shape[0]
        seen = [b.calls[i] for b in baselines if i < len(b.calls)]
        if pooled_kappa2 is not None and seen:
            pairs = zip(baselines, pooled_kappa2, strict=True)
            spread = [
                _rms(b.calls[i].scores - call.scores) ** 2 / k for b, k in pairs if i < len(b.calls)
            ]
            noise = math.sqrt(sum(spread) / len(spread))
        elif kappa2 is not None and len(seen) >= 2:
            noise = _rms(seen[0].scores - seen[1].scores) / math.sqrt(2.0 * kappa2)
        elif seen:
            noise = _rms(seen[0].scores - call.scores)
        else:
            noise = math.inf
        unit = noise + UNIT_ROUNDOFF[dtype] * _rms(call.scores)
        for b in seen:  # the flips an honest run would have made on its own
            _, gap = _gaps(call.scores, b.natural, call.natural, call.largest)
            if gap.numel():
                honest = max(honest, float(gap.max()) / unit if unit > 0 else math.inf)
        moved, gap = _gaps(call.scores, call.forced, call.natural, call.largest)
        if gap.numel():
            device.append((i, gap / unit if unit > 0 else torch.full_like(gap, math.inf)))
    out.honest_worst = honest
    tol = max(FLIP_ALLOWANCE, 2.0 * honest)
    for i, ratio in device:
        out.flipped += ratio.numel()
        out.beyond_noise += int((ratio > tol).sum())
        out.worst_ratio = max(out.worst_ratio, float(ratio.max()) / tol)
        if len(out.examples) < 3:
            out.examples.append({"call": i, "rows": ratio.numel(), "worst": float(ratio.max())})
    return out


__all__ = ["FLIP_ALLOWANCE", "Call", "Flips", "Routing", "flips"]
