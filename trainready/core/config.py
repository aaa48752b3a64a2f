"""Run configuration: what to run, where, and how; validated with one-line errors."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

# smoke: a handful of cases per suite, for CI and for a first look at a new device (seconds to a
# minute or two); quick: the main job on a CPU; standard and full: the sweeps a device is judged on.
PRESETS = ("smoke", "quick", "standard", "full")
DTYPES = ("fp32", "bf16", "fp16", "fp64")


class ConfigError(ValueError):
    """Bad user input: the message is one line naming the problem and the valid choices."""


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """'I/N' with 0 <= I < N (0-based, as CI matrices count) -> (I, N)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        raise ConfigError(f"malformed --shard {text!r}: expected I/N, e.g. 0/4 (I from 0 to N-1)")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"malformed --shard {text!r}: need N >= 1 and 0 <= I < N")
    return i, n


def check_choice(what: str, value: str, choices: tuple[str, ...] | list[str]) -> str:
    if value not in choices:
        raise ConfigError(f"unknown {what} {value!r}; valid: {', '.join(choices)}")
    return value


@dataclass
class RunConfig:
    """Everything that decides which cases run and how. Stored with the run (for --resume)."""

    suites: list[str]
    device: str = "cpu"  # resolved device string, e.g. "cpu", "cuda:0"
    preset: str = "quick"
    dtype: str | None = None  # None: each suite's default
    budget_s: float | None = None  # per case, over the suite's; None: the case's own or suite's
    filter: str | None = None  # glob over case ids
    shard: tuple[int, int] | None = None
    jobs: int = 1
    mem_limit_mb: int | None = None  # per worker address-space headroom, for hostile cases
    options: dict[str, Any] = field(default_factory=dict)  # suite-specific extras
    # Modules imported first in every process of the run (--import, TRAINREADY_IMPORT), in order.
    imports: list[str] = field(default_factory=list)
    # Peak FLOP/s per dtype for MFU, resolved once by the parent: {dtype: {"flops", "source", ...}}
    peaks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice("preset", self.preset, PRESETS)
        if self.dtype is not None:
            check_choice("dtype", self.dtype, DTYPES)
        if self.jobs < 1:
            raise ConfigError(f"--jobs must be >= 1, got {self.jobs}")
        if self.budget_s is not None and not (0 < self.budget_s < math.inf):  # nan fails too
            raise ConfigError(f"--budget-s must be a finite number > 0, got {self.budget_s}")
        if self.mem_limit_mb is not None and self.mem_limit_mb <= 0:
            raise ConfigError(f"--mem-limit-mb must be > 0, got {self.mem_limit_mb}")
        if self.filter is not None and not self.filter.strip():
            raise ConfigError(
                f"--filter {self.filter!r} is empty: give a glob over case ids, or leave it out"
            )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["shard"] = f"{self.shard[0]}/{self.shard[1]}" if self.shard else None
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunConfig:
        d = dict(d)
        d["shard"] = parse_shard(d.get("shard"))
        return cls(**d)

    def identity(self) -> dict[str, Any]:
        """The fields that make two runs the same run (what --resume and merge match on).

        `imports` belong to it: a module can register the backend or replace its kernels, so
        cases run with other imports measure something else and must not land in the same run.
        """
        d = self.to_json()
        for k in ("jobs", "peaks"):
            d.pop(k)
        return d
