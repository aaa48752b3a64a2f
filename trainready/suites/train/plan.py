"""Which train cases a run plans, and the training spec of each of a case's scenarios (the suite's
contract: `suite.py`).

A case is one training configuration: the preset's defaults for the device (a debug Qwen3 on the
CPU, 1.7B on accelerators; smoke: a few steps, cold only), overridden by `--set`, validated whole
before the run starts; standard adds activation checkpointing, full whole-model compile and bf16
parameters. `price_per_hour` (`--price-per-hour`, `--set price_per_hour=P`) measures nothing: it
rides in the params, where the report reads it to price the ledger. `step_timing_s` (the steady
steps' sampling budget per process, STEP_TIMING_S by default) and `process_timing_s` (the repeat
processes' budget per case, PROCESS_TIMING_S by default) ride in them only where given, so a run
without them keeps the params and case ids it always had. `scenario_spec` turns a
case, a mode and a scenario into the `TrainSpec` a fresh process trains.
"""

from __future__ import annotations

from typing import Any

from trainready.core.case import Case
from trainready.core.config import ConfigError, RunConfig
from trainready.device import default_compile_backend, device_type
from trainready.metrics import ledger
from trainready.suites.train.loop import TrainSpec

NAME = "train"
DEFAULT_DTYPE = "bf16"
MODES = ("eager", "compiled")
SCENARIOS = ("cold", "warm", "arch_change", "shape_change")
ARCH_CHANGES: dict[str, tuple[str, Any, Any]] = {
    # name: (Qwen3Config field, the edit, the edit when the model already has it)
    "activation": ("mlp_activation", "gelu", "silu"),
    "norm": ("extra_norm", True, False),
}

_CPU_DEFAULTS = {"model": "debug", "seq_len": 64, "batch_size": 4, "steps": 8, "warmup": 2}
_ACCEL_DEFAULTS = {"model": "1.7B", "seq_len": 4096, "batch_size": 2, "steps": 30, "warmup": 5}


# smoke: the debug model on any device, the cold scenario only (a first look, not a measure).
_SMOKE = {**_CPU_DEFAULTS, "steps": 4, "warmup": 1, "scenarios": ("cold",)}


# Seconds of steady steps a training process may run past its planned ones for their median's
# 95% interval to come within ±5% (`loop.steady_sampler`); `--set step_timing_s` overrides. The
# quick CPU case's 8 processes add at most 4 s; an accelerator's slower steps get more.
STEP_TIMING_S = {"cpu": 0.5, "accelerator": 5.0}


def step_timing_s(p: dict[str, Any], device: str) -> float:
    """A training process's steady-step sampling budget: the option, or STEP_TIMING_S."""
    if "step_timing_s" in p:
        return float(p["step_timing_s"])
    return STEP_TIMING_S["cpu" if device_type(device) == "cpu" else "accelerator"]


# Seconds of extra training processes a case may add, after its planned scenarios, for the
# pooled rate's interval over processes (the process is the unit sampled) to come within ±5%:
# each adds a pair, one process per mode, on the warm caches (`processes.add_repeats`);
# `--set process_timing_s` overrides, 0 turns it off. The quick CPU case's pair costs about 10 s.
PROCESS_TIMING_S = {"cpu": 30.0, "accelerator": 300.0}


def process_timing_s(p: dict[str, Any], device: str) -> float:
    """A case's budget for repeat processes: the option, or PROCESS_TIMING_S."""
    if "process_timing_s" in p:
        return float(p["process_timing_s"])
    return PROCESS_TIMING_S["cpu" if device_type(device) == "cpu" else "accelerator"]


def _defaults(device: str, preset: str = "quick") -> dict[str, Any]:
    if preset == "smoke":
        return dict(_SMOKE)
    return dict(_CPU_DEFAULTS if device_type(device) == "cpu" else _ACCEL_DEFAULTS)


def _scenarios(value: Any) -> list[str]:
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n).strip() for n in names if str(n).strip()]
    for n in names:
        if n not in SCENARIOS:
            raise ConfigError(f"unknown scenario {n!r}; valid: {', '.join(SCENARIOS)}")
    if names and "cold" not in names:
        raise ConfigError("scenarios other than cold need cold first: it fills the caches")
    return [s for s in SCENARIOS if s in names]


def _number(opts: dict[str, Any], key: str, kind: type) -> Any:
    value = opts[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"option {key} must be a number, got {value!r}")
    if kind is int and value != int(value):
        raise ConfigError(f"option {key} must be an integer, got {value!r}")
    return kind(value)


def _flag(opts: dict[str, Any], key: str) -> bool:
    value = opts.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"option {key} must be true or false, got {value!r}")
    return value


def _base_params(cfg: RunConfig) -> dict[str, Any]:
    opts = {
        **_defaults(cfg.device, cfg.preset),
        "lr": TrainSpec.lr,
        "nproc": 1,
        **cfg.options,
    }
    seq_len = _number(opts, "seq_len", int)
    opts.setdefault("shape_seq_len", max(1, seq_len // 2))
    params = {
        "model": str(opts["model"]),
        "seq_len": seq_len,
        "batch_size": _number(opts, "batch_size", int),
        "steps": _number(opts, "steps", int),
        "warmup": _number(opts, "warmup", int),
        "dtype": cfg.dtype or DEFAULT_DTYPE,
        "precision": str(opts.get("precision", "autocast")),
        "compile": str(opts.get("compile", "blocks")),
        "compile_backend": str(opts.get("compile_backend") or default_compile_backend(cfg.device)),
        "ac": _flag(opts, "ac"),
        "lr": _number(opts, "lr", float),
        "arch_change": str(opts.get("arch_change", "activation")),
        "shape_seq_len": _number(opts, "shape_seq_len", int),
        "scenarios": _scenarios(opts.get("scenarios", SCENARIOS)),
        "nproc": _number(opts, "nproc", int),
        "pg_backend": opts.get("pg_backend"),
        "profile": _flag(opts, "profile"),
    }
    # Not a measurement setting: the report turns the ledger's seconds into money with it. Kept
    # out of the params unless given, so a run without a price keeps the params it always had.
    price = ledger.check_price(opts.get("price_per_hour"))
    if price is not None:
        params["price_per_hour"] = price
    # Likewise kept out unless given: the defaults depend on the device (`step_timing_s`,
    # `process_timing_s`).
    for key in ("step_timing_s", "process_timing_s"):
        if key in opts:
            params[key] = _number(opts, key, float)
    _check(params, cfg.device)
    return params


def _check(p: dict[str, Any], device: str) -> None:
    if p["compile"] == "none":
        raise ConfigError("compile must be blocks or model: eager runs alongside it anyway")
    if p["arch_change"] not in ARCH_CHANGES:
        raise ConfigError(
            f"unknown arch_change {p['arch_change']!r}; valid: {', '.join(ARCH_CHANGES)}"
        )
    if p["warmup"] < 0 or p["steps"] < p["warmup"] + 2:
        raise ConfigError(
            f"steps ({p['steps']}) must exceed warmup ({p['warmup']}) + 1: "
            "at least one steady step is timed"
        )
    for key in ("step_timing_s", "process_timing_s"):
        if p.get(key, 0.0) < 0:
            raise ConfigError(f"{key} must be >= 0 seconds, got {p[key]}")
    if p["nproc"] < 1:
        raise ConfigError(f"nproc must be >= 1, got {p['nproc']}")
    if p["batch_size"] % p["nproc"]:
        raise ConfigError(f"batch_size {p['batch_size']} does not split over {p['nproc']} ranks")
    if p["shape_seq_len"] == p["seq_len"]:
        raise ConfigError("shape_seq_len must differ from seq_len")
    for mode in MODES:  # every spec a case will run must be valid now, not halfway through it
        for scenario in p["scenarios"]:
            scenario_spec(p, device, mode, scenario)


def _name(p: dict[str, Any]) -> str:
    tags = [f"qwen3-{p['model']}", f"T{p['seq_len']}", f"B{p['batch_size']}", p["dtype"]]
    if p["compile"] == "model":
        tags.append("whole-model")
    if p["precision"] == "bf16_params":
        tags.append("bf16-params")
    if p["ac"]:
        tags.append("ac")
    if p["nproc"] > 1:
        tags.append(f"fsdp{p['nproc']}")
    return "/".join(tags)


def cases(cfg: RunConfig) -> list[Case]:
    base = _base_params(cfg)
    variants = [base]
    if cfg.preset in ("standard", "full"):
        variants.append({**base, "ac": True})
    if cfg.preset == "full":
        variants.append({**base, "compile": "model"})
        if base["dtype"] == "bf16":
            variants.append({**base, "precision": "bf16_params"})
    unique = {_name(p): p for p in variants}
    return [Case(NAME, name, p) for name, p in unique.items()]


def scenario_spec(p: dict[str, Any], device: str, mode: str, scenario: str) -> TrainSpec:
    overrides: dict[str, Any] = {}
    seq_len = p["seq_len"]
    if scenario == "arch_change":
        from trainready.models.qwen3 import qwen3_config

        field_name, edit, undo = ARCH_CHANGES[p["arch_change"]]
        current = getattr(qwen3_config(p["model"]), field_name)
        overrides[field_name] = undo if current == edit else edit
    elif scenario == "shape_change":
        seq_len = p["shape_seq_len"]
    return TrainSpec(
        device=device,
        model=p["model"],
        model_overrides=overrides,
        seq_len=seq_len,
        batch_size=p["batch_size"],
        steps=p["steps"],
        dtype=p["dtype"],
        precision=p["precision"],
        compile="none" if mode == "eager" else p["compile"],
        compile_backend=p["compile_backend"],
        activation_checkpointing=p["ac"],
        lr=p["lr"],
        warmup=p["warmup"],
        timing_s=step_timing_s(p, device),
    )
