"""The watch must not change what it watches: `mode_changes` tells where it would."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from trainready.suites.ops.watch import mode_changes


def test_a_result_that_changes_under_a_dispatch_mode_is_told_and_a_plain_one_is_not():
    x = torch.arange(4.0)

    def plain():
        return [x * 2, torch.tensor(float("nan"))]

    def mode_sensitive():  # what torch 2.13's linalg.matrix_rank(out=) does under any mode
        return [x * 2 if _get_current_dispatch_mode() is None else torch.zeros(4)]

    assert not mode_changes(plain, plain())  # NaN equals NaN: not a change
    assert mode_changes(mode_sensitive, mode_sensitive())
