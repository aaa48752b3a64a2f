"""The library zoos' helpers: float32 upcasts kept float64 in the reference (models/zoo/float64.py)
and dropout zeroed (models/zoo/determinism.py)."""

from __future__ import annotations

import torch
from torch import nn

from trainready.models.zoo.determinism import zero_dropout
from trainready.models.zoo.float64 import float32_as_float64, float_dtypes, is_float64


def _upcasts(x: torch.Tensor) -> list[torch.Tensor]:
    """The ways library code writes 'in float32'."""
    return [
        x.float(),
        x.to(torch.float32),
        x.to(dtype=torch.float32),
        x.type(torch.float32),
        torch.arange(3, dtype=torch.float32),
        torch.zeros(2, dtype=torch.float32),
        x[:, None].float() * torch.ones(1, dtype=torch.float32),
    ]


def test_float32_casts_give_float64_when_active():
    x = torch.ones(2, dtype=torch.float64)
    with float32_as_float64(True):
        assert {t.dtype for t in _upcasts(x)} == {torch.float64}
        assert x.half().dtype == torch.float16  # only float32 is widened
    assert {t.dtype for t in _upcasts(x)} == {torch.float32}  # the mode is gone after


def test_inactive_changes_nothing():
    x = torch.ones(2, dtype=torch.float32)
    with float32_as_float64(False):
        assert {t.dtype for t in _upcasts(x)} == {torch.float32}


def test_recorded_dtypes_name_the_first_op():
    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    seen = float_dtypes(lambda: (x.float() * 2).sum().backward())
    assert set(seen) == {torch.float32, torch.float64}
    assert "_to_copy" in seen[torch.float32]
    assert set(float_dtypes(lambda: (x * 2).sum().backward())) == {torch.float64}


def test_is_float64():
    assert is_float64(nn.Linear(2, 2).double()) and not is_float64(nn.Linear(2, 2))
    assert not is_float64(nn.ReLU())


class _Labels(nn.Module):
    """A module with a hard-coded drop probability, as diffusers' LabelEmbedding."""

    def __init__(self) -> None:
        super().__init__()
        self.dropout_prob = 0.1


def test_zero_dropout_reaches_hard_coded_probabilities():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.3), _Labels(), nn.Dropout(0.0))
    assert zero_dropout(model) == ["1.p", "2.dropout_prob"]
    assert model[1].p == 0.0 and model[2].dropout_prob == 0.0
    x = torch.randn(8, 4)
    model.train()
    assert torch.equal(model[:2](x), model[:2](x))  # train mode, nothing dropped
