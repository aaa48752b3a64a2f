"""A tiny conv net with batch and group norms (`TaskModel`) for the parity tests of the CPU's fp32
baseline over convolutions and norms: a clean one, and one whose grouped convolution's weight
gradient is 1% too large below float64 (factories `tests.support.perturb_conv_models:NAME`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainready.models.task import TaskModel, TaskOutput

CLASSES = 4


class _ScaledGrad(torch.autograd.Function):
    """Identity forward; the gradient times `scale` (a wrong low-precision backward kernel)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


class ConvNormNet(TaskModel):
    """conv -> batch norm -> relu -> grouped conv -> group norm -> relu -> depthwise conv ->
    transposed conv -> pool -> linear on 12 x 12 images, cross-entropy on 4 classes."""

    modality = "vision"
    traits = {"mlp": "relu", "moe": "dense"}

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.grouped = nn.Conv2d(16, 16, 3, padding=1, groups=2)
        self.gn = nn.GroupNorm(4, 16)
        self.depthwise = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.head = nn.Linear(8, CLASSES)

    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return {
            "pixel_values": torch.randn(4, 3, 12, 12, generator=gen),
            "labels": torch.randint(0, CLASSES, (4,), generator=gen),
        }

    def grouped_weight(self) -> torch.Tensor:
        return self.grouped.weight

    def logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.stem(pixel_values)).relu()
        x = F.conv2d(x, self.grouped_weight(), self.grouped.bias, padding=1, groups=2)
        x = self.depthwise(self.gn(x).relu())
        return self.head(self.up(x).mean((-2, -1)))

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> TaskOutput:
        logits = self.logits(pixel_values)
        return TaskOutput(F.cross_entropy(logits, labels), logits)


class ConvGradBug(ConvNormNet):
    """Planted: below float64 the grouped convolution's weight gradient is 1% too large."""

    def grouped_weight(self) -> torch.Tensor:
        w = self.grouped.weight
        return w if w.dtype == torch.float64 else _ScaledGrad.apply(w, 1.01)


def clean(seed: int) -> TaskModel:
    return ConvNormNet(seed)


def conv_grad_bug(seed: int) -> TaskModel:
    return ConvGradBug(seed)


class GridSampleNet(TaskModel):
    """Deformable sampling as deformable attention does it: a conv's features sampled by
    grid_sample at reference points plus offsets a linear layer predicts from them, then a
    linear head. `on_kinks`: the offsets' weights start at zero and their bias puts every
    sampling point on a pixel boundary (the bilinear weights' kink), as deformable DETR's
    initialisation does; otherwise they start random and sample between pixels."""

    modality = "vision"
    traits = {"mlp": "relu", "moe": "dense"}
    POINTS = 16

    def __init__(self, seed: int, on_kinks: bool):
        super().__init__()
        torch.manual_seed(seed)
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.offsets = nn.Linear(8, 2 * self.POINTS)
        if on_kinks:  # whole-pixel offsets from pixel centres: every point on a pixel centre
            nn.init.zeros_(self.offsets.weight)
            with torch.no_grad():
                self.offsets.bias.copy_(torch.arange(2 * self.POINTS) % 5 - 2.0)
        self.head = nn.Linear(8 * self.POINTS, CLASSES)

    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return {
            "pixel_values": torch.randn(4, 3, 12, 12, generator=gen),
            "labels": torch.randint(0, CLASSES, (4,), generator=gen),
        }

    def grid(self, offsets: torch.Tensor) -> torch.Tensor:
        return offsets

    def logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.stem(pixel_values).relu()
        size = x.shape[-1]
        offsets = self.offsets(x.mean((-2, -1))).view(-1, 1, self.POINTS, 2)
        # reference points at pixel centres, offsets in pixels, as deformable attention samples
        centres = (torch.arange(self.POINTS, dtype=x.dtype) % size + 0.5) / size
        locations = centres.view(1, 1, -1, 1) + offsets / size
        grid = self.grid(2 * locations - 1)
        sampled = F.grid_sample(x, grid, mode="bilinear", align_corners=False)  # (B, 8, 1, P)
        return self.head(sampled.flatten(1))

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> TaskOutput:
        logits = self.logits(pixel_values)
        return TaskOutput(F.cross_entropy(logits, labels), logits)


class GridGradBug(GridSampleNet):
    """Planted: below float64 the sampling coordinates' gradient is 1% too large."""

    def grid(self, offsets: torch.Tensor) -> torch.Tensor:
        return offsets if offsets.dtype == torch.float64 else _ScaledGrad.apply(offsets, 1.01)


def grid_on_kinks(seed: int) -> TaskModel:
    return GridSampleNet(seed, on_kinks=True)


def grid_between_pixels(seed: int) -> TaskModel:
    return GridSampleNet(seed, on_kinks=False)


def grid_grad_bug(seed: int) -> TaskModel:
    return GridGradBug(seed, on_kinks=False)


def parity_case(name: str, module: str = __name__):
    """The parity case (eager fp32, 3 steps, on the CPU) of factory `name` of `module`."""
    from trainready.core.case import Case
    from trainready.core.context import CaseContext
    from trainready.core.worker import execute_case
    from trainready.suites.parity import suite as parity

    factory = f"{module}:{name}"
    params = {"source": "factory", "model": name, "factory": factory}
    params |= {"mode": "eager", "dtype": "fp32", "steps": 3}
    case = Case("parity", f"custom/{name}/eager/fp32", params)
    return execute_case(parity, case, CaseContext("cpu", "fp32", 300.0))
