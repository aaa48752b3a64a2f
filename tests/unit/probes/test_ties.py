"""Tied parameters a move to the device comes apart (`probes/ties.py`): found on a module whose
tie was broken the way Module.to breaks it on a PrivateUse1 backend (a new Parameter per module),
and not on a module whose ties hold or that has none."""

import torch
from torch import nn

from trainready.probes.ties import broken_ties, describe, move, tied_groups


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.other = nn.Linear(4, 4)


def _untie_like_module_apply(model: nn.Module) -> None:
    """What Module._apply does when shallow copies are incompatible: each module's parameter
    replaced by a new Parameter of the moved tensor."""
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[key] = nn.Parameter(p.detach().clone())


def test_a_tie_is_found_and_a_broken_one_is_named():
    model = Tied()
    groups = tied_groups(model)
    assert groups == [("embed.weight", "head.weight")]
    assert broken_ties(groups, model) == []
    _untie_like_module_apply(model)
    broken = broken_ties(groups, model)
    assert broken == [("embed.weight", "head.weight")]
    line = describe(broken, "emu")
    assert "embed.weight = head.weight" in line and ".to('emu')" in line


def test_a_move_that_keeps_parameters_keeps_ties():
    model = Tied()
    groups = tied_groups(model)
    model.to(torch.float64)  # the CPU's tensors are shallow-copy compatible: same Parameters
    assert broken_ties(groups, model) == []


def test_a_model_without_ties_has_no_groups():
    assert tied_groups(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))) == []


def test_move_reports_no_broken_tie_on_the_cpu():
    model, broken = move(Tied(), "cpu")
    assert broken == [] and model.head.weight is model.embed.weight
