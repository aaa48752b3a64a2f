"""Train suite: tokens/s, MFU and the time-to-first-step ledger of eager against compiled training.

One case is one training configuration (a Qwen3 size, sequence length, batch, dtype...). It trains
the model in both modes -- eager, and compiled (each block, or the whole model) -- under four
scenarios, each in a fresh process (`python -m trainready.suites.train.loop`, on the CPU and CUDA a fork of
a zygote that imported torch: `zygote.py`; or fresh ranks under torchrun with `--nproc N`,
FSDP2 over them):

- cold: empty compile caches (a new TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, the vendor's
  cache dirs, and TMPDIR, where inductor keeps its precompiled headers:
  `trainready.device.compile_cache_env`);
- warm: the same run again, with the caches cold left;
- arch_change: warm caches, one small edit to the model (the MLP activation swapped, or a norm
  added after each sublayer): what a researcher's ablation costs;
- shape_change: warm caches, another sequence length (half, by default);
- repeat3, repeat4, ...: warm caches, the main configuration again, added while the rates'
  interval over processes is wider than ±5% (`processes.add_repeats`, `process_timing_s`).

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
- the first valid result per mode and scenario: the first step whose loss the numerics check
  accepted (finite; compiled's also within the parity tolerance of eager's at that step), and
  the time to it (the first step, plus the timed steps up to it);
- the ledger: total(N) = first_valid + (N - 1) * tokens_per_step / tokens_per_s per mode, each
  scenario's own first valid result at its pool's rate, and the break-even step of compiled
  against eager per scenario with its range over the speedup's interval and first steps (one
  sample each) moved by the case's drift (the larger of cold's and warm's medians apart and the
  reference's move) (`trainready.metrics.ledger`). The bill (the report: the run's failed
  attempts added, and money at `price_per_hour`) is `reporting/sections/train.py`'s.

Measured on a 2-core machine under load (issue #17): a process's steps and its reference GEMM run
either with both its threads on a core (the GEMM at ~700 GFLOP/s) or waiting on each other
(5-10 GFLOP/s), so whole processes land 1.5-3x apart; a bootstrap over steps saw none of it.

Options (`--set KEY=VALUE`; defaults for the cpu / for accelerators): model (debug / 1.7B),
seq_len (64 / 4096), batch_size (4 / 2, global), steps (8 / 30), warmup (2 / 5), compile
(blocks | model), precision (autocast | bf16_params), ac (activation checkpointing, false),
arch_change (activation | norm), shape_seq_len (seq_len // 2), lr, scenarios (a subset in the
order above, cold included when any other is), price_per_hour (a device-hour's price, also
`--price-per-hour`: measures nothing, the report prices the ledger with it), step_timing_s (0.5 /
5: seconds of steady steps a process may add past the planned ones for their median's 95%
interval to come within ±5%, `plan.STEP_TIMING_S`), process_timing_s (30 / 300: seconds of
repeat processes a case may add past its planned scenarios for the rates' interval over
processes to come within ±5%, `processes.add_repeats`; 0: none). `--compile-backend`, `--nproc`
and `--pg-backend` apply too. Presets: quick runs the configuration; standard adds the same with activation
checkpointing; full adds whole-model compile and bf16 parameters with fp32 optimizer state.

`--profile` (option `profile`, `profile.py`): in each mode the scenario whose speed the headline uses (warm,
else cold) runs `extra_steps` more steps after its timed ones, recorded by torch.profiler
(`trainready.profile.capture.profile_after`: until the timed steps are done its hook only counts,
so they, the first step and the peak memory are measured as without profiling, and the record
keeps them alone). The gzipped Kineto trace and metadata.json land in the case's artifacts
directory (RUN_DIR/artifacts/CASE/MODE-SCENARIO/); the diagnostics name them (relative to the run
directory) with a short analysis. A capture that fails is a diagnostic: if the process died after
its timed steps, the scenario is measured again without profiling (cold with a fresh cache).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from trainready.core.case import FAILING, STATUSES, Case, Outcome
from trainready.core.context import CaseContext
from trainready.metrics.flops import peak_diagnostics
from trainready.probes import ties
from trainready.probes.numerics import loss_curve_compare
from trainready.probes.ops import fell_back
from trainready.suites.train.plan import (
    DEFAULT_DTYPE,
    MODES,
    NAME,
    SCENARIOS,
    cases,
    process_timing_s,
)
from trainready.suites.train.processes import run_modes
from trainready.suites.train.rates import (
    MAIN_POOL,
    Scatter,
    add_first_valid,
    case_drift,
    is_repeat,
    pool_of,
    pooled_rates,
    scenario_ledger,
    scenario_summary,
)
from trainready.suites.train.scenario import Scenario

__all__ = [
    "NAME",
    "DEFAULT_DTYPE",
    "DEFAULT_BUDGET_S",
    "OPTIONS",
    "MODES",
    "SCENARIOS",
    "Scenario",
    "cases",
    "execute",
    "judge",
]

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
    "price_per_hour": float,
    "step_timing_s": float,  # steady-step sampling budget per process (plan.STEP_TIMING_S)
    "process_timing_s": float,  # repeat processes' budget per case (plan.PROCESS_TIMING_S)
}

# Relative per-step deviation allowed between the eager and the compiled loss curve. Kernels
# fuse and reorder reductions, so curves agree to rounding, which bf16 makes coarse.
PARITY_REL_TOL = {"fp32": 1e-3, "bf16": 2e-2}


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
    as one line, with which model the numbers are of; None where every move kept them (or no
    process said)."""
    for scenarios in runs.values():
        for s in scenarios:
            if s.record and s.record.get("broken_ties"):
                groups = [tuple(g) for g in s.record["broken_ties"]]
                why_not = s.record.get("ties_not_kept")
                timed = (
                    "the model moved with its ties kept"
                    if why_not is None
                    else f"the untied model (the ties could not be kept: {why_not})"
                )
                return f"{ties.describe(groups, s.record['device'])}. Timed: {timed}"
    return None


def _repeat_budget(p: dict[str, Any], runs: dict[str, list[Scenario]]) -> float | None:
    """The case's budget for repeat processes (`plan.process_timing_s` on the device its
    processes trained on); None where no process said which."""
    device = next((s.spec["device"] for ss in runs.values() for s in ss if s.spec), None)
    return None if device is None else process_timing_s(p, device)


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
    rates = pooled_rates(p, summaries, peak, scatter, _repeat_budget(p, runs))
    _add_first_step_x(summaries, rates)
    add_first_valid(summaries, runs, tol)
    statuses = [s.status for scenarios in runs.values() for s in scenarios]
    problems = _problems(runs)
    broken = _broken_ties(runs)
    if broken:  # the model a user moves that way is not the one built
        statuses.append("fail_numerics")
        problems = {"model": {"status": "fail_numerics", "error": broken}, **problems}
    parity: dict[str, Any] = {}
    ledgers: dict[str, Any] = {}
    repeats = [s.name for s in runs.get(MODES[0], []) if is_repeat(s.name)]
    for name in [*p["scenarios"], *repeats]:
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
        if "speedup" in pool and name in p["scenarios"]:  # a repeat's ledger would be warm's
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
