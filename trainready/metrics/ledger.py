"""The time-to-result ledger: how long N training steps take, counting the first one as it is.

A mode (eager, compiled, a compiled run with a warm cache...) is two numbers: the time of its first
step, which carries every compile and warm-up cost, and its steady throughput. Then

    total(N) = first_step + (N - 1) * tokens_per_step / steady_tokens_per_s

and the break-even step of a challenger against a baseline (compiled against eager) is the step
from which the challenger is no slower in total for good: the smallest N with
total_challenger(M) <= total_baseline(M) for every M >= N. The gap between the totals is linear in
N, so that is the crossing when the challenger starts slower but is faster per step, 1 when it is
no slower at either, and None ("never") when it is slower per step — also when it starts faster:
then it is ahead only for short runs, until `ahead_until_step`. A steady rate known only within
an interval gives a break-even range (`break_even_range`). Pure arithmetic: the train suite feeds
it measurements, and `trainready ledger` feeds it published numbers.

A mode's first step is its first *valid* result: the first step whose loss the numerics check
accepted (`first_valid`: the steps before it, whose losses were rejected, are on its clock). The
bill (`bill`) adds what the run paid before any valid result, the failed attempts (cases that
crashed or timed out first: their whole time, charged to each mode that got no valid step out of
them), and, with a price per device-hour, turns seconds into money:

    bill_s(N) = failed_s + total(N)          cost(N) = bill_s(N) * price_per_hour / 3600

The bill's break-even step is the break-even of the modes with their failed attempts added to
their first steps: the time ledger's own when both modes carry the same failed time (the price is
one device's, the same for both modes, so money breaks even at the same step as the bill's
seconds). No price: no money figures (None, read "no price given"), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainready.core.config import ConfigError

DEFAULT_STEPS = (1, 10, 100, 1_000, 10_000, 100_000)
SECONDS_PER_HOUR = 3600.0
NO_PRICE = "no price given"


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


def _gap(baseline: Mode, challenger: Mode, tokens_per_step: float) -> tuple[float, float]:
    """(lead, gain): total_challenger(N) - total_baseline(N) = lead + (N - 1) * gain."""
    _check_tokens_per_step(tokens_per_step)
    lead = challenger.first_step_s - baseline.first_step_s
    gain = challenger.step_s(tokens_per_step) - baseline.step_s(tokens_per_step)
    return lead, gain


def _last_true(holds: Callable[[int], bool], guess: int) -> int:
    """The last N >= 1 where `holds` (true at 1, then false for good) is still true, starting from
    the closed form's `guess`: checking the totals themselves means float rounding can move the
    answer only to the step where the inequality really flips."""
    n = max(guess, 1)
    while n > 1 and not holds(n):
        n -= 1
    while holds(n + 1):
        n += 1
    return n


def break_even_step(baseline: Mode, challenger: Mode, tokens_per_step: float) -> int | None:
    """The step from which the challenger is no slower in total for good; None if there is none.

    With lead and gain from `_gap`: a challenger no slower at the start and per step breaks even
    at 1; one slower at the start but faster per step catches up at N = 1 + ceil(lead / -gain);
    one slower per step never does (gain = 0 keeps the lead as it is).
    """
    lead, gain = _gap(baseline, challenger, tokens_per_step)
    if gain > 0 or (gain == 0 and lead > 0):
        return None
    if lead <= 0:
        return 1

    def behind(k: int) -> bool:
        return challenger.total_s(tokens_per_step, k) > baseline.total_s(tokens_per_step, k)

    return 1 + _last_true(behind, math.ceil(lead / -gain))


def ahead_until_step(baseline: Mode, challenger: Mode, tokens_per_step: float) -> int | None:
    """The last step at which a challenger that starts no slower but is slower per step is still
    no slower in total (it loses for good after it); None for any other pair."""
    lead, gain = _gap(baseline, challenger, tokens_per_step)
    if lead > 0 or gain <= 0:
        return None

    def ahead(k: int) -> bool:
        return challenger.total_s(tokens_per_step, k) <= baseline.total_s(tokens_per_step, k)

    # Ahead while lead + (N - 1) * gain <= 0, i.e. up to N = 1 + floor(-lead / gain).
    return _last_true(ahead, 1 + math.floor(-lead / gain))


def break_even_range(
    baseline: Mode, challenger: Mode, tokens_per_step: float, speedup: Sequence[float]
) -> tuple[int | None, int | None]:
    """The break-even step at both ends of an interval (lo, hi) of the challenger's speedup (its
    steady tokens/s over the baseline's), the first steps as given: (at hi, at lo), the earlier
    first; None where it never comes. A measured rate is uncertain; this is what that
    uncertainty does to the break-even step."""
    lo, hi = speedup
    if not (0 < lo <= hi and math.isfinite(hi)):
        raise ConfigError(f"a speedup interval needs 0 < lo <= hi, got {lo!r}, {hi!r}")

    def at(ratio: float) -> Mode:
        return Mode(challenger.name, challenger.first_step_s, baseline.tokens_per_s * ratio)

    return (
        break_even_step(baseline, at(hi), tokens_per_step),
        break_even_step(baseline, at(lo), tokens_per_step),
    )


def totals(
    modes: Sequence[Mode], tokens_per_step: float, steps: Iterable[int]
) -> dict[str, dict[int, float]]:
    """{mode name: {N: total seconds}} for every mode at every N."""
    _check_tokens_per_step(tokens_per_step)
    steps = list(steps)
    return {m.name: {n: m.total_s(tokens_per_step, n) for n in steps} for m in modes}


def ledger(
    modes: Sequence[Mode],
    tokens_per_step: float,
    steps: Sequence[int] = DEFAULT_STEPS,
    speedup: Sequence[float] | None = None,
    failed_s: Mapping[str, float] | None = None,
    price_per_hour: float | None = None,
) -> dict[str, Any]:
    """The calculator's answer: totals of every mode at every N, the break-even step of the second
    mode against the first (None with fewer than two modes, or when it never comes) and, for a
    second mode that starts faster but loses per step, the last step it is still ahead. With
    `speedup`, an interval (lo, hi) of the second mode's steady rate over the first's, also the
    break-even range over it and whether it is conclusive (the interval does not include 1). With
    `failed_s` ({mode name: seconds of failed attempts}) or `price_per_hour`, also "bill"
    (`bill`)."""
    if not modes:
        raise ConfigError("give at least one mode")
    names = [m.name for m in modes]
    if len(set(names)) != len(names):
        raise ConfigError(f"mode names must be unique, got {', '.join(names)}")
    if not steps:
        raise ConfigError("give at least one step count")
    for n in steps:
        _check_steps(n)
    result = {
        "totals": totals(modes, tokens_per_step, sorted(set(steps))),
        "break_even_step": (
            break_even_step(modes[0], modes[1], tokens_per_step) if len(modes) > 1 else None
        ),
        "ahead_until_step": (
            ahead_until_step(modes[0], modes[1], tokens_per_step) if len(modes) > 1 else None
        ),
    }
    if speedup is not None:
        result.update(_uncertain(modes, tokens_per_step, speedup))
    if failed_s is not None or price_per_hour is not None:
        result["bill"] = bill(modes, tokens_per_step, steps, failed_s, price_per_hour)
    return result


def _uncertain(
    modes: Sequence[Mode], tokens_per_step: float, speedup: Sequence[float]
) -> dict[str, Any]:
    """The break-even range over a speedup interval, and whether the interval decides it."""
    if len(modes) != 2:
        raise ConfigError("a speedup interval needs exactly two modes")
    lo, hi = speedup
    point = modes[1].tokens_per_s / modes[0].tokens_per_s
    if not lo <= point <= hi:
        raise ConfigError(
            f"the speedup interval {lo:g}-{hi:g} must contain the modes' own speedup {point:.4g}"
        )
    return {
        "break_even_range": list(break_even_range(modes[0], modes[1], tokens_per_step, speedup)),
        "conclusive": not lo <= 1 <= hi,
    }


# --- the bill: the first valid result, failed attempts, money -------------------------------------


def check_price(price_per_hour: Any) -> float | None:
    """A price per device-hour: None (not given) or a finite number > 0; else ConfigError. A
    price of 0 is refused: "free" is no price, and a bill of 0 would read as one."""
    if price_per_hour is None:
        return None
    if (
        isinstance(price_per_hour, bool)
        or not isinstance(price_per_hour, (int, float))
        or not math.isfinite(price_per_hour)
        or price_per_hour <= 0
    ):
        raise ConfigError(
            "the price per device-hour (--price-per-hour, price_per_hour) must be a finite "
            f"number > 0, got {price_per_hour!r}"
        )
    return float(price_per_hour)


def cost(seconds: float, price_per_hour: float | None) -> float | None:
    """Money for `seconds` of the device at `price_per_hour`: seconds * price / 3600; None
    without a price (never 0)."""
    if price_per_hour is None:
        return None
    return seconds * check_price(price_per_hour) / SECONDS_PER_HOUR


def first_valid(
    first_step_s: float, step_times_s: Sequence[float], accepted: Sequence[bool]
) -> tuple[int, float] | None:
    """The first valid result of a training run: (k, seconds), k the first step (0-based) whose
    loss the numerics check accepted, seconds the time to the end of it, the first step and the
    k steps after it that ran before it: first_step_s + sum(step_times_s[:k]); None when no
    step's loss was accepted (or none was timed)."""
    k = next((i for i, ok in enumerate(accepted) if ok), None)
    if k is None or k > len(step_times_s):
        return None
    return k, first_step_s + math.fsum(step_times_s[:k])


def _failed(modes: Sequence[Mode], failed_s: Mapping[str, float] | None) -> dict[str, float]:
    failed = {m.name: 0.0 for m in modes}
    for name, seconds in (failed_s or {}).items():
        if name not in failed:
            raise ConfigError(
                f"failed attempts for {name!r}, which is no mode; modes: {', '.join(failed)}"
            )
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ConfigError(f"failed attempts must take >= 0 s, got {seconds!r} for {name!r}")
        failed[name] = float(seconds)
    return failed


def bill(
    modes: Sequence[Mode],
    tokens_per_step: float,
    steps: Iterable[int],
    failed_s: Mapping[str, float] | None = None,
    price_per_hour: float | None = None,
) -> dict[str, Any]:
    """The full bill of every mode at every N: {"failed_s": {mode: s}, "price_per_hour": price or
    None, "seconds": {mode: {N: failed_s + total(N)}}, "cost": {mode: {N: money}} or None (no
    price), and, with two modes, the bill's "break_even_step" and "ahead_until_step" of the
    second against the first (their first steps carrying their failed attempts) and
    "at_break_even": {"seconds": {mode: s}, "cost": {mode: money} or None} at that step (None
    when it never comes)}."""
    _check_tokens_per_step(tokens_per_step)
    price = check_price(price_per_hour)
    failed = _failed(modes, failed_s)
    steps = sorted(set(steps))
    for n in steps:
        _check_steps(n)
    charged = [Mode(m.name, m.first_step_s + failed[m.name], m.tokens_per_s) for m in modes]

    def money(by_key: Mapping[Any, float]) -> dict[Any, float] | None:
        if price is None:
            return None
        return {key: cost(s, price) for key, s in by_key.items()}

    seconds = totals(charged, tokens_per_step, steps)
    result: dict[str, Any] = {
        "failed_s": failed,
        "price_per_hour": price,
        "seconds": seconds,
        "cost": None if price is None else {name: money(by_n) for name, by_n in seconds.items()},
        "break_even_step": None,
        "ahead_until_step": None,
        "at_break_even": None,
    }
    if len(charged) > 1:
        base, challenger = charged[0], charged[1]
        n = break_even_step(base, challenger, tokens_per_step)
        result["break_even_step"] = n
        result["ahead_until_step"] = ahead_until_step(base, challenger, tokens_per_step)
        if n is not None:
            at = {m.name: m.total_s(tokens_per_step, n) for m in charged}
            result["at_break_even"] = {"seconds": at, "cost": money(at)}
    return result


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


def parse_interval(text: str) -> tuple[float, float]:
    """'1.1,1.4' -> (1.1, 1.4): a speedup interval, 0 < LO <= HI."""
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(
            f"malformed --speedup-interval {text!r}: expected LO,HI, e.g. 1.1,1.4"
        ) from None
    if not (0 < lo <= hi and math.isfinite(hi)):
        raise ConfigError(f"malformed --speedup-interval {text!r}: expected 0 < LO <= HI")
    return lo, hi


def parse_failed(text: str) -> tuple[str | None, float]:
    """'600' -> (None, 600.0): failed attempts charged to every mode; 'compiled:600' ->
    ("compiled", 600.0): to that mode alone (the name may itself contain colons)."""
    name, sep, value = text.rpartition(":")
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if (sep and not name) or not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(
            f"malformed --failed-s {text!r}: expected SECONDS or NAME:SECONDS, seconds >= 0, "
            "e.g. 600 or compiled:600"
        )
    return (name or None), seconds


def failed_by_mode(modes: Sequence[Mode], given: Iterable[tuple[str | None, float]]) -> dict:
    """{mode name: seconds} from `parse_failed` pairs: a pair without a name adds to every mode;
    the seconds given for a mode add up."""
    names = [m.name for m in modes]
    failed = dict.fromkeys(names, 0.0)
    for name, seconds in given:
        if name is not None and name not in failed:
            raise ConfigError(
                f"--failed-s names {name!r}, which is no --mode; modes: {', '.join(names)}"
            )
        for key in names if name is None else [name]:
            failed[key] += seconds
    return failed


def _by_n(by_mode: dict[str, dict[int, float]] | None) -> dict[str, dict[str, float]] | None:
    if by_mode is None:
        return None
    return {name: {str(n): v for n, v in by_n.items()} for name, by_n in by_mode.items()}


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    """The calculator's JSON, exactly {"totals": {NAME: {"N": seconds}}, "break_even_step": int or
    null} (JSON keeps object keys as strings: N becomes "N"), plus "break_even_range": [int or
    null, int or null] and "conclusive": bool when a speedup interval was given, and "bill" when
    failed attempts or a price were: {"failed_s": {NAME: s}, "price_per_hour": number or null,
    "seconds": {NAME: {"N": s}}, "cost": {NAME: {"N": money}} or null (no price given),
    "break_even_step": int or null, "at_break_even": {"seconds": {NAME: s}, "cost": {NAME: money}
    or null} or null}."""
    doc = {
        "totals": _by_n(result["totals"]),
        "break_even_step": result["break_even_step"],
    }
    for key in ("break_even_range", "conclusive"):
        if key in result:
            doc[key] = result[key]
    if "bill" in result:
        b = result["bill"]
        doc["bill"] = {
            "failed_s": b["failed_s"],
            "price_per_hour": b["price_per_hour"],
            "seconds": _by_n(b["seconds"]),
            "cost": _by_n(b["cost"]),
            "break_even_step": b["break_even_step"],
            "at_break_even": b["at_break_even"],
        }
    return doc
