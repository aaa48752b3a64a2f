"""MFU from a published throughput: the logic behind `trainready mfu`.

Given a model, a sequence length and the tokens/s a run reached on D devices, compute the training
FLOPs per token (TorchTitan's 6 * N + 12 * L * H * Q * T) and the fraction of the devices' peak
FLOP/s that represents. The peak comes from the peak table (`--device-kind`) or the user
(`--peak-tflops`), never from a silent default.
"""

from __future__ import annotations

import math
from typing import Any

from trainready.core.config import ConfigError
from trainready.metrics.flops import mfu as mfu_fraction
from trainready.metrics.flops import model_flops_per_token
from trainready.metrics.peaks import device_unit, peak_flops_for_kind
from trainready.models.specs import ModelSpec, get_spec


def _check_positive_int(flag: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}")


def _check_positive_number(flag: str, value: float) -> None:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (is_number and math.isfinite(value) and value > 0):
        raise ConfigError(f"{flag} must be a positive number, got {value!r}")


def _resolve_peak(
    device_kind: str | None, peak_tflops: float | None, dtype: str
) -> tuple[float, str]:
    """Peak FLOP/s per device and where it came from."""
    if (device_kind is None) == (peak_tflops is None):
        raise ConfigError(
            "give exactly one of --device-kind (a key of the peak table) "
            "or --peak-tflops (peak TFLOP/s per device)"
        )
    if peak_tflops is not None:
        _check_positive_number("--peak-tflops", peak_tflops)
        return peak_tflops * 1e12, "given with --peak-tflops"
    return peak_flops_for_kind(device_kind, dtype), f"peak table: {device_kind}, {dtype}"


_PER_GIVEN_PEAK = "devices (each with the --peak-tflops peak)"


def _params_note(spec: ModelSpec) -> str:
    """How N was counted, in words."""
    embedding = "tied embedding once" if spec.tie_embeddings else "input embedding excluded"
    experts = f", experts {spec.experts_per_token} of {spec.num_experts}" if spec.is_moe else ""
    return f"norms included, {embedding}{experts}"


def calculate(
    model: str,
    seq_len: int,
    tokens_per_s: float,
    devices: int,
    device_kind: str | None = None,
    peak_tflops: float | None = None,
    dtype: str = "bf16",
) -> dict[str, Any]:
    """MFU of `devices` devices that together process `tokens_per_s` training tokens/s of `model`
    (a named model or a config.json path) at sequence length `seq_len`. Exactly one of
    `device_kind` (a key of trainready.metrics.peaks.PEAKS, read at `dtype`, which the table validates)
    or `peak_tflops` is required.
    Returns plain numbers and strings (JSON-ready); `mfu` is a fraction."""
    _check_positive_int("--seq-len", seq_len)
    _check_positive_number("--tokens-per-s", tokens_per_s)
    _check_positive_int("--devices", devices)
    peak_flops, peak_source = _resolve_peak(device_kind, peak_tflops, dtype)
    spec = get_spec(model)
    flops = model_flops_per_token(spec, seq_len)
    per_device = tokens_per_s / devices
    achieved = flops.total * per_device
    return {
        "model": spec.name,
        "model_source": spec.source,
        "seq_len": seq_len,
        "tokens_per_s": tokens_per_s,
        "devices": devices,
        # What --devices counted: GPUs, chips or logical NeuronCores, as the peak is per one.
        "device_unit": device_unit(device_kind, devices) if device_kind else _PER_GIVEN_PEAK,
        "dtype": dtype,
        "params": flops.params,
        "params_note": _params_note(spec),
        "total_params": spec.total_params(),
        "active_params": spec.active_params(),
        "layers": spec.num_layers,
        "heads": spec.num_heads,
        "qk_head_dim": spec.attention_qk_dim,
        "v_head_dim": spec.attention_v_dim,
        "dense_flops_per_token": flops.dense,
        "attention_flops_per_token": flops.attention,
        "flops_per_token": flops.total,
        "tokens_per_s_per_device": per_device,
        "flops_per_device": achieved,
        "tflops_per_device": achieved / 1e12,
        "peak_flops": peak_flops,
        "peak_tflops": peak_flops / 1e12,
        "peak_source": peak_source,
        "mfu": mfu_fraction(flops.total, per_device, peak_flops),
    }


def _giga(flops: float) -> str:
    return f"{flops / 1e9:,.2f} GFLOP"


def _attention_formula(r: dict[str, Any]) -> tuple[str, str]:
    """The attention term symbolically and with the numbers put in."""
    lht = f"{r['layers']} * {r['heads']}"
    if r["qk_head_dim"] == r["v_head_dim"]:
        return "12 * L * H * Q * T", f"12 * {lht} * {r['qk_head_dim']} * {r['seq_len']:,}"
    dims = f"({r['qk_head_dim']} + {r['v_head_dim']})"
    return "6 * L * H * (Q_qk + Q_v) * T", f"6 * {lht} * {dims} * {r['seq_len']:,}"


def format_text(result: dict[str, Any]) -> str:
    """`calculate`'s result for a human: each step of the formula with its numbers."""
    r = result
    symbolic, numeric = _attention_formula(r)
    rows = [
        ("Model", f"{r['model']} at T = {r['seq_len']:,}"),
        ("Parameters", f"{r['total_params']:,} total, {r['active_params']:,} active per token"),
        ("N", f"{r['params']:,}, counted as TorchTitan does"),
        ("", f"({r['params_note']})"),
        ("FLOPs/token", f"6 * N + {symbolic}"),
        ("", f"= 6 * {r['params']:,} + {numeric}"),
        (
            "",
            f"= {_giga(r['dense_flops_per_token'])} + {_giga(r['attention_flops_per_token'])}"
            f" = {_giga(r['flops_per_token'])}",
        ),
        (
            "Per device",
            f"{r['tokens_per_s']:,.1f} tokens/s / {r['devices']} {r['device_unit']}"
            f" = {r['tokens_per_s_per_device']:,.1f} tokens/s",
        ),
        (
            "Achieved",
            f"{_giga(r['flops_per_token'])} * {r['tokens_per_s_per_device']:,.1f} tokens/s"
            f" = {r['tflops_per_device']:,.1f} TFLOP/s per device",
        ),
        ("Peak", f"{r['peak_tflops']:,.1f} TFLOP/s per device ({r['peak_source']})"),
        ("MFU", f"{r['tflops_per_device']:,.1f} / {r['peak_tflops']:,.1f} = {r['mfu']:.2%}"),
    ]
    if r["mfu"] > 1:
        rows.append(("Note", "MFU above 100%: check the throughput, the device count and the peak"))
    width = max(len(label) for label, _ in rows) + 2
    return "\n".join(f"{label:<{width}}{text}".rstrip() for label, text in rows)
