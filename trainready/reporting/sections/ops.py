"""The ops suite's report: every OpInfo entry of torch's op_db, forward and backward, per dtype,
judged on the device against float64, and what stands between the device and the models.

- Counts: the cases by status, unsupported ones by kind (a dtype the device lacks for the op, no
  kernel at all, another backend limit) and skipped ones by kind (op_db marks the CPU a wrong
  reference, the op has no samples, the CPU cannot run it in that dtype: none of them the device's
  and none counted against it), and what was measured over how many cases: numerics against
  float64 or invariants, the dispatch class of every aten overload, the device closer to float64
  than the CPU.
- Coverage: one row per entry (op + variant): the dtypes whose every forward (function, in-place,
  out) and backward case passes, the worst dispatch class over the aten overloads it dispatched
  (missing > fallback > roundtrip > composite > kernel > unknown), its statuses, its first error,
  and how many parity models dispatched any of its overloads. "not measured" wherever nothing
  measured a field.
- Blockers: the entries that fail, are unsupported or missing, fall back to the host or make host
  round-trips, ranked by how many parity models dispatched them, with the models, and how many
  models have no blocker left once the first k are fixed ("implement these five ops to unblock N
  models"). Without parity results, ranked by failures only.

The parity models come from the same run's parity results, or from the run named by the ops
suite's option `models_from` (`--set models_from=DIR`, the run's recorded options): DIR is a
store directory (its latest run with parity results), `DIR/trainready.db`, `DIR:RUN_ID`, or a
run's own directory `DIR/RUN_ID`. A model's ops are its cases' `diagnostics["ops"]["op_names"]`
(every aten op packet dispatched); a record from before op_names has only the 40 most frequent
ops (`diagnostics["ops"]["ops"]`), so a count resting on one is a lower bound, and says so.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainready.core.case import FAILING, STATUSES, Case, Result
from trainready.core.store import DB_NAME, Store, StoreError
from trainready.reporting import fmt
from trainready.reporting.blocks import Block, Column, Stat, Stats, Table, Text, num
from trainready.reporting.model import NOT_RUN, Report, RunView, clip, finite, reason

SUITE = "ops"
KEY_METRICS = ("worst_over_allowance", "samples", "aten_ops")
PARITY = "parity"

# Dispatch classes, worst first: what an entry's row shows is the worst over its overloads.
CLASSES = ("missing", "fallback", "roundtrip", "composite", "kernel", "unknown")
BLOCKING_CLASSES = ("missing", "fallback", "roundtrip")  # a model using these is held up
HOST_CLASSES = ("fallback", "roundtrip")  # the host did the work (the verdict's "host ops")
NOT_MEASURED = "not measured"
DTYPES = ("fp32", "bf16", "fp16", "fp64")
FORMS = ("function", "inplace", "out")
# Why a case was skipped (diagnostics["skipped"]) and why unsupported (diagnostics["unsupported"]).
SKIP_KINDS = ("reference_invalid", "no_samples", "cpu_unsupported")
UNSUPPORTED_KINDS = ("dtype", "missing", "backend")
# What the op_names-less parity record keeps (trainready/suites/parity/suite.py, OPS_SHOWN).
TRUNCATED_OPS = 40
MODELS_SHOWN = 6
# Overloads most entries dispatch (the harness's own: aten::detach on every output) say nothing
# about which op a model needs: an overload more than COMMON_SHARE of the entries with a dispatch
# record dispatched (over at least COMMON_MIN_ENTRIES of them) does not tie an entry to a model,
# unless it is the entry's own op (aten.add for add), or it fell back, was missing or round-tripped.
COMMON_SHARE = 0.5
COMMON_MIN_ENTRIES = 4
ERROR_CHARS = 160
# A NotImplementedError from the dispatcher names the overload without a kernel.
_NO_KERNEL = re.compile(r"[Cc]ould not run '([A-Za-z_][\w]*::[\w.]+)'")


# --- names ------------------------------------------------------------------------------------


def packet(overload: str) -> str:
    """An aten overload's op packet, as parity records them: 'aten::add.Tensor' -> 'aten.add',
    'aten::mm' -> 'aten.mm' (a dotted 'aten.add.Tensor' reads the same)."""
    if "::" in overload:
        namespace, _, rest = overload.partition("::")
        return f"{namespace}.{rest.split('.', 1)[0]}"
    parts = overload.split(".")
    return ".".join(parts[:2])


def class_rank(name: str | None) -> int:
    """0 for the worst class ('missing'); a class this report does not know ranks with 'unknown'."""
    if name in CLASSES:
        return CLASSES.index(name)
    return len(CLASSES) - 1


def worst_class(classes: Iterable[str]) -> str | None:
    """The worst of `classes` (missing > fallback > roundtrip > composite > kernel > unknown);
    None when there is none, i.e. nothing measured."""
    found = list(classes)
    return min(found, key=class_rank) if found else None


def _parts(case: Case) -> tuple[str, str, str, str, str, str]:
    """(entry, op, variant, dtype, direction, form) from the params, else from the case name
    '{entry}/{dtype}/{fwd|bwd|inplace|out}'."""
    p = case.params
    head, dtype, last = ([*case.name.rsplit("/", 2)] + ["", ""])[:3]
    if not dtype:
        head, dtype, last = case.name, "", ""
    entry = str(p.get("entry") or head)
    op = str(p.get("op") or entry.split("(", 1)[0])
    variant = str(p.get("variant") or "")
    dtype = str(p.get("dtype") or dtype or "?")
    named_form = {"fwd": "function", "bwd": "function"}.get(last, last or "function")
    form = str(p.get("form") or named_form)
    direction = str(p.get("direction") or ("bwd" if last == "bwd" else "fwd"))
    return entry, op, variant, dtype, direction, form


def _order(case: Case) -> tuple:
    _, _, _, dtype, direction, form = _parts(case)
    return (
        DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES),
        dtype,
        direction != "fwd",
        FORMS.index(form) if form in FORMS else len(FORMS),
        case.name,
    )


def _status(item: tuple[Case, Result | None]) -> str:
    return item[1].status if item[1] is not None else NOT_RUN


# Unsupported for a reason that is not the device's: op_db does not import here (expecttest
# missing). Counted apart, like skipped cases.
NOT_THE_DEVICES = ("database",)


def judged(r: Result | None) -> bool:
    """Whether a case counts for or against the device: a planned case without a result does
    (it did not pass); a skipped one does not (op_db marks the CPU a wrong reference, no samples,
    the CPU cannot run it, the entry is gone from op_db), nor one unsupported because op_db does
    not import here."""
    if r is None:
        return True
    if r.status == "skipped":
        return False
    return not (r.status == "unsupported" and r.diagnostics.get("unsupported") in NOT_THE_DEVICES)


def _kind(r: Result, key: str) -> str:
    return str(r.diagnostics.get(key) or "unspecified")


def _aten(r: Result | None) -> dict[str, str]:
    aten = r.diagnostics.get("aten") if r is not None else None
    return {str(k): str(v) for k, v in aten.items()} if isinstance(aten, dict) else {}


def _no_kernel(r: Result) -> str | None:
    """The overload a `missing` case names in its error, if it does."""
    found = _NO_KERNEL.search(str(r.diagnostics.get("error") or ""))
    return found.group(1) if found else None


def dispatch_measured(r: Result) -> bool:
    """Whether something measured this case's dispatch classes: a source that is not 'none: …',
    and a class other than 'unknown' (or the dispatcher's counts in the metrics)."""
    if str(r.diagnostics.get("dispatch_source") or "").startswith("none"):
        return False
    known = any(c != "unknown" for c in _aten(r).values())
    return known or any(k in r.metrics for k in ("fallback_ops", "missing_ops", "roundtrip_ops"))


# --- the parity models --------------------------------------------------------------------------


@dataclass(frozen=True)
class Models:
    """The parity models and the aten op packets each dispatched ('aten.mm'), and where they came
    from. `source` is '' when no parity results were found (then `why` says where it looked)."""

    ops: dict[str, frozenset[str]] = field(default_factory=dict)  # model -> packets
    source: str = ""  # "this run", or "models_from DIR (run RUN_ID)"
    lower_bound: frozenset[str] = frozenset()  # models counted from the truncated ops dict
    unrecorded: frozenset[str] = frozenset()  # parity models with no ops record in any case
    why: str = ""  # why there are none, or why models_from could not be used

    @property
    def measured(self) -> bool:
        return bool(self.ops)

    def using(self, packets: Iterable[str]) -> list[str]:
        wanted = set(packets)
        return sorted(m for m, ops in self.ops.items() if ops & wanted)

    def describe(self) -> str:
        """Where the models come from and how far to trust the counts, for a caption."""
        if not self.measured:
            return self.why or "no parity results"
        text = f"{fmt.plural(len(self.ops), 'parity model')} from {self.source}"
        if self.lower_bound:
            text += (
                f"; {len(self.lower_bound)} of them recorded only their {TRUNCATED_OPS} most "
                "frequent ops (stored before op_names), so counts may be lower bounds"
            )
        if self.unrecorded:
            text += f"; {fmt.plural(len(self.unrecorded), 'model')} recorded no ops (not counted)"
        if self.why:
            text += f"; {self.why}"
        return text


def parity_model(r: Result) -> str:
    """A parity case's model, as the parity section names it: 'hf/llama'."""
    p = r.case.params
    return f"{p.get('source', '?')}/{p.get('model', '?')}"


def model_ops(results: Iterable[Result], source: str) -> Models:
    """Per parity model, the union over its cases of the op packets it dispatched: op_names where
    recorded, else the keys of the (truncated) ops dict ('aten.mm@cpu' -> 'aten.mm')."""
    ops: dict[str, set[str]] = defaultdict(set)
    exact: set[str] = set()  # models with op_names in some case: that is their whole set
    truncated: set[str] = set()
    seen: set[str] = set()
    for r in results:
        if r.case.suite != PARITY or r.case.params.get("source") == "unavailable":
            continue
        model = parity_model(r)
        seen.add(model)
        record = r.diagnostics.get("ops")
        if not isinstance(record, dict):
            continue
        names = record.get("op_names")
        if isinstance(names, list):
            ops[model].update(str(n) for n in names)
            exact.add(model)
        elif isinstance(record.get("ops"), dict) and record["ops"]:
            ops[model].update(str(k).split("@", 1)[0] for k in record["ops"])
            if len(record["ops"]) >= TRUNCATED_OPS:  # fewer: nothing was cut
                truncated.add(model)
    return Models(
        {m: frozenset(v) for m, v in ops.items() if v},
        source,
        frozenset(truncated - exact),
        frozenset(seen - set(ops)),
    )


def models_from_option(run: RunView) -> str | None:
    """The ops suite's `models_from` option as the run recorded it (its config's options), or a
    case's params."""
    options = (run.record.config or {}).get("options") or {}
    given = options.get("models_from") if isinstance(options, dict) else None
    if not given:
        given = next(
            (
                r.case.params["models_from"]
                for r in run.in_suite(SUITE)
                if r.case.params.get("models_from")
            ),
            None,
        )
    return str(given) if given else None


def _locate(ref: str) -> tuple[Path, str]:
    """(store path, run id or '') of 'DIR', 'DIR/trainready.db', 'DIR:RUN_ID' or a run's own
    directory 'DIR/RUN_ID' (the one holding its logs and reports)."""
    path, run_id = Path(ref).expanduser(), ""
    if ":" in ref and not path.exists():
        head, _, run_id = ref.rpartition(":")
        path = Path(head).expanduser()
    if path.is_dir() and not (path / DB_NAME).exists() and (path.parent / DB_NAME).exists():
        return path.parent, run_id or path.name
    return path, run_id


def _stamp(path: Path) -> tuple:
    """What changes when the store does (its file and its write-ahead log)."""
    db = path if path.suffix == ".db" else path / DB_NAME
    out = []
    for f in (db, db.with_name(db.name + "-wal")):
        try:
            st = os.stat(f)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


@lru_cache(maxsize=8)
def _load(path: str, run_id: str, stamp: tuple) -> tuple[str, tuple[Result, ...]]:
    del stamp  # the cache key only: a store written since is read again
    with Store(path, create=False) as store:
        if run_id:
            record = store.get_run(run_id)
            results = store.results(record.run_id)
            return record.run_id, tuple(r for r in results if r.case.suite == PARITY)
        for record in reversed(store.list_runs()):  # the latest run with parity results
            results = [r for r in store.results(record.run_id) if r.case.suite == PARITY]
            if results:
                return record.run_id, tuple(results)
        raise StoreError(f"no run with parity results in {store.db_path}")


def load_parity(ref: str) -> tuple[str, list[Result]]:
    """(run id, parity results) of the run `ref` names (see the module's doc for the forms);
    StoreError when there is none, or it holds no parity results."""
    path, run_id = _locate(ref)
    found_id, results = _load(str(path), run_id, _stamp(path))
    if not results:
        raise StoreError(f"run {found_id} in {path} has no parity results")
    return found_id, list(results)


def models(run: RunView) -> Models:
    """The parity models the ops suite's blockers are ranked by: those of the run `models_from`
    names, else this run's own parity results; none (and why) when neither has any."""
    ref = models_from_option(run)
    problem = ""
    if ref:
        try:
            run_id, results = load_parity(ref)
        except (StoreError, OSError) as e:
            problem = f"models_from {ref} could not be used ({str(e).splitlines()[0]})"
        else:
            found = model_ops(results, f"models_from {ref} (run {run_id})")
            if found.measured:
                return found
            problem = f"models_from {ref} (run {run_id}): no parity case recorded its ops"
    own = run.in_suite(PARITY)
    if own:
        found = model_ops(own, "this run's parity results")
        if found.measured:
            return Models(found.ops, found.source, found.lower_bound, found.unrecorded, problem)
        why = "this run's parity cases recorded no ops"
        return Models(why="; ".join(filter(None, [problem, why])))
    why = "no parity results in this run" + ("" if ref else ", and no models_from option")
    return Models(why="; ".join(filter(None, [problem, why])))


# --- coverage -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """One direction of one entry: the dtypes whose every judged case (every form) passed, and
    the dtypes judged that did not."""

    passed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    @property
    def measured(self) -> bool:
        return bool(self.passed or self.failed)

    def text(self) -> str:
        """'fp32, bf16', 'fp32 (not bf16)', 'none (not fp32, bf16)', or 'not measured'."""
        if not self.measured:
            return NOT_MEASURED
        shown = ", ".join(self.passed) or "none"
        return shown + (f" (not {', '.join(self.failed)})" if self.failed else "")

    def to_json(self) -> dict[str, Any]:
        return {"passed": list(self.passed), "failed": list(self.failed), "text": self.text()}


def _tally(items: list[tuple[Case, Result | None]], direction: str) -> Tally:
    by_dtype: dict[str, list[str]] = defaultdict(list)
    for case, r in sorted(items, key=lambda it: _order(it[0])):
        if _parts(case)[4] == direction and judged(r):
            by_dtype[_parts(case)[3]].append(_status((case, r)))
    passed = tuple(d for d, s in by_dtype.items() if all(x == "pass" for x in s))
    failed = tuple(d for d in by_dtype if d not in passed)
    return Tally(passed, failed)


@dataclass
class EntryCoverage:
    """One OpInfo entry (op + variant) over its dtypes, directions and forms."""

    entry: str
    op: str
    variant: str
    cases: list[str]  # case ids, planned ones without a result included
    statuses: dict[str, int]  # status (not_run for a planned case without result) -> cases
    fwd: Tally
    bwd: Tally
    aten: dict[str, str]  # every overload dispatched -> its worst class over the cases
    worst_class: str | None  # None: no case measured a dispatch class
    first_error: str  # '' when no case failed or was unsupported
    first_error_case: str
    closer_than_cpu: list[str]  # 'bf16/fwd' ...: closer to float64 than the CPU, every tensor
    unsupported: dict[str, int]  # kind -> cases
    skipped: dict[str, int]  # kind -> cases
    blocking: list[str]  # why it blocks models ('fail_numerics', 'fallback' ...); [] if not
    blocking_overloads: list[str]  # the overloads classed missing/fallback/roundtrip
    judged: int = 0  # cases that count for or against the device (`judged`)
    not_passing: int = 0  # of those, the ones that did not pass
    models: list[str] | None = None  # parity models dispatching it; None: not measured
    via: list[str] = field(default_factory=list)  # the packets those models matched on

    matched: list[str] = field(default_factory=list)  # packets models are matched on

    @property
    def packets(self) -> list[str]:
        return sorted({packet(o) for o in [*self.aten, *self.blocking_overloads]})

    def class_text(self) -> str:
        return self.worst_class or NOT_MEASURED

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "op": self.op,
            "variant": self.variant,
            "cases": self.cases,
            "statuses": self.statuses,
            "fwd": self.fwd.to_json(),
            "bwd": self.bwd.to_json(),
            "worst_class": self.worst_class,
            "aten": self.aten,
            "packets": self.packets,
            "matched_packets": self.matched,
            "first_error": self.first_error,
            "first_error_case": self.first_error_case,
            "closer_than_cpu": self.closer_than_cpu,
            "unsupported": self.unsupported,
            "skipped": self.skipped,
            "blocking": self.blocking,
            "blocking_overloads": self.blocking_overloads,
            "judged": self.judged,
            "not_passing": self.not_passing,
            "models": self.models,
            "model_count": None if self.models is None else len(self.models),
            "models_via": self.via,
        }


def _own(op: str, overload: str) -> bool:
    """Whether `overload` is the op itself: 'aten::add_.Tensor' of add, 'aten::conv2d' of
    nn.functional.conv2d."""
    name = packet(overload).split(".", 1)[-1]
    return name.strip("_") == op.rsplit(".", 1)[-1].strip("_")


def common_overloads(groups: Iterable[list[tuple[Case, Result | None]]]) -> set[str]:
    """The overloads more than COMMON_SHARE of the entries with a dispatch record dispatched
    (none below COMMON_MIN_ENTRIES such entries)."""
    seen = [{o for _, r in items for o in _aten(r)} for items in groups]
    seen = [s for s in seen if s]
    if len(seen) < COMMON_MIN_ENTRIES:
        return set()
    counts = Counter(o for s in seen for o in s)
    return {o for o, n in counts.items() if n > COMMON_SHARE * len(seen)}


def _entry(
    name: str,
    items: list[tuple[Case, Result | None]],
    found: Models,
    common: set[str] | frozenset[str] = frozenset(),
) -> EntryCoverage:
    items = sorted(items, key=lambda it: _order(it[0]))
    _, op, variant, *_ = _parts(items[0][0])
    statuses = Counter(_status(it) for it in items)
    aten: dict[str, str] = {}
    unsupported: Counter = Counter()
    skipped: Counter = Counter()
    closer, missing = [], []
    for case, r in items:
        if r is None:
            continue
        for overload, cls in _aten(r).items():
            aten[overload] = worst_class([cls, aten.get(overload, cls)]) or cls
        if r.status == "unsupported":
            unsupported[_kind(r, "unsupported")] += 1
            if r.diagnostics.get("unsupported") == "missing":
                missing.append(_no_kernel(r) or "")
        if r.status == "skipped":
            skipped[_kind(r, "skipped")] += 1
        if r.diagnostics.get("closer_than_cpu") is True:
            _, _, _, dtype, direction, form = _parts(case)
            closer.append(f"{dtype}/{direction}" + ("" if form == "function" else f"/{form}"))
    classes = list(aten.values()) + (["missing"] if missing else [])
    worst = worst_class(classes)
    blocking_overloads = sorted(
        {o for o, c in aten.items() if c in BLOCKING_CLASSES} | {o for o in missing if o}
    )
    # Failing cases first (they are the device's errors), then the unsupported ones.
    bad = [(c, r) for c, r in items if r is not None and r.status in FAILING]
    bad += [(c, r) for c, r in items if r is not None and r.status == "unsupported" and judged(r)]
    first_case, first_error = "", ""
    if bad:
        case, r = bad[0]
        first_case = case.id
        first_error = clip(reason(r) or r.status, ERROR_CHARS)
    blocking = [s for s in STATUSES if s in FAILING and statuses.get(s)]
    blocking += [f"unsupported ({k})" for k in UNSUPPORTED_KINDS if unsupported.get(k)]
    blocking += [
        f"unsupported ({k})"
        for k in unsupported
        if k not in UNSUPPORTED_KINDS and k not in NOT_THE_DEVICES
    ]
    blocking += [c for c in BLOCKING_CLASSES if c in aten.values() and c not in ("missing",)]
    if (missing or "missing" in aten.values()) and "unsupported (missing)" not in blocking:
        blocking.append("missing")
    found_counts = dict(statuses)
    row = EntryCoverage(
        entry=name,
        op=op,
        variant=variant,
        cases=[c.id for c, _ in items],
        statuses={s: found_counts[s] for s in [*STATUSES, NOT_RUN] if found_counts.get(s)},
        fwd=_tally(items, "fwd"),
        bwd=_tally(items, "bwd"),
        aten=dict(sorted(aten.items())),
        worst_class=worst,
        first_error=first_error,
        first_error_case=first_case,
        closer_than_cpu=closer,
        unsupported=dict(unsupported),
        skipped=dict(skipped),
        blocking=blocking,
        blocking_overloads=blocking_overloads,
        judged=sum(judged(r) for _, r in items),
        not_passing=sum(judged(r) and _status((c, r)) != "pass" for c, r in items),
    )
    row.matched = sorted(
        {packet(o) for o in aten if o not in common or _own(op, o)}
        | {packet(o) for o in blocking_overloads}
    )
    if found.measured:
        row.models = found.using(row.matched)
        row.via = sorted(p for p in row.matched if any(p in ops for ops in found.ops.values()))
    return row


@dataclass
class Measured:
    """What measured what, over how many of the suite's cases."""

    cases: int  # with a result
    not_run: int
    numerics: int  # cases that judged samples against float64
    invariants: int  # cases that judged samples by invariants
    invariants_why: list[str]
    reference_invalid: int
    worst_over_allowance: float | None  # the largest over the passing numerics cases
    dispatch: int  # cases whose dispatch classes something measured
    dispatch_sources: dict[str, int]
    dispatcher_counts: int  # cases with fallback/missing/roundtrip_ops in their metrics
    closer_than_cpu: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _reached(r: Result) -> bool:
    """Whether the case judged any sample (its `samples` metric; without one, a verdict)."""
    samples = r.metrics.get("samples")
    if finite(samples):
        return samples > 0
    return r.status in ("pass", "fail_numerics")


def _measured(results: list[Result], not_run: int) -> Measured:
    judged_by = Counter(str(r.diagnostics.get("judged") or "") for r in results if _reached(r))
    why = Counter(
        str(r.diagnostics.get("judged_why"))
        for r in results
        if _reached(r)
        and r.diagnostics.get("judged") == "invariants"
        and r.diagnostics.get("judged_why")
    )
    ratios = [
        float(r.metrics["worst_over_allowance"])
        for r in results
        if r.status == "pass" and finite(r.metrics.get("worst_over_allowance"))
    ]
    sources = Counter(
        str(r.diagnostics.get("dispatch_source") or "unrecorded")
        for r in results
        if dispatch_measured(r)
    )
    return Measured(
        cases=len(results),
        not_run=not_run,
        numerics=judged_by.get("numerics", 0),
        invariants=judged_by.get("invariants", 0),
        invariants_why=[w for w, _ in why.most_common(3)],
        reference_invalid=sum(
            r.diagnostics.get("judged") == "reference_invalid"
            or r.diagnostics.get("skipped") == "reference_invalid"
            for r in results
        ),
        worst_over_allowance=max(ratios) if ratios else None,
        dispatch=sum(sources.values()),
        dispatch_sources=dict(sources.most_common()),
        dispatcher_counts=sum(
            any(k in r.metrics for k in ("fallback_ops", "missing_ops", "roundtrip_ops"))
            for r in results
        ),
        closer_than_cpu=sum(r.diagnostics.get("closer_than_cpu") is True for r in results),
    )


@dataclass
class Blocker:
    rank: int
    entry: EntryCoverage
    models: list[str] | None  # None: no parity results to rank by
    cleared: int | None  # models with no blocker left once blockers 1..rank are fixed

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "entry": self.entry.entry,
            "why": self.entry.blocking,
            "overloads": self.entry.blocking_overloads,
            "models": self.models,
            "model_count": None if self.models is None else len(self.models),
            "models_via": self.entry.via,
            "cleared_cumulative": self.cleared,
            "not_passing_cases": self.entry.not_passing,
            "first_error": self.entry.first_error,
            "first_error_case": self.entry.first_error_case,
        }


def blockers(entries: list[EntryCoverage], found: Models) -> list[Blocker]:
    """The entries that block models, most parity models first (then the most cases not passing,
    the worst class, the name); without parity results, by failures only. `cleared`: how many of
    the models these blockers hold up would have none left once the first k are fixed."""
    held = [e for e in entries if e.blocking]
    if found.measured:
        held.sort(
            key=lambda e: (-len(e.models or []), -e.not_passing, class_rank(e.worst_class), e.entry)
        )
    else:
        held.sort(key=lambda e: (-e.not_passing, class_rank(e.worst_class), e.entry))
    out = []
    blocked_by: dict[str, set[str]] = defaultdict(set)  # model -> blocking entries it uses
    for e in held:
        for m in e.models or []:
            blocked_by[m].add(e.entry)
    fixed: set[str] = set()
    for i, e in enumerate(held, 1):
        fixed.add(e.entry)
        cleared = sum(bool(b) and b <= fixed for b in blocked_by.values())
        out.append(
            Blocker(i, e, e.models if found.measured else None, cleared if found.measured else None)
        )
    return out


@dataclass
class Coverage:
    """The ops suite's results in one run, as the report shows them."""

    entries: list[EntryCoverage]
    blockers: list[Blocker]
    models: Models
    measured: Measured
    counts: dict[str, int]  # status -> cases (not_run included)
    unsupported: dict[str, int]  # kind -> cases
    skipped: dict[str, int]  # kind -> cases
    host_overloads: dict[str, str]  # overload -> fallback | roundtrip
    on_cpu: bool
    judged: int = 0  # cases that count for or against the device (`judged`)
    common: list[str] = field(default_factory=list)  # `common_overloads`: not matched to models

    @property
    def passed(self) -> int:
        return self.counts.get("pass", 0)

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.judged if self.judged else None

    def overloads(
        self, classes: Iterable[str] = BLOCKING_CLASSES
    ) -> list[tuple[str, str, list[str]]]:
        """(overload, class, entries) of every overload of `classes`, the worst class first."""
        wanted = set(classes)
        found: dict[str, tuple[str, list[str]]] = {}
        for e in self.entries:
            for o, c in e.aten.items():
                if c in wanted:
                    cls = worst_class([c, found[o][0]]) if o in found else c
                    found[o] = (cls or c, [*found.get(o, ("", []))[1], e.entry])
            if "missing" in wanted:
                for o in e.blocking_overloads:
                    if o not in e.aten:
                        found[o] = ("missing", [*found.get(o, ("", []))[1], e.entry])
        return sorted(
            ((o, c, sorted(set(es))) for o, (c, es) in found.items()),
            key=lambda x: (class_rank(x[1]), x[0]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "judged": self.judged,
            "passed": self.passed,
            "pass_rate": self.pass_rate,
            "unsupported": self.unsupported,
            "skipped": self.skipped,
            "measured": self.measured.to_json(),
            "models": {
                "source": self.models.source or None,
                "count": len(self.models.ops),
                "lower_bound": sorted(self.models.lower_bound),
                "unrecorded": sorted(self.models.unrecorded),
                "note": self.models.describe(),
                "ops": {m: sorted(ops) for m, ops in sorted(self.models.ops.items())},
            },
            "host_overloads": self.host_overloads,
            "common_overloads": self.common,
            "overloads": [
                {"overload": o, "class": c, "entries": es} for o, c, es in self.overloads()
            ],
            "entries": [e.to_json() for e in self.entries],
            "blockers": [b.to_json() for b in self.blockers],
        }


def _items(run: RunView) -> list[tuple[Case, Result | None]]:
    return [(r.case, r) for r in run.in_suite(SUITE)] + [(c, None) for c in run.not_run_in(SUITE)]


def coverage(run: RunView, found: Models | None = None) -> Coverage:
    """The run's ops cases by entry, its blockers and what measured them; `found`: the parity
    models to rank by (default: `models(run)`, which reads models_from)."""
    items = _items(run)
    found = models(run) if found is None else found
    groups: dict[str, list[tuple[Case, Result | None]]] = defaultdict(list)
    for case, r in items:
        groups[_parts(case)[0]].append((case, r))
    common = common_overloads(groups.values())
    entries = [_entry(name, its, found, common) for name, its in sorted(groups.items())]
    results = [r for _, r in items if r is not None]
    counts = Counter(_status(it) for it in items)
    host = {o: c for e in entries for o, c in e.aten.items() if c in HOST_CLASSES}
    return Coverage(
        entries=entries,
        blockers=blockers(entries, found),
        models=found,
        measured=_measured(results, sum(r is None for _, r in items)),
        counts={s: counts[s] for s in [*STATUSES, NOT_RUN] if counts.get(s)},
        unsupported=dict(
            Counter(_kind(r, "unsupported") for r in results if r.status == "unsupported")
        ),
        skipped=dict(Counter(_kind(r, "skipped") for r in results if r.status == "skipped")),
        host_overloads=dict(sorted(host.items())),
        on_cpu=str(run.record.device).split(":", 1)[0] == "cpu",
        judged=sum(judged(r) for _, r in items),
        common=sorted(common),
    )


# --- blocks -------------------------------------------------------------------------------------


def _names(models: list[str] | None) -> str:
    if models is None:
        return NOT_MEASURED
    shown = models[:MODELS_SHOWN]
    more = len(models) - len(shown)
    return ", ".join(shown) + (f" (+{more})" if more > 0 else "")


def _kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


def _count_or_text(value: object) -> str:
    return value if isinstance(value, str) else fmt.number(value)  # type: ignore[arg-type]


def _statuses(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt.status(str(s)) for s in value)
    return fmt.status(str(value))


def _unsupported_note(kinds: dict[str, int]) -> str:
    """'missing 2, dtype 1; counted against the device', with the kinds that are not the
    device's (op_db does not import here) named apart."""
    mine = {k: n for k, n in kinds.items() if k not in NOT_THE_DEVICES}
    other = {k: n for k, n in kinds.items() if k in NOT_THE_DEVICES}
    parts = [f"{_kinds(mine)}: counted against the device"] if mine else []
    if other:
        parts.append(f"{_kinds(other)}: op_db does not import here, not counted")
    return "; ".join(parts) or "none"


def stats(cov: Coverage, prefix: str = "") -> Stats:
    """The counts at the top: judged and passing cases, failures, unsupported and skipped by kind,
    the overloads that left the device, cases closer to float64 than the CPU."""
    failing = {s: n for s, n in cov.counts.items() if s in FAILING}
    entries_ok = sum(1 for e in cov.entries if e.judged and e.not_passing == 0)
    tiles = [
        Stat(
            f"{prefix}ops cases passing",
            cov.pass_rate if cov.pass_rate is not None else NOT_MEASURED,
            lambda v: fmt.percent(v) if isinstance(v, float) else str(v),
            f"{cov.passed} of {fmt.plural(cov.judged, 'judged case')}"
            + (f" ({cov.counts[NOT_RUN]} not run)" if cov.counts.get(NOT_RUN) else ""),
        ),
        Stat(
            f"{prefix}ops entries passing",
            entries_ok,
            fmt.number,
            f"of {fmt.plural(len(cov.entries), 'entry', 'entries')} (op + variant): every judged case",
        ),
        Stat(
            f"{prefix}failing cases",
            sum(failing.values()),
            fmt.number,
            _kinds(failing) or "none",
        ),
        Stat(
            f"{prefix}unsupported cases",
            sum(cov.unsupported.values()),
            fmt.number,
            _unsupported_note(cov.unsupported),
        ),
        Stat(
            f"{prefix}skipped cases",
            sum(cov.skipped.values()),
            fmt.number,
            (_kinds(cov.skipped) + "; not the device's, not counted") if cov.skipped else "none",
        ),
        host_stat(cov, prefix),
        Stat(
            f"{prefix}closer to float64 than the CPU",
            cov.measured.closer_than_cpu,
            fmt.number,
            "cases where the device's result beat the CPU's same-dtype result on every tensor",
        ),
    ]
    return Stats(tiles)


def host_stat(cov: Coverage, prefix: str = "") -> Stat:
    label = f"{prefix}overloads on the host"
    if not cov.measured.dispatch:
        note = (
            "the device is the CPU: nothing to fall back from"
            if cov.on_cpu
            else "no case measured dispatch classes"
        )
        return Stat(label, NOT_MEASURED if not cov.on_cpu else "n/a", fmt.text, note)
    ops = sorted(cov.host_overloads)
    shown = ", ".join(ops[:4]) + (f" (+{len(ops) - 4})" if len(ops) > 4 else "")
    note = f"fallback or round-trip, dispatch classes measured in {fmt.plural(cov.measured.dispatch, 'case')}"
    return Stat(label, len(ops), fmt.number, note + (f": {shown}" if shown else ""))


def measured_text(cov: Coverage, prefix: str = "") -> Text:
    """What was measured, over how many cases: said once, so every 'not measured' below reads."""
    m = cov.measured
    total = fmt.plural(m.cases, "ops case")
    lines = [
        f"{prefix}{total} with a result"
        + (f", {m.not_run} planned without one" if m.not_run else "")
        + f", over {fmt.plural(len(cov.entries), 'entry', 'entries')}."
    ]
    numerics = f"Numerics: against float64 in {fmt.plural(m.numerics, 'case')}"
    if m.worst_over_allowance is not None:
        numerics += (
            f" (the worst passing case at {fmt.number(m.worst_over_allowance)} of its allowance)"
        )
    numerics += f"; by invariants in {m.invariants}"
    if m.invariants_why:
        numerics += f" ({'; '.join(m.invariants_why)})"
    numerics += f"; not judged, op_db marking the CPU a wrong reference, in {m.reference_invalid}."
    lines.append(numerics)
    if m.dispatch:
        sources = "; ".join(f"{s} ({n})" for s, n in list(m.dispatch_sources.items())[:2])
        lines.append(
            f"Dispatch classes of every aten overload: measured in {m.dispatch} of {total} "
            f"({sources}); {NOT_MEASURED} in the other {m.cases - m.dispatch}."
        )
    else:
        why = "the device is the CPU" if cov.on_cpu else "no case recorded a dispatcher's classes"
        lines.append(f"Dispatch classes: {NOT_MEASURED} in any case ({why}).")
    lines.append(
        f"Closer to float64 than the CPU's own same-dtype result, on every tensor: "
        f"{fmt.plural(m.closer_than_cpu, 'case')}."
    )
    models = f"Parity models: {cov.models.describe()}"
    if cov.common and cov.models.measured:
        shown = ", ".join(cov.common[:4]) + (
            f" (+{len(cov.common) - 4})" if len(cov.common) > 4 else ""
        )
        models += (
            f"; overloads most entries dispatched tie no entry to a model but their own op: {shown}"
        )
    lines.append(models + ".")
    return Text("\n".join(lines))


def coverage_table(cov: Coverage, prefix: str = "") -> Table:
    """One row per entry; HTML filters it by status and by dispatch class."""
    rows = [
        [
            e.entry,
            e.fwd.text(),
            e.bwd.text(),
            e.class_text(),
            [s for s in e.statuses],
            len(e.cases),
            NOT_MEASURED if e.models is None else len(e.models),
            e.first_error and f"{e.first_error_case.split('/', 1)[-1]}: {e.first_error}",
            ", ".join(e.closer_than_cpu),
        ]
        for e in cov.entries
    ]
    columns = [
        Column("entry"),
        Column("fwd dtypes passing"),
        Column("bwd dtypes passing"),
        Column("dispatch class (worst)", facet=True),
        Column("statuses", "status", _statuses),
        num("cases"),
        num("parity models", _count_or_text),
        Column("first error"),
        Column("closer than CPU"),
    ]
    caption = (
        f"{prefix}Ops coverage by entry (op + variant): a dtype passes a direction when every "
        "judged case of it (function, in-place, out) passes; the worst dispatch class over the "
        "aten overloads it dispatched (missing > fallback > roundtrip > composite > kernel > "
        f"unknown); parity models that dispatched any of them ({cov.models.describe()})"
    )
    return Table(columns, rows, caption, drill_down=True, empty=f"{prefix}No ops case ran.")


def blockers_table(cov: Coverage, prefix: str = "") -> Table:
    ranked = cov.models.measured
    rows = [
        [
            b.rank,
            b.entry.entry,
            ", ".join(b.entry.blocking),
            ", ".join(b.entry.blocking_overloads) or None,
            *([len(b.models or []), _names(b.models), b.cleared] if ranked else []),
            b.entry.not_passing,
            b.entry.first_error,
        ]
        for b in cov.blockers
    ]
    columns = [
        num("rank"),
        Column("entry"),
        Column("why"),
        Column("overloads off the device kernel"),
        *(
            [num("parity models"), Column("models"), num("models cleared by fixing 1..rank")]
            if ranked
            else []
        ),
        num("cases not passing"),
        Column("first error"),
    ]
    if ranked:
        caption = (
            f"{prefix}Blockers: entries that fail, are unsupported or missing, fall back to the host "
            "or make host round-trips, by the parity models that dispatched any of their aten "
            "overloads; 'cleared': models whose every blocker is among the first k "
            f"({cov.models.describe()})"
        )
    else:
        caption = (
            f"{prefix}Blockers: entries that fail, are unsupported or missing, fall back to the host "
            f"or make host round-trips, ranked by failures only: {cov.models.describe()}"
        )
    empty = f"{prefix}No blocker: every judged ops case passed on a device kernel."
    return Table(columns, rows, caption, drill_down=len(rows) > 20, empty=empty)


def overloads_table(cov: Coverage, prefix: str = "") -> Table:
    """The aten overloads the device did not run on its own kernel, with the entries and models."""
    rows = []
    for o, c, es in cov.overloads():
        users = cov.models.using([packet(o)]) if cov.models.measured else None
        rows.append([o, c, len(es), _names(es), NOT_MEASURED if users is None else len(users)])
    columns = [
        Column("overload"),
        Column("class", facet=True),
        num("entries"),
        Column("e.g."),
        num("parity models", _count_or_text),
    ]
    caption = f"{prefix}Aten overloads missing, falling back or making host round-trips"
    if not cov.measured.dispatch:
        empty = f"{prefix}Dispatch classes {NOT_MEASURED}: no overload could be classed."
    else:
        empty = (
            f"{prefix}No aten overload was missing, fell back or made a host round-trip (over "
            f"{fmt.plural(cov.measured.dispatch, 'case')} measured)."
        )
    return Table(columns, rows, caption, drill_down=len(rows) > 20, empty=empty)


def section(report: Report, suite: str) -> list[Block]:
    blocks: list[Block] = []
    for run in report.runs:
        if not run.in_suite(SUITE) and not run.not_run_in(SUITE):
            continue
        prefix = f"{run.label}: " if report.multi else ""
        cov = coverage(run)
        blocks += [
            stats(cov, prefix),
            measured_text(cov, prefix),
            blockers_table(cov, prefix),
            overloads_table(cov, prefix),
            coverage_table(cov, prefix),
        ]
    return blocks


def headlines(run: RunView) -> list[Stat]:
    if not run.in_suite(SUITE):
        return []
    cov = coverage(run)
    rate = cov.pass_rate
    top = cov.blockers[:3]
    if top and cov.models.measured:
        named = ", ".join(
            f"{b.entry.entry} ({fmt.plural(len(b.models or []), 'model')})" for b in top
        )
    else:
        named = ", ".join(b.entry.entry for b in top)
    return [
        Stat(
            "ops pass rate",
            rate if rate is not None else NOT_MEASURED,
            lambda v: fmt.percent(v) if isinstance(v, float) else str(v),
            f"{cov.passed} of {fmt.plural(cov.judged, 'judged case')}; skipped not counted",
        ),
        Stat(
            "ops blockers",
            len(cov.blockers),
            fmt.number,
            "entries that fail, are unsupported, fall back or round-trip to the host"
            + (f"; first: {named}" if named else ""),
        ),
    ]


def details(run: RunView) -> dict[str, Any]:
    """Every field of the section, for the JSON report."""
    return coverage(run).to_json()
