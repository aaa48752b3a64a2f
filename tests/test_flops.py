"""FLOP formulas and parameter counts, checked against TorchTitan and published model sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trainready.data import model_entries
from trainready.models.specs import get_spec
from trainready.probes.flops import (
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
