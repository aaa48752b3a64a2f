"""The parity section of the report, from stored results shaped as the suite writes them."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from rich.console import Console

from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store
from trainready.probes.numerics import loss_curve_compare
from trainready.reporting import render
from trainready.reporting.build import build_report
from trainready.reporting.sections import parity as section
from trainready.reporting.terminal import print_summary


def _result(model: str, mode: str, status: str, traits: dict, **diag) -> Result:
    case = Case(
        "parity",
        f"hf/{model}/{mode}/fp32",
        {"source": "hf", "model": model, "mode": mode, "dtype": "fp32"},
    )
    metrics = {"compile_s": diag.pop("compile_s")} if "compile_s" in diag else {}
    return Result(case, status, metrics=metrics, diagnostics={"traits": traits, **diag})


MOE = {"moe": "moe", "attention": "gqa"}
DENSE = {"moe": "dense", "attention": "mla"}
BREAK = "Unsupported Tensor.item() call with capture_scalar_outputs=False"


def _store() -> tuple[Store, str]:
    store = Store.in_memory()
    store.add_run(RunRecord("r1", 0.0, ["parity"], "cpu", "quick", env={}))
    results = [
        _result("mixtral", "eager", "pass", MOE),
        _result(
            "mixtral",
            "compile",
            "pass",
            MOE,
            compile_s=40.0,
            compile={"break_reasons": {BREAK: 2}},
            first_compile_in_process=True,
        ),  # fmt: skip
        _result(
            "qwen3_moe",
            "eager",
            "fail_numerics",
            MOE,
            error="x.grad rmse ratio 7.3",
            ops={"host_calls": [{"op": "Tensor.item", "site": "m.py:3", "count": 1}]},
        ),  # fmt: skip
        _result("deepseek_v3", "compile", "fail_compile", DENSE, error="boom", compile_s=None),
        Result(
            Case(
                "parity",
                "hf/dory/eager/fp32",
                {"source": "hf", "model": "dory", "mode": "eager", "dtype": "fp32"},
            ),
            "unsupported",
            diagnostics={"reason": "no"},
        ),  # fmt: skip
    ]
    for r in results:
        store.add_result("r1", r)
    return store, "r1"


def test_pass_rates_by_trait_and_mode():
    store, rid = _store()
    report = build_report(store, [rid])
    table = section._by_trait(report.primary.in_suite("parity"), "")
    rows = {(r[0], r[1]): r[2:] for r in table.rows}
    cols = [c.name for c in table.columns[2:]]
    assert cols == ["compile fp32", "eager fp32"]
    assert rows[("moe", "moe")] == ["1/1", "1/2"]
    assert rows[("attention", "mla")] == ["0/1", None]
    # The type that did not build recorded no traits: counted beside the table, not as a row
    # of failures under an unnamed value.
    assert not any(value == "?" for _, value in rows)
    assert "1 case left out: no traits recorded" in table.caption


def test_markdown_has_every_part_and_every_case():
    store, rid = _store()
    md = render(store, [rid], "md")
    for text in (
        "Parity pass rate by architecture trait",
        "Parity failure categories",
        "Most common graph-break reasons",
        BREAK,
        "Host round-trips and CPU fallbacks",
        "Tensor.item at m.py:3",
        "Slowest compiles",
        "Every parity case",
        "dory",
        "x.grad rmse ratio 7.3",
    ):
        assert text in md, text


def test_slowest_compiles_say_which_compile_paid_the_compilers_start_up():
    store, rid = _store()
    results = build_report(store, [rid]).primary.in_suite("parity")
    table = section._slowest_compiles(results, "")
    assert table.columns[-1].name == "note"
    notes = {str(row[0]): row[-1] for row in table.rows}
    [mixtral] = [model for model in notes if "mixtral" in model]
    assert (
        notes[mixtral] == "its process's first compile: includes the compiler's one-time start-up"
    )
    # deepseek_v3 failed to compile and kept no compile time: it is not among the rows
    assert len(notes) == 1


def test_headlines_pass_rates_numerics_breaks_and_fallbacks():
    store, rid = _store()
    stats = {s.label: s for s in section.headlines(build_report(store, [rid]).primary)}
    assert (
        stats["parity pass rate"].value == 2 / 5 and stats["parity pass rate"].note == "2/5 cases"
    )
    assert stats["parity eager fp32"].value == "1/3"  # mixtral pass, qwen3_moe wrong, dory gap
    assert stats["parity compile fp32"].value == "1/2"
    assert stats["parity numerics failures"].value == 1
    assert stats["graph breaks"].value == 2
    assert stats["graph breaks"].note == "over 1 compiled case"  # deepseek_v3 kept no record
    # The one ops record names no source that could see fallbacks: a count would be a guess.
    assert stats["host-fallback ops"].value == "unknown"


# -- By modality and by the families' traits -------------------------------------------------------


def _family(
    model: str, mode: str, status: str, modality: str | None, source: str = "hf", **traits
) -> Result:
    case = Case(
        "parity",
        f"{source}/{model}/{mode}/fp32",
        {"source": source, "model": model, "mode": mode, "dtype": "fp32"},
    )
    diagnostics: dict = {"traits": traits} if traits else {"reason": "did not build"}
    if modality is not None:
        diagnostics["modality"] = modality
    return Result(case, status, diagnostics=diagnostics)


def _family_store() -> tuple[Store, str]:
    store = Store.in_memory()
    store.add_run(RunRecord("r1", 0.0, ["parity"], "cpu", "quick", env={}))
    for r in [
        _family("llama", "eager", "pass", "text-decoder", mixer="attention", mla="no"),
        _family("llama", "compile", "pass", "text-decoder", mixer="attention", mla="no"),
        _family("jamba", "eager", "fail_numerics", "text-decoder", mixer="hybrid", mla="no"),
        _family("jamba", "compile", "fail_compile", "text-decoder", mixer="hybrid", mla="no"),
        _family("deepseek_v3", "eager", "pass", "text-decoder", mixer="attention", mla="yes"),
        _family("vit", "eager", "pass", "vision", mixer="attention", conv="no"),
        _family("resnet", "eager", "fail_run", "vision", mixer="conv", conv="yes"),
        _family("sam", "eager", "unsupported", "vision"),
        _family("whisper", "compile", "pass", "audio", mixer="attention", cross_attention="yes"),
        # The synthetic matrix records no modality: its models are decoders.
        _family("norm=layernorm", "eager", "pass", None, "synthetic", mixer="attention"),
        # A case stored before modalities were kept: unknown, counted and named.
        _family("gpt2", "eager", "fail_numerics", None, mixer="attention"),
    ]:
        store.add_result("r1", r)
    return store, "r1"


def test_pass_rates_by_modality_and_mode():
    store, rid = _family_store()
    table = section._by_modality(build_report(store, [rid]).primary.in_suite("parity"), "")
    assert [c.name for c in table.columns] == ["modality", "compiled", "eager", "unsupported"]
    # In the families' order, unknown last; a mode with no case of a modality is left blank.
    assert table.rows == [
        ["text-decoder", "1/2", "3/4", 0],  # llama, jamba, deepseek_v3 and the synthetic case
        ["vision", None, "1/3", 1],  # the unsupported case counts among the cases
        ["audio", "1/1", None, 0],
        ["unknown", None, "0/1", 0],
    ]
    assert "1 case recorded no modality" in table.caption and "hf/gpt2" in table.caption


def test_no_unknown_row_when_every_case_has_a_modality():
    results = [_family("vit", "eager", "pass", "vision"), _family("t5", "eager", "pass", "seq2seq")]
    table = section._by_modality(results, "")
    assert [row[0] for row in table.rows] == ["seq2seq", "vision"]
    assert "no modality" not in table.caption


def test_the_trait_table_groups_by_the_new_traits():
    store, rid = _family_store()
    table = section._by_trait(build_report(store, [rid]).primary.in_suite("parity"), "")
    rows = {(r[0], r[1]): r[2:] for r in table.rows}
    assert rows[("mixer", "hybrid")] == ["0/1", "0/1"]  # compile fp32, eager fp32
    assert rows[("mixer", "attention")] == ["2/2", "4/5"]
    assert rows[("mixer", "conv")] == [None, "0/1"]
    assert rows[("mla", "yes")] == [None, "1/1"]
    assert rows[("cross_attention", "yes")] == ["1/1", None]
    # The case that did not build recorded no traits: counted beside the table.
    assert "1 case left out: no traits recorded" in table.caption


def test_every_format_carries_the_modality_counts():
    store, rid = _family_store()
    doc = json.loads(render(store, [rid], "json"))
    (tile,) = [h for h in doc["runs"][0]["headlines"] if h["label"] == "parity by modality"]
    assert tile["value"]["vision"] == {
        "passed": 1,
        "cases": 3,
        "unsupported": 1,
        "modes": {"eager": {"passed": 1, "cases": 3}},
    }
    assert tile["value"]["text-decoder"]["modes"]["compile"] == {"passed": 1, "cases": 2}
    assert list(tile["value"]) == ["text-decoder", "vision", "audio", "unknown"]
    text = "text-decoder 4/6, vision 1/3, audio 1/1, unknown 0/1"
    md = render(store, [rid], "md")
    assert "Parity pass rate by modality" in md and text in md
    assert "| vision |  | 1/3 | 1 |" in md
    html = render(store, [rid], "html")
    assert "Parity pass rate by modality" in html and text in html
    console = Console(record=True, width=200, color_system=None)
    print_summary(console, store, rid)
    assert f"parity by modality: {text}" in console.export_text()


# -- Loss curves of failing cases ----------------------------------------------------------------

STEPS = 8
REF = [7.0 - 0.5 * i for i in range(STEPS)]  # the float64 reference, as the suite stores it


def _drifting(rate: float) -> list[float]:
    """A device curve whose relative deviation from REF grows by `rate` per step."""
    return [r * (1 + rate * i) for i, r in enumerate(REF)]


def _curved(model: str, status: str, device: list[float], ref: list[float] = REF) -> Result:
    curve = {"ok": status == "pass", "rel_tol": 5e-3, "reference": ref, "device": device}
    return _result(model, "eager", status, DENSE, curve=curve)


def _curve_store(runs: dict[str, list[Result]]) -> tuple[Store, list[str]]:
    store = Store.in_memory()
    for rid, results in runs.items():
        env = {"device": {"name": rid}}
        store.add_run(RunRecord(rid, 0.0, ["parity"], "cpu", "quick", env=env))
        for r in results:
            store.add_result(rid, r)
    return store, list(runs)


def _chart(html: str) -> ET.Element:
    """The loss-curve small multiples of the parity section."""
    section = html.split('<section id="suite-parity">')[1].split("</section>")[0]
    figures = [f for f in section.split("<figure>")[1:] if "Loss curves of" in f]
    assert len(figures) == 1
    return ET.fromstring(figures[0].split("<figcaption>")[0])


NS = "{http://www.w3.org/2000/svg}"


def _panels(svg: ET.Element) -> dict[str, ET.Element]:
    """Panels by their title: a case id (loss) or "max ..." (deviation), in drawing order."""
    panels = {}
    for g in svg.iter(f"{NS}g"):
        if g.get("class") == "panel":
            title = next(t for t in g.iter(f"{NS}text") if t.get("font-weight") == "600")
            panels["".join(title.itertext())] = g
    return panels


def _series(panel: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-name"): g for g in panel.iter(f"{NS}g") if g.get("class") == "series"}


def _ys(series: ET.Element) -> list[float]:
    points = series.find(f"{NS}polyline").get("points").split()
    return [float(p.split(",")[1]) for p in points]


def _tips(series: ET.Element) -> list[str]:
    return [t.text for t in series.iter(f"{NS}title")]


def _proportional(pixels: list[float], values: list[float]) -> bool:
    """On a linear axis, pixel offsets from the first point are a fixed multiple of the values'
    (negative: SVG's y grows downwards)."""
    k = (pixels[-1] - pixels[0]) / (values[-1] - values[0])
    return (
        len(pixels) == len(values)
        and k < 0
        and all(
            abs((p - pixels[0]) - k * (v - values[0])) < 0.2
            for p, v in zip(pixels, values, strict=True)
        )
    )


def test_failing_case_draws_device_over_reference():
    device = _drifting(0.004)
    store, rids = _curve_store(
        {"gpu": [_curved("llama", "fail_numerics", device), _curved("gpt2", "pass", REF)]}
    )
    svg = _chart(render(store, rids, "html"))
    panels = _panels(svg)
    assert list(panels)[0] == "hf/llama/eager/fp32"
    assert not any("gpt2" in title for title in panels)  # passing cases are not drawn
    series = _series(panels["hf/llama/eager/fp32"])
    assert set(series) == {"gpu", "float64 reference"}
    # Each polyline carries its curve: its pixels follow the values, step by step.
    assert _proportional(_ys(series["gpu"]), device)
    assert _proportional(_ys(series["float64 reference"]), REF)
    assert not _proportional(_ys(series["gpu"]), REF)
    # Hovering a device marker shows that step's two losses and their deviation.
    assert _tips(series["gpu"])[3] == (
        f"gpu, step 3: loss {device[3]:.6g}, reference {REF[3]:.6g}, rel dev 0.012"
    )
    # The deviation panel: the suite's own maximum, and the tolerance line.
    curve = loss_curve_compare(REF, device, 5e-3)
    (dev_title,) = [t for t in panels if t.startswith("max ")]
    assert dev_title == f"max {curve['max_rel_dev']:.2g} at step {curve['max_rel_dev_step']}"
    deviation = _series(panels[dev_title])
    assert set(deviation) == {"gpu", "tolerance"}
    assert _tips(deviation["gpu"])[-1].startswith(f"gpu, step 7: rel dev {0.028:.3g}")
    # Step 0 agrees exactly: a log axis has no 0, so it sits on the floor and says so.
    assert (
        _tips(deviation["gpu"])[0]
        == "gpu, step 0: rel dev 0 (tolerance 0.005), drawn on the bottom edge"
    )
    assert len(_ys(deviation["gpu"])) == STEPS


def test_charts_are_capped_worst_first_and_the_rest_counted():
    results = [_curved(f"m{i:02d}", "fail_numerics", _drifting(0.001 * (i + 1))) for i in range(14)]
    results.append(_curved("late", "fail_run", _drifting(0.5)))  # numerics failures come first
    store, rids = _curve_store({"gpu": results})
    html = render(store, rids, "html")
    titles = [t for t in _panels(_chart(html)) if t.startswith("hf/")]
    assert len(titles) == section.CURVES_SHOWN == 12
    assert titles == [f"hf/m{i:02d}/eager/fp32" for i in range(13, 1, -1)]
    note = "3 more failing cases not drawn: parity/hf/m01/eager/fp32, parity/hf/m00/eager/fp32,"
    assert note + " parity/hf/late/eager/fp32" in html


def test_no_chart_when_nothing_fails():
    store, rids = _curve_store({"gpu": [_curved("gpt2", "pass", REF)]})
    assert section.curves(build_report(store, rids)) == []
    assert "Loss curves of" not in render(store, rids, "html")
    assert "Loss curve of the worst" not in render(store, rids, "md")


def test_markdown_names_the_chart_and_tabulates_the_worst_case():
    device = _drifting(0.004)
    store, rids = _curve_store(
        {
            "gpu": [
                _curved("mild", "fail_numerics", _drifting(0.001)),
                _curved("llama", "fail_numerics", device),
            ]
        }
    )
    md = render(store, rids, "md")
    assert "_Chart: Loss curves of 2 failing parity cases" in md and "(in the HTML report)._" in md
    table = md.split("**Loss curve of the worst failing parity case, parity/hf/llama/eager/fp32")[1]
    lines = table.split("\n\n")[1].splitlines()
    assert lines[0] == "| step | float64 reference | gpu loss | gpu rel dev |"
    assert lines[2 + 3] == f"| 3 | 5.5 | {device[3]:.6g} | 0.012 |"  # no exponent: an everyday size
    assert len(lines) == 2 + STEPS


def test_runs_overlay_their_curves_of_the_same_case():
    """Two runs: the case fails on one and passes on the other; both curves share its panel."""
    bad, good = _drifting(0.004), _drifting(0.0001)
    store, rids = _curve_store(
        {"gpu": [_curved("llama", "fail_numerics", bad)], "cpu": [_curved("llama", "pass", good)]}
    )
    svg = _chart(render(store, rids, "html"))
    panels = _panels(svg)
    series = _series(panels["hf/llama/eager/fp32"])
    assert list(series) == ["cpu", "gpu", "float64 reference"]  # the primary above the other
    assert _proportional(_ys(series["gpu"]), bad) and _proportional(_ys(series["cpu"]), good)
    assert "max 0.028 at step 7 (gpu)" in panels
    legend = [t.text for t in svg.findall(f"{NS}text")]
    assert legend == ["device: gpu", "device: cpu", "float64 reference", "tolerance"]


def test_runs_with_other_references_get_one_each():
    other = [r + 0.1 for r in REF]
    store, rids = _curve_store(
        {
            "gpu": [_curved("llama", "fail_numerics", _drifting(0.004))],
            "cpu": [_curved("llama", "pass", other, ref=other)],
        }
    )
    series = _series(_panels(_chart(render(store, rids, "html")))["hf/llama/eager/fp32"])
    assert set(series) == {"gpu", "cpu", "reference (gpu)", "reference (cpu)"}
    assert _proportional(_ys(series["reference (cpu)"]), other)


def test_a_loss_that_is_not_finite_is_shown_not_dropped():
    device = REF[:5] + [float("nan")] * (STEPS - 5)
    store, rids = _curve_store({"gpu": [_curved("llama", "fail_numerics", device)]})
    panels = _panels(_chart(render(store, rids, "html")))
    assert "max inf at step 5" in panels
    lost = _series(panels["max inf at step 5"])["gpu not finite"]
    assert [t.split(":")[0] for t in _tips(lost)] == [f"gpu, step {i}" for i in range(5, STEPS)]
    assert all(t.endswith("loss not finite or missing") for t in _tips(lost))


def test_a_baseline_runs_curve_is_drawn_with_the_case():
    """With --baseline (another device's run), the case's chart carries that run's curve too."""
    theirs = _drifting(-0.002)
    failing = _curved("llama", "fail_numerics", _drifting(0.004))
    failing.diagnostics["baseline"] = {"device": "NVIDIA H200", "baseline_curve": theirs}
    store, rids = _curve_store({"npu": [failing]})
    svg = _chart(render(store, rids, "html"))
    series = _series(_panels(svg)["hf/llama/eager/fp32"])
    assert set(series) == {"npu", "float64 reference", "baseline: NVIDIA H200"}
    assert _proportional(_ys(series["baseline: NVIDIA H200"]), theirs)
    legend = "".join(svg.itertext())
    assert "--baseline run" in legend


def test_no_baseline_legend_without_a_baseline():
    store, rids = _curve_store({"npu": [_curved("llama", "fail_numerics", _drifting(0.004))]})
    assert "--baseline run" not in "".join(_chart(render(store, rids, "html")).itertext())


def test_a_case_that_raised_counts_under_the_modality_it_was_planned_with():
    raised = _result("vit", "eager", "fail_run", {})
    raised.case.params["modality"] = "vision"  # planned with it; the raise recorded nothing
    assert "modality" not in raised.diagnostics
    assert section._modality(raised) == "vision"


def test_a_zoo_whose_library_is_missing_is_named_not_a_mode():
    """The one case a missing library's zoo plans (no mode or dtype ran) reads 'zoo
    unavailable' in the pass rates and the modality table, and is no column of the traits."""
    missing = Result(
        Case("parity", "timm/unavailable", {"source": "unavailable", "modality": "vision"}),
        "unsupported",
        diagnostics={"reason": "the timm zoo needs timm"},
    )
    results = [_family("vit", "eager", "pass", "vision", mixer="attention"), missing]
    rates = {s.label: s.value for s in section._rates(results, "").items}
    assert rates["parity zoo unavailable"] == "0/1" and "parity hf eager fp32" in rates
    assert not any("?" in label for label in rates)
    table = section._by_modality(results, "")
    assert [c.name for c in table.columns] == [
        "modality",
        "eager",
        "zoo unavailable",
        "unsupported",
    ]
    assert table.rows == [["vision", "1/1", "0/1", 1]]
    traits = section._by_trait(results, "")
    assert [c.name for c in traits.columns] == ["trait", "value", "eager fp32"]
