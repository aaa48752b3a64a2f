"""Dependency-free SVG charts: x/y scatter or line plots with log axes, a legend and tooltips, and
small multiples (a grid of small plots sharing one legend).

Output is one inline <svg> string (no scripts, no external references) that browsers render in an
HTML page opened offline. Hovering a marker shows its <title> as a tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("circle", "square", "triangle", "diamond")
# Besides MARKERS: "dot" (a small circle, for a reference drawn under the data) and "none".
LEFT = 64  # room for the y tick labels and the y axis label
LEGEND_RIGHT_MAX = 260  # px a legend right of the plot may take; longer names go below it
LEGEND_ROW = 18  # px per legend entry
TITLE_CHAR_PX = 8  # rough width of a 14px title character: longer titles are cut to fit


@dataclass
class Point:
    x: float
    y: float
    tip: str = ""  # tooltip text


@dataclass
class Series:
    name: str
    points: list[Point]
    color: str | None = None  # None: the next palette colour
    marker: str = "circle"  # one of MARKERS, "dot" or "none"
    line: bool = False  # join the points in x order
    dash: bool = False  # draw the line dashed (a reference or a threshold)


@dataclass
class Axis:
    label: str
    log: bool = False
    zero: bool = False  # include 0 in the range (linear axes): bars of "how much" start at 0
    ticks: Callable[[float], str] | None = None  # tick label format; None: compact numbers
    # Values are whole numbers (run 1, 2, 3): ticks only on them, and half a step of room on
    # either side, so one run is one tick, not an axis from 0.4 to 1.6.
    integer: bool = False


@dataclass
class _Scale:
    lo: float
    hi: float
    log: bool
    ticks: list[float]

    def frac(self, v: float) -> float:
        if self.log:
            return (math.log10(v) - math.log10(self.lo)) / (
                math.log10(self.hi) - math.log10(self.lo)
            )
        return (v - self.lo) / (self.hi - self.lo)


def _nice_step(raw: float) -> float:
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def _scale(values: list[float], axis: Axis) -> _Scale:
    if axis.log:
        lo_e, hi_e = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
        hi_e = max(hi_e, lo_e + 1)
        ticks = [10.0**e for e in range(lo_e, hi_e + 1)]
        if hi_e - lo_e <= 2:  # few decades: label 2x and 5x too, or the axis reads as empty
            ticks = sorted(t * m for t in ticks for m in (1, 2, 5) if t * m <= 10.0**hi_e)
        return _Scale(10.0**lo_e, 10.0**hi_e, True, ticks)
    lo, hi = min(values), max(values)
    if axis.integer:
        step = max(1, math.ceil(_nice_step(max(hi - lo, 1) / 5)))
        first, last = math.floor(lo), math.ceil(hi)
        ticks = [float(t) for t in range(first, last + 1, step)]
        return _Scale(first - 0.5, last + 0.5, False, ticks)
    if axis.zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if lo == hi:
        lo, hi = lo - (abs(lo) or 1) / 2, hi + (abs(hi) or 1) / 2
    step = _nice_step((hi - lo) / 5)
    lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
    n = round((hi - lo) / step)
    return _Scale(lo, hi, False, [round(lo + i * step, 12) for i in range(n + 1)])


def compact(v: float) -> str:
    """Tick label: 0.001 .. 99999 as written, exponents outside that."""
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e5:
        return f"{v:g}"
    mantissa, exp = f"{v:.0e}".split("e")
    return f"{mantissa}e{int(exp)}"


def _marker(shape: str, x: float, y: float, color: str, tip: str) -> str:
    if shape == "none":
        return ""
    paint = f'fill="{color}" fill-opacity="0.7" stroke="{color}"'
    title = f"<title>{escape(tip)}</title>" if tip else ""
    if shape == "square":
        return (
            f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" {paint}>{title}</rect>'
        )
    if shape == "triangle":
        d = f"M{x:.1f},{y - 4.5:.1f}L{x + 4.5:.1f},{y + 3.5:.1f}L{x - 4.5:.1f},{y + 3.5:.1f}Z"
        return f'<path d="{d}" {paint}>{title}</path>'
    if shape == "diamond":
        d = f"M{x:.1f},{y - 5:.1f}L{x + 5:.1f},{y:.1f}L{x:.1f},{y + 5:.1f}L{x - 5:.1f},{y:.1f}Z"
        return f'<path d="{d}" {paint}>{title}</path>'
    r = 2.5 if shape == "dot" else 4
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" {paint}>{title}</circle>'


def _stroke(s: Series, color: str) -> str:
    return f'fill="none" stroke="{color}"' + (' stroke-dasharray="5 3"' if s.dash else "")


def _colors(series: Sequence[Series]) -> list[str]:
    return [s.color or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]


def _head(width: float, height: float, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" role="img" aria-label="{escape(label)}" class="chart"'
        ' font-family="system-ui, sans-serif" font-size="12" style="max-width:100%;height:auto">'
    )


def xy_chart(
    series: Sequence[Series],
    x: Axis,
    y: Axis,
    *,
    title: str = "",
    width: int = 880,
    height: int = 420,
) -> str:
    """A scatter (or line) chart of several series with a legend, as an inline SVG string.

    The legend sits right of the plot; where the longest name would not fit there, it goes below
    the plot instead, in as many columns as fit, so every name stays whole."""
    widest = max((_swatch_width(s) for s in series), default=0)
    if 20 + widest <= LEGEND_RIGHT_MAX:
        body = _plot(series, x, y, title, width, height, legend=True)
        return "\n".join([_head(width, height, title or y.label), *body, "</svg>"])
    body = _plot(series, x, y, title, width, height, legend=False)
    entry = widest + 24
    columns = max(1, (width - LEFT) // entry)
    rows = math.ceil(len(series) / columns)
    total = height + rows * LEGEND_ROW + 8
    legend = []
    for i, (s, color) in enumerate(zip(series, _colors(series), strict=True)):
        lx = LEFT + (i % columns) * entry
        legend += _swatch(s, color, lx, height + 4 + (i // columns) * LEGEND_ROW)
    head = _head(width, total, title or y.label)
    return "\n".join([head, *body, '<g class="legend">', *legend, "</g>", "</svg>"])


@dataclass
class Panel:
    """One plot of a small-multiples grid."""

    series: list[Series]
    x: Axis
    y: Axis
    title: str = ""


def small_multiples(
    panels: Sequence[Panel],
    legend: Sequence[Series],
    *,
    columns: int = 4,
    panel_width: int = 320,
    panel_height: int = 220,
    label: str = "",
) -> str:
    """A grid of small plots under one shared legend, as one inline SVG string.

    Panels draw no legend of their own, so their series should carry explicit colours that match
    `legend` (one entry per kind of series, e.g. per run, whatever panel it appears in).
    """
    legend_h = 28 if legend else 0
    rows = max(1, math.ceil(len(panels) / columns))
    width, height = panel_width * min(columns, max(len(panels), 1)), legend_h + rows * panel_height
    out = [_head(width, height, label)]
    lx = 8.0
    for s, color in zip(legend, _colors(legend), strict=True):
        out += _swatch(s, color, lx, 14)
        lx += 20 + _swatch_width(s)
    for i, p in enumerate(panels):
        dx, dy = (i % columns) * panel_width, legend_h + (i // columns) * panel_height
        body = _plot(p.series, p.x, p.y, p.title, panel_width, panel_height, legend=False)
        out += [f'<g class="panel" transform="translate({dx},{dy})">', *body, "</g>"]
    out.append("</svg>")
    return "\n".join(out)


def _fit(title: str, width: float) -> str:
    """The title as SVG text, cut with an ellipsis where it would run out of the plot (the whole
    title stays in a tooltip)."""
    room = max(8, int(width // TITLE_CHAR_PX))
    if len(title) <= room:
        return escape(title)
    return f"<title>{escape(title)}</title>{escape(title[: room - 1])}…"


def _plot(
    series: Sequence[Series], x: Axis, y: Axis, title: str, width: int, height: int, legend: bool
) -> list[str]:
    """The SVG elements of one plot in a width x height box (no enclosing <svg>)."""

    def plottable(p: Point) -> bool:
        ok = math.isfinite(p.x) and math.isfinite(p.y)
        return ok and (p.x > 0 or not x.log) and (p.y > 0 or not y.log)

    data = [[p for p in s.points if plottable(p)] for s in series]
    points = [p for pts in data for p in pts]
    out = []
    if title:
        out.append(
            f'<text x="{LEFT}" y="20" font-size="14" font-weight="600">'
            f"{_fit(title, width - LEFT - 8)}</text>"
        )
    if not points:
        return [
            *out,
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#57606a">'
            "no data to plot</text>",
        ]
    sx, sy = _scale([p.x for p in points], x), _scale([p.y for p in points], y)

    legend_w = min(LEGEND_RIGHT_MAX, 20 + max(_swatch_width(s) for s in series)) if legend else 0
    left, right, top, bottom = LEFT, width - legend_w - 16, 36 if title else 16, height - 48

    def px(v: float) -> float:
        return left + sx.frac(v) * (right - left)

    def py(v: float) -> float:
        return bottom - sy.frac(v) * (bottom - top)

    # Grid and tick labels.
    xfmt, yfmt = x.ticks or compact, y.ticks or compact
    out.append('<g stroke="#d0d7de" stroke-width="1">')
    out += [f'<line x1="{px(t):.1f}" y1="{top}" x2="{px(t):.1f}" y2="{bottom}"/>' for t in sx.ticks]
    out += [f'<line x1="{left}" y1="{py(t):.1f}" x2="{right}" y2="{py(t):.1f}"/>' for t in sy.ticks]
    out.append("</g>")
    out.append(
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"'
        ' fill="none" stroke="#57606a"/>'
    )
    out.append('<g fill="#24292f">')
    out += [
        f'<text x="{px(t):.1f}" y="{bottom + 16}" text-anchor="middle">{escape(xfmt(t))}</text>'
        for t in sx.ticks
    ]
    out += [
        f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{escape(yfmt(t))}</text>'
        for t in sy.ticks
    ]
    out.append(
        f'<text x="{(left + right) / 2:.1f}" y="{height - 8}" text-anchor="middle">'
        f"{escape(x.label)}{' (log scale)' if x.log else ''}</text>"
    )
    out.append(
        f'<text transform="translate(16,{(top + bottom) / 2:.1f}) rotate(-90)" text-anchor="middle">'
        f"{escape(y.label)}{' (log scale)' if y.log else ''}</text>"
    )
    out.append("</g>")
    # Series, then the legend.
    colors = _colors(series)
    for s, pts, color in zip(series, data, colors, strict=True):
        out.append(f'<g class="series" data-name="{escape(s.name)}">')
        if s.line and len(pts) > 1:
            coords = " ".join(
                f"{px(p.x):.1f},{py(p.y):.1f}" for p in sorted(pts, key=lambda p: p.x)
            )
            out.append(f'<polyline points="{coords}" {_stroke(s, color)}/>')
        if s.marker != "none":
            out += [_marker(s.marker, px(p.x), py(p.y), color, p.tip) for p in pts]
        out.append("</g>")
    if legend:
        for i, (s, color) in enumerate(zip(series, colors, strict=True)):
            out += _swatch(s, color, right + 16, top + 8 + LEGEND_ROW * i)
    return out


def _swatch(s: Series, color: str, x: float, y: float) -> list[str]:
    """A legend entry at (x, y): a short line if the series is a line, its marker, its name."""
    if not s.line:
        return [
            _marker(s.marker, x + 6, y, color, ""),
            f'<text x="{x + 16}" y="{y + 4}">{escape(s.name)}</text>',
        ]
    return [
        f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" {_stroke(s, color)}/>',
        *([_marker(s.marker, x + 12, y, color, "")] if s.marker != "none" else []),
        f'<text x="{x + 30}" y="{y + 4}">{escape(s.name)}</text>',
    ]


def _swatch_width(s: Series) -> int:
    return (30 if s.line else 16) + 7 * len(s.name)
