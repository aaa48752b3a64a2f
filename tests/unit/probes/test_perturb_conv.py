"""The CPU's fp32 baseline over convolutions and batch/group norms (`probes/perturb.py`): each op
run with its sums in another order is the plain op up to rounding, two seeds round it
differently, and a conv net's parity case passes clean and fails with a 1% weight-gradient error."""

from __future__ import annotations

import pytest
import torch

from tests.support.perturb_conv_models import parity_case
from trainready.probes.perturb import IndependentRounding

aten = torch.ops.aten
MASK = [True, True, True]


def _conv(transposed: bool, groups: int, dims: int = 2):
    """(forward args, backward args) of a strided, padded convolution: 8 -> 12 channels."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, *(9,) * dims, dtype=torch.float64, generator=g)
    shape = (8, 12 // groups) if transposed else (12, 8 // groups)
    w = torch.randn(*shape, *(3,) * dims, dtype=torch.float64, generator=g)
    conf = ([2] * dims, [1] * dims, [1] * dims, transposed, [1 if transposed else 0] * dims, groups)
    fwd = (x, w, torch.randn(12, dtype=torch.float64, generator=g), *conf)
    grad = torch.randn_like(aten.convolution.default(*fwd))
    return fwd, (grad, x, w, [12], *conf, MASK)


def _norm_inputs():
    g = torch.Generator().manual_seed(1)
    x, grad = (torch.randn(4, 8, 5, 6, dtype=torch.float64, generator=g) for _ in range(2))
    w, b = (torch.randn(8, dtype=torch.float64, generator=g) for _ in range(2))
    return x, grad, w, b


def _cases():
    """(id, op, args, the kind it counts as)."""
    for transposed, groups, dims in [(False, 1, 2), (False, 2, 2), (False, 4, 1), (True, 2, 2)]:
        fwd, bwd = _conv(transposed, groups, dims)
        name = f"{'transposed' if transposed else 'conv'}{dims}d-groups{groups}"
        yield f"{name}-forward", aten.convolution.default, fwd, "conv"
        yield f"{name}-backward", aten.convolution_backward.default, bwd, "conv"
    x, grad, w, b = _norm_inputs()
    stats = torch.zeros(8, dtype=torch.float64), torch.ones(8, dtype=torch.float64)
    mean, invstd = x.mean((0, 2, 3)), x.var((0, 2, 3)).add(1e-5).rsqrt()
    backward = (grad, x, w, *stats, mean, invstd, True, 1e-5, MASK)
    yield "batch_norm-backward", aten.native_batch_norm_backward.default, backward, "norm"
    reserve = torch.empty(0, dtype=torch.uint8)
    yield "batch_norm_backward", aten.batch_norm_backward.default, (*backward, reserve), "norm"
    gn = (x, w, b, 4, 8, 30, 2, 1e-5)
    yield "group_norm", aten.native_group_norm.default, gn, "norm"
    _, gmean, grstd = aten.native_group_norm.default(*gn)
    gn_back = (grad, x, gmean, grstd, w, 4, 8, 30, 2, MASK)
    yield "group_norm-backward", aten.native_group_norm_backward.default, gn_back, "norm"
    # layer norm over the last two dims of (4, 8, 5, 6): rows (4, 8), normalized (5, 6)
    lw, lb = (torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator()) for _ in "wb")
    ln = (x, [5, 6], lw, lb, 1e-5)
    yield "layer_norm", aten.native_layer_norm.default, ln, "norm"
    _, lmean, lrstd = aten.native_layer_norm.default(*ln)
    ln_back = (grad, x, [5, 6], lmean, lrstd, lw, lb, MASK)
    yield "layer_norm-backward", aten.native_layer_norm_backward.default, ln_back, "norm"
    # softmax family along dim 1 (8 entries): forward, backward (grad, output, dim, dtype)
    for op, back in (
        (aten._softmax.default, aten._softmax_backward_data.default),
        (aten._log_softmax.default, aten._log_softmax_backward_data.default),
    ):
        name = op.name().split("::")[1]
        out = op(x, 1, False)
        yield name, op, (x, 1, False), "softmax"
        yield f"{name}-backward", back, (grad, out, 1, torch.float64), "softmax"
    yield "logsumexp", aten.logsumexp.default, (x, [1, 3], False), "softmax"


CASES = list(_cases())


def _outputs(out) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if t is not None]


def _cloned(args: tuple, dtype: torch.dtype) -> tuple:
    """The args at `dtype`, copied (batch norms update their running statistics in place)."""
    return tuple(
        a.to(dtype, copy=True) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
        for a in args
    )


def _reordered(op, args: tuple, dtype: torch.dtype, seed: int) -> tuple[list, IndependentRounding]:
    mode = IndependentRounding("fp32", seed)
    mode.targets = (dtype,)  # float64 too: the reordering is exact, so the results must agree
    with mode:
        out = op(*args)
    return _outputs(out), mode


@pytest.mark.parametrize(("op", "args", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_reordered_op_is_the_plain_op_up_to_rounding_and_two_seeds_round_it_apart(op, args, kind):
    plain = _outputs(op(*_cloned(args, torch.float64)))
    reordered, mode = _reordered(op, _cloned(args, torch.float64), torch.float64, seed=1)
    assert mode.counts == {kind: 1}
    assert len(reordered) == len(plain)
    for p, r in zip(plain, reordered, strict=True):
        assert r.shape == p.shape and r.dtype == p.dtype
        assert (r - p).abs().max() <= 1e-14 * max(p.abs().max(), 1.0)
    # fp32: the output each sum makes (output 0, the gradient of the input or the normed tensor)
    # rounds differently under two seeds
    one, _ = _reordered(op, _cloned(args, torch.float32), torch.float32, seed=1)
    two, _ = _reordered(op, _cloned(args, torch.float32), torch.float32, seed=2)
    assert not torch.equal(one[0], two[0])
    if len(one) == 3 and one[1].shape != one[0].shape[1:2]:  # and a weight gradient, summed
        assert not torch.equal(one[1], two[1])  # over the batch (or the rows)


def test_what_has_no_sum_to_reorder_runs_as_the_plain_op():
    """A depthwise convolution that cannot be mirrored (its last stride-2 window stops short of
    the input's end, so its kernel's sum stays in order: "passed") and a batch norm's forward
    give the plain op's bits: the CPU sums a batch norm's statistics in float64 (its float32
    mean is float64's, rounded once), so no order of that sum rounds differently."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 4, 6, 6, generator=g), torch.randn(4, 1, 3, 3, generator=g)
    depthwise = (x, w, None, [2, 2], [0, 0], [1, 1], False, [0, 0], 4)
    out, mode = _reordered(aten.convolution.default, depthwise, torch.float32, seed=1)
    assert torch.equal(out[0], aten.convolution.default(*depthwise))
    assert mode.counts == {"passed": 1}
    x = torch.randn(16, 4, 32, 32, generator=g) * 3 + 1
    normed = (x, None, None, torch.zeros(4), torch.ones(4), True, 0.1, 1e-5)
    out, mode = _reordered(aten.native_batch_norm.default, normed, torch.float32, seed=1)
    assert torch.equal(out[0], aten.native_batch_norm.default(*normed)[0])
    assert not mode.counts
    assert torch.equal(out[1], x.double().mean((0, 2, 3)).float())
    assert not torch.equal(x.mean((0, 2, 3)), out[1])  # a float32 sum would not be


@pytest.mark.parametrize("stride", [1, 2])
def test_a_mirrored_depthwise_conv_is_the_plain_op_and_two_seeds_mirror_it_differently(stride):
    """A depthwise convolution has no channel sum to reorder: mirroring its spatial dimensions
    (conv(flip(x), flip(w)) = flip(conv(x, w)) where its last window ends on the padded input's
    end: stride 1, or stride 2 on 9 + 2 - 2 - 1 = 8 positions) reverses its kernel's sum and its
    backward's sums over the output positions. Consecutive seeds never mirror a call alike."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64, generator=g)
    w = torch.randn(4, 1, 3, 3, dtype=torch.float64, generator=g)
    conf = ([stride] * 2, [1, 1], [1, 1], False, [0, 0], 4)
    fwd = (x, w, torch.randn(4, dtype=torch.float64, generator=g), *conf)
    grad = torch.randn_like(aten.convolution.default(*fwd)) + 3  # a mean: long sums round
    bwd = (grad, x, w, [4], *conf, MASK)
    for op, args in ((aten.convolution.default, fwd), (aten.convolution_backward.default, bwd)):
        plain = _outputs(op(*args))
        outs = {}
        for seed in (1, 2):
            exact, mode = _reordered(op, _cloned(args, torch.float64), torch.float64, seed)
            for p, r in zip(plain, exact, strict=True):
                assert (r - p).abs().max() <= 1e-14 * max(p.abs().max(), 1.0)
            outs[seed], mode32 = _reordered(op, _cloned(args, torch.float32), torch.float32, seed)
        # the backward also permutes the batch; the forward is mirrored by one seed at least
        assert not torch.equal(outs[1][0], outs[2][0])


@pytest.mark.parametrize(
    ("transposed", "stride", "dilation", "size"),
    [(True, 2, 1, 9), (False, 2, 2, 10), (False, 3, 1, 11), (False, 1, 2, 7), (False, [2], [1], 9)],
)
def test_mirroring_a_strided_dilated_or_transposed_conv_is_exact(
    transposed, stride, dilation, size
):
    """Where `_flips` mirrors (transposed without output padding; a last window that ends on the
    padded input's end), the result is the plain op's up to rounding, for every pattern; stride,
    padding and dilation may come as one-entry lists (HF efficientnet's convolutions do)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, size, size + 1, dtype=torch.float64, generator=g)
    w = torch.randn(4, 6, 3, 2, dtype=torch.float64, generator=g)  # (C_in, C_out) or (C_out, C_in)
    if not transposed:
        w = w.transpose(0, 1).contiguous()
    if isinstance(stride, list):  # one-entry lists, which aten expands to every dimension
        conf = (stride, [1], dilation, transposed, [0], 1)
    else:
        conf = ([stride] * 2, [1, 1], [dilation] * 2, transposed, [0, 0], 1)
    fwd = (x, w, None, *conf)
    grad = torch.randn_like(aten.convolution.default(*fwd))
    bwd = (grad, x, w, None, *conf, [True, True, False])
    for op, args in ((aten.convolution.default, fwd), (aten.convolution_backward.default, bwd)):
        plain = _outputs(op(*args))
        for seed in range(1, 5):  # consecutive seeds: every mirroring pattern of the eligible dims
            exact, _ = _reordered(op, _cloned(args, torch.float64), torch.float64, seed)
            for p, r in zip(plain, exact, strict=True):
                assert r.shape == p.shape
                assert (r - p).abs().max() <= 1e-14 * max(p.abs().max(), 1.0)


def test_a_channels_last_net_keeps_its_layout_and_its_results():
    """Reordering copies contiguously; a channels-last activation stays channels-last (code may
    view it so), with the plain run's values up to rounding."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(4, 8, 3, groups=2), torch.nn.BatchNorm2d(8), torch.nn.GroupNorm(2, 8)
    )
    net = net.double().to(memory_format=torch.channels_last)
    x = torch.randn(3, 4, 9, 9, dtype=torch.float64).to(memory_format=torch.channels_last)
    weights = torch.randn(3, 8, 7, 7, dtype=torch.float64)

    def run() -> list[torch.Tensor]:
        net.zero_grad()
        xg = x.clone().requires_grad_()
        y = net(xg)
        (y * weights).sum().backward()
        return [y.detach(), xg.grad, net[0].weight.grad, net[2].weight.grad]

    plain = run()
    mode = IndependentRounding("fp32", seed=1)
    mode.targets = (torch.float64,)
    with mode:
        reordered = run()
    assert mode.counts["conv"] == 2 and mode.counts["norm"] == 3
    assert reordered[0].is_contiguous(memory_format=torch.channels_last)
    for p, r in zip(plain, reordered, strict=True):
        assert (r - p).abs().max() <= 1e-14 * p.abs().max()


def test_a_clean_conv_net_passes_on_the_cpu_and_a_1pct_conv_gradient_error_fails():
    """Conv, batch norm, grouped conv, group norm, depthwise and transposed conv, eager fp32 on
    the CPU: with the convolutions and norms summed in fixed order in both estimating runs, their
    shared rounding was missing from the noise and the clean net failed (up.weight.grad 2.1x)."""
    clean = parity_case("clean")
    assert clean.status == "pass", clean.diagnostics.get("error")
    bug = parity_case("conv_grad_bug")
    assert bug.status == "fail_numerics"
    assert bug.diagnostics["error"].startswith("grouped.weight.grad rmse ratio")
