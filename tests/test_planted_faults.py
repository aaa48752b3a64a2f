"""Planted device faults (`trainready.testing.faults`) on the emu device: the device path of the
numerics rule, under test. A wrong kernel must end `fail_numerics` naming the tensor it shows in;
clean emu and a correct-but-different kernel (split-K GEMM) must pass.

Only what benchmarks/results/planted-faults.md shows caught is asserted here (the fp32 rows, the
GEMM stride bug in bf16); the rest of the table (softmax_scale_2pct is missed in bf16, the norm
backward is caught in bf16 by a thin margin) is the benchmark's to report, not CI's to pin.

Emu is never imported in the pytest process (it would make `auto` resolve to emu in every later
test): the probes run in one spawned process (`benchmarks.planted_faults.in_emu_process`: plant,
run the case, remove, next), and the end-to-end test runs the CLI in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks.planted_faults import CLEAN, MATMUL_CASE, Probe, Row, in_emu_process
from tests.clirun import ROOT
from trainready.testing import faults

BASE = "synthetic/base/eager"
LAYERNORM = "synthetic/norm=layernorm/eager"

# (probe, where the failure must show: the start of the tensor's name or its suffix)
CAUGHT: list[tuple[Probe, str]] = [
    (Probe("softmax_scale_2pct", "fp32", "parity", f"{BASE}/fp32"), "logits"),
    (Probe("gemm_contiguous_only", "fp32", "parity", f"{BASE}/fp32"), ""),
    (Probe("gemm_contiguous_only", "bf16", "parity", f"{BASE}/bf16"), ""),
    # A backward-only bug: the forward's loss and logits are right, a gradient is named.
    (Probe("norm_backward_1pct", "fp32", "parity", f"{LAYERNORM}/fp32"), ".grad"),
    (Probe("attention_mask_dropped", "fp32", "parity", f"{BASE}/fp32"), ""),
    # An optimizer bug: the gradients are right, the parameters after the step are not.
    (Probe("adamw_bias_correction", "bf16", "parity", f"{BASE}/bf16"), ".after_step"),
    *[
        (Probe("gemm_contiguous_only", dtype, "matmul", f"{MATMUL_CASE}/{p}"), "output")
        for dtype in ("fp32", "bf16")
        for p in ("fwd", "dW")
    ],
]
PASSING: list[Probe] = [
    Probe(CLEAN, "fp32", "parity", f"{BASE}/fp32"),
    Probe(CLEAN, "bf16", "parity", f"{BASE}/bf16"),
    Probe("split_k_gemm", "fp32", "parity", f"{BASE}/fp32"),
    Probe("split_k_gemm", "bf16", "parity", f"{BASE}/bf16"),
    *[
        Probe("split_k_gemm", dtype, "matmul", f"{MATMUL_CASE}/{p}")
        for dtype in ("fp32", "bf16")
        for p in ("fwd", "dW")
    ],
    # After every fault above was planted and removed, clean emu is clean again.
    Probe(CLEAN, "bf16", "matmul", f"{MATMUL_CASE}/dW"),
]


def _id(probe: Probe) -> str:
    where = probe.case.split("/")[1] if probe.suite == "parity" else probe.case.rsplit("/", 1)[1]
    return f"{probe.fault}-{probe.suite}-{where}-{probe.dtype}"


@pytest.fixture(scope="module")
def rows() -> dict[Probe, Row]:
    """Every probe, in one emu process, in this order: clean first, faults, clean last."""
    probes = PASSING[:2] + [p for p, _ in CAUGHT] + PASSING[2:]
    return dict(zip(probes, in_emu_process(probes), strict=True))


@pytest.mark.parametrize(("probe", "shows_in"), CAUGHT, ids=[_id(p) for p, _ in CAUGHT])
def test_a_wrong_kernel_ends_fail_numerics_naming_the_tensor(rows, probe, shows_in):
    row = rows[probe]
    assert row.bug_calls > 0, "the planted bug never ran in this case"
    assert (row.status, row.verdict) == ("fail_numerics", "caught"), row
    assert row.tensor.startswith(shows_in) or row.tensor.endswith(shows_in), row.tensor
    assert row.ratio > 1.0
    if probe.suite == "parity":
        assert row.error.startswith(row.tensor + " "), row.error  # the error names it first


@pytest.mark.parametrize("probe", PASSING, ids=[_id(p) for p in PASSING])
def test_clean_and_correct_but_different_kernels_pass(rows, probe):
    row = rows[probe]
    assert (row.status, row.verdict) == ("pass", "ok"), row
    if probe.fault != CLEAN:
        assert row.bug_calls > 0, "the planted kernel never ran in this case"


def test_cli_run_with_a_fault_planted_from_the_environment(tmp_path):
    """TRAINREADY_FAULTS plants the fault when `--import trainready.testing.faults` is imported,
    in the CLI process and in the case worker: the case fails naming the logits, and the report's
    host-fallback table lists emu's fallback ops -- but not the planted `_softmax`, whose kernel
    is now the device's own."""
    env = {**os.environ, faults.ENV_VAR: "softmax_scale_2pct"}
    env.pop("TRAINREADY_IMPORT", None)
    out = tmp_path / "runs"
    trainready = [sys.executable, "-m", "trainready"]
    run = subprocess.run(
        [
            *trainready,
            "run",
            "parity",
            "--device",
            "emu",
            "--import",
            "trainready.testing.emu",
            "--import",
            "trainready.testing.faults",
            "--filter",
            "parity/synthetic/base/eager/fp32",
            "--set",
            "zoo=synthetic",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-2000:]

    def report(fmt: str) -> str:
        done = subprocess.run(
            [*trainready, "report", str(out), "-f", fmt],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    doc = json.loads(report("json"))["runs"][0]
    (result,) = doc["results"]
    assert (result["case_id"], result["status"]) == (
        "parity/synthetic/base/eager/fp32",
        "fail_numerics",
    )
    assert result["diagnostics"]["error"].startswith("logits rmse ratio ")
    assert doc["run"]["env"]["env_vars"].get(faults.ENV_VAR) == "softmax_scale_2pct"

    table = [line for line in report("md").splitlines() if line.startswith("| fallback (")]
    fallback_ops = {line.split("|")[2].strip() for line in table}
    assert {"aten::mm.out", "aten::_softmax_backward_data.out"} <= fallback_ops
    assert "aten::_softmax.out" not in fallback_ops


def test_an_unknown_fault_is_an_error_naming_the_valid_ones(monkeypatch):
    with pytest.raises(ValueError, match="unknown fault 'nope'; valid: softmax_scale_2pct"):
        faults.plant("nope")
    monkeypatch.setenv(faults.ENV_VAR, " gemm_contiguous_only,, nope ")
    assert faults.requested() == ["gemm_contiguous_only", "nope"]
    with pytest.raises(ValueError, match="unknown fault 'nope'"):
        faults.plant_from_env()  # checked before anything is planted
    assert not faults.PLANTED


def test_two_faults_on_one_op_cannot_be_planted_together():
    """(Registering a PrivateUse1 kernel needs no device: this process has none, and the kernel
    is gone again before the test ends.)"""
    lib = faults.plant("gemm_contiguous_only")
    try:
        with pytest.raises(ValueError, match="which fault 'gemm_contiguous_only' has planted"):
            faults.plant("split_k_gemm")
    finally:
        faults.remove(lib)
    faults.remove(faults.plant("split_k_gemm"))  # free again once removed


def test_every_fault_says_what_it_imitates_and_where_it_runs():
    from trainready.models.synthetic import variants

    names = {name for name, _ in variants("quick")}
    for fault in faults.FAULTS.values():
        assert fault.expect in ("catch", "pass") and fault.imitates and fault.kernels
        assert fault.parity_case in names
        assert f"`{fault.name}`" in faults.__doc__
