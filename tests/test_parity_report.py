"""The parity section of the report, from stored results shaped as the suite writes them."""

from __future__ import annotations

from trainready.core.case import Case, Result
from trainready.core.store import RunRecord, Store
from trainready.report import render
from trainready.report.model import build_report
from trainready.report.sections import parity as section


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
            "mixtral", "compile", "pass", MOE, compile_s=40.0, compile={"break_reasons": {BREAK: 2}}
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
    assert rows[("moe", "?")] == [None, "0/1"]  # the type that did not build still counts


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
    assert stats["host-fallback ops"].value == 0
