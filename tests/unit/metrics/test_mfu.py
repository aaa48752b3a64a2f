"""The MFU calculator and model lookup: named models, config.json files, and bad input."""

from __future__ import annotations

import json
import math

import pytest

from trainready.core.config import ConfigError
from trainready.data import model_entries
from trainready.metrics import peaks
from trainready.metrics.flops import model_flops_per_token
from trainready.metrics.mfu import calculate, format_text
from trainready.models.specs import get_spec, list_specs

QWEN3_8B_CONFIG = {  # the fields of huggingface.co/Qwen/Qwen3-8B config.json that matter
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}


def _write(path, config) -> str:
    path.write_text(json.dumps(config))
    return str(path)


def test_mfu_with_peak_tflops():
    r = calculate("qwen3-8b", seq_len=4096, tokens_per_s=64_000.0, devices=8, peak_tflops=989.0)
    spec = get_spec("Qwen3-8B")
    assert r["params"] == spec.matmul_params()
    assert r["flops_per_token"] == model_flops_per_token(spec, 4096).total
    assert r["flops_per_token"] == r["dense_flops_per_token"] + r["attention_flops_per_token"]
    assert r["tokens_per_s_per_device"] == 8_000.0
    assert r["mfu"] == pytest.approx(r["flops_per_token"] * 64_000.0 / 8 / 989e12)
    assert r["tflops_per_device"] == pytest.approx(r["mfu"] * 989.0)
    json.dumps(r)  # the CLI prints it as JSON


def test_mfu_with_device_kind():
    kind = next(k for k, table in peaks.PEAKS.items() if "bf16" in table)
    r = calculate("llama-3.1-8b", seq_len=8192, tokens_per_s=1e4, devices=1, device_kind=kind)
    assert r["peak_flops"] == peaks.peak_flops_for_kind(kind, "bf16")
    assert kind in r["peak_source"]
    assert r["mfu"] == pytest.approx(r["flops_per_token"] * 1e4 / r["peak_flops"])
    with pytest.raises(ConfigError):
        calculate("llama-3.1-8b", 8192, 1e4, 1, device_kind="no-such-device")


@pytest.mark.parametrize("peak", [{}, {"device_kind": "h100-sxm", "peak_tflops": 989.0}])
def test_exactly_one_peak_source(peak):
    with pytest.raises(ConfigError, match="exactly one of --device-kind"):
        calculate("qwen3-8b", 4096, 1e4, 8, **peak)


@pytest.mark.parametrize(
    "bad",
    [
        {"seq_len": 0},
        {"tokens_per_s": -1.0},
        {"tokens_per_s": math.nan},
        {"devices": 0},
        {"peak_tflops": 0.0},
        {"peak_tflops": math.inf},
    ],
)
def test_rejects_non_positive_numbers(bad):
    args = {"seq_len": 4096, "tokens_per_s": 1e4, "devices": 8, "peak_tflops": 989.0, **bad}
    with pytest.raises(ConfigError, match="must be a positive"):
        calculate("qwen3-8b", **args)


def test_unknown_model_lists_the_names():
    with pytest.raises(ConfigError) as err:
        calculate("qwen3-9b", 4096, 1e4, 8, peak_tflops=989.0)
    message = str(err.value)
    assert "\n" not in message
    assert "'qwen3-9b'" in message
    assert all(name in message for name in list_specs())


def test_names_are_case_insensitive_with_aliases():
    spec = get_spec("Qwen3-8B")
    assert get_spec("qwen3-8b") is spec
    assert get_spec("Qwen/Qwen3-8B") is spec
    llama = get_spec("llama-3.1-8b")
    assert get_spec("Llama3.1-8B") is llama
    assert get_spec("meta-llama/Llama-3.1-8B") is llama
    assert set(list_specs()) >= {e["name"] for e in model_entries()}


def test_config_json_path(tmp_path):
    path = _write(tmp_path / "config.json", QWEN3_8B_CONFIG)
    spec = get_spec(path)
    assert spec.total_params() == get_spec("qwen3-8b").total_params()
    assert spec.name == tmp_path.name
    r = calculate(path, seq_len=4096, tokens_per_s=64_000.0, devices=8, peak_tflops=989.0)
    named = calculate("qwen3-8b", seq_len=4096, tokens_per_s=64_000.0, devices=8, peak_tflops=989.0)
    assert r["flops_per_token"] == named["flops_per_token"]
    assert get_spec(tmp_path) == spec  # a model folder works too


@pytest.mark.parametrize("entry", model_entries(), ids=lambda e: e["name"])
def test_hf_configs_of_every_family(tmp_path, entry):
    config = {"model_type": entry["family"].split()[0], **entry["config"]}
    spec = get_spec(_write(tmp_path / "config.json", config))
    named = get_spec(entry["name"])
    assert (spec.total_params(), spec.matmul_params()) == (
        named.total_params(),
        named.matmul_params(),
    )


def test_nested_text_config(tmp_path):
    entry = next(e for e in model_entries() if e["family"] == "gemma3")
    config = {"model_type": "gemma3", "text_config": entry["config"]}
    spec = get_spec(_write(tmp_path / "config.json", config))
    assert spec.total_params() == get_spec(entry["name"]).total_params()


def test_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096,')
    with pytest.raises(ConfigError, match="not valid JSON") as err:
        get_spec(str(path))
    assert str(path) in str(err.value)


def test_missing_key_names_the_file_and_key(tmp_path):
    config = {k: v for k, v in QWEN3_8B_CONFIG.items() if k != "num_hidden_layers"}
    path = _write(tmp_path / "config.json", config)
    with pytest.raises(ConfigError, match="num_hidden_layers") as err:
        calculate(path, 4096, 1e4, 8, peak_tflops=989.0)
    assert path in str(err.value)


def test_bad_values_name_the_file(tmp_path):
    path = _write(tmp_path / "config.json", {**QWEN3_8B_CONFIG, "vocab_size": "151936"})
    with pytest.raises(ConfigError, match="vocab_size must be a non-negative integer"):
        get_spec(path)
    path = _write(tmp_path / "moe.json", {**QWEN3_8B_CONFIG, "num_experts": 8})
    with pytest.raises(ConfigError, match="num_experts_per_tok"):
        get_spec(path)


def test_missing_file(tmp_path):
    path = str(tmp_path / "absent" / "config.json")
    with pytest.raises(ConfigError, match="cannot read") as err:
        get_spec(path)
    assert path in str(err.value)


def test_format_text_explains_the_numbers():
    r = calculate("qwen3-8b", seq_len=4096, tokens_per_s=64_000.0, devices=8, peak_tflops=989.0)
    text = format_text(r)
    assert "Qwen3-8B" in text
    assert f"6 * {r['params']:,} + 12 * 36 * 32 * 128 * 4,096" in text
    assert f"{r['mfu']:.2%}" in text
    assert "[" not in text  # the CLI prints through rich, which reads brackets as markup


def test_format_text_mla_attention_dims():
    r = calculate("deepseek-v3", seq_len=4096, tokens_per_s=1e5, devices=64, peak_tflops=989.0)
    assert "6 * 61 * 128 * (192 + 128) * 4,096" in format_text(r)


def test_devices_counts_what_the_kind_is_per():
    """--devices counts GPUs, chips or logical NeuronCores, as the peak is per one of them: the
    same Trainium2 throughput gives one MFU whether counted in chips or in logical cores."""
    per = {"tokens_per_s": 1e5, "seq_len": 8192}
    cores = calculate("qwen3-8b", devices=64, device_kind="trn2-core", **per)
    chips = calculate("qwen3-8b", devices=16, device_kind="trn2-chip", **per)
    assert cores["mfu"] == pytest.approx(chips["mfu"])
    assert cores["device_unit"] == "logical NeuronCores (LNC=2, 4 per chip)"
    assert chips["device_unit"] == "chips"
    assert "/ 64 logical NeuronCores (LNC=2, 4 per chip) =" in format_text(cores)
    gpus = calculate("qwen3-8b", devices=8, device_kind="h100-sxm", **per)
    assert gpus["device_unit"] == "GPUs" and "/ 8 GPUs =" in format_text(gpus)
    assert calculate("qwen3-8b", devices=1, device_kind="tpu-v5p", **per)["device_unit"] == "chip"
    given = calculate("qwen3-8b", devices=8, peak_tflops=989.0, **per)
    assert given["device_unit"] == "devices (each with the --peak-tflops peak)"


def test_the_devices_option_says_what_it_counts():
    from typer.testing import CliRunner

    from trainready.cli.app import app

    help_text = " ".join(CliRunner().invoke(app, ["mfu", "--help"]).output.split())
    for unit in ("GPUs for GPU kinds", "chips for the -chip and TPU kinds", "logical NeuronCores"):
        assert unit in help_text.replace("│ ", "")
