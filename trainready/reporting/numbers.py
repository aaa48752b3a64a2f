"""Numbers as they read in prose and tables, everywhere (reports, the terminal, `analyze`).

Standard library only: `trainready analyze`'s quick path imports it without the report package.
"""

from __future__ import annotations

import math

# Below this a number is written with an exponent (a relative error of 1e-9, say): anything
# larger reads as a plain decimal, in prose and tables alike.
SMALLEST_PLAIN = 1e-6


def number(value: float) -> str:
    """The one way numbers read in prose and tables: three significant digits or so, thousands
    separated, no exponent for everyday magnitudes (0.000489, 1,120, 4.89)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    a = abs(value)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:.1f}"
    if a >= 1:
        return f"{value:.2f}"
    if a >= 0.001:
        return f"{value:.4f}".rstrip("0")
    if a >= SMALLEST_PLAIN:
        digits = 2 - math.floor(math.log10(a))  # three significant digits
        return f"{value:.{digits}f}".rstrip("0")
    return f"{value:.2e}"


def percent(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def money(value: float) -> str:
    """An amount of money (in a price's currency, which it does not name): two decimals from 1
    up ('1,234.50'), three significant digits below ('0.286', '0.620', '0.00412'), so a small
    bill never reads as 0."""
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1:
        return f"{value:,.2f}"
    if value == 0:
        return "0"
    return f"{value:#.3g}" if abs(value) >= SMALLEST_PLAIN else f"{value:.2e}"
