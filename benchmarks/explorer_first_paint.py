"""Explorer first paint on a generated trace (not a test: machines are noisy).

    python -m benchmarks.explorer_first_paint [--events 1000000] [--repeats 3] [--json OUT]

Writes a Kineto-style trace of about --events events (training steps: a host thread with
ProfilerStep#N, python stack frames, aten ops and their kernel launches; kernels and copies on a
compute stream, NCCL kernels on a communication stream; allocator events), then reports:

- load + index: the server loading the trace (`trace.load_trace` parsing the file into columns,
  then `Viewport` building its level-of-detail index), paid once before the page is served: the
  first time (which also stores the parsed columns in the cache) and when the trace is reopened
  (columns read back from `cache.TraceCache`);
- first window: the server answering the whole-trace view for a 1600-px-wide canvas, and its size;
- encode: that window's reply body, encoded as the server does (`server.encode_json`, msgspec)
  and with `json.dumps` (what the server used before), best of --repeats each, in this run;
- pan: the page's requests while the user drags a zoomed view (a tenth of the trace wide, moved
  a twentieth at a time across the trace, 1600 px): the HTTP round trip of each window reply
  from the running server, median and worst, and for the same replies the time json.dumps
  would have added over msgspec;
- first paint: headless Chromium opening the page until the timeline is drawn with data (the
  page's `timeline-first-paint` mark, from navigation start), over --repeats page loads.

The target is a first paint within 2 s of opening the page of a 1M-event trace.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
OPS = (
    ("aten::linear", "aten::addmm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
    (
        "aten::gelu",
        "aten::gelu",
        "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernel>",
    ),
    (
        "aten::layer_norm",
        "aten::native_layer_norm",
        "void at::native::vectorized_layer_norm_kernel",
    ),
    ("aten::add", "aten::add", "void at::native::elementwise_kernel<128, 2, CUDAFunctor_add>"),
)
# the inner op's recorded shapes: addmm(bias, x[8, 4096], w[4096, 4096]) counts 2*8*4096*4096 FLOPs
INNER_DIMS = "[[4096], [8, 4096], [4096, 4096], [], []]"
INNER_TYPES = '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]'
EVENTS_PER_OP = 7  # python frame, outer op, inner op, launch, kernel, two flow ends


def write_trace(path: Path, events: int, steps: int = 4) -> int:
    """Write a Kineto-style JSON trace of about `events` events; returns how many it wrote.

    Times are microseconds with three decimals, as Kineto writes them. Every kernel is launched
    by a cudaLaunchKernel with the same correlation id (and an ac2g flow); every 16th op also
    copies memory; a NCCL kernel on stream 20 overlaps each step's compute; the allocator
    reports the memory allocated after every op (growing through the first half of a step,
    freed through the second).
    """
    ops_total = max(1, events // EVENTS_PER_OP)
    per_step = max(1, ops_total // steps)
    out: list[str] = []
    add = out.append
    add('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],')
    add('"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [')
    add('{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},')
    t = 1_000_000.0
    gpu = t
    corr = 0
    allocated = 1 << 30
    n = 3
    for step in range(steps):
        step_start = t
        add(
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 1, '
            f'"tid": 1, "ts": {t:.3f}, "dur": {per_step * 10.0 + 2:.3f}}},'
        )
        t += 1.0
        corr += 1
        nccl_corr = corr
        add(
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, '
            f'"tid": 1, "ts": {t:.3f}, "dur": 0.800, "args": {{"correlation": {nccl_corr}}}}},'
        )
        t += 1.0
        nccl_start = gpu = max(gpu, t)
        for i in range(per_step):
            outer, inner, kernel = OPS[i % len(OPS)]
            corr += 1
            add(
                f'{{"ph": "X", "cat": "python_function", "name": "model.py({100 + i % 50}): forward", '
                f'"pid": 1, "tid": 1, "ts": {t:.3f}, "dur": 9.500}},'
            )
            add(
                f'{{"ph": "X", "cat": "cpu_op", "name": "{outer}", "pid": 1, "tid": 1, '
                f'"ts": {t + 0.2:.3f}, "dur": 9.000, "args": {{"External id": {corr}, '
                f'"Sequence number": {corr}, "Input Dims": [[8, 4096], [4096, 4096]], '
                '"Input type": ["c10::BFloat16", "c10::BFloat16"]}},'
            )
            add(
                f'{{"ph": "X", "cat": "cpu_op", "name": "{inner}", "pid": 1, "tid": 1, '
                f'"ts": {t + 0.5:.3f}, "dur": 8.000, "args": {{"External id": {corr}, '
                f'"Input Dims": {INNER_DIMS}, "Input type": {INNER_TYPES}}}}},'
            )
            add(
                f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, '
                f'"tid": 1, "ts": {t + 1:.3f}, "dur": 4.000, "args": {{"correlation": {corr}}}}},'
            )
            launch_end = t + 5
            gpu = max(gpu, launch_end + 2)
            dur = 6.0 + (i % 5)
            add(
                f'{{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": 0, "tid": 7, '
                f'"ts": {gpu:.3f}, "dur": {dur:.3f}, "args": {{"device": 0, "stream": 7, '
                f'"correlation": {corr}, "grid": [132, 1, 1], "block": [256, 1, 1]}}}},'
            )
            add(
                f'{{"ph": "s", "cat": "ac2g", "id": {corr}, "pid": 1, "tid": 1, '
                f'"ts": {t + 1:.3f}, "name": "ac2g"}},'
            )
            add(
                f'{{"ph": "f", "cat": "ac2g", "id": {corr}, "pid": 0, "tid": 7, '
                f'"ts": {gpu:.3f}, "bp": "e", "name": "ac2g"}},'
            )
            n += EVENTS_PER_OP
            gpu += dur + (0.5 if i % 8 else 40.0)  # a bubble now and then
            allocated += (64 << 20) if i < per_step // 2 else -(64 << 20)  # activations
            add(
                f'{{"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, '
                f'"ts": {t + 8:.3f}, "args": {{"Device Type": 1, "Device Id": 0, '
                f'"Addr": {corr}, "Bytes": {64 << 20}, "Total Allocated": {allocated}, '
                f'"Total Reserved": {2 << 30}}}}},'
            )
            if i % 16 == 0:
                corr += 1
                add(
                    f'{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", '
                    f'"pid": 0, "tid": 7, "ts": {gpu:.3f}, "dur": 3.000, "args": {{"device": 0, '
                    f'"stream": 7, "correlation": {corr}, "bytes": 4194304}}}},'
                )
                gpu += 3.5
                n += 1
            t += 10.0
        add(
            f'{{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", '
            f'"pid": 0, "tid": 20, "ts": {nccl_start:.3f}, "dur": {(gpu - nccl_start) * 0.6:.3f}, '
            f'"args": {{"device": 0, "stream": 20, "correlation": {nccl_corr}}}}},'
        )
        n += 3
        t = max(t, step_start + per_step * 10.0 + 3)
    add('{"ph": "i", "s": "g", "name": "Iteration Start", "pid": 1, "tid": 1, "ts": 0}')
    add('], "traceName": "generated"}\n')
    path.write_text("\n".join(out))
    return n


def first_paint(url: str, repeats: int) -> list[float]:
    """Seconds from navigation start to the timeline's first paint, per fresh page load."""
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for _ in range(repeats):
                page = browser.new_page(viewport={"width": 1830, "height": 900})
                page.goto(url)
                page.wait_for_selector("body[data-painted='1']", timeout=60_000)
                ms = page.evaluate(
                    "performance.getEntriesByName('timeline-first-paint')[0].startTime"
                )
                times.append(ms / 1000)
                page.close()
        finally:
            browser.close()
    return times


def best_of(repeats: int, fn) -> float:
    """The least wall seconds of `repeats` calls of fn (noise only adds time)."""
    times = []
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def encode_times(payload, repeats: int) -> dict:
    """Milliseconds to encode one reply: the server's encoder and json.dumps."""
    from trainready.profile.server import encode_json

    return {
        "msgspec_ms": 1000 * best_of(repeats, lambda: encode_json(payload)),
        "json_dumps_ms": 1000
        * best_of(repeats, lambda: json.dumps(payload, separators=(",", ":")).encode()),
    }


def pan(server, trace_id: str, end_ns: int, steps: int = 20) -> dict:
    """Round trips of the window replies a drag of a zoomed view asks for (see the docstring)."""
    import http.client
    from urllib.parse import quote

    host, port = server.server_address[:2]
    width = end_ns // 10
    rtt, kib, windows = [], [], []
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        for i in range(steps):
            t0 = (end_ns - width) * i // max(1, steps - 1)
            path = f"/api/traces/{quote(trace_id)}/view?t0={t0}&t1={t0 + width}&px=1600"
            t = time.perf_counter()
            conn.request("GET", path)
            body = conn.getresponse().read()
            rtt.append(time.perf_counter() - t)
            kib.append(len(body) / 1024)
            windows.append((t0, t0 + width))
    finally:
        conn.close()
    rtt.sort()
    return {"steps": steps, "round_trip_ms_median": 1000 * rtt[len(rtt) // 2],
            "round_trip_ms_worst": 1000 * rtt[-1], "reply_kib_median": sorted(kib)[len(kib) // 2],
            "windows": windows}  # fmt: skip


def main() -> None:
    from benchmarks.trace_analysis import machine
    from trainready.profile.cache import TraceCache
    from trainready.profile.server import ExplorerServer, Library
    from trainready.profile.trace import load_trace
    from trainready.profile.viewport import Viewport

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    out: dict = {"command": "python -m benchmarks.explorer_first_paint " + " ".join(sys.argv[1:]),
                 "machine_before": machine(), "wall_s": {}}  # fmt: skip
    wall = out["wall_s"]

    def timed(label: str, fn):  # wall seconds: what a user waits for
        t = time.perf_counter()
        result = fn()
        wall[label] = time.perf_counter() - t
        return result

    tmp = Path(tempfile.mkdtemp(prefix="explorer-bench-"))
    try:
        path = tmp / "generated.json"
        out["events"] = n = timed("generate", lambda: write_trace(path, args.events))
        out["file_mib"] = path.stat().st_size / 2**20
        print(f"generated {n:,} events, {out['file_mib']:.0f} MiB in {wall['generate']:.1f} s")
        trace = timed("parse", lambda: load_trace(path))
        print(f"parse alone (load_trace): {wall['parse']:.2f} s")
        timed("index", lambda: Viewport(trace))
        print(f"index alone (Viewport): {wall['index']:.2f} s")
        trace = None  # freed before the server loads its own copy
        parsed = TraceCache(tmp / "cache")
        library = Library(files=[path], parsed_cache=parsed)
        # what `trainready explore` does before serving: the first time, and reopened
        loaded = timed("load_index_first_open", lambda: library.get(path.name))
        out["slices"] = len(loaded.trace)
        print(f"load + index (server start, first open: parse, index, cache the columns): "
              f"{wall['load_index_first_open']:.2f} s, {len(loaded.trace):,} slices")  # fmt: skip
        timed(
            "load_index_reopen", lambda: Library(files=[path], parsed_cache=parsed).get(path.name)
        )
        print(f"load + index (server start, reopened from the parsed cache): "
              f"{wall['load_index_reopen']:.2f} s")  # fmt: skip
        view = loaded.view
        window = timed("first_window", lambda: view.window(0, view.end_ns, 3200))
        out["first_window_kib"] = len(json.dumps(window, separators=(",", ":"))) / 1024
        print(f"first window (whole trace, 3200 px): {wall['first_window']:.3f} s, "
              f"{out['first_window_kib']:.0f} KiB")  # fmt: skip
        enc = out["first_window_encode"] = encode_times(window, args.repeats)
        print(
            f"first window encoded: msgspec {enc['msgspec_ms']:.2f} ms, json.dumps "
            f"{enc['json_dumps_ms']:.2f} ms ({enc['json_dumps_ms'] / enc['msgspec_ms']:.0f}x)"
        )
        server = ExplorerServer(library)
        server.start()
        try:
            pans = out["pan"] = pan(server, path.name, view.end_ns)
        finally:
            server.close()
        added = [encode_times(view.window(a, b, 1600), 1) for a, b in pans.pop("windows")]
        gain = sorted(e["json_dumps_ms"] - e["msgspec_ms"] for e in added)
        pans["json_dumps_would_add_ms_median"] = gain[len(gain) // 2]
        print(
            f"pan ({pans['steps']} window replies of a tenth of the trace over HTTP): round "
            f"trip median {pans['round_trip_ms_median']:.1f} ms, worst "
            f"{pans['round_trip_ms_worst']:.1f} ms, {pans['reply_kib_median']:.0f} KiB; "
            f"json.dumps would add {gain[len(gain) // 2]:.1f} ms each (median)"
        )
        if not (Path(CHROMIUM).exists() and _has_playwright()):
            print("first paint: skipped (needs /usr/bin/chromium and playwright)")
        else:
            server = ExplorerServer(library)
            server.start()
            try:
                times = first_paint(server.url, args.repeats)
            finally:
                server.close()
            out["first_paint_s"] = times
            best, worst = min(times), max(times)
            verdict = "meets" if worst <= 2.0 else "MISSES"
            print(f"first paint (page open -> timeline drawn): best {best:.2f} s, worst "
                  f"{worst:.2f} s over {len(times)} loads; {verdict} the 2 s target")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["machine_after"] = machine()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


def _has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
