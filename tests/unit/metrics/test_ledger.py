"""The time-to-result ledger: totals, the break-even step (including never and equal speed), and
the `trainready ledger` calculator with its exact interface."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from tests.support import paths
from tests.support.clirun import cli
from trainready.core.config import ConfigError
from trainready.metrics.ledger import (
    NO_PRICE,
    Mode,
    ahead_until_step,
    bill,
    break_even_range,
    break_even_step,
    check_price,
    cost,
    failed_by_mode,
    first_valid,
    ledger,
    parse_failed,
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


# --- the full bill: the seed's ledger, money, failed attempts, the first valid result ------------
#
# The seed (issue #39, item 6): eager against compiled, 296.8 / 343.7 s to 20 steps and
# 769.2 / 714.0 s to 100 steps, compiled breaking even at step 57. The ledger's inputs, by hand
# from total(N) = first + (N - 1) * step:
#   eager:    step = (769.2 - 296.8) / 80 = 5.905 s,    first = 296.8 - 19 * 5.905   = 184.605 s
#   compiled: step = (714.0 - 343.7) / 80 = 4.62875 s,  first = 343.7 - 19 * 4.62875 = 255.75375 s
# compiled starts 71.14875 s behind and gains 1.27625 s a step: 71.14875 / 1.27625 = 55.75 steady
# steps, so it is caught up at N = 1 + 56 = 57 (behind by 0.955 s at 56, ahead by 0.321 s at 57).
SEED_TOKENS = 4096  # any tokens per step: tokens/s below is chosen to give the step times above
SEED_EAGER = Mode("eager", 184.605, SEED_TOKENS / 5.905)
SEED_COMPILED = Mode("compiled", 255.75375, SEED_TOKENS / 4.62875)
PRICE = 2.00  # per device-hour: 1 s costs 2 / 3600 = 0.000555...


def test_the_seed_ledger_reproduces_its_four_totals_and_break_even_at_57():
    totals = ledger([SEED_EAGER, SEED_COMPILED], SEED_TOKENS, [20, 56, 57, 100])
    assert totals["totals"]["eager"][20] == pytest.approx(296.8)
    assert totals["totals"]["compiled"][20] == pytest.approx(343.7)
    assert totals["totals"]["eager"][100] == pytest.approx(769.2)
    assert totals["totals"]["compiled"][100] == pytest.approx(714.0)
    assert totals["break_even_step"] == 57
    # 184.605 + 55 * 5.905 = 509.38 vs 255.75375 + 55 * 4.62875 = 510.335; at 57: 515.285 vs
    # 514.96375.
    assert totals["totals"]["eager"][56] == pytest.approx(509.38)
    assert totals["totals"]["compiled"][56] == pytest.approx(510.33500)
    assert totals["totals"]["eager"][57] == pytest.approx(515.285)
    assert totals["totals"]["compiled"][57] == pytest.approx(514.96375)


def test_the_seed_bill_at_two_per_device_hour():
    # cost = seconds * 2.00 / 3600, by hand:
    #   N = 20:  eager 296.8 / 1800 = 0.164889,   compiled 343.7 / 1800 = 0.190944
    #   N = 100: eager 769.2 / 1800 = 0.427333,   compiled 714.0 / 1800 = 0.396667
    #   break-even, N = 57: eager 515.285 / 1800 = 0.286269, compiled 514.96375 / 1800 = 0.286091
    b = bill([SEED_EAGER, SEED_COMPILED], SEED_TOKENS, [20, 100], price_per_hour=PRICE)
    assert b["price_per_hour"] == 2.0 and b["failed_s"] == {"eager": 0.0, "compiled": 0.0}
    assert b["seconds"]["eager"] == pytest.approx({20: 296.8, 100: 769.2})
    assert b["cost"]["eager"] == pytest.approx({20: 0.164889, 100: 0.427333}, abs=1e-6)
    assert b["cost"]["compiled"] == pytest.approx({20: 0.190944, 100: 0.396667}, abs=1e-6)
    # Money breaks even where time does: one price for both modes.
    assert b["break_even_step"] == 57
    at = b["at_break_even"]
    assert at["seconds"] == pytest.approx({"eager": 515.285, "compiled": 514.96375})
    assert at["cost"] == pytest.approx({"eager": 0.286269, "compiled": 0.286091}, abs=1e-6)


def test_failed_attempts_add_to_the_bill_and_move_its_break_even_only_when_one_sided():
    # 600 s of failed attempts charged to both: every bill + 600 s (+ 600 / 1800 = 0.333333),
    # the break-even still 57.
    both = bill([SEED_EAGER, SEED_COMPILED], SEED_TOKENS, [100], {"eager": 600, "compiled": 600},
                PRICE)  # fmt: skip
    assert both["seconds"]["eager"][100] == pytest.approx(1369.2)
    assert both["cost"]["eager"][100] == pytest.approx(0.760667, abs=1e-6)
    assert both["cost"]["compiled"][100] == pytest.approx(0.730000, abs=1e-6)
    assert both["break_even_step"] == 57
    # Charged to compiled alone (say its cold compile timed out): it starts 671.14875 s behind,
    # 671.14875 / 1.27625 = 525.88 steady steps -> N = 1 + 526 = 527, where the bills are
    # eager 184.605 + 526 * 5.905 = 3290.635 s (1.828131) and compiled 855.75375 + 526 *
    # 4.62875 = 3290.47625 s (1.828042).
    one = bill([SEED_EAGER, SEED_COMPILED], SEED_TOKENS, [100], {"compiled": 600}, PRICE)
    assert one["break_even_step"] == 527
    assert one["at_break_even"]["seconds"] == pytest.approx(
        {"eager": 3290.635, "compiled": 3290.47625}
    )
    assert one["at_break_even"]["cost"] == pytest.approx(
        {"eager": 1.828131, "compiled": 1.828042}, abs=1e-6
    )
    # The time ledger itself does not move: failed attempts are the bill's.
    assert ledger([SEED_EAGER, SEED_COMPILED], SEED_TOKENS, [1])["break_even_step"] == 57


def test_no_price_gives_no_money_never_zero():
    b = bill([SEED_EAGER, SEED_COMPILED], SEED_TOKENS, [20])
    assert b["price_per_hour"] is None and b["cost"] is None
    assert b["at_break_even"]["cost"] is None and b["at_break_even"]["seconds"]
    assert cost(3600, None) is None and cost(3600, 2.0) == 2.0
    assert NO_PRICE == "no price given"
    # A ledger with neither failed attempts nor a price has no bill: its JSON is as it was.
    assert "bill" not in ledger([SEED_EAGER], SEED_TOKENS, [1])


@pytest.mark.parametrize("price", [0, 0.0, -2.0, math.nan, math.inf, True, "2"])
def test_a_price_must_be_a_finite_number_above_zero(price):
    with pytest.raises(ConfigError, match="price per device-hour"):
        check_price(price)


def test_first_valid_is_the_first_accepted_step_with_the_steps_before_it():
    # Step 0 took 9 s, steps 1 and 2 took 0.15 and 0.1 s: a loss accepted from step 2 on is a
    # first valid result 9 + 0.15 + 0.1 = 9.25 s in.
    assert first_valid(9.0, [0.15, 0.1, 0.1], [False, False, True, True]) == (
        2,
        pytest.approx(9.25),
    )
    assert first_valid(9.0, [0.15, 0.1], [True, True, True]) == (0, 9.0)
    assert first_valid(9.0, [0.15, 0.1], [False, False, False]) is None
    assert first_valid(9.0, [], [False, True]) is None  # step 1 accepted but never timed


def test_failed_attempts_parse_per_mode_or_for_every_mode():
    assert parse_failed("600") == (None, 600.0)
    assert parse_failed("compiled:warm:60") == ("compiled:warm", 60.0)
    modes = [SEED_EAGER, SEED_COMPILED]
    given = [parse_failed("600"), parse_failed("compiled:30"), parse_failed("compiled:10")]
    assert failed_by_mode(modes, given) == {"eager": 600.0, "compiled": 640.0}
    for bad in ("", "x", ":5", "-1", "compiled:nan"):
        with pytest.raises(ConfigError, match="malformed --failed-s"):
            parse_failed(bad)
    with pytest.raises(ConfigError, match="which is no --mode"):
        failed_by_mode(modes, [("eagre", 1.0)])
    with pytest.raises(ConfigError, match="which is no mode"):
        bill(modes, SEED_TOKENS, [1], {"eagre": 1.0})


SEED_MODES = [
    "--mode", f"eager:184.605:{SEED_TOKENS / 5.905!r}",
    "--mode", f"compiled:255.75375:{SEED_TOKENS / 4.62875!r}",
]  # fmt: skip


def test_cli_prices_the_seed_and_charges_failed_attempts():
    args = ["--tokens-per-step", str(SEED_TOKENS), *SEED_MODES, "--steps", "20,100"]
    p = _cli(*args, "--price-per-hour", "2", "--failed-s", "compiled:600", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["break_even_step"] == 57  # the time ledger's
    b = doc["bill"]
    assert (b["price_per_hour"], b["failed_s"]) == (2.0, {"eager": 0.0, "compiled": 600.0})
    assert b["seconds"]["compiled"] == pytest.approx({"20": 943.7, "100": 1314.0})
    assert b["cost"]["eager"] == pytest.approx({"20": 0.164889, "100": 0.427333}, abs=1e-6)
    assert b["cost"]["compiled"] == pytest.approx({"20": 0.524278, "100": 0.73}, abs=1e-6)
    assert b["break_even_step"] == 527
    text = " ".join(_cli(*args, "--price-per-hour", "2").stdout.split())
    # 0.165 / 0.191 at N=20 and 0.427 / 0.397 at N=100; at step 57 both 0.286 (515 s, 8.6 min).
    assert "cost at 2 per device-hour" in text
    for figure in ("0.165", "0.191", "0.427", "0.397"):
        assert figure in text
    assert "bill break-even: step 57 (compiled 8.6 min = 0.286, eager 8.6 min = 0.286" in text


def test_cli_without_a_price_says_so_and_shows_no_money():
    args = ["--tokens-per-step", str(SEED_TOKENS), *SEED_MODES, "--steps", "20"]
    text = _cli(*args).stdout
    assert "cost: no price given" in text
    assert "bill" not in json.loads(_cli(*args, "--json").stdout)
    p = _cli(*args, "--failed-s", "600", "--json")  # failed attempts, no price: cost null
    doc = json.loads(p.stdout)
    assert doc["bill"]["cost"] is None and doc["bill"]["price_per_hour"] is None
    assert doc["bill"]["seconds"]["eager"]["20"] == pytest.approx(896.8)
    text = " ".join(_cli(*args, "--failed-s", "600").stdout.split())
    assert "cost: no price given" in text and "bill break-even: step 57" in text
    bad = _cli(*args, "--price-per-hour", "0")
    assert bad.returncode == 2 and "must be a finite number > 0" in bad.stderr
