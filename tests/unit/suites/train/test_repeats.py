"""Repeat processes: a train case adds processes of its main configuration while the rate's
interval over processes is wider than the sampler's target, within `--set process_timing_s`
(`processes.add_repeats`), and the rates, parity and the report take them in."""

from __future__ import annotations

import time
from contextlib import nullcontext

import pytest

from tests.unit.suites.train.test_suite import LOSSES, PEAK, _cfg, _record
from trainready.core.context import CaseContext
from trainready.reporting.sections.train import _more_processes
from trainready.suites.train import processes as train_processes
from trainready.suites.train.suite import MODES, Scenario, cases, judge

PROCESS_S = 5.0  # each planted process's cost on the planted clock


def _planted(monkeypatch, medians: dict[str, list[float]], fail_at: int | None = None):
    """Training processes whose steady steps run at `medians[mode][i]` (the i-th process of
    that mode), each costing PROCESS_S on a planted clock; the `fail_at`-th process of compiled
    crashes. Returns the list of (mode, spec) calls."""
    now, calls = [0.0], []
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    def fake_single(spec, env, work, timeout_s, profile=None):
        now[0] += PROCESS_S
        mode = "eager" if spec.compile == "none" else "compiled"
        i = sum(1 for m, _ in calls if m == mode)
        calls.append((mode, spec))
        if mode == "compiled" and i == fail_at:
            return Scenario("", "", status="crash", error="training process died: SIGSEGV")
        s = Scenario("", "", _record(1.0, medians[mode][i], LOSSES))
        s.process_s = PROCESS_S
        return s

    monkeypatch.setattr(train_processes, "run_single", fake_single)
    # No zygote: nothing here forks a training process.
    monkeypatch.setattr(train_processes.train_zygote, "forking", lambda device: nullcontext())
    return calls


def _run(monkeypatch, tmp_path, medians, fail_at=None, **options):
    calls = _planted(monkeypatch, medians, fail_at)
    p = cases(_cfg(scenarios="cold,warm", **options))[0].params
    ctx = CaseContext(device="cpu", dtype="bf16", budget_s=600)
    runs = train_processes.run_modes(p, ctx, tmp_path, deadline=float("inf"))
    return p, runs, calls


def _names(runs) -> dict[str, list[str]]:
    return {mode: [s.name for s in scenarios] for mode, scenarios in runs.items()}


QUIET = [0.100, 0.102, 0.101, 0.1005, 0.1015, 0.1, 0.101, 0.102]
NOISY = [0.10, 0.13, 0.08, 0.12, 0.09, 0.14, 0.07, 0.11, 0.1, 0.13, 0.08, 0.12]


def test_quiet_processes_take_one_repeat_pair_then_conclude(monkeypatch, tmp_path):
    # Two processes: Student's t with 1 degree of freedom is ±12.7 standard errors, far over
    # ±5%; a third process that agrees brings it within.
    p, runs, calls = _run(monkeypatch, tmp_path, {"eager": QUIET, "compiled": QUIET})
    assert _names(runs) == {m: ["cold", "warm", "repeat3"] for m in MODES}
    # The repeat trains the main configuration, as warm does (warm caches: the mode's cache dir).
    warm = next(spec for mode, spec in calls if mode == "eager")
    assert calls[-2][1].seq_len == warm.seq_len and calls[-2][1].model_overrides == {}
    out = judge(p, runs, PEAK)
    main = out.diagnostics["rates"]["main"]
    assert main["eager"]["scenarios"] == ["cold", "warm", "repeat3"]
    assert main["eager"]["processes"]["concluded"] and main["eager"]["processes"]["processes"] == 3
    assert "repeat3" in out.diagnostics["parity"]  # compiled against eager, as every scenario
    assert set(out.diagnostics["ledger"]) == {"cold", "warm"}  # a repeat's would be warm's
    # The drift over processes counts the repeats: they re-time the same work.
    assert len(out.diagnostics["drift_reference"]["readings_s"]["eager"]) == 3


def test_scattered_processes_repeat_until_the_budget_and_name_the_time_that_would_do(
    monkeypatch, tmp_path
):
    p, runs, _ = _run(
        monkeypatch, tmp_path, {"eager": NOISY, "compiled": NOISY}, process_timing_s=40
    )
    # A pair costs 10 s of the planted clock: 40 s give four pairs, never a fifth.
    assert _names(runs)["eager"] == ["cold", "warm", "repeat3", "repeat4", "repeat5", "repeat6"]
    rate = judge(p, runs, PEAK).diagnostics["rates"]["main"]["eager"]
    found = rate["processes"]
    assert not found["concluded"] and found["processes"] == 6
    # Each more process is a pair (one per mode): priced so, and the option gives it on top.
    assert found["more_s"] == pytest.approx(found["more"] * 2 * PROCESS_S)
    assert found["option"] == f"--set process_timing_s={40 + round(found['more_s'])}"
    assert found["option"] in _more_processes(rate)


def test_no_repeats_without_budget_or_without_two_planned_processes(monkeypatch, tmp_path):
    _, runs, _ = _run(
        monkeypatch, tmp_path, {"eager": NOISY, "compiled": NOISY}, process_timing_s=0
    )
    assert _names(runs)["eager"] == ["cold", "warm"]
    calls = _planted(monkeypatch, {"eager": NOISY, "compiled": NOISY})
    p = cases(_cfg(scenarios="cold"))[0].params  # one process: no scatter measured to sample
    ctx = CaseContext(device="cpu", dtype="bf16", budget_s=600)
    runs = train_processes.run_modes(p, ctx, tmp_path / "one", deadline=float("inf"))
    assert _names(runs)["eager"] == ["cold"] and len(calls) == 2


def test_a_repeat_that_fails_ends_the_repeats_and_fails_the_case(monkeypatch, tmp_path):
    p, runs, _ = _run(
        monkeypatch, tmp_path, {"eager": NOISY, "compiled": NOISY}, fail_at=3, process_timing_s=40
    )
    assert _names(runs)["compiled"] == ["cold", "warm", "repeat3", "repeat4"]
    assert runs["compiled"][-1].status == "crash"
    out = judge(p, runs, PEAK)
    assert out.status == "crash" and "compiled/repeat4" in out.diagnostics["problems"]


def test_a_negative_budget_is_a_config_error():
    from trainready.core.config import ConfigError

    with pytest.raises(ConfigError, match="process_timing_s must be >= 0"):
        cases(_cfg(process_timing_s=-1))


def test_a_speedup_interval_that_includes_one_names_what_would_narrow_it():
    from trainready.suites.train.rates import inconclusive_why

    settled = {"steady_steps": 12, "spread": 0.02, "why": "", "processes": {"concluded": True}}
    short = {
        **settled,
        "processes": {
            "concluded": False,
            "more": 4,
            "more_s": 40.0,
            "option": "--set process_timing_s=70",
        },
    }
    why = inconclusive_why({"eager": settled, "compiled": short}, [0.9, 1.2])
    assert why.startswith("the speedup's 95% interval 0.9–1.2× includes 1")
    assert "about 4 more processes per mode (~40 s)" in why and "process_timing_s=70" in why
    steps = {**settled, "why": "budget ran out: 9 samples in 0.5 s reached ±7% (target ±5%)"}
    assert inconclusive_why({"eager": steps, "compiled": settled}, [0.9, 1.2]).endswith(
        "; " + steps["why"]
    )
    assert inconclusive_why({"eager": settled, "compiled": settled}, [0.9, 1.2]).endswith(
        "per step"
    )
    assert inconclusive_why({"eager": short, "compiled": settled}, [1.1, 1.2]) is None


def test_processes_far_apart_are_inconclusive_only_while_they_are_few():
    """The quiet quick run of 2026-12-06: compiled medians 11.9, 11.6, 15.0, 11.3, 11.4, 11.3 ms
    over cold, warm and four repeats. With six processes their scatter is measured: the 15.0 ms
    one counts in the rate and widens the interval over processes, and the rate does not read
    "differ by 32%" (the widest of n processes only grows with n). Two processes 30% apart still
    do: two say nothing of where a rerun's would land (rates.APART_FEW)."""
    names = ["cold", "warm", "repeat3", "repeat4", "repeat5", "repeat6"]
    eager = [0.150, 0.152, 0.149, 0.151, 0.150, 0.152]
    compiled = [0.1186, 0.1158, 0.1497, 0.1131, 0.1140, 0.1130]
    runs = {
        mode: [Scenario(mode, n, _record(1.0, x, LOSSES)) for n, x in zip(names, xs, strict=True)]
        for mode, xs in (("eager", eager), ("compiled", compiled))
    }
    p = {**cases(_cfg(scenarios="cold,warm"))[0].params, "warmup": 1, "dtype": "fp32"}
    rate = judge(p, runs, PEAK).diagnostics["rates"]["main"]["compiled"]
    assert "differ by" not in rate["why"]
    assert 0.1497 in rate["process_step_s"]  # still in the scatter the interval carries
    pair = {m: runs[m][:2] for m in MODES}
    pair["compiled"][1] = Scenario("compiled", "warm", _record(1.0, 0.1186 * 1.3, LOSSES))
    p2 = {**p, "process_timing_s": 0.0}
    assert "differ by 30%" in judge(p2, pair, PEAK).diagnostics["rates"]["main"]["compiled"]["why"]
