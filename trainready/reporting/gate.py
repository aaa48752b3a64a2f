"""CI gating: does a run regress against a baseline run?

A run fails the gate when
- a case that did not fail in the baseline fails now (any failing status: numerics, compile, run,
  timeout, crash, oom), or
- a gated metric of a suite regresses beyond the threshold. Metrics are compared case by case over
  the cases that pass in both runs; the suite's median ratio (run / baseline) is what is gated, so one
  noisy case does not fail a build, while the worst case is reported. Which way is better comes from
  the suite's report section (METRIC_GOALS), or
- a case the baseline ran has no result in the run (another suite set, a narrower --filter, an
  interrupted run): what was not run cannot have regressed, so passing would say more than the run
  does. `allow_missing` (`--allow-missing`) lets such a run pass; the missing cases are named either
  way.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field

from trainready.core.store import Store
from trainready.reporting.build import build_report
from trainready.reporting.fmt import plural
from trainready.reporting.model import Comparison, RatioSummary


@dataclass
class MetricCheck:
    suite: str
    metric: str
    goal: str  # "higher" or "lower"
    summary: RatioSummary
    threshold: float

    @property
    def slowdown(self) -> float:
        """How much worse the median case got, as a fraction (negative: it got better)."""
        r = self.summary.median
        return (1 - r) if self.goal == "higher" else (r - 1)

    @property
    def ok(self) -> bool:
        return self.slowdown <= self.threshold

    def describe(self) -> str:
        return (
            f"{self.suite} {self.metric}: median ratio {self.summary.median:.3f} over "
            f"{plural(self.summary.cases, 'case')} ({self.goal} is better; worst case "
            f"{self.summary.low if self.goal == 'higher' else self.summary.high:.3f}); "
            f"{'within' if self.ok else 'beyond'} the {self.threshold:.1%} threshold"
        )


@dataclass
class GateResult:
    run_id: str
    baseline_id: str
    newly_failing: list[tuple[str, str, str]] = field(default_factory=list)  # id, was, now
    metrics: list[MetricCheck] = field(default_factory=list)
    # Cases the baseline ran (id, its status there) that have no result in the run.
    missing: list[tuple[str, str]] = field(default_factory=list)
    allow_missing: bool = False

    @property
    def passed(self) -> bool:
        missing_ok = self.allow_missing or not self.missing
        return not self.newly_failing and all(m.ok for m in self.metrics) and missing_ok

    def missing_by_suite(self) -> dict[str, int]:
        """Suite -> missing cases (a case id starts with its suite)."""
        return dict(Counter(case_id.split("/", 1)[0] for case_id, _ in self.missing))

    def describe_missing(self, named: int = 5) -> str:
        """'353 cases the baseline ran have no result here (parity 120, ...), e.g. A, B, ...'."""
        per = ", ".join(f"{s} {n}" for s, n in sorted(self.missing_by_suite().items()))
        ids = [case_id for case_id, _ in self.missing]
        examples = ", ".join(ids[:named]) + (", …" if len(ids) > named else "")
        return (
            f"{len(ids)} {'case' if len(ids) == 1 else 'cases'} the baseline ran "
            f"{'has' if len(ids) == 1 else 'have'} no result here ({per}), e.g. {examples}"
        )


def parse_threshold(text: str) -> float:
    """'5%' or '0.05' -> 0.05."""
    from trainready.core.config import ConfigError

    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ConfigError(f"malformed threshold {text!r}: expected e.g. 5% or 0.05") from None
    if value < 0:
        raise ConfigError(f"threshold must be >= 0, got {text!r}")
    return value


def evaluate(
    store: Store, run_id: str, baseline_id: str, max_slowdown: float, allow_missing: bool = False
) -> GateResult:
    from trainready.reporting.sections import METRIC_GOALS

    comparison: Comparison = build_report(store, [run_id, baseline_id]).comparisons[0]
    result = GateResult(run_id, baseline_id, allow_missing=allow_missing)
    result.newly_failing = [(c.case_id, c.reference, c.status) for c in comparison.newly_failing]
    ran = comparison.primary.by_id
    result.missing = [
        (r.case_id, r.status) for r in comparison.reference.results if r.case_id not in ran
    ]
    result.missing.sort()
    for summary in comparison.ratios():
        goal = METRIC_GOALS.get(summary.suite, {}).get(summary.metric)
        if goal:
            result.metrics.append(
                MetricCheck(summary.suite, summary.metric, goal, summary, max_slowdown)
            )
    return result


def junit(result: GateResult) -> str:
    root = ET.Element("testsuites", name=f"trainready gate {result.run_id} vs {result.baseline_id}")
    ts = ET.SubElement(
        root, "testsuite", name="gate", timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    )
    for case_id, was, now in result.newly_failing:
        tc = ET.SubElement(ts, "testcase", classname="gate.status", name=case_id)
        ET.SubElement(tc, "failure", type=now, message=f"{was} in the baseline, {now} now")
    for m in result.metrics:
        tc = ET.SubElement(ts, "testcase", classname=f"gate.{m.suite}", name=m.metric)
        if not m.ok:
            ET.SubElement(tc, "failure", type="regression", message=m.describe())
    if result.missing:
        tc = ET.SubElement(ts, "testcase", classname="gate.coverage", name="baseline cases run")
        message = result.describe_missing()
        if result.allow_missing:
            ET.SubElement(tc, "skipped", message=f"allowed (--allow-missing): {message}")
        else:
            failure = ET.SubElement(tc, "failure", type="missing", message=message)
            failure.text = "\n".join(case_id for case_id, _ in result.missing)
    cases = ts.findall("testcase")
    failures = sum(tc.find("failure") is not None for tc in cases)
    for el in (ts, root):
        el.set("tests", str(len(cases)))
        el.set("failures", str(failures))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
