"""A gated-decay scan as linear-attention layers compute it (a cumsum of log decays, pairwise
decays from their differences, a unit lower-triangular system solved by substitution), for the
parity tests of the CPU's fp32 baseline over scans and triangular solves: a clean net, and one
whose cumulative decays' gradient is 1% too large below float64 (factories
`tests.support.perturb_scan_models:NAME`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.support.perturb_conv_models import CLASSES, _ScaledGrad
from trainready.models.task import TaskModel, TaskOutput

STEPS, WIDTH = 32, 8


class DecayScanNet(TaskModel):
    """tokens -> log decays g (softplus of a two-layer gate) -> cumsum over the sequence -> exp(cum_i - cum_j)
    below the diagonal -> values through (I + strictly lower k k^T decays)^-1 -> decayed q k^T
    attention -> mean -> linear head; cross-entropy on 4 classes."""

    modality = "text-decoder"
    traits = {"mlp": "none", "moe": "dense"}

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        # two layers: the decay's gradient reaches a weight of 256 entries (a tensor of a few
        # entries is judged against its runs' own distance too, which a shared fault is in)
        self.gate = nn.Sequential(nn.Linear(WIDTH, 32), nn.Tanh(), nn.Linear(32, 1))
        self.q, self.k, self.v = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.head = nn.Linear(WIDTH, CLASSES)

    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return {
            "pixel_values": torch.randn(4, STEPS, WIDTH, generator=gen),
            "labels": torch.randint(0, CLASSES, (4,), generator=gen),
        }

    def cumulative(self, g: torch.Tensor) -> torch.Tensor:
        return g.cumsum(-1)

    def logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = pixel_values
        cum = self.cumulative(-F.softplus(self.gate(x)).squeeze(-1))  # (B, T), decreasing
        lower = torch.ones(STEPS, STEPS, dtype=torch.bool).tril()
        decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(~lower, -torch.inf).exp()
        q, k, v = self.q(x), self.k(x), self.v(x)
        system = torch.eye(STEPS, dtype=x.dtype) + 0.1 * ((k @ k.mT) * decay).tril(-1)
        u = torch.linalg.solve_triangular(system, v, upper=False, unitriangular=True)
        out = ((q @ k.mT) * decay) @ u
        return self.head(out.mean(1))

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> TaskOutput:
        logits = self.logits(pixel_values)
        return TaskOutput(F.cross_entropy(logits, labels), logits)


class ScanGradBug(DecayScanNet):
    """Planted: below float64 the cumulative decays' gradient is 1% too large."""

    def cumulative(self, g: torch.Tensor) -> torch.Tensor:
        cum = g.cumsum(-1)
        return cum if cum.dtype == torch.float64 else _ScaledGrad.apply(cum, 1.01)


def scan(seed: int) -> TaskModel:
    return DecayScanNet(seed)


def scan_grad_bug(seed: int) -> TaskModel:
    return ScanGradBug(seed)
