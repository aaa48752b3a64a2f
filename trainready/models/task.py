"""A task model: any trainable architecture with its own loss, fed one fixed synthetic batch.

The parity engine trains every model that is not a plain causal LM through this one contract,
whatever its modality (encoder, seq2seq, vision, audio, video, multimodal, diffusion):

    class MyTask(TaskModel):
        def make_batch(self, seed: int) -> dict[str, Tensor]   # CPU tensors, float ones float32
        def forward(self, **batch) -> TaskOutput               # the loss and the output to compare

`forward` computes the loss the model trains on (masked-LM cross-entropy, CTC, noise-prediction
MSE after a scheduler's `add_noise`...) in at least float32 and never with `.float()`, which would
drop the float64 reference to float32. `TaskOutput.output` is the tensor compared as "logits".
Floating inputs follow the run's parameter dtype (`cast_batch`): float64 for the reference,
float32 otherwise (autocast does the rest); integer inputs (ids, labels, timesteps) pass as they are.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class TaskOutput:
    loss: torch.Tensor  # scalar
    output: torch.Tensor  # the model's main output (logits, predicted noise...)


class TaskModel(nn.Module, abc.ABC):
    """Base class of a task model: a subclass that leaves out `make_batch` or `forward` cannot
    be instantiated (abstract methods)."""

    traits: dict[str, str] = {}
    modality: str = "unknown"

    @abc.abstractmethod
    def make_batch(self, seed: int) -> dict[str, torch.Tensor]:
        """The fixed synthetic batch for `seed`: CPU tensors, floating ones in float32."""

    @abc.abstractmethod
    def forward(self, **batch: torch.Tensor) -> TaskOutput:  # type: ignore[override]
        """The loss the model trains on and the output compared as "logits"."""


def cast_batch(
    batch: dict[str, torch.Tensor], device: str | torch.device, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """The batch on `device`, its floating tensors in `dtype` (the parameters' dtype)."""
    return {
        k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
        for k, v in batch.items()
    }
