"""The CPU's fp32 baseline over scans and triangular solves (`probes/perturb.py`, `_cumsum`,
`_solve_triangular`): the blocked forms are the plain ops up to float64 rounding, two seeds round
apart, and their spread measures what a plain fp32 run's own rounding is worth; a gated-decay
scan net (a linear-attention layer's cumsum, pairwise decays and UT solve) passes clean, and its
decays' gradient 1% too large fails."""

from __future__ import annotations

import pytest
import torch

from tests.support.perturb_conv_models import parity_case
from trainready.probes.perturb import IndependentRounding

MODELS = "tests.support.perturb_scan_models"


def _float64_mode(seed: int) -> IndependentRounding:
    mode = IndependentRounding("fp32", seed)
    mode.targets = (torch.float64,)  # exactness: the reordered op in float64
    return mode


def _rms(t: torch.Tensor) -> float:
    return t.double().pow(2).mean().sqrt().item()


def test_a_blocked_cumsum_is_the_plain_scan_up_to_rounding_and_seeds_round_apart():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4096, dtype=torch.float64, generator=g)
    with _float64_mode(1) as mode:
        blocked = x.cumsum(1)
    assert mode.counts == {"scan": 1}
    assert (blocked - x.cumsum(1)).abs().max() <= 1e-12 * x.cumsum(1).abs().max()
    runs = []
    for seed in (1, 2):
        with IndependentRounding("fp32", seed):
            runs.append(x.float().cumsum(1))
    spread = _rms(runs[0] - runs[1]) / 2**0.5
    plain = _rms(x.float().cumsum(1).double() - x.cumsum(1))
    # the spread measures a sequential scan's error (without the reorder both seeds agree
    # exactly: the same float32 inputs, scanned the same way)
    assert 0.3 < plain / spread < 3.0


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [True, False])
def test_a_block_substitution_solves_the_same_system(upper, left, unit):
    g = torch.Generator().manual_seed(0)
    a = 0.1 * torch.randn(2, 48, 48, dtype=torch.float64, generator=g) + 2 * torch.eye(48)
    a = a.triu() if upper else a.tril()
    b = torch.randn(2, 48, 5, dtype=torch.float64, generator=g)
    b = b if left else b.mT
    kw = {"upper": upper, "left": left, "unitriangular": unit}
    plain = torch.linalg.solve_triangular(a, b, **kw)
    with _float64_mode(1) as mode:
        blocked = torch.linalg.solve_triangular(a, b, **kw)
    assert mode.counts == {"solve": 1}
    assert (blocked - plain).abs().max() <= 1e-13 * plain.abs().max()
    runs = []
    for seed in (1, 2):
        with IndependentRounding("fp32", seed):
            runs.append(torch.linalg.solve_triangular(a.float(), b.float(), **kw))
    assert not torch.equal(runs[0], runs[1])


def test_a_decay_scan_net_passes_clean_and_its_decay_gradient_1pct_too_large_fails():
    clean = parity_case("scan", MODELS)
    assert clean.status == "pass", clean.diagnostics.get("error")
    counts = clean.diagnostics["independent_rounding"]
    assert counts["scan"] > 0 and counts["solve"] > 0
    bug = parity_case("scan_grad_bug", MODELS)
    assert bug.status == "fail_numerics"
    assert bug.diagnostics["error"].startswith("gate.")
