"""The CPU's fp32 baseline over grid sampling (`probes/perturb.py`, `_grid_sampler`): the
sampling coordinates moved by an ulp are the plain op up to rounding, two seeds move them apart,
and a deformable-sampling net whose coordinates sit on pixel boundaries (bilinear's kinks, as
deformable DETR starts) passes clean, while a 1% error in the coordinates' gradient fails."""

from __future__ import annotations

import torch

from tests.support.perturb_conv_models import parity_case
from trainready.probes.perturb import IndependentRounding

aten = torch.ops.aten


def _inputs(dtype: torch.dtype, on_kinks: bool):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, generator=g)
    if on_kinks:  # align_corners=True: -1 + 2k/7 is pixel k, a kink of the bilinear weights
        grid = (torch.randint(0, 8, (2, 5, 5, 2), generator=g) * 2 / 7 - 1).double()
    else:
        grid = torch.rand(2, 5, 5, 2, dtype=torch.float64, generator=g) * 1.8 - 0.9
    grad = torch.randn(2, 3, 5, 5, dtype=torch.float64, generator=g)
    return x.to(dtype), grid.to(dtype), grad.to(dtype)


def _run(dtype: torch.dtype, seed: int | None, on_kinks: bool = False):
    x, grid, grad = _inputs(dtype, on_kinks)
    fwd = (x, grid, 0, 0, True)
    bwd = (grad, x, grid, 0, 0, True, [True, True])
    mode = None
    if seed is not None:
        mode = IndependentRounding("fp32", seed)
        mode.targets = (dtype,)  # float64 too: a moved coordinate is the plain op up to rounding
    with mode or torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        out = aten.grid_sampler_2d.default(*fwd)
        grad_input, grad_grid = aten.grid_sampler_2d_backward.default(*bwd)
    return [out, grad_input, grad_grid], mode


def test_moved_coordinates_are_the_plain_op_up_to_rounding_and_two_seeds_move_them_apart():
    plain, _ = _run(torch.float64, None)
    moved, mode = _run(torch.float64, seed=1)
    assert mode.counts == {"grid": 2}
    for p, m in zip(plain, moved, strict=True):
        assert m.shape == p.shape and m.dtype == p.dtype
        assert (m - p).abs().max() <= 1e-14 * max(p.abs().max(), 1.0)
    one, _ = _run(torch.float32, seed=1)
    two, _ = _run(torch.float32, seed=2)
    assert all(not torch.equal(a, b) for a, b in zip(one, two, strict=True))


def test_on_a_kink_the_seeds_take_either_slope_as_float64_may():
    """A coordinate on a pixel boundary: its gradient is one side's slope or the other's. The
    plain op always takes the same side; the moved runs take both, as any run that rounds the
    coordinate independently would -- O(1) apart, not an ulp."""
    plain, _ = _run(torch.float32, None, on_kinks=True)
    grads = [_run(torch.float32, seed, on_kinks=True)[0][2] for seed in (1, 2)]
    jump = (grads[0] - grads[1]).abs().max()
    assert jump > 1e-2 * plain[2].abs().max()


def test_sampling_on_kinks_passes_clean_and_a_1pct_coordinate_gradient_error_fails():
    """With every run sampling the same float32 coordinates, the clean net on kinks failed (its
    offsets' gradients far past the runs' spread); a wrong grid_sample backward (the coordinates'
    gradient 1% too large below float64) on a net sampling between pixels must still fail."""
    for name in ("grid_on_kinks", "grid_between_pixels"):
        clean = parity_case(name)
        assert clean.status == "pass", (name, clean.diagnostics.get("error"))
    bug = parity_case("grid_grad_bug")
    assert bug.status == "fail_numerics"
    assert bug.diagnostics["error"].startswith("offsets.")
