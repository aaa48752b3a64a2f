"""The time-to-result ledger: totals, the break-even step (including never and equal speed), and
the `trainready ledger` calculator with its exact interface."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support import paths
from tests.support.clirun import cli
from trainready.core.config import ConfigError
from trainready.metrics.ledger import (
    Mode,
    ahead_until_step,
    break_even_range,
    break_even_step,
    ledger,
    parse_interval,
    parse_mode,
    parse_steps,
    to_json,
)

ROOT = paths.ROOT

EAGER = Mode("eager", first_step_s=3.0, tokens_per_s=1000.0)  # 1 s per 1000-token step
COMPILED = Mode("compiled", first_step_s=93.0, tokens_per_s=1250.0)  # 0.8 s per step


def test_total_is_first_step_plus_steady_steps():
    assert EAGER.total_s(1000, 1) == 3.0
    assert EAGER.total_s(1000, 11) == pytest.approx(3.0 + 10 * 1.0)
    assert COMPILED.total_s(1000, 101) == pytest.approx(93.0 + 100 * 0.8)


def test_break_even_is_the_first_step_where_compiled_is_not_slower():
    # Head start 90 s, gain 0.2 s per step: caught up after 450 steady steps, at N = 451.
    n = break_even_step(EAGER, COMPILED, 1000)
    assert n == 451
    assert COMPILED.total_s(1000, n) <= EAGER.total_s(1000, n)
    assert COMPILED.total_s(1000, n - 1) > EAGER.total_s(1000, n - 1)


def test_break_even_matches_brute_force_on_awkward_numbers():
    base = Mode("a", 0.37, 311.0)
    challenger = Mode("b", 41.3, 377.7)
    brute = next(
        n for n in range(1, 100_000) if challenger.total_s(4096, n) <= base.total_s(4096, n)
    )
    assert break_even_step(base, challenger, 4096) == brute


def test_never_breaks_even_when_slower_to_start_and_per_step():
    slow = Mode("compiled", 90.0, 900.0)
    assert break_even_step(EAGER, slow, 1000) is None


def test_equal_speed_never_catches_up_unless_it_starts_no_slower():
    same_rate_later = Mode("compiled", 10.0, EAGER.tokens_per_s)
    assert break_even_step(EAGER, same_rate_later, 1000) is None
    same_rate_same_start = Mode("compiled", EAGER.first_step_s, EAGER.tokens_per_s)
    assert break_even_step(EAGER, same_rate_same_start, 1000) == 1


def test_no_slower_at_the_start_and_per_step_breaks_even_at_step_one():
    quicker = Mode("compiled", EAGER.first_step_s - 1, EAGER.tokens_per_s * 2)
    assert break_even_step(EAGER, quicker, 1000) == 1
    assert ahead_until_step(EAGER, quicker, 1000) is None


def test_a_faster_start_but_slower_steps_is_ahead_only_until_a_step_then_never():
    # Eager against compiled: 90 s ahead, 0.2 s per step behind -> still ahead at N = 451 (tie),
    # behind from 452 on, for good: no break-even.
    assert break_even_step(COMPILED, EAGER, 1000) is None
    until = ahead_until_step(COMPILED, EAGER, 1000)
    assert until == 451
    assert EAGER.total_s(1000, until) <= COMPILED.total_s(1000, until)
    assert EAGER.total_s(1000, until + 1) > COMPILED.total_s(1000, until + 1)
    assert ahead_until_step(EAGER, COMPILED, 1000) is None


def test_ahead_until_matches_brute_force_on_awkward_numbers():
    base = Mode("a", 41.3, 311.0)
    challenger = Mode("b", 0.37, 277.7)
    brute = max(
        n for n in range(1, 100_000) if challenger.total_s(4096, n) <= base.total_s(4096, n)
    )
    assert ahead_until_step(base, challenger, 4096) == brute
    assert break_even_step(base, challenger, 4096) is None


def test_ledger_result_and_json_shape():
    result = ledger([EAGER, COMPILED], 1000, [100, 1, 1000])
    assert list(result["totals"]["eager"]) == [1, 100, 1000]
    assert result["totals"]["compiled"][1000] == pytest.approx(93.0 + 999 * 0.8)
    assert result["break_even_step"] == 451
    doc = json.loads(json.dumps(to_json(result)))
    assert doc["totals"]["eager"]["100"] == pytest.approx(102.0)
    assert ledger([EAGER], 1000, [1])["break_even_step"] is None


def test_break_even_range_is_the_break_even_at_both_ends_of_the_speedup_interval():
    # COMPILED is 1.25x EAGER per step. At 1.5x: gain 1/3 s per step, 90 s caught up at N = 271;
    # at 1.1x: gain 1/11 s, caught up at N = 991.
    assert break_even_range(EAGER, COMPILED, 1000, (1.1, 1.5)) == (271, 991)
    assert break_even_range(EAGER, COMPILED, 1000, (1.25, 1.25)) == (451, 451)
    # An interval that reaches below 1: the slow end never breaks even.
    assert break_even_range(EAGER, COMPILED, 1000, (0.9, 1.5)) == (271, None)
    result = ledger([EAGER, COMPILED], 1000, [1], speedup=(1.1, 1.5))
    assert (result["break_even_range"], result["conclusive"]) == ([271, 991], True)
    assert not ledger([EAGER, COMPILED], 1000, [1], speedup=(0.9, 1.5))["conclusive"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: parse_mode("compiled:95"), "malformed --mode"),
        (lambda: parse_mode("compiled:x:1"), "must be numbers"),
        (lambda: parse_mode("compiled:1:0"), "tokens/s must be a positive number"),
        (lambda: parse_mode("compiled:-1:10"), "first-step time must be"),
        (lambda: parse_steps("1,0"), "malformed --steps"),
        (lambda: parse_steps("ten"), "malformed --steps"),
        (lambda: ledger([EAGER, EAGER], 1000), "unique"),
        (lambda: ledger([EAGER], 0), "tokens per step"),
        (lambda: ledger([EAGER, COMPILED], 1000, speedup=(1.3, 1.5)), "must contain"),
        (lambda: ledger([EAGER], 1000, speedup=(1.0, 1.5)), "exactly two modes"),
        (lambda: break_even_range(EAGER, COMPILED, 1000, (1.5, 1.1)), "0 < lo <= hi"),
        (lambda: parse_interval("1.1"), "malformed --speedup-interval"),
        (lambda: parse_interval("0,2"), "0 < LO <= HI"),
    ],
)
def test_bad_input_is_a_config_error(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_mode_name_may_contain_colons():
    assert parse_mode("compiled:warm:12.5:4000") == Mode("compiled:warm", 12.5, 4000.0)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return cli("ledger", *args, timeout=120)


def test_cli_json_and_text():
    modes = ["--mode", "eager:3:1000", "--mode", "compiled:93:1250"]
    p = _cli("--tokens-per-step", "1000", *modes, "--steps", "1,451", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc == {
        "totals": {
            "eager": {"1": 3.0, "451": pytest.approx(453.0)},
            "compiled": {"1": 93.0, "451": pytest.approx(453.0)},
        },
        "break_even_step": 451,
    }
    text = _cli("--tokens-per-step", "1000", *modes)
    assert text.returncode == 0, text.stderr
    assert "catches up with eager at step 451" in text.stdout
    swapped = ["--mode", "compiled:93:1250", "--mode", "eager:3:1000"]
    p = _cli("--tokens-per-step", "1000", *swapped, "--json")
    assert json.loads(p.stdout)["break_even_step"] is None
    text = _cli("--tokens-per-step", "1000", *swapped)
    assert "ahead up to step 451, behind for good after it" in text.stdout


def test_cli_speedup_interval_gives_a_range_or_inconclusive():
    modes = ["--tokens-per-step", "1000", "--mode", "eager:3:1000", "--mode", "compiled:93:1250"]
    p = _cli(*modes, "--steps", "1", "--speedup-interval", "1.1,1.5", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert (doc["break_even_step"], doc["break_even_range"], doc["conclusive"]) == (
        451,
        [271, 991],
        True,
    )
    text = " ".join(_cli(*modes, "--speedup-interval", "1.1,1.5").stdout.split())
    assert "at step 451 (between steps 271 and 991 over the speedup interval)" in text
    text = _cli(*modes, "--speedup-interval", "0.9,1.5").stdout
    assert "break-even: inconclusive" in text


@pytest.mark.parametrize("mode", ["eager:3", "eager:x:4", "[bold]a:x:4", "a[/]:x:4"])
def test_cli_bad_input_is_one_line_and_exit_2(mode):
    # Brackets and `:x:` are quoted as typed, never read as rich markup or emoji.
    p = _cli("--tokens-per-step", "1000", "--mode", mode)
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"malformed --mode '{mode}'" in lines[0]
