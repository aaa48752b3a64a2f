"""Reports from a hand-made store: two runs of a fake matmul sweep on two devices."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from trainready.core.case import Case, Result
from trainready.core.config import ConfigError
from trainready.core.store import RunRecord, Store
from trainready.reporting import FORMATS, render, write_reports
from trainready.reporting.charts import Axis, Panel, Point, Series, small_multiples, xy_chart
from trainready.reporting.model import reason
from trainready.reporting.terminal import print_summary

GPU, CPU = "run-gpu", "run-cpu"


def _case(model: str, op: str, m: int, p: str) -> Case:
    params = {"model": model, "op": op, "M": m, "N": 4096, "K": 4096, "pass": p, "dtype": "bf16"}
    return Case("matmul", f"{model}.{op}.M{m}.{p}", params | {"fused": False})


C_FWD1 = _case("Llama-3.1-8B", "q_proj", 1, "fwd")
C_FWD128 = _case("Llama-3.1-8B", "q_proj", 128, "fwd")
C_FWD2048 = _case("Llama-3.1-8B", "q_proj", 2048, "fwd")
C_NUMERICS = _case("Llama-3.1-8B", "o_proj", 128, "dX")
C_TIMEOUT = _case("Qwen3-8B", "gate_proj", 2048, "dW")
C_CRASH = _case("Qwen3-8B", "lm_head", 2048, "fwd")
C_UNSUPPORTED = _case("Qwen3-8B", "down_proj", 1, "dW")

NUMERICS = "max rel err 3.1e-01 > tol 1.6e-02"
TIMEOUT = "exceeded budget of 60 s in phase 'compile'"
CRASH = "worker died: SIGSEGV"
UNSUPPORTED = "fp8 | int4 matmul not supported by this backend"
# Later lines of an error stay out of the cause; the ANSI codes would break XML if kept.
NUMERICS_DETAIL = "\n\x1b[31mworst at [17, 4]\x1b[0m"


def _matmul(case: Case, mfu: float, peak: str) -> Result:
    gflop = 2 * case.params["M"] * 4096 * 4096 / 1e9
    tflops = mfu * 900
    metrics = {"gflop": gflop, "time_ms": gflop / tflops, "tflops": tflops, "mfu": mfu}
    return Result(case, "pass", metrics, {"peak_label": peak}, "run", 0.0, 0.25)


def _failed(case: Case, status: str, phase: str, **diagnostics: str) -> Result:
    return Result(case, status, {}, diagnostics, phase, 0.0, 1.5)


def _run(
    store: Store, run_id: str, name: str, planned: int, results: list[Result], **extra_env
) -> None:
    env = {
        "python": "3.11.9",
        "torch": "2.13.0",
        "device": {"name": name, "memory_gb": 141},
        "env_vars": {"HF_TOKEN": "hf_do_not_leak", "CUDA_VISIBLE_DEVICES": "0"},
        "git_sha": "abc1234",
        **extra_env,
    }
    record = RunRecord(
        run_id, 1.7e9, ["matmul"], name.lower(), "quick", "bf16", env=env, planned=planned
    )
    store.add_run(record)
    for r in results:
        store.add_result(run_id, r)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("report"))
    datasheet, measured = "vs datasheet peak", "vs measured peak"
    # The primary run: one case of each outcome, and one planned case that never ran.
    _run(
        store,
        GPU,
        "H200",
        8,
        [
            _matmul(C_FWD1, 0.05, datasheet),
            _matmul(C_FWD128, 0.40, datasheet),
            _matmul(C_FWD2048, 0.70, datasheet),
            _failed(C_NUMERICS, "fail_numerics", "check", error=NUMERICS + NUMERICS_DETAIL),
            _failed(C_TIMEOUT, "timeout", "compile", error=TIMEOUT),
            _failed(C_CRASH, "crash", "run", error=CRASH, stderr_tail="\x00"),
            _failed(C_UNSUPPORTED, "unsupported", "setup", reason=UNSUPPORTED),
        ],
    )
    # The reference passes what the primary fails (numerics, timeout, crash), times out where it
    # passes.
    _run(
        store,
        CPU,
        "cpu",
        7,
        [
            _matmul(C_FWD1, 0.30, measured),
            _matmul(C_FWD128, 0.50, measured),
            _failed(C_FWD2048, "timeout", "run", error="exceeded budget of 60 s in phase 'run'"),
            _matmul(C_NUMERICS, 0.45, measured),
            _matmul(C_TIMEOUT, 0.55, measured),
            _matmul(C_CRASH, 0.52, measured),
            _failed(C_UNSUPPORTED, "unsupported", "setup", reason=UNSUPPORTED),
        ],
    )
    yield store
    store.close()


def test_markdown_counts_and_reasons(store):
    md = render(store, [GPU], "md")
    # suite, pass, fail_numerics, timeout, crash, unsupported, not run, total, pass rate
    assert "| matmul | 3 | 1 | 1 | 1 | 1 | 1 | 8 | 37.5% |" in md
    for why in (NUMERICS, TIMEOUT, CRASH, UNSUPPORTED.replace("|", "\\|")):
        assert why in md
    assert "worst at" not in md  # a cause is the error's first line
    assert "matmul MFU at M=128**: 40.0%" in md  # one per M: M=1, 128, 2048 are apart
    assert "vs datasheet peak" in md


def test_json_round_trips_and_counts_match(store):
    text = render(store, [GPU, CPU], "json")
    doc = json.loads(text)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["primary"] == GPU
    gpu, cpu = doc["runs"]
    summary = gpu["summary"]["all"]
    assert summary["counts"]["pass"] == 3 and summary["failed"] == 3
    assert (summary["done"], summary["not_run"], summary["total"]) == (7, 1, 8)
    assert len(gpu["results"]) == 7 and len(cpu["results"]) == 7
    assert cpu["summary"]["all"]["not_run"] == 0
    mfu = {h["label"]: h["value"] for h in gpu["headlines"]}
    assert [mfu[f"matmul MFU at M={m}"] for m in (1, 128, 2048)] == pytest.approx([0.05, 0.4, 0.7])
    assert gpu["run"]["env"]["env_vars"]["HF_TOKEN"] == "(redacted)"


def test_junit_counts(store):
    root = ET.fromstring(render(store, [GPU], "junit"))
    (suite,) = root.findall("testsuite")
    # 7 results + 1 placeholder for the case that never ran.
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("8", "3", "2")
    assert root.get("tests") == "8" and root.get("failures") == "3"
    failures = {tc.get("name"): tc.find("failure") for tc in suite.iter("testcase")}
    numerics = failures[C_NUMERICS.name]
    assert numerics.get("type") == "fail_numerics"
    assert numerics.get("message") == NUMERICS
    assert "worst at" in numerics.text  # the whole error, minus the escape codes XML forbids
    assert failures[C_TIMEOUT.name].get("type") == "timeout"
    assert float(suite.get("time")) == pytest.approx(3 * 0.25 + 4 * 1.5)


def test_html_is_offline_and_complete(store):
    html = render(store, [GPU, CPU], "html")
    assert "<svg" in html and "<script>" in html and "<style>" in html
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert "<link" not in html and "<script src" not in html
    for case in (C_FWD1, C_FWD128, C_FWD2048, C_NUMERICS, C_TIMEOUT, C_CRASH, C_UNSUPPORTED):
        assert case.id in html
    # Overlaid devices, one series per M each, and the MFU peak label on both.
    for series in ("H200 M=1", "H200 M=128", "H200 M=2048", "cpu M=1", "cpu M=2048"):
        assert f'data-name="{series}"' in html
    assert "vs measured peak" in html and "vs datasheet peak" in html
    assert "hf_do_not_leak" not in html


def test_comparison_shows_newly_failing(store):
    doc = json.loads(render(store, [GPU, CPU], "json"))
    (comparison,) = doc["comparisons"]
    assert comparison["newly_failing"] == sorted([C_CRASH.id, C_NUMERICS.id, C_TIMEOUT.id])
    assert comparison["newly_passing"] == [C_FWD2048.id]
    md = render(store, [GPU, CPU], "md")
    block = md.split("**Newly failing**")[1].split("**Newly passing**")[0]
    assert C_NUMERICS.id in block and C_CRASH.id in block and C_FWD1.id not in block


def test_unknown_format_names_the_valid_ones(store, tmp_path):
    with pytest.raises(ConfigError, match="md, json, junit, html"):
        render(store, [GPU], "pdf")
    with pytest.raises(ConfigError, match="pdf"):
        write_reports(store, [GPU], tmp_path, ["md", "pdf"])
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_write_reports(store, tmp_path):
    paths = write_reports(store, [GPU, CPU], tmp_path / "out")
    assert set(paths) == set(FORMATS)
    names = {p.name for p in paths.values()}
    assert names == {"report.md", "report.json", "report.junit.xml", "report.html"}
    assert all(p.stat().st_size > 0 for p in paths.values())


def test_terminal_summary(store):
    console = Console(record=True, width=140, color_system=None)
    print_summary(console, store, GPU)
    text = console.export_text()
    assert "37.5%" in text and "fail_numerics" in text and "matmul MFU at M=128" in text
    assert CRASH in text


def test_reason_takes_the_exception_from_a_traceback():
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad shape\n'
    assert reason(Result(C_FWD1, "fail_run", diagnostics={"error": tb})) == "ValueError: bad shape"
    assert reason(Result(C_FWD1, "fail_run", diagnostics={"message": "a\nb"})) == "a"
    assert reason(Result(C_FWD1, "pass")) == ""


def test_chart_log_axis_legend_and_tooltips():
    series = [
        Series("M=1", [Point(0.03, 5.0, "small"), Point(3.0, 40.0, "big")]),
        Series("M=128", [Point(-1.0, 1.0), Point(float("nan"), 1.0)]),  # unplottable on log x
    ]
    svg = xy_chart(series, Axis("GFLOP", log=True), Axis("MFU %", zero=True), title="t")
    ET.fromstring(svg)  # well-formed
    assert "<title>small</title>" in svg and "<title>big</title>" in svg
    for tick in (">0.01<", ">0.1<", ">1<", ">10<"):
        assert tick in svg
    assert svg.count('class="series"') == 2 and "M=128" in svg
    assert "no data" in xy_chart([], Axis("x"), Axis("y"))


def test_not_run_cases_of_a_multi_suite_run_stay_visible(tmp_path):
    with Store(tmp_path) as store:
        store.add_run(RunRecord("multi", 1.7e9, ["matmul", "flex"], "cpu", "quick", planned=4))
        store.add_result("multi", _matmul(C_FWD1, 0.3, ""))
        store.add_result("multi", Result(Case("flex", "causal"), "pass"))
        md = render(store, ["multi"], "md")
        root = ET.fromstring(render(store, ["multi"], "junit"))
    # The store does not say which suite the 2 missing cases belong to: the run total has them.
    assert "| all | 2 | 2 | 4 | 50.0% |" in md
    assert [ts.get("name") for ts in root.findall("testsuite")] == ["matmul", "flex", "not_run"]
    assert (root.get("tests"), root.get("skipped")) == ("3", "1")


def test_planned_cases_without_result_are_named(tmp_path):
    """With the run's plan in the store, every gap is listed by case id, not only counted."""
    with Store(tmp_path) as s:
        _run(s, "partial", "H200", 3, [_matmul(C_FWD1, 0.5, "vs datasheet peak")])
        s.add_planned("partial", [C_FWD1, C_FWD128, C_TIMEOUT])
        md = render(s, ["partial"], "md")
        junit = ET.fromstring(render(s, ["partial"], "junit"))
    for case in (C_FWD128, C_TIMEOUT):
        assert case.id in md
    skipped = {tc.get("name") for tc in junit.iter("testcase") if tc.find("skipped") is not None}
    assert skipped == {C_FWD128.name, C_TIMEOUT.name}
    assert "--resume" in md


def test_mfu_above_the_peak_is_flagged_above_the_numbers(tmp_path):
    """An MFU over 100% says the peak is wrong (a calibration under load), not that the device
    is fast: the matmul section says so, naming the worst case."""
    over = _matmul(C_FWD128, 1.7, "vs measured peak")
    over.diagnostics["peak_warning"] = "MFU 170% is above the peak; re-measure"
    with Store(tmp_path) as s:
        _run(s, "busy", "cpu", 2, [_matmul(C_FWD1, 0.5, "vs measured peak"), over])
        md = render(s, ["busy"], "md")
    assert f"1 of 2 cases are above 100% MFU, worst {C_FWD128.id}: MFU 170%" in md


def test_mfu_within_the_peak_has_no_warning(tmp_path):
    with Store(tmp_path) as s:
        _run(s, "idle", "cpu", 1, [_matmul(C_FWD1, 0.5, "vs measured peak")])
        assert "above 100% MFU" not in render(s, ["idle"], "md")


def test_small_multiples_share_one_legend():
    lines = [Series("a", [Point(0, 1.0), Point(1, 2.0)], "#111111", "none", line=True, dash=True)]
    long_title = "parity/hf/a_model_with_a_very_long_name/compile/bf16"
    panels = [Panel(lines, Axis("step"), Axis("loss"), f"p{i}") for i in range(5)]
    panels.append(Panel(lines, Axis("step"), Axis("loss"), long_title))
    legend = [Series("a", [], "#111111", "none", line=True, dash=True)]
    svg = small_multiples(panels, legend, columns=4, panel_width=300, panel_height=200)
    root = ET.fromstring(svg)  # well-formed
    assert (root.get("width"), root.get("height")) == ("1200", str(28 + 2 * 200))
    groups = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "panel"]
    assert [g.get("transform") for g in groups[3:5]] == ["translate(900,28)", "translate(0,228)"]
    # One legend entry over the grid, none in the panels; a dashed line swatch, no marker.
    assert [t.text for t in root.findall("{http://www.w3.org/2000/svg}text")] == ["a"]
    assert svg.count('stroke-dasharray="5 3"') == 1 + 6 and "<circle" not in svg
    # A title too long for its panel is cut, and kept whole as a tooltip.
    (cut,) = re.findall(f"<title>{long_title}</title>([^<]*)…</text>", svg)
    assert long_title.startswith(cut) and 20 < len(cut) < 30  # 300 px at about 8 px a letter


def test_one_number_format_for_prose_and_tables():
    from trainready.reporting import fmt

    assert [fmt.ratio(v) for v in (1120.0, 2000.0, 1.5, 0.0971, 0.0000186)] == [
        "1,120×", "2,000×", "1.5×", "0.0971×", "0.0000186×"
    ]  # fmt: skip
    assert [fmt.number(v) for v in (4.89e-4, 0.1479, 12.345, 1234.5)] == [
        "0.000489", "0.1479", "12.35", "1,234"
    ]  # fmt: skip
    assert fmt.number(2.5e-9) == "2.50e-09"  # far from everyday magnitudes only
    assert fmt.metric("compiled_warm_mfu")(0.1479) == "14.8%" == fmt.metric("mfu")(0.1479)
    assert fmt.keyed("config.peaks.bf16.measured_at", 1796133343.2).startswith("2026-")
    assert fmt.keyed("env.device.total_memory", 25275990016) == 25275990016


def test_a_timestamp_in_the_record_reads_as_a_date(tmp_path):
    config = {"peaks": {"bf16": {"measured_at": 1796133343.0, "flops": 2.5e12}}}
    with Store(tmp_path) as s:
        s.add_run(RunRecord("r", 1.7e9, ["matmul"], "cpu", "quick", config=config))
        md = render(s, ["r"], "md")
    assert "| config.peaks.bf16.measured_at | 2026-12-01 " in md and "1,796,133,343" not in md


def test_failures_and_gaps_are_separate_sections(store):
    md = render(store, [GPU], "md")
    failures = md.split("## Failures by cause")[1].split("## Not supported / skipped")[0]
    gaps = md.split("## Not supported / skipped")[1].split("## Suite:")[0]
    assert NUMERICS in failures and CRASH in failures and UNSUPPORTED.split("|")[0] not in failures
    assert UNSUPPORTED.replace("|", "\\|") in gaps and CRASH not in gaps


def test_an_empty_table_is_one_sentence(tmp_path):
    with Store(tmp_path) as s:
        _run(s, "clean", "H200", 1, [_matmul(C_FWD1, 0.5, "vs datasheet peak")])
        md, html = render(s, ["clean"], "md"), render(s, ["clean"], "html")
        console = Console(record=True, width=120, color_system=None)
        print_summary(console, s, "clean")
    assert "No case failed." in md and "Every planned case ran" in md
    assert '<p class="text empty">No case failed.</p>' in html
    assert "No case failed." in console.export_text()


def test_a_comparison_over_different_suites_compares_what_both_ran(tmp_path):
    """runs2 ran matmul only, runs ran matmul and flex: the flex cases are left out and counted,
    not listed as 'pass → not run' status changes."""
    flex = [Case("flex", f"causal/{i}", {"pass": "fwd"}) for i in range(5)]
    with Store(tmp_path) as s:
        _run(s, "matmul-only", "H200", 2, [_matmul(C_FWD1, 0.5, "p"), _matmul(C_FWD128, 0.6, "p")])
        s.add_planned("matmul-only", [C_FWD1, C_FWD128])
        s.add_run(RunRecord("all", 1.7e9, ["matmul", "flex"], "h200", "quick", planned=7,
                            env={"device": {"name": "H200"}}))  # fmt: skip
        s.add_planned("all", [C_FWD1, C_FWD128, *flex])
        for r in [_matmul(C_FWD1, 0.4, "p"), _matmul(C_FWD128, 0.6, "p")]:
            s.add_result("all", r)
        for c in flex:
            s.add_result("all", Result(c, "pass"))
        doc = json.loads(render(s, ["matmul-only", "all"], "json"))
        md = render(s, ["matmul-only", "all"], "md")
        _run(s, "matmul-again", "H200", 2, [_matmul(C_FWD1, 0.5, "p")])
        s.add_planned("matmul-again", [C_FWD1, C_FWD128])  # the same plan: like for like
        alike = render(s, ["matmul-only", "matmul-again"], "md")
    (comparison,) = doc["comparisons"]
    assert comparison["changes"] == [] and comparison["compared"] == 2
    assert comparison["left_out"] == {"only_primary": {}, "only_reference": {"flex": 5}}
    assert "Compared over the 2 cases both runs planned; left out: 5 cases only H200 (all)" in md
    # The overview: the primary's tiles, each with the other run's value and the difference.
    assert "**matmul MFU at M=1**: 50.0%" in md
    assert "(vs H200 (all) 40.0%: +10.0 pts)" in md
    assert "measured only there: flex fwd passed" in md
    # ... each over its own run's cases, which differ here: said where the tiles begin.
    tiles = md.split("Tiles:")[1].split("\n")[0]
    assert "The runs planned different cases" in tiles
    assert "cases both planned (H200 (all): 2 cases) are compared one by one" in tiles
    assert "Tiles:" in alike and "planned different cases" not in alike


def test_a_chart_legend_with_long_names_goes_below_the_plot_whole():
    names = [f"AMD EPYC 7B13 64-Core Processor (run {i}) M={m}" for i in (1, 2) for m in (1, 128)]
    series = [Series(n, [Point(1.0 + i, 10.0 * (i + 1))]) for i, n in enumerate(names)]
    svg = xy_chart(series, Axis("GFLOP", log=True), Axis("MFU %"), width=880, height=420)
    root = ET.fromstring(svg)
    assert int(root.get("height")) > 420  # room made below for the legend
    texts = [t for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text in names]
    assert sorted(t.text for t in texts) == sorted(names)  # every name, whole
    for t in texts:  # within the chart, at about 7 px a character
        assert float(t.get("x")) + 7 * len(t.text) <= 880 and float(t.get("y")) > 420 - 48


def test_matmul_mfu_headline_is_per_m_with_its_spread_or_inconclusive():
    from trainready.reporting.sections.matmul import mfu_at_m

    def timed(mfu: float, spread: float) -> Result:
        r = _matmul(C_FWD128, mfu, "vs measured peak")
        r.metrics["spread"] = spread
        return r

    e = mfu_at_m([timed(0.2, 0.1), timed(0.4, 0.1), timed(0.3, 0.2)])
    assert e.value == 0.3 and e.range == [0.2, 0.4] and e.cases == 3 and not e.why
    # The median of each case's MFU at the ends of its repeats' IQR (a 10% spread: +-5%).
    assert e.interval == pytest.approx([0.3 / 1.1, 0.3 / 0.9])
    noisy = mfu_at_m([timed(0.3, 0.5), timed(0.3, 0.4)])
    assert noisy.why.startswith("timed repeats (median over the cases) spread 45%")
    too_high = mfu_at_m([timed(1.3, 0.01), timed(0.3, 0.01)])
    assert too_high.why.startswith("1 case above 100% MFU: the measured peak is too low")


def test_capabilities_the_backend_lacks_are_listed_with_what_stood_in(tmp_path):
    lacking = [
        {"name": "synchronize", "status": "substitute", "why": "RuntimeError: no sync",
         "how": "device-to-host copy of a scalar"},
        {"name": "memory_stats", "status": "absent", "why": "RuntimeError: no stats",
         "how": "device memory is not measured"},
    ]  # fmt: skip
    with Store(tmp_path) as s:
        young = [_matmul(C_FWD1, 0.5, "measured")]
        _run(s, "young", "emu", 1, young, device_capabilities=lacking)
        md = render(s, ["young"], "md")
        _run(s, "full", "H200", 1, [_matmul(C_FWD1, 0.5, "measured")])
        full = render(s, ["full"], "md")
    section = md.split("## Device capabilities")[1].split("\n## ")[0]
    assert "device-to-host copy of a scalar" in section and "RuntimeError: no sync" in section
    assert "memory_stats" in section and "device memory is not measured" in section
    assert "## Device capabilities" not in full  # nothing missing, nothing listed


def test_a_suite_run_by_module_path_is_one_row_named_by_its_cases(tmp_path):
    """`run benchmarks.trivial_suite` records the path; its cases say their suite is "trivial"."""
    cases = [Case("trivial", f"case-{i}") for i in range(2)]
    with Store(tmp_path) as store:
        record = RunRecord("dotted", 1.7e9, ["benchmarks.trivial_suite"], "cpu", "smoke", planned=2)
        store.add_run(record)
        store.add_planned("dotted", cases)
        store.add_result("dotted", Result(cases[0], "pass"))
        md = render(store, ["dotted"], "md")
    table = md.split("Cases by status")[1].split("\n\n")[1]
    assert "| trivial | 1 | 1 | 2 | 50.0% |" in table
    assert "benchmarks.trivial_suite |" not in table
