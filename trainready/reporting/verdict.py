"""The readiness verdict: the scorecard's answer to "is this device ready for research training?"

One line per dimension (correctness, numerics, host fallbacks, compile, time to first step,
throughput, attention, distributed, operators), each `ready`, `partial`, `not ready` or `not tested`, with
the one reason that decides it and the report section that holds the evidence. The thresholds are
in `verdict.toml` beside this module; a team's own TOML file overrides any of them
(`load_rules(path)`, `--verdict-config FILE`).

Rules every dimension keeps:
- the suites that measure it are not in the run: `not tested`, never `ready`;
- only part of its evidence is there (one of two suites, one of parity's two modes, a configured
  first-step metric not measured): at most `partial`, and the reason says what is missing;
- a planned case that did not run counts as not passing; skipped cases (not the device's: too few
  ranks, an API this torch build lacks) are left out of every share.
The overall line: `not ready` if any dimension is, `ready` only if every one is, else `partial`
(`not tested` when none was tested).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from trainready.core.case import Case, Result
from trainready.reporting import fmt
from trainready.reporting.model import NOT_RUN, RunView, finite, reason
from trainready.reporting.rules import Rules, load_rules
from trainready.reporting.sections import dist as dist_section
from trainready.reporting.sections import host as host_section
from trainready.reporting.sections import matmul as matmul_section
from trainready.reporting.sections import ops as ops_section

READY, PARTIAL, NOT_READY, NOT_TESTED = "ready", "partial", "not ready", "not tested"
LEVELS = (READY, PARTIAL, NOT_READY, NOT_TESTED)
REASON_CHARS = 120  # a failing case's own reason, quoted in a verdict line, is cut here
NAMED_OPS = 4


# --- the verdict --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One dimension's verdict."""

    key: str  # "correctness", as in the TOML file
    name: str  # "correctness (parity: eager, compiled)"
    status: str  # one of LEVELS
    reason: str  # the one reason that decides it
    section: str | None = None  # anchor of the report section with the evidence
    section_title: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    lines: list[Line]
    source: str  # where the thresholds came from

    @property
    def overall(self) -> Line:
        statuses = [line.status for line in self.lines]
        counts = Counter(statuses)
        tally = ", ".join(f"{counts[s]} {s}" for s in LEVELS if counts[s])
        if NOT_READY in counts:
            status = NOT_READY
        elif counts[READY] == len(statuses):
            status = READY
        elif counts[NOT_TESTED] == len(statuses):
            status = NOT_TESTED
        else:
            status = PARTIAL
        return Line("overall", "ready for research training", status, tally)

    def to_json(self) -> dict[str, Any]:
        return {
            "overall": self.overall.to_json(),
            "dimensions": [line.to_json() for line in self.lines],
            "thresholds": self.source,
        }


@dataclass(frozen=True)
class _Finding:
    status: str
    reason: str
    suite: str | None = None  # whose section holds the evidence ("causes": failures by cause)


# Sections a verdict line may point at besides the suites' own (document.py makes them).
_SECTION_TITLES = {"causes": "Failures by cause"}


def _anchor(run: RunView, where: str | None) -> tuple[str | None, str | None]:
    """(anchor, title) of the section holding the evidence; none for a suite not in the run."""
    if where in _SECTION_TITLES:
        return where, _SECTION_TITLES[where]
    if where is not None and where in run.suites:
        return f"suite-{where}", f"Suite: {where}"
    return None, None


def judge(run: RunView, rules: Rules | None = None) -> Verdict:
    """Every dimension's verdict for one run."""
    rules = rules or load_rules()
    lines = []
    for key, name, measure in DIMENSIONS:
        found = measure(run, rules[key])
        section, title = _anchor(run, found.suite)
        lines.append(Line(key, name, found.status, found.reason, section, title))
    return Verdict(lines, rules.source)


# --- helpers --------------------------------------------------------------------------------------


def _entries(run: RunView, suite: str) -> list[tuple[Case, Result | None]]:
    """Every planned case of `suite`: its result, or None where it did not run."""
    return [(r.case, r) for r in run.in_suite(suite)] + [(c, None) for c in run.not_run_in(suite)]


def _status(entry: tuple[Case, Result | None]) -> str:
    return entry[1].status if entry[1] is not None else NOT_RUN


def _absent(run: RunView, suite: str, entries: list) -> _Finding | None:
    """`not tested` when the suite is not in the run or none of its cases ran."""
    if suite not in run.suites:
        return _Finding(NOT_TESTED, f"the {suite} suite was not in this run")
    ran = sum(r is not None for _, r in entries)
    if not ran:
        planned = len(entries) or run.suites[suite].total
        if not planned:
            return _Finding(NOT_TESTED, f"no {suite} case was planned", suite)
        what = fmt.plural(planned, f"planned {suite} case")
        return _Finding(NOT_TESTED, f"none of the {what} ran", suite)
    return None


def _higher(value: float, ready_min: float, partial_min: float) -> str:
    return READY if value >= ready_min else PARTIAL if value >= partial_min else NOT_READY


def _lower(value: float, ready_max: float, partial_max: float) -> str:
    return READY if value <= ready_max else PARTIAL if value <= partial_max else NOT_READY


_ORDER = {NOT_READY: 0, PARTIAL: 1, READY: 2}


def _worst(statuses: list[str]) -> str:
    return min(statuses, key=_ORDER.__getitem__)


def _capped(status: str) -> str:
    """Part of the evidence is missing: never `ready`."""
    return PARTIAL if status == READY else status


def _short(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _example(entries: list[tuple[Case, Result | None]]) -> str:
    """'12 unsupported, 1 timeout; e.g. CASE: WHY' over the non-passing entries."""
    bad = [e for e in entries if _status(e) != "pass"]
    if not bad:
        return ""
    counts = Counter(fmt.status(_status(e)) for e in bad)
    tally = ", ".join(f"{n} {s}" for s, n in counts.most_common())
    top = counts.most_common(1)[0][0]
    case, result = next(e for e in bad if fmt.status(_status(e)) == top)
    why = reason(result) if result is not None else "planned, no result"
    return f"{tally}; e.g. {case.id}" + (f": {_short(why)}" if why else "")


def _limit(value: float) -> str:
    """A threshold as people write it: '120 s', not '120.0 s'."""
    return fmt.number(int(value) if float(value).is_integer() else value)


def _share(passed: int, total: int) -> str:
    verb = "passes" if passed == 1 else "pass"
    return f"{passed} of {fmt.plural(total, 'case')} {verb} ({fmt.percent(passed / total)})"


# --- the dimensions -------------------------------------------------------------------------------

MODE_NAMES = {"eager": "eager", "compile": "compiled"}


def correctness(run: RunView, rules: dict[str, Any]) -> _Finding:
    entries = _entries(run, "parity")
    if found := _absent(run, "parity", entries):
        return found
    by_mode: dict[str, list] = defaultdict(list)
    for e in entries:
        if _status(e) != "skipped":
            by_mode[str(e[0].params.get("mode", "eager"))].append(e)
    if not by_mode:
        return _Finding(NOT_TESTED, "every parity case was skipped", "parity")
    judged = []
    for mode, items in by_mode.items():
        passed = sum(_status(e) == "pass" for e in items)
        level = _higher(passed / len(items), *_range(rules, "pass_rate"))
        judged.append((level, passed / len(items), mode, passed, items))
    level, _, mode, passed, items = min(judged, key=lambda j: (_ORDER[j[0]], j[1]))
    name = MODE_NAMES.get(mode, mode)
    text = f"{name}: {_share(passed, len(items))}"
    if level != READY:
        text += f", below the {fmt.percent(rules['ready_min_pass_rate'])} ready needs; "
        text += _example(items)
    else:
        text = "; ".join(f"{MODE_NAMES.get(m, m)}: {_share(p, len(i))}" for _, _, m, p, i in judged)
    missing = [MODE_NAMES[m] for m in MODE_NAMES if m not in by_mode]
    if missing and level == READY:
        return _Finding(PARTIAL, f"{' and '.join(missing)} mode not run; {text}", "parity")
    return _Finding(level, text, "parity")


def _range(rules: dict[str, Any], what: str, prefix: str = "") -> tuple[float, float]:
    return rules[f"{prefix}ready_min_{what}"], rules[f"{prefix}partial_min_{what}"]


# Suites whose numerics another dimension judges: the ops suite's thousands of single-op checks
# are the operators dimension's, so a wrong op counts once, and they do not dilute the share of
# training checks (parity) that are wrong.
NUMERICS_ELSEWHERE = ("ops",)


def numerics(run: RunView, rules: dict[str, Any]) -> _Finding:
    if not run.results:
        return _Finding(NOT_TESTED, "no case ran")
    checked = [
        r
        for r in run.results
        if r.status in ("pass", "fail_numerics") and r.case.suite not in NUMERICS_ELSEWHERE
    ]
    wrong = [r for r in checked if r.status == "fail_numerics"]
    if not wrong and "parity" not in run.suites:
        return _Finding(
            NOT_TESTED,
            "the parity suite, which checks training against float64, was not in this run"
            + (f" ({fmt.plural(len(checked), 'single-op check')} clean)" if checked else ""),
        )
    if not checked:
        return _Finding(NOT_TESTED, "no case reached a numerics check", "parity")
    # Most checks are against float64; train's compares its compiled loss curve with its eager
    # one and dist's checkpoint is bitwise: "a numerics check" says what every counted case had.
    checked_text = fmt.plural(len(checked), "case") + " with a numerics check"
    if len(wrong) <= rules["ready_max_failures"]:
        if not wrong:
            return _Finding(READY, f"none of {checked_text} is wrong", "parity")
        text = f"{len(wrong)} of {checked_text} wrong, within the {rules['ready_max_failures']} allowed"
        return _Finding(READY, text, "causes")
    share = len(wrong) / len(checked)
    level = PARTIAL if share <= rules["partial_max_failure_share"] else NOT_READY
    first = wrong[0]
    why = reason(first)
    text = f"{len(wrong)} of {checked_text} wrong ({fmt.percent(share)}); e.g. {first.case_id}"
    text += f": {_short(why)}" if why else ""
    return _Finding(level, text, "causes")


FALLBACK_SUITES = ("parity", "matmul", "train")


def _named(ops: list[str]) -> str:
    return ", ".join(ops[:NAMED_OPS]) + (f" (+{len(ops) - NAMED_OPS})" if len(ops) > 4 else "")


def _roundtrips_text(record: host_section.Fallbacks, trips: list[str]) -> str:
    """The kernels that made host round-trips, none, or that nothing measured them."""
    if not record.roundtrip_cases:
        return f"host round-trips inside kernels not measured ({record.roundtrip_gap()})"
    if trips:
        return f"{_named(trips)} ({record.roundtrip_sources()})"
    return f"no host round-trip inside the device's kernels ({record.roundtrip_sources()})"


def host_fallbacks(run: RunView, rules: dict[str, Any]) -> _Finding:
    present = [s for s in FALLBACK_SUITES if s in run.suites]
    if not present:
        return _Finding(NOT_TESTED, "none of parity, matmul, train (which record them) was run")
    results = [r for s in present for r in run.in_suite(s)]
    record = host_section.collect(results, lambda r: r.case.id)
    where = next(
        (s for s in present if host_section.collect(run.in_suite(s), str).cases), present[0]
    )
    if record.on_cpu and not record.measured:
        return _Finding(READY, "the device is the CPU: nothing to fall back from", where)
    if not record.measured:
        return _Finding(NOT_TESTED, f"unknown: {record.stat().note}", where)
    ops = sorted(record.fallback_ops)
    trips = sorted(record.roundtrip_ops)  # host work hidden in the device's own kernels
    level = _lower(len(ops) + len(trips), rules["ready_max_ops"], rules["partial_max_ops"])
    if ops:
        text = f"{fmt.plural(len(ops), 'op')} fell back to the host: {_named(ops)}"
    else:
        text = "no op fell back to the host"
    text += f" ({record.sources()}); {_roundtrips_text(record, trips)}"
    if "parity" not in run.suites and level == READY:
        return _Finding(PARTIAL, f"parity (training's ops) not run; {text}", where)
    return _Finding(level, text, where)


def compile_(run: RunView, rules: dict[str, Any]) -> _Finding:
    entries = _entries(run, "parity")
    if "parity" not in run.suites:
        return _Finding(NOT_TESTED, "the parity suite was not in this run")
    compiled = [e for e in entries if e[0].params.get("mode") == "compile"]
    if not compiled:
        return _Finding(NOT_TESTED, "no compiled parity case in this run", "parity")
    ran = [e for e in compiled if e[1] is not None and e[1].status != "skipped"]
    if not ran:
        return _Finding(NOT_TESTED, "no compiled parity case ran", "parity")
    failed = [e for e in ran if _status(e) not in ("pass", "fail_numerics")]
    share = len(failed) / len(ran)
    with_record = [r for _, r in ran if isinstance(r.diagnostics.get("compile"), dict)]
    breaks = {r.case_id: _breaks(r) for r in with_record}
    broken = [cid for cid, n in breaks.items() if n]
    break_share = len(broken) / len(with_record) if with_record else 0.0
    if share > rules["ready_max_failure_share"]:
        level = PARTIAL if share <= rules["partial_max_failure_share"] else NOT_READY
        text = (
            f"{len(failed)} of {fmt.plural(len(ran), 'compiled case')} did not compile and run "
            f"({fmt.percent(share)}): {_example(failed)}"
        )
        return _Finding(level, text, "parity")
    if break_share > rules["ready_max_graph_break_share"]:
        top = Counter()
        for r in with_record:
            top.update(r.diagnostics["compile"].get("break_reasons") or {})
        why = top.most_common(1)[0][0] if top else ""
        text = (
            f"graph breaks in {len(broken)} of {fmt.plural(len(with_record), 'compiled case')} "
            f"({fmt.plural(sum(breaks.values()), 'break')})"
            + (f"; most common: {_short(why)}" if why else "")
        )
        return _Finding(PARTIAL, text, "parity")
    text = (
        f"{fmt.plural(len(ran), 'compiled case')}, none failed to compile; graph breaks in "
        f"{len(broken)} of {len(with_record)}"
    )
    return _Finding(READY, text, "parity")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _breaks(r: Result) -> int:
    reasons = r.diagnostics["compile"].get("break_reasons") or {}
    return sum(int(n) for n in reasons.values() if _number(n))


EAGER_FIRST_STEP = ("eager_warm_first_step_s", "eager_cold_first_step_s")


def _scenario(metric: str) -> str:
    """'compiled_cold_first_step_s' -> 'compiled, cold'."""
    mode, _, rest = metric.partition("_")
    return f"{mode}, {rest.removesuffix('_first_step_s').replace('_', ' ')}"


def first_step(run: RunView, rules: dict[str, Any]) -> _Finding:
    entries = _entries(run, "train")
    if found := _absent(run, "train", entries):
        return found
    results = [r for _, r in entries if r is not None]
    measured = [(r, m, r.metrics.get(m)) for r in results for m in rules["metrics"]]
    measured = [(r, m, v) for r, m, v in measured if finite(v)]
    ready_max, partial_max = rules["ready_max_s"], rules["partial_max_s"]
    if not measured:
        eager = [(r, m, r.metrics.get(m)) for r in results for m in EAGER_FIRST_STEP]
        eager = [(r, m, v) for r, m, v in eager if finite(v)]
        if not eager:
            return _Finding(
                NOT_READY, "no train case reached a first step; " + _example(entries), "train"
            )
        r, m, v = max(eager, key=lambda x: x[2])
        text = (
            f"compiled mode did not run; {_scenario(m)} first step {fmt.seconds(v)} ({r.case.name})"
        )
        return _Finding(_capped(_lower(v, ready_max, partial_max)), text, "train")
    r, m, v = max(measured, key=lambda x: x[2])
    level = _lower(v, ready_max, partial_max)
    text = f"{_scenario(m)} first step {fmt.seconds(v)} ({r.case.name})"
    text += (
        f", within the {_limit(ready_max)} s ready allows"
        if level == READY
        else f", over the {_limit(ready_max)} s ready allows"
    )
    missing = [m for m in rules["metrics"] if not any(finite(x.metrics.get(m)) for x in results)]
    if missing and level == READY:
        named = ", ".join(_scenario(m) for m in missing)
        return _Finding(PARTIAL, f"{named} first step not measured; {text}", "train")
    return _Finding(level, text, "train")


def _train_mfu(r: Result) -> tuple[str, float] | None:
    """(metric, value) of the best steady MFU a train case reached, eager or compiled (a
    researcher trains in the faster mode): the warm scenario's, else the cold one's."""
    found = []
    for mode in ("compiled", "eager"):
        metric = next(
            (m for s in ("warm", "cold") if finite(r.metrics.get(m := f"{mode}_{s}_mfu"))), None
        )
        if metric:
            found.append((metric, float(r.metrics[metric])))
    return max(found, key=lambda f: f[1], default=None)


def _train_why(r: Result, mode: str) -> str:
    """Why the mode's pooled steady rate is inconclusive ('' when it holds up)."""
    rates = r.diagnostics.get("rates")
    pool = rates.get("main", {}) if isinstance(rates, dict) else {}
    return str((pool.get(mode) or {}).get("why") or "")


def _unless_inconclusive(level: str, text: str, suite: str, why: str) -> tuple[str, str, str, bool]:
    """A headline the report calls inconclusive (the machine's speed moved, the timing spread
    too wide) can decide neither ready nor not ready: partial, saying why. The last field says
    whether it was."""
    if not why:
        return level, text, suite, False
    return PARTIAL, f"{text}: inconclusive, {why}", suite, True


def throughput(run: RunView, rules: dict[str, Any]) -> _Finding:
    present = [s for s in ("train", "matmul") if s in run.suites]
    if not present:
        return _Finding(NOT_TESTED, "neither the train nor the matmul suite was in this run")
    results = [r for s in present for r in run.in_suite(s)]
    host = next((r for r in results if r.diagnostics.get("host_fallback")), None)
    if host is not None:
        text = f"the MFU is the host's, not the device's: {_short(str(host.diagnostics['host_fallback']))}"
        return _Finding(NOT_READY, text, host.case.suite)
    judged = []  # (level, text, suite, inconclusive)
    if "train" in present:
        mfus = [(r, *best) for r in run.in_suite("train") if (best := _train_mfu(r))]
        if mfus:
            r, m, v = min(mfus, key=lambda x: x[2])
            level = _higher(v, *_range(rules, "mfu", "train_"))
            mode, _, scenario = m.removesuffix("_mfu").partition("_")
            text = f"train MFU {fmt.percent(v)} ({mode}, {scenario} scenario, {r.case.name})"
            judged.append(_unless_inconclusive(level, text, "train", _train_why(r, mode)))
    if "matmul" in present:
        passed = [
            r for r in run.in_suite("matmul") if r.status == "pass" and finite(r.metrics.get("mfu"))
        ]
        if passed:
            # MFU clusters by M (M=1 is memory-bound decode, larger M the training GEMMs): one
            # median over all M is a midpoint between clusters. Training is judged at the
            # largest M the run measured.
            top = max(r.case.params.get("M") or 0 for r in passed)
            at_top = [r for r in passed if (r.case.params.get("M") or 0) == top]
            mfus = [r.metrics["mfu"] for r in at_top]
            v = statistics.median(mfus)
            level = _higher(v, *_range(rules, "mfu", "matmul_"))
            text = (
                f"median matmul MFU {fmt.percent(v)} at M={top}, the largest M measured, over "
                f"{fmt.plural(len(mfus), 'passing case')}"
            )
            headline = matmul_section.mfu_at_m(
                at_top, matmul_section.run_drift(run.in_suite("matmul"))
            )
            judged.append(_unless_inconclusive(level, text, "matmul", headline.why))
    if not judged:
        return _Finding(
            NOT_TESTED,
            "no case measured an MFU (no passing case, or no peak FLOP/s known)",
            present[0],
        )
    level, text, suite, inconclusive = min(judged, key=lambda j: _ORDER[j[0]])
    if level == READY:
        text = "; ".join(j[1] for j in judged)
    elif not inconclusive:
        floor = rules[f"{suite}_ready_min_mfu"]
        text += f", below the {fmt.percent(floor)} ready needs"
    measured = {j[2] for j in judged}
    missing = [s for s in ("train", "matmul") if s not in measured]
    if missing and level == READY:
        return _Finding(PARTIAL, f"no {' or '.join(missing)} MFU; {text}", suite)
    return _Finding(level, text, suite)


def attention(run: RunView, rules: dict[str, Any]) -> _Finding:
    entries = _entries(run, "flex")
    if found := _absent(run, "flex", entries):
        return found
    judged = [e for e in entries if _status(e) != "skipped"]
    if not judged:
        return _Finding(NOT_TESTED, "every flex case was skipped", "flex")
    passed = sum(_status(e) == "pass" for e in judged)
    level = _higher(passed / len(judged), *_range(rules, "pass_rate"))
    text = f"{_share(passed, len(judged))}"
    if level != READY:
        text += f", below the {fmt.percent(rules['ready_min_pass_rate'])} ready needs; "
        text += _example(judged)
    return _Finding(level, text, "flex")


def distributed(run: RunView, rules: dict[str, Any]) -> _Finding:
    entries = _entries(run, "dist")
    if found := _absent(run, "dist", entries):
        return found
    rows = [row for row in dist_section.api_rows(run) if row[3] != "skipped"]
    if not rows:
        return _Finding(NOT_TESTED, "every torch.distributed API was skipped", "dist")
    working = [row for row in rows if row[3] == "pass"]
    share = len(working) / len(rows)
    level = _higher(share, rules["ready_min_api_share"], rules["partial_min_api_share"])
    text = f"{len(working)} of {fmt.plural(len(rows), 'API')} work"
    broken = [row for row in rows if row[3] != "pass"]
    if broken:
        api, _, _, status, why = broken[0]
        text += f"; {api}: {fmt.status(status)}" + (f" ({_short(why)})" if why else "")
    ranks = [
        int(r.metrics["nranks"])
        for _, r in entries
        if r is not None and finite(r.metrics.get("nranks"))
    ]
    if ranks and max(ranks) < rules["min_ranks"] and level == READY:
        return _Finding(PARTIAL, f"on {fmt.plural(max(ranks), 'rank')} only; {text}", "dist")
    return _Finding(level, text, "dist")


def _host_ops(run: RunView) -> tuple[bool, dict[str, str]]:
    """(measured, overload -> fallback | roundtrip) over the ops cases' dispatch classes."""
    results = run.in_suite("ops")
    measured = any(ops_section.dispatch_measured(r) for r in results)
    found: dict[str, str] = {}
    for r in results:
        aten = r.diagnostics.get("aten")
        for overload, cls in aten.items() if isinstance(aten, dict) else ():
            if cls in ops_section.HOST_CLASSES:
                found[str(overload)] = str(cls)
    return measured, found


def operators(run: RunView, rules: dict[str, Any]) -> _Finding:
    """The ops suite: the share of judged cases that pass (`ops.judged`: skipped ones are not the
    device's, op_db marking the CPU a wrong reference, the CPU unable to run the dtype, no
    samples; nor is op_db failing to import), and, for ready, at most `ready_max_host_ops` aten
    overloads run by the host (a fallback, or a round-trip inside the device's kernel)."""
    entries = _entries(run, "ops")
    if found := _absent(run, "ops", entries):
        return _Finding(found.status, f"not measured: {found.reason}", found.suite)
    judged = [e for e in entries if ops_section.judged(e[1])]
    skipped = Counter(
        str(r.diagnostics.get("skipped") or r.diagnostics.get("unsupported") or "unspecified")
        for _, r in entries
        if not ops_section.judged(r)
    )
    left_out = ", ".join(f"{k} {n}" for k, n in skipped.most_common())
    if not judged:
        return _Finding(NOT_TESTED, f"not measured: every ops case was skipped ({left_out})", "ops")
    passed = sum(_status(e) == "pass" for e in judged)
    level = _higher(passed / len(judged), *_range(rules, "pass_rate"))
    text = _share(passed, len(judged)).replace("cases", "judged ops cases", 1)
    if level != READY:
        text += f", below the {fmt.percent(rules['ready_min_pass_rate'])} ready needs; "
        text += _example(judged)
    if skipped:
        text += f"; not the device's, not counted: {left_out}"
    measured, host = _host_ops(run)
    on_cpu = str(run.record.device).split(":", 1)[0] == "cpu"
    if measured:
        ops = sorted(host)
        if len(ops) > rules["ready_max_host_ops"]:
            what = fmt.plural(len(ops), "aten overload")
            host_text = f"{what} ran on the host (fallback or round-trip): {_named(ops)}"
            if level == READY:
                allowed = _limit(rules["ready_max_host_ops"])
                return _Finding(
                    PARTIAL, f"{host_text}, over the {allowed} ready allows; {text}", "ops"
                )
            text += f"; {host_text}"
    elif not on_cpu and level == READY:
        why = "host fallbacks not measured: no ops case recorded its dispatch classes"
        return _Finding(PARTIAL, f"{why}; {text}", "ops")
    return _Finding(level, text, "ops")


DIMENSIONS: list[tuple[str, str, Callable[[RunView, dict[str, Any]], _Finding]]] = [
    ("correctness", "correctness (parity: eager, compiled)", correctness),
    ("numerics", "numerics", numerics),
    ("host_fallbacks", "host fallbacks", host_fallbacks),
    ("compile", "compile (graph breaks, compile failures)", compile_),
    ("first_step", "time to first step", first_step),
    ("throughput", "throughput (MFU)", throughput),
    ("attention", "attention (flex)", attention),
    ("distributed", "distributed", distributed),
    ("operators", "operators (ops: op_db forward, backward)", operators),
]
