"""Train suite: tokens/s, MFU and the time-to-first-step ledger of eager against compiled training.

One case is one training configuration (a Qwen3 size, sequence length, batch, dtype...). It trains
the model in both modes -- eager, and compiled (each block, or the whole model) -- under four
scenarios, each in a fresh process (`python -m trainready.training`, or fresh ranks under torchrun
with `--nproc N`, FSDP2 over them):

- cold: empty compile caches (a new TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR and the vendor's
  cache dirs: `trainready.device.compile_cache_env`);
- warm: the same run again, with the caches cold left;
- arch_change: warm caches, one small edit to the model (the MLP activation swapped, or a norm
  added after each sublayer): what a researcher's ablation costs;
- shape_change: warm caches, another sequence length (half, by default).

Each mode has its own cache directory, made fresh for the case and shared by its scenarios in
that order; it is deleted when the case ends.

Why one case for all of it: warm needs the cache that cold of the same mode left, and the ledger
and the parity check need both modes. As separate cases they would depend on their order and on
running on the same machine, which --jobs, --shard and --resume do not promise; as one case each
run is self-contained, and --resume redoes an unfinished case whole. (Two cases running at once
on one device, with --jobs > 1, disturb each other's timing, as in every timing suite.)

The modes take turns, scenario by scenario (eager cold, compiled cold, eager warm, ...), so load
that drifts over the case slows both alike. Measured per mode and scenario: the first step (model
on the device to the first step's loss, with setup, forward, backward and optimizer apart), the
steady steps (after `warmup`), peak memory, and the loss of every step. Then:

- one steady rate per mode: the median of the steady steps of every scenario at the configured
  shape (shape_change, at another, gets its own), with its interval and the spread; tokens/s and
  MFU (TorchTitan's 6N + 12LHQT FLOPs per token against the run's peak for the dtype) from it, and
  the speedup, "inconclusive" with the reason when the case cannot support it. The interval is
  what a rerun must meet, and a rerun starts new processes: so it is over processes, not steps
  (each scenario is one). It is the hull of (a) the bootstrap interval of the pooled median (the
  steps' noise) and (b) Student's t interval of the level the scenarios' steady medians scatter
  about, that scatter pooled over modes and pools (`stats.between_processes`, `level_interval`:
  with cold and warm, 2 degrees of freedom, t = 4.3; with one scenario, none, and (a) alone),
  then widened by how far the drift reference moved: a fixed GEMM every training process reads
  after its first step and after its last, and the peak's calibration read it too (`case_drift`;
  the speedup, a ratio of modes timed in turn, by the move within the case alone). Inconclusive
  when the reference moved over stats.MAX_DRIFT, when a mode's processes' medians differ by more
  (a rerun's could land anywhere there), or when the steps are too few or too spread;
- parity: the compiled loss curve against the eager one, scenario by scenario, step by step
  (`probes.numerics.loss_curve_compare`); a fast wrong run is `fail_numerics`;
- the ledger: total(N) = first_step + (N - 1) * tokens_per_step / tokens_per_s per mode, each
  scenario's own first step at its pool's rate, and the break-even step of compiled against eager
  per scenario with its range over the speedup's interval and first steps (one sample each)
  moved by the case's drift (the larger of cold's and warm's medians apart and the reference's
  move) (`trainready.ledger`).

Measured on a 2-core machine under load (issue #17): a process's steps and its reference GEMM run
either with both its threads on a core (the GEMM at ~700 GFLOP/s) or waiting on each other
(5-10 GFLOP/s), so whole processes land 1.5-3x apart; a bootstrap over steps saw none of it.

Options (`--set KEY=VALUE`; defaults for the cpu / for accelerators): model (debug / 1.7B),
seq_len (64 / 4096), batch_size (4 / 2, global), steps (8 / 30), warmup (2 / 5), compile
(blocks | model), precision (autocast | bf16_params), ac (activation checkpointing, false),
arch_change (activation | norm), shape_seq_len (seq_len // 2), lr, scenarios (a subset in the
order above, cold included when any other is). `--compile-backend`, `--nproc` and `--pg-backend`
apply too. Presets: quick runs the configuration; standard adds the same with activation
checkpointing; full adds whole-model compile and bf16 parameters with fp32 optimizer state.

`--profile` (option `profile`, `train_profile.py`): in each mode the scenario whose speed the headline uses (warm,
else cold) runs `extra_steps` more steps after its timed ones, recorded by torch.profiler
(`trainready.profile.capture.profile_after`: until the timed steps are done its hook only counts,
so they, the first step and the peak memory are measured as without profiling, and the record
keeps them alone). The gzipped Kineto trace and metadata.json land in the case's artifacts
directory (RUN_DIR/artifacts/CASE/MODE-SCENARIO/); the diagnostics name them (relative to the run
directory) with a short analysis. A capture that fails is a diagnostic: if the process died after
its timed steps, the scenario is measured again without profiling (cold with a fresh cache).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainready import ledger
from trainready.config import ConfigError, RunConfig
from trainready.core.case import FAILING, STATUSES, Case, Outcome
from trainready.core.context import CaseContext
from trainready.core.procs import guarded_command
from trainready.device import compile_cache_env, device_type
from trainready.probes import ties
from trainready.probes.compile import backend_unsupported
from trainready.probes.flops import peak_diagnostics
from trainready.probes.numerics import loss_curve_compare
from trainready.probes.ops import fell_back
from trainready.probes.timing import TimingStats
from trainready.stats import (
    CONFIDENCE,
    MAX_DRIFT,
    between_processes,
    drift,
    drift_why,
    hull,
    level_interval,
    median_interval,
    ratio_interval,
    spread_why,
    widen,
)
from trainready.suites import train_profile
from trainready.training import TrainSpec

NAME = "train"
DEFAULT_DTYPE = "bf16"
DEFAULT_BUDGET_S = 3600.0
# The --set options this suite reads, checked before a run starts (see core/options.py).
OPTIONS = {
    "model": str,
    "seq_len": range(1, 1 << 24),
    "batch_size": range(1, 1 << 20),
    "steps": range(2, 1_000_001),
    "warmup": range(0, 1_000_000),
    "lr": float,
    "compile": ("blocks", "model"),
    "precision": ("autocast", "bf16_params"),
    "ac": bool,
    "arch_change": ("activation", "norm"),
    "shape_seq_len": range(1, 1 << 24),
    "scenarios": ["cold", "warm", "arch_change", "shape_change"],
    "compile_backend": str,
    "nproc": range(1, 1025),
    "pg_backend": str,
    "profile": bool,
}

MODES = ("eager", "compiled")
SCENARIOS = ("cold", "warm", "arch_change", "shape_change")
ARCH_CHANGES: dict[str, tuple[str, Any, Any]] = {
    # name: (Qwen3Config field, the edit, the edit when the model already has it)
    "activation": ("mlp_activation", "gelu", "silu"),
    "norm": ("extra_norm", True, False),
}
# Relative per-step deviation allowed between the eager and the compiled loss curve. Kernels
# fuse and reorder reductions, so curves agree to rounding, which bf16 makes coarse.
PARITY_REL_TOL = {"fp32": 1e-3, "bf16": 2e-2}
LOG_TAIL_CHARS = 3000


_CPU_DEFAULTS = {"model": "debug", "seq_len": 64, "batch_size": 4, "steps": 8, "warmup": 2}
_ACCEL_DEFAULTS = {"model": "1.7B", "seq_len": 4096, "batch_size": 2, "steps": 30, "warmup": 5}


# --- cases ----------------------------------------------------------------------------------------


# smoke: the debug model on any device, the cold scenario only (a first look, not a measure).
_SMOKE = {**_CPU_DEFAULTS, "steps": 4, "warmup": 1, "scenarios": ("cold",)}


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
        "compile_backend": str(opts.get("compile_backend", "inductor")),
        "ac": _flag(opts, "ac"),
        "lr": _number(opts, "lr", float),
        "arch_change": str(opts.get("arch_change", "activation")),
        "shape_seq_len": _number(opts, "shape_seq_len", int),
        "scenarios": _scenarios(opts.get("scenarios", SCENARIOS)),
        "nproc": _number(opts, "nproc", int),
        "pg_backend": opts.get("pg_backend"),
        "profile": _flag(opts, "profile"),
    }
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


# --- one scenario in a fresh process -------------------------------------------------------------


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
    )


@dataclass
class Scenario:
    """What one scenario's process(es) gave back: a record, or why there is none."""

    mode: str
    name: str
    record: dict[str, Any] | None = None
    status: str = "pass"  # pass, or the failing status the scenario alone earned
    error: str | None = None
    detail: str = ""  # traceback or output tail
    process_s: float = 0.0  # the whole process(es), start-up and import included
    spec: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None  # the capture (--profile): files, summary or error


_KIND_STATUS = {"compile": "fail_compile", "oom": "oom", "run": "fail_run", "error": "fail_run"}


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""


def run_single(
    spec: TrainSpec,
    env: dict[str, str],
    work: Path,
    timeout_s: float,
    profile: dict[str, Any] | None = None,
) -> Scenario:
    """`python -m trainready.training` in a fresh interpreter with `env` added; with `profile`
    (see `train_profile.profile_plan`), `python -m trainready.suites.train_profile` instead."""
    work.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, log_path = work / "spec.json", work / "result.json", work / "output.log"
    spec_path.write_text(json.dumps(spec.to_json()))
    cmd = [sys.executable, "-m", "trainready.training", str(spec_path), str(out_path)]
    if profile is not None:
        plan_path = work / "profile.json"
        plan_path.write_text(json.dumps(profile))
        cmd = [sys.executable, "-m", train_profile.MODULE, str(spec_path), str(out_path)]
        cmd.append(str(plan_path))
    # Dies with this worker even outside its process group; refused once the run has stopped.
    cmd, guard_env = guarded_command(cmd)
    s = Scenario("", "")
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.run(
                cmd,
                env={**os.environ, **env, **guard_env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            s.status, s.error = "timeout", f"exceeded the case budget ({timeout_s:.0f} s left)"
            s.detail = _tail(log_path)
            return s
    s.process_s = time.perf_counter() - t0
    result = json.loads(out_path.read_text()) if out_path.exists() else None
    if proc.returncode == 0 and result is not None:
        s.record = result
    elif result is not None and "error" in result:
        s.status, s.error = _KIND_STATUS[result["kind"]], result["error"]
        s.detail = result.get("traceback", "")
    else:
        from trainready.core.runner import signal_name

        s.status, s.error = "crash", f"training process died: {signal_name(proc.returncode)}"
        s.detail = _tail(log_path)
    return s


def combine_ranks(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One record for a data-parallel step: the slowest rank's times (a step ends when every rank
    has finished it), the mean of the ranks' losses (each rank's loss is the mean over an equal
    share of the global batch, so their mean is the global loss), the largest peak memory."""
    head = dict(records[0])
    head["first_step_s"] = max(r["first_step_s"] for r in records)
    head["first_step_phases"] = {
        k: max(r["first_step_phases"][k] for r in records) for k in head["first_step_phases"]
    }
    head["step_times_s"] = [
        max(ts) for ts in zip(*(r["step_times_s"] for r in records), strict=True)
    ]
    head["losses"] = [sum(ls) / len(ls) for ls in zip(*(r["losses"] for r in records), strict=True)]
    peaks = [r["peak_memory_bytes"] for r in records if r.get("peak_memory_bytes") is not None]
    head["peak_memory_bytes"] = max(peaks) if peaks else None
    head["finite"] = all(r["finite"] for r in records)
    head["per_rank_first_step_s"] = [r["first_step_s"] for r in records]
    head.pop("rank", None)
    return head


def run_ranks(
    spec: TrainSpec,
    nproc: int,
    backend: str | None,
    env: dict[str, str],
    timeout_s: float,
    profile: dict[str, Any] | None = None,
) -> Scenario:
    """`rank_train` on `nproc` fresh ranks (torchrun), FSDP2 over them (with `profile`:
    `rank_train_profiled`, rank 0 profiled)."""
    from trainready.launch import LaunchError, launch

    s = Scenario("", "")
    t0 = time.perf_counter()
    target, args = "trainready.training:rank_train", {"spec": spec.to_json()}
    if profile is not None:
        target = f"{train_profile.MODULE}:rank_train_profiled"
        args = {**args, "profile": profile}
    try:
        res = launch(
            target,
            nproc,
            device=spec.device,
            backend=backend,
            args=args,
            timeout_s=timeout_s,
            env=env,
        )
    except LaunchError as e:
        s.status, s.error = "crash", "ranks did not start"
        s.detail = str(e)[-LOG_TAIL_CHARS:]
        return s
    s.process_s = time.perf_counter() - t0
    if res.ok:
        s.record = combine_ranks([r for r in res.per_rank if r is not None])
        return s
    if res.timed_out:
        s.status, s.error = "timeout", f"exceeded the case budget ({timeout_s:.0f} s left)"
    elif res.first_error is not None:
        rank, error = res.first_error
        kind = "compile" if error.startswith("CompileFailure") else res.kinds[rank]
        s.status = _KIND_STATUS.get(kind or "error", "unsupported")
        s.status = "unsupported" if kind == "unsupported" else s.status
        s.error = f"rank {rank}: {error}"
    else:
        s.status, s.error = "crash", f"ranks lost: {', '.join(res.status)}"
    s.detail = "\n".join(t for t in res.stderr_tails if t)[-LOG_TAIL_CHARS:]
    return s


def _run(
    p: dict[str, Any],
    spec: TrainSpec,
    env: dict[str, str],
    work: Path,
    deadline: float,
    profile: dict[str, Any] | None = None,
) -> Scenario:
    left = max(1.0, deadline - time.monotonic())
    if p["nproc"] > 1:
        return run_ranks(spec, p["nproc"], p["pg_backend"], env, left, profile)
    return run_single(spec, env, work, left, profile)


def _run_as_profiled(p, env, work, deadline, spec, profile) -> Scenario:  # noqa: ANN001
    """`_run` in the argument order `train_profile.Run` calls it: (spec, profile plan)."""
    return _run(p, spec, env, work, deadline, profile)


def profiled_scenario(p: dict[str, Any]) -> str | None:
    """The scenario --profile captures in each mode: the one the headline speed comes from."""
    if not p.get("profile"):
        return None
    return "warm" if "warm" in p["scenarios"] else "cold"


@dataclass
class _ModeRun:
    """One mode's scenarios so far, with the compile cache they share (empty at the start)."""

    mode: str
    env: dict[str, str]
    why_unsupported: str | None  # the backend cannot compile for the device: nothing runs
    done: list[Scenario] = field(default_factory=list)


def _mode_run(p: dict[str, Any], ctx: CaseContext, mode: str, root: Path) -> _ModeRun:
    why = backend_unsupported(p["compile_backend"], ctx.device) if mode == "compiled" else None
    return _ModeRun(mode, compile_cache_env(ctx.device, root / mode / "cache"), why)


def _run_next(
    p: dict[str, Any], ctx: CaseContext, m: _ModeRun, name: str, root: Path, deadline: float
) -> None:
    """Run scenario `name` of mode `m` (after the ones `m` has done) and add it to `m.done`."""
    spec = scenario_spec(p, ctx.device, m.mode, name)
    if m.why_unsupported is not None:  # known before starting a process: say so, spend nothing
        m.done.append(
            Scenario(
                m.mode, name, status="unsupported", error=m.why_unsupported, spec=spec.to_json()
            )
        )
        return
    if m.done and m.done[0].record is None:
        m.done.append(
            Scenario(m.mode, name, status="skipped", error="cold failed", spec=spec.to_json())
        )
        return
    work = root / m.mode / name
    with ctx.phase(f"{m.mode}/{name}"):
        if name == profiled_scenario(p):
            s = train_profile.run_profiled(
                functools.partial(_run_as_profiled, p, m.env, work, deadline),
                ctx, spec, m.env, work, (m.mode, name), p["dtype"],
            )  # fmt: skip
        else:
            s = _run(p, spec, m.env, work, deadline)
    s.mode, s.name, s.spec = m.mode, name, spec.to_json()
    m.done.append(s)


def run_mode(p: dict[str, Any], ctx: CaseContext, mode: str, root: Path, deadline: float):
    """The scenarios of one mode in order, sharing one compile cache that starts empty."""
    m = _mode_run(p, ctx, mode, root)
    for name in p["scenarios"]:
        _run_next(p, ctx, m, name, root, deadline)
    return m.done


def run_modes(
    p: dict[str, Any], ctx: CaseContext, root: Path, deadline: float
) -> dict[str, list[Scenario]]:
    """Both modes, scenario by scenario (eager cold, compiled cold, eager warm, ...): on a machine
    whose load drifts, both modes then run under much the same load, so the speedup stays fair.
    Each mode still has its own cache and runs its scenarios in order."""
    runs = [_mode_run(p, ctx, mode, root) for mode in MODES]
    for name in p["scenarios"]:
        for m in runs:
            _run_next(p, ctx, m, name, root, deadline)
    return {m.mode: m.done for m in runs}


# --- judging and summarising ------------------------------------------------------------------------


# One steady rate per mode. The scenarios at the configured shape (cold, warm, arch_change) differ
# in what their first step pays, not in what a steady step costs, so their steady steps are pooled
# into one rate; shape_change trains another sequence length and gets its own. (Measured apart,
# each scenario's rate carried its own noise, and the conclusions flipped between scenarios.)
MAIN_POOL = "main"
OWN_POOL = {"shape_change": "shape_change"}  # scenario -> its pool; every other: MAIN_POOL

# A rate supports a conclusion (else it, the speedup and the break-even steps read
# "inconclusive") when the drift reference moved at most stats.MAX_DRIFT during the case and since
# the peak's calibration, the mode's processes' steady medians differ by at most as much, with at
# least stats.MIN_SAMPLES steady steps per mode, a spread (IQR / median of the pooled steps) of at
# most stats.MAX_SPREAD (above it the steps do not share one rate: a busy machine, a noisy clock,
# scenarios running at different speeds) and, for the speedup, when its stats.CONFIDENCE interval
# lies on one side of 1: otherwise either mode could be the faster per step, so whether compiled
# ever breaks even is not known.


def pool_of(scenario: str) -> str:
    return OWN_POOL.get(scenario, MAIN_POOL)


# What a rerun's intervals must meet, and what one case can measure of it. The steps of one
# process share its state (where its threads landed, its allocator, its compiled graphs, the
# machine's speed while it ran): a rerun starts new processes, whose steps can sit apart from
# this run's by far more than the steps' own noise (on a quiet 2-core CI machine the compiled
# rate moved from 7171-11488 to 5528-6321 tokens/s between two runs, each interval a bootstrap
# over steps). Every scenario is a fresh process, so a case with several scenarios per mode
# measures that scatter itself: the process is the unit sampled (`stats.between_processes`).
#
# And the machine itself: every training process reads the drift reference (a fixed GEMM,
# `probes.drift`) after its first step and after its last, and a measured peak carries the reading
# taken with its calibration; how far those readings moved (`stats.drift`) is how far the
# machine's speed moved during the case and since the calibration, which every MFU is a share of.
#
# The cold and warm steady medians (the same model, shape and kernels; the modes take turns) are
# kept as the case's first drift figure, as before: they move with the machine too.
SAME_WORK = ("cold", "warm")
DRIFT_WORKLOAD = "the steady steps of cold and warm (the same model, shape and kernels), per mode"


def _reference(runs: dict[str, list[Scenario]] | None) -> list[float]:
    """The drift reference's readings (FLOP/s) of every process of the case, in the order run."""
    if not runs:
        return []
    turns = max((len(ss) for ss in runs.values()), default=0)
    order = [ss[i] for i in range(turns) for ss in (runs.get(m, []) for m in MODES) if i < len(ss)]
    return [float(x) for s in order if s.record for x in s.record.get("reference_flops") or [] if x]


def case_drift(
    summaries: dict[str, dict[str, Any]],
    runs: dict[str, list[Scenario]] | None = None,
    peak: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """How far the machine's speed moved over the case: {"workload", "readings_s" (per mode, the
    steady median of each SAME_WORK scenario in the order run), "process_moved" (the largest
    `stats.drift` of a mode's readings_s; None where no mode has two), "reference" (the drift
    reference read in the training processes: {"workload", "readings_flops", "calibration_flops",
    "moved_in_case" (over its readings), "moved" (and the calibration's)}, None if no process read
    it), "moved" (the largest of process_moved and the reference's moved: the first steps, one
    sample each, may have run that much faster or slower)}."""
    readings = {
        mode: [by[n]["step_s"] for n in SAME_WORK if by.get(n)] for mode, by in summaries.items()
    }
    moved = [d for xs in readings.values() if (d := drift([1 / x for x in xs if x > 0]))]
    known = any(len(xs) > 1 for xs in readings.values())
    process_moved = max(moved, default=0.0) if known else None
    found = _reference(runs)
    reference = None
    if found:
        calibration = (peak or {}).get("reference_flops")
        reference = {
            "workload": next(
                s.record.get("reference_workload")
                for ss in (runs or {}).values()
                for s in ss
                if s.record and s.record.get("reference_flops")
            ),
            "readings_flops": found,
            "calibration_flops": calibration,
            "moved_in_case": drift(found),
            "moved": drift(found + ([calibration] if calibration else [])),
        }
    figures = [x for x in (process_moved, reference and reference["moved"]) if x is not None]
    return {
        "workload": DRIFT_WORKLOAD,
        "readings_s": readings,
        "process_moved": process_moved,
        "reference": reference,
        "moved": max(figures) if figures else None,
    }


def steady(record: dict[str, Any], warmup: int) -> TimingStats:
    """The steps after the first and `warmup` more: the steady state."""
    return TimingStats.from_samples(record["step_times_s"][warmup:], record["clock"])


def scenario_summary(s: Scenario, warmup: int) -> dict[str, Any] | None:
    """What one scenario measured. Its own steady steps are kept as observed (`step_s`,
    `spread`, `steady_times_s`), but the mode's rate pools them with its pool's other scenarios'."""
    if s.record is None:
        return None
    r = s.record
    stats = steady(r, warmup)
    return {
        "first_step_s": r["first_step_s"],
        "first_step_phases": r["first_step_phases"],
        "step_s": stats.median_s,
        "spread": stats.spread,
        "steady_steps": stats.repeats,
        "steady_times_s": stats.samples,
        "reference_flops": r.get("reference_flops"),
        "tokens_per_step": r["tokens_per_step"],
        "clock": stats.clock,
        "losses": r["losses"],
        "flops_per_token": r["flops_per_token"],
        "params": r["params"],
        "moe_dispatch": r.get("moe_dispatch"),
        "world_size": r["world_size"],
        "peak_memory_bytes": r.get("peak_memory_bytes"),
        "memory_source": r.get("memory_source"),
        "memory_unavailable": r.get("memory_unavailable"),
        "process_s": s.process_s,
        "compile": _compile_summary(r.get("compile") or {}),
    }


def _steady_samples(by_scenario: dict[str, Any], names: list[str]) -> list[float]:
    return [x for n in names if by_scenario.get(n) for x in by_scenario[n]["steady_times_s"]]


def _process_medians(by_scenario: dict[str, Any], names: list[str]) -> list[float]:
    return [by_scenario[n]["step_s"] for n in names if by_scenario.get(n)]


@dataclass(frozen=True)
class Scatter:
    """What a case measured of how far its processes sit apart, and how far the machine moved:
    `sd` and `df` of the processes' steady medians (`stats.between_processes`, over every mode
    and pool), `apart` the widest disagreement of one mode's processes in one pool (max over min
    median, minus 1) and `apart_what` whose, `moved` the drift reference's move during the case
    and since the peak's calibration (rates, MFU), `moved_in_case` during the case alone (the
    speedup: a ratio of modes timed in turn on the machine as it is), and where it moved."""

    sd: float = 0.0
    df: int = 0
    apart: float | None = None
    apart_what: str = ""
    moved: float | None = None
    moved_in_case: float | None = None
    where: str = "during the case"

    @classmethod
    def of(
        cls, p: dict[str, Any], summaries: dict[str, dict[str, Any]], machine: dict[str, Any]
    ) -> Scatter:
        groups = {
            (pool, mode): _process_medians(summaries.get(mode, {}), names)
            for pool, names in _pools(p).items()
            for mode in MODES
        }
        sd, df = between_processes(list(groups.values()))
        aparts = {
            key: d for key, xs in groups.items() if (d := drift([1 / x for x in xs if x > 0]))
        }
        worst = max(aparts, key=aparts.__getitem__, default=None)
        what = ""
        if worst is not None:
            pool, mode = worst
            what = f"{len(groups[worst])} {mode} processes'" + (
                f" ({pool})" if pool != MAIN_POOL else ""
            )
        ref = machine.get("reference") or {}
        where = "during the case" + (
            " and since the peak's calibration" if ref.get("calibration_flops") else ""
        )
        apart = aparts[worst] if worst is not None else None
        return cls(sd, df, apart, what, ref.get("moved"), ref.get("moved_in_case"), where)

    def why(self) -> str | None:
        """Why the case's rates stand for no single figure: the machine moved more than
        stats.MAX_DRIFT, or one mode's processes differ by more (a rerun's processes could land
        anywhere in that range, in either mode: the scatter is the case's); None if neither."""
        if moved := drift_why(self.moved, self.where):
            return moved
        if self.apart is None or self.apart <= MAX_DRIFT:
            return None
        return (
            f"the {self.apart_what} steady medians differ by {self.apart:.0%} "
            f"(over {MAX_DRIFT:.0%}): a rerun's processes could land anywhere in that range"
        )


def steady_rate(
    mode: str,
    by_scenario: dict[str, Any],
    names: list[str],
    peak: dict[str, Any] | None,
    scatter: Scatter | None = None,
) -> dict[str, Any] | None:
    """One mode's steady rate over the scenarios `names` (one process each): the median of all
    their steady steps; its interval (`step_s_interval`) is the hull of the bootstrap interval of
    that median (`step_s_noise_interval`: the steps' noise) and the t interval of the level the
    processes' medians scatter about (`step_s_process_interval`, `stats.level_interval` with the
    case's scatter: what a rerun's new processes may land on), widened by the drift reference's
    move during the case and since the peak's calibration; tokens/s and MFU from them; why it is
    inconclusive, if it is (the machine moved too far, the processes disagree, too few steps,
    too wide a spread)."""
    scatter = scatter or Scatter()
    found = [n for n in names if by_scenario.get(n)]
    if not found:
        return None
    first = by_scenario[found[0]]
    samples = _steady_samples(by_scenario, found)
    stats = TimingStats.from_samples(samples, first["clock"])
    noise = list(median_interval(samples))
    medians = _process_medians(by_scenario, found)
    processes = level_interval(medians, scatter.sd, scatter.df)
    lo, hi = widen(hull(noise, processes), scatter.moved)
    k = first["tokens_per_step"]
    # Too few steps first (no machine makes them enough); then the machine's move and the
    # processes' disagreement (a machine that moved also spreads the pooled steps: the cause).
    what = f"steady {mode} steps"
    why = (
        spread_why(what, 0.0, stats.repeats)
        or scatter.why()
        or spread_why(what, stats.spread, stats.repeats)
    )
    rate = {
        "scenarios": found,
        "steady_steps": stats.repeats,
        "step_s": stats.median_s,
        "step_s_noise_interval": noise,
        "process_step_s": medians,
        "step_s_process_interval": processes,
        "step_s_interval": [lo, hi],
        "spread": stats.spread,
        "tokens_per_step": k,
        "tokens_per_s": k / stats.median_s,
        "tokens_per_s_interval": [k / hi, k / lo],
        "clock": stats.clock,
        "why": why or "",
    }
    if peak and peak.get("flops"):
        per_token = first["flops_per_token"] / first["world_size"] / peak["flops"]
        rate["mfu"] = per_token * rate["tokens_per_s"]
        rate["mfu_interval"] = [per_token * v for v in rate["tokens_per_s_interval"]]
    return rate


def inconclusive_why(
    rates: dict[str, dict[str, Any]], interval: list[float], scatter: Scatter | None = None
) -> str | None:
    """Why the rates support no conclusion about which mode is faster per step; None if they do.
    As a rate's reasons, but with the machine's move within the case only: one slower now than
    at the peak's calibration slowed both modes alike, which leaves their ratio as it was."""
    scatter = scatter or Scatter()
    in_case = dataclasses.replace(scatter, moved=scatter.moved_in_case, where="during the case")
    few = (spread_why(f"steady {m} steps", 0.0, r["steady_steps"]) for m, r in rates.items())
    spread = (spread_why(f"steady {m} steps", r["spread"], None) for m, r in rates.items())
    why = next((w for w in few if w), None) or in_case.why() or next((w for w in spread if w), None)
    if why:
        return why
    lo, hi = interval
    if lo <= 1 <= hi:
        return (
            f"the speedup's {CONFIDENCE:.0%} interval {lo:.3g}–{hi:.3g}× includes 1: "
            "either mode could be the faster per step"
        )
    return None


def speedup(
    by_mode: dict[str, dict[str, Any]],
    names: list[str],
    rates: dict[str, dict[str, Any]],
    scatter: Scatter | None = None,
) -> dict[str, Any]:
    """Compiled over eager steady speed: the ratio of the pooled medians; its interval the hull
    of the bootstrap interval of the ratio (the steps' noise) and the t interval over processes
    (`process_interval`: the scenarios' eager over compiled medians, each a ratio of two
    processes, so its scatter is the case's per-process scatter times sqrt 2), widened by the
    drift reference's move during the case (a mode timed while the machine ran faster gains by as
    much; a machine that moved since the calibration moved both modes alike); conclusive or why
    not."""
    scatter = scatter or Scatter()
    samples = {mode: _steady_samples(by_mode[mode], names) for mode in MODES}
    noise = list(ratio_interval(samples["eager"], samples["compiled"]))
    paired = [n for n in names if all(by_mode[m].get(n) for m in MODES)]
    ratios = [by_mode["eager"][n]["step_s"] / by_mode["compiled"][n]["step_s"] for n in paired]
    processes = level_interval(ratios, scatter.sd * math.sqrt(2), scatter.df)
    lo, hi = widen(hull(noise, processes), scatter.moved_in_case)
    why = inconclusive_why(rates, [lo, hi], scatter)
    return {
        "value": rates["eager"]["step_s"] / rates["compiled"]["step_s"],
        "noise_interval": noise,
        "process_interval": processes,
        "interval": [lo, hi],
        "conclusive": why is None,
        "why": why or "",
    }


def _pools(p: dict[str, Any]) -> dict[str, list[str]]:
    pools: dict[str, list[str]] = {}
    for name in p["scenarios"]:
        pools.setdefault(pool_of(name), []).append(name)
    return pools


def pooled_rates(
    p: dict[str, Any],
    summaries: dict[str, dict[str, Any]],
    peak: dict[str, Any] | None,
    scatter: Scatter | None = None,
) -> dict[str, dict[str, Any]]:
    """{pool: {"eager": rate, "compiled": rate, "speedup": ...}}: each mode's rate per pool, and
    the speedup where both modes have one, every interval over the case's `scatter`."""
    out: dict[str, dict[str, Any]] = {}
    for pool, names in _pools(p).items():
        by_mode = {mode: summaries.get(mode, {}) for mode in MODES}
        rates = {
            m: r
            for m in MODES
            if (r := steady_rate(m, by_mode[m], names, peak, scatter)) is not None
        }
        if len(rates) == len(MODES):
            rates["speedup"] = speedup(by_mode, names, rates, scatter)
        if rates:
            out[pool] = rates
    return out


def scenario_ledger(
    eager: dict[str, Any],
    compiled: dict[str, Any],
    pool: str,
    rates: dict[str, Any],
    moved: float | None = None,
) -> dict[str, Any]:
    """A scenario's ledger: its own first steps, its pool's steady rates. The break-even range is
    the break-even at the two ends of the speedup's interval, each first step (one sample, taken
    at one moment) allowed to have run as much faster or slower as the machine `moved`."""
    k = rates["eager"]["tokens_per_step"]
    e = ledger.Mode("eager", eager["first_step_s"], rates["eager"]["tokens_per_s"])
    c = ledger.Mode("compiled", compiled["first_step_s"], rates["compiled"]["tokens_per_s"])
    sp = rates["speedup"]
    f = 1 + (moved or 0.0)

    def scaled(eager_by: float, compiled_by: float) -> tuple[ledger.Mode, ledger.Mode]:
        return (
            ledger.Mode(e.name, e.first_step_s * eager_by, e.tokens_per_s),
            ledger.Mode(c.name, c.first_step_s * compiled_by, c.tokens_per_s),
        )

    earliest = ledger.break_even_range(*scaled(f, 1 / f), k, sp["interval"])[0]
    latest = ledger.break_even_range(*scaled(1 / f, f), k, sp["interval"])[1]
    return {
        "rate": pool,
        "tokens_per_step": k,
        "first_step_s": {"eager": e.first_step_s, "compiled": c.first_step_s},
        "tokens_per_s": {"eager": e.tokens_per_s, "compiled": c.tokens_per_s},
        "break_even_step": ledger.break_even_step(e, c, k),
        "ahead_until_step": ledger.ahead_until_step(e, c, k),
        "break_even_range": [earliest, latest],
        "conclusive": sp["conclusive"],
        "why": sp["why"],
    }


def _compile_summary(c: dict[str, Any]) -> dict[str, Any]:
    """What the compile probe saw over the whole run, and the compile seconds by phase."""
    phases = c.get("phases", {})
    summary = {k: c[k] for k in ("graph_breaks", "recompiles", "graphs", "break_reasons") if k in c}
    summary["recompile_reasons"] = c.get("recompile_reasons", [])[:5]
    summary["phases"] = phases
    if "dynamo_s" in phases:
        # Dynamo's frame compiles include the forward backend compile; the backward graph is
        # compiled at the first backward, outside them.
        summary["compile_s"] = phases["dynamo_s"] + phases.get("backend_backward_s", 0.0)
    return summary


def _worst(statuses: list[str]) -> str:
    """The worst failure; else `unsupported` if the backend declined a scenario; else pass."""
    failing = [s for s in statuses if s in FAILING]
    if failing:
        return max(failing, key=STATUSES.index)
    return "unsupported" if "unsupported" in statuses else "pass"


def _problems(runs: dict[str, list[Scenario]]) -> dict[str, dict[str, Any]]:
    return {
        f"{s.mode}/{s.name}": {"status": s.status, "error": s.error, "detail": s.detail[-1500:]}
        for scenarios in runs.values()
        for s in scenarios
        if s.status != "pass"
    }


def _broken_ties(runs: dict[str, list[Scenario]]) -> str | None:
    """The tied parameters a training process's move to the device broke (`probes/ties.py`),
    as one line; None where every move kept them (or no process said)."""
    for scenarios in runs.values():
        for s in scenarios:
            if s.record and s.record.get("broken_ties"):
                groups = [tuple(g) for g in s.record["broken_ties"]]
                return ties.describe(groups, s.record["device"])
    return None


def _add_first_step_x(summaries: dict[str, dict[str, Any]], rates: dict[str, Any]) -> None:
    """Each first step in steady steps of its mode's pooled rate."""
    for mode, by_scenario in summaries.items():
        for name, summary in by_scenario.items():
            rate = rates.get(pool_of(name), {}).get(mode)
            if summary and rate:
                summary["first_step_x"] = summary["first_step_s"] / rate["step_s"]


def _error(problems: dict[str, Any], parity: dict[str, Any], tol: float) -> str | None:
    """The case's error line: the first failed scenario, else the first diverging loss curve."""
    if problems:
        where, problem = next(iter(problems.items()))
        return f"{where}: {problem.get('error')}"
    bad = next((k for k, v in parity.items() if not v["ok"]), None)
    if bad is None:
        return None
    v = parity[bad]
    return (
        f"compiled loss differs from eager in {bad} from step {v['first_diverging_step']} "
        f"(max rel dev {v['max_rel_dev']:.3g} > {tol:g})"
    )


def judge(
    p: dict[str, Any], runs: dict[str, list[Scenario]], peak: dict[str, Any] | None
) -> Outcome:
    warmup, tol = p["warmup"], PARITY_REL_TOL[p["dtype"]]
    summaries = {
        mode: {s.name: scenario_summary(s, warmup) for s in scenarios}
        for mode, scenarios in runs.items()
    }
    machine = case_drift(summaries, runs, peak)
    scatter = Scatter.of(p, summaries, machine)
    machine["between_processes"] = {"sd": scatter.sd, "df": scatter.df}
    rates = pooled_rates(p, summaries, peak, scatter)
    _add_first_step_x(summaries, rates)
    statuses = [s.status for scenarios in runs.values() for s in scenarios]
    problems = _problems(runs)
    broken = _broken_ties(runs)
    if broken:  # the model trained is not the one built: every number is of another model
        statuses.append("fail_numerics")
        problems = {"model": {"status": "fail_numerics", "error": broken}, **problems}
    parity: dict[str, Any] = {}
    ledgers: dict[str, Any] = {}
    for name in p["scenarios"]:
        eager, compiled = summaries["eager"].get(name), summaries["compiled"].get(name)
        for mode, summary in (("eager", eager), ("compiled", compiled)):
            if summary and not all(math.isfinite(x) for x in summary["losses"]):
                statuses.append("fail_numerics")
                problems.setdefault(f"{mode}/{name}", {"error": "non-finite loss"})
        if eager is None or compiled is None:
            continue
        parity[name] = loss_curve_compare(eager["losses"], compiled["losses"], tol)
        if not parity[name]["ok"]:
            statuses.append("fail_numerics")
        pool = rates.get(pool_of(name), {})
        if "speedup" in pool:
            ledgers[name] = scenario_ledger(eager, compiled, pool_of(name), pool, machine["moved"])
    metrics = _metrics(summaries, rates, ledgers, parity)
    ops = _ops(runs)
    diagnostics: dict[str, Any] = {
        "scenarios": summaries,
        "rates": rates,
        "drift_reference": machine,
        "ledger": ledgers,
        "parity": parity,
        "parity_rel_tol": tol,
        "specs": {m: {s.name: s.spec for s in scenarios} for m, scenarios in runs.items()},
        **_profiles(runs),
        **ops,
        **peak_diagnostics(
            peak,
            p["dtype"],
            max((v for k, v in metrics.items() if k.endswith("_mfu")), default=None),
            fell_back(ops.get("ops")),
        ),
    }
    if problems:
        diagnostics["problems"] = problems
    error = _error(problems, parity, tol)
    if error:
        diagnostics["error"] = error
    return Outcome(_worst(statuses), metrics, diagnostics)


def _ops(runs: dict[str, list[Scenario]]) -> dict[str, Any]:
    """{"ops": record} of the first eager scenario that kept one (its extra, untimed step)."""
    for s in runs.get("eager", []):
        if s.record and s.record.get("ops"):
            return {"ops": s.record["ops"]}
    return {}


def _profiles(runs: dict[str, list[Scenario]]) -> dict[str, Any]:
    """{"profile": {"MODE/SCENARIO": capture}} for the scenarios --profile captured."""
    found = {f"{s.mode}/{s.name}": s.profile for ss in runs.values() for s in ss if s.profile}
    return {"profile": found} if found else {}


def _metrics(
    summaries: dict[str, dict[str, Any]],
    rates: dict[str, dict[str, Any]],
    ledgers: dict[str, Any],
    parity: dict[str, Any],
) -> dict[str, float]:
    metrics: dict[str, float] = {}
    # Headline first (reports show the first few): the steady speedup and break-even steps where
    # conclusive (an inconclusive one is no number to compare runs by), then the cold first step
    # in steady compiled steps.
    sp = rates.get(MAIN_POOL, {}).get("speedup")
    if sp and sp["conclusive"]:
        metrics["compiled_speedup"] = sp["value"]
    cold = summaries.get("compiled", {}).get("cold")
    if cold and "first_step_x" in cold:
        metrics["compiled_cold_first_step_x"] = cold["first_step_x"]
    for name, entry in ledgers.items():
        if entry["conclusive"] and entry["break_even_step"] is not None:
            metrics[f"break_even_step_{name}"] = float(entry["break_even_step"])
    if parity:
        metrics["parity_max_rel_dev"] = max(v["max_rel_dev"] for v in parity.values())
    metrics.update(_scenario_metrics(summaries, rates))
    return metrics


def _scenario_metrics(
    summaries: dict[str, dict[str, Any]], rates: dict[str, dict[str, Any]]
) -> dict[str, float]:
    """MODE_SCENARIO_KEY: each scenario's first step, memory and compile, and the steady rate of
    its pool (step_s, tokens_per_s, spread, mfu: the same for every scenario of a pool). Its own
    steady steps stay in the diagnostics."""
    metrics = {}
    for mode, by_scenario in summaries.items():
        for name, s in by_scenario.items():
            if s is None:
                continue
            prefix = f"{mode}_{name}_"
            metrics[prefix + "first_step_s"] = float(s["first_step_s"])
            rate = rates.get(pool_of(name), {}).get(mode, {})
            for key in ("step_s", "tokens_per_s", "spread", "mfu"):
                if key in rate:
                    metrics[prefix + key] = float(rate[key])
            if s.get("peak_memory_bytes") is not None:
                metrics[prefix + "peak_memory_gib"] = s["peak_memory_bytes"] / 2**30
            if mode == "compiled":
                for key in ("compile_s", "graph_breaks", "recompiles"):
                    if key in s["compile"]:
                        metrics[prefix + key] = float(s["compile"][key])
    return metrics


# --- execute --------------------------------------------------------------------------------------


def execute(case: Case, ctx: CaseContext) -> Outcome:
    p = case.params
    deadline = time.monotonic() + ctx.budget_s
    root = Path(tempfile.mkdtemp(prefix="trainready-train-"))
    try:
        runs = run_modes(p, ctx, root, deadline)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return judge(p, runs, ctx.peak(p["dtype"]))
