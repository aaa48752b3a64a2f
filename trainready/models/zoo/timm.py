"""The timm zoo: timm's `test_*` models (tiny, built for timm's own CI) as image classifiers.

Each model is built with random weights (never downloaded) and `NUM_CLASSES` classes, fed a batch
of `BATCH` random images of the model's default input size, and trained on cross-entropy against
fixed random labels; the logits are the compared output. Dropout is zeroed after building.

timm needs torchvision at import time (`timm.layers` imports `FrozenBatchNorm2d` from
`torchvision.ops.misc`, and its `_fx` the feature extractor, guarding only ImportError;
`timm.data` imports `torchvision.transforms`); the models use no
torchvision op. PyPI's torchvision wheels are CUDA builds: beside a CPU torch their C++ extension
does not load, which torchvision tolerates (`extension._has_ops()` is False, its ops then raise)
except for two unguarded fake-kernel registrations, so `import torchvision` fails with "operator
torchvision::nms does not exist" (pytorch/vision#9085). `import_timm` then declares those two op
schemas -- no kernel: calling them still fails -- and imports again. torchvision's CPU build
(https://download.pytorch.org/whl/cpu) needs none of this.

    model_names()        -> timm's test_* models, sorted
    build(name, seed=0)  -> TimmClassifier, a TaskModel (modality "vision")
    traits(name)         -> family, norm, attention
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F

from trainready.models.task import TaskModel, TaskOutput
from trainready.models.zoo.determinism import zero_dropout
from trainready.models.zoo.float64 import float32_as_float64, is_float64
from trainready.models.zoo.optional import mend_torchvision, the_library

BATCH = 2
NUM_CLASSES = 4

# Normalisation layer classes (BatchNormAct2d, LayerNorm2d, EvoNorm2dS0, RmsNorm...), lower case;
# not the conv-norm-act blocks that hold one.
_NORM_CLASS = re.compile(r"^(?!conv)[a-z]*norm(act)?([123]d)?(s\d)?$")


def import_timm() -> Any:
    """timm, imported (its torchvision mended where the extension does not load:
    `optional.mend_torchvision`); ImportError with the reason when it cannot be."""
    mend_torchvision()
    try:
        import timm
    except ImportError as e:
        raise ImportError(f"timm does not import: {e} (pip install -e '.[timm]')") from e
    except Exception as e:  # noqa: BLE001 - any failure is the reason timm is unavailable
        raise ImportError(f"timm does not import: {type(e).__name__}: {e}") from e
    try:
        return the_library(timm)
    except ImportError as e:
        raise ImportError(f"timm does not import: {e}") from e


def model_names() -> list[str]:
    """timm's test_* models (ImportError when timm does not import)."""
    return sorted(import_timm().list_models("test_*"))


class TimmClassifier(TaskModel):
    """A timm model trained on image classification: pixel_values [B, 3, H, W] -> logits."""

    modality = "vision"

    def __init__(self, model: torch.nn.Module, name: str):
        super().__init__()
        self.model = model
        self.name = name
        self.traits = traits(name, model)
        self.input_size = tuple(model.pretrained_cfg["input_size"])

    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return {
            "pixel_values": torch.randn(BATCH, *self.input_size, generator=gen),
            "labels": torch.randint(0, NUM_CLASSES, (BATCH,), generator=gen),
        }

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> TaskOutput:
        with float32_as_float64(is_float64(self)):
            logits = self.model(pixel_values)
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return TaskOutput(F.cross_entropy(wide, labels), logits)


def build(name: str, seed: int = 0) -> TimmClassifier:
    """The test model with seeded random weights, in float32 on the CPU; ValueError for a name
    that is not one of `model_names()`."""
    timm = import_timm()
    if name not in timm.list_models("test_*"):
        raise ValueError(f"{name!r} is not a timm test model; one of: {', '.join(model_names())}")
    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False, num_classes=NUM_CLASSES)
    zero_dropout(model)  # test_vit_relpos's position MLP drops at 0.125 whatever drop_rate says
    return TimmClassifier(model.float(), name)


def traits(name: str, model: torch.nn.Module | None = None) -> dict[str, str]:
    """What the architecture is, to group results by: its timm family (the module defining it),
    its normalisation layers and whether it has attention."""
    if model is None:
        model = import_timm().create_model(name, pretrained=False, num_classes=NUM_CLASSES)
    kinds = {type(m).__name__.lower() for m in model.modules()}
    norms = sorted({k.replace("act", "") for k in kinds if _NORM_CLASS.match(k)} or {"none"})
    attention = any("attention" in k or k.endswith("attn") for k in kinds)
    return {
        "family": type(model).__module__.rsplit(".", 1)[-1],
        "norm": "+".join(norms),
        "attention": "attention" if attention else "none",
    }
