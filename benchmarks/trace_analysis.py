"""Trace parse + analyse: time and peak memory, trainready vs HolisticTraceAnalysis, and 1M events.

    python -m benchmarks.trace_analysis [--traces DIR] [--events 1000000] [--repeat 3] [--no-hta]
                                        [--whole-repeat 7] [--baseline DIR] [--whole-only]
                                        [--ranks 4] [--only SUBSTR] [--json OUT]

Not a test (machines are noisy). Every measurement runs in a fresh child process, so peak memory is
that process's own peak RSS (ru_maxrss; HTA's parser workers are separate processes, so its peak
is understated) and nothing is cached between the two tools (the cold numbers parse the JSON).
Times are CPU seconds (user + system, of the process and of the worker processes it waited for),
imports excluded, so a busy shared machine does not skew the ratio; wall time is recorded beside
it, and the load average before and after in the JSON. Each measurement is the best (least CPU)
of `--repeat` runs, for both tools alike: on a shared machine the noise only ever adds time.

- trainready: `load_trace` + the analyses HTA runs below, no more and no fewer (the window
  that leaves out the last profiler step, temporal breakdown, kernel-type breakdown, idle-time
  breakdown, comm/comp overlap, launch statistics), cold (parsing the JSON); and reopened: the
  same through the parsed-column cache (`cache.load_cached`, filled by an earlier process), as
  `trainready explore` reopens a trace;
- HTA (when `holistictraceanalysis` is installed): `TraceAnalysis` load + temporal breakdown,
  kernel-type breakdown, idle-time breakdown, comm/comp overlap, kernel launch statistics. The
  ratio HTA / trainready is the speed-up (target >= 10x);
- a generated trace of N events (default 1M; a training-like mix of ops, launches, kernels,
  memcpys and flow arrows): trainready alone, `load_trace` + every analysis of
  `summary.summary` (steps, hardware rows, FLOPs/MFU, dependencies, critical paths, memory,
  source lines too; target <= 10 s and <= 2 GB);
- whole processes (`--whole-repeat N` rounds per trace, 0: none): the user's command,
  `trainready analyze TRACE` as its console script runs it (the tree's entry module's `main`,
  in whichever layout the tree has; every analysis and the printed tables, output
  to /dev/null) with an empty trace cache (a fresh `TRAINREADY_CACHE_DIR` per run), against a
  fresh `python -c` running HTA's load and five analyses as above; wall time and CPU time of each
  child (its workers included), imports and interpreter start-up included. Output to /dev/null
  is not a terminal, so `analyze` prints plain text there; `trainready_terminal` is the same
  command told it writes to a terminal (TTY_COMPATIBLE=1: rich's tables, as a user at a terminal
  gets them), `terminal_speedup_*` its ratio. The tools run
  interleaved (ours, HTA, HTA, ours, ...) so load on a shared machine falls on all; the speed-up
  is the median of each round's ratio. `--baseline DIR`, another source tree of trainready (an
  earlier revision: `git archive REV | tar -x -C DIR`), adds its `analyze` to every round, the
  same way. Every round also times the floor no `analyze` can go under, in the same
  interleaving: `python -c pass` (the interpreter and site), `python -c "import numpy"` and
  `python -c "import numpy, msgspec, isal.isal_zlib"` (the parse's dependencies), numpy with one
  OpenBLAS thread as `analyze` loads it; per trace,
  `floor_speedup_*` is the median of HTA / the numpy floor: the best ratio any `analyze` could
  reach on that trace on that machine (under 10: 10x HTA is out of reach there), and
  `above_floor_*` our median time over the numpy floor (what trainready itself costs).
  `floor_ratio_*` is the median of our time / the deps floor (python, numpy, msgspec, isal: the
  interpreter plus the imports `analyze` needs). Whole processes run on every trace file in
  `--traces`, largest first. Each trace's `target` (issue #39) says whether it is met: a trace
  file over 1 MB (10**6 bytes) wants `analyze` at least 10x HTA by wall (`speedup_wall`), a
  smaller one at most 1.2x the deps floor by wall (`floor_ratio_wall`); one line at the end
  sums them up (`targets` in the JSON). The `--ranks` directory is not a shared trace: timed,
  not judged.
  `--only SUBSTR` (repeatable) keeps the traces whose name contains one of them. `--ranks N`
  (default 4) adds a directory of N copies of the first trace, each file's distributedInfo
  saying its rank (`ranked_copies`), as a multi-rank job writes them: `analyze DIR` against
  HTA's `TraceAnalysis(trace_dir=DIR)`, which parses the ranks in a process pool (and, as above,
  its five analyses with their default ranks; `analyze` summarises every rank).
  All run with Python's bytecode cache on, in a private `PYTHONPYCACHEPREFIX` filled by one
  unmeasured round (an installed package has its `.pyc` files; a `PYTHONDONTWRITEBYTECODE`
  environment would otherwise recompile trainready's modules in every run while HTA's came
  compiled from pip).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "data" / "traces"
BIG = (
    "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "trace_diff__control__control.json.gz",
    "trace_diff__test__test.json.gz",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz",
    "timeline_analysis__sampled_rank-0.json.gz",
)

# CPU seconds of this process and of the children it waited for (HTA parses in a process pool).
_CPU = """
def cpu():
    import resource
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime
"""

_TRAINREADY = (
    """
import json, resource, sys, time
"""
    + _CPU
    + """
import trainready.profile.columns, trainready.profile.deps, trainready.profile.memory
import trainready.profile.opflops, trainready.profile.source  # imported lazily: not timed
import numpy.ma  # numpy imports it on the first np.unique (HTA's pandas does at import time)
from trainready.profile import analysis as A
from trainready.profile.cache import load_cached
from trainready.profile.summary import summary
from trainready.profile.trace import load_trace
load = load_cached if "--cached" in sys.argv else load_trace
w1, c1 = time.perf_counter(), cpu()
trace = load(sys.argv[1])
w2, c2 = time.perf_counter(), cpu()
if "--summary" in sys.argv:  # every analysis trainready has
    summary(trace)
else:  # the analyses HTA runs, as HTA runs them (the last profiler step left out)
    win = A.window(trace)
    for fn in (A.temporal_breakdown, A.kernel_type_breakdown, A.idle_time_breakdown,
               A.comm_comp_overlap, A.launch_stats):
        fn(trace, win)
w3, c3 = time.perf_counter(), cpu()
print(json.dumps({"parse_cpu_s": c2 - c1, "analyse_cpu_s": c3 - c2, "cpu_s": c3 - c1,
                  "wall_s": w3 - w1, "events": len(trace),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
)

_HTA = (
    """
import json, logging, os, resource, sys, tempfile, time
"""
    + _CPU
    + """
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
w1, c1 = time.perf_counter(), cpu()
path = os.path.abspath(sys.argv[1])
if os.path.isdir(path):  # a multi-rank job's traces: HTA reads each file's rank
    ta = TraceAnalysis(trace_dir=path)
else:
    tmp = tempfile.mkdtemp()
    link = os.path.join(tmp, "rank0.json.gz")
    os.symlink(path, link)
    ta = TraceAnalysis(trace_files={0: link}, trace_dir=tmp)
w2, c2 = time.perf_counter(), cpu()
for fn in (lambda: ta.get_temporal_breakdown(visualize=False),
           lambda: ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True),
           lambda: ta.get_idle_time_breakdown(visualize=False),
           lambda: ta.get_comm_comp_overlap(visualize=False),
           lambda: ta.get_cuda_kernel_launch_stats(visualize=False)):
    try:
        fn()
    except Exception:
        pass
w3, c3 = time.perf_counter(), cpu()
print(json.dumps({"parse_cpu_s": c2 - c1, "analyse_cpu_s": c3 - c2, "cpu_s": c3 - c1,
                  "wall_s": w3 - w1,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
)


def _child(code: str, path: Path, *flags: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path), *flags],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _best(code: str, path: Path, *flags: str, repeat: int = 1, **kw: Any) -> dict[str, Any]:
    """The run of least CPU time out of `repeat` fresh processes (each one's own numbers)."""
    runs = [_child(code, path, *flags, **kw) for _ in range(max(1, repeat))]
    ok = [r for r in runs if "cpu_s" in r]
    return min(ok, key=lambda r: r["cpu_s"]) if ok else runs[-1]


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """Wall and CPU seconds of one child process (with the processes it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          cwd=cwd, env=env)  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall_s": wall, "cpu_s": cpu}


# The floor of a whole `analyze`: the interpreter, then numpy, then every library the parse needs;
# numpy loaded as analyze loads it, with one OpenBLAS thread (trainready.profile.text.run).
_ONE_BLAS_THREAD = "import os; os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')"
FLOORS = {
    "floor_python": "pass",
    "floor_numpy": f"{_ONE_BLAS_THREAD}; import numpy",
    "floor_deps": f"{_ONE_BLAS_THREAD}; import numpy, msgspec, isal.isal_zlib",
}


# `analyze` as on a terminal: rich's tables (ANSI codes and all), still written to /dev/null.
TERMINAL = {"TTY_COMPATIBLE": "1"}


def _analyze_cmd(tree: Path, path: Path) -> list[str]:
    """`trainready analyze PATH` as the console script of the source tree `tree` runs it (`-c`
    imports the package of the cwd first): its entry module's main()."""
    # the console script's module in this layout, in the flat one before it, and before entry.py
    candidates = ("cli/entry.py", "entry.py", "cli.py")
    found = next((c for c in candidates if (tree / "trainready" / c).is_file()), "cli.py")
    entry = "trainready." + found.removesuffix(".py").replace("/", ".")
    code = f"import sys; sys.argv[0] = 'trainready'; from {entry} import main; main()"
    return [sys.executable, "-c", code, "analyze", str(path)]


def _whole(
    path: Path, repeat: int, env: dict[str, str], baseline: Path | None = None
) -> dict[str, Any]:
    """`trainready analyze` and HTA as whole fresh processes, interleaved, `repeat` rounds; and
    the `baseline` source tree's `analyze` in each round when given; and the floors (FLOORS).
    `speedup_*`: the median over rounds of HTA's time / this tree's; `baseline_speedup_*`: the
    same for the baseline's; `floor_speedup_*`: HTA's time / the numpy floor's."""
    plain: dict[str, str] = {}
    tools = {
        "trainready": (_analyze_cmd(REPO, path), REPO, plain),
        "trainready_terminal": (_analyze_cmd(REPO, path), REPO, TERMINAL),
        "hta": ([sys.executable, "-c", _HTA, str(path)], REPO, plain),
    }
    if baseline is not None:
        tools["baseline"] = (_analyze_cmd(baseline, path), baseline, plain)
    for name, code in FLOORS.items():
        tools[name] = ([sys.executable, "-c", code], REPO, plain)
    runs: dict[str, list[dict[str, Any]]] = {who: [] for who in tools}
    for i in range(repeat):
        for who in list(tools)[:: 1 if i % 2 == 0 else -1]:  # who goes first alternates
            with tempfile.TemporaryDirectory() as cache:  # an empty trace cache every run
                cmd, cwd, extra = tools[who]
                runs[who].append(_timed(cmd, cwd, {**env, **extra, "TRAINREADY_CACHE_DIR": cache}))
    row: dict[str, Any] = {}
    for who, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        row[who] = {"wall_s": [r["wall_s"] for r in ok], "cpu_s": [r["cpu_s"] for r in ok]}
        if ok:
            row[who]["median_wall_s"] = statistics.median(row[who]["wall_s"])
            row[who]["median_cpu_s"] = statistics.median(row[who]["cpu_s"])
        if len(ok) < len(rs):
            row[who]["error"] = next(r["error"] for r in rs if "error" in r)
    for who, prefix in (("trainready", ""), ("trainready_terminal", "terminal_"),
                        ("baseline", "baseline_"), ("floor_numpy", "floor_")):  # fmt: skip
        rounds = zip(runs.get(who, []), runs["hta"], strict=False)
        pairs = [(o, h) for o, h in rounds if "error" not in o and "error" not in h]
        for unit in ("wall", "cpu"):
            ratios = [h[f"{unit}_s"] / o[f"{unit}_s"] for o, h in pairs]
            if ratios:
                row[f"{prefix}speedup_{unit}"] = statistics.median(ratios)
                row[f"{prefix}speedup_{unit}_range"] = [min(ratios), max(ratios)]
    rounds = zip(runs["trainready"], runs["floor_deps"], strict=False)
    pairs = [(o, f) for o, f in rounds if "error" not in o and "error" not in f]
    for unit in ("wall", "cpu"):
        if pairs:  # our time over the interpreter and the imports analyze needs, per round
            row[f"floor_ratio_{unit}"] = statistics.median(o[f"{unit}_s"] / f[f"{unit}_s"]
                                                           for o, f in pairs)  # fmt: skip
    rounds = zip(runs["trainready"], runs["floor_numpy"], strict=False)
    pairs = [(o, f) for o, f in rounds if "error" not in o and "error" not in f]
    for unit in ("wall", "cpu"):
        if pairs:  # what trainready costs over python + numpy, per round
            row[f"above_floor_{unit}_s"] = statistics.median(
                o[f"{unit}_s"] - f[f"{unit}_s"] for o, f in pairs
            )
    return row


# Issue #39's targets for a whole `analyze`: a trace file over BIG_FILE_BYTES at least
# HTA_TARGET x HTA by wall; a smaller one at most FLOOR_TARGET x the deps floor by wall.
BIG_FILE_BYTES = 10**6
HTA_TARGET = 10.0
FLOOR_TARGET = 1.2


def target(file_bytes: int, row: dict[str, Any]) -> dict[str, Any]:
    """Whether one trace's whole-process `row` (`_whole`) meets its target: `what` names it,
    `value` is the measured median (None when a side failed: then not met)."""
    if file_bytes > BIG_FILE_BYTES:
        what, value, goal = "speedup_wall", row.get("speedup_wall"), HTA_TARGET
        met = value is not None and value >= goal
    else:
        what, value, goal = "floor_ratio_wall", row.get("floor_ratio_wall"), FLOOR_TARGET
        met = value is not None and value <= goal
    return {"what": what, "goal": goal, "value": value, "met": met}


def targets_line(targets: dict[str, dict[str, Any]]) -> str:
    """One line over every judged trace (name -> `target`): how many met each target, and the
    worst reading of each."""
    parts = []
    for what, goal, worst in (("speedup_wall", HTA_TARGET, min),
                              ("floor_ratio_wall", FLOOR_TARGET, max)):  # fmt: skip
        judged = {n: t for n, t in targets.items() if t["what"] == what}
        if not judged:
            continue
        met = sum(t["met"] for t in judged.values())
        read = {n: t["value"] for n, t in judged.items() if t["value"] is not None}
        text = f"{met}/{len(judged)} {_label(what, goal)}"
        if read:
            name = worst(read, key=read.__getitem__)
            text += f" (worst {read[name]:.2f}x, {name[:40]})"
        parts.append(text)
    total = sum(t["met"] for t in targets.values())
    verdict = "all met" if total == len(targets) else f"{len(targets) - total} not met"
    return f"targets (issue #39): {'; '.join(parts) or 'none judged'}: {verdict}"


def whole_paths(traces: Path, only: list[str] | None) -> list[Path]:
    """The trace files of the whole-process rounds: every .json / .json.gz in `traces`, largest
    first; with `only`, those whose name contains one of its substrings."""
    paths = [p for p in traces.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz"))]
    if only:
        paths = [p for p in paths if any(o in p.name for o in only)]
    return sorted(paths, key=lambda p: (-p.stat().st_size, p.name))


def _bytecode_env(prefix: str) -> dict[str, str]:
    """The environment whole-process runs share: bytecode cached under `prefix` for both tools."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": prefix}


def _has_hta() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import hta.trace_analysis"], capture_output=True)
    return probe.returncode == 0


def generate(path: Path, events: int, seed: int = 0) -> int:
    """Write a Kineto-like trace of about `events` events (gzipped); returns the exact count.

    Per training op: a cpu_op with shapes, a runtime launch, its kernel and the ac2g flow pair
    (5 events); every 8th op also a memcpy. Timestamps in us with ns decimals, as Kineto writes.
    """
    rng = random.Random(seed)
    names = ["aten::mm", "aten::add", "aten::relu", "aten::layer_norm", "aten::softmax"]
    kernels = ["ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel", "layer_norm_kernel"]
    written = 0
    t = 1_700_000_000_000_000.0
    gpu_t = t
    corr = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 '
                '80GB HBM3"}], "traceEvents": [\n')  # fmt: skip
        first = True
        step = 0
        while written < events:
            if corr % 1000 == 0:
                ev = {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                      "pid": 1, "tid": 1, "ts": round(t, 3), "dur": 1000.0, "args": {}}  # fmt: skip
                step += 1
                f.write(("" if first else ",\n") + json.dumps(ev))
                first = False
                written += 1
            corr += 1
            op_dur = rng.uniform(5, 30)
            k_dur = rng.uniform(2, 40)
            gpu_t = max(gpu_t, t + 8) + rng.uniform(0.5, 3)
            batch = [
                {"ph": "X", "cat": "cpu_op", "name": rng.choice(names), "pid": 1, "tid": 1,
                 "ts": round(t, 3), "dur": round(op_dur, 3),
                 "args": {"External id": corr, "Input Dims": [[64, 512], [512, 512]],
                          "Input type": ["float", "float"]}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": round(t + 1, 3), "dur": 4.5, "args": {"External id": corr,
                                                             "correlation": corr}},
                {"ph": "X", "cat": "kernel", "name": rng.choice(kernels), "pid": 0, "tid": 7,
                 "ts": round(gpu_t, 3), "dur": round(k_dur, 3),
                 "args": {"External id": corr, "device": 0, "stream": 7, "correlation": corr,
                          "grid": [128, 1, 1], "block": [256, 1, 1]}},
                {"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": round(t + 1, 3),
                 "cat": "ac2g", "name": "ac2g"},
                {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": round(gpu_t, 3),
                 "cat": "ac2g", "name": "ac2g", "bp": "e"},
            ]  # fmt: skip
            if corr % 8 == 0:
                batch.append(
                    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",
                     "pid": 0, "tid": 7, "ts": round(gpu_t + k_dur + 0.5, 3), "dur": 1.5,
                     "args": {"device": 0, "stream": 7, "correlation": corr, "bytes": 4096}}
                )  # fmt: skip
            gpu_t += k_dur
            t += op_dur + rng.uniform(0.1, 2)
            f.write(",\n" + ",\n".join(json.dumps(e) for e in batch))
            written += len(batch)
        f.write("\n]}\n")
    return written


def _reopen(path: Path, repeat: int) -> dict[str, Any]:
    """trainready reopening a trace through the parsed-column cache (a fresh cache directory:
    one child process fills it, the next ones are measured)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TRAINREADY_CACHE_DIR": cache}
        _child(_TRAINREADY, path, "--cached", env=env)
        return _best(_TRAINREADY, path, "--cached", repeat=repeat, env=env)


def machine() -> dict[str, Any]:
    """Where it ran: CPU model and count, load average (the machine may be shared)."""
    import platform

    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "cpus": os.cpu_count(), "python": platform.python_version(),
            "load_average": os.getloadavg()}  # fmt: skip


def ranked_copies(path: Path, ranks: int, out: Path) -> Path:
    """`ranks` copies of the trace at `path` in the directory `out`, as a multi-rank job writes
    them: `rank{i}.json.gz`, its distributedInfo saying rank i of `ranks`."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    out.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        info = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": ranks}
        with gzip.open(out / f"rank{rank}.json.gz", "wt", compresslevel=6) as f:
            json.dump({**doc, "distributedInfo": info}, f)
    return out


def _whole_processes(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Fill results["whole_process"]: per trace, `_whole` pairs, bytecode cached for both; and
    the same for a directory of `--ranks` copies of the first trace (`ranked_copies`)."""
    results["whole_process"] = {}
    with tempfile.TemporaryDirectory() as prefix:
        env = _bytecode_env(prefix)
        paths = whole_paths(args.traces, args.only)
        names = [p.name for p in paths]
        judged = dict(zip(names, (p.stat().st_size for p in paths), strict=True))
        first = next((args.traces / n for n in BIG if args.traces / n in paths), None)
        if first is not None and args.ranks > 1:  # the first of BIG, as before
            paths.append(ranked_copies(first, args.ranks, Path(prefix) / "ranks"))
            names.append(f"{args.ranks} ranks of {first.name}")
        if paths:
            _whole(paths[-1], 1, env, args.baseline)  # unmeasured: writes every tool's bytecode
        for path, name in zip(paths, names, strict=True):
            row = _whole(path, args.whole_repeat, env, args.baseline)
            if name in judged:
                row["file_bytes"] = judged[name]
                row["target"] = target(judged[name], row)
            results["whole_process"][name] = row
            nan = float("nan")
            lo, hi = row.get("speedup_wall_range", [nan, nan])
            floor = {k: row[k].get("median_wall_s", nan) for k in FLOORS}
            reach = row.get("floor_speedup_wall", nan)
            print(
                f"{name[:40]:40s} whole process: trainready analyze "
                f"{row['trainready'].get('median_wall_s', nan):5.2f} s, HTA "
                f"{row['hta'].get('median_wall_s', nan):5.2f} s wall (medians); "
                f"{row.get('speedup_wall', nan):5.1f}x by wall ({lo:.1f}-{hi:.1f}), "
                f"{row.get('speedup_cpu', nan):5.1f}x by CPU"
                f"; printing for a terminal {row.get('terminal_speedup_wall', nan):.1f}x by wall"
                + (
                    f"; baseline {row['baseline_speedup_wall']:.1f}x by wall, "
                    f"{row['baseline_speedup_cpu']:.1f}x by CPU"
                    if "baseline_speedup_cpu" in row
                    else ""
                )
                + f"\n{'':40s} floor: python {floor['floor_python']:.2f} s, + numpy "
                f"{floor['floor_numpy']:.2f} s, + msgspec, isal {floor['floor_deps']:.2f} s; "
                f"HTA / numpy floor {reach:.1f}x by wall, "
                f"{row.get('floor_speedup_cpu', nan):.1f}x by CPU "
                f"({'10x reachable' if reach >= 10 else '10x out of reach'}); trainready "
                f"{row.get('above_floor_wall_s', nan):.2f} s wall over the numpy floor; "
                f"{row.get('floor_ratio_wall', nan):.2f}x the deps floor"
                + (_target_text(row["target"]) if "target" in row else "; not judged"),  # fmt: skip
                flush=True,
            )
        judged_rows = results["whole_process"].items()
        results["targets"] = {n: r["target"] for n, r in judged_rows if "target" in r}
        if results["targets"]:
            print(targets_line(results["targets"]), flush=True)


def _target_text(t: dict[str, Any]) -> str:
    """'; target >= 10x HTA: met' and the like, for one trace's line."""
    return f"; target {_label(t['what'], t['goal'])}: {'met' if t['met'] else 'NOT met'}"


def _label(what: str, goal: float) -> str:
    return f">= {goal:g}x HTA" if what == "speedup_wall" else f"<= {goal:g}x the floor"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (the best kept)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument(
        "--whole-repeat",
        type=int,
        default=7,
        help="whole-process rounds (trainready analyze, HTA) per trace; 0: none",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another trainready source tree (e.g. `git archive HEAD | tar -x -C DIR`) whose "
        "analyze the whole-process rounds time beside this one's",
    )
    ap.add_argument(
        "--whole-only",
        action="store_true",
        help="only the whole-process comparison (no in-process runs, no 1M events)",
    )
    ap.add_argument(
        "--ranks",
        type=int,
        default=4,
        help="whole processes also on a directory of this many per-rank copies of the first "
        "trace (a multi-rank job's traces; 0 or 1: none)",
    )
    ap.add_argument(
        "--only",
        action="append",
        metavar="SUBSTR",
        help="whole processes: only the traces whose file name contains SUBSTR (repeatable)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    hta = not args.no_hta and _has_hta()
    results: dict[str, Any] = {
        "command": "python -m benchmarks.trace_analysis " + " ".join(sys.argv[1:]),
        "machine_before": machine(),
        "traces": {},
        "generated": None,
    }
    if hta and args.whole_repeat:
        _whole_processes(args, results)
    for name in [] if args.whole_only else BIG:
        path = args.traces / name
        if not path.is_file():
            continue
        ours = _best(_TRAINREADY, path, repeat=args.repeat)
        row: dict[str, Any] = {
            "trainready": ours,
            "trainready_reopen_cached": _reopen(path, args.repeat),
        }
        if hta:
            theirs = _best(_HTA, path, repeat=args.repeat)
            row["hta"] = theirs
            if "cpu_s" in theirs and "cpu_s" in ours:
                row["speedup"] = theirs["cpu_s"] / ours["cpu_s"]
                row["memory_ratio"] = theirs["peak_rss_mb"] / ours["peak_rss_mb"]
                if "cpu_s" in row["trainready_reopen_cached"]:
                    row["speedup_reopen"] = (
                        theirs["cpu_s"] / row["trainready_reopen_cached"]["cpu_s"]
                    )
        results["traces"][name] = row
        line = f"{name[:40]:40s} trainready {ours.get('cpu_s', float('nan')):6.2f} s "
        line += f"{ours.get('peak_rss_mb', float('nan')):5.0f} MB"
        line += f" (reopen {row['trainready_reopen_cached'].get('cpu_s', float('nan')):5.2f} s)"
        if "speedup" in row:
            line += f"   HTA {row['hta']['cpu_s']:6.2f} s {row['hta']['peak_rss_mb']:5.0f} MB"
            line += f"   {row['speedup']:5.1f}x faster ({row.get('speedup_reopen', 0):.0f}x "
            line += f"reopened), {row['memory_ratio']:4.1f}x less memory"
        print(line, flush=True)
    if args.events and not args.whole_only:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "generated.json.gz"
            n = generate(path, args.events)
            ours = _child(_TRAINREADY, path, "--summary")
            ours["events_in_file"] = n
            ours["file_mb"] = path.stat().st_size / 2**20
            results["generated"] = ours
            print(
                f"generated {n:,} events ({ours['file_mb']:.0f} MB gz): "
                f"parse {ours.get('parse_cpu_s', float('nan')):.2f} s + analyse "
                f"{ours.get('analyse_cpu_s', float('nan')):.2f} s = "
                f"{ours.get('cpu_s', float('nan')):.2f} s CPU "
                f"({ours.get('wall_s', float('nan')):.2f} s wall), peak "
                f"{ours.get('peak_rss_mb', float('nan')):.0f} MB (targets 10 s, 2048 MB)"
            )
    results["machine_after"] = machine()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
