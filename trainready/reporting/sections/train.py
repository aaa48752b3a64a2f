"""The train suite as a researcher reads it: both clocks of every mode and scenario, and the ledger.

Per case: a table of the first step (with its parts) and each scenario's own steady steps, eager
and compiled (cold, warm, arch_change, shape_change); the steady rate per mode, pooled over the
scenarios at a shape, with its interval (timing noise widened by the machine's drift over the case,
which the drift reference shows), spread, MFU and the speedup, or why it is inconclusive
(the headlines say the same); compiled mode's compile time by phase
(Dynamo, backend forward and backward, kernel compile wait); the break-even step of compiled against
eager per scenario; a chart of total time against the number of steps, where the lines cross
at the break-even step; the full bill (`bill_table`): each mode's first valid result, the run's
failed attempts (`failed_attempts`: train cases that crashed or timed out before a valid step,
their whole time) and the time and money to N steps and to the break-even step at the price per
device-hour the run was given ("no price given" without one, never 0); and, for a run with
--profile, the traces captured (relative to the run directory, where the report is written), a
short analysis of each, and the commands that open them. Everything is read from the case's
diagnostics as the suite stored them, and the run's other results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainready.core.case import Result
from trainready.metrics import ledger as arithmetic
from trainready.metrics.ledger import Mode
from trainready.metrics.stats import CONFIDENCE, MAX_DRIFT, MAX_SPREAD, MIN_SAMPLES
from trainready.probes.compile import cache_sentence
from trainready.reporting import fmt
from trainready.reporting.blocks import Block, Chart, Column, Stat, Table, Text, num
from trainready.reporting.charts import MARKERS, PALETTE, Axis, Point, Series, xy_chart
from trainready.reporting.model import Report, RunView, finite
from trainready.reporting.numbers import money
from trainready.reporting.sections import host
from trainready.reporting.sections.matmul import readings_text

SUITE = "train"
# Shown in the drill-down and compared across runs: the steady speedup, both first-step clocks of
# compiled mode, the cold break-even step, and compiled throughput and MFU.
KEY_METRICS = (
    "compiled_speedup",
    "compiled_cold_first_step_s",
    "compiled_warm_first_step_s",
    "break_even_step_cold",
    "compiled_warm_tokens_per_s",
    "compiled_warm_mfu",
)
METRIC_GOALS = {
    "compiled_speedup": "higher",
    "compiled_cold_first_step_s": "lower",
    "compiled_warm_first_step_s": "lower",
    "compiled_arch_change_first_step_s": "lower",
    "compiled_shape_change_first_step_s": "lower",
    "break_even_step_cold": "lower",
    "compiled_warm_tokens_per_s": "higher",
    "eager_warm_tokens_per_s": "higher",
    "compiled_warm_mfu": "higher",
}
SCENARIO_ORDER = ("cold", "warm", "arch_change", "shape_change")
MODE_MARKERS = {"eager": MARKERS[0], "compiled": MARKERS[1]}
LEDGER_STEPS = (1, 10, 100, 1_000, 10_000)
CHART_DECADES = 5  # the chart spans N = 1 .. 10^5, or past the break-even step
# Compile seconds by phase, keyed as the suite records them (trainready.suites.train.loop.COMPILE_PHASES;
# a test keeps the two in step). They nest: Dynamo's frame compiles hold the forward graph's
# backend compile, the backward graph is compiled at the first backward, and the wait for
# kernels falls within both backend compiles.
COMPILE_PHASE_COLUMNS = {
    "dynamo_s": "Dynamo s",
    "backend_forward_s": "backend forward s",
    "backend_backward_s": "backend backward s",
    "kernel_compile_wait_s": "kernel compile wait s",
}


def _scenarios(r: Result) -> dict[str, dict[str, dict]]:
    scenarios = r.diagnostics.get("scenarios")
    return scenarios if isinstance(scenarios, dict) else {}


def _ordered(by_scenario: dict[str, dict]) -> list[str]:
    known = [s for s in SCENARIO_ORDER if s in by_scenario]
    return known + sorted(s for s in by_scenario if s not in SCENARIO_ORDER)


def _with_data(run: RunView) -> list[Result]:
    return [r for r in run.in_suite(SUITE) if _scenarios(r)]


def _label(run: RunView, r: Result, multi: bool) -> str:
    return f"{run.label}: {r.case.name}" if multi else r.case.name


INCONCLUSIVE = "inconclusive"


def _rates(r: Result, pool: str = "main") -> dict:
    rates = r.diagnostics.get("rates")
    return rates.get(pool, {}) if isinstance(rates, dict) else {}


def _interval(bounds: list, show) -> str:  # noqa: ANN001 - a fmt function
    return f"{show(bounds[0])}–{show(bounds[1])}"


def _steps(rate: dict) -> str:
    processes = len(rate.get("process_step_s") or rate["scenarios"])
    return (
        f"{rate['steady_steps']} steps in {fmt.plural(processes, 'process', 'processes')}, "
        f"spread {fmt.percent(rate['spread'])}"
    ) + _more_processes(rate)


def _more_processes(rate: dict) -> str:
    """'; over processes ±12% (target ±5%): about 9 more processes (~40 s) would likely narrow
    it': where the process is the unit sampled and the t interval over them is wider than the
    sampler's target (`rates.processes_needed`); '' when it is not (or was not measured)."""
    found = rate.get("processes") or {}
    if found.get("concluded", True):
        return ""
    option = found.get("option", "--set process_timing_s: more repeat processes")
    return (
        f"; over processes ±{found['half_width']:.0%} (target ±5%): about "
        f"{fmt.plural(found['more'], 'more process', 'more processes')} "
        f"(~{fmt.number(found['more_s'])} s) would likely narrow it ({option})"
    )


def drift_text(r: Result) -> str:
    """The case's drift as a note reads it: cold → warm medians, the drift reference read in the
    training processes (and at the peak's calibration; how many readings were unstable: their
    samples never agreed, so they give no speed), the processes' scatter; or unknown."""
    machine = r.diagnostics.get("drift_reference")
    ref = (machine.get("reference") or {}) if isinstance(machine, dict) else {}
    unstable = int(ref.get("unstable") or 0)
    shaky = f"unstable in {unstable} of {ref.get('taken') or unstable} readings" if unstable else ""
    if transient := int(ref.get("transient") or 0):
        aside = fmt.plural(transient, "transient reading", "transient readings") + " set aside"
        shaky = f"{shaky}; {aside}" if shaky else aside
    if not isinstance(machine, dict) or machine.get("moved") is None:
        if shaky:
            return f"machine drift unknown (drift reference {ref.get('workload')}: {shaky})"
        return "machine drift unknown (cold and warm not both run in a mode, no drift reference)"
    parts = []
    medians = "; ".join(
        f"{mode} {' → '.join(fmt.number(x * 1e3) for x in xs)} ms"
        for mode, xs in sorted(
            machine.get("readings_s", {}).items(), key=lambda kv: kv[0] != "eager"
        )
        if len(xs) > 1
    )
    if medians:
        parts.append(f"steady step medians cold → warm: {medians}")
    if ref.get("readings_flops"):
        readings = readings_text(ref["readings_flops"])
        text = f"drift reference {ref['workload']}: {readings} in the training processes"
        if ref.get("calibration_flops"):
            text += f", {fmt.number(ref['calibration_flops'] / 1e9)} at the peak's calibration"
        parts.append(text + (f"; {shaky}" if shaky else ""))
    elif shaky:
        parts.append(f"drift reference {ref.get('workload')}: {shaky}")
    between = machine.get("between_processes") or {}
    if between.get("df"):
        parts.append(f"processes scatter {fmt.percent(between['sd'])} ({between['df']} df)")
    return f"machine drift {fmt.percent(machine['moved'])} ({'; '.join(parts)})"


def _widened(noise: list | None, show, moved: bool, processes: list | None = None) -> str:  # noqa: ANN001
    """' (timing noise A–B, over processes C–D, widened by the drift)': what the interval is
    made of, where it is more than the timing noise."""
    if not noise or not (moved or processes):
        return ""
    parts = [f"timing noise {_interval(noise, show)}"]
    if processes:
        parts.append(f"over processes {_interval(processes, show)}")
    return f" ({', '.join(parts)}{', widened by the drift' if moved else ''})"


def speedup_stat(r: Result) -> Stat | None:
    """Compiled over eager steady speed (pooled steps), with its interval, or why inconclusive."""
    rates = _rates(r)
    sp = rates.get("speedup")
    if not sp:
        return None
    machine = r.diagnostics.get("drift_reference") or {}
    # Widened by the reference's move within the case (a ratio of modes timed in turn); a record
    # from before the reference was read in the training processes: by the cold → warm drift.
    moved = bool(
        (machine["reference"] or {}).get("moved_in_case")
        if "reference" in machine
        else machine.get("moved")
    )
    interval = f"{CONFIDENCE:.0%} interval {_interval(sp['interval'], fmt.ratio)}" + _widened(
        sp.get("noise_interval"), fmt.ratio, moved, sp.get("process_interval")
    )
    measured = f"{fmt.ratio(sp['value'])}, {interval}"
    sample = (
        f"eager {_steps(rates['eager'])}, compiled {_steps(rates['compiled'])}, pooled over "
        f"{', '.join(rates['eager']['scenarios'])}; {drift_text(r)}"
    )
    label = "compiled steady speedup"
    if not sp["conclusive"]:
        note = f"{r.case.name}: {sp['why']}; measured {measured}; {drift_text(r)}"
        return Stat(label, INCONCLUSIVE, fmt.text, note)
    return Stat(label, sp["value"], fmt.ratio, f"{r.case.name}: {interval}; {sample}")


def rate_stat(r: Result) -> Stat | None:
    """Steady tokens/s of compiled mode (eager's if compiled has none), interval and MFU."""
    rates = _rates(r)
    mode = next((m for m in ("compiled", "eager") if m in rates), None)
    if mode is None:
        return None
    rate, label = rates[mode], f"{mode} tokens/s"
    mfu = (
        f"MFU {fmt.percent(rate['mfu'])} ({_interval(rate['mfu_interval'], fmt.percent)})"
        if finite(rate.get("mfu"))
        else "no peak known: no MFU"
    )
    dispatch = _moe_dispatch(r)
    mfu += f"; MoE {dispatch}" if dispatch else ""
    if rate.get("why"):
        note = f"{rate['why']}; measured {fmt.number(rate['tokens_per_s'])}; {drift_text(r)}; {mfu}"
        return Stat(label, INCONCLUSIVE, fmt.text, note)
    interval = _interval(rate["tokens_per_s_interval"], fmt.number)
    noise = rate.get("step_s_noise_interval")
    moved = bool((r.diagnostics.get("drift_reference") or {}).get("moved"))
    k, over = rate["tokens_per_step"], rate.get("step_s_process_interval")
    widened = _widened(
        [k / noise[1], k / noise[0]] if noise else None,
        fmt.number,
        moved,
        [k / over[1], k / over[0]] if over else None,
    )
    note = f"{CONFIDENCE:.0%} interval {interval}{widened}; {_steps(rate)}; {drift_text(r)}; {mfu}"
    return Stat(label, rate["tokens_per_s"], fmt.number, note)


def break_even_stat(r: Result, scenario: str = "cold", failed: Failed | None = None) -> Stat | None:
    entry = r.diagnostics.get("ledger", {}).get(scenario)
    if not entry or "break_even_step" not in entry:
        return None
    label = f"break-even step ({scenario.replace('_', ' ')})"
    if entry.get("conclusive") is False:
        return Stat(label, INCONCLUSIVE, fmt.text, entry.get("why", ""))
    note = "from it on compiled is no slower in total"
    if entry.get("break_even_range"):
        note += (
            f"; range over the speedup's {CONFIDENCE:.0%} interval and the first steps (1 sample "
            f"each) moved by the machine's drift; {drift_text(r)}"
        )
    bill = scenario_bill(r, scenario, failed or Failed())
    if bill is not None:
        note += f"; {bill_sentence(bill)}"
    return Stat(label, entry["break_even_step"], lambda _, e=entry: break_even_text(e), note)


def _moe_dispatch(r: Result) -> str | None:
    """How the MoE layers dispatched ("routed: grouped_mm", ...), None for a dense model."""
    found = {
        s.get("moe_dispatch")
        for by in _scenarios(r).values()
        for s in by.values()
        if s and s.get("moe_dispatch")
    }
    return ", ".join(sorted(found)) or None


def headlines(run: RunView) -> list[Stat]:
    stats = []
    failed = failed_attempts(run)
    if failed.results:
        stats.append(failed.stat(run_price(run)))
    for r in _with_data(run):
        m = r.metrics
        stats += [s for s in (speedup_stat(r),) if s]
        if finite(m.get("compiled_cold_first_step_x")):
            note = f"{r.case.name}: in steady compiled steps (1 cold start / the pooled median)"
            stats.append(
                Stat("cold compiled first step", m["compiled_cold_first_step_x"], fmt.ratio, note)
            )
        # The clocks a researcher lives by: compiled first step with cold and warm caches and
        # after an ablation (each one process start: 1 sample), then steady compiled throughput.
        # Past cold, whether the caches served it: a backend without one compiles cold again.
        for scenario in ("cold", "warm", "arch_change"):
            key = f"compiled_{scenario}_first_step_s"
            if finite(m.get(key)):
                label = f"compiled first step ({scenario.replace('_', ' ')})"
                note = f"{r.case.name}, 1 sample"
                if scenario != "cold":
                    compiled = _scenarios(r).get("compiled", {}).get(scenario) or {}
                    cache = (compiled.get("compile") or {}).get("cache")
                    note += f"; {cache_sentence(cache, r.case.params.get('compile_backend'))}"
                stats.append(Stat(label, m[key], fmt.seconds, note))
        if rate := rate_stat(r):
            stats.append(rate)
            if r.diagnostics.get("host_fallback"):
                rate.note += f"; {r.diagnostics['host_fallback']}"
        stats += [s for s in (break_even_stat(r, failed=failed),) if s]
    fallbacks = host.collect(_with_data(run), _case_name)
    if fallbacks.cases and not fallbacks.on_cpu:
        stats.append(fallbacks.stat("train host-fallback ops"))
        stats.append(fallbacks.roundtrip_stat("train host round-trips inside kernels"))
    return stats


def _case_name(r: Result) -> str:
    return r.case.name


def section(report: Report, suite: str) -> list[Block]:
    blocks: list[Block] = []
    for run in report.runs:
        failed = failed_attempts(run)
        for r in _with_data(run):
            label = _label(run, r, report.multi)
            blocks.append(clocks_table(r, label))
            rates = rates_table(r, label)
            if rates is not None:
                blocks.append(rates)
            phases = compile_phases_table(r, label)
            if phases is not None:
                blocks.append(phases)
            blocks.append(ledger_table(r, label))
            blocks.append(ledger_chart(r, label))
            blocks.append(bill_table(r, label, failed))
            blocks.extend(profile_blocks(r, label))
        fallbacks = host.collect(_with_data(run), _case_name)
        if fallbacks.ops or (fallbacks.measured and not fallbacks.on_cpu):
            prefix = f"{run.label}: " if report.multi else ""
            title = f"{prefix}Ops that left the device (one extra, untimed eager step)"
            blocks.append(host.table(fallbacks, title))
    return blocks


def _gib(value: float | None) -> float | None:
    return value / 2**30 if value is not None else None


def clocks_table(r: Result, label: str) -> Table:
    scenarios = _scenarios(r)
    parity = r.diagnostics.get("parity", {})
    problems = r.diagnostics.get("problems", {})
    columns = [
        Column("scenario"),
        Column("mode"),
        num("first step s"),
        num("setup s"),
        num("forward s"),
        num("backward s"),
        num("optimizer s"),
        num("compile s"),
        num("graph breaks"),
        num("recompiles"),
        num("× steady step", fmt.ratio),
        num("own steady steps"),
        num("own step ms"),
        num("own spread", fmt.percent),
        num("peak mem GiB"),
        num("loss vs eager (max rel dev)"),
        Column("note"),
    ]
    rows = []
    names = _ordered({n: None for by in scenarios.values() for n in by})
    for name in names:
        for mode in ("eager", "compiled"):
            s = scenarios.get(mode, {}).get(name)
            note = problems.get(f"{mode}/{name}", {})
            if s is None:
                rows.append(
                    [name, mode, *([None] * (len(columns) - 3)), note.get("error") or "no result"]
                )
                continue
            phases = s.get("first_step_phases", {})
            comp = s.get("compile", {}) if mode == "compiled" else {}
            dev = parity.get(name, {}).get("max_rel_dev") if mode == "compiled" else None
            rows.append(
                [
                    name,
                    mode,
                    s["first_step_s"],
                    phases.get("setup_s"),
                    phases.get("forward_s"),
                    phases.get("backward_s"),
                    phases.get("optimizer_s"),
                    comp.get("compile_s"),
                    comp.get("graph_breaks"),
                    comp.get("recompiles"),
                    s.get("first_step_x"),
                    s.get("steady_steps"),
                    s["step_s"] * 1e3,
                    s.get("spread"),
                    _gib(s.get("peak_memory_bytes")),
                    dev,
                    note.get("error") or "",
                ]
            )
    sources = {
        s["memory_source"]
        for by in scenarios.values()
        for s in by.values()
        if s and s.get("memory_source")
    }
    memory = f"peak mem: {', '.join(sorted(sources))}; " if sources else ""
    missing = {
        f"{metric}: {why}"
        for by in scenarios.values()
        for s in by.values()
        if s
        for metric, why in (s.get("memory_unavailable") or {}).items()
    }
    if missing:
        memory += f"unavailable: {'; '.join(sorted(missing))}; "
    caption = (
        f"{label} — first step (model on device to the first step's loss after its update), in "
        "seconds and in steady steps of its mode's pooled rate; each scenario's own steady steps "
        "(after warm-up; the mode's rate pools them); compile s: Dynamo and backend, forward and "
        f"backward graphs; {memory}status {r.status}"
    )
    return Table(columns, rows, caption)


POOL_TITLES = {"main": "configured shape", "shape_change": "shape_change's shape"}


def rates_table(r: Result, label: str) -> Table | None:
    """One steady rate per mode and shape, pooled over the scenarios, and the speedup."""
    rates = r.diagnostics.get("rates")
    if not isinstance(rates, dict) or not rates:
        return None
    columns = [
        Column("shape"),
        Column("mode"),
        Column("pooled scenarios"),
        num("steady steps"),
        num("step ms"),
        Column(f"{CONFIDENCE:.0%} interval ms"),
        num("spread", fmt.percent),
        num("tokens/s"),
        num("MFU", fmt.percent),
        Column("speedup"),
        Column("conclusion"),
    ]
    rows = []
    for pool, by_mode in rates.items():
        sp = by_mode.get("speedup")
        for mode in ("eager", "compiled"):
            rate = by_mode.get(mode)
            if rate is None:
                continue
            conclusion = rate.get("why") or ""
            speed = ""
            if mode == "compiled" and sp:
                speed = f"{fmt.ratio(sp['value'])} ({_interval(sp['interval'], fmt.ratio)})"
                conclusion = sp["why"] or "conclusive"
            rows.append(
                [
                    POOL_TITLES.get(pool, pool),
                    mode,
                    ", ".join(rate["scenarios"]),
                    rate["steady_steps"],
                    rate["step_s"] * 1e3,
                    _interval([x * 1e3 for x in rate["step_s_interval"]], fmt.number),
                    rate["spread"],
                    rate["tokens_per_s"],
                    rate.get("mfu"),
                    speed,
                    conclusion,
                ]
            )
    dispatch = _moe_dispatch(r)
    caption = (
        f"{label} — steady rate per mode: the median of every steady step of the scenarios at "
        f"one shape, its {CONFIDENCE:.0%} interval (the steps' bootstrap and Student's t over "
        f"the scenarios' processes) and spread (IQR / median); speedup "
        f"= eager / compiled step time; inconclusive below {MIN_SAMPLES} steps or over "
        f"{MAX_SPREAD:.0%} spread or {MAX_DRIFT:.0%} drift, or when the speedup's interval "
        "includes 1, or the processes differ by over the drift limit; intervals widened by the "
        "machine's drift over the case: "
        f"{drift_text(r)}; "
        f"MFU {r.diagnostics.get('peak_label', '')}"
        + (f"; MoE dispatch {dispatch} (MFU counts the active experts)" if dispatch else "")
    )
    return Table(columns, rows, caption)


def compile_phases_table(r: Result, label: str) -> Table | None:
    """Compiled mode's compile seconds by phase, one row per scenario that recorded any."""
    compiled = _scenarios(r).get("compiled", {})
    rows = []
    for name in _ordered(compiled):
        comp = (compiled[name] or {}).get("compile", {})
        phases = comp.get("phases") or {}
        if phases:
            rows.append(
                [name, *(phases.get(k) for k in COMPILE_PHASE_COLUMNS), comp.get("compile_s")]
            )
    if not rows:
        return None
    columns = [Column("scenario"), *map(num, COMPILE_PHASE_COLUMNS.values()), num("compile s")]
    caption = (
        f"{label} — compile time by phase, compiled mode: Dynamo's frame compiles include the "
        "forward graph's backend compile; the backward graph's is compiled at the first "
        "backward; kernel compile wait falls within both; compile s = Dynamo + backend backward"
    )
    return Table(columns, rows, caption)


def _modes(r: Result, name: str) -> tuple[Mode, Mode, int] | None:
    """A scenario's two modes as its ledger line has them: its own first valid results, its
    pool's steady rates. (Runs stored before rates were pooled: the scenario's own rates.)"""
    entry = r.diagnostics.get("ledger", {}).get(name) or {}
    if "tokens_per_s" in entry:
        # The first valid results (the first step, where a run was stored before they were).
        first, rate = entry.get("first_valid_s", entry["first_step_s"]), entry["tokens_per_s"]
        return (
            Mode("eager", first["eager"], rate["eager"]),
            Mode("compiled", first["compiled"], rate["compiled"]),
            int(entry["tokens_per_step"]),
        )
    scenarios = _scenarios(r)
    e, c = scenarios.get("eager", {}).get(name), scenarios.get("compiled", {}).get(name)
    if not (e and c and "tokens_per_s" in e and "tokens_per_s" in c):
        return None
    return (
        Mode("eager", e["first_step_s"], e["tokens_per_s"]),
        Mode("compiled", c["first_step_s"], c["tokens_per_s"]),
        int(e["tokens_per_step"]),
    )


def ledger_table(r: Result, label: str) -> Table:
    ledgers = r.diagnostics.get("ledger", {})
    columns = [Column("scenario"), Column("break-even step")]
    columns += [num(f"N={n:,} eager s") for n in LEDGER_STEPS[1:]]
    columns += [num(f"N={n:,} compiled s") for n in LEDGER_STEPS[1:]]
    rows = []
    for name in _ordered(ledgers):
        modes = _modes(r, name)
        if modes is None:
            continue
        e, c, k = modes
        rows.append(
            [
                name,
                break_even_text(ledgers[name]),
                *(e.total_s(k, x) for x in LEDGER_STEPS[1:]),
                *(c.total_s(k, x) for x in LEDGER_STEPS[1:]),
            ]
        )
    caption = (
        f"{label} — time to N steps: the scenario's first valid step (the first whose loss the "
        "numerics check accepted, with the steps before it) + (N − 1) × tokens per step / the "
        "mode's pooled steady tokens/s; break-even: the N from which compiled is no slower in "
        f"total for good, with its range over the speedup's {CONFIDENCE:.0%} interval, or "
        "inconclusive (why in the steady-rate table)"
    )
    return Table(columns, rows, caption)


def _chart_steps(last: int) -> list[int]:
    decades = max(CHART_DECADES, math.ceil(math.log10(max(last, 1))) + 1)
    return sorted({round(10 ** (i / 4)) for i in range(4 * decades + 1)})


def ledger_chart(r: Result, label: str) -> Chart:
    ledgers = r.diagnostics.get("ledger", {})
    crossings = [
        v["break_even_step"]
        for v in ledgers.values()
        if v.get("break_even_step") and v.get("conclusive", True)
    ]
    steps = _chart_steps(max(crossings, default=1))
    series = []
    for i, name in enumerate(_ordered(ledgers)):
        modes = _modes(r, name)
        if modes is None:
            continue
        *pair, k = modes
        for mode in pair:
            points = [
                Point(n, mode.total_s(k, n), f"{name} {mode.name}: {n:,} steps in "
                      f"{fmt.number(mode.total_s(k, n))} s")
                for n in steps
            ]  # fmt: skip
            series.append(
                Series(
                    f"{name} {mode.name}",
                    points,
                    PALETTE[i % len(PALETTE)],
                    MODE_MARKERS[mode.name],
                    line=True,
                )
            )
    svg = xy_chart(
        series,
        Axis("steps N", log=True),
        Axis("total time s", log=True),
        title="Time to N training steps",
    )
    found = ", ".join(
        f"{name}: {break_even_text(v)}" for name, v in ((n, ledgers[n]) for n in _ordered(ledgers))
    )
    return Chart(svg, f"{label} — total time against steps, per scenario; break-even {found}")


def break_even_text(entry: dict) -> str:
    """A scenario's break-even as read: "inconclusive", the step (with its range where the rates'
    uncertainty moves it), "never", or how long compiled stays ahead."""
    if entry.get("conclusive") is False:
        return INCONCLUSIVE
    n, until = entry.get("break_even_step"), entry.get("ahead_until_step")
    if n is not None:
        lo, hi = entry.get("break_even_range") or (n, n)
        return f"{n:,}" if lo == hi == n else f"{n:,} ({lo:,}–{hi:,})"
    return "never" if until is None else f"never (ahead until step {until:,})"


# --- the full bill ---------------------------------------------------------------------------------

# A failed attempt: a train case that ended so, before a valid step in a mode.
FAILED_STATUSES = ("crash", "timeout")
MODES = ("eager", "compiled")
PRICE_HOW = "--price-per-hour P or --set price_per_hour=P"


def _valid_modes(r: Result) -> set[str]:
    """The modes in which `r` reached a valid result in some scenario: a first step whose loss
    the numerics check accepted (`first_valid_step`; a scenario stored before it was recorded:
    any that trained)."""
    return {
        mode
        for mode, by in _scenarios(r).items()
        for summary in by.values()
        if summary and summary.get("first_valid_step", 0) is not None
    }


@dataclass
class Failed:
    """The run's failed attempts: its train cases that crashed or timed out before a valid step
    in a mode, each charged whole (`duration_s`, the case's time in the store) to every mode
    that got no valid step out of it: a worker that died or ran out of budget left no record,
    so both; a case whose eager scenarios trained before compiled's crashed, compiled alone."""

    results: list[Result] = field(default_factory=list)
    charged: dict[str, list[Result]] = field(default_factory=lambda: {m: [] for m in MODES})

    def seconds(self) -> dict[str, float]:
        return {m: math.fsum(r.duration_s for r in rs) for m, rs in self.charged.items()}

    def text(self) -> str:
        """'none', or 'train/a (timeout, 600 s: eager, compiled); ...'."""
        if not self.results:
            return "none"
        return "; ".join(
            f"{r.case.id} ({r.status}, {fmt.seconds(r.duration_s)}: "
            f"{', '.join(m for m in MODES if r in self.charged[m])})"
            for r in self.results
        )

    def stat(self, price: float | None) -> Stat:
        total = math.fsum(r.duration_s for r in self.results)
        charged = ", ".join(f"{m} {fmt.seconds(s)}" for m, s in self.seconds().items())
        note = (
            f"{fmt.plural(len(self.results), 'train case')} crashed or timed out before a valid "
            f"step: {self.text()}; charged to {charged}; {cost_text(total, price)}"
        )
        return Stat("train failed attempts", total, fmt.seconds, note)


def failed_attempts(run: RunView) -> Failed:
    """The run's failed attempts (`Failed`), from its train results' statuses and durations."""
    failed = Failed()
    for r in run.in_suite(SUITE):
        if r.status not in FAILED_STATUSES:
            continue
        missing = [m for m in MODES if m not in _valid_modes(r)]
        if missing:
            failed.results.append(r)
            for m in missing:
                failed.charged[m].append(r)
    return failed


def price_of(r: Result) -> float | None:
    """The price per device-hour the case's run was given (`price_per_hour`), None if none."""
    price = r.case.params.get("price_per_hour")
    return float(price) if finite(price) and price > 0 else None


def run_price(run: RunView) -> float | None:
    """The run's price per device-hour: every train case carries the run's option."""
    return next((p for r in run.in_suite(SUITE) if (p := price_of(r)) is not None), None)


def price_text(price: float | None) -> str:
    return (
        f"at {fmt.number(price)} per device-hour"
        if price is not None
        else f"{arithmetic.NO_PRICE} ({PRICE_HOW})"
    )


def cost_text(seconds: float, price: float | None) -> str:
    """'cost 0.286 at 2.00 per device-hour', or 'cost: no price given (...)': never 0."""
    if price is None:
        return f"cost: {price_text(None)}"
    return f"cost {money(arithmetic.cost(seconds, price))} {price_text(price)}"


def _cost_clause(price: float | None) -> str:
    """'cost at 2.00 per device-hour' or 'cost: no price given (...)'."""
    return f"cost {price_text(price)}" if price is not None else f"cost: {price_text(None)}"


def scenario_bill(r: Result, name: str, failed: Failed, steps=LEDGER_STEPS[1:]) -> dict | None:  # noqa: ANN001
    """The bill of scenario `name` (`metrics.ledger.bill`): its modes' first valid results and
    pooled rates, the run's failed attempts charged to them, the case's price; None where the
    scenario has no ledger line (a mode failed, no valid result, no rate)."""
    modes = _modes(r, name)
    if modes is None:
        return None
    e, c, k = modes
    return arithmetic.bill([e, c], k, steps, failed.seconds(), price_of(r))


def bill_sentence(bill: dict) -> str:
    """The bill at the break-even step, as a headline's note reads it."""
    price = bill["price_per_hour"]
    failed = ", ".join(f"{m} {fmt.seconds(s)}" for m, s in bill["failed_s"].items())
    n, at = bill["break_even_step"], bill["at_break_even"]
    if n is None:
        return f"the bill (failed attempts {failed}) never breaks even; {_cost_clause(price)}"
    spent = ", ".join(
        f"{m} {fmt.seconds(at['seconds'][m])}"
        + (f" = {money(at['cost'][m])}" if at["cost"] is not None else "")
        for m in ("compiled", "eager")
    )
    return (
        f"the bill (failed attempts {failed} added) breaks even at step {n:,}: {spent}; "
        f"{_cost_clause(price)}"
    )


def bill_table(r: Result, label: str, failed: Failed) -> Table:
    """Per scenario and mode: the first valid result, the failed attempts charged, the bill to
    N steps in seconds and (with a price) money, and the bill at the break-even step."""
    ledgers = r.diagnostics.get("ledger", {})
    scenarios = _scenarios(r)
    price = price_of(r)
    steps = LEDGER_STEPS[1:]
    columns = [
        Column("scenario"),
        Column("mode"),
        num("first valid step"),
        num("to first valid s"),
        num("failed attempts s"),
        *(num(f"N={n:,} s") for n in steps),
    ]
    if price is not None:
        columns += [num(f"N={n:,} cost", money) for n in steps]
    columns += [Column("break-even"), num("at break-even s")]
    if price is not None:
        columns.append(num("at break-even cost", money))
    columns.append(Column("note"))
    charged = failed.seconds()
    rows = []
    for name in _ordered(ledgers):
        bill = scenario_bill(r, name, failed, steps)
        entry = ledgers[name]
        for mode in MODES:
            summary = scenarios.get(mode, {}).get(name) or {}
            k = (entry.get("first_valid_step") or {}).get(mode, 0)
            first = [None if k is None else k + 1, (entry.get("first_valid_s") or {}).get(mode)]
            if bill is None:
                blanks = len(columns) - 6
                rows.append([name, mode, *first, charged[mode], *([None] * blanks),
                             entry.get("why") or "no ledger line"])  # fmt: skip
                continue
            if first[1] is None:  # a run stored before first valid steps were: its first step
                first[1] = summary.get("first_step_s")
            row = [name, mode, *first, charged[mode], *(bill["seconds"][mode][n] for n in steps)]
            if price is not None:
                row += [bill["cost"][mode][n] for n in steps]
            at = bill["at_break_even"] if entry.get("conclusive", True) else None
            row += [
                _bill_break_even(bill, entry) if mode == "compiled" else "",
                at["seconds"][mode] if at else None,
            ]
            if price is not None:
                row.append(at["cost"][mode] if at else None)
            row.append("")
            rows.append(row)
    cost_rule = (
        f"cost = bill s × {fmt.number(price)} (the price per device-hour) / 3600"
        if price is not None
        else f"cost: {price_text(None)}"
    )
    caption = (
        f"{label} — the full bill: failed attempts + the time to N steps from the first valid "
        "step (the first whose loss the numerics check accepted: 1 is the first step; its time "
        "holds the steps before it); failed attempts: the run's train cases that crashed or "
        "timed out before a valid step, their whole time, charged to each mode that got none: "
        f"{failed.text()}; {cost_rule}; break-even: the first N from which compiled's bill is "
        "no higher for good (the time ledger's when both modes carry the same failed attempts; "
        "money breaks even at the same step as the bill's seconds)"
    )
    return Table(columns, rows, caption)


def _bill_break_even(bill: dict, entry: dict) -> str:
    """The bill's break-even step, "never", or "inconclusive" where the time ledger's is."""
    if entry.get("conclusive") is False:
        return INCONCLUSIVE
    n, until = bill["break_even_step"], bill["ahead_until_step"]
    if n is not None:
        return f"{n:,}"
    return "never" if until is None else f"never (ahead until step {until:,})"


def _top_op(summary: dict) -> str:
    """The kernel, else the counted op, with the most time: the first thing to look at."""
    for key, name in (("top_kernels", "name"), ("top_ops", "op")):
        top = summary.get(key) or []
        if top:
            return f"{top[0][name]} ({fmt.number(top[0]['ms'])} ms, {top[0]['calls']} calls)"
    return ""


def profile_blocks(r: Result, label: str) -> list[Block]:
    """The traces --profile captured: files, a short analysis, how to open them."""
    captures = r.diagnostics.get("profile")
    if not isinstance(captures, dict) or not captures:
        return []
    columns = [
        Column("capture"),
        Column("trace"),
        num("steps"),
        num("step ms"),
        num("device idle", lambda v: fmt.percent(v / 100)),
        Column("most time"),
        Column("note"),
    ]
    rows, commands = [], []
    for name, c in captures.items():
        summary = c.get("summary") or {}
        rows.append(
            [
                name,
                c.get("trace") or "none",
                summary.get("steps"),
                summary.get("step_ms"),
                summary.get("device_idle_pct"),
                _top_op(summary),
                c.get("error") or c.get("summary_error") or "",
            ]
        )
        if c.get("trace"):
            commands += [f"trainready analyze {c['trace']}", f"trainready explore {c['trace']}"]
    blocks: list[Block] = [
        Table(
            columns,
            rows,
            f"{label} — profiler traces (--profile): steps recorded after the timed ones; "
            "paths relative to the run directory (OUT/RUN_ID/, where this report is written)",
        )
    ]
    if commands:
        blocks.append(Text("Open them, from the run directory:\n" + "\n".join(commands)))
    return blocks
