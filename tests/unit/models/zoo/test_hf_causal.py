"""The Hugging Face zoo: generic shrinking, per-type adjustments, traits read from real configs."""

import pytest
import torch

from trainready.models.zoo import hf_causal as hf


def test_shrink_cuts_sizes_layers_and_token_ids_and_zeroes_randomness():
    d = hf.shrink(
        {
            "hidden_size": 4096,
            "num_hidden_layers": 6,
            "num_attention_heads": 32,
            "vocab_size": 151936,
            "bos_token_id": 151643,
            "eos_token_id": [151645, 151643],
            "attention_dropout": 0.1,
            "router_jitter_noise": 0.01,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "num_experts": 2,  # already small: kept
            "layer_types": ["linear", "linear", "linear", "full", "linear", "linear"],
            "intermediate_size": [11008] * 6,  # per-layer list: as long as the layer count
            "text_config": {"model_type": "t", "hidden_size": 1024},
        }
    )
    assert d["hidden_size"] == hf.HIDDEN and d["num_hidden_layers"] == hf.LAYERS
    assert d["num_attention_heads"] == hf.HEADS and d["vocab_size"] == hf.VOCAB_SIZE
    assert d["bos_token_id"] == 1 and d["eos_token_id"] == [2]
    assert d["attention_dropout"] == 0.0 and d["router_jitter_noise"] == 0.0
    assert d["rms_norm_eps"] == 1e-6 and d["tie_word_embeddings"] is True
    assert d["num_experts"] == 2
    assert d["layer_types"] == ["linear", "full"]  # the hybrid stays hybrid
    assert d["intermediate_size"] == [2 * hf.HIDDEN] * 2
    assert d["text_config"]["hidden_size"] == hf.HIDDEN
    assert d["use_cache"] is False
    # per-stage random rates too (CvT's stochastic depth drew other branches in every run)
    assert hf.shrink({"drop_path_rate": [0.0, 0.0, 0.1]})["drop_path_rate"] == [0.0, 0.0, 0.0]
    # a placeholder initialisation (SAM's 1e-10, nested too) starts at 0.02; real ones stay
    placeholder = {
        "initializer_range": 1e-10,
        "vision_config": {"model_type": "v", "initializer_range": 1e-10},
    }
    out = hf.shrink(placeholder)
    assert out["initializer_range"] == out["vision_config"]["initializer_range"] == hf.INIT_RANGE
    assert hf.shrink({"initializer_range": 0.006})["initializer_range"] == 0.006


def test_mla_configs_get_consistent_head_sizes():
    d = hf.shrink(
        {
            "hidden_size": 7168,
            "num_attention_heads": 128,
            "num_key_value_heads": 128,
            "kv_lora_rank": 512,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "head_dim": 64,
        }
    )
    assert d["head_dim"] == d["qk_rope_head_dim"] == hf.HEAD_DIM // 2
    assert d["num_key_value_heads"] == d["num_attention_heads"]


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [
        ("llama", {"attention": "gqa", "position": "rope", "norm": "rmsnorm", "moe": "dense"}),
        ("gpt2", {"attention": "mha", "position": "learned", "norm": "layernorm"}),
        ("mixtral", {"moe": "moe", "mlp": "silu"}),
        ("deepseek_v3", {"attention": "mla", "moe": "moe"}),
        ("qwen3_next", {"attention": "hybrid"}),
        ("bloom", {"position": "alibi"}),
    ],
)
def test_traits_read_from_real_configs(model_type, expected):
    traits = hf.traits(hf.tiny_config(model_type))
    assert {k: traits[k] for k in expected} == expected


def test_traits_a_config_does_not_state_are_unknown():
    from transformers import PretrainedConfig

    traits = hf.traits(PretrainedConfig())  # no activation, no norm epsilon
    assert traits["mlp"] == traits["norm"] == "unknown"


@pytest.mark.slow
def test_a_tiny_model_builds_and_trains_a_step():
    model = hf.build("qwen3_moe")
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    ids = torch.randint(0, hf.VOCAB_SIZE, (2, hf.SEQ_LEN))
    logits = model(ids)
    assert logits.shape == (2, hf.SEQ_LEN, hf.VOCAB_SIZE)
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_unknown_type_is_a_build_error_naming_it():
    with pytest.raises(hf.BuildError, match="'gpt-17' is not a causal-LM type"):
        hf.tiny_config("gpt-17")


def test_every_type_is_listed_once_and_sorted():
    types = hf.model_types()
    assert types == sorted(set(types)) and "llama" in types and len(types) > 100


def test_per_type_fixes_take():
    dory = hf.tiny_config("dory")  # counts given per layer, not in the doubled "mlp" layout
    assert (dory.num_hidden_layers, dory.n_recurrent_layers) == (3, 1)
    assert set(dory.layer_types) == {"sliding_attention", "full_attention"}
    qwen4 = hf.tiny_config("qwen4_exp")  # the QSA indexer its full-attention layers always build
    assert qwen4.indexer_budget % qwen4.indexer_compress_ratio == 0 and qwen4.indexer_kv_heads == 1
    assert hf.tiny_config("cpmant").init_std == hf.HIDDEN**-0.5  # std 1 is for a scaled Linear
    assistant = hf.tiny_config("gemma4_assistant").text_config
    assert assistant.hidden_size_per_layer_input == 0
    assert assistant.num_kv_shared_layers == assistant.num_hidden_layers == hf.LAYERS


@pytest.mark.parametrize("model_type", ["dory", "qwen4_exp", "cpmant"])
def test_fixed_types_build_and_run_forward(model_type):
    logits = hf.build(model_type)(torch.randint(0, hf.VOCAB_SIZE, (1, 8)))
    assert logits.shape == (1, 8, hf.VOCAB_SIZE) and logits.isfinite().all()


@pytest.mark.parametrize("model_type", ["gemma4_assistant", "gemma4_unified_assistant"])
def test_drafters_are_unsupported_with_the_reason(model_type):
    with pytest.raises(hf.BuildError, match="speculative-decoding drafter"):
        hf.build(model_type)


def test_moe_router_losses_are_trained_and_compared():
    """A transformers MoE returns its router load-balancing loss when asked
    (`output_router_logits`); it trains with it at its own coefficient, as in transformers, and
    parity compares it as its own tensor. A dense model has none."""
    from trainready.core.case import Case
    from trainready.core.context import CaseContext
    from trainready.core.worker import execute_case
    from trainready.suites.parity import suite as parity

    model = hf.build("mixtral")
    assert model.aux_coef == model.model.router_aux_loss_coef == 0.001
    model(torch.randint(0, hf.VOCAB_SIZE, (2, 8)))
    aux = model.aux_loss()
    assert isinstance(aux, torch.Tensor) and aux.requires_grad and aux.item() > 0
    assert model.aux_loss().item() == pytest.approx(0.001 * model._aux.item())
    dense = hf.build("llama")
    dense(torch.randint(0, hf.VOCAB_SIZE, (1, 8)))
    assert dense.aux_loss() == 0.0 and dense.aux_coef is None

    params = {"source": "hf", "model": "mixtral", "mode": "eager", "dtype": "fp32", "steps": 2}
    out = execute_case(parity, Case("parity", "hf/mixtral/eager/fp32", params),
                       CaseContext("cpu", "fp32", 300.0))  # fmt: skip
    assert out.status == "pass", out.diagnostics.get("error")
    n_params = len(list(model.named_parameters()))
    # loss, logits, aux_loss, and each parameter's gradient and after-step value
    assert out.diagnostics["tensors_compared"] == 3 + 2 * n_params
    assert out.diagnostics["routing"]["pinned"] is True  # MoE eager: routing replayed


def test_a_router_loss_the_device_cannot_compute_is_dropped_for_every_run(monkeypatch):
    """transformers counts experts with an int32 histc off the CPU; a device without one (emu
    falls back to the CPU, which has no int histc) cannot run the model's router loss. The case
    then trains without it on every run (reference included) and says why."""
    model = hf.build("mixtral")
    assert model.router_loss_fails_on("cpu") is None and model.aux_coef  # the CPU runs it

    def no_int_histc(self, input_ids):
        raise NotImplementedError("\"histogram_cpu\" not implemented for 'Int'")

    monkeypatch.setattr(hf.CausalLM, "forward", no_int_histc)
    why = model.router_loss_fails_on("meta")
    assert why.startswith('NotImplementedError: "histogram_cpu"')
    assert model.aux_coef is None and model.model.config.output_router_logits is False
    monkeypatch.undo()
    model(torch.randint(0, hf.VOCAB_SIZE, (1, 8)))
    assert model.aux_loss() == 0.0


@pytest.mark.parametrize("model_type", sorted(hf.FLOAT64_MODE))
def test_float64_mode_types_keep_their_reference_float64(model_type):
    """xglm, blt and the Inkling 2 text models drop a float64 run to float32 in their own code;
    they run under the float64 mode, whose reference then holds no float32 op; other causal
    LMs run their code as is."""
    from trainready.models.zoo.float64 import float_dtypes

    model = hf.build(model_type)
    assert model.float64_mode
    ref = model.double()
    ids = torch.randint(0, model.model.config.vocab_size, (2, 8))
    logits = ref(ids)
    assert torch.isfinite(logits).all() and logits.dtype == torch.float64
    assert set(float_dtypes(lambda: ref(ids).sum().backward())) == {torch.float64}
    assert not hf.build("llama").float64_mode
