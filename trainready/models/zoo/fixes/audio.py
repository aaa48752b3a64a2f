"""Audio and time-series models: feature widths, RNN-T/TDT front ends, speech seq2seq, TTS.

See `fixes/__init__.py` for the tables' contract; each entry says why it is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainready.models.zoo import hf_causal as hf
from trainready.models.zoo.inputs import AUDIO_FRAMES, AUDIO_SAMPLES, BATCH, SEQ_LEN

MEL_BINS = 16  # hf_tasks.TASK_SIZES["num_mel_bins"]
TRANSCRIPT = 4  # tokens of a synthetic transcript (an RNN-T prediction network's input)


def _transcript(gen: torch.Generator, low: int, high: int) -> torch.Tensor:
    """[B, TRANSCRIPT] token ids in [low, high): clear of pad, bos, eos and the blank."""
    return torch.randint(low, high, (BATCH, TRANSCRIPT), generator=gen)


def _mha(d: dict[str, Any], *paths: str) -> None:
    """Multi-head attention (key/value heads = heads) in the sub-configs at `paths` ("a.b"):
    encoders whose value projection is num_attention_heads wide (a split fused QKV), where the
    generic KV_HEADS would repeat keys that are already one per head."""
    for path in paths:
        c = d
        for key in path.split("."):
            c = c[key]
        c["num_key_value_heads"] = c["num_attention_heads"]


# --- RNN-T / TDT transducers (Parakeet, Nemotron ASR) ---------------------------------------------


def _transducer(d: dict[str, Any]) -> None:
    # The prediction network (LSTM) and joint keep their full 640 width otherwise; the blank is
    # the vocabulary's last class, as in the released checkpoints (vocab_size - 1).
    d["decoder_hidden_size"] = hf.HIDDEN
    d["blank_token_id"] = d["vocab_size"] - 1


def _transducer_inputs(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # An RNN-T is trained on (audio, transcript): the prediction network reads the transcript
    # after a leading blank (its start symbol), and the joint scores every (frame, token) pair.
    blank = config.blank_token_id
    text = _transcript(gen, 3, blank)
    start = torch.full((BATCH, 1), blank, dtype=torch.long)
    return {**batch, "decoder_input_ids": torch.cat([start, text], dim=1)}


def _prompted_transducer(d: dict[str, Any]) -> None:
    # Nemotron 3.5 ASR also conditions on a language prompt (one-hot over `num_prompts`) through
    # a 2048-wide projector the generic shrink does not name.
    _transducer(d)
    d["prompt_intermediate_size"] = 2 * hf.HIDDEN


def _prompted_inputs(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # The processor passes the language's prompt id (one per sample) beside the audio.
    batch = _transducer_inputs(model, config, gen, batch)
    prompts = torch.randint(0, config.num_prompts, (BATCH,), generator=gen)
    return {**batch, "prompt_ids": prompts}


# --- text to speech (FastSpeech 2) ----------------------------------------------------------------


def _fastspeech2(d: dict[str, Any]) -> None:
    # Its conformer blocks, postnet and variance predictors keep their full widths (1536, 256:
    # 12.7M parameters) under names the generic shrink does not know. The `encoder_config` and
    # `decoder_config` dicts are derived from the flat fields: dropped, so that they are derived
    # again from the shrunk ones (else their saved 4 layers x 1536 units would win).
    d.pop("encoder_config", None)
    d.pop("decoder_config", None)
    d.update(
        encoder_linear_units=2 * hf.HIDDEN,
        decoder_linear_units=2 * hf.HIDDEN,
        speech_decoder_postnet_layers=2,
        speech_decoder_postnet_units=32,
        duration_predictor_channels=32,
        energy_predictor_channels=32,
        pitch_predictor_channels=32,
        pitch_predictor_layers=2,
        decoder_kernel_size=7,
    )


def _fastspeech2_hifigan(d: dict[str, Any]) -> None:
    # The same acoustic model, then a HiFi-GAN vocoder that reads its spectrogram: the vocoder's
    # input width is the acoustic model's mel bins, and its upsampling stack (512 channels, x256)
    # is cut to 2 small stages.
    _fastspeech2(d["model_config"])
    d["vocoder_config"].update(
        model_in_dim=d["model_config"]["num_mel_bins"],
        upsample_initial_channel=32,
        upsample_rates=[2, 2],
        upsample_kernel_sizes=[4, 4],
        resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]],
    )


DURATIONS = (1, 2, 3, 2)  # frames per token, repeated over the text: 32 frames for 16 tokens


def _fastspeech2_labels(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # FastSpeech 2 trains on aligned targets, as its users prepare them (from a forced aligner):
    # each token's duration in frames, its pitch and energy, and the mel spectrogram the
    # durations add up to. Durations are a shuffle of one set, so every sample has as many
    # frames (no padding). The text is phoneme ids of its own vocabulary (78 symbols, which the
    # composite with the vocoder does not expose as input embeddings).
    config = getattr(config, "model_config", config)
    tokens = batch["input_ids"].shape[1]
    ids = torch.randint(3, config.vocab_size, (BATCH, tokens), generator=gen)
    base = torch.tensor(DURATIONS * (tokens // len(DURATIONS) + 1))[:tokens]
    order = torch.stack([torch.randperm(tokens, generator=gen) for _ in range(BATCH)])
    durations = base[order]
    frames = int(base.sum())
    return {
        **batch,
        "input_ids": ids,
        "duration_labels": durations,
        "pitch_labels": torch.randn(BATCH, tokens, 1, generator=gen),
        "energy_labels": torch.randn(BATCH, tokens, 1, generator=gen),
        "spectrogram_labels": torch.randn(BATCH, frames, config.num_mel_bins, generator=gen),
    }


# --- audio-codebook language models (CSM, Dia) -----------------------------------------------------

CODEBOOKS = 8  # audio codebooks per frame (CSM's Mimi: 32)


def _csm(d: dict[str, Any]) -> None:
    # CSM's backbone and depth decoder predict `num_codebooks` Mimi codes per frame: cut to
    # CODEBOOKS in all three configs (the codec's quantizers are the codebooks). Its text
    # vocabulary (Llama 3's 128k) and the ids in it, and its Mimi codec, follow the shrunk sizes.
    d.update(num_codebooks=CODEBOOKS, text_vocab_size=hf.VOCAB_SIZE)
    d["audio_eos_token_id"] = hf.VOCAB_SIZE - 1
    d["codebook_pad_token_id"] = d["vocab_size"] - 1
    d["depth_decoder_config"].update(num_codebooks=CODEBOOKS, max_position_embeddings=CODEBOOKS + 1)
    _mimi(d["codec_config"], CODEBOOKS)


def _csm_codes(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # Trained on audio already tokenized by its codec (Mimi), as large-scale training does:
    # input_ids are [B, frames, codebooks] codes, and the labels (the same codes) make the
    # model run its depth decoder over every frame's codebooks, as in training.
    codes = torch.randint(
        0, config.vocab_size - 1, (BATCH, SEQ_LEN, config.num_codebooks), generator=gen
    )
    return {
        "input_ids": codes,
        "attention_mask": torch.ones(BATCH, SEQ_LEN, dtype=torch.long),
        "labels": codes,
    }


def _mimi(codec: dict[str, Any], codebooks: int) -> None:
    """A Mimi codec config at the shrunk sizes: `codebooks` quantizers, grouped upsampling over
    its (shrunk) hidden size, and a conv stack from 4 filters (64, doubled per stage: 23M
    parameters)."""
    codec.update(num_quantizers=codebooks, upsample_groups=codec["hidden_size"], num_filters=4)


def _kyutai(d: dict[str, Any]) -> None:
    # Kyutai STT reads, per frame, one text token and `num_codebooks` Mimi codes, embedded in
    # one table: text ids, then each codebook's codes and its bos (2048 + 1), then one pad row,
    # whose id (`audio_pad_token_id`, 69569) is that table's last. Cut to CODEBOOKS codebooks
    # of 256 codes; the pad id is recomputed as the config does, and the Mimi codec (used to
    # tokenize audio at generation) follows.
    codes = 256
    d.update(num_codebooks=CODEBOOKS, codebook_vocab_size=codes + 1, audio_bos_token_id=codes)
    d["audio_pad_token_id"] = d["vocab_size"] + CODEBOOKS * (codes + 1)
    _mimi(d["codec_config"], CODEBOOKS)
    d["codec_config"]["codebook_size"] = codes


def _kyutai_inputs(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # Its training input is a stream of frames: [B, frames, 1 + num_codebooks], the text token
    # then the audio's Mimi codes (audio tokenized beforehand, as for training).
    text = torch.randint(3, config.vocab_size, (BATCH, SEQ_LEN, 1), generator=gen)
    shape = (BATCH, SEQ_LEN, config.num_codebooks)
    codes = torch.randint(0, config.audio_bos_token_id, shape, generator=gen)
    ids = torch.cat([text, codes], dim=2)
    return {"input_ids": ids, "attention_mask": torch.ones(BATCH, SEQ_LEN, dtype=torch.long)}


def _dia(d: dict[str, Any]) -> None:
    # Dia's decoder cross-attends to its text encoder: the cross-attention's input width is the
    # encoder's hidden size (1024 unshrunk), its heads cut like the self-attention's. Its audio
    # vocabulary is the DAC codes then eos, pad, bos (1024..1026 of 1028): the last 4 ids here.
    enc, dec = d["encoder_config"], d["decoder_config"]
    dec.update(
        cross_hidden_size=enc["hidden_size"],
        cross_num_attention_heads=hf.HEADS,
        cross_num_key_value_heads=hf.HEADS,
        cross_head_dim=hf.HEAD_DIM,
    )
    vocab = dec["vocab_size"]
    dec.update(eos_token_id=vocab - 4, pad_token_id=vocab - 3, bos_token_id=vocab - 2)


def _dia_inputs(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # The text is bytes (the encoder's vocabulary: 256); the decoder reads [B, frames, channels]
    # DAC codes (one per codebook), below its special ids.
    text = torch.randint(3, config.encoder_config.vocab_size, (BATCH, SEQ_LEN), generator=gen)
    dec = config.decoder_config
    shape = (BATCH, SEQ_LEN, dec.num_channels)
    codes = torch.randint(0, dec.eos_token_id, shape, generator=gen)
    return {**batch, "input_ids": text, "decoder_input_ids": codes}


def _voxtral_realtime_inputs(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # Voxtral Realtime adds one audio embedding to each text token (streaming: audio and text
    # are aligned), so it needs the audio along the text: `audio_length_per_tok` mel frames per
    # token ([B, mel bins, frames], as its processor gives them).
    tokens = batch["input_ids"].shape[1]
    frames = tokens * config.audio_length_per_tok
    bins = config.audio_config.num_mel_bins
    return {**batch, "input_features": torch.randn(BATCH, bins, frames, generator=gen)}


# --- speech LLMs (audio encoder, adaptor, text decoder) ------------------------------------------


def _fun_asr_nano(d: dict[str, Any]) -> None:
    hidden = d["text_config"]["hidden_size"]
    d["adaptor_config"].update(
        hidden_size=hidden, intermediate_size=hidden // 4, projector_hidden_size=2 * hf.HIDDEN
    )
    d["audio_config"]["num_timestamp_prediction_layers"] = hf.LAYERS


def _audio_in_text(
    model: Any, config: Any, gen: torch.Generator, batch: dict, audio: dict[str, torch.Tensor]
) -> dict:
    """A speech LLM's inputs: `audio` (its audio inputs), then as many audio placeholder tokens
    per sample as its audio tower yields embeddings (`get_audio_features`), then the text."""
    with torch.no_grad():
        out = model.get_audio_features(**audio, return_dict=True)
    rows = out.pooler_output.reshape(-1, out.pooler_output.shape[-1]).shape[0]
    if rows % BATCH:
        raise ValueError(f"{rows} audio embeddings do not split over {BATCH} samples")
    placeholders = torch.full((BATCH, rows // BATCH), config.audio_token_id)
    ids = torch.cat([placeholders, batch["input_ids"]], dim=1)
    return {**batch, **audio, "input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _fun_asr_nano_inputs(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # Fun-ASR-Nano is trained on (audio, transcript): its extractor stacks 7 mel frames into one
    # (LFR: [B, frames, 7 x mel bins]) with their mask, and the text holds one audio placeholder
    # per audio embedding.
    width = config.audio_config.num_mel_bins * config.audio_config.num_stacked_frames
    frames = AUDIO_FRAMES // 4
    audio = {
        "input_features": torch.randn(BATCH, frames, width, generator=gen),
        "input_features_mask": torch.ones(BATCH, frames, dtype=torch.long),
    }
    return _audio_in_text(model, config, gen, batch, audio)


def _nemo_speechlm(d: dict[str, Any]) -> None:
    # Its word-timestamp head's CTC blank is the last class of its vocabulary (23862 of 23863);
    # its three encoders (speech, diarization, word timestamps) split a fused QKV: MHA.
    stamps = d["word_timestamp_config"]
    stamps["blank_token_id"] = stamps["vocab_size"] - 1
    _mha(d, "audio_config.asr_config", "audio_config.diarization_config.audio_config")
    _mha(d, "word_timestamp_config")


def _nemo_speechlm_inputs(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
    # Nemotron 3.5 Transcribe is trained on (audio, transcript): a log-mel spectrogram
    # [B, frames, mel bins] (a multiple of the subsampling factor, as its processor pads it) with
    # its mask, and one audio placeholder per audio embedding in the text.
    bins = config.audio_config.asr_config.num_mel_bins
    audio = {
        "input_features": torch.randn(BATCH, AUDIO_FRAMES, bins, generator=gen),
        "input_features_mask": torch.ones(BATCH, AUDIO_FRAMES, dtype=torch.long),
    }
    return _audio_in_text(model, config, gen, batch, audio)


# --- stacked filterbank features -------------------------------------------------------------------


def _stacked(width: Callable[[Any], int]) -> Callable[..., dict[str, Any]]:
    """Inputs of a model whose feature extractor stacks pairs of mel frames (and deltas) into one
    wider frame: [B, AUDIO_FRAMES // 2, width(config)], in place of plain [B, frames, bins]."""

    def inputs(model: Any, config: Any, gen: torch.Generator, batch: dict) -> dict:
        shape = (BATCH, AUDIO_FRAMES // 2, width(config))
        return {**batch, "input_features": torch.randn(*shape, generator=gen)}

    return inputs


# Each function above says why its fields are set.
ADJUST: dict[str, Callable[[dict[str, Any]], None]] = {
    **dict.fromkeys(("parakeet_rnnt", "parakeet_tdt", "nemotron_asr_streaming"), _transducer),
    "nemotron3_5_asr": _prompted_transducer,
    # Its extractor stacks 2 frames of 80 mel bins (160 wide); with 16 mel bins the projection
    # takes 2 x 16, the width the extractor would give.
    "wav2vec2-bert": hf._set(feature_projection_input_dim=2 * MEL_BINS),
    "csm": _csm,
    "dia": _dia,
    # Its decoder layers read `num_key_value_heads`, a field its config class does not define
    # (checkpoints carry it): MHA, as Moonshine's decoder (heads = key/value heads).
    "moonshine_streaming": lambda d: d.update(num_key_value_heads=d["num_attention_heads"]),
    "kyutai_speech_to_text": _kyutai,
    # Its validator ties the adaptor's widths to the LLM's (intermediate = hidden // 4); the
    # adaptor's projector (2048) and the encoder's timestamp layers (20) are cut likewise.
    "fun_asr_nano": _fun_asr_nano,
    "nemo_speechlm": _nemo_speechlm,
    # Its FastConformer attention splits a fused QKV: MHA (value heads = heads).
    "nemotron3_diarization": lambda d: _mha(d, "audio_config"),
    "fastspeech2_conformer": _fastspeech2,
    "fastspeech2_conformer_with_hifigan": _fastspeech2_hifigan,
    # AST's positions are fixed by its spectrogram length (1024 frames): AUDIO_FRAMES here.
    "audio-spectrogram-transformer": hf._set(max_length=AUDIO_FRAMES),
    # `num_patches` is derived from the context length, which the shrink cut (32 -> 16), but the
    # saved value (4) would override it: recomputed as the config does.
    "patchtsmixer": lambda d: d.update(
        num_patches=(d["context_length"] - d["patch_length"]) // d["patch_stride"] + 1
    ),
    # PatchTST embeds patches of `patch_length` steps (its config's default, 1 step with stride
    # 1, makes each "patch" one value: the input embedding a 1-wide product, no patching); its
    # checkpoints patch 12 or 16 steps at a stride of 8-12. Tiny: 4 patches of 4 steps of the
    # shrunk 16-step context.
    "patchtst": hf._set(patch_length=4, patch_stride=4),
    # TimesFM cuts its context into patches (32 of 512 steps) and forecasts a horizon (128) per
    # patch: the shrunk context (16) is no whole number of patches. Tiny: 4 patches of 8, a
    # horizon of 16 (2.5's quantile head likewise: 1024 -> 32 steps).
    "timesfm": hf._set(patch_length=8, context_length=32, horizon_length=16),
    "timesfm2_5": hf._set(
        patch_length=8, context_length=32, horizon_length=16, output_quantile_len=32
    ),
    # Its conformer attention has no grouped keys (k/v projections are num_attention_heads wide).
    "granite_speech5_ctc": lambda d: _mha(d, "encoder_config"),
}
INPUTS: dict[str, Callable[..., dict[str, Any]]] = {
    **dict.fromkeys(
        ("parakeet_rnnt", "parakeet_tdt", "nemotron_asr_streaming"), _transducer_inputs
    ),
    "nemotron3_5_asr": _prompted_inputs,
    # Granite Speech 5's extractor delta-expands (x2) then stacks pairs of frames (x2): its input
    # linear takes 4 x num_mel_bins per (stacked) frame.
    "granite_speech5_ctc": _stacked(lambda c: 4 * c.encoder_config.num_mel_bins),
    "csm": _csm_codes,
    "dia": _dia_inputs,
    "kyutai_speech_to_text": _kyutai_inputs,
    "voxtral_realtime": _voxtral_realtime_inputs,
    "fun_asr_nano": _fun_asr_nano_inputs,
    "nemo_speechlm": _nemo_speechlm_inputs,
    **dict.fromkeys(
        ("fastspeech2_conformer", "fastspeech2_conformer_with_hifigan"), _fastspeech2_labels
    ),
    # AST's `input_values` are a log-mel spectrogram [B, max_length frames, num_mel_bins] (its
    # feature extractor's output), not raw audio.
    "audio-spectrogram-transformer": lambda model, config, gen, batch: {
        **batch,
        "input_values": torch.randn(BATCH, config.max_length, config.num_mel_bins, generator=gen),
    },
    # omniASR's waveform encoder takes mono audio with its channel axis: [B, 1, samples].
    "omniasr_ctc": lambda model, config, gen, batch: {
        **batch,
        "input_values": batch["input_values"].unsqueeze(1),
    },
    # A wav2vec2 encoder (the default pairing) takes raw 16 kHz audio; the composite model names
    # no main input, so the modality's audio is not given.
    "speech-encoder-decoder": lambda model, config, gen, batch: {
        **batch,
        "input_values": torch.randn(BATCH, AUDIO_SAMPLES, generator=gen),
    },
    # TimesFM takes univariate series, [B, context] (or a list of 1-D series), not the
    # [B, context, channels] of the multivariate models; TimesFM 1 also each series' frequency
    # class (high / medium / low), as its users pass it.
    "timesfm": lambda model, config, gen, batch: {
        "past_values": torch.randn(BATCH, config.context_length, generator=gen),
        "freq": torch.randint(0, config.freq_size, (BATCH,), generator=gen),
    },
    "timesfm2_5": lambda model, config, gen, batch: {
        "past_values": torch.randn(BATCH, config.context_length, generator=gen),
    },
    # SeamlessM4T's extractor (wav2vec2-bert's) stacks pairs of mel frames: 2 x 16 bins here.
    "wav2vec2-bert": _stacked(lambda c: c.feature_projection_input_dim),
}
HEAD: dict[str, str] = {}

# The streaming FastConformer encoder (NemotronAsrStreamingAttention, shared by Nemotron 3.5 ASR)
# masks its position scores with `attention_mask.logical_not()`, which reads the mask as boolean;
# eager attention's mask is additive float (0 = attend), so under eager every attended key is
# masked and the encoder outputs NaN (a transformers 5.24 bug). sdpa builds the boolean mask the
# code expects: what a user of these models runs.
ATTENTION: dict[str, str] = dict.fromkeys(("nemotron_asr_streaming", "nemotron3_5_asr"), "sdpa")
UNSUPPORTED: dict[str, str] = {
    # Bark is three separately trained GPT models (semantic, coarse, fine acoustics) and an
    # EnCodec decoder, chained by `generate`: BarkModel has no forward, and its sub-models have
    # no head in transformers' auto tables for HEAD to pick.
    "bark": (
        "BarkModel defines no forward (a generate-only chain of BarkSemanticModel, "
        "BarkCoarseModel, BarkFineModel and EnCodec, each trained separately); the sub-models "
        "(model types semantic, coarse_acoustics, fine_acoustics) are in no transformers 5.24 "
        "task table, so no head can be picked"
    ),
}
