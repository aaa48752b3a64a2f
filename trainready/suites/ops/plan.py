"""The ops suite's cases: one per OpInfo entry x dtype x form (forward, backward, in-place, out=).

Presets (`PRESETS`; `--dtype` keeps only that dtype, `--set ops=a,b` only those entries):

- smoke: every entry's first sample, fp32 forward.
- quick: the first three samples; fp32 and bf16 forward and backward, and fp64 forward (the
  higher precision research code reaches by accident, which some devices lack).
- standard, full: every sample; every dtype the CPU can reference (fp32, bf16, fp16, fp64),
  forward and backward; fp32 in-place and `out=` forms.

A dtype is planned only where the CPU supports the entry in it (the reference must exist);
whether the device does is probed when the case runs, never taken from op_db's claims, which
default to the generic list for a PrivateUse1 device. Backward is planned where the entry
supports autograd in that dtype on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainready.core.case import Case


@dataclass(frozen=True)
class Preset:
    samples: int | None  # the first N samples of each entry (None: all)
    forms: tuple[tuple[str, str], ...]  # (dtype, form)


_QUICK = (("fp32", "fwd"), ("fp32", "bwd"), ("bf16", "fwd"), ("bf16", "bwd"), ("fp64", "fwd"))
_STANDARD = (
    *((d, f) for d in ("fp32", "bf16", "fp16", "fp64") for f in ("fwd", "bwd")),
    ("fp32", "inplace"),
    ("fp32", "out"),
)
PRESETS: dict[str, Preset] = {
    "smoke": Preset(1, (("fp32", "fwd"),)),
    "quick": Preset(3, _QUICK),
    "standard": Preset(None, _STANDARD),
    "full": Preset(None, _STANDARD),
}


def _planned(entry: dict[str, Any], dtype: str, form: str) -> bool:
    if "error" in entry:
        return dtype == "fp32" and form == "fwd"  # one case says the entry is broken
    if form == "bwd":
        return entry["autograd"] and dtype in entry["backward_dtypes"]
    if form == "inplace" and not entry["inplace"]:
        return False
    if form == "out" and not entry["out"]:
        return False
    return dtype in entry["dtypes"]


def make_case(suite: str, entry: dict[str, Any], dtype: str, form: str, samples: int | None):
    params = {
        "op": entry.get("op", entry["entry"]),
        "variant": entry.get("variant", ""),
        "entry": entry["entry"],
        "dtype": dtype,
        "direction": "bwd" if form == "bwd" else "fwd",
        "form": {"fwd": "function", "bwd": "function"}.get(form, form),
        "samples": samples,
    }
    return Case(suite, f"{entry['entry']}/{dtype}/{form}", params)


def plan(
    suite: str,
    entries: list[dict[str, Any]],
    preset: str,
    dtype: str | None = None,
    only: list[str] | None = None,
    samples: int | None = None,
) -> list[Case]:
    """The cases of `preset` over catalog `entries` (catalog.entries()), entry by entry."""
    spec = PRESETS[preset]
    limit = samples if samples is not None else spec.samples
    wanted = set(only or ())
    cases = []
    for entry in entries:
        if wanted and entry["entry"] not in wanted and entry.get("op") not in wanted:
            continue
        for d, form in spec.forms:
            if (dtype is None or d == dtype) and _planned(entry, d, form):
                cases.append(make_case(suite, entry, d, form, limit))
    return cases
