"""The time-to-result ledger: how long N training steps take, counting the first one as it is.

A mode (eager, compiled, a compiled run with a warm cache...) is two numbers: the time of its first
step, which carries every compile and warm-up cost, and its steady throughput. Then

    total(N) = first_step + (N - 1) * tokens_per_step / steady_tokens_per_s

and the break-even step of a challenger against a baseline (compiled against eager) is the smallest
N with total_challenger(N) <= total_baseline(N), or None ("never") when the challenger starts
slower and is not faster per step. Pure arithmetic: the train suite feeds it measurements, and
`trainready ledger` feeds it published numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trainready.config import ConfigError

DEFAULT_STEPS = (1, 10, 100, 1_000, 10_000, 100_000)


@dataclass(frozen=True)
class Mode:
    """One way to run the same training: its first-step time and steady throughput."""

    name: str
    first_step_s: float
    tokens_per_s: float

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a mode needs a name")
        if not (math.isfinite(self.first_step_s) and self.first_step_s >= 0):
            raise ConfigError(
                f"mode {self.name!r}: first-step time must be a number >= 0 s, "
                f"got {self.first_step_s!r}"
            )
        if not (math.isfinite(self.tokens_per_s) and self.tokens_per_s > 0):
            raise ConfigError(
                f"mode {self.name!r}: tokens/s must be a positive number, got {self.tokens_per_s!r}"
            )

    def step_s(self, tokens_per_step: float) -> float:
        """Steady time of one step."""
        return tokens_per_step / self.tokens_per_s

    def total_s(self, tokens_per_step: float, steps: int) -> float:
        """Wall time of `steps` steps: the first as measured, the rest at the steady rate."""
        _check_steps(steps)
        return self.first_step_s + (steps - 1) * self.step_s(tokens_per_step)


def _check_steps(steps: int) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"a step count must be a positive integer, got {steps!r}")


def _check_tokens_per_step(tokens_per_step: float) -> None:
    if not (
        isinstance(tokens_per_step, (int, float))
        and math.isfinite(tokens_per_step)
        and tokens_per_step > 0
    ):
        raise ConfigError(f"tokens per step must be a positive number, got {tokens_per_step!r}")


def break_even_step(baseline: Mode, challenger: Mode, tokens_per_step: float) -> int | None:
    """The smallest N >= 1 with total_challenger(N) <= total_baseline(N); None if there is none.

    The gap total_challenger(N) - total_baseline(N) is linear in N: a head start `lead` (the
    difference of first steps) plus (N - 1) times the per-step difference `gain`. It closes at
    N = 1 + ceil(lead / -gain) when the challenger is faster per step, and never when it is not.
    The closed form is then checked against the totals themselves, so float rounding can move
    the answer only to the step where the inequality really flips.
    """
    _check_tokens_per_step(tokens_per_step)
    lead = challenger.first_step_s - baseline.first_step_s
    if lead <= 0:
        return 1
    gain = challenger.step_s(tokens_per_step) - baseline.step_s(tokens_per_step)
    if gain >= 0:
        return None
    n = 1 + math.ceil(lead / -gain)

    def caught_up(k: int) -> bool:
        return challenger.total_s(tokens_per_step, k) <= baseline.total_s(tokens_per_step, k)

    while n > 1 and caught_up(n - 1):
        n -= 1
    while not caught_up(n):
        n += 1
    return n


def totals(
    modes: Sequence[Mode], tokens_per_step: float, steps: Iterable[int]
) -> dict[str, dict[int, float]]:
    """{mode name: {N: total seconds}} for every mode at every N."""
    _check_tokens_per_step(tokens_per_step)
    steps = list(steps)
    return {m.name: {n: m.total_s(tokens_per_step, n) for n in steps} for m in modes}


def ledger(
    modes: Sequence[Mode], tokens_per_step: float, steps: Sequence[int] = DEFAULT_STEPS
) -> dict[str, Any]:
    """The calculator's answer: totals of every mode at every N, and the break-even step of the
    second mode against the first (None with fewer than two modes, or when it never comes)."""
    if not modes:
        raise ConfigError("give at least one mode")
    names = [m.name for m in modes]
    if len(set(names)) != len(names):
        raise ConfigError(f"mode names must be unique, got {', '.join(names)}")
    if not steps:
        raise ConfigError("give at least one step count")
    for n in steps:
        _check_steps(n)
    return {
        "totals": totals(modes, tokens_per_step, sorted(set(steps))),
        "break_even_step": (
            break_even_step(modes[0], modes[1], tokens_per_step) if len(modes) > 1 else None
        ),
    }


def parse_mode(text: str) -> Mode:
    """'NAME:FIRST_STEP_S:TOKENS_PER_S' -> Mode (the name may itself contain colons)."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise ConfigError(
            f"malformed --mode {text!r}: expected NAME:FIRST_STEP_S:TOKENS_PER_S, "
            "e.g. compiled:95.0:41000"
        )
    name, first, rate = parts
    try:
        first_step_s, tokens_per_s = float(first), float(rate)
    except ValueError:
        raise ConfigError(
            f"malformed --mode {text!r}: FIRST_STEP_S and TOKENS_PER_S must be numbers"
        ) from None
    return Mode(name, first_step_s, tokens_per_s)


def parse_steps(text: str) -> list[int]:
    """'1,10,100' -> [1, 10, 100]."""
    try:
        steps = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(
            f"malformed --steps {text!r}: expected positive integers separated by commas"
        ) from None
    if not steps or any(n < 1 for n in steps):
        raise ConfigError(
            f"malformed --steps {text!r}: expected positive integers separated by commas"
        )
    return steps


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    """JSON keeps object keys as strings: N becomes "N"."""
    return {
        "totals": {
            name: {str(n): s for n, s in by_n.items()} for name, by_n in result["totals"].items()
        },
        "break_even_step": result["break_even_step"],
    }
