"""The all-modalities parity page: the standard preset run in shards, merged, as one markdown page.

    # each shard, on the same machine or another (record nothing: the store has it all)
    trainready run parity --device cpu --preset standard --shard I/8 --jobs 2 --out DIR_I
    # then
    python -m benchmarks.all_modalities DIR_0 ... DIR_7 --out PAGE.md [--allow-partial]
        [--rerun DIR ...]   # cases run again after a judging change: they replace the shards'
        [--extra DIR ...]   # a zoo run apart (its library installed): counted in the types

The page (issue #16's benchmark, `benchmarks/results/cpu-parity-all-modalities.md`) opens with
one row per shard, read from its store: the commit it ran (`git_sha`), when it started, its wall
time (less any stretch of over STOPPED_S in which no case ran: a shard stopped and resumed later
with --resume), cases done of planned and its throughput in cases per minute; then the totals (throughput
over the summed shard wall time, as if the shards ran one after another on one machine); then the
model types (`type_summary`: how many of each zoo's types pass eagerly, compiled and both, and every
type that does not pass, with its reason: issue #16's goal is counted in types); then the
report of the merged run (`trainready merge`, `trainready report -f md`: the verdict, pass rates
by modality and by trait, every case that does not pass with its reason). With --allow-partial, a
shard still missing or unfinished is merged as it stands and the page says so. With --rerun,
cases run again after a judging change (a store each) replace the same cases of the merged run,
and the page lists them with both verdicts.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trainready.core.case import Case, Result
from trainready.core.store import Store
from trainready.reporting.fmt import plural

# A stretch this long with no case running is a stopped run (resumed later), not the run's time.
STOPPED_S = 300.0


@dataclass
class Shard:
    path: Path
    run_id: str
    shard: str
    git_sha: str
    started: float
    wall_s: float
    done: int
    planned: int
    finished: bool

    @property
    def per_min(self) -> float:
        return 60.0 * self.done / self.wall_s if self.wall_s > 0 else float("nan")


def running_wall(start: float, end: float, cases: list[tuple[float, float]]) -> float:
    """Seconds from `start` to `end` less every stretch of over STOPPED_S in which none of
    `cases` ((started, duration) each) was running."""
    stopped, covered = 0.0, start
    for begun, duration in sorted(cases):
        if begun - covered > STOPPED_S:
            stopped += begun - covered
        covered = max(covered, begun + duration)
    return end - start - stopped


def read_shard(path: Path) -> Shard:
    """The latest run of a shard's store, with its wall time (to the last result where the run
    has not finished; a stopped stretch left out: `running_wall`)."""
    con = sqlite3.connect(path / "trainready.db")
    try:
        run_id, created, finished, shard, env, planned = con.execute(
            "select run_id, created_at, finished_at, shard, env, planned from runs "
            "order by created_at desc limit 1"
        ).fetchone()
        cases = con.execute(
            "select started_at, duration_s from results where run_id = ?", (run_id,)
        ).fetchall()
    finally:
        con.close()
    last = max((begun + duration for begun, duration in cases), default=created)
    end = finished if finished is not None else last
    sha = json.loads(env).get("git_sha") or "unknown"
    wall = running_wall(created, end, cases)
    return Shard(path, run_id, shard or "-", sha, created, wall, len(cases), planned or 0,
                 finished is not None)  # fmt: skip


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))


def shard_table(shards: list[Shard]) -> list[str]:
    lines = [
        "| shard | commit | started (UTC) | wall | cases | cases/min |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in sorted(shards, key=lambda s: s.shard):
        state = "" if s.finished else " (unfinished)"
        lines.append(
            f"| {s.shard} | {s.git_sha[:7]} | {_utc(s.started)} | {s.wall_s / 60:.1f} min | "
            f"{s.done} of {s.planned}{state} | {s.per_min:.1f} |"
        )
    done, wall = sum(s.done for s in shards), sum(s.wall_s for s in shards)
    planned = sum(s.planned for s in shards)
    lines.append(
        f"| all | {', '.join(sorted({s.git_sha[:7] for s in shards}))} | | {wall / 3600:.2f} h | "
        f"{done} of {planned} | {60.0 * done / wall if wall else float('nan'):.1f} |"
    )
    return lines


# The zoos whose models are types of the installed transformers (causal LMs and task heads).
TRANSFORMERS = ("hf", "hf_task")
REASON_CHARS = 160


@dataclass
class ModelType:
    zoo: str  # "transformers", or the case source (diffusers, timm, synthetic...)
    name: str
    modality: str
    statuses: dict[str, str]  # mode -> status
    reason: str  # the first failing case's error or reason ("" where every case passes)

    @property
    def passes(self) -> bool:
        return all(s == "pass" for s in self.statuses.values())


def model_types(results: list[dict]) -> list[ModelType]:
    """The parity cases of a merged report (`report -f json`), one entry per model type."""
    types: dict[tuple[str, str], ModelType] = {}
    for r in results:
        p = r["params"]
        source, name = str(p.get("source", "?")), str(p.get("model") or r["name"])
        zoo = "transformers" if source in TRANSFORMERS else source
        if source == "unavailable":  # the one case of a zoo whose library is missing
            zoo, name = r["name"].split("/")[0], "(library not installed)"
        d = r["diagnostics"]
        t = types.setdefault(
            (zoo, name), ModelType(zoo, name, str(d.get("modality") or p.get("modality")), {}, "")
        )
        t.statuses[str(p.get("mode", "-"))] = r["status"]
        if r["status"] != "pass" and not t.reason:
            t.reason = _short(d.get("error") or d.get("reason") or r["status"])
    return sorted(types.values(), key=lambda t: (t.zoo, t.name))


def type_summary(types: list[ModelType]) -> list[str]:
    """Per zoo: types that pass eagerly, compiled and both; then every type that does not."""
    lines = [
        "## Model types",
        "",
        "A type passes when every case of it passes (eager and compiled, fp32).",
        "",
        "| zoo | types | pass eager | pass compiled | pass (every case) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for zoo in sorted({t.zoo for t in types}):
        of = [t for t in types if t.zoo == zoo]

        def passing(mode: str, of: list[ModelType] = of) -> int:
            return sum(t.statuses.get(mode) == "pass" for t in of)

        both = sum(t.passes for t in of)
        lines.append(f"| {zoo} | {len(of)} | {passing('eager')} | {passing('compile')} | {both} |")
    failing = [t for t in types if not t.passes]
    lines += [
        "",
        f"**Types that do not pass ({len(failing)})**, with the first failing case's reason:",
        "",
        "| zoo | type | modality | eager | compiled | reason |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for t in failing:
        reason = t.reason.replace("|", "\\|")
        lines.append(
            f"| {t.zoo} | {t.name} | {t.modality} | {t.statuses.get('eager', '-')} | "
            f"{t.statuses.get('compile', '-')} | {reason} |"
        )
    return lines + [""]


def _trainready(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "trainready", *args], capture_output=True, text=True, check=False
    )
    if proc.returncode not in (0, 1):  # 1: some case did not pass
        sys.exit(f"trainready {' '.join(args[:1])} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


@dataclass
class Rejudged:
    case_id: str
    before: str  # the shard's verdict
    after: str  # the re-run's
    commit: str


def _short(text: object) -> str:
    """A case's reason on one line, at most REASON_CHARS (an ellipsis where cut)."""
    line = " ".join(str(text).split())
    return line[:REASON_CHARS] + ("…" if len(line) > REASON_CHARS else "")


def _verdict(r: Result) -> str:
    text = r.diagnostics.get("error") or r.diagnostics.get("reason")
    return f"{r.status}: {_short(text)}" if text else r.status


def rejudge(merged: Path, reruns: list[Path]) -> list[Rejudged]:
    """Each re-run's results (the latest run of each store) in place of the same cases of the
    merged run: cases of shards run before a change that can alter their verdict, run again
    after it; of re-runs of one case, the last given counts. A re-run case the merged run does
    not have joins its plan only where the merged run has its model type (a type planned eager
    only where its library was missing, say); any other is refused (a re-run never adds a
    model)."""
    store = Store(merged)  # written: the re-run results go in
    run = store.latest_run()
    have = {r.case.id: r for r in store.results(run.run_id)}
    types = {_type(r.case) for r in have.values()} - {None}
    out: dict[str, Rejudged] = {}  # by case: a later re-run of a case replaces an earlier one
    added = 0
    for d in reruns:
        other = Store(d, create=False)
        latest = other.latest_run()
        commit = str(latest.env.get("git_sha") or "unknown")[:7]
        for r in other.results(latest.run_id):
            before = have.get(r.case.id)
            if before is None and _type(r.case) not in types:
                sys.exit(f"re-run {d}: {r.case.id} is not a case of the merged shards")
            if before is None and r.case.id not in out:
                store.add_planned(run.run_id, [r.case])
                added += 1
            shard = _verdict(before) if before else "not planned"
            out[r.case.id] = Rejudged(r.case.id, shard, _verdict(r), commit)
            store.add_result(run.run_id, r)
    if added:
        store.set_planned(run.run_id, (run.planned or len(have)) + added)
    return sorted(out.values(), key=lambda x: x.case_id)


def _type(case: Case) -> tuple[str, str] | None:
    """A parity case's model type (None for a case that names none)."""
    source, model = case.params.get("source"), case.params.get("model")
    return (str(source), str(model)) if source and model else None


def rejudged_table(rows: list[Rejudged]) -> list[str]:
    if not rows:
        return []
    lines = [
        f"**Re-run ({plural(len(rows), 'case')})**: cases whose shard ran before a change that can "
        "alter their verdict (a judging change, or a library the shards' environment lacked), run "
        "again after it; the re-run's verdict replaces the shard's in everything below.",
        "",
        "| case | commit | shard's verdict | re-run's verdict |",
        "| --- | --- | --- | --- |",
    ]
    for x in rows:
        before, after = (v.replace("|", "\\|") for v in (x.before, x.after))
        lines.append(f"| {x.case_id} | {x.commit} | {before} | {after} |")
    return lines + [""]


def _as_json(r: Result) -> dict:
    """A stored result in the shape `report -f json` gives it (what `model_types` reads)."""
    return {"name": r.case.name, "suite": r.case.suite, "params": r.case.params,
            "status": r.status, "diagnostics": r.diagnostics}  # fmt: skip


def extra_runs(dirs: list[Path]) -> tuple[list[dict], list[str]]:
    """The parity results of zoos run apart from the shards (a library the shards' environment
    lacks, installed elsewhere), and a line on each run: its zoos, commit, cases and wall."""
    results, lines = [], []
    for d in dirs:
        store = Store(d, create=False)
        run = store.latest_run()
        got = [_as_json(r) for r in store.results(run.run_id) if r.case.suite == "parity"]
        zoos = sorted({str(r["params"].get("source")) for r in got})
        end = run.finished_at or max((x.started_at or 0) + (x.duration_s or 0)
                                     for x in store.results(run.run_id))  # fmt: skip
        lines.append(
            f"- {', '.join(zoos)} zoo, run apart from the shards (its library installed): "
            f"commit {str(run.env.get('git_sha') or 'unknown')[:7]}, {len(got)} cases, "
            f"{(end - run.created_at) / 60:.1f} min, `{run.command or ''}`"
        )
        results += got
    return results, lines


def page(
    dirs: list[Path],
    allow_partial: bool,
    reruns: list[Path] | None = None,
    extras: list[Path] | None = None,
) -> str:
    shards = [read_shard(d) for d in dirs]
    with tempfile.TemporaryDirectory(prefix="all-modalities-") as tmp:
        merged = Path(tmp) / "merged"
        merge = ["merge", *map(str, dirs), "--out", str(merged)]
        _trainready(*merge, *(["--allow-partial"] if allow_partial else []))
        rejudged = rejudge(merged, reruns or [])
        report = _trainready("report", str(merged), "-f", "md")
        results = json.loads(_trainready("report", str(merged), "-f", "json"))["runs"][0]
    extra, extra_lines = extra_runs(extras or [])
    apart = {str(r["params"].get("source")) for r in extra}
    shard_results = [
        r
        for r in results["results"]
        if r["suite"] == "parity" and r["name"].split("/")[0] not in apart
    ]  # (a zoo run apart replaces the shards' one case saying its library is missing)
    types = model_types(shard_results + extra)
    head = [
        "# Parity over every modality on the CPU: the standard preset, shards merged",
        "",
        "Produced by `python -m benchmarks.all_modalities SHARD_DIRS --out THIS_FILE`, each shard "
        "run as `trainready run parity --device cpu --preset standard --shard I/8 --jobs 2 "
        "--out DIR` on a 2-core machine (throughput: cases over the shards' summed wall time).",
        "",
        *shard_table(shards),
        "",
    ]
    if not all(s.finished for s in shards) or len(shards) < max(
        int(s.shard.split("/")[1]) for s in shards if "/" in s.shard
    ):
        head += ["**Partial**: not every shard has finished; the report covers what ran.", ""]
    head += rejudged_table(rejudged)
    if extra_lines:
        head += ["**Run apart** (counted in Model types; the merged report below is the shards'):"]
        head += [*extra_lines, ""]
    return "\n".join(head + type_summary(types)) + "\n" + report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shards", nargs="+", type=Path, help="the shards' --out directories")
    ap.add_argument("--out", type=Path, required=True, help="the markdown page to write")
    ap.add_argument("--allow-partial", action="store_true", help="merge unfinished shards too")
    ap.add_argument(
        "--rerun",
        type=Path,
        nargs="*",
        default=[],
        help="stores of cases run again after a judging change: their results replace the "
        "shards' (listed on the page, both verdicts)",
    )
    ap.add_argument(
        "--extra",
        type=Path,
        nargs="*",
        default=[],
        help="stores of zoos run apart from the shards (a library their environment lacks): "
        "counted in the model types",
    )
    args = ap.parse_args()
    args.out.write_text(page(args.shards, args.allow_partial, args.rerun, args.extra))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
