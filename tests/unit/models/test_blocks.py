"""Decoder blocks: each piece against a hand-written reference or a property it must have."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainready.core.config import ConfigError
from trainready.models.blocks import (
    Decoder,
    DecoderConfig,
    LayerNorm,
    MoE,
    RMSNorm,
    alibi_slopes,
    apply_rope,
    attend,
    attention_mask,
    num_params,
    rope_cache,
)
from trainready.models.specs import ModelSpec


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny tensors: more threads only add contention on a shared machine. (The other
    # test_models_* modules import this fixture.)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _qkv(heads=2, seq=6, dim=8, dtype=torch.float64, seed=0, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(1, heads, seq, dim, generator=gen, dtype=dtype) * scale for _ in range(3)]


def _reference_attention(q, k, v, window=0, softcap=0.0, alibi=False, sinks=None):
    """Scores, bias, mask and softmax written out one query at a time."""
    heads, seq = q.shape[1], q.shape[2]
    out = torch.zeros_like(v)
    for h in range(heads):
        for i in range(seq):
            keys = [j for j in range(seq) if j <= i and (not window or i - j < window)]
            s = torch.stack([q[0, h, i] @ k[0, h, j] for j in keys]) / math.sqrt(q.shape[-1])
            if softcap:
                s = softcap * torch.tanh(s / softcap)
            if alibi:
                slope = 2.0 ** (-8.0 * (h + 1) / heads)
                s = s - slope * torch.tensor([i - j for j in keys], dtype=s.dtype)
            denom = s.exp().sum() + (sinks[h].exp() if sinks is not None else 0.0)
            p = s.exp() / denom
            out[0, h, i] = sum(p[n] * v[0, h, j] for n, j in enumerate(keys))
    return out


def test_attention_mask_is_causal_and_windowed():
    assert torch.equal(attention_mask(4, 0, "cpu"), torch.ones(4, 4, dtype=torch.bool).tril())
    expected = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(attention_mask(4, 2, "cpu"), expected)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"window": 3},
        {"softcap": 2.0},
        {"alibi": True},
        {"sinks": torch.tensor([0.5, -1.0], dtype=torch.float64)},
        {"window": 2, "softcap": 1.5, "alibi": True},
    ],
    ids=["causal", "window", "softcap", "alibi", "sinks", "all"],
)
def test_attend_matches_a_written_out_reference(kwargs):
    q, k, v = _qkv(scale=2.0)  # large scores, so the soft cap binds
    torch.testing.assert_close(attend(q, k, v, **kwargs), _reference_attention(q, k, v, **kwargs))


def test_sdpa_path_equals_explicit_path():
    # A sink at -inf takes no probability, so it forces the explicit path without changing the
    # result: both paths must agree, with and without a window.
    q, k, v = _qkv()
    never = torch.full((2,), float("-inf"), dtype=torch.float64)
    for window in (0, 3):
        torch.testing.assert_close(
            attend(q, k, v, window=window), attend(q, k, v, window=window, sinks=never)
        )


def test_sinks_absorb_probability():
    q, k, v = _qkv()
    v = torch.ones_like(v)  # every output is then the total probability on tokens
    out = attend(q, k, v, sinks=torch.tensor([0.0, 3.0], dtype=torch.float64))
    assert (out < 1).all()
    assert out[0, 1].max() < out[0, 0].min()  # the larger sink logit absorbs more


def test_alibi_slopes_are_geometric():
    torch.testing.assert_close(alibi_slopes(4, "cpu"), torch.tensor([0.25, 0.0625, 2**-6, 2**-8]))


def test_rope_depends_on_relative_position_only():
    cos, sin = rope_cache(16, 8, 10000.0, "cpu", torch.float64)
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, generator=gen, dtype=torch.float64)
    # the same q and k placed at every position
    qs = apply_rope(q.expand(1, 1, 16, 8), (cos, sin))[0, 0]
    ks = apply_rope(k.expand(1, 1, 16, 8), (cos, sin))[0, 0]
    torch.testing.assert_close(qs[5] @ ks[2], qs[13] @ ks[10])
    torch.testing.assert_close(qs.norm(dim=-1), q.norm().expand(16))
    assert not torch.allclose(qs[5] @ ks[2], qs[5] @ ks[4])


def test_partial_rope_leaves_the_other_dims_alone():
    cos, sin = rope_cache(6, 4, 10000.0, "cpu", torch.float32)
    x = torch.randn(1, 2, 6, 8)
    y = apply_rope(x, (cos, sin))
    assert torch.equal(y[..., 4:], x[..., 4:])
    assert not torch.equal(y[..., 1:, :4], x[..., 1:, :4])
    assert torch.equal(y[..., 0, :], x[..., 0, :])  # position 0: angle 0


def test_norms_compute_in_at_least_fp32():
    x = torch.randn(3, 16, dtype=torch.float64) * 5 + 1
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(RMSNorm(16).double()(x), expected, rtol=1e-14, atol=1e-14)
    ln = LayerNorm(16).double()
    torch.testing.assert_close(ln(x), F.layer_norm(x, (16,), eps=1e-6), rtol=1e-14, atol=1e-14)
    xb = x.bfloat16()
    out = RMSNorm(16).bfloat16()(xb)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected.float(), rtol=1e-2, atol=1e-2)


def _moe(balancing="aux_loss", shared=0, experts=4, k=2, dim=8):
    cfg = DecoderConfig(
        dim=dim,
        num_experts=experts,
        experts_per_token=k,
        moe_intermediate_size=6,
        num_shared_experts=shared,
        moe_balancing=balancing,
    )
    torch.manual_seed(0)
    return MoE(cfg).double()


def _moe_reference(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """One token at a time: softmax, top-k, renormalised weights, sum of SwiGLU experts."""
    rows = []
    for token in x:
        probs = (moe.router.weight @ token).softmax(-1)
        bias = moe.expert_bias if moe.balancing == "bias" else torch.zeros_like(probs)
        top = (probs + bias).topk(moe.top_k).indices
        weights = probs[top] / probs[top].sum()
        out = torch.zeros_like(token)
        for w, e in zip(weights, top.tolist(), strict=True):
            ex = moe.experts
            h = F.silu(ex.w1[e] @ token) * (ex.w3[e] @ token)
            out = out + w * (ex.w2[e] @ h)
        if moe.shared_expert is not None:
            out = out + moe.shared_expert(token)
        rows.append(out)
    return torch.stack(rows)


@pytest.mark.parametrize(("balancing", "shared"), [("aux_loss", 0), ("aux_loss", 1), ("bias", 0)])
def test_moe_matches_per_token_reference(balancing, shared):
    moe = _moe(balancing, shared)
    moe.expert_bias.copy_(torch.tensor([0.0, 0.3, -0.3, 0.1]))
    x = torch.randn(10, 8, dtype=torch.float64)
    torch.testing.assert_close(moe(x)[0], _moe_reference(moe, x))


def test_moe_routes_each_token_to_k_distinct_experts():
    moe = _moe(experts=6, k=3)
    x = torch.randn(20, 8, dtype=torch.float64)
    scores, experts, weights = moe.route(x)
    assert experts.shape == (20, 3)
    assert all(len(set(row.tolist())) == 3 for row in experts)
    torch.testing.assert_close(weights.sum(-1), torch.ones(20, dtype=torch.float64))
    assert moe(x)[2].sum() == 20 * 3


def test_moe_gradients_are_exact_through_the_routing_weights():
    moe = _moe()
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    # Top-k is piecewise constant, so away from ties the gradient must match finite differences,
    # including through the router (its only path to the output is the routing weights).
    assert torch.autograd.gradcheck(lambda t: moe(t)[0], (x,))
    moe(x)[0].sum().backward()
    assert moe.router.weight.grad.abs().sum() > 0


def _skewed_tokens(moe: MoE) -> torch.Tensor:
    """Tokens sharing one direction that the router sends to expert 0, with random detail."""
    x = torch.randn(64, 8, dtype=torch.float64) + 2.0
    with torch.no_grad():
        moe.router.weight.mul_(0.1)
        moe.router.weight[0] = 1.0
    return x


def test_aux_loss_is_the_coefficient_when_balanced_and_more_when_not():
    moe = _moe()
    x = _skewed_tokens(moe)
    _, aux_loss, load = moe(x)
    # expert 0 takes every token and almost all the probability: f_0 = 1/2 (k = 2), P_0 ~ 1
    assert load[0] == 64
    assert aux_loss.item() > 0.015
    with torch.no_grad():
        moe.router.weight.zero_()  # uniform probabilities
    assert moe(x)[1].item() == pytest.approx(0.01)


def test_bias_balancing_steers_choice_toward_idle_experts():
    moe = _moe("bias")
    x = _skewed_tokens(moe)
    _, aux_loss, load = moe(x)
    assert load[0] == 64
    assert aux_loss.item() == 0.0
    weights_before = moe.route(x)[2]
    load_of_0 = []
    for _ in range(100):
        moe.update_bias(load, rate=0.01)
        load = moe(x)[2]
        load_of_0.append(load[0].item())
    assert moe.expert_bias[0] < 0 < moe.expert_bias[1:].min()
    assert min(load_of_0) < 32  # (64 tokens * 2) / 4 experts = 32 is a fair share
    # the bias only chooses: the weights are still the router's own probabilities
    scores, experts, weights = moe.route(x)
    assert not torch.equal(weights, weights_before)
    torch.testing.assert_close(
        weights, scores.gather(-1, experts) / scores.gather(-1, experts).sum(-1, keepdim=True)
    )


def test_mla_parameter_count_matches_specs():
    sizes = dict(vocab_size=100, dim=32, num_layers=2, num_heads=4, intermediate_size=48)
    mla = dict(q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4)
    with torch.device("meta"):
        model = Decoder(DecoderConfig(**sizes, **mla, v_head_dim=6))
    spec = ModelSpec(
        name="tiny-mla",
        vocab_size=100,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=4,
        head_dim=12,
        intermediate_size=48,
        v_head_dim=6,
        **mla,
    )
    assert num_params(model) == spec.total_params()


def test_gqa_and_mqa_shrink_only_the_key_value_projections():
    counts = {
        kv: num_params(Decoder(DecoderConfig(num_heads=4, num_kv_heads=kv))) for kv in (4, 2, 1)
    }
    per_kv_head = 2 * 64 * 16 * 2  # wk and wv, two layers
    assert counts[4] - counts[2] == 2 * per_kv_head
    assert counts[4] - counts[1] == 3 * per_kv_head


def test_config_errors_name_the_valid_values():
    with pytest.raises(ConfigError, match="valid: rmsnorm, layernorm"):
        DecoderConfig(norm="batchnorm")
    with pytest.raises(ConfigError, match="multiple of num_kv_heads"):
        DecoderConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ConfigError, match="experts_per_token"):
        DecoderConfig(num_experts=4, experts_per_token=5, moe_intermediate_size=8)
