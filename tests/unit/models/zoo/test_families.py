"""Model families: every transformers config type gets a modality, and configs their traits."""

from __future__ import annotations

import pytest
from transformers import PretrainedConfig
from transformers.models.auto import modeling_auto
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

from trainready.models.zoo import families
from trainready.models.zoo.families import MODALITIES, extra_traits, modality


def test_every_config_type_gets_a_modality():
    found = {t: modality(t) for t in CONFIG_MAPPING_NAMES}
    assert len(found) == len(CONFIG_MAPPING_NAMES) > 800
    assert {t: m for t, m in found.items() if m not in MODALITIES} == {}
    # Every family of the issue but diffusion (transformers ships none) is populated.
    assert set(found.values()) >= set(MODALITIES) - {families.DIFFUSION}


def test_the_rule_reads_tables_and_types_that_exist():
    """A renamed task table or a removed type would silently stop classifying."""
    for _, tasks in families._TASKS:
        for task in tasks:
            assert hasattr(modeling_auto, f"MODEL_FOR_{task}_MAPPING_NAMES"), task
    for table in (families.EXCEPTIONS, families.MIXER_EXCEPTIONS):
        for model_type, (value, why) in table.items():
            assert model_type in CONFIG_MAPPING_NAMES and why, model_type
            assert value in (*MODALITIES, "attention", "ssm", "rnn", "conv", "hybrid")


@pytest.mark.parametrize(
    "model_type, expected",
    [
        ("llama", "text-decoder"),
        ("gpt2", "text-decoder"),
        ("mamba", "text-decoder"),
        ("bert", "text-encoder"),  # also ships a causal-LM head: masked LM decides
        ("roberta", "text-encoder"),
        ("modernbert", "text-encoder"),
        ("t5", "seq2seq"),
        ("bart", "seq2seq"),
        ("vit", "vision"),
        ("resnet", "vision"),
        ("detr", "vision"),
        ("wav2vec2", "audio"),
        ("whisper", "audio"),  # speech seq2seq: audio before seq2seq
        ("musicgen", "audio"),
        ("videomae", "video"),
        ("vivit", "video"),
        ("clip", "multimodal"),
        ("llava", "multimodal"),
        ("qwen2_audio", "multimodal"),  # a multimodal LM before its seq2seq table
        ("clip_vision_model", "vision"),  # sub-models: by their config class
        ("siglip_text_model", "text-encoder"),
        ("mllama_text_model", "text-decoder"),
        ("qwen2_5_omni_audio_encoder", "audio"),
        ("patchtst", "other"),
        ("informer", "other"),  # forecasting, though an encoder-decoder
    ],
)
def test_known_modalities(model_type, expected):
    assert modality(model_type) == expected


def test_an_unknown_type_is_a_one_line_error():
    with pytest.raises(ValueError, match=r"^unknown transformers model type: 'no_such_model'$"):
        modality("no_such_model")


def _traits(model_type: str, **fields) -> dict[str, str]:
    return extra_traits(CONFIG_MAPPING[model_type](**fields))


@pytest.mark.parametrize(
    "model_type, mixer",
    [
        ("llama", "attention"),
        ("bert", "attention"),
        ("vit", "attention"),
        ("mamba", "ssm"),
        ("mamba2", "ssm"),  # its num_heads are SSM heads, not attention
        ("falcon_mamba", "ssm"),
        ("jamba", "hybrid"),
        ("zamba", "hybrid"),
        ("zamba2", "hybrid"),
        ("falcon_h1", "hybrid"),  # attention and mamba side by side in every layer
        ("nemotron_h", "hybrid"),
        ("recurrent_gemma", "hybrid"),
        ("qwen3_next", "hybrid"),  # gated DeltaNet beside full attention
        ("lfm2_moe", "hybrid"),  # short-conv layers beside attention
        ("rwkv", "rnn"),
        ("xlstm", "rnn"),
        ("resnet", "conv"),
        ("convnext", "conv"),
        ("mobilenet_v2", "conv"),
        ("llava", "attention"),  # a vision tower and a decoder, both attention
        ("rt_detr", "attention"),  # a ResNet backbone beside a transformer: the conv trait says so
    ],
)
def test_mixer(model_type, mixer):
    assert _traits(model_type)["mixer"] == mixer


def test_mixer_follows_the_config_not_the_name():
    # Jamba with an attention layer in every slot has no mamba layer left.
    assert _traits("jamba", attn_layer_period=1, attn_layer_offset=0)["mixer"] == "attention"
    # Bamba's default config puts attention nowhere; given attention layers it is a hybrid.
    assert _traits("bamba")["mixer"] == "ssm"
    assert _traits("bamba", attn_layer_indices=[1], num_hidden_layers=4)["mixer"] == "hybrid"
    # LFM2's layer list decides: conv layers make it a hybrid, none leave it attention.
    assert _traits("lfm2", num_hidden_layers=4, full_attn_idxs=[1])["mixer"] == "hybrid"
    assert _traits("lfm2", num_hidden_layers=4)["mixer"] == "attention"


class _NewHybridConfig(PretrainedConfig):
    """A type no table knows: the rule reads its layer list."""

    model_type = "new_hybrid"

    def __init__(self, layer_types=("mamba", "full_attention", "mlp"), **kw):
        self.layer_types = list(layer_types)
        self.num_attention_heads = 4
        super().__init__(**kw)


def test_an_unlisted_config_is_read_by_the_rule():
    assert extra_traits(_NewHybridConfig())["mixer"] == "hybrid"
    assert extra_traits(_NewHybridConfig(layer_types=["mamba2"] * 3))["mixer"] == "ssm"
    assert extra_traits(_NewHybridConfig(layer_types=["full_attention"]))["mixer"] == "attention"
    nothing = PretrainedConfig()
    assert extra_traits(nothing) == {
        "mixer": "unknown",
        "mla": "no",
        "sliding_window": "no",
        "cross_attention": "no",
        "conv": "no",
    }


@pytest.mark.parametrize(
    "model_type, fields, trait, value",
    [
        ("deepseek_v3", {}, "mla", "yes"),
        ("deepseek_v2", {}, "mla", "yes"),
        ("llama", {}, "mla", "no"),
        ("mistral", {}, "sliding_window", "all"),
        ("mistral", {"sliding_window": None}, "sliding_window", "no"),
        ("gemma2", {}, "sliding_window", "some"),
        # The layer list decides over a sliding_window no layer uses.
        (
            "gemma2",
            {"num_hidden_layers": 2, "layer_types": ["full_attention"] * 2},
            "sliding_window",
            "no",
        ),
        ("qwen2", {}, "sliding_window", "no"),  # a sliding_window it does not use
        ("qwen2", {"use_sliding_window": True, "max_window_layers": 2}, "sliding_window", "some"),
        ("llama", {}, "sliding_window", "no"),
        ("t5", {}, "cross_attention", "yes"),
        ("whisper", {}, "cross_attention", "yes"),
        ("mllama", {}, "cross_attention", "yes"),  # its text config's cross-attention layers
        ("llama", {}, "cross_attention", "no"),
        ("bert", {}, "cross_attention", "no"),
        ("bert", {"add_cross_attention": True}, "cross_attention", "yes"),
        ("wav2vec2", {}, "conv", "yes"),
        ("mamba", {}, "conv", "yes"),  # its short causal conv
        ("resnet", {}, "conv", "yes"),
        ("rt_detr", {}, "conv", "yes"),
        ("llama", {}, "conv", "no"),
        ("vit", {}, "conv", "no"),
    ],
)
def test_flag_traits(model_type, fields, trait, value):
    assert _traits(model_type, **fields)[trait] == value
