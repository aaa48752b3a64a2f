"""The ops section of the report, from results shaped as the ops suite writes them: the coverage
table by entry, the dispatch classes' order, the parity models that use each entry (op_names, and
the truncated ops dict of older records), the blockers' ranking, models_from read from another
stored run, the HTML's filters, the JSON's fields and one JUnit test case per ops case."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store
from trainready.reporting import render
from trainready.reporting.build import build_report
from trainready.reporting.sections import ops as section
from trainready.reporting.terminal import print_sections

CUDA_SOURCE = "dispatcher (CUDA key)"
NO_KERNEL = (
    "NotImplementedError: Could not run 'aten::_linalg_eigh.eigenvalues' with arguments from the "
    "'CUDA' backend."
)
REPRO = "import torch\nx = torch.randn(3, 3, device='cuda')\ntorch.add(x, x, out=x)"


def _ops(entry: str, dtype: str, form: str, status: str = "pass", **diagnostics) -> Result:
    """An ops case as the suite names and records it: `form` as in the name (fwd, bwd, inplace,
    out); dispatch classes measured on CUDA unless `dispatch_source` says otherwise."""
    op, _, variant = entry.partition("(")
    params = {
        "op": op,
        "variant": variant.rstrip(")"),
        "entry": entry,
        "dtype": dtype,
        "direction": "bwd" if form == "bwd" else "fwd",
        "form": {"fwd": "function", "bwd": "function"}.get(form, form),
        "samples": 3,
    }
    diagnostics.setdefault("judged", "numerics")
    diagnostics.setdefault("dispatch_source", CUDA_SOURCE)
    metrics = {"samples": 3.0, "aten_ops": float(len(diagnostics.get("aten") or {}))}
    if diagnostics["judged"] == "numerics" and status == "pass":
        metrics["worst_over_allowance"] = 0.25
    case = Case("ops", f"{entry}/{dtype}/{form}", params)
    return Result(case, status, metrics, diagnostics, "run", 0.0, 0.2)


def _parity(model: str, op_names: list[str] | None = None, ops: dict | None = None) -> Result:
    record: dict = {"device": "cuda:0"}
    if op_names is not None:
        record["op_names"] = op_names
    if ops is not None:
        record["ops"] = ops
    case = Case("parity", f"hf/{model}/eager/fp32", {"source": "hf", "model": model})
    return Result(case, "pass", {}, {"ops": record})


ADD = {"aten::add.Tensor": "kernel"}
CONV = {"aten::convolution": "composite", "aten::convolution_backward": "kernel"}

OPS = [
    # add: every form passes but out=, which falls back to the host and then raises
    _ops("add", "fp32", "fwd", aten=ADD),
    _ops("add", "bf16", "fwd", aten=ADD),
    _ops("add", "fp32", "bwd", aten=ADD),
    _ops("add", "fp32", "inplace", aten={"aten::add_.Tensor": "kernel"}),
    _ops(
        "add",
        "fp32",
        "out",
        "fail_run",
        aten={"aten::add.out": "fallback"},
        error="RuntimeError: out= on a fallback\nsecond line",
        repro=REPRO,
    ),  # fmt: skip
    # conv2d: forward passes, bf16 backward is wrong against float64
    _ops("nn.functional.conv2d", "fp32", "fwd", aten=CONV),
    _ops(
        "nn.functional.conv2d",
        "bf16",
        "bwd",
        "fail_numerics",
        aten=CONV,
        error="grad input: 3.2x its allowance",
        repro=REPRO,
    ),  # fmt: skip
    # a variant, judged by invariants
    _ops(
        "normal(in_place)",
        "fp32",
        "fwd",
        judged="invariants",
        judged_why="nondeterministic: samples random numbers",
        aten={"aten::normal_": "kernel"},
    ),  # fmt: skip
    # no kernel; the CPU cannot run bf16: no reference
    _ops(
        "linalg.eigh", "fp32", "fwd", "unsupported", unsupported="missing", error=NO_KERNEL, aten={}
    ),  # fmt: skip
    _ops("linalg.eigh", "bf16", "fwd", "skipped", skipped="cpu_unsupported", aten={}),
    # op_db says the CPU is a wrong reference in fp16; fp32 beats the CPU
    _ops(
        "sin",
        "fp16",
        "fwd",
        "skipped",
        skipped="reference_invalid",
        judged="reference_invalid",
        aten={"aten::sin": "kernel"},
    ),  # fmt: skip
    _ops("sin", "fp32", "fwd", closer_than_cpu=True, aten={"aten::sin": "kernel"}),
    # its kernel copies to the host and back
    _ops("cumsum", "fp32", "fwd", aten={"aten::cumsum": "roundtrip"}),
]
PARITY = [
    _parity("llama", ["aten.add", "aten.mm", "aten.convolution_backward"]),
    _parity("vit", ["aten.add", "aten.convolution", "aten.convolution_backward", "aten.cumsum"]),
    _parity("whisper", ["aten.mm", "aten.cumsum"]),
]


def _store(results: list[Result], run_id: str = "r1", options: dict | None = None, store=None):
    store = store or Store.in_memory()
    suites = sorted({r.case.suite for r in results}) or ["ops"]
    config = {"options": options or {}}
    store.add_run(RunRecord(run_id, 1.7e9, suites, "cuda:0", "quick", config=config, env={}))
    for r in results:
        store.add_result(run_id, r)
    return store


def _coverage(results: list[Result], **options) -> section.Coverage:
    report = build_report(_store(results, options=options), ["r1"])
    return section.coverage(report.primary)


def _by_entry(cov: section.Coverage) -> dict[str, section.EntryCoverage]:
    return {e.entry: e for e in cov.entries}


# --- names and classes --------------------------------------------------------------------------


def test_an_overload_is_counted_by_its_packet():
    assert section.packet("aten::add.Tensor") == "aten.add"
    assert section.packet("aten::add_.Tensor") == "aten.add_"
    assert section.packet("aten::mm") == "aten.mm"
    assert section.packet("aten.addmm.default") == "aten.addmm"
    assert section.packet("prims::convert_element_type.default") == "prims.convert_element_type"


def test_dispatch_classes_worst_first():
    order = ["missing", "fallback", "roundtrip", "composite", "kernel", "unknown"]
    assert list(section.CLASSES) == order
    for worse, better in zip(order, order[1:], strict=False):
        assert section.worst_class([better, worse]) == worse
        assert section.worst_class([worse, better]) == worse
    assert section.worst_class(["unknown", "kernel"]) == "kernel"
    assert section.worst_class([]) is None  # nothing measured
    assert section.class_rank("something new") == section.class_rank("unknown")


# --- the coverage table -------------------------------------------------------------------------


def test_coverage_rows_by_entry():
    cov = _coverage(OPS + PARITY)
    rows = _by_entry(cov)
    assert list(rows) == sorted(rows)  # one row per entry, by name
    assert list(rows) == [
        "add", "cumsum", "linalg.eigh", "nn.functional.conv2d", "normal(in_place)", "sin",
    ]  # fmt: skip
    add = rows["add"]
    # fp32 forward has a failing form (out=), so only bf16 passes every forward case
    assert add.fwd.text() == "bf16 (not fp32)"
    assert add.bwd.text() == "fp32"
    assert add.worst_class == "fallback"
    assert add.statuses == {"pass": 4, "fail_run": 1}
    assert add.first_error == "RuntimeError: out= on a fallback"  # its first line only
    assert add.first_error_case == "ops/add/fp32/out"
    assert (add.op, add.variant) == ("add", "")
    conv = rows["nn.functional.conv2d"]
    assert (conv.fwd.text(), conv.bwd.text()) == ("fp32", "none (not bf16)")
    assert conv.worst_class == "composite"
    normal = rows["normal(in_place)"]
    assert (normal.op, normal.variant) == ("normal", "in_place")
    assert normal.bwd.text() == section.NOT_MEASURED  # no backward case
    eigh = rows["linalg.eigh"]
    # No aten record, but its error names the overload without a kernel.
    assert eigh.worst_class == "missing"
    assert eigh.blocking_overloads == ["aten::_linalg_eigh.eigenvalues"]
    assert eigh.fwd.text() == "none (not fp32)"  # the cpu_unsupported bf16 case is left out
    assert (eigh.judged, eigh.not_passing) == (1, 1)
    sin = rows["sin"]
    assert sin.fwd.text() == "fp32" and sin.closer_than_cpu == ["fp32/fwd"]
    assert sin.skipped == {"reference_invalid": 1}
    assert rows["cumsum"].worst_class == "roundtrip"


def test_counts_and_what_was_measured():
    cov = _coverage(OPS + PARITY)
    assert cov.counts == {"pass": 8, "fail_numerics": 1, "fail_run": 1, "unsupported": 1,
                          "skipped": 2}  # fmt: skip
    assert (cov.judged, cov.passed) == (11, 8)
    assert cov.unsupported == {"missing": 1}
    assert cov.skipped == {"cpu_unsupported": 1, "reference_invalid": 1}
    assert cov.host_overloads == {"aten::add.out": "fallback", "aten::cumsum": "roundtrip"}
    m = cov.measured
    assert (m.cases, m.numerics, m.invariants, m.reference_invalid) == (13, 11, 1, 1)
    assert m.invariants_why == ["nondeterministic: samples random numbers"]
    assert m.dispatch == 11  # eigh's two cases recorded no class
    assert m.dispatch_sources == {CUDA_SOURCE: 11}
    assert (m.closer_than_cpu, m.worst_over_allowance) == (1, 0.25)


def test_nothing_measured_reads_not_measured():
    """On the CPU every class is 'unknown' and no parity model is known: the report says what was
    not measured rather than a zero."""
    results = [
        _ops(
            "add",
            "fp32",
            "fwd",
            aten={"aten::add.Tensor": "unknown"},
            dispatch_source="none: the device is the CPU",
        ),  # fmt: skip
        _ops("mul", "fp32", "fwd", aten={}),
    ]
    cov = _coverage(results)
    rows = _by_entry(cov)
    assert rows["add"].class_text() == "unknown"
    assert rows["mul"].class_text() == section.NOT_MEASURED
    assert rows["add"].models is None
    assert cov.measured.dispatch == 0
    table = section.coverage_table(cov)
    assert all(row[6] == section.NOT_MEASURED for row in table.rows)  # parity models
    assert "no parity results in this run, and no models_from option" in table.caption


# --- parity models ------------------------------------------------------------------------------


def test_models_using_an_entry_from_op_names():
    cov = _coverage(OPS + PARITY)
    rows = _by_entry(cov)
    assert rows["add"].models == ["hf/llama", "hf/vit"]
    assert rows["add"].via == ["aten.add"]  # aten.add_ and the out= overload: nobody's
    assert rows["nn.functional.conv2d"].models == ["hf/llama", "hf/vit"]
    assert rows["cumsum"].models == ["hf/vit", "hf/whisper"]
    assert rows["sin"].models == []
    assert cov.models.source == "this run's parity results"
    assert not cov.models.lower_bound


def test_models_from_the_truncated_ops_dict_are_a_lower_bound():
    """A record from before op_names: the keys of its ops dict ('aten.mm@cuda'), which keeps the
    40 most frequent ops only; a model recorded both ways has its whole set."""
    full = {f"aten.op{i}@cuda": 100 - i for i in range(section.TRUNCATED_OPS)}
    old = [
        _parity("gpt2", ops={"aten.add@cuda": 9, "aten.add@cpu": 1, **full}),
        _parity("bert", ops={"aten.convolution_backward@cuda": 3}),  # short: nothing cut
        _parity("t5", ops={"aten.mm@cuda": 3}),
        _parity("t5", ["aten.mm", "aten.cumsum"]),  # another case of it has op_names
        Result(Case("parity", "hf/opt/compile/fp32", {"source": "hf", "model": "opt"}), "pass"),
    ]
    found = section.model_ops(old, "this run")
    assert found.ops["hf/gpt2"] >= {"aten.add", "aten.op0"}
    assert found.lower_bound == frozenset({"hf/gpt2"})
    assert found.unrecorded == frozenset({"hf/opt"})  # compiled: no ops record
    assert found.ops["hf/t5"] == frozenset({"aten.mm", "aten.cumsum"})
    assert "counts may be lower bounds" in found.describe()
    cov = _coverage(OPS + old)
    rows = _by_entry(cov)
    assert rows["add"].models == ["hf/gpt2"]
    assert rows["nn.functional.conv2d"].models == ["hf/bert"]
    assert rows["cumsum"].models == ["hf/t5"]
    text = section.measured_text(cov).text
    assert "1 of them recorded only their 40 most frequent ops" in text
    assert "1 model recorded no ops (not counted)" in text


def test_an_overload_most_entries_dispatch_ties_no_entry_to_a_model():
    """The harness's own aten::detach on every output would make every parity model 'use' every
    entry: an overload more than half the entries dispatched is not matched, unless it is the
    entry's own op (detach's) or it left the device."""
    names = ["add", "sin", "cos", "detach", "mul"]
    results = [_ops(n, "fp32", "fwd", aten={f"aten::{n}": "kernel", "aten::detach": "kernel"})
               for n in names]  # fmt: skip
    results.append(_ops("tan", "fp32", "fwd", aten={"aten::tan": "kernel"}))
    models = [_parity("llama", ["aten.detach", "aten.mm"]), _parity("vit", ["aten.sin"])]
    cov = _coverage(results + models)
    assert cov.common == ["aten::detach"]
    rows = _by_entry(cov)
    assert rows["add"].models == [] and rows["add"].matched == ["aten.add"]
    assert rows["add"].packets == ["aten.add", "aten.detach"]  # every one, in the JSON
    assert rows["sin"].models == ["hf/vit"]
    assert rows["detach"].models == ["hf/llama"]  # its own op
    text = section.measured_text(cov).text
    assert "overloads most entries dispatched tie no entry to a model but their own op: " in text
    # Too few entries to tell what is common: everything counts.
    assert section.common_overloads([[(r.case, r)] for r in results[:3]]) == set()
    # One that falls back ties its entries to the models, whatever its share.
    fell = [_ops(n, "fp32", "fwd", aten={f"aten::{n}": "kernel", "aten::detach": "fallback"})
            for n in names]  # fmt: skip
    assert _by_entry(_coverage(fell + models))["add"].models == ["hf/llama"]


def test_unsupported_because_op_db_does_not_import_is_not_counted():
    results = [
        _ops("add", "fp32", "fwd", aten=ADD),
        _ops("mul", "fp32", "fwd", "unsupported", unsupported="database", aten={},
             error="PyTorch's op_db does not import here: ModuleNotFoundError: expecttest"),
        _ops("div", "fp32", "fwd", "unsupported", unsupported="dtype", aten={}),
    ]  # fmt: skip
    cov = _coverage(results)
    assert (cov.judged, cov.passed) == (2, 1)
    assert [b.entry.entry for b in cov.blockers] == ["div"]
    note = next(t for t in section.stats(cov).items if t.label == "unsupported cases").note
    assert note == (
        "dtype 1: counted against the device; database 1: op_db does not import here, not counted"
    )


# --- blockers -----------------------------------------------------------------------------------


def test_blockers_ranked_by_the_models_they_hold_up():
    cov = _coverage(OPS + PARITY)
    ranked = [(b.rank, b.entry.entry, len(b.models or []), b.cleared) for b in cov.blockers]
    # add, conv2d and cumsum each hold up two models; linalg.eigh none. Ties: the most cases not
    # passing, then the worst class (add falls back, conv2d is composite), then the name.
    assert ranked == [
        (1, "add", 2, 0),
        (2, "nn.functional.conv2d", 2, 1),  # llama's blockers: add and conv2d, both fixed
        (3, "cumsum", 2, 3),  # vit and whisper cleared too: every model
        (4, "linalg.eigh", 0, 3),
    ]
    why = {b.entry.entry: b.entry.blocking for b in cov.blockers}
    assert why == {
        "add": ["fail_run", "fallback"],
        "nn.functional.conv2d": ["fail_numerics"],
        "cumsum": ["roundtrip"],
        "linalg.eigh": ["unsupported (missing)"],
    }
    assert "sin" not in why and "normal(in_place)" not in why  # passing on device kernels
    table = section.blockers_table(cov)
    assert [c.name for c in table.columns][4:7] == [
        "parity models", "models", "models cleared by fixing 1..rank",
    ]  # fmt: skip
    assert table.rows[0][5] == "hf/llama, hf/vit"


def test_blockers_without_parity_results_rank_by_failures():
    many = [_ops("div", d, "fwd", "fail_numerics", aten={"aten::div.Tensor": "kernel"})
            for d in ("fp32", "bf16", "fp16")]  # fmt: skip
    cov = _coverage(OPS + many)
    assert not cov.models.measured
    assert [b.entry.entry for b in cov.blockers] == [
        "div",
        "linalg.eigh",
        "add",
        "nn.functional.conv2d",
        "cumsum",
    ]  # fmt: skip  (ties at one case not passing: the worst class first, missing > fallback)
    assert all(b.models is None and b.cleared is None for b in cov.blockers)
    table = section.blockers_table(cov)
    assert "parity models" not in [c.name for c in table.columns]
    assert "ranked by failures only: no parity results in this run" in table.caption


# --- models_from --------------------------------------------------------------------------------


@pytest.fixture
def models_dir(tmp_path):
    """A stored run with parity results (the models), then a later one without any."""
    where = tmp_path / "models"
    with Store(where) as store:
        _store(PARITY, "parity-run", store=store)
        _store([_ops("x", "fp32", "fwd")], "later-run", store=store)
    (where / "parity-run").mkdir()  # a run's own directory (its logs, its reports)
    return where


@pytest.mark.parametrize("form", ["dir", "db", "dir:run", "run dir"])
def test_models_from_another_stored_run(models_dir, form):
    ref = {
        "dir": str(models_dir),  # the latest run that has parity results
        "db": str(models_dir / "trainready.db"),
        "dir:run": f"{models_dir}:parity-run",
        "run dir": str(models_dir / "parity-run"),
    }[form]
    cov = _coverage(OPS, models_from=ref)
    assert cov.models.source == f"models_from {ref} (run parity-run)"
    assert _by_entry(cov)["add"].models == ["hf/llama", "hf/vit"]
    assert [b.entry.entry for b in cov.blockers][:3] == ["add", "nn.functional.conv2d", "cumsum"]


def test_models_from_wins_over_the_runs_own_parity(models_dir):
    own = [_parity("mamba", ["aten.sin"])]
    cov = _coverage(OPS + own, models_from=str(models_dir))
    assert "hf/mamba" not in cov.models.ops and "hf/llama" in cov.models.ops


def test_models_from_that_cannot_be_read_says_so(tmp_path):
    missing = tmp_path / "nowhere"
    cov = _coverage(OPS + PARITY, models_from=str(missing))
    assert cov.models.source == "this run's parity results"  # the run's own, said so
    assert f"models_from {missing} could not be used (no trainready store" in cov.models.why
    cov = _coverage(OPS, models_from=str(missing))
    assert not cov.models.measured
    caption = section.blockers_table(cov).caption
    assert "ranked by failures only" in caption and "could not be used" in caption


def test_models_from_rereads_a_store_written_since(tmp_path):
    where = tmp_path / "m"
    with Store(where) as store:
        _store([_parity("llama", ["aten.add"])], "a", store=store)
    assert _by_entry(_coverage(OPS, models_from=str(where)))["cumsum"].models == []
    with Store(where) as store:
        _store([_parity("vit", ["aten.cumsum"])], "b", store=store)
    assert _by_entry(_coverage(OPS, models_from=str(where)))["cumsum"].models == ["hf/vit"]


# --- every format -------------------------------------------------------------------------------


@pytest.fixture
def store():
    return _store(OPS + PARITY)


def test_html_filters_the_coverage_by_status_and_dispatch_class(store):
    html = render(store, ["r1"], "html")
    start = html.index('id="suite-ops"')
    ops = html[start : html.index("</section>", start)]
    caption = ops.index("Ops coverage by entry")
    box = ops[ops.rindex('<div class="drill">', 0, caption) : ops.index("</table>", caption)]
    facet = re.search(r'<select data-col="(\d+)" aria-label="dispatch class \(worst\)">', box)
    assert facet, box[:600]
    options = re.findall(
        r'<option value="([^"]*)">', box[facet.start() : box.index("</select>", facet.start())]
    )
    assert options == ["", "composite", "fallback", "kernel", "missing", "roundtrip"]
    assert '<option value="">all statuses</option>' in box
    # Every row carries what the menus match: its statuses, and the class in its cell.
    assert '<tr data-status="pass fail_run">' in box
    assert '<td data-f="fallback">fallback</td>' in box
    assert box.count("<tr data-status=") == 6
    assert "select[data-col]" in html and "dataset.f === f.value" in html  # the inline JS
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # no network


def test_json_carries_every_field(store):
    doc = json.loads(render(store, ["r1"], "json"))
    ops = doc["runs"][0]["sections"]["ops"]
    assert set(ops) >= {"counts", "judged", "passed", "pass_rate", "unsupported", "skipped",
                        "measured", "models", "host_overloads", "overloads", "entries", "blockers"}  # fmt: skip
    add = next(e for e in ops["entries"] if e["entry"] == "add")
    assert add["fwd"] == {"passed": ["bf16"], "failed": ["fp32"], "text": "bf16 (not fp32)"}
    assert add["aten"] == {"aten::add.Tensor": "kernel", "aten::add.out": "fallback",
                           "aten::add_.Tensor": "kernel"}  # fmt: skip
    assert add["worst_class"] == "fallback" and add["packets"] == ["aten.add", "aten.add_"]
    assert add["models"] == ["hf/llama", "hf/vit"] and add["model_count"] == 2
    assert add["first_error_case"] == "ops/add/fp32/out"
    assert len(add["cases"]) == 5 and add["statuses"] == {"pass": 4, "fail_run": 1}
    first = ops["blockers"][0]
    assert (first["rank"], first["entry"], first["model_count"]) == (1, "add", 2)
    assert first["overloads"] == ["aten::add.out"] and first["cleared_cumulative"] == 0
    assert ops["models"]["ops"]["hf/whisper"] == ["aten.cumsum", "aten.mm"]
    assert ops["overloads"][0] == {"overload": "aten::_linalg_eigh.eigenvalues",
                                   "class": "missing", "entries": ["linalg.eigh"]}  # fmt: skip
    assert ops["measured"]["closer_than_cpu"] == 1
    operators = next(d for d in doc["runs"][0]["verdict"]["dimensions"] if d["key"] == "operators")
    assert operators["section"] == "suite-ops" and operators["status"] == "partial"
    # Every result is there whole too, its diagnostics included.
    result = next(r for r in doc["runs"][0]["results"] if r["case_id"] == "ops/add/fp32/out")
    assert result["diagnostics"]["repro"] == REPRO


def test_junit_has_one_test_case_per_ops_case(store):
    root = ET.fromstring(render(store, ["r1"], "junit"))
    suite = next(ts for ts in root.findall("testsuite") if ts.get("name") == "ops")
    cases = suite.findall("testcase")
    assert len(cases) == len(OPS) and suite.get("tests") == str(len(OPS))
    assert {tc.get("name") for tc in cases} == {r.case.name for r in OPS}
    by_name = {tc.get("name"): tc for tc in cases}
    failure = by_name["add/fp32/out"].find("failure")
    assert failure.get("type") == "fail_run"
    assert "repro:\n" + REPRO in failure.text  # the lines that reproduce it, in the CI log
    assert by_name["linalg.eigh/fp32/fwd"].find("skipped") is not None  # unsupported: a gap
    assert (suite.get("failures"), suite.get("skipped")) == ("2", "3")


def test_markdown_and_terminal_show_the_section(store):
    md = render(store, ["r1"], "md")
    ops = md[md.index("## Suite: ops") :]
    assert "**ops cases passing**: 72.7% — 8 of 11 judged cases" in ops
    assert "Blockers: entries that fail" in ops
    assert "| 1 | add | fail_run, fallback | aten::add.out | 2 | hf/llama, hf/vit | 0 | 1 |" in ops
    assert "| add | bf16 (not fp32) | fp32 | fallback | pass, fail_run | 5 | 2 |" in ops
    assert "| aten::add.out | fallback | 1 | add | 2 |" in ops
    assert "- **ops blockers**: 4 — " in md and "first: add (2 models)" in md  # the overview
    console = Console(record=True, width=200, color_system=None)
    report = build_report(store, ["r1"])
    from trainready.reporting.document import build

    print_sections(console, [s for s in build(report) if s.anchor == "suite-ops"])
    text = console.export_text()
    assert "Ops coverage by entry" in text and "nn.functional.conv2d" in text
    assert (
        "Closer to float64 than the CPU's own same-dtype result, on every tensor: 1 case." in text
    )


def test_a_comparison_shows_each_runs_ops(store):
    other = _store([_ops("add", "fp32", "fwd", aten=ADD)], "r2", store=store)
    md = render(other, ["r1", "r2"], "md")
    ops = md[md.index("## Suite: ops") :]
    assert "ops cases passing" in ops and "Ops coverage by entry" in ops
    assert ops.count("Ops coverage by entry") == 2  # one per run, each named
