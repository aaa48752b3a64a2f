"""The flex suite end to end on the CPU, through the CLI and the real runner: a compiled variant
passes, a masked one (through create_block_mask) passes counting only its kept blocks' work, a
planted wrong score_mod is `fail_numerics`, a compile that cannot finish in its budget is `timeout`
in phase `compile`, the CPU backward is `unsupported` with PyTorch's message, and the reports carry
the pass table and the heat map.

One run covers all of it (alibi, causal and the user's variants), since each compile costs seconds
on a CPU. The planted variant is ALiBi with its slopes' exponent sign flipped: its score_mod is the
built-in's, line for line, so the kernel compiles to the same graph (a hit in inductor's cache) and
only the numbers differ. Planning calls every user mod once, plainly (flex.probe_user_variant), so
the slow variant's loop runs only under compile, as a mod too big to compile would.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

import trainready.device.peak as peak
from trainready.cli.app import app

pytestmark = pytest.mark.slow  # every test reads one compiled flex run of over 20 s

USER_VARIANTS = """
import math

import torch


def _alibi(sign):
    def build(shape, device):
        exponents = torch.arange(1, shape.Hq + 1, dtype=torch.float32) * (sign * 8.0 / shape.Hq)
        slopes = torch.exp2(exponents).to(device)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - q_idx)

        def reference(s, b, h, q, kv):  # ALiBi as the paper writes it: slopes 2^(-8 (h+1) / H)
            paper = torch.exp2(-8.0 * (h + 1).to(s.dtype) / shape.Hq)
            return s + paper * (kv - q).to(s.dtype)

        return {"score_mod": score_mod, "reference": reference}

    return build


def never_finishes_compiling(score, b, h, q_idx, kv_idx):
    # Dynamo unrolls every iteration when it compiles this: compile cannot finish. Called plainly
    # (the planning probe), it is one add.
    for _ in range(10**9 if torch.compiler.is_compiling() else 1):
        score = score + 0.0
    return score


VARIANTS = {
    "alibi_wrong": {"build": _alibi(+1.0), "description": "planted: exponent sign flipped"},
    "alibi_slow": {"score_mod": never_finishes_compiling, "budget_s": 5},
}
"""


@pytest.fixture(scope="module")
def flex_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flex")
    variants = tmp / "user_variants.py"
    variants.write_text(textwrap.dedent(USER_VARIANTS))
    out = tmp / "out"
    real = peak.calibrate_peak
    # The peak only feeds MFU, which flex does not report: a small calibration keeps this quick.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(peak, "calibrate_peak", lambda d, t: real(d, t, start_n=64, max_n=128))
        result = CliRunner().invoke(
            app,
            [
                "run",
                "flex",
                "--device",
                "cpu",
                "--preset",
                "quick",
                "--out",
                str(out),
                "--variants",
                str(variants),
                "--filter",
                "flex/[ac]*",  # alibi, causal, and the user's alibi_wrong and alibi_slow
            ],  # fmt: skip
        )
    assert result.exit_code == 0, result.output
    [run_dir] = [d for d in out.iterdir() if d.is_dir() and d.name != "logs"]
    report = json.loads((run_dir / "report.json").read_text())
    results = {r["case_id"]: r for r in report["runs"][0]["results"]}
    return run_dir, results


def _result(results: dict, variant: str, pass_: str) -> dict:
    return results[f"flex/{variant}/B2/H4-2/S256/D32/{pass_}"]


def test_a_compiled_builtin_variant_passes_with_its_numbers(flex_run):
    _, results = flex_run
    assert len(results) == 8
    r = _result(results, "alibi", "fwd")
    assert r["status"] == "pass", r["diagnostics"]
    m = r["metrics"]
    assert m["compile_s"] > 0 and m["run_ms"] > 0
    assert m["tflops"] == pytest.approx(m["tflops_dense"])  # ALiBi masks nothing
    assert r["diagnostics"]["numerics"]["out"]["ok"]
    # timed on one core (CPU_CORES), though this run of flex alone had both to itself
    assert r["diagnostics"]["cpu_threads"] == 1


def test_a_masked_variant_counts_only_the_blocks_its_mask_keeps(flex_run):
    _, results = flex_run
    r = _result(results, "causal", "fwd")
    assert r["status"] == "pass", r["diagnostics"]
    m = r["metrics"]
    share = m["block_share"]
    assert 0 < share < 1
    assert m["gflop"] == pytest.approx(share * m["gflop_dense"])
    assert m["tflops"] == pytest.approx(share * m["tflops_dense"])
    assert m["tflops"] < m["tflops_dense"]


def test_the_planted_wrong_score_mod_is_fail_numerics_naming_the_tensor(flex_run):
    _, results = flex_run
    r = _result(results, "alibi_wrong", "fwd")
    assert r["status"] == "fail_numerics" and r["phase"] == "check"
    assert r["diagnostics"]["worst"] == "out"
    assert r["diagnostics"]["error"].startswith("out: rmse ")


def test_a_compile_past_its_budget_is_a_timeout_in_phase_compile(flex_run):
    _, results = flex_run
    r = _result(results, "alibi_slow", "fwd")
    assert (r["status"], r["phase"]) == ("timeout", "compile")


def test_the_cpu_backward_is_unsupported_with_pytorchs_message(flex_run):
    _, results = flex_run
    for variant in ("alibi", "causal", "alibi_wrong"):
        r = _result(results, variant, "fwd_bwd")
        assert r["status"] == "unsupported"
        assert "does not support backward on CPU" in r["diagnostics"]["reason"]


def test_reports_carry_the_pass_table_and_the_heat_map(flex_run):
    run_dir, _ = flex_run
    md = (run_dir / "report.md").read_text()
    assert "| alibi | 1/1 | 0/1 | 1 unsupported |" in md
    assert "| causal | 1/1 | 0/1 | 1 unsupported |" in md
    assert "1 timeout (compile)" in md
    assert "timed on 1 CPU thread(s) per case" in md  # what run_ms and TFLOP/s were timed on
    html = (run_dir / "report.html").read_text()
    assert 'aria-label="FlexAttention status over the grid"' in html


def test_the_processs_first_compile_is_marked_as_paying_the_compilers_start_up(flex_run):
    """The first compile of a worker process includes inductor's one-time start-up, so its
    compile_s is not the variant's alone: the case says so and the reports show it beside it."""
    run_dir, results = flex_run
    compiled = sorted(
        (r for r in results.values() if "first_compile_in_process" in r["diagnostics"]),
        key=lambda r: r["started_at"],
    )
    assert len(compiled) == 3  # alibi, causal, alibi_wrong (alibi_slow timed out in compile)
    assert compiled[0]["diagnostics"]["first_compile_in_process"] is True
    # One worker; a replacement after alibi_slow's timeout starts afresh: at most one more first.
    assert [r["diagnostics"]["first_compile_in_process"] for r in compiled].count(False) >= 1
    md = (run_dir / "report.md").read_text()
    assert "its process's first compile: includes the compiler's one-time start-up" in md
