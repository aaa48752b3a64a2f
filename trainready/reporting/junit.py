"""The primary run as JUnit XML, for CI gates: a testsuite per suite, a testcase per case.

Failing statuses are <failure type=STATUS>; unsupported and skipped are <skipped> (a gap, shown as
one); planned cases that never ran are <skipped> too, by name where the store has the plan (else
one placeholder with their count), so an interrupted run is not green by omission. Times are seconds.
"""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET

from trainready.core.case import Result
from trainready.reporting.model import NOT_RUN, NOT_RUN_REASON, REASON_KEYS, Report, RunView, reason

SKIPPED = frozenset({"unsupported", "skipped"})
# Diagnostics worth the CI log in full: the why, where it came from, and the lines that reproduce
# it (an ops case's failing sample).
DETAIL_KEYS = (*REASON_KEYS, "traceback", "stderr_tail", "repro")
# Characters XML 1.0 forbids (ANSI escapes in compiler output, stray NULs) would make the file
# unparseable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("", text)


def render(report: Report) -> str:
    run = report.primary
    root = ET.Element("testsuites", name=_clean(f"trainready {run.label}"))
    for suite, summary in run.suites.items():
        ts = _testsuite(root, run, suite, run.in_suite(suite))
        for case in run.not_run_in(suite):
            tc = ET.SubElement(ts, "testcase", classname=suite, name=case.name, time="0")
            ET.SubElement(tc, "skipped", message=f"{NOT_RUN}: {NOT_RUN_REASON}")
        if summary.not_run and not run.not_run:
            _not_run(ts, suite, summary.not_run)
    unattributed = run.total.not_run - sum(s.not_run or 0 for s in run.suites.values())
    if unattributed:
        _not_run(_testsuite(root, run, NOT_RUN, []), NOT_RUN, unattributed)
    _count(root, root.findall("testsuite"))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _testsuite(root: ET.Element, run: RunView, name: str, results: list[Result]) -> ET.Element:
    ts = ET.SubElement(
        root,
        "testsuite",
        name=name,
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(run.record.created_at)),
        hostname=_clean(run.label),
    )
    props = ET.SubElement(ts, "properties")
    for key, value in (("run_id", run.run_id), ("device", run.label)):
        ET.SubElement(props, "property", name=key, value=_clean(value))
    for r in results:
        tc = ET.SubElement(
            ts, "testcase", classname=r.case.suite, name=r.case.name, time=f"{r.duration_s:.3f}"
        )
        if r.status in SKIPPED:
            why = reason(r)
            ET.SubElement(tc, "skipped", message=_clean(f"{r.status}: {why}" if why else r.status))
        elif r.status != "pass":  # failing, or a status this report does not know: never green
            failure = ET.SubElement(
                tc, "failure", message=_clean(reason(r) or r.status), type=r.status
            )
            failure.text = _clean(_details(r))
    return ts


def _details(r: Result) -> str:
    """The whole story for a CI log: status, phase, params and the full error text."""
    lines = [f"status: {r.status}", f"phase: {r.phase}", f"params: {r.case.params_json()}"]
    lines += [f"{k}:\n{r.diagnostics[k]}" for k in DETAIL_KEYS if r.diagnostics.get(k)]
    if r.metrics:
        lines.append(f"metrics: {json.dumps(r.metrics, sort_keys=True)}")
    return "\n".join(lines)


def _not_run(ts: ET.Element, suite: str, n: int) -> None:
    tc = ET.SubElement(ts, "testcase", classname=suite, name=f"{n} planned cases not run", time="0")
    ET.SubElement(tc, "skipped", message=f"{n} planned cases have no result (interrupted run?)")


def _count(root: ET.Element, suites: list[ET.Element]) -> None:
    """Set tests/failures/skipped/time on each testsuite and on the root."""
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    seconds = 0.0
    for ts in suites:
        cases = ts.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(tc.find("failure") is not None for tc in cases),
            "errors": 0,
            "skipped": sum(tc.find("skipped") is not None for tc in cases),
        }
        elapsed = sum(float(tc.get("time", 0)) for tc in cases)
        for k, v in counts.items():
            ts.set(k, str(v))
            totals[k] += v
        ts.set("time", f"{elapsed:.3f}")
        seconds += elapsed
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{seconds:.3f}")
