"""`probes/intercept.py`: Python kernels for the named ops only, recorded by autograd as the ops
themselves, the backward's ops intercepted in turn (a boxed-fallback autograd kernel's too), the
registration gone after the block; and `IndependentRounding`'s fp32 runs through it agree bit for
bit with the same runs through a dispatch mode over every op."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from trainready.probes.intercept import intercept
from trainready.probes.perturb import IndependentRounding

aten = torch.ops.aten


def _counting(seen: Counter, scale: float = 1.0):
    def handler(op, args, kwargs):
        seen[str(op)] += 1
        out = op(*args, **kwargs)
        return out * scale if scale != 1.0 else out

    return handler


def test_only_the_named_ops_reach_the_handler_and_autograd_records_the_op_itself():
    seen = Counter()
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 3, requires_grad=True)
    with intercept({aten.mm.default: _counting(seen)}):
        y = x @ w
        assert type(y.grad_fn).__name__ == "MmBackward0"  # not the handler's own ops
        (y.relu() + 1).sum().backward()
    # forward mm, and the backward's two (grad_x = g @ w^T, grad_w = x^T @ g); nothing else
    assert seen == {"aten.mm.default": 3}


def test_a_handler_that_changes_the_result_changes_outputs_and_gradients():
    """A planted fault: the handler doubles mm's result. Forward and both gradients see it."""
    x0 = torch.randn(4, 8)
    w0 = torch.randn(8, 3)

    def run(scale: float):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        with intercept({aten.mm.default: _counting(Counter(), scale)}):
            y = x @ w
            y.sum().backward()
        return y.detach(), x.grad, w.grad

    plain, doubled = run(1.0), run(2.0)
    # the output x2 (the forward mm); each gradient x2 (the backward's own mm: autograd records
    # mm, not the handler, so its backward runs mm again, intercepted)
    for a, b in zip(plain, doubled, strict=True):
        torch.testing.assert_close(b, 2 * a)


def test_a_backward_op_with_a_boxed_autograd_fallback_is_intercepted():
    """native_group_norm_backward's autograd kernel is the boxed fallback, which skips the
    ADInplaceOrView key: it is handled at the CPU's autograd key instead."""
    seen = Counter()
    x = torch.randn(2, 8, 5, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    ops = {aten.native_group_norm.default, aten.native_group_norm_backward.default}
    with intercept(dict.fromkeys(ops, _counting(seen))):
        F.group_norm(x, 2, w, b).pow(2).sum().backward()
    assert seen == {
        "aten.native_group_norm.default": 1,
        "aten.native_group_norm_backward.default": 1,
    }


def test_higher_order_operators_still_run_inside_the_block():
    """An autograd.Function under torch.func.grad is a higher-order operator (it found no kernel
    when a key above autograd was put in the include set: HF unlimited_ocr's towers)."""

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    with intercept({aten.mm.default: _counting(Counter())}):
        grad = torch.func.grad(lambda t: Square.apply(t).sum())(torch.ones(3))
    assert torch.equal(grad, torch.full((3,), 2.0))


def test_the_registration_is_gone_after_the_block_even_when_it_raises():
    seen = Counter()
    a = torch.randn(3, 3)
    with (
        pytest.raises(RuntimeError, match="planted"),
        intercept({aten.mm.default: _counting(seen)}),
    ):
        a @ a
        raise RuntimeError("planted")
    a @ a
    assert seen == {"aten.mm.default": 1}
    with intercept({aten.mm.default: _counting(seen)}):  # and it can be registered again
        a @ a
    assert seen == {"aten.mm.default": 2}


class _EveryOp(IndependentRounding):
    """The same rounding through a dispatch mode over every op (the path before `intercept`)."""

    def __enter__(self):
        return TorchDispatchMode.__enter__(self)

    def __exit__(self, *exc):
        return TorchDispatchMode.__exit__(self, *exc)


def _net_step(mode: IndependentRounding) -> list[torch.Tensor]:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    norm = torch.nn.GroupNorm(2, 8)
    head = torch.nn.Linear(8 * 6 * 6, 5)
    x = torch.randn(2, 3, 6, 6)
    params = [*conv.parameters(), *norm.parameters(), *head.parameters()]
    with mode:
        h = F.layer_norm(norm(conv(x)).relu().flatten(1), (8 * 6 * 6,))
        loss = F.cross_entropy(head(h), torch.tensor([1, 3])) + h.cumsum(1).mean()
        loss.backward()
    return [loss.detach(), *(p.grad for p in params)]


@pytest.mark.parametrize("seed", [1, 2])
def test_independent_rounding_through_intercept_is_the_dispatch_mode_run_bit_for_bit(seed):
    fast, every = IndependentRounding("fp32", seed), _EveryOp("fp32", seed)
    a, b = _net_step(fast), _net_step(every)
    assert fast.counts == every.counts
    assert {"gemm", "sum", "conv", "norm", "scan", "softmax"} <= set(fast.counts)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
