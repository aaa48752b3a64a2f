"""Host work hidden in a kernel registered as emu's own (`tests/support/roundtrip_kernel.py`): the
dispatch watch's nesting rule names it, "host round-trip inside aten::X", apart from the CPU
fallbacks, and passes emu's own kernels, the region's own copies, the fallback path and a kernel
that stays on the device. Through the benchmark that writes the catch table
(`benchmarks/roundtrip_catch.py`) and through `trainready run parity`, report and verdict.

emu is imported only in the processes these tests start, never in pytest's (see
tests/e2e/test_emu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths

pytestmark = pytest.mark.slow
TIMEOUT_S = 900  # includes emu's first build on a clean machine
IMPORT = ("--import", "trainready.testing.emu", "--import", "tests.support.roundtrip_kernel")
MUL = "host round-trip inside aten::mul.Tensor"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        cwd=paths.ROOT,
        env={**os.environ, **(env or {})},
    )


def test_the_catch_table_catches_every_planted_kernel_and_passes_the_rest(tmp_path):
    out = tmp_path / "catch.md"
    p = _run("-m", "benchmarks.roundtrip_catch", "--out", str(out))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    text = out.read_text()
    assert "Planted faults caught: 3 of 3; correct rows passed: 3 of 3" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if "| " in line}
    assert MUL in rows["mul_via_host: (a.cpu() * b.cpu()).to(a.device)"]
    assert (
        "host round-trip inside aten::bmm"
        in rows["bmm_via_host: emu's native bmm replaced by a host bmm"]
    )
    # emu's native kernels, its CPU fallback (counted apart) and the region's own copies: none.
    shipped = rows["emu as shipped (native kernels, CPU fallback)"].split("|")
    assert shipped[3].strip() == "—" and int(shipped[4]) > 0
    own = rows["the region's own .cpu() / .to(emu) / .item()"].split("|")
    assert own[3].strip() == "—" and int(own[5]) > 0  # the probe saw the copies, as the region's
    assert rows["mul_on_device: mul through emu's native bmm"].rstrip(" |").endswith("passed")


def _parity(out: Path, kernel: str | None) -> dict:
    env = {"TRAINREADY_ROUNDTRIP_KERNEL": kernel} if kernel else {"TRAINREADY_ROUNDTRIP_KERNEL": ""}
    p = _run(
        *("-m", "trainready", "run", "parity", "--device", "emu", *IMPORT),
        *("--set", "zoo=none", "--set", "models=tests.support.roundtrip_kernel:gated_lm"),
        *("--set", "steps=2", "--compile-backend", "aot_eager", "--out", str(out)),
        env=env,
    )
    assert p.returncode in (0, 1), p.stderr[-3000:]
    shown = _run("-m", "trainready", "report", str(out), "--format", "json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    return json.loads(shown.stdout)["runs"][0]


def _host_line(run: dict) -> dict:
    return next(d for d in run["verdict"]["dimensions"] if d["key"] == "host_fallbacks")


def _headline(run: dict, label: str) -> dict:
    return next(h for h in run["headlines"] if h["label"] == label)


def test_parity_names_the_planted_kernel_in_its_record_headline_and_verdict(tmp_path):
    run = _parity(tmp_path, "mul_via_host")
    eager = next(r for r in run["results"] if r["params"]["mode"] == "eager")
    ops = eager["diagnostics"]["ops"]
    assert set(ops["dispatch_roundtrips"]) == {"aten::mul.Tensor"}
    assert ops["roundtrip_source"].startswith("dispatcher nesting, ")
    assert "aten::mul.Tensor" not in ops["dispatch_fallbacks"]  # counted apart
    stat = _headline(run, "host round-trips inside kernels")
    assert stat["value"] == 1 and MUL in stat["note"]
    assert "not measured in 1 case: no ops record" in stat["note"]  # the compiled case
    line = _host_line(run)
    assert MUL in line["reason"] and line["status"] != "ready"


def test_parity_on_emu_as_shipped_names_no_round_trip(tmp_path):
    run = _parity(tmp_path, None)
    eager = next(r for r in run["results"] if r["params"]["mode"] == "eager")
    assert eager["diagnostics"]["ops"]["dispatch_roundtrips"] == {}
    assert eager["diagnostics"]["ops"]["dispatch_kinds"]["kernel"] > 0  # native kernels ran
    assert _headline(run, "host round-trips inside kernels")["value"] == 0
    assert "no host round-trip inside the device's kernels" in _host_line(run)["reason"]
