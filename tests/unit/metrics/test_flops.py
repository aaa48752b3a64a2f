"""FLOP formulas and parameter counts, checked against TorchTitan and published model sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trainready.data import model_entries
from trainready.metrics.flops import (
    attention_backward_flops,
    attention_flops,
    attention_flops_per_token,
    linear_flops,
    linear_grad_input_flops,
    linear_grad_weight_flops,
    linear_training_flops,
    mfu,
    model_flops_per_token,
    training_flops_per_token,
)
from trainready.models.specs import get_spec


def test_torchtitan_qwen3_debugmodel():
    # TorchTitan's qwen3 "debugmodel" logs 31,987,968 parameters (tied embeddings); its
    # get_nparams_and_flops gives 6 * 31,987,968 + 12 * 8 * 16 * 128 * 128 at T = 128.
    spec = get_spec("qwen3-debugmodel")
    assert spec.total_params() == 31_987_968
    assert spec.matmul_params() == 31_987_968
    flops = model_flops_per_token(spec, 128)
    assert flops.total == 217_093_632
    assert flops.total == training_flops_per_token(31_987_968, 8, 16, 128, 128)
    assert flops.dense == 6 * 31_987_968
    assert flops.attention == 12 * 8 * 16 * 128 * 128


def test_linear_flops():
    assert linear_flops(2, 3, 4) == 48
    assert linear_grad_input_flops(2, 3, 4) == 48
    assert linear_grad_weight_flops(2, 3, 4) == 48
    assert linear_training_flops(2, 3, 4) == 6 * 2 * 3 * 4


@pytest.mark.parametrize(("seq_q", "seq_kv"), [(5, 5), (3, 7), (7, 3)])
def test_causal_attention_counts_the_pairs_sdpa_keeps(seq_q, seq_kv):
    kept = int(torch.ones(seq_q, seq_kv, dtype=torch.bool).tril().sum())  # SDPA's is_causal mask
    assert attention_flops(2, 4, seq_q, seq_kv, 16, causal=True) == 2 * 2 * 4 * kept * 32
    assert attention_flops(2, 4, seq_q, seq_kv, 16) == 2 * 2 * 4 * seq_q * seq_kv * 32


def test_attention_term_is_forward_plus_backward_per_token():
    seq, heads, qk, v = 256, 8, 192, 128
    step = attention_flops(1, heads, seq, seq, qk, v) + attention_backward_flops(
        1, heads, seq, seq, qk, v
    )
    assert attention_flops_per_token(1, heads, qk, seq, v) * seq == step


def test_moe_formula_uses_active_experts():
    spec = get_spec("Qwen3-30B-A3B")
    assert spec.active_params() < spec.total_params()
    assert spec.matmul_params(active=True) < spec.matmul_params(active=False)
    idle_experts = spec.num_experts - spec.experts_per_token
    expert = 3 * spec.hidden_size * spec.moe_intermediate_size
    idle = spec.num_layers * idle_experts * expert
    assert spec.total_params() - spec.active_params() == idle
    assert model_flops_per_token(spec, 4096).dense == 6 * spec.matmul_params(active=True)


def test_input_embedding_excluded_unless_tied():
    untied = get_spec("Qwen3-8B")
    tied = dataclasses.replace(untied, tie_embeddings=True)
    table = untied.vocab_size * untied.hidden_size
    assert untied.total_params() - tied.total_params() == table
    # Untied: the lookup table is left out, the output projection counted. Tied: the one shared
    # matrix is the output projection, counted once. Either way N is the same.
    assert untied.matmul_params() == untied.total_params() - table
    assert tied.matmul_params() == tied.total_params() == untied.matmul_params()


def test_published_sizes():
    # Exact: Meta's Llama-3.1-8B safetensors hold 8,030,261,248 parameters.
    assert get_spec("llama-3.1-8b").total_params() == 8_030_261_248
    # Qwen3 model cards: 8.2B (6.95B non-embedding); 30.5B total, 3.3B activated.
    qwen3_8b = get_spec("qwen3-8b")
    assert qwen3_8b.total_params() == pytest.approx(8.19e9, rel=1e-3)
    non_embedding = qwen3_8b.total_params() - 2 * qwen3_8b.vocab_size * qwen3_8b.hidden_size
    assert non_embedding == pytest.approx(6.95e9, rel=1e-3)
    qwen3_moe = get_spec("qwen3-30b-a3b")
    assert qwen3_moe.total_params() == pytest.approx(30.5e9, rel=0.01)
    assert qwen3_moe.active_params() == pytest.approx(3.3e9, rel=0.02)
    # DeepSeek-V3 report: 671B total (without the MTP module), 37B activated per token.
    deepseek = get_spec("deepseek-v3")
    assert deepseek.total_params() == pytest.approx(671e9, rel=0.01)
    assert deepseek.active_params() == pytest.approx(37e9, rel=0.02)
    # gpt-oss model card: 116.83B total; 5.13B active, which leaves out the input embedding.
    gpt_oss = get_spec("openai/gpt-oss-120b")
    assert gpt_oss.total_params() == pytest.approx(116.83e9, rel=1e-3)
    assert gpt_oss.matmul_params() == pytest.approx(5.13e9, rel=1e-3)


def _expected_shapes(spec) -> dict[str, tuple[int, int]]:
    """(out_features, in_features) of the projections the spec implies."""
    h, heads = spec.hidden_size, spec.num_heads
    shapes = {"lm_head": (spec.vocab_size, h), "o_proj": (h, heads * spec.attention_v_dim)}
    if spec.is_mla:
        shapes["q_a_proj"] = (spec.q_lora_rank, h)
        shapes["q_b_proj"] = (heads * spec.attention_qk_dim, spec.q_lora_rank)
        shapes["kv_a_proj_with_mqa"] = (spec.kv_lora_rank + spec.qk_rope_head_dim, h)
        kv_b_width = heads * (spec.qk_nope_head_dim + spec.v_head_dim)
        shapes["kv_b_proj"] = (kv_b_width, spec.kv_lora_rank)
    else:
        shapes["q_proj"] = (heads * spec.head_dim, h)
        shapes["k_proj"] = (spec.num_kv_heads * spec.head_dim, h)
    if not spec.is_moe or spec.first_k_dense:
        shapes["down_proj"] = (h, spec.intermediate_size)
    if spec.is_moe:
        shapes["expert_down_proj"] = (h, spec.moe_intermediate_size)
        shapes["router"] = (spec.num_experts, h)
    return shapes


@pytest.mark.parametrize("entry", model_entries(), ids=lambda e: e["name"])
def test_shipped_models_agree_with_their_projection_shapes(entry):
    spec = get_spec(entry["name"])
    shipped = {p["op"]: (p["N"], p["K"]) for p in entry["projections"]}
    expected = _expected_shapes(spec)
    assert {op: shipped.get(op) for op in expected} == expected
    assert 0 < spec.matmul_params() <= spec.active_params() <= spec.total_params()


def test_mfu():
    assert mfu(1e9, 1e3, 4e12) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="peak_flops"):
        mfu(1e9, 1e3, 0.0)


# --- every formula against torch.utils.flop_counter.FlopCounterMode ----------------------------
#
# The intended differences, each asserted exactly where it applies:
# - 6 * N counts every parameter (TorchTitan's N): norm weights and biases are no matmul, so the
#   formula exceeds the counted matmuls by 6 * (norm parameters) per token;
# - causal attention: `attention_flops(causal=True)` counts the (query, key) pairs the mask keeps
#   (what a kernel that skips masked blocks does); FlopCounterMode counts the dense product, as
#   the per-token formula 12 * L * H * Q * T does (by convention, with no causal discount);
# - flex: a case's `gflop` is the dense work times the share of blocks its block mask keeps;
#   FlopCounterMode's flex formula is dense (less a sparsity hint only compiled graphs carry);
# - attention backward: ours is 2x the forward (dV, dP, dQ, dK: no recompute, PaLM's convention);
#   FlopCounterMode's fused-kernel backward formulas add the recompute of q @ k^T (2.5x) -- with
#   SDPA's math path, whose backward reuses the saved scores, the counter agrees with ours;
# - FlopCounterMode has no formula for the CPU's flash attention or for `_grouped_mm` (the
#   routed MoE's expert GEMMs): the train model is counted with SDPA's math path (bmm's), and
#   `_grouped_mm` is given the trace analyser's formula.


def _counted(fn, custom=None) -> tuple[int, dict[str, int]]:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=custom or {}) as fc:
        fn()
    return fc.get_total_flops(), {str(k): v for k, v in fc.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize("pass_", ["fwd", "dX", "dW"])
def test_matmul_suite_gemm_flops_equal_flop_counter(pass_):
    from trainready.suites.matmul import suite as matmul

    m, n, k = 8, 48, 32
    first, second = matmul.operands(pass_, m, n, k, torch.float32, "cpu")
    counted, by_op = _counted(lambda: matmul.product(pass_, first, second))
    assert counted == matmul.GEMMS[pass_].flops(m, n, k) == 2 * m * n * k
    assert set(by_op) == {"aten.mm"}


def _grouped_mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:  # noqa: ANN001
    from trainready.profile.opflops import op_flops

    return op_flops("aten::_grouped_mm", [list(a_shape), list(b_shape)], [])


def _train_step_flops(size: str, batch: int, seq: int):
    """(counted FLOPs of one fwd+bwd of the train suite's model, its formula, norm params)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from trainready.models.qwen3 import Qwen3, num_params, qwen3_config

    cfg = qwen3_config(size)
    model = Qwen3(cfg)
    model.init_weights(0)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))

    def step():
        with sdpa_kernel(SDPBackend.MATH):  # attention as bmm's, which the counter counts
            logits = model(ids)
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()

    counted, by_op = _counted(step, {torch.ops.aten._grouped_mm: _grouped_mm_flop})
    # As the train suite computes it (trainready/suites/train/loop.py): N without the input embedding
    # unless tied, MoE experts at top_k / num_experts.
    params = num_params(model, exclude_embedding=True, active=True)
    formula = (
        training_flops_per_token(params, cfg.num_layers, cfg.num_heads, cfg.head_dim, seq)
        * batch
        * seq
    )
    norms = sum(p.numel() for p in model.parameters() if p.ndim == 1)
    return counted, by_op, formula, norms


def test_train_model_flops_equal_flop_counter_but_for_the_norm_weights():
    batch, seq = 2, 64
    counted, by_op, formula, norms = _train_step_flops("debug", batch, seq)
    assert formula - counted == 6 * norms * batch * seq  # exactly: the only difference
    assert set(by_op) == {"aten.mm", "aten.bmm"}


def test_train_moe_model_flops_count_the_active_experts():
    """Routed experts run k of E per token, as 6 * N counts them (at top_k / num_experts); the
    rest agrees but for the norms and the router's top-k bookkeeping on k weights per token."""
    batch, seq = 2, 64
    counted, _, formula, norms = _train_step_flops("debug-moe", batch, seq)
    assert formula - counted == pytest.approx(6 * norms * batch * seq, abs=1e-3 * formula)


def test_attention_flops_equal_flop_counter_dense_and_discount_the_causal_mask():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, s, d = 2, 4, 32, 16
    q = torch.randn(b, h, s, d, requires_grad=True)
    k = torch.randn(b, h, s, d, requires_grad=True)
    v = torch.randn(b, h, s, d, requires_grad=True)
    for causal in (False, True):

        def fwd_bwd(causal=causal):
            with sdpa_kernel(SDPBackend.MATH):
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            out.sum().backward()

        counted, _ = _counted(fwd_bwd)
        dense = attention_flops(b, h, s, s, d) + attention_backward_flops(b, h, s, s, d)
        assert counted == dense  # the counter never discounts the mask
        ours = attention_flops(b, h, s, s, d, causal=causal)
        ours += attention_backward_flops(b, h, s, s, d, causal=causal)
        kept = s * (s + 1) // 2
        assert ours == (dense if not causal else dense * kept // (s * s))


def test_flex_flops_equal_flop_counter_dense_and_discount_the_kept_blocks():
    from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward
    from torch.utils.flop_counter import flop_registry

    from trainready.suites.flex import suite as flex
    from trainready.suites.flex.variants import Shape

    shape = Shape(B=2, Hq=4, Hkv=4, S=256, D=32)
    q = torch.empty(shape.B, shape.Hq, shape.S, shape.D, device="meta")
    k = v = torch.empty(shape.B, shape.Hkv, shape.S, shape.D, device="meta")
    fwd = flop_registry[flex_attention](q, k, v)
    bwd = flop_registry[flex_attention_backward](q, k, v, q, None, q)
    work, dense = flex._flops(shape, "fwd", 1.0)
    assert dense == work == fwd
    work, dense = flex._flops(shape, "fwd_bwd", 0.25)
    # The backward: the counter's five GEMMs recompute q @ k^T (2.5x the forward); ours, as
    # PaLM's convention and the flex suite's docs, count the backward without it (2x).
    assert bwd == 2.5 * fwd and dense == 3 * fwd
    assert dense == fwd + bwd - 0.5 * fwd and work == 0.25 * dense  # the kept blocks' share
