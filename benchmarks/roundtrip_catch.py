"""Host round-trips inside native kernels: does the dispatch watch's nesting rule name a kernel of
the device's own that does its work on the host, and pass the ones that do not?

On emu (`trainready.testing.emu`, imported here: run this in its own process), a small training
step (`tests/support/roundtrip_kernel.step`) under the ops probe, once per row:

- planted faults (`tests/support/roundtrip_kernel.FAULTS`): kernels registered as emu's own for
  aten::mul.Tensor or aten::bmm that copy to the host, compute there and copy back. Each must be
  named, "host round-trip inside aten::X", and nothing else (caught);
- correct rows: emu as shipped (its native kernels, and its boxed CPU fallback, counted as
  fallbacks), the region's own copies to the host and back at top level, and a native mul that
  computes on the device (`mul_on_device`). Nothing may be named (passed).

`values right` says whether the planted kernel computes the right numbers (against the CPU): the
faults do, so no numerics check would see them. With `--baseline-dispatch FILE` (an earlier
`trainready/device/dispatch.py`, e.g. `git show HEAD:trainready/device/dispatch.py`), the step is
also timed plain, under that file's DispatchWatch and under this tree's: the watch's cost per aten
call, before and after.

    python -m benchmarks.roundtrip_catch [--out benchmarks/results/roundtrip-catch.md]
        [--baseline-dispatch FILE] [--rounds 7]

Prints the table; exits 1 on a miss or a false alarm.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

warnings.filterwarnings("ignore", message=r"The operator .* on the emu backend")
warnings.filterwarnings("ignore", message=r".*was already registered.*")

import trainready.testing.emu  # noqa: E402,F401 - registers the device
from tests.support import roundtrip_kernel as rk  # noqa: E402
from trainready.device.dispatch import DispatchWatch, roundtrip_label  # noqa: E402
from trainready.probes.ops import OpsProbe  # noqa: E402

DEVICE = "emu"
OPS = {"mul.Tensor": "aten::mul.Tensor", "bmm": "aten::bmm"}


@dataclass
class Row:
    name: str
    expect: str  # "fault" or "correct"
    planted: str | None  # the op a fault must be named for
    named: list[str]
    fallback_ops: int
    region_copies: int
    values_right: bool | None
    source: str

    @property
    def verdict(self) -> str:
        if self.expect == "fault":
            return "caught" if self.named == [roundtrip_label(self.planted)] else "MISSED"
        return "passed" if not self.named else "FALSE ALARM"


def _values_right(op: str) -> bool:
    """Whether the planted kernel's output matches the CPU's, on broadcast operands."""
    g = torch.Generator().manual_seed(0)
    if op == "bmm":
        a, b = torch.randn(2, 3, 4, generator=g), torch.randn(2, 4, 5, generator=g)
        return torch.allclose(torch.bmm(a.to(DEVICE), b.to(DEVICE)).cpu(), torch.bmm(a, b))
    a, b = torch.randn(4, 3, generator=g), torch.randn(3, generator=g)
    return torch.allclose((a.to(DEVICE) * b.to(DEVICE)).cpu(), a * b)


def _region_copies() -> None:
    """The region's own copies, at top level: to the host, back, a scalar read."""
    x = torch.ones(3, device=DEVICE)
    x.cpu().to(DEVICE).sum().item()


def judge(name: str, expect: str, kind: str | None = None, extra: Callable | None = None) -> Row:
    """One training step under the ops probe, with `kind`'s kernel planted (None: emu as is)."""
    lib = rk.plant(kind) if kind else None
    try:
        step = rk.step(DEVICE)
        with OpsProbe(DEVICE) as probe:
            step()
            if extra:
                extra()
        op = {**rk.FAULTS, **rk.CORRECT}.get(kind or "")
        right = _values_right(op) if op else None
    finally:
        if lib is not None:
            rk.remove(lib)
    r = probe.report
    return Row(
        name,
        expect,
        OPS.get(rk.FAULTS.get(kind or "", "")),
        sorted(roundtrip_label(op) for op in r.dispatch_roundtrips),
        len(r.dispatch_fallbacks),
        sum(r.host_copies.values()),
        right,
        r.roundtrip_source,
    )


def rows() -> list[Row]:
    out = [
        judge("emu as shipped (native kernels, CPU fallback)", "correct"),
        judge("the region's own .cpu() / .to(emu) / .item()", "correct", extra=_region_copies),
        judge("mul_on_device: mul through emu's native bmm", "correct", "mul_on_device"),
    ]
    faults = {
        "mul_via_host": "mul_via_host: (a.cpu() * b.cpu()).to(a.device)",
        "mul_copied_back": "mul_copied_back: empty(device).copy_(a.cpu() * b)",
        "bmm_via_host": "bmm_via_host: emu's native bmm replaced by a host bmm",
    }
    return out + [judge(text, "fault", kind) for kind, text in faults.items()]


# -- the watch's cost ------------------------------------------------------------------------------
def _load_watch(path: Path) -> type:
    spec = importlib.util.spec_from_file_location("baseline_dispatch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DispatchWatch


def _timed(step: Callable, watch: type | None, steps: int) -> float:
    """CPU seconds per step (every thread of this process: the backward runs on emu's device
    thread), which a loaded machine disturbs less than wall time."""
    t0 = time.process_time()
    for _ in range(steps):
        if watch is None:
            step()
        else:
            with watch(DEVICE):
                step()
    return (time.process_time() - t0) / steps


def overhead(baseline: Path, rounds: int, steps: int = 5) -> dict[str, float]:
    """CPU seconds per training step, the least and the median over interleaved rounds: plain,
    under the baseline watch and under this tree's; and the aten calls one step makes on the
    device."""
    watches = {"plain": None, "baseline": _load_watch(baseline), "this tree": DispatchWatch}
    step = rk.step(DEVICE)
    step()  # the optimizer's state, built once
    times: dict[str, list[float]] = {k: [] for k in watches}
    for _ in range(rounds):
        for key, watch in watches.items():
            times[key].append(_timed(step, watch, steps))
    with DispatchWatch(DEVICE) as w:
        step()
    out = {k: min(v) for k, v in times.items()}
    out |= {f"{k} median": statistics.median(v) for k, v in times.items()}
    out["calls"] = float(sum(w.kinds.values()))
    return out


# -- the report ------------------------------------------------------------------------------------
def table(found: list[Row]) -> str:
    head = (
        "| row | expect | named | fallback ops (counted apart) | region's own copies (probe) "
        "| values right | verdict |\n|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r.name} | {r.expect} | {', '.join(r.named) or '—'} | {r.fallback_ops} | "
        f"{r.region_copies} | {'—' if r.values_right is None else r.values_right} | {r.verdict} |"
        for r in found
    ]
    return head + "\n".join(lines) + "\n"


def overhead_text(cost: dict[str, float], baseline: Path) -> str:
    calls = cost["calls"]

    def cell(key: str) -> str:
        added = (cost[key] - cost["plain"]) / calls * 1e6
        per = f"; {added:.1f} µs per aten call over plain" if key != "plain" else ""
        return f"{cost[key] * 1e3:.2f} ms (median {cost[key + ' median'] * 1e3:.2f} ms){per}"

    return (
        f"\nThe watch's cost on one training step ({calls:.0f} aten calls on emu), CPU time per "
        f"step, the least over the rounds (the median beside it): plain {cell('plain')}; under "
        f"the DispatchWatch of {baseline.name} {cell('baseline')}; under this tree's "
        f"{cell('this tree')}.\n"
    )


def markdown(found: list[Row], command: str, extra: str) -> str:
    caught = sum(r.verdict == "caught" for r in found)
    passed = sum(r.verdict == "passed" for r in found)
    faults = sum(r.expect == "fault" for r in found)
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return (
        "# Host round-trips inside native kernels: the catch table\n\n"
        f"`{command}` on {datetime.date.today()}, tree of {sha or '?'} (uncommitted changes "
        f"included), torch {torch.__version__}, emu, {platform.machine()} with {os.cpu_count()} "
        f"cores at load average {os.getloadavg()[0]:.1f}. Generated; do not edit by hand.\n\n"
        f"Planted faults caught: {caught} of {faults}; correct rows passed: {passed} of "
        f"{len(found) - faults}. What measured it: {found[0].source}.\n\n" + table(found) + extra
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--baseline-dispatch", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    found = rows()
    extra = ""
    if args.baseline_dispatch:
        extra = overhead_text(overhead(args.baseline_dispatch, args.rounds), args.baseline_dispatch)
    command = "python -m benchmarks.roundtrip_catch " + " ".join(argv or sys.argv[1:])
    text = markdown(found, command.strip(), extra)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(r.verdict in ("caught", "passed") for r in found) else 1


if __name__ == "__main__":
    sys.exit(main())
