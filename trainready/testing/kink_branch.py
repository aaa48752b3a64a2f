"""Many ReLU decisions within rounding of the kink, some of which another honest summation order
takes the other way: the situation of depth_pro's head on a device that rounds otherwise, built
small for the numerics rule's tests and catch table.

`NearKinkBranch(width, seed)` is a ReLU over p = a @ b (4 x N) followed by a linear map to
`width` outputs, to be added to a model's logits. One entry of each of b's N columns cancels a
row of a to within a few ulps, so p holds N decisions within rounding of the kink (more than
`suites.parity.rejudge.MAX_KINKS`, which it then does not try one by one) and O(1) entries elsewhere.
The cancelling entries are chosen so that the plain fp32 product (`torch.mm` on the CPU) takes
every one of those decisions as float64 does, while `split_k` -- the same product summed as two
halves of K, the split-K schedule of GPU GEMMs -- takes FLIPPED of them the other way. An honest
run that sums in that order (emu with the `split_k_gemm` kernel, or a test model that calls
`split_k` when compiled) then differs from the CPU's lucky run by several flipped decisions, in
`a`'s and `b`'s gradients only: p's near-kink entries are ~1e-7 either way, so the forward and
every other tensor move by rounding alone.

`synthetic_with_near_kinks(seed)` (FACTORY) is the synthetic base decoder with such a branch
added to its logits: a parity model factory, on which the catch table plants its faults too
(`testing/faults.py`), so that a fault is judged where the rule pools the honest runs because of
near-kink decisions (`suites.parity.rejudge.pooled`).
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from trainready.models import synthetic

ROWS = 4
K = 16  # the reduced dimension of a @ b
N = 16  # near-kink decisions: one per column of b
FLIPPED = 3  # of them split_k takes the other way
ULPS = 4  # how far from the exact cancellation an entry is searched, in ulps either way


def split_k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b as two halves of the reduced dimension, added: another order of the same sum."""
    half = a.shape[-1] // 2
    return a[..., :half] @ b[:half] + a[..., half:] @ b[half:]


def _ulps_away(x: torch.Tensor, n: int) -> torch.Tensor:
    toward = torch.tensor(math.copysign(math.inf, n))
    for _ in range(abs(n)):
        x = torch.nextafter(x, toward)
    return x


def _same_sign(x: float, y: float) -> bool:
    return (x > 0) == (y > 0)


def _cancel(a: torch.Tensor, b: torch.Tensor, j: int, flip: bool) -> bool:
    """Sets one entry of b's column j so that a row of a cancels the column to within a few ulps:
    a nonzero float64 product whose sign the plain fp32 product takes, and `split_k`'s too
    unless `flip` (searched over rows, the entry set and ULPS around the exact cancellation).
    Whether one was found (else the column is left as it was)."""
    col = b[:, j].clone()
    for row, at, ulps in itertools.product(range(ROWS), range(K), range(-ULPS, ULPS + 1)):
        a64, c64 = a[row].double(), col.double()
        rest = a64 @ c64 - a64[at] * c64[at]  # what the entry at `at` must cancel
        b[at, j] = _ulps_away(torch.tensor(float(-rest / a64[at]), dtype=torch.float32), ulps)
        exact = float(a64 @ b[:, j].double())
        plain, split = float((a @ b)[row, j]), float(split_k(a, b)[row, j])
        signs = _same_sign(plain, exact), _same_sign(split, exact) != flip
        if exact and plain and split and all(signs):
            return True
        b[:, j] = col
    return False


class NearKinkBranch(nn.Module):
    """ReLU(p).flatten() @ v, p = a @ b holding N near-kink decisions (module docstring);
    `forward(p)` takes p computed otherwise (`split_k`)."""

    def __init__(self, width: int, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(ROWS, K, generator=gen)
        b = torch.randn(K, N, generator=gen)
        flipped = 0
        for j in range(N):  # FLIPPED columns that split_k flips (where it can), then the rest
            if flipped < FLIPPED and _cancel(a, b, j, flip=True):
                flipped += 1
            elif not _cancel(a, b, j, flip=False):
                raise AssertionError(f"seed {seed}: no cancelling entry for column {j}")
        if flipped < FLIPPED:
            raise AssertionError(f"seed {seed}: split_k flips {flipped} decisions, not {FLIPPED}")
        self.a, self.b = nn.Parameter(a), nn.Parameter(b)
        self.v = nn.Parameter(torch.randn(ROWS * N, width, generator=gen) * 0.1)
        self.kink = nn.ReLU()

    def forward(self, p: torch.Tensor | None = None) -> torch.Tensor:
        p = self.a @ self.b if p is None else p
        return self.kink(p).flatten() @ self.v


FACTORY = "trainready.testing.kink_branch:synthetic_with_near_kinks"


class _WithNearKinks(nn.Module):
    """A model's logits plus a NearKinkBranch's."""

    def __init__(self, model: nn.Module, seed: int):
        super().__init__()
        self.model = model
        self.near_kinks = NearKinkBranch(synthetic.VOCAB_SIZE, seed)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids) + self.near_kinks()


def synthetic_with_near_kinks(seed: int = 0) -> nn.Module:
    """The synthetic base decoder (`synthetic.build`, so the catch table's model faults plant in
    it as in the base case), its logits plus a NearKinkBranch's (a parity model factory:
    `--set models=trainready.testing.kink_branch:synthetic_with_near_kinks`)."""
    model = _WithNearKinks(synthetic.build({}, seed), seed)
    model.vocab_size, model.seq_len = synthetic.VOCAB_SIZE, synthetic.SEQ_LEN
    model.traits = synthetic.traits({})
    return model
