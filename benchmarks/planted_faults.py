"""Planted faults: does the numerics rule catch wrong models, optimizers and kernels, and pass
right ones?

Three columns, each the parity suite judging a synthetic case as it judges any run:

- `cpu`: eager on the CPU, the CPU itself under test; model-level faults act below float64
  (`where="lowp"`), so the float64 reference is right and the CPU's low-precision run is not.
- `emu`: the device path on emu (`trainready.testing.emu`, eager); model-level faults act on
  emu's tensors only (`where="device"`), and the kernel faults of `trainready.testing.faults`
  replace emu's kernels (plus, for the GEMM faults, the matmul suite's spot-check).
- `compiled`: compiled on the CPU (inductor by default, `--compile-backend`); model-level faults
  act only in what torch.compile traces (`where="compile"`): a miscompile.
- `flex`: the flex suite on the CPU (compiled flex_attention, forward: the CPU has no flex
  backward), each fault a variant whose mods are wrong while its reference is right
  (`trainready.testing.flex_faults`, loaded as a `--variants` file), beside the built-ins.
- `dist`: the dist suite on gloo ranks of this machine, faults planted on the rank side of the
  reductions the numerics rule judges (`trainready.testing.dist_faults`: all_reduce AVG on 3
  ranks, DDP's comm hook, FSDP2's reduce-scatter).
- `ops`: the ops suite on emu, one op at a time: each kernel fault that names op_db entries
  (`Fault.ops`) planted in a fresh process that runs those entries' cases (the quick preset:
  fp32 and bf16 forward and backward, fp64 forward; `faults.ops_cases`), and a clean process
  that runs every one of those cases with nothing planted. One row per fault and dtype: caught
  when one of its cases fails and names the planted kernel among the aten ops it ran.

Each fault is planted in turn, clean runs and correct-but-different code (another attention
kernel, a split-K GEMM, another reduction order, AdamW written out) beside them. A wrong model
must end `fail_numerics` (caught; `pass` is missed); the goal is every fault caught in fp32, and
in bf16 every fault of 2% or more (`Fault.required`) except where it moves what is judged by
less (`Fault.weak_on`: the synthetic models a softmax scale barely moves, and in the ops column
op_db's peaked softmax samples); a clean or correct-but-different run must
pass (`fail_numerics` is a false alarm). The emu column runs in one spawned process that imports
emu (plant, run, remove, next), the CPU columns in another, so this process never takes
PrivateUse1.

    python benchmarks/planted_faults.py [--out benchmarks/results/planted-faults.md]
        [--columns cpu,emu,compiled,flex,dist,ops] [--faults a,b] [--dtypes fp32,bf16]
        [--compile-backend inductor] [--report-only]

Prints the catch table and exits 1 on a required miss, a false alarm, an error or a planted bug
that never acted -- unless `--report-only`. `--out` writes the table as Markdown with the
command, date and versions, and a note on every miss and thin catch; the ops column is a section
of its own ("## The ops suite on emu"), which a run of the ops column alone replaces in the file
(or appends), leaving the rest as it was. `--dtypes` defaults to fp32,bf16, and for the ops
column to fp32,bf16,fp64 (fp64 is the ops column's only).

Columns of the table: `worst tensor` is the tensor the error names first (for a pass, the one
closest to failing) with its rmse over what the rule allows and the rule (which noise it was
judged against); `curve` is the loss curve's largest deviation over its tolerance; `bug calls`
how often the planted bug acted (for a compiled case: the traces that hold it; flex: the builds
of the planted mods for the kernel; dist: the planted reductions, over every rank).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import datetime
import math
import multiprocessing
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python benchmarks/planted_faults.py` from anywhere
    sys.path.insert(0, str(REPO))

from trainready.testing.dist_faults import DIST_FAULTS  # noqa: E402 - needs the path above
from trainready.testing.faults import FAULTS, MODEL_FAULTS  # noqa: E402
from trainready.testing.flex_faults import FLEX_FAULTS  # noqa: E402

DTYPES = ("fp32", "bf16")
OPS_DTYPES = ("fp32", "bf16", "fp64")  # the ops suite's quick preset: fp64 forward too
COLUMNS = ("cpu", "emu", "compiled", "flex", "dist", "ops")
COLUMN_TEXT = {
    "cpu": "CPU eager (model faults below float64)",
    "emu": "emu, the device path (device-only model faults, kernel faults)",
    "compiled": "CPU compiled (model faults in what torch.compile traces)",
    "flex": "the flex suite, CPU compiled forward (faulty mods, right references)",
    "dist": "the dist suite on CPU gloo ranks (faulty reductions on the rank side)",
    "ops": "the ops suite on emu (op_db entries one op at a time, kernel faults)",
}
# The column a fault of each table belongs in (the parity/matmul faults: cpu, emu, compiled).
SUITE_COLUMN = {"flex": "flex", "dist": "dist"}
WHERE = {"cpu": "lowp", "emu": "device", "compiled": "compile"}
CLEAN = "clean"
DEFAULT_BACKEND = "inductor"
# The matmul suite's router GEMM of Qwen3-235B-A22B (N=128, K=4096) at M=128: small, and its fwd
# (W.t()) and dW (grad_y.t()) operands are transposed views, as in every F.linear.
MATMUL_CASE = "Qwen3-235B-A22B/router/M128"
MATMUL_PASSES = ("fwd", "dW")
PARITY_BUDGET_S = 600.0
MATMUL_BUDGET_S = 2.0  # a quarter of it times the GEMM; the spot-check is what is judged here
THIN_MARGIN = 2.0  # a catch under this many times the allowance gets a note
WORKER_TIMEOUT_S = 3600.0  # a cold build of emu's C++ library takes about a minute


FLEX_SHAPE = "B2/H4-2/S256/D32/fwd"  # the quick preset's shape, forward


def fault_spec(name: str) -> Any:
    """The kernel, model-level, flex or dist fault of that name."""
    return FAULTS.get(name) or MODEL_FAULTS.get(name) or FLEX_FAULTS.get(name) or DIST_FAULTS[name]


def fault_column(name: str) -> str | None:
    """The one column a flex or dist fault runs in; None for the parity/matmul faults."""
    return "flex" if name in FLEX_FAULTS else "dist" if name in DIST_FAULTS else None


@dataclass(frozen=True)
class Probe:
    """One run: `fault` planted (or CLEAN), a case of `suite` in `dtype`, in `column`."""

    fault: str
    dtype: str
    suite: str  # "parity" | "matmul" | "flex" | "dist"
    case: str  # the case name within the suite
    column: str = "emu"

    @property
    def kind(self) -> str:
        if self.fault == CLEAN:
            return "clean"
        if self.fault in FLEX_FAULTS:
            return "mod"
        if self.fault in DIST_FAULTS:
            return "reduction"
        return "kernel" if self.fault in FAULTS else "model"

    @property
    def expect(self) -> str:
        return "pass" if self.fault == CLEAN else fault_spec(self.fault).expect

    @property
    def required(self) -> bool:
        if self.fault == CLEAN:
            return False
        spec = fault_spec(self.fault)
        weak = any(_parity_variant(self.case) == v for v in getattr(spec, "weak_on", ()))
        return spec.required(self.dtype) and (self.dtype == "fp32" or not weak)


@dataclass
class Row:
    fault: str
    dtype: str
    suite: str
    case: str
    column: str
    kind: str
    expect: str
    required: bool
    status: str
    tensor: str  # the worst tensor: the one the error names first when the case failed
    ratio: float | None
    rule: str
    curve: float | None  # the loss curve's largest deviation over its tolerance
    rel_error: float | None  # the worst tensor's rmse over its rms
    rel_noise: float | None  # the noise it was judged against, over its rms
    bug_calls: int
    seconds: float
    error: str

    @property
    def verdict(self) -> str:
        if self.fault != CLEAN and self.bug_calls == 0:
            return "not hit"
        if self.status not in ("pass", "fail_numerics"):
            return "error"
        if self.expect == "catch":
            if self.status == "fail_numerics":
                return "caught"
            return "missed" if self.required else "missed (under the goal)"
        return "ok" if self.status == "pass" else "false alarm"

    @property
    def bad(self) -> bool:
        return self.verdict not in ("caught", "ok", "missed (under the goal)")


def _parity_case(column: str, variant: str, dtype: str) -> str:
    """A parity case of a synthetic variant, or of a factory model (`custom/<factory>`)."""
    mode = "compile" if column == "compiled" else "eager"
    model = variant if variant.startswith("custom/") else f"synthetic/{variant}"
    return f"{model}/{mode}/{dtype}"


def _parity_variant(case: str) -> str:
    """The variant `_parity_case` made `case` from."""
    model = case.rsplit("/", 2)[0]
    return model if model.startswith("custom/") else model.removeprefix("synthetic/")


def variants_of(spec: Any) -> list[str]:
    """The synthetic variants a fault runs on: its parity case and those it is also run on (none
    for a kernel no synthetic model runs: the ops column alone runs it)."""
    return [v for v in (spec.parity_case, *getattr(spec, "also_on", ())) if v is not None]


def _suite_probes(column: str, faults: list[str], dtype: str) -> list[Probe]:
    """The flex or dist column: clean runs of every case its faults use, then each fault."""
    names = [f for f in faults if fault_column(f) == column]
    if column == "flex":
        flex = [f"{FLEX_FAULTS[f].clean}/{FLEX_SHAPE}" for f in names]
        clean = [(CLEAN, c) for c in dict.fromkeys(flex)]
        return [
            Probe(f, dtype, "flex", c, column)
            for f, c in clean + [(f, f"{f}/{FLEX_SHAPE}") for f in names]
        ]
    cases = {f: DIST_FAULTS[f].cases.get(dtype, ()) for f in names}
    clean = dict.fromkeys(c for f in names for c in cases[f])
    return [Probe(CLEAN, dtype, "dist", c, column) for c in clean] + [
        Probe(f, dtype, "dist", c, column) for f in names for c in cases[f]
    ]


def plan(
    faults: list[str], dtypes: list[str], columns: list[str] | tuple[str, ...] = COLUMNS
) -> list[Probe]:
    """Per dtype and column: clean runs on every case the faults use, then each fault that
    belongs in the column (kernel faults on emu only; flex and dist faults in their own) on its
    cases."""
    probes: list[Probe] = []
    for dtype in dtypes:
        for column in columns:
            if column == "ops":  # not probes: `ops_in_processes`
                continue
            if column in SUITE_COLUMN:
                probes += _suite_probes(column, faults, dtype)
                continue
            names = [f for f in faults if fault_column(f) is None]
            names = [f for f in names if column == "emu" or f not in FAULTS]
            variants = list(dict.fromkeys(v for f in names for v in variants_of(fault_spec(f))))
            gemm = column == "emu" and any(getattr(FAULTS.get(f), "matmul", False) for f in names)
            for name in [CLEAN, *names]:
                fault = None if name == CLEAN else fault_spec(name)
                for variant in variants if fault is None else variants_of(fault):
                    case = _parity_case(column, variant, dtype)
                    probes.append(Probe(name, dtype, "parity", case, column))
                if (fault is None and gemm) or getattr(fault, "matmul", False):
                    probes += [
                        Probe(name, dtype, "matmul", f"{MATMUL_CASE}/{p}", column)
                        for p in MATMUL_PASSES
                    ]
    return probes


# --- the worker processes -----------------------------------------------------------------------


def _emu() -> None:
    import warnings

    warnings.filterwarnings("ignore", message=r"The operator .* on the emu backend")
    import trainready.testing.emu  # noqa: F401 - registers the device


def _options(probe: Probe) -> dict[str, Any]:
    """The --set options a flex or dist probe's case runs with (its fault among them)."""
    if probe.suite == "flex":
        from trainready.testing.flex_faults import PATH

        return {"variants": PATH}
    from trainready.testing.dist_faults import OPTION, nproc_for

    fault = {OPTION: probe.fault} if probe.fault != CLEAN else {}
    return {"nproc": nproc_for(probe.case), **fault}


def _case(probe: Probe, backend: str):
    from trainready.core.config import RunConfig
    from trainready.suites.matmul import suite as matmul
    from trainready.suites.parity import suite as parity

    device = "emu" if probe.column == "emu" else "cpu"
    if probe.suite in SUITE_COLUMN:
        from trainready.suites.dist import suite as dist
        from trainready.suites.flex import suite as flex
        from trainready.testing import dist_faults

        suite, listed = (flex, flex) if probe.suite == "flex" else (dist_faults, dist)
        options = _options(probe)
        cfg = RunConfig(
            suites=[listed.NAME], device=device, preset="quick", options=options, dtype=probe.dtype
        )
        case = next(c for c in listed.cases(cfg) if c.name == probe.case)
        return suite, case, PARITY_BUDGET_S, device, options
    if probe.suite == "parity":
        suite, preset, budget = parity, "quick", PARITY_BUDGET_S
        mode = "compile" if probe.column == "compiled" else "eager"
        options = {"zoo": "synthetic", "modes": mode, "compile_backend": backend}
        if probe.case.startswith("custom/"):  # a factory model: custom/<module:function>/...
            options["models"] = [_parity_variant(probe.case).removeprefix("custom/")]
    else:
        suite, preset, budget, options = matmul, "standard", MATMUL_BUDGET_S, {}
    cfg = RunConfig(
        suites=[suite.NAME], device=device, preset=preset, options=options, dtype=probe.dtype
    )
    return suite, next(c for c in suite.cases(cfg) if c.name == probe.case), budget, device, {}


def _relative(entry: dict[str, Any]) -> tuple[float | None, float | None]:
    """(rmse, noise) of a judged tensor over the rms of its reference."""
    scale = entry.get("ref_rms")
    if not scale:
        return None, None
    noise = entry.get("noise_rmse")
    return entry.get("rmse", 0.0) / scale, None if noise is None else noise / scale


def _ratio(entry: dict[str, Any]) -> float | None:
    return entry["rmse"] / entry["threshold"] if entry.get("threshold") else None


def _worst_rank(diagnostics: dict[str, Any]) -> tuple[str, float | None, str, dict]:
    """The dist suite's worst judged tensor over every rank (a collective's: its output)."""
    judged = []
    for rank in diagnostics.get("ranks", {}).values():
        entry = rank.get("check") or rank.get("worst_verdict") or {}
        if entry.get("threshold"):
            judged.append((_ratio(entry), rank.get("worst") or "output", entry))
    if not judged:
        return "", None, "", {}
    ratio, tensor, entry = max(judged, key=lambda j: j[0])
    return tensor, ratio, entry.get("rule", ""), entry


def _worst(suite: str, diagnostics: dict[str, Any]) -> tuple[str, float | None, str, dict]:
    """(tensor, ratio, rule, its errors) of the worst compared tensor as the suite reported
    it."""
    if suite == "dist":
        return _worst_rank(diagnostics)
    if suite == "flex":
        worst = diagnostics.get("worst")
        entry = diagnostics.get("numerics", {}).get(worst, {}) if worst else {}
        return (
            (worst or "", _ratio(entry), entry.get("rule", ""), entry)
            if entry
            else ("", None, "", {})
        )
    if suite == "parity":
        worst = diagnostics.get("worst") or []
        if not worst:
            return "", None, "", {}
        w = worst[0]
        curve = diagnostics.get("curve", {})
        routing = diagnostics.get("routing") or {}
        if w["ok"] and routing.get("beyond_noise"):  # failed on its top-k decisions alone
            return "top-k routing", routing["worst_ratio"], "routing_flips", {}
        if w["ok"] and not curve.get("ok", True):
            return "loss curve", _curve_ratio(curve), "curve", {}
        return w["tensor"], w["ratio"], w["rule"], w
    verdict = diagnostics.get("numerics") or {}
    if not verdict:
        return "", None, "", {}
    if verdict.get("threshold"):
        ratio = verdict["rmse"] / verdict["threshold"]
    else:
        ratio = verdict.get("tol_ratio")
    return "output (spot-check)", ratio, verdict.get("rule", ""), verdict


def _curve_ratio(curve: dict[str, Any]) -> float | None:
    tol = curve.get("rel_tol")
    if not tol:
        return None
    return float(curve.get("max_rel_dev", 0.0)) / float(tol)


def run_probe(probe: Probe, backend: str = DEFAULT_BACKEND) -> Row:
    """Plant the probe's fault, run its case, remove the fault. An emu probe must run in a
    process that may import emu."""
    if probe.column == "emu":
        _emu()
    from trainready.core.context import CaseContext
    from trainready.core.worker import execute_case
    from trainready.testing import faults

    suite, case, budget, device, options = _case(probe, backend)
    lib = faults.plant(probe.fault) if probe.kind == "kernel" else None
    planted = (
        faults.planted(probe.fault, WHERE[probe.column])
        if probe.kind == "model"
        else contextlib.nullcontext()
    )
    faults.reset_hits()
    t0 = time.perf_counter()
    try:
        with planted:
            ctx = CaseContext(device, probe.dtype, budget, options=options)
            out = execute_case(suite, case, ctx)
    finally:
        if lib is not None:
            faults.remove(lib)
    seconds = time.perf_counter() - t0
    tensor, ratio, rule, entry = _worst(probe.suite, out.diagnostics)
    rel_error, rel_noise = _relative(entry)
    error = out.diagnostics.get("error") or out.diagnostics.get("reason") or ""
    calls = _bug_calls(probe, out.diagnostics)
    return Row(
        **asdict(probe),
        kind=probe.kind,
        expect=probe.expect,
        required=probe.required,
        status=out.status,
        tensor=tensor,
        ratio=ratio,
        rule=rule,
        curve=_curve_ratio(out.diagnostics.get("curve", {})) if probe.suite == "parity" else None,
        rel_error=rel_error,
        rel_noise=rel_noise,
        bug_calls=calls,
        seconds=seconds,
        error=" ".join(str(error).split())[:300],
    )


def _bug_calls(probe: Probe, diagnostics: dict[str, Any]) -> int:
    """How often the planted bug acted: the ranks' own counts for dist, else this process's."""
    from trainready.testing import faults

    if probe.fault == CLEAN:
        return 0
    if probe.suite == "dist":
        return sum(r.get("fault_hits", 0) for r in diagnostics.get("ranks", {}).values())
    return sum(faults.hits(probe.fault).values())


def run_probes(probes: list[Probe], backend: str = DEFAULT_BACKEND) -> list[Row]:
    """Every probe in turn, in this process (one that may import emu, if any probe is emu's)."""
    return [run_probe(p, backend) for p in probes]


def in_processes(
    probes: list[Probe], backend: str = DEFAULT_BACKEND, timeout_s: float = WORKER_TIMEOUT_S
) -> list[Row]:
    """`run_probes` in spawned processes, so the caller never imports emu: the emu probes in one
    that imports it, the CPU probes in another (the two at once); rows in the probes' order."""
    ctx = multiprocessing.get_context("spawn")
    emu = [p for p in probes if p.column == "emu"]
    cpu = [p for p in probes if p.column != "emu"]
    with cf.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        jobs = [pool.submit(run_probes, group, backend) for group in (emu, cpu) if group]
        done = [row for job in jobs for row in job.result(timeout=timeout_s)]
    order = {p: i for i, p in enumerate(probes)}
    return sorted(done, key=lambda r: order[_probe(r)])


def in_emu_process(probes: list[Probe], timeout_s: float = WORKER_TIMEOUT_S) -> list[Row]:
    """`run_probes` in one spawned process (which may import emu), so the caller never does."""
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(run_probes, probes).result(timeout=timeout_s)


def _probe(row: Row) -> Probe:
    return Probe(row.fault, row.dtype, row.suite, row.case, row.column)


# --- the ops column -------------------------------------------------------------------------------

OPS_BUDGET_S = 60.0  # the ops suite's DEFAULT_BUDGET_S, per case
FAILING = ("fail_numerics", "fail_run")
OPS_SECTION = "## The ops suite on emu"


def ops_faults(faults: list[str]) -> list[str]:
    """The kernel faults among `faults` that name ops suite cases (`Fault.ops`)."""
    return [f for f in faults if f in FAULTS and FAULTS[f].ops]


@dataclass
class OpsRecord:
    """One ops suite case run on emu with `fault` planted (or CLEAN)."""

    fault: str
    case: str  # entry/dtype/form
    dtype: str
    status: str
    ratio: float | None  # the deciding sample's error over its allowance (inf: non-finite)
    output: str  # that sample's deciding output: the failing one, else the closest to failing
    rule: str
    named: tuple[str, ...]  # the planted kernels (aten overloads) the case's `aten` record names
    hits: int  # calls in which the planted bug acted during the case
    closer: bool | None  # a pass with every judged output closer to float64 than the CPU's
    judged: str  # how the suite judged the case: numerics, or invariants (and why)
    excuse: str  # a skipped or unsupported case's kind: "no_samples", "dtype", ...
    off_dtype: str  # where the case's samples are not in its dtype: what they are instead
    error: str
    seconds: float


def _over(entry: dict[str, Any]) -> float | None:
    over = entry.get("over")
    return math.inf if over == "inf" else over


def _deciding_sample(diagnostics: dict[str, Any]) -> dict[str, Any]:
    """The sample that decided an ops case: the failing one, else the one closest to failing."""
    entries = diagnostics.get("samples") or []
    failed = diagnostics.get("failed_sample")
    for entry in entries:
        if failed is not None and entry["index"] == failed:
            return entry
    judged = [e for e in entries if _over(e) is not None]
    return max(judged, key=_over, default={})


def _off_dtype(case: Any) -> str:
    """What a case's samples hold instead of its dtype, where every floating input is in another
    dtype or a dtype argument names another (`softmax(with_dtype)`: float64 outputs; an entry
    whose samples ignore the dtype asked for): "" where they are in the case's dtype."""
    import torch
    from torch.utils._pytree import tree_flatten

    from trainready.device import torch_dtype
    from trainready.suites.ops import database, samples

    op = database.load().get(case.params["entry"])
    if op is None:
        return ""
    dt = torch_dtype(case.params["dtype"])
    seed = samples.case_seed(case.name)
    backward = case.params["direction"] == "bwd"
    try:
        chosen = samples.first(op, dt, backward, seed, case.params.get("samples"))
    except Exception:  # noqa: BLE001 - the case itself says what its samples did
        return ""
    words: set[str] = set()
    for _, sample in chosen:
        flat, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
        floats = {t.dtype for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point()}
        if floats and dt not in floats:
            words |= {f"inputs {str(d).removeprefix('torch.')}" for d in floats}
        words |= {
            f"dtype={str(t).removeprefix('torch.')}"
            for t in flat
            if isinstance(t, torch.dtype) and t != dt
        }
    return ", ".join(sorted(words))


def ops_cases_of(name: str, every: list[str]) -> list[Any]:
    """A fault's ops cases; for CLEAN, those of every fault in `every`, each once."""
    from trainready.testing import faults

    cases: dict[str, Any] = {}
    for fault in every if name == CLEAN else [name]:
        for case in faults.ops_cases(fault):
            cases.setdefault(case.name, case)
    return list(cases.values())


def run_ops(names: list[str], dtypes: list[str], every: list[str]) -> list[OpsRecord]:
    """In this process (one that may import emu): for each of `names` in turn, plant it (CLEAN:
    nothing), run its ops cases in `dtypes` on emu through `execute_case`, remove it."""
    _emu()
    from trainready.core.context import CaseContext
    from trainready.core.worker import execute_case
    from trainready.suites.ops import suite
    from trainready.testing import faults

    records = []
    for name in names:
        cases = [c for c in ops_cases_of(name, every) if c.params["dtype"] in dtypes]
        kernels = () if name == CLEAN else tuple(f"aten::{op}" for op in FAULTS[name].kernels)
        lib = None if name == CLEAN else faults.plant(name)
        try:
            for case in cases:
                faults.reset_hits()
                t0 = time.perf_counter()
                out = execute_case(suite, case, CaseContext("emu", None, OPS_BUDGET_S))
                seconds = time.perf_counter() - t0
                d = out.diagnostics
                sample = _deciding_sample(d)
                why = d.get("error") or d.get("reason") or d.get("skipped") or ""
                judged = d.get("judged") or ""
                if d.get("judged_why"):
                    judged += f" ({d['judged_why']})"
                records.append(
                    OpsRecord(
                        fault=name,
                        case=case.name,
                        dtype=case.params["dtype"],
                        status=out.status,
                        ratio=_over(sample),
                        output=sample.get("worst") or "",
                        rule=sample.get("rule") or "",
                        named=tuple(k for k in kernels if k in (d.get("aten") or {})),
                        hits=0 if name == CLEAN else sum(faults.hits(name).values()),
                        closer=d.get("closer_than_cpu"),
                        judged=judged,
                        excuse=d.get("skipped") or d.get("unsupported") or "",
                        off_dtype=_off_dtype(case),
                        error=" ".join(str(why).split())[:300],
                        seconds=seconds,
                    )
                )
        finally:
            if lib is not None:
                faults.remove(lib)
    return records


def _one_process(names: list[str], dtypes: list[str], every: list[str], timeout_s: float):
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(run_ops, names, dtypes, every).result(timeout=timeout_s)


def ops_in_processes(
    names: list[str],
    dtypes: list[str] | tuple[str, ...] = OPS_DTYPES,
    every: list[str] | None = None,
    fresh: bool = True,
    timeout_s: float = WORKER_TIMEOUT_S,
) -> list[OpsRecord]:
    """`run_ops` in spawned processes, so the caller never imports emu: each of `names` in a
    fresh one (two at a time) where `fresh`, so no planted kernel outlives its fault; else all in
    one, in order. A CLEAN run covers the cases of the faults in `every` (default: `names`)."""
    dtypes = list(dtypes)
    every = [n for n in (every or names) if n != CLEAN]
    if not fresh:
        return _one_process(names, dtypes, every, timeout_s)
    with cf.ThreadPoolExecutor(2) as threads:
        jobs = [threads.submit(_one_process, [n], dtypes, every, timeout_s) for n in names]
        return [record for job in jobs for record in job.result()]


@dataclass
class OpsRow:
    """The ops column's verdict on one fault (or CLEAN) in one dtype, over its cases."""

    fault: str
    dtype: str
    expect: str
    required: bool
    cases: int
    failing: list[str]  # the failing cases (fail_numerics, fail_run), in order
    case: str  # the failing case furthest past its allowance; else the case closest to failing
    output: str
    ratio: float | None
    rule: str
    named: tuple[str, ...]  # the planted kernels every failing case names
    bug_calls: int
    closer: int  # passing cases closer to float64 than the CPU
    errors: list[str]  # cases that ended neither judged nor excused: "case: status"
    hit_elsewhere: bool = False  # the bug acted in the fault's cases of another dtype
    off_dtype: str = ""  # the shown case's samples, where not in the row's dtype
    proper: int = 0  # failing cases whose samples are in the row's dtype

    @property
    def verdict(self) -> str:
        if self.errors:
            return "error"
        if self.fault != CLEAN and self.bug_calls == 0:
            # e.g. a GEMM's stride bug in fp64, whose cases are forward only (contiguous)
            return "not exercised in this dtype" if self.hit_elsewhere else "not hit"
        if self.expect == "pass":
            return "false alarm" if self.failing else "ok"
        if self.failing and not self.named:
            return "caught, kernel not named"
        if self.failing and self.proper:
            return "caught"
        # no failure, or only in cases whose samples are not in this dtype
        missed = "missed" if self.required else "missed (under the goal)"
        return f"{missed}: failed only off-dtype" if self.failing else missed

    @property
    def bad(self) -> bool:
        return self.verdict not in (
            "caught",
            "ok",
            "missed (under the goal)",
            "missed (under the goal): failed only off-dtype",
            "not exercised in this dtype",
        )


def _weak_entries(spec: Any, records: list[OpsRecord]) -> bool:
    """Whether every op_db entry of these cases is one the fault moves by less than the bf16
    goal (`weak_on` "ops/<entry>", measured in tests/unit/testing/test_faults_weak.py)."""
    entries = {r.case.rsplit("/", 2)[0] for r in records}
    return bool(entries) and all(f"ops/{e}" in spec.weak_on for e in entries)


def ops_rows(records: list[OpsRecord]) -> list[OpsRow]:
    """One row per fault and dtype, in the records' order."""
    rows = []
    for fault, dtype in dict.fromkeys((r.fault, r.dtype) for r in records):
        mine = [r for r in records if (r.fault, r.dtype) == (fault, dtype)]
        failing = [r for r in mine if r.status in FAILING]
        proper = [r for r in failing if not r.off_dtype]
        judged = [r for r in mine if r.ratio is not None]
        top = max(
            proper or failing or judged,
            key=lambda r: math.inf if r.ratio is None else r.ratio,
            default=None,
        )
        named = set.intersection(*(set(r.named) for r in failing)) if failing else set()
        spec = None if fault == CLEAN else FAULTS[fault]
        excused = ("pass", *FAILING, "skipped", "unsupported")
        acted = sum(r.hits for r in mine)
        rows.append(
            OpsRow(
                fault=fault,
                dtype=dtype,
                expect="pass" if spec is None else spec.expect,
                required=spec is not None
                and acted > 0
                and spec.required("fp32" if dtype == "fp64" else dtype)
                and (dtype in ("fp32", "fp64") or not _weak_entries(spec, mine)),
                cases=len(mine),
                failing=[r.case for r in failing],
                case=top.case if top else "",
                output=top.output if top else "",
                ratio=top.ratio if top else None,
                rule=top.rule if top else "",
                named=tuple(sorted(named)),
                bug_calls=acted,
                closer=sum(bool(r.closer) for r in mine if r.status == "pass"),
                errors=[f"{r.case}: {r.status}" for r in mine if r.status not in excused],
                hit_elsewhere=any(r.hits for r in records if r.fault == fault),
                off_dtype=top.off_dtype if top else "",
                proper=len(proper),
            )
        )
    return rows


OPS_HEADER = (
    "dtype",
    "fault",
    "expected",
    "cases failing",
    "case (furthest past its allowance, else closest to failing)",
    "its output (ratio, rule)",
    "kernel named",
    "bug calls",
    "verdict",
)


def ops_cells(row: OpsRow) -> list[str]:
    plain = row.expect == "pass" or row.required or not row.bug_calls
    expect = row.expect if plain else "catch (not required)"
    worst = f"{row.output} ({_num(row.ratio)}, {row.rule})" if row.output else "-"
    if row.off_dtype:
        worst += f"; samples: {row.off_dtype}"
    named = ", ".join(f"`{k}`" for k in row.named) or "-"
    if row.expect == "pass" and row.closer:
        named = f"- ({row.closer} closer to float64 than the CPU)"
    return [
        row.dtype,
        row.fault,
        expect,
        f"{len(row.failing)} of {row.cases}",
        f"`{row.case}`" if row.case else "-",
        worst,
        named,
        "-" if row.fault == CLEAN else str(row.bug_calls),
        row.verdict,
    ]


def ops_markdown(rows: list[OpsRow]) -> str:
    return _markdown(OPS_HEADER, [(ops_cells(r), r.bad) for r in rows])


def ops_text(rows: list[OpsRow]) -> str:
    return _text(OPS_HEADER, [[c.replace("`", "") for c in ops_cells(r)] for r in rows])


def ops_summary(rows: list[OpsRow]) -> list[str]:
    """One line per dtype: catches, false alarms."""
    out = []
    for dtype in dict.fromkeys(r.dtype for r in rows):
        mine = [r for r in rows if r.dtype == dtype]
        wrong = [r for r in mine if r.expect == "catch" and r.bug_calls]
        right = [r for r in mine if r.expect == "pass"]
        required = [r for r in wrong if r.required]
        optional = [r for r in wrong if not r.required]
        text = (
            f"ops {dtype}: caught {sum(r.verdict == 'caught' for r in required)}/{len(required)}"
            " required"
        )
        if optional:
            text += (
                f" (+{sum(r.verdict == 'caught' for r in optional)}/{len(optional)} under the"
                " bf16 goal)"
            )
        text += (
            f", missed {sum(r.verdict.startswith('missed') for r in required)}, false alarms "
            f"{sum(r.verdict == 'false alarm' for r in right)}/{len(right)}"
        )
        errors = sum(r.verdict in ("error", "not hit", "caught, kernel not named") for r in mine)
        out.append(text + (f", errors {errors}" if errors else ""))
    return out


def ops_notes(rows: list[OpsRow], records: list[OpsRecord]) -> list[str]:
    """A sentence per row that is not caught/ok or caught by a thin margin, and per case of a
    caught fault that the fault moved without failing it (bf16 under the goal)."""
    out = []
    for row in rows:
        where = f"`{row.fault}` {row.dtype}"
        if row.verdict == "caught" and row.ratio is not None and row.ratio < THIN_MARGIN:
            out.append(
                f"{where}: caught by a thin margin, `{row.case}` {row.output} at "
                f"{_num(row.ratio)} of what {row.rule} allows."
            )
        elif row.verdict.startswith("missed"):
            mine = [r for r in records if (r.fault, r.dtype) == (row.fault, row.dtype)]
            hit = [r for r in mine if r.hits]
            off = [r for r in mine if r.off_dtype and r.status in FAILING]
            proper = [r for r in mine if not r.off_dtype and r.ratio is not None]
            closest = max(proper, key=lambda r: r.ratio, default=None)
            text = (
                f"{where}: **{row.verdict}**: its bug acted in {len(hit)} of {row.cases} cases "
                f"({row.bug_calls} calls) and every case "
                + (f"whose samples are in {row.dtype} " if off else "")
                + "passed"
            )
            if closest:
                text += (
                    f"; the closest to failing, `{closest.case}` {closest.output}, at "
                    f"{_num(closest.ratio)} of what {closest.rule} allows"
                )
            if off:
                text += "; it fails only " + ", ".join(
                    f"`{r.case}` (samples: {r.off_dtype}; {r.output} at {_num(r.ratio)})"
                    for r in off
                )
            unjudged = {r.judged for r in hit if not r.judged.startswith("numerics")}
            if unjudged and len(unjudged) == len({r.judged for r in hit}):
                text += f"; judged by {', '.join(sorted(unjudged))} only"
            out.append(text + ".")
        elif row.verdict == "false alarm":
            wrong = [
                r
                for r in records
                if (r.fault, r.dtype) == (row.fault, row.dtype) and r.status in FAILING
            ]
            out += [f"{where}: **false alarm** `{r.case}`: {r.error}" for r in wrong]
        elif row.verdict == "not hit":
            out.append(f"{where}: **not hit**: the planted bug never acted in its cases")
        elif row.verdict == "not exercised in this dtype":
            out.append(f"{where}: not exercised: its {row.cases} cases there never ran the bug.")
        elif row.verdict != "caught" and row.verdict != "ok":
            out.append(f"{where}: **{row.verdict}**: {'; '.join(row.errors) or row.failing}")
    return out


def _host() -> str:
    """This machine, as the tables name it: its OS, CPU and cores."""
    from trainready.device import device_info

    machine = f"{device_info('cpu').get('name') or platform.machine()}, {os.cpu_count()} cores"
    return f"{platform.system()} {machine}"


def ops_section(
    rows: list[OpsRow],
    records: list[OpsRecord],
    command: str,
    seconds: float,
    faults: list[str],
    host: str = "",
) -> str:
    """The ops column as a Markdown section of planted-faults.md."""
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    none = [f for f in faults if f in FAULTS and not FAULTS[f].ops]
    wrong = [f for f in dict.fromkeys(r.fault for r in rows) if f != CLEAN]
    lines = [
        f"{OPS_SECTION}, {today[:10]}",
        "",
        f"Command: `{command}`  ",
        f"Date: {today}; {_versions()}; host: {host or _host()}; {seconds:.0f} s  ",
        "The ops suite (`trainready/suites/ops`) runs PyTorch's OpInfo entries one op at a time "
        "on the device against the CPU and float64, the CPU's same-dtype error as the noise. "
        "Each kernel fault of `trainready.testing.faults` that names op_db entries "
        "(`Fault.ops`) is planted on emu in a fresh process, which runs those entries' cases "
        "(`faults.ops_cases`: the quick preset, the first three samples; fp32 and bf16 forward "
        "and backward, fp64 forward) through `execute_case`; one more fresh process runs every "
        "one of those cases with nothing planted (`clean`). A fault is **caught** in a dtype "
        "when one of its cases there ends `fail_numerics` (or `fail_run`) and every failing "
        "case's record of the aten ops it ran (`diagnostics.aten`) names the planted kernel; the "
        "goal is the parity table's (every fault caught in fp32, and fp64; in bf16 those of 2% "
        "or more). A clean or correct-but-different run must pass every case. `ratio`: the "
        "deciding sample's error over its allowance (for a pass, the case closest to failing); "
        "`bug calls`: calls in which the planted bug acted, over the fault's cases in the dtype.",
        "",
        "| fault | expected | size | op_db cases (quick preset) | what it plants |",
        "|---|---|---|---|---|",
    ]
    for name in wrong:
        f = FAULTS[name]
        size = f"{f.size:.0%}" if f.size else "-"
        kernels = ", ".join(f"`aten::{op}`" for op in f.kernels)
        ops = ", ".join(f"`{o}`" for o in f.ops)
        lines.append(f"| `{name}` | {f.expect} | {size} | {ops} | {f.imitates} ({kernels}) |")
    if none:
        lines += ["", "No op_db entry runs " + ", ".join(f"`{n}`" for n in none) + "."]
    notes = ops_notes(rows, records) or ["none: every fault caught, every right run passed."]
    lines += [
        "",
        *[f"- {line}" for line in ops_summary(rows)],
        "",
        ops_markdown(rows),
        "",
        "Notes:",
        "",
        *[f"- {n}" for n in notes],
        "",
    ]
    return "\n".join(lines)


def with_section(text: str, section: str) -> str:
    """`text` with its ops section (from OPS_SECTION to the next `## ` heading) replaced by
    `section`, or `section` appended."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(OPS_SECTION)), None)
    if start is None:
        return text.rstrip("\n") + "\n\n" + section
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "\n".join(lines[end:])
    return "\n".join(lines[:start]) + "\n" + section + ("\n" + tail + "\n" if tail else "")


# --- output ----------------------------------------------------------------------------------------

HEADER = (
    "column",
    "dtype",
    "fault",
    "kind",
    "case",
    "expected",
    "got",
    "worst tensor (ratio, rule)",
    "curve",
    "bug calls",
    "verdict",
)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def cells(row: Row) -> list[str]:
    worst = f"{row.tensor} ({_num(row.ratio)}, {row.rule})" if row.tensor else "-"
    calls = "-" if row.fault == CLEAN else str(row.bug_calls)
    expect = row.expect if row.expect == "pass" or row.required else "catch (not required)"
    return [
        row.column,
        row.dtype,
        row.fault,
        row.kind,
        f"{row.suite} {row.case}",
        expect,
        row.status,
        worst,
        _num(row.curve),
        calls,
        row.verdict,
    ]


def _markdown(header: Sequence[str], rows: list[tuple[list[str], bool]]) -> str:
    """A Markdown table of (cells, bad) rows, a bad row's verdict (last cell) in bold."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cells_, bad in rows:
        text = [c.replace("|", "\\|") for c in cells_]
        text[-1] = f"**{text[-1]}**" if bad else text[-1]
        lines.append("| " + " | ".join(text) + " |")
    return "\n".join(lines)


def _text(header: Sequence[str], rows: list[list[str]]) -> str:
    """A plain-text table, columns padded to their widest cell."""
    table = [list(header), *rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in table
    )


def markdown_table(rows: list[Row]) -> str:
    return _markdown(HEADER, [(cells(r), r.bad) for r in rows])


def text_table(rows: list[Row]) -> str:
    return _text(HEADER, [cells(r) for r in rows])


def counts(rows: list[Row]) -> dict[str, int]:
    """caught / required, missed (required), caught / missed under the goal, false alarms /
    passes expected, errors (not hit included)."""
    wrong = [r for r in rows if r.expect == "catch"]
    right = [r for r in rows if r.expect == "pass"]
    return {
        "required": sum(r.required for r in wrong),
        "caught": sum(r.required and r.verdict == "caught" for r in wrong),
        "missed": sum(r.verdict == "missed" for r in wrong),
        "optional": sum(not r.required for r in wrong),
        "optional_caught": sum(not r.required and r.verdict == "caught" for r in wrong),
        "passes": len(right),
        "false_alarms": sum(r.verdict == "false alarm" for r in right),
        "errors": sum(r.verdict in ("error", "not hit") for r in rows),
    }


def summary_lines(rows: list[Row]) -> list[str]:
    """One line per column and dtype, and a total."""
    out = []
    groups = list(dict.fromkeys((r.column, r.dtype) for r in rows))
    for column, dtype in groups:
        c = counts([r for r in rows if (r.column, r.dtype) == (column, dtype)])
        out.append(_summary(f"{column} {dtype}", c))
    out.append(_summary("all", counts(rows)))
    return out


def _summary(label: str, c: dict[str, int]) -> str:
    text = f"{label}: caught {c['caught']}/{c['required']} required"
    if c["optional"]:
        text += f" (+{c['optional_caught']}/{c['optional']} under the bf16 goal)"
    text += f", missed {c['missed']}, false alarms {c['false_alarms']}/{c['passes']}"
    if c["errors"]:
        text += f", errors {c['errors']}"
    return text


def summary_table(rows: list[Row]) -> str:
    lines = [
        "| column | dtype | caught (required) | missed | caught under the goal | false alarms |",
        "|---|---|---|---|---|---|",
    ]
    for column, dtype in dict.fromkeys((r.column, r.dtype) for r in rows):
        c = counts([r for r in rows if (r.column, r.dtype) == (column, dtype)])
        under = f"{c['optional_caught']}/{c['optional']}" if c["optional"] else "-"
        lines.append(
            f"| {column} | {dtype} | {c['caught']}/{c['required']} | {c['missed']} | {under} | "
            f"{c['false_alarms']}/{c['passes']} |"
        )
    return "\n".join(lines)


def _twin(row: Row, rows: list[Row], dtype: str) -> Row | None:
    """The same fault, column and case at another dtype."""
    case = row.case.replace(f"/{row.dtype}", f"/{dtype}")
    return next(
        (
            r
            for r in rows
            if (r.fault, r.column, r.suite, r.dtype, r.case)
            == (row.fault, row.column, row.suite, dtype, case)
        ),
        None,
    )


def notes(rows: list[Row]) -> list[str]:
    """One sentence per row that is not caught/ok, or caught by a thin margin."""
    out = []
    for row in rows:
        where = f"`{row.fault}` {row.column} {row.dtype} {row.suite} `{row.case}`"
        if row.verdict == "caught" and row.ratio is not None and row.ratio < THIN_MARGIN:
            out.append(
                f"{where}: caught by a thin margin, {row.tensor} at {_num(row.ratio)} of what "
                f"{row.rule} allows."
            )
        elif row.verdict.startswith("missed"):
            spec = fault_spec(row.fault)
            size = f"{spec.size:.0%} " if spec.size else ""
            text = (
                f"{where}: **{row.verdict}**, the case passed; its worst tensor {row.tensor} is "
                f"at {_num(row.ratio)} of what {row.rule} allows"
            )
            if row.rel_error is not None and row.rel_noise is not None:
                text += (
                    f": its error is {row.rel_error:.2%} of its rms, the honest {row.dtype} "
                    f"noise {row.rel_noise:.2%}"
                )
            twin = _twin(row, rows, "fp32")
            if twin is not None and twin.rel_error is not None and twin.verdict == "caught":
                text += (
                    f"; in fp32 the same fault moves {twin.tensor} by {twin.rel_error:.2%} of its"
                    f" rms ({_num(twin.ratio)}x its allowance)"
                )
                if row.rel_noise is not None and twin.rel_error < 2 * row.rel_noise:
                    text += (
                        f", less than the rule's allowance of twice {row.dtype}'s own noise: "
                        f"on this model the fault is under what {row.dtype} can resolve"
                    )
            if not row.required and spec.required(row.dtype):
                text += (
                    f" -- on this model the {size}fault moves the result by less than the bf16 "
                    "goal of 2% (its fp32 row), under the goal"
                )
            elif not row.required:
                text += f" -- a {size}fault, under the bf16 goal of 2%"
            out.append(text + ".")
        elif row.verdict == "false alarm":
            out.append(f"{where}: **false alarm**: {row.error}")
        elif row.verdict == "not hit":
            out.append(f"{where}: **not hit**: the planted bug never acted in this case")
        elif row.verdict == "error":
            out.append(f"{where}: **{row.status}**: {row.error}")
    return out


def _versions() -> str:
    import torch

    return f"torch {torch.__version__}, Python {platform.python_version()}"


def _fault_cases(name: str) -> list[str]:
    """The cases a fault runs on, as the Faults table lists them."""
    if name in FLEX_FAULTS:
        return [f"{name}/{FLEX_SHAPE}"]
    if name in DIST_FAULTS:
        return list(dict.fromkeys(c for cs in DIST_FAULTS[name].cases.values() for c in cs))
    return variants_of(fault_spec(name))


def _fault_lines(rows: list[Row]) -> list[str]:
    lines = [
        "| fault | kind | expected | size | case | what it plants |",
        "|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r.fault for r in rows if r.fault != CLEAN):
        f = fault_spec(name)
        kind = "kernel (emu)" if name in FAULTS else fault_column(name) or "model"
        what = f.imitates
        if name in FAULTS:
            what += " (" + ", ".join(f"`aten::{op}`" for op in f.kernels) + ")"
        size = f"{f.size:.0%}" if f.size else "-"
        cases = ", ".join(f"`{v}`" for v in _fault_cases(name))
        lines.append(f"| `{name}` | {kind} | {f.expect} | {size} | {cases} | {what} |")
    return lines


def document(rows: list[Row], command: str, seconds: float, backend: str, host: str = "") -> str:
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    miss_notes = notes(rows) or [
        f"none: every required fault caught at {THIN_MARGIN:g}x its allowance or more, every "
        "right run passed."
    ]
    columns = [
        f"- `{c}`: {COLUMN_TEXT[c]}" + (f"; backend `{backend}`" if c == "compiled" else "")
        for c in dict.fromkeys(r.column for r in rows)
    ]
    return "\n".join(
        [
            "# Planted faults: the numerics rule's catch table",
            "",
            f"Command: `{command}`  ",
            f"Date: {today}; {_versions()}; host: {host or _host()}; {seconds:.0f} s  ",
            "Each fault is planted in turn (`trainready.testing.faults`: model-level faults "
            "patched into the synthetic model and the parity engine's optimizer, kernel faults "
            "registered for emu's key through `torch.library`) and the case is judged by "
            "`execute_case`, as in a real run. Columns:",
            "",
            *columns,
            "",
            "A wrong model must end `fail_numerics` (**caught**; a pass is **missed**). The goal: "
            "every fault caught in fp32, every fault of 2% or more caught in bf16 (smaller ones "
            "are `catch (not required)` in bf16); clean runs and correct-but-different code must "
            "pass (a failure is a **false alarm**). `worst tensor` is the tensor the error names "
            "first (for a pass, the one closest to failing) with its rmse over what the rule "
            "allows and the rule, i.e. the noise it was judged against: `noise_vs_independent` "
            "(the CPU's own independently rounded runs), `noise_vs_cpu` (the CPU's same-dtype "
            "eager run; flex: the dense reference math at the dtype), `noise_vs_cpu_optimizer` "
            "(the CPU's fp32 AdamW step), `noise_vs_cpu_pooled` (that run pooled with "
            "independently rounded ones), `noise_vs_single_process` (dist: the same computation "
            "in one process at the dtype), `routing_flips` (a case failed on its top-k decisions "
            "alone: the worst flip's float64 gap over what the score noise allows); `curve` is the loss curve's largest deviation over its "
            "noise-derived tolerance; `bug calls` counts the calls in which the planted bug acted "
            "(compiled: the traces holding it; flex: builds of the planted mods for the kernel; "
            "dist: planted reductions over every rank).",
            "",
            "## Summary",
            "",
            summary_table(rows),
            "",
            "## Faults",
            "",
            *_fault_lines(rows),
            "",
            "## Catch table",
            "",
            markdown_table(rows),
            "",
            "## Notes",
            "",
            *[f"- {n}" for n in miss_notes],
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the Markdown table here")
    every = [*FAULTS, *MODEL_FAULTS, *FLEX_FAULTS, *DIST_FAULTS]
    ap.add_argument("--faults", default=",".join(every), help="comma-separated fault names")
    ap.add_argument(
        "--dtypes",
        default="",
        help="comma-separated: fp32,bf16 (the default); the ops column: fp32,bf16,fp64 (default)",
    )
    ap.add_argument(
        "--columns", default=",".join(COLUMNS), help=f"comma-separated: {','.join(COLUMNS)}"
    )
    ap.add_argument("--compile-backend", default=DEFAULT_BACKEND, help="for the compiled column")
    ap.add_argument("--report-only", action="store_true", help="exit 0 even on a miss")
    ap.add_argument("--host", default="", help="how --out names the machine (default: its CPU)")
    args = ap.parse_args(argv)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    unknown = (
        [f for f in faults if f not in every]
        + [d for d in dtypes if d not in OPS_DTYPES]
        + [c for c in columns if c not in COLUMNS]
    )
    if unknown:
        ap.error(f"unknown fault, dtype or column {unknown[0]!r}; faults: {', '.join(every)}")
    others = [c for c in columns if c != "ops"]
    if others and any(d not in DTYPES for d in dtypes):
        ap.error(f"dtypes other than {', '.join(DTYPES)} run in the ops column only")

    t0 = time.perf_counter()
    rows = in_processes(plan(faults, dtypes or list(DTYPES), others), args.compile_backend)
    seconds = time.perf_counter() - t0
    names = ops_faults(faults) if "ops" in columns else []
    t0 = time.perf_counter()
    records = ops_in_processes([CLEAN, *names], dtypes or OPS_DTYPES) if names else []
    ops = ops_rows(records)
    ops_seconds = time.perf_counter() - t0
    if rows:
        print(text_table(rows))
        print()
        for line in summary_lines(rows):
            print(line)
        print(f"({seconds:.0f} s)")
        for n in notes(rows):
            print("- " + n.replace("**", "").replace("`", ""))
    if ops:
        print(ops_text(ops))
        print()
        for line in ops_summary(ops):
            print(line)
        print(f"({ops_seconds:.0f} s)")
        for n in ops_notes(ops, records):
            print("- " + n.replace("**", "").replace("`", ""))
    if args.out:
        command = "python benchmarks/planted_faults.py " + shlex.join(
            sys.argv[1:] if argv is None else argv
        )
        command = command.strip()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        section = ops_section(ops, records, command, ops_seconds, faults, args.host) if ops else ""
        if rows:
            text = document(rows, command, seconds, args.compile_backend, args.host)
            args.out.write_text(with_section(text, section) if section else text)
        elif section:  # the ops column alone: its section, the rest of the file as it was
            old = args.out.read_text() if args.out.exists() else ""
            args.out.write_text(with_section(old, section) if old else section)
        print(f"wrote {args.out}")
    bad = any(r.bad for r in rows) or any(r.bad for r in ops)
    return 0 if args.report_only or not bad else 1


if __name__ == "__main__":
    sys.exit(main())
