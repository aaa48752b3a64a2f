"""Tiny task models (`TaskModel`) for the parity suite's tests: one clean, one with a planted
fault in its low-precision path, one computing the same loss another way (factories:
`tests.support.parity_task_faults:NAME`, each called as NAME(seed))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainready.models.task import TaskModel, TaskOutput

CLASSES = 5


class TinyImageClassifier(TaskModel):
    """conv -> pool -> linear on 8 x 8 images, cross-entropy on 5 classes."""

    modality = "vision"
    traits = {"mlp": "relu", "moe": "dense"}

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, CLASSES)

    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return {
            "pixel_values": torch.randn(2, 3, 8, 8, generator=gen),
            "labels": torch.randint(0, CLASSES, (2,), generator=gen),
        }

    def logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(pixel_values).relu().mean((-2, -1)))

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> TaskOutput:
        logits = self.logits(pixel_values)
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return TaskOutput(F.cross_entropy(wide, labels), logits)


class LowPrecisionBug(TinyImageClassifier):
    """Planted: below float64 the head's output is 0.1% too large (a wrong low-precision kernel)."""

    def logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        out = super().logits(pixel_values)
        return out * 1.001 if out.dtype != torch.float64 else out


class LogSoftmaxLoss(TinyImageClassifier):
    """Correct but different: the loss as -log_softmax at the label, not F.cross_entropy."""

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> TaskOutput:
        logits = self.logits(pixel_values)
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        picked = wide.log_softmax(-1).gather(-1, labels[:, None])
        return TaskOutput(-picked.mean(), logits)


class Float32Inside(TinyImageClassifier):
    """Casts its logits to float32 (`.float()`): a float64 run computes in float32."""

    def logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return super().logits(pixel_values).float()


def clean(seed: int) -> TaskModel:
    return TinyImageClassifier(seed)


def low_precision_bug(seed: int) -> TaskModel:
    return LowPrecisionBug(seed)


def log_softmax_loss(seed: int) -> TaskModel:
    return LogSoftmaxLoss(seed)


def float32_inside(seed: int) -> TaskModel:
    return Float32Inside(seed)
