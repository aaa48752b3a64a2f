"""The audio and time-series task fixes (`models/zoo/fixes/audio.py`): the inputs and config
fields they give a few representative types, and (slow) that those types pass parity."""

import pytest
import torch

from tests.support.zoo_checks import run_task_type
from trainready.models.zoo import fixes as task_fixes
from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo import hf_tasks


def test_an_rnnt_decoder_reads_a_transcript_after_its_blank():
    model = hf_tasks.build("parakeet_rnnt")
    config = model.model.config
    assert config.decoder_hidden_size == hf.HIDDEN
    assert config.blank_token_id == config.vocab_size - 1
    batch = model.make_batch(0)
    ids = batch["decoder_input_ids"]
    assert (ids[:, 0] == config.blank_token_id).all()
    assert (ids[:, 1:] < config.blank_token_id).all() and (ids[:, 1:] >= 3).all()
    assert batch["input_features"].shape[-1] == config.encoder_config.num_mel_bins  # [B, T, bins]


def test_stacked_features_are_as_wide_as_the_input_projection():
    model = hf_tasks.build("granite_speech5_ctc")
    encoder = model.model.config.encoder_config
    batch = model.make_batch(0)
    assert batch["input_features"].shape[-1] == 4 * encoder.num_mel_bins  # deltas, frame pairs
    assert encoder.num_key_value_heads == encoder.num_attention_heads


def test_a_speech_llm_gets_audio_and_one_placeholder_per_audio_embedding():
    model = hf_tasks.build("fun_asr_nano")
    config = model.model.config
    assert config.adaptor_config.intermediate_size == config.text_config.hidden_size // 4
    batch = model.make_batch(0)
    assert "input_features" in batch and "input_features_mask" in batch
    placeholders = (batch["input_ids"] == config.audio_token_id).sum()
    out = model.model(**{k: v for k, v in batch.items() if not k.startswith("label:")})
    assert placeholders == out.audio_hidden_states.shape[0]


def test_timesfm_forecasts_a_univariate_series_in_whole_patches():
    model = hf_tasks.build("timesfm")
    config = model.model.config
    batch = model.make_batch(0)
    assert batch["past_values"].shape == (2, config.context_length)
    assert config.context_length % config.patch_length == 0
    assert batch["freq"].max() < config.freq_size


@pytest.mark.slow  # end to end: 4 parity cases, ~30 s on 2 cores
@pytest.mark.parametrize(
    "model_type", ["parakeet_rnnt", "granite_speech5_ctc", "fun_asr_nano", "timesfm"]
)
def test_fixed_types_pass_parity(model_type):
    out = run_task_type(model_type)
    assert out.status == "pass", out.diagnostics.get("error")


def test_unsupported_audio_types_say_why():
    assert "no forward" in task_fixes.UNSUPPORTED["bark"]


def test_streaming_asr_builds_with_the_attention_its_mask_code_expects():
    """Eager attention's additive mask breaks NemotronAsrStreamingAttention (it reads the mask
    as boolean: every key masked, NaN); the type is built with sdpa, and its loss is finite."""
    model = hf_tasks.build("nemotron_asr_streaming")
    assert model.model.config._attn_implementation == "sdpa"
    assert torch.isfinite(model(**model.make_batch(0)).loss)


def test_patchtst_embeds_patches_of_several_steps_and_passes():
    model = hf_tasks.build("patchtst")
    config = model.model.config
    assert config.patch_length == config.patch_stride == 4
    assert config.context_length % config.patch_length == 0
    past = model.make_batch(0)["past_values"]
    assert past.shape[1] == config.context_length
    out = run_task_type("patchtst")  # (0.2 s)
    assert out.status == "pass", out.diagnostics.get("error") or out.diagnostics.get("reason")
