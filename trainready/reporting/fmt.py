"""How values read in every human-facing format, and the one status palette they share."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from trainready.reporting.model import NOT_RUN, RunState
from trainready.reporting.numbers import number, percent

# Hex colours work in CSS, SVG and rich alike. Green passes, reds fail, greys are gaps.
STATUS_COLORS = {
    "pass": "#1a7f37",
    "fail_numerics": "#cf222e",
    "fail_compile": "#bc4c00",
    "fail_run": "#a40e26",
    "timeout": "#9a6700",
    "crash": "#82071e",
    "oom": "#8250df",
    "unsupported": "#57606a",
    "skipped": "#8c959f",
    NOT_RUN: "#6e7781",
}


# The readiness verdict's levels (trainready.reporting.verdict): green, amber, red, grey.
VERDICT_COLORS = {
    "ready": "#1a7f37",
    "partial": "#9a6700",
    "not ready": "#cf222e",
    "not tested": "#6e7781",
}


def status(value: str) -> str:
    return "not run" if value == NOT_RUN else value


def text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(text(v) for v in value)
    if isinstance(value, float):
        return number(value)
    return str(value)


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """'1 case', '3 cases' (`plural_form` for irregular nouns)."""
    return f"{number(n)} {noun if n == 1 else plural_form or noun + 's'}"


def seconds(value: float) -> str:
    return f"{number(value)} s"


def ratio(value: float) -> str:
    """'1.5×', '1,120×', '0.004×': the number formatter's digits, never an exponent."""
    text = f"{value:.3g}"
    if "e" in text and math.isfinite(value):  # 1.12e+03 or 1.86e-05: write it out
        text = f"{value:,.0f}" if abs(value) >= 1 else number(value)
    return f"{text}×"


def points(difference: float) -> str:
    """A difference of two fractions shown as percentages: '+2.1 pts'."""
    return f"{difference * 100:+.1f} pts"


# Metrics whose raw value is not what people read: MFU is stored as a fraction of peak, and
# reads as a percentage wherever it is shown (`mfu`, `compiled_warm_mfu`, ...).
METRIC_SHOW = {"mfu": percent}


def metric(name: str) -> Callable[[float], str]:
    """How a metric's value reads (a plain number unless the metric says otherwise)."""
    if name.endswith("_mfu"):
        return percent
    return METRIC_SHOW.get(name, number)


def timestamp(epoch: float | None) -> str:
    if epoch is None:
        return "not recorded"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


# Keys under which a record keeps a moment as seconds since the epoch ("measured_at", "at").
_MOMENT_KEYS = ("_at", ".at", "timestamp")
_EPOCH_RANGE = (1e9, 1e10)  # 2001 .. 2286: a number there under such a key is a date


def keyed(key: str, value: Any) -> Any:
    """A record's value as it should read under its key: a Unix time as a date, else as is."""
    is_moment = key.endswith(_MOMENT_KEYS) or key == "at"
    plausible = isinstance(value, (int, float)) and not isinstance(value, bool)
    if is_moment and plausible and _EPOCH_RANGE[0] <= value < _EPOCH_RANGE[1]:
        return timestamp(value)
    return value


def local_time(epoch: float | None) -> str:
    """A moment as the machine's clock read it, with its zone."""
    if epoch is None:
        return "an unrecorded time"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(epoch))


def run_state(state: RunState) -> str:
    """How far a run came, where the run is named: 'finished at …', 'interrupted at … (SIGTERM),
    3 of 10 cases done', 'in progress / not finished, 3 of 10 cases done'."""
    done = f"{state.done} of {plural(state.planned, 'case')} done"
    if state.kind == "finished":
        return f"finished at {local_time(state.at)}"
    if state.kind == "interrupted":
        how = f" ({state.signal})" if state.signal else ""
        return f"interrupted at {local_time(state.at)}{how}, {done}"
    return f"in progress / not finished, {done}"


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys, so any environment snapshot renders as one key/value table."""
    if not isinstance(value, dict):
        return {prefix: value}
    if not value and prefix:
        return {prefix: ""}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
