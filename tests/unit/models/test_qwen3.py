"""Qwen3 models: sizes agree with specs.py, they train, and compile per block like eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.unit.models.test_blocks import one_thread  # noqa: F401  (autouse fixture)
from trainready.core.config import ConfigError
from trainready.models.qwen3 import Qwen3, num_params, qwen3_config, qwen3_sizes
from trainready.models.specs import get_spec


def _on_meta(size: str, **overrides) -> Qwen3:
    with torch.device("meta"):
        return Qwen3(qwen3_config(size, **overrides))


def _tiny(size: str = "debug", seed: int = 0, **overrides) -> Qwen3:
    model = Qwen3(qwen3_config(size, **overrides))
    model.init_weights(seed)
    return model


def test_debugmodel_has_torchtitans_parameter_count():
    model = _on_meta("debugmodel")
    assert num_params(model) == 31_987_968
    assert num_params(model) == get_spec("qwen3-debugmodel").total_params()
    assert model.tok_embeddings.weight is model.output.weight


@pytest.mark.parametrize(
    ("size", "spec_name", "tied"),
    [
        ("0.6B", "qwen3-0.6b", True),
        ("1.7B", "qwen3-1.7b", True),
        ("4B", "qwen3-4b", True),
        ("8B", "qwen3-8b", False),
        ("14B", "qwen3-14b", False),
        ("32B", "qwen3-32b", False),
        ("30B-A3B", "qwen3-30b-a3b", False),
    ],
)
def test_sizes_match_specs_without_allocating(size, spec_name, tied):
    spec = get_spec(spec_name)
    model = _on_meta(size)
    assert model.output.weight.is_meta
    assert num_params(model) == spec.total_params()
    assert num_params(model, exclude_embedding=True, active=True) == spec.matmul_params()
    assert (model.tok_embeddings.weight is model.output.weight) is tied
    cfg = model.config
    assert (cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.vocab_size, cfg.tie_embeddings) == (
        spec.num_layers,
        spec.num_heads,
        spec.head_dim,
        spec.vocab_size,
        spec.tie_embeddings,
    )
    assert len(model.layers) == spec.num_layers


# The Hugging Face model cards' "Number of Parameters" and "Number of Paramaters (sic)
# (Non-Embedding)", in billions, as printed (card text checked November 2026):
# https://huggingface.co/Qwen/Qwen3-0.6B, https://huggingface.co/Qwen/Qwen3-1.7B,
# https://huggingface.co/Qwen/Qwen3-4B, https://huggingface.co/Qwen/Qwen3-8B,
# https://huggingface.co/Qwen/Qwen3-14B, https://huggingface.co/Qwen/Qwen3-32B.
# The larger cards print the total above the size's name (14.8B, 32.8B).
MODEL_CARDS = {
    "0.6B": ("0.6", "0.44"),
    "1.7B": ("1.7", "1.4"),
    "4B": ("4.0", "3.6"),
    "8B": ("8.2", "6.95"),
    "14B": ("14.8", "13.2"),
    "32B": ("32.8", "31.2"),
}


def _billions_as_printed(count: int, printed: str) -> str:
    """`count` in billions to as many decimals as the card printed: the card's precision."""
    decimals = len(printed.partition(".")[2])
    return f"{count / 1e9:.{decimals}f}"


def _non_embedding(model: Qwen3) -> int:
    """Parameters outside the input embedding and the output projection (one matrix if tied), as
    the cards count them; not TorchTitan's N, which keeps the output projection."""
    embedding = {
        id(p): p.numel() for m in (model.tok_embeddings, model.output) for p in m.parameters()
    }
    return num_params(model) - sum(embedding.values())


@pytest.mark.parametrize(("size", "card"), MODEL_CARDS.items())
def test_sizes_match_the_published_model_cards(size, card):
    model = _on_meta(size)
    total, non_embedding = card
    assert _billions_as_printed(num_params(model), total) == total
    assert _billions_as_printed(_non_embedding(model), non_embedding) == non_embedding


def test_moe_layout_is_30b_a3b():
    cfg = qwen3_config("30b-a3b")
    assert (cfg.num_experts, cfg.experts_per_token, cfg.moe_intermediate_size) == (128, 8, 768)
    assert cfg.rope_theta == 1e6
    block = _on_meta("30B-A3B").layers[0]
    assert block.feed_forward.experts.w1.shape == (128, 768, 2048)
    assert block.feed_forward.top_k == 8


def test_unknown_size_and_field_are_config_errors():
    with pytest.raises(ConfigError, match="valid: .*0.6B.*debugmodel"):
        qwen3_config("7B")
    with pytest.raises(ConfigError, match="unknown Qwen3Config field"):
        qwen3_config("debug", num_layer=3)
    with pytest.raises(ConfigError, match="mlp_activation"):
        qwen3_config("debug", mlp_activation="swish2")
    assert set(qwen3_sizes()) >= {"0.6B", "1.7B", "4B", "8B", "14B", "32B", "debugmodel"}


@pytest.mark.parametrize("size", ["debug", "debug-moe"])
def test_forward_shapes_and_dtypes(size):
    model = _tiny(size)
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    logits = model(ids)
    assert logits.shape == (2, 12, model.config.vocab_size)
    assert torch.isfinite(logits).all()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(model(ids).float()).all()
    ref = model.double()(ids)
    assert ref.dtype == torch.float64
    torch.testing.assert_close(ref.float(), logits, atol=1e-4, rtol=1e-4)


def test_init_is_deterministic_and_works_after_meta():
    a, b, c = _tiny(seed=1), _tiny(seed=1), _tiny(seed=2)
    for (name, pa), pb, pc in zip(
        a.named_parameters(), b.parameters(), c.parameters(), strict=True
    ):
        assert torch.equal(pa, pb), name
        if "norm" not in name:
            assert not torch.equal(pa, pc), name
    meta = _on_meta("debug")
    meta.to_empty(device="cpu")
    meta.init_weights(1)
    ids = torch.randint(0, 512, (1, 8))
    torch.testing.assert_close(meta(ids), a(ids), rtol=0, atol=0)


def test_ablation_options_change_the_model():
    base = _tiny()
    gelu = _tiny(mlp_activation="gelu")
    extra = _tiny(extra_norm=True)
    ids = torch.randint(0, 512, (2, 8))
    assert num_params(gelu) == num_params(base)
    assert not torch.allclose(gelu(ids), base(ids))
    # one norm after attention and one after the MLP in every layer
    assert num_params(extra) == num_params(base) + 2 * 2 * 64
    assert hasattr(extra.layers[0], "post_ffn_norm")


@pytest.mark.parametrize("size", ["debug", "debug-moe"])
def test_adamw_reduces_loss_on_a_fixed_batch(size):
    torch.manual_seed(0)
    model = _tiny(size)
    ids = torch.randint(0, 512, (4, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        (loss + model.aux_loss()).backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, losses


@pytest.mark.parametrize("size", ["debug", "debug-moe"])
def test_per_block_compile_with_checkpointing_matches_eager(size):
    # What the training suite does (TorchTitan's order): activation checkpointing, then compile
    # each block whole-graph. A side effect in a block would fail here.
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    torch._dynamo.reset()
    eager, model = _tiny(size), _tiny(size)
    for i, block in enumerate(model.layers):
        wrapped = checkpoint_wrapper(block, preserve_rng_state=False)
        model.layers[i] = torch.compile(wrapped, backend="aot_eager", fullgraph=True)
    ids = torch.randint(0, 512, (2, 16))
    for m in (eager, model):
        (m(ids).square().mean() + m.aux_loss()).backward()
    torch.testing.assert_close(model(ids), eager(ids), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.aux_loss(), eager.aux_loss())
    for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-5, msg=name)


def _hf_twin(model: Qwen3):
    """The same model in Hugging Face transformers (float64, eager attention), with our weights."""
    transformers = pytest.importorskip("transformers")
    cfg = model.config
    common = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.dim,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings,
        attn_implementation="eager",
        experts_implementation="eager",  # the per-expert loop: grouped_mm has no float64
    )
    if cfg.is_moe:
        hf_cfg = transformers.Qwen3MoeConfig(
            **common,
            num_experts=cfg.num_experts,
            num_experts_per_tok=cfg.experts_per_token,
            moe_intermediate_size=cfg.moe_intermediate_size,
            norm_topk_prob=True,
        )
        hf = transformers.Qwen3MoeForCausalLM(hf_cfg)
    else:
        hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**common))
    top_level = {
        "tok_embeddings.weight": "model.embed_tokens.weight",
        "norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    in_layer = {
        "attention.wq": "self_attn.q_proj",
        "attention.wk": "self_attn.k_proj",
        "attention.wv": "self_attn.v_proj",
        "attention.wo": "self_attn.o_proj",
        "attention.q_norm": "self_attn.q_norm",
        "attention.k_norm": "self_attn.k_norm",
        "attention_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "feed_forward.w1": "mlp.gate_proj",
        "feed_forward.w3": "mlp.up_proj",
        "feed_forward.w2": "mlp.down_proj",
        "feed_forward.router": "mlp.gate",
        "feed_forward.experts.w2": "mlp.experts.down_proj",
    }
    state = {}
    for name, param in model.state_dict().items():
        if name.endswith("experts.w1") or name.endswith("experts.w3") or "expert_bias" in name:
            continue
        hf_name = top_level.get(name, "model." + name)
        for ours, theirs in in_layer.items():
            hf_name = hf_name.replace(f".{ours}.", f".{theirs}.").replace(f".{ours}", f".{theirs}")
        state[hf_name] = param
    for i, layer in enumerate(model.layers):
        if cfg.is_moe:  # HF fuses gate and up projections of the experts: [E, 2I, D]
            experts = layer.feed_forward.experts
            fused = torch.cat([experts.w1, experts.w3], dim=1)
            state[f"model.layers.{i}.mlp.experts.gate_up_proj"] = fused
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    return hf.double()


@pytest.mark.parametrize("size", ["debug", "debug-moe"])
def test_matches_hugging_face_qwen3(size):
    model = _tiny(size).double()
    hf = _hf_twin(model)
    ids = torch.randint(0, 512, (2, 16))
    expected = hf(ids).logits
    assert expected.abs().max() > 0.1  # large enough for the tolerance below to mean something
    # HF computes the RoPE table and the MoE router softmax in fp32 even in a float64 model
    torch.testing.assert_close(model(ids), expected, rtol=1e-5, atol=1e-6)


def _loss_and_grads(model: Qwen3, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    logits = model(ids)
    (logits.square().mean() + model.aux_loss()).backward()
    return logits.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize(
    ("dtype", "implementation"),
    [(torch.float64, "loop over experts"), (torch.float32, "grouped_mm")],
)
def test_routed_moe_matches_dense_dispatch(dtype, implementation):
    """Routed dispatch is the dense reference's function, logits and every gradient, both in
    float64 (torch's grouped GEMM has no float64: the loop) and fp32 (torch's grouped GEMM)."""
    from trainready.models.moe import RoutedMoE
    from trainready.models.moe import implementation as how

    routed, dense = _tiny("debug-moe").to(dtype), _tiny("debug-moe", moe_dispatch="dense").to(dtype)
    assert type(routed.layers[0].feed_forward) is RoutedMoE
    assert how(torch.device("cpu"), dtype, compiling=False) == implementation
    assert routed.state_dict().keys() == dense.state_dict().keys()
    ids = torch.randint(0, 512, (2, 16))
    (a, grads_a), (b, grads_b) = _loss_and_grads(routed, ids), _loss_and_grads(dense, ids)
    tol = {"atol": 1e-12, "rtol": 1e-10} if dtype == torch.float64 else {}
    torch.testing.assert_close(a, b, **tol)
    for name, grad in grads_b.items():
        torch.testing.assert_close(grads_a[name], grad, **tol, msg=name)


def test_routed_moe_runs_each_token_through_its_k_experts_only(monkeypatch):
    from trainready.models import moe as moe_dispatch

    rows, real = [], moe_dispatch.expert_mm

    def counting(x, w, offsets):
        rows.append((x.shape[0], int(offsets[-1]), w.shape[0]))
        return real(x, w, offsets)

    monkeypatch.setattr(moe_dispatch, "expert_mm", counting)
    model = _tiny("debug-moe")
    model(torch.randint(0, 512, (2, 16)))
    cfg = model.config
    # Per layer three projections (gate, up, down), each over tokens x k rows, not x E.
    tokens_k = 2 * 16 * cfg.experts_per_token
    assert rows == [(tokens_k, tokens_k, cfg.num_experts)] * 3 * cfg.num_layers


def test_moe_dispatch_is_a_config_choice():
    with pytest.raises(ConfigError, match="moe_dispatch"):
        qwen3_config("debug-moe", moe_dispatch="sparse")
