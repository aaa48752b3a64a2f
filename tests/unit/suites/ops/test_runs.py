"""One sample run in a case's form: the out= form's unwritten fill."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from trainready.suites.ops import runs


class _Sample(SimpleNamespace):
    broadcasts_input = False

    def transform(self, f):
        return self


def _out_form(fn, like):
    op = SimpleNamespace(op=fn)
    return runs.out_form(op, _Sample(input=torch.ones(3), args=(), kwargs={}), like)


def test_an_op_that_leaves_out_alone_shows_the_fill_every_time():
    def writes(x, out):
        return out.copy_(x * 2)

    def ignores(x, out):
        return out

    like = torch.zeros(3)
    assert torch.equal(_out_form(writes, like), torch.full((3,), 2.0))
    assert torch.isnan(_out_form(ignores, like)).all()
    ranks = _out_form(ignores, torch.zeros((), dtype=torch.int64))
    assert ranks.item() == torch.iinfo(torch.int64).max
    assert not math.isnan(_out_form(writes, like).sum().item())
