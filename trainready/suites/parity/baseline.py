"""Cross-device parity: this run's small per-case summaries against another stored run's.

Each parity case stores a summary small enough to keep for every case of every run (never the
model): the loss curve, the first-step loss and a fixed sample of the first-step logits. With
`--baseline DIR[:RUN_ID]` (a run on another device, e.g. CUDA) every case compares its summary
with the baseline's summary of the same case id: the loss curves step by step with the case's
tolerance, the logits sample with the numerics probe's error measures.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from trainready.probes.numerics import loss_curve_compare, tensor_errors

LOGITS_SAMPLE = 256  # entries of the first-step logits kept per case


def logits_sample(logits: torch.Tensor) -> list[float]:
    """A fixed, evenly spaced sample of the flattened logits (the same positions on every run)."""
    flat = logits.detach().double().reshape(-1)
    stride = max(1, flat.numel() // LOGITS_SAMPLE)
    return [float(x) for x in flat[::stride][:LOGITS_SAMPLE]]


def summary(curve: list[float], logits: torch.Tensor, device: str, dtype: str) -> dict[str, Any]:
    return {
        "device": device,
        "dtype": dtype,
        "loss_curve": curve,
        "logits_sample": logits_sample(logits),
    }


@functools.lru_cache(maxsize=4)
def _load(ref: str) -> tuple[str, str, dict[str, dict[str, Any]]]:
    """(run id, device label, {case id: summary}) of a stored run; read once per worker."""
    from trainready.api import open_runs

    store, (run_id,) = open_runs([ref])
    try:
        record = store.get_run(run_id)
        device = record.env.get("device", {})
        name = device.get("name") if isinstance(device, dict) else None
        label = str(name or record.device)
        found = {
            r.case_id: r.diagnostics["summary"]
            for r in store.results(run_id)
            if isinstance(r.diagnostics.get("summary"), dict)
        }
    finally:
        store.close()
    return run_id, label, found


def compare(ref: str, case_id: str, mine: dict[str, Any], rel_tol: float) -> dict[str, Any]:
    """This case against the baseline run's: {"ok", "run_id", "device", "curve", "logits"} or,
    when the baseline has no summary of this case, {"ok": None, "missing": reason}."""
    run_id, label, found = _load(ref)
    theirs = found.get(case_id)
    if theirs is None:
        return {"ok": None, "run_id": run_id, "device": label, "missing": "case not in baseline"}
    curve = loss_curve_compare(theirs["loss_curve"], mine["loss_curve"], rel_tol)
    a = torch.tensor(theirs["logits_sample"], dtype=torch.float64)
    b = torch.tensor(mine["logits_sample"], dtype=torch.float64)
    logits = tensor_errors(a, b)
    return {
        "ok": bool(curve["ok"]),
        "run_id": run_id,
        "device": label,
        "baseline_dtype": theirs.get("dtype"),
        "curve": curve,
        "baseline_curve": [float(x) for x in theirs["loss_curve"]],  # drawn over this run's
        "logits": logits,
    }
