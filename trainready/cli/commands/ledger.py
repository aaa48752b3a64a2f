"""`trainready ledger`: time to N steps per mode, and the break-even step, from given numbers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from trainready.cli.common import console, guard

if TYPE_CHECKING:
    from trainready.metrics.ledger import Mode


def duration(seconds: float) -> str:
    """Seconds as a person reads them: '0.84 s', '12.5 min', '3.2 h', '4.1 d'."""
    for unit, size in (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


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
    if len(modes) < 2:
        return
    console.print(_break_even_line(result, modes[0], modes[1]), highlight=False)


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
        as_json: Annotated[
            bool,
            typer.Option(
                "--json",
                help='Print {"totals": {NAME: {"N": seconds}}, "break_even_step": int | null}, '
                'with --speedup-interval also "break_even_range" and "conclusive".',
            ),
        ] = False,
    ) -> None:
        """Total time to N steps per mode (first step + (N-1) steady steps) and the break-even
        step of the second mode against the first: the step from which it is no slower in total
        for good ("never" if it is slower per step, even when it starts faster)."""
        from trainready.metrics import ledger as arithmetic

        modes = [arithmetic.parse_mode(text) for text in mode]
        step_counts = (
            arithmetic.parse_steps(steps) if steps is not None else list(arithmetic.DEFAULT_STEPS)
        )
        interval = (
            arithmetic.parse_interval(speedup_interval) if speedup_interval is not None else None
        )
        result = arithmetic.ledger(modes, tokens_per_step, step_counts, interval)
        if as_json:
            print(json.dumps(arithmetic.to_json(result)))
        else:
            _text(result, modes, tokens_per_step)
