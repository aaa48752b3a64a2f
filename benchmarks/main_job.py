"""The main job's wall time, cold and warm compile caches, per suite, measured in one run.

    python -m benchmarks.main_job [--json FILE] [--note TEXT] [-- EXTRA RUN ARGS]

Runs the README's main job, `trainready run all --device cpu --preset quick`, twice in fresh
processes, each into an empty store:

1. cold: every on-disk compile cache pointed at a new empty directory (`compile_cache_env`:
   TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, and TMPDIR, under which inductor keeps the
   precompiled header of its CPU kernels whatever TORCHINDUCTOR_CACHE_DIR says), so every
   compile starts from nothing, as on a fresh machine;
2. warm: the same command again with the caches the cold run filled.

For each run it records the total wall time (process start to exit), the time to the first stored
result (when the progress bar first moves), and per suite the wall span (first case start to last
case end) with the cases' summed durations and status counts; and where the time went, read from
the run's store (`where_time_goes`): parity's cases by mode with the compiled ones' compile time,
flex's compiles, each train process's whole life against its first step and compile, and when
the first case started; and how busy the machine's cores were in each suite's span
(`cores_busy`, from /proc/stat sampled every half second: the whole machine's, so run it on an
otherwise idle host; "unknown" where there is no /proc/stat): the core-seconds a suite left idle
are what scheduling could still use. The target (issue #15) is a cold run
within 300 s on 2 cores with the first result within 15 s; the ratios are of one run against the
other on the same machine, minutes apart.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from trainready.device import compile_cache_env

COMMAND = ["run", "all", "--device", "cpu", "--preset", "quick"]


def _suite_times(db: Path) -> tuple[dict[str, dict], float, dict[str, tuple[float, float]]]:
    """Per suite: wall span, summed case time, counts; the first result's end (epoch); and each
    suite's span as (epoch start, end)."""
    con = sqlite3.connect(db)
    rows = list(con.execute("select suite, status, started_at, duration_s from results"))
    con.close()
    spans: dict[str, list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0])
    counts: dict[str, Counter] = defaultdict(Counter)
    for suite, status, start, dur in rows:
        span = spans[suite]
        span[0], span[1], span[2] = min(span[0], start), max(span[1], start + dur), span[2] + dur
        counts[suite][status] += 1
    first = min((start + dur for _, _, start, dur in rows), default=float("nan"))
    out = {
        s: {
            "wall_s": round(end - start, 1),
            "case_s_summed": round(summed, 1),
            "cases": sum(counts[s].values()),
            "statuses": dict(counts[s]),
        }
        for s, (start, end, summed) in spans.items()
    }
    return out, first, {s: (start, end) for s, (start, end, _) in spans.items()}


def _add(into: dict[str, float], key: str, value: float | None) -> None:
    into[key] = round(into.get(key, 0.0) + (value or 0.0), 1)


def where_time_goes(db: Path, t0: float) -> dict[str, Any]:
    """Where a run's case time went, from what its cases measured: parity's cases by mode (the
    compiled ones' compile time apart), flex's compiles against the rest of its cases, and each
    fresh process of the train suite (its whole life, its first step, the compile in it), and
    when the first case started after the process did at `t0` (start-up, planning, the peak)."""
    con = sqlite3.connect(db)
    rows = list(
        con.execute(
            "select suite, params, metrics, diagnostics, started_at, duration_s from results"
        )
    )
    con.close()
    parity: dict[str, dict[str, float]] = defaultdict(dict)
    flex: dict[str, float] = {}
    train = []
    for suite, params, metrics, diagnostics, _, duration in rows:
        m = json.loads(metrics or "{}")
        if suite == "parity":
            mode = parity[json.loads(params or "{}").get("mode", "?")]
            mode["cases"] = int(mode.get("cases", 0)) + 1
            _add(mode, "case_s", duration)
            _add(mode, "compile_s", m.get("compile_s"))
        elif suite == "flex":
            flex["cases"] = int(flex.get("cases", 0)) + 1
            _add(flex, "case_s", duration)
            _add(flex, "compile_s", m.get("compile_s"))
        elif suite == "train":
            scenarios = json.loads(diagnostics or "{}").get("scenarios") or {}
            for mode, by_name in scenarios.items():
                for name, sc in by_name.items():
                    train.append(
                        {
                            "process": f"{mode} {name}",
                            "process_s": round(sc.get("process_s") or 0.0, 1),
                            "first_step_s": round(sc.get("first_step_s") or 0.0, 2),
                            "compile_s": round(
                                (sc.get("compile") or {}).get("compile_s") or 0.0, 1
                            ),
                        }
                    )
    first_start = min((r[4] for r in rows), default=None)
    return {
        "first_case_started_s": round(first_start - t0, 1) if first_start else None,
        "parity_by_mode": dict(parity),
        "flex": flex,
        "train_processes": train,
    }


class CpuSampler:
    """The machine's busy CPU time (every core, /proc/stat's non-idle jiffies) sampled every
    `interval_s` in a thread while a run goes on: `busy_between(a, b)` is the core-seconds spent
    between two epoch times, interpolated between samples. None where /proc/stat is missing."""

    STAT = Path("/proc/stat")

    def __init__(self, interval_s: float = 0.5):
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _busy_s(self) -> float:
        fields = self.STAT.read_text().split("\n", 1)[0].split()[1:]
        jiffies = [int(f) for f in fields]
        idle = jiffies[3] + (jiffies[4] if len(jiffies) > 4 else 0)  # idle + iowait
        # user..steal (guest time is already in user and nice); steal counts as busy: a core the
        # hypervisor gave away is no capacity a schedule could have used
        return (sum(jiffies[:8]) - idle) / self._tick

    def _loop(self) -> None:
        while True:
            self.samples.append((time.time(), self._busy_s()))
            if self._stop.wait(self.interval_s):
                self.samples.append((time.time(), self._busy_s()))
                return

    def __enter__(self) -> CpuSampler | None:
        if not self.STAT.is_file():
            return None
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()

    def busy_between(self, start: float, end: float) -> float:
        return _at(self.samples, end) - _at(self.samples, start)


def _at(samples: list[tuple[float, float]], t: float) -> float:
    """The busy seconds counter at time t, linear between the samples around it."""
    before = max((s for s in samples if s[0] <= t), default=samples[0])
    after = min((s for s in samples if s[0] >= t), default=samples[-1])
    if after[0] == before[0]:
        return before[1]
    return before[1] + (after[1] - before[1]) * (t - before[0]) / (after[0] - before[0])


def cores_busy(
    sampler: CpuSampler | None, spans: dict[str, tuple[float, float]], cpus: int
) -> dict[str, Any]:
    """Per suite span (epoch start, end): the average number of busy cores and the core-seconds
    left idle; "unknown" without a sampler."""
    if sampler is None or len(sampler.samples) < 2:
        return {s: "unknown" for s in spans}
    out = {}
    for suite, (start, end) in spans.items():
        wall = end - start
        busy = sampler.busy_between(start, end)
        out[suite] = {
            "cores_busy_avg": round(busy / wall, 2) if wall > 0 else None,
            "idle_core_s": round(max(0.0, cpus * wall - busy), 1),
        }
    return out


def run_once(label: str, cache_dir: Path, extra: list[str]) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"mainjob-{label}-"))
    env = {**os.environ, **compile_cache_env("cpu", cache_dir)}
    cmd = [sys.executable, "-m", "trainready", *COMMAND, "--out", str(out), *extra]
    print(f"[{label}] {shlex.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.time()
    with CpuSampler() as sampler:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.time() - t0
    if proc.returncode not in (0, 1):  # 1: some case did not pass, still a measured run
        sys.exit(f"[{label}] exit {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    suites, first_end, spans = _suite_times(out / "trainready.db")
    spans["whole job"] = (t0, t0 + wall)
    statuses = Counter()
    for s in suites.values():
        statuses.update(s["statuses"])
    return {
        "wall_s": round(wall, 1),
        "first_result_s": round(first_end - t0, 1),
        "cases": sum(statuses.values()),
        "statuses": dict(statuses),
        "suites": suites,
        "where_time_goes": where_time_goes(out / "trainready.db", t0),
        "cores_busy": cores_busy(sampler, spans, os.cpu_count() or 1),
        "exit_code": proc.returncode,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--note", default="")
    ap.add_argument("extra", nargs="*", help="more `trainready run` arguments (after --)")
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="mainjob-cache-"))
    cold = run_once("cold", cache, args.extra)
    warm = run_once("warm", cache, args.extra)
    result = {
        "command": "python -m benchmarks.main_job" + (f" --json {args.json}" if args.json else ""),
        "measures": "trainready " + shlex.join(COMMAND + args.extra),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_avg_at_end": os.getloadavg(),
        },
        "note": args.note,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cold": cold,
        "warm": warm,
        "warm_over_cold": round(warm["wall_s"] / cold["wall_s"], 3),
        "target": {"cold_wall_s": 300, "first_result_s": 15},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
