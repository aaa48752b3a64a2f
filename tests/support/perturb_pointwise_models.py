"""A sinusoidal time embedding as diffusion and flow-matching models compute it (a timestep times
frequencies, up to ~1500 rad, through sin and cos, then an MLP), for the parity tests of the
CPU's fp32 baseline over elementwise ops: every fp32 run rounds the product t * freq alike, and sin
amplifies that rounding ~1000x, so only runs that round elementwise ops independently measure
it. A clean net, and one whose sin is 0.1% too large below float64 (factories
`tests.support.perturb_pointwise_models:NAME`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.support.perturb_conv_models import CLASSES
from trainready.models.task import TaskModel, TaskOutput

FREQS, WIDTH = 32, 64


class TimeEmbedNet(TaskModel):
    """t in [0, 1000) -> [sin, cos](t * 1.5 ** -k) -> linear -> silu -> linear head."""

    modality = "vision"
    traits = {"mlp": "silu", "moe": "dense"}

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.mlp = nn.Linear(2 * FREQS, WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)
        self.register_buffer("freqs", 1.5 ** -torch.arange(FREQS, dtype=torch.float32) * 1.5)

    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return {
            "pixel_values": torch.rand(8, generator=gen) * 1000,
            "labels": torch.randint(0, CLASSES, (8,), generator=gen),
        }

    def embedding(self, args: torch.Tensor) -> torch.Tensor:
        return torch.cat([args.sin(), args.cos()], -1)

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> TaskOutput:
        args = pixel_values.unsqueeze(-1) * self.freqs
        logits = self.head(F.silu(self.mlp(self.embedding(args))))
        return TaskOutput(F.cross_entropy(logits, labels), logits)


class TimeEmbedSinBug(TimeEmbedNet):
    """Planted: below float64 sin is 0.1% too large (a wrong low-precision kernel), in every
    fp32 run alike -- the independent runs' too, so it is in no spread."""

    def embedding(self, args: torch.Tensor) -> torch.Tensor:
        if args.dtype == torch.float64:
            return super().embedding(args)
        return torch.cat([args.sin() * 1.001, args.cos()], -1)


def time_embed(seed: int) -> TaskModel:
    return TimeEmbedNet(seed)


def time_embed_sin_bug(seed: int) -> TaskModel:
    return TimeEmbedSinBug(seed)
