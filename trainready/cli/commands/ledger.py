"""`trainready ledger`: time to N steps per mode, and the break-even step, from given numbers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from trainready.cli.common import console, guard
from trainready.reporting.numbers import money

if TYPE_CHECKING:
    from trainready.metrics.ledger import Mode


def duration(seconds: float) -> str:
    """Seconds as a person reads them: '0.84 s', '12.5 min', '3.2 h', '4.1 d'."""
    for unit, size in (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


def cost_clause(price_per_hour: float | None) -> str:
    """'cost at 2 per device-hour' or 'cost: no price given'."""
    from trainready.metrics.ledger import NO_PRICE

    if price_per_hour is None:
        return f"cost: {NO_PRICE}"
    return f"cost at {price_per_hour:,g} per device-hour"


def _text(result: dict, modes: list, tokens_per_step: float) -> None:
    from rich.table import Table

    table = Table(title=f"Total time to N steps ({tokens_per_step:,g} tokens per step)")
    table.add_column("N", justify="right")
    for m in modes:
        table.add_column(
            f"{m.name}\nfirst {duration(m.first_step_s)}, {m.tokens_per_s:,g} tok/s",
            justify="right",
        )
    steps = next(iter(result["totals"].values()))
    for n in steps:
        table.add_row(f"{n:,}", *(duration(result["totals"][m.name][n]) for m in modes))
    console.print(table)
    if len(modes) >= 2:
        console.print(_break_even_line(result, modes[0], modes[1]), highlight=False)
    if "bill" not in result:
        console.print(
            "cost: no price given (--price-per-hour adds the money to N steps)", highlight=False
        )
        return
    _bill_text(result["bill"], modes, result.get("conclusive", True))


def _bill_text(bill: dict, modes: list, conclusive: bool = True) -> None:
    """The full bill: failed attempts + the ledger's totals per mode at each N, with the money at
    the price (or "no price given"), and the bill's break-even with its seconds and money."""
    from rich.table import Table

    price = bill["price_per_hour"]
    failed = ", ".join(f"{name} {duration(s)}" for name, s in bill["failed_s"].items())
    table = Table(title=f"The bill to N steps (failed attempts: {failed}; {cost_clause(price)})")
    table.add_column("N", justify="right")
    for m in modes:
        table.add_column(f"{m.name}\ntime", justify="right")
        if price is not None:
            table.add_column(f"{m.name}\ncost", justify="right")
    for n in next(iter(bill["seconds"].values())):
        row = [f"{n:,}"]
        for m in modes:
            row.append(duration(bill["seconds"][m.name][n]))
            if price is not None:
                row.append(money(bill["cost"][m.name][n]))
        table.add_row(*row)
    console.print(table)
    if len(modes) < 2:
        return
    base, challenger = modes[0].name, modes[1].name
    n, at = bill["break_even_step"], bill["at_break_even"]
    if not conclusive:
        line = "bill break-even: inconclusive — the speedup interval includes 1"
    elif n is None:
        until = bill["ahead_until_step"]
        line = "bill break-even: never" + (
            f" ({challenger} ahead up to step {until:,})" if until is not None else ""
        )
    else:
        spent = ", ".join(
            f"{name} {duration(at['seconds'][name])}"
            + (f" = {money(at['cost'][name])}" if at["cost"] is not None else "")
            for name in (challenger, base)
        )
        line = f"bill break-even: step {n:,} ({spent}; {cost_clause(price)})"
    console.print(line, highlight=False)


def _break_even_line(result: dict, base: Mode, challenger: Mode) -> str:
    n, until = result["break_even_step"], result["ahead_until_step"]
    if result.get("conclusive") is False:
        return (
            "break-even: inconclusive — the speedup interval includes 1: either "
            f"{challenger.name} or {base.name} could be the faster per step"
        )
    if until is not None:
        line = (
            f"break-even: never — {challenger.name} starts no slower than {base.name} but is "
            f"slower per step: ahead up to step {until:,}, behind for good after it"
        )
    elif n is None:
        line = (
            f"break-even: never — {challenger.name} starts slower than {base.name} and is not "
            "faster per step"
        )
    elif n == 1:
        line = (
            f"break-even: step 1 — {challenger.name} is no slower than {base.name} from the start"
            " and per step"
        )
    else:
        line = f"break-even: {challenger.name} catches up with {base.name} at step {n:,}"
        if "break_even_range" in result:
            lo, hi = result["break_even_range"]
            line += f" (between steps {lo:,} and {hi:,} over the speedup interval)"
    return line


def register(app: typer.Typer) -> None:
    @app.command()
    @guard
    def ledger(
        tokens_per_step: Annotated[
            float, typer.Option(help="Tokens per optimizer step (global batch x sequence length).")
        ],
        mode: Annotated[
            list[str],
            typer.Option(
                help="NAME:FIRST_STEP_S:TOKENS_PER_S, repeatable; the second is compared with "
                "the first for the break-even step."
            ),
        ],
        steps: Annotated[
            str | None, typer.Option(help="Step counts N, comma-separated (default 1,10,…,1e5).")
        ] = None,
        speedup_interval: Annotated[
            str | None,
            typer.Option(
                help="LO,HI: an interval of the second mode's steady tokens/s over the first's "
                "(e.g. a 95% confidence interval); adds the break-even range over it, and calls "
                "the break-even inconclusive when it includes 1."
            ),
        ] = None,
        price_per_hour: Annotated[
            float | None,
            typer.Option(
                help="Price of one device-hour, in your currency (e.g. 2.0): adds the bill's "
                "money, cost(N) = (failed attempts + time to N steps) x price / 3600, per mode "
                'and at the break-even step. Without it no money is shown ("no price given"), '
                "never 0.",
                show_default=False,
            ),
        ] = None,
        failed_s: Annotated[
            list[str] | None,
            typer.Option(
                help="[NAME:]SECONDS, repeatable: time spent on failed attempts (runs that "
                "crashed or timed out before a valid step), added to every mode's bill, or to "
                "mode NAME's alone (then it can move the bill's break-even step).",
                show_default=False,
            ),
        ] = None,
        as_json: Annotated[
            bool,
            typer.Option(
                "--json",
                help='Print {"totals": {NAME: {"N": seconds}}, "break_even_step": int | null}, '
                'with --speedup-interval also "break_even_range" and "conclusive", with '
                '--price-per-hour or --failed-s also "bill" (seconds and cost per mode and N, '
                "cost null without a price).",
            ),
        ] = False,
    ) -> None:
        """Total time to N steps per mode (first step + (N-1) steady steps) and the break-even
        step of the second mode against the first: the step from which it is no slower in total
        for good ("never" if it is slower per step, even when it starts faster). With
        --price-per-hour and --failed-s, the full bill: failed attempts + time to N steps, and
        its cost at the price."""
        from trainready.metrics import ledger as arithmetic

        modes = [arithmetic.parse_mode(text) for text in mode]
        step_counts = (
            arithmetic.parse_steps(steps) if steps is not None else list(arithmetic.DEFAULT_STEPS)
        )
        interval = (
            arithmetic.parse_interval(speedup_interval) if speedup_interval is not None else None
        )
        price = arithmetic.check_price(price_per_hour)
        failed = (
            arithmetic.failed_by_mode(modes, [arithmetic.parse_failed(t) for t in failed_s])
            if failed_s
            else None
        )
        result = arithmetic.ledger(modes, tokens_per_step, step_counts, interval, failed, price)
        if as_json:
            print(json.dumps(arithmetic.to_json(result)))
        else:
            _text(result, modes, tokens_per_step)
