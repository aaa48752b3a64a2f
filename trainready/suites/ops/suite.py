"""Ops suite: every PyTorch OpInfo operator, forward and backward, per dtype, on the device against
the CPU and float64, with what each dispatched to (native, composite, host fallback, missing).

Cases (plan.py): one per op_db entry (with its variant) x dtype x form, named
`{entry}/{dtype}/{form}`: `nn.functional.conv2d/bf16/bwd`, `normal(in_place)/fp32/fwd`,
`add/fp32/out`. The entries come from `torch.testing._internal` (database.py: internal, no
stability promise; a changed entry breaks only its own cases).

Each sample of a case (samples.py: the first N after a seed, so index and seed reproduce it) runs
three times: on the CPU in the case dtype, on the CPU in float64 (the reference), on the device.
Its outputs, or for backward the gradients of its leaves for the same random grad_outputs, are
judged by judge.py: the numerics rule against float64 with the CPU's same-dtype error as the
noise; invariants only for outputs that are not a function of the inputs; "reference invalid"
where op_db marks the CPU as a wrong reference (`skipped`, not counted against the device).

Statuses:
- pass; fail_numerics (the first failing sample's output, with a repro);
- fail_run: the device raised where the CPU did not;
- unsupported: the device lacks the dtype (probed, with its message: `unsupported` = "dtype"),
  or the op has no kernel (`unsupported` = "missing"), or op_db cannot be imported here
  (`unsupported` = "database": expecttest missing);
- skipped: "reference_invalid", "no_samples", "cpu_unsupported" (the CPU raised on every
  sample: no reference), "not_in_database" (the planned entry is gone from this torch's op_db);
- the runner's timeout, crash and oom, contained to the case.

Metrics: samples (judged), worst_over_allowance, aten_ops, and where the dispatcher measured
them fallback_ops, missing_ops, roundtrip_ops. Diagnostics: judged, judged_why, closer_than_cpu,
error, repro, samples (index, seed, ok, rule, worst, over), aten ({overload: class}),
dispatch_source.
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from trainready.core.case import Case, Outcome
from trainready.core.config import RunConfig
from trainready.core.context import CaseContext
from trainready.device import is_oom, torch_dtype
from trainready.suites.ops import catalog, database, plan, runs, samples
from trainready.suites.ops.judge import SampleVerdict, judge_sample
from trainready.suites.ops.repro import repro
from trainready.suites.ops.watch import AtenWatch, mode_changes

NAME = "ops"
DEFAULT_DTYPE = None  # each case names its dtype
DEFAULT_BUDGET_S = 60.0
KIND = "correctness"
USES_PEAK = False
OPTIONS: dict = {
    "ops": list,  # only these entries (or op names: every variant)
    "samples": range(1, 100_000),  # the first N samples of each entry, whatever the preset
    "models_from": str,  # a run directory whose parity results rank the blockers (the report)
}
_MISSING = re.compile(r"Could not run '(aten::[\w.]+)'|NotImplementedError")
_DTYPE_WORDS = ("BFloat16", "Half", "Double", "Float", "bfloat16", "float16", "float64", "fp64")
_UNSUPPORTED_WORDS = re.compile(r"not implemented|not supported|unsupported|no kernel", re.I)


def cases(cfg: RunConfig) -> list[Case]:
    only = cfg.options.get("ops")
    names = [n.strip() for n in only.split(",")] if isinstance(only, str) else only
    return plan.plan(
        NAME, catalog.entries(), cfg.preset, cfg.dtype, names, cfg.options.get("samples")
    )


@functools.cache
def dtype_problem(device: str, dtype: torch.dtype) -> str | None:
    """The device's message when it cannot hold and add tensors of `dtype`, else None (once per
    process: it does not change)."""
    try:
        t = torch.ones(4, dtype=dtype, device=device)
        (t + t).cpu()
    except Exception as e:  # noqa: BLE001 - the device's own words are the finding
        return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return None


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def device_error(e: BaseException) -> tuple[str, str | None]:
    """(status, unsupported kind) for an error the device raised where the CPU did not."""
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, NotImplementedError) or _MISSING.search(text):
        return "unsupported", "missing"
    if _UNSUPPORTED_WORDS.search(text) and any(w in text for w in _DTYPE_WORDS):
        return "unsupported", "dtype"
    return "fail_run", None


@dataclass
class _Tally:
    verdicts: list[tuple[int, SampleVerdict]] = field(default_factory=list)
    cpu_errors: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)  # samples with nothing to judge
    unwatched: list[int] = field(default_factory=list)  # samples the watch would have changed


def _form(params: dict[str, Any]) -> str:
    if params["direction"] == "bwd":
        return "bwd"
    return {"function": "fwd"}.get(params["form"], params["form"])


_WANTS_CPU = re.compile(r"to be on cpu|must be on cpu|on the cpu", re.I)


def _on_device(form: str, op, sample, device: str, grads, like) -> list:  # noqa: ANN001
    """The device's run; where the op refuses an argument on the device that its API wants on
    the CPU (tensor_split's indices), again with only the input moved."""
    try:
        return runs.run(form, op, samples.on_device(sample, device), grads, like)
    except Exception as e:
        if not _WANTS_CPU.search(str(e)):
            raise
    return runs.run(form, op, samples.on_device(sample, device, only_input=True), grads, like)


def _run_sample(op, sample, form: str, dt: torch.dtype, dtype: str, how: str, device: str,
                watch: AtenWatch, grad_seed: int) -> tuple[SampleVerdict, list[str], bool]:  # fmt: skip
    """One sample on the CPU, in float64 and on the device: its verdict, the random-number
    ops the device ran (then only invariants are judged), and whether the device's run was
    watched (not where the watch's dispatch mode changes the CPU's own result). The CPU's error
    propagates as `_CpuError`; the device's as itself."""
    grads, like = None, None
    try:
        if form == "bwd":
            grads = runs.grad_outputs_for(op, samples.on_cpu(sample), grad_seed)
        if form == "out":
            like = runs.forward(op, samples.on_cpu(sample))
        cpu = runs.run(form, op, samples.on_cpu(sample), grads, like)
        watched = form != "out" or not mode_changes(
            lambda: runs.run(form, op, samples.on_cpu(sample), grads, like), cpu
        )
    except runs.NothingToJudge:
        raise
    except Exception as e:
        if is_oom(e):
            raise
        raise _CpuError(_one_line(e)) from e
    ref_form = "fwd" if form in ("inplace", "out") and how == "numerics" else form
    ref_how, ref, fp32 = how, None, None
    if how == "numerics":
        try:
            ref = runs.run(ref_form, op, samples.reference(sample, dt), grads, like)
            if dtype == "fp64":
                fp32 = runs.run(ref_form, op, samples.reference(sample, dt, torch.float32), grads)
        except Exception:  # noqa: BLE001 - no float64 path: judged by invariants, said so
            ref_how = "invariants"
    watch.take_seeded()
    with watch if watched else contextlib.nullcontext():
        dev = _on_device(form, op, sample, device, grads, like)
    seeded = watch.take_seeded()
    if seeded:
        ref_how = "invariants"
    tied = op.name in database.TIED_INDICES
    label = "grad" if form == "bwd" else "out"
    try:
        verdict = judge_sample(ref or cpu, cpu, dev, dtype, ref_how, fp32, tied, label)
    except Exception as e:  # noqa: BLE001 - the tool's failure to compare, never the device's
        raise runs.NothingToJudge(f"the judge could not compare the outputs: {_one_line(e)}") from e
    return verdict, seeded, watched


class _CpuError(Exception):
    """The CPU itself raised on a sample: it has no reference there."""


def execute(case: Case, ctx: CaseContext) -> Outcome:
    p = case.params
    try:
        entries = database.load()
    except ImportError as e:
        why = f"PyTorch's op_db does not import here: {_one_line(e)}"
        return Outcome("unsupported", diagnostics={"unsupported": "database", "error": why})
    op = entries.get(p["entry"])
    if op is None:
        why = f"op_db of torch {torch.__version__} has no entry {p['entry']!r}"
        return Outcome("skipped", diagnostics={"skipped": "not_in_database", "error": why})
    dt = torch_dtype(p["dtype"])
    problem = dtype_problem(ctx.device, dt)
    if problem:
        return Outcome("unsupported", diagnostics={"unsupported": "dtype", "error": problem})
    how, why = database.judging(op, torch.device(ctx.device).type, dt)
    form = _form(p)
    seed = samples.case_seed(case.name)
    with ctx.phase("samples"):
        chosen = samples.first(op, dt, form == "bwd", seed, p.get("samples"))
    if not chosen:
        why_not = "op_db gives this entry no sample in this dtype"
        return Outcome("skipped", diagnostics={"skipped": "no_samples", "reason": why_not})
    watch, tally = AtenWatch(ctx.device), _Tally()
    diag: dict[str, Any] = {"judged": how, "judged_why": why}
    status = "pass"
    with ctx.phase("run"):
        for index, sample in chosen:
            try:
                v, seeded, watched = _run_sample(
                    op, sample, form, dt, p["dtype"], how, ctx.device, watch, seed + index
                )
                if not watched:
                    tally.unwatched.append(index)
            except runs.NothingToJudge as e:
                tally.empty.append(f"{index}: {e}")
                continue
            except _CpuError as e:
                tally.cpu_errors.append(f"{index}: {e}")
                continue
            except Exception as e:
                if is_oom(e):
                    raise
                status, unsupported = device_error(e)
                diag |= {"error": _one_line(e), "failed_sample": index}
                if unsupported:
                    diag["unsupported"] = unsupported
                diag["repro"] = repro(p, ctx.device, seed, index)
                break
            tally.verdicts.append((index, v))
            if seeded and how == "numerics":
                how = "invariants"
                diag |= {"judged": how, "judged_why": f"{seeded[0]} draws random numbers"}
    return _outcome(status, diag, tally, watch, p, ctx.device, seed, how)


def _outcome(status: str, diag: dict[str, Any], tally: _Tally, watch: AtenWatch,
             p: dict[str, Any], device: str, seed: int, how: str) -> Outcome:  # fmt: skip
    classes = watch.classes()
    diag |= {"aten": classes, "dispatch_source": watch.source()}
    diag["samples"] = [{"index": i, "seed": seed, **v.to_json()} for i, v in tally.verdicts]
    if tally.cpu_errors:
        diag["cpu_errors"] = tally.cpu_errors[:5]
    if tally.empty:
        diag["not_judged"] = tally.empty[:5]
    if tally.unwatched:
        diag["not_watched"] = {
            "samples": tally.unwatched,
            "why": "the op's CPU result changes under any dispatch mode (out= left unwritten)"
            ": these samples ran on the device unwatched, their aten ops not recorded",
        }
    metrics = {"samples": float(len(tally.verdicts)), **watch.counts(classes)}
    overs = [v.over for _, v in tally.verdicts if v.over is not None]
    if overs:
        metrics["worst_over_allowance"] = max(overs)
    if status == "pass":
        failed = [(i, v) for i, v in tally.verdicts if not v.ok]
        if failed and how != "reference_invalid":
            index, v = failed[0]
            status = "fail_numerics"
            diag |= {
                "error": v.problem,
                "failed_sample": index,
                "repro": repro(p, device, seed, index),
            }
        elif how == "reference_invalid":
            status, diag["skipped"] = "skipped", "reference_invalid"
            diag["reason"] = f"reference invalid: {diag['judged_why']}"
        elif not tally.verdicts:
            status = "skipped"
            diag["skipped"] = "cpu_unsupported" if tally.cpu_errors else "no_samples"
            diag["error"] = (tally.cpu_errors or tally.empty or ["no sample to judge"])[0]
        else:
            diag["closer_than_cpu"] = all(v.closer for _, v in tally.verdicts)
    return Outcome(status, metrics, diag)
