"""Library zoos, a quick sanity check measured in one run (not a test): each timm / diffusers
model's eager float32 step against its float64 step on the CPU, and the time each takes.

    python -m benchmarks.zoo_sanity [timm|diffusers ...] [--threads N]

Per model: parameters; seconds to build and for one forward+backward in float32 and in float64;
the float32 loss's and output's relative difference from float64 (output: max |diff| / max |ref|),
the worst parameter gradient's (max |diff| / max |ref|, the denominator at least FLOOR of the
model's largest gradient: one zero in exact arithmetic is float32 noise of larger terms); whether the
float64 step was float64 throughout (every aten op, `float64.recording_dtypes`). A model passes
when its step is finite, float64 throughout and within `TOL` of float64 (float32 rounding
through a few layers is ~1e-6; a wrong kernel or a dropped upcast is orders above it).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import time

import torch

from trainready.models.task import cast_batch
from trainready.models.zoo.float64 import recording_dtypes

TOL = 1e-4
FLOOR = 1e-2  # gradients below 1% of the model's largest: error relative to that 1%
ZOOS = {"timm": "trainready.models.zoo.timm", "diffusers": "trainready.models.zoo.diffusers"}


def _rel(a: torch.Tensor, ref: torch.Tensor, floor: float = 1e-30) -> float:
    """max |a - ref| / max |ref|, the denominator at least `floor`."""
    a, ref = a.detach().double(), ref.detach()
    return float((a - ref).abs().max() / ref.abs().max().clamp_min(floor))


def _step(model, batch, dtype, record: bool = False):
    """One forward+backward of a copy in `dtype`: output, gradients, seconds, dtypes seen (when
    `record`: the recording slows the step, so timed steps do not record)."""
    m = copy.deepcopy(model).to(dtype)
    b = cast_batch(batch, "cpu", dtype)
    with recording_dtypes() if record else contextlib.nullcontext({}) as dtypes:
        t = time.perf_counter()
        out = m(**b)
        out.loss.backward()
        seconds = time.perf_counter() - t
    grads = {k: p.grad for k, p in m.named_parameters() if p.grad is not None}
    return out, grads, seconds, set(dtypes)


def check(zoo, name: str) -> dict:
    t = time.perf_counter()
    model = zoo.build(name, 0)
    build_s = time.perf_counter() - t
    batch = model.make_batch(0)
    out32, g32, s32, _ = _step(model, batch, torch.float32)
    out64, g64, s64, _ = _step(model, batch, torch.float64)
    dtypes = _step(model, batch, torch.float64, record=True)[3]
    # A gradient that is zero in exact arithmetic (a bias before a norm) or a sum that cancels is
    # rounding noise of its larger terms: judged against FLOOR of the model's largest gradient.
    scale = max(float(g.abs().max()) for g in g64.values())
    worst = max((_rel(g32[k], g64[k], FLOOR * scale), k) for k in g64)
    row = {
        "params": sum(p.numel() for p in model.parameters()),
        "build_s": build_s,
        "fp32_s": s32,
        "fp64_s": s64,
        "loss": _rel(out32.loss, out64.loss),
        "output": _rel(out32.output, out64.output),
        "grad": worst[0],
        "grad_name": worst[1],
        "fp64_only": dtypes == {torch.float64},
    }
    finite = bool(torch.isfinite(out32.loss)) and all(torch.isfinite(g).all() for g in g32.values())
    close = max(row["loss"], row["output"], row["grad"]) < TOL
    row["pass"] = finite and row["fp64_only"] and close
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("zoos", nargs="*", default=list(ZOOS), choices=list(ZOOS))
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for source in args.zoos:
        try:
            zoo = importlib.import_module(ZOOS[source])
            names = zoo.model_names()
        except ImportError as e:
            print(f"{source}: unavailable: {e}")
            continue
        print(
            f"{source}: {len(names)} models, torch {torch.__version__}, {torch.get_num_threads()} threads"
        )
        print(
            f"{'model':24s} {'params':>8s} {'build':>6s} {'fp32':>6s} {'fp64':>6s} "
            f"{'loss':>8s} {'output':>8s} {'grad':>8s}  fp64-only  result"
        )
        passed = 0
        for name in names:
            try:
                r = check(zoo, name)
            except Exception as e:  # noqa: BLE001 - a model that fails is the finding
                print(f"{name:24s} FAIL {type(e).__name__}: {e}"[:200])
                continue
            passed += r["pass"]
            print(
                f"{name:24s} {r['params']:8d} {r['build_s']:5.2f}s {r['fp32_s']:5.2f}s "
                f"{r['fp64_s']:5.2f}s {r['loss']:8.1e} {r['output']:8.1e} {r['grad']:8.1e}  "
                f"{str(r['fp64_only']):9s}  {'pass' if r['pass'] else 'FAIL'}"
            )
        print(f"{source}: {passed} of {len(names)} pass")


if __name__ == "__main__":
    main()
