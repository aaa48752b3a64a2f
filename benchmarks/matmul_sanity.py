"""Is the timing right? One large square matmul, timed by the suite's own timing probe, against
the device's peak. On an H200 an 8192³ bf16 product should reach roughly 780 TFLOP/s; much less
means the timing (or the device) is wrong.

    python -m benchmarks.matmul_sanity [--device auto] [--n 8192] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import json

import torch

from trainready.device import device_info, resolve, resolve_peak, torch_dtype
from trainready.probes.timing import benchmark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--dtype", default="bf16")
    args = ap.parse_args()
    device = resolve(args.device)
    dtype = torch_dtype(args.dtype)
    a = torch.randn(args.n, args.n, device=device, dtype=dtype)
    b = torch.randn(args.n, args.n, device=device, dtype=dtype)
    stats = benchmark(lambda: a @ b, device, warmup=5, repeats=20, flush_l2=True, max_time_s=60)
    flops = 2.0 * args.n**3
    peak = resolve_peak(device, args.dtype)
    print(
        json.dumps(
            {
                "device": device_info(device).get("name"),
                "n": args.n,
                "dtype": args.dtype,
                "clock": stats.clock,
                "median_ms": stats.median_s * 1e3,
                "spread": stats.spread,
                "repeats": stats.repeats,
                # The adaptive sampler's verdict: whether the median's 95% interval got within ±5%.
                "sampling": stats.sampling.to_json() if stats.sampling else None,
                "tflops": flops / stats.median_s / 1e12,
                "peak_tflops": peak["flops"] / 1e12,
                "peak_label": peak["label"],
                "fraction_of_peak": flops / stats.median_s / peak["flops"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
