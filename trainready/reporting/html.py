"""The scorecard as ONE self-contained HTML file: inline CSS, inline SVG charts, a little inline JS.

No fonts, scripts or styles from anywhere else: the file opens offline, from an attachment or an
artifact store, and shows the same thing years later.
"""

from __future__ import annotations

import math
from html import escape

from trainready.reporting import document, fmt
from trainready.reporting.blocks import Block, Chart, Section, Stat, Stats, Table, Text
from trainready.reporting.model import Report

_STATUS_CSS = "\n".join(f".st-{s}{{background:{c}}}" for s, c in fmt.STATUS_COLORS.items())


def _level_class(level: str) -> str:
    return "vd-" + level.replace(" ", "-")


_VERDICT_CSS = "\n".join(
    f".{_level_class(v)}{{background:{c}}}\n.stat.{_level_class(v)} .v{{color:{c}}}"
    f"\n.stat.{_level_class(v)}{{border-left:6px solid {c}}}"
    for v, c in fmt.VERDICT_COLORS.items()
)

CSS = """
:root{--fg:#24292f;--muted:#57606a;--line:#d0d7de;--bg:#fff;--soft:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg)}
header{padding:20px 32px 8px;border-bottom:1px solid var(--line);background:var(--soft)}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:18px;margin:32px 0 12px;padding-bottom:4px;border-bottom:1px solid var(--line)}
nav a{margin-right:14px;color:#0969da;text-decoration:none}
main{padding:0 32px 48px;max-width:1400px}
.sub{color:var(--muted);margin:0 0 8px}
.stats{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.stat{border:1px solid var(--line);border-radius:6px;padding:10px 14px;min-width:180px;background:var(--soft)}
.stat .v{font-size:22px;font-weight:600}
.stat .l{font-weight:600}
.stat .n{color:var(--muted);font-size:12px}
.stat .d{font-size:12px;margin-top:2px}
.stat.vd-ready,.stat.vd-partial,.stat.vd-not-ready,.stat.vd-not-tested{background:var(--bg)}
.tablebox{margin:12px 0;overflow:auto;max-width:100%}
.drill .tablebox{max-height:560px}
table{border-collapse:collapse;font-size:13px}
caption{text-align:left;color:var(--muted);padding:4px 0;caption-side:top}
th,td{border:1px solid var(--line);padding:3px 8px;vertical-align:top}
th{background:var(--soft);cursor:pointer;position:sticky;top:0;user-select:none;text-align:left}
th[data-dir=asc]::after{content:" \\25B2"}
th[data-dir=desc]::after{content:" \\25BC"}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.st,.vd{color:#fff;background:#57606a;border-radius:10px;padding:0 8px;font-size:12px;white-space:nowrap}
.vd{font-weight:600}
p.empty{color:var(--muted)}
td a{white-space:nowrap}
figure{overflow-x:auto}
.filters{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin-top:12px}
.filters input{padding:4px 8px;width:260px;max-width:100%}
.count{color:var(--muted)}
figure{margin:16px 0}
figcaption{color:var(--muted)}
p.text{margin:4px 0}
@media (max-width:640px){header{padding:12px 12px 6px}main{padding:0 12px 32px}.stat{min-width:0}}
"""

# Sort any table by clicking a header; filter drill-down tables by text, by status and by the
# value of any facet column (a menu each, `select[data-col]`: the rows whose cell in that column
# holds the value picked).
JS = """
for (const table of document.querySelectorAll("table")) {
  table.tHead.addEventListener("click", (e) => {
    const th = e.target.closest("th");
    if (!th) return;
    const i = th.cellIndex, num = th.classList.contains("num");
    const dir = th.dataset.dir === "asc" ? "desc" : "asc";
    for (const h of th.parentNode.cells) delete h.dataset.dir;
    th.dataset.dir = dir;
    const sign = dir === "asc" ? 1 : -1;
    const key = (tr) => num ? parseFloat(tr.cells[i].dataset.v) : tr.cells[i].textContent;
    const rows = [...table.tBodies[0].rows].sort((a, b) => {
      const x = key(a), y = key(b);
      if (!num) return sign * x.localeCompare(y, undefined, {numeric: true});
      if (isNaN(x) || isNaN(y)) return isNaN(x) - isNaN(y);  // blanks last either way
      return sign * (x - y);
    });
    table.tBodies[0].append(...rows);
  });
}
for (const box of document.querySelectorAll(".drill")) {
  const text = box.querySelector("input"), status = box.querySelector("select:not([data-col])");
  const facets = [...box.querySelectorAll("select[data-col]")];
  const count = box.querySelector(".count"), rows = [...box.querySelectorAll("tbody tr")];
  const apply = () => {
    const q = text.value.toLowerCase(), s = status ? status.value : "";
    let shown = 0;
    for (const tr of rows) {
      const ok = (!q || tr.textContent.toLowerCase().includes(q)) &&
        (!s || tr.dataset.status.split(" ").includes(s)) &&
        facets.every((f) => !f.value || tr.cells[+f.dataset.col].dataset.f === f.value);
      tr.hidden = !ok;
      shown += ok;
    }
    count.textContent = `${shown} of ${rows.length} ${rows.length === 1 ? "row" : "rows"}`;
  };
  text.addEventListener("input", apply);
  if (status) status.addEventListener("change", apply);
  for (const f of facets) f.addEventListener("change", apply);
  apply();
}
"""


def render(report: Report) -> str:
    runs = ", ".join(
        f"{r.label} ({r.run_id}{', primary' if i == 0 and report.multi else ''})"
        for i, r in enumerate(report.runs)
    )
    return page(document.title(report), f"Runs: {runs}", document.build(report))


def page(title_text: str, subtitle: str, sections: list[Section]) -> str:
    """One self-contained HTML page of sections (the scorecard, the history…)."""
    title = escape(title_text)
    nav = "".join(f'<a href="#{escape(s.anchor)}">{escape(s.title)}</a>' for s in sections)
    body = "\n".join(_section(s) for s in sections)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{CSS}{_STATUS_CSS}
{_VERDICT_CSS}</style>
</head>
<body>
<header>
<h1>{title}</h1>
<p class="sub">{escape(subtitle)}</p>
<nav>{nav}</nav>
</header>
<main>
{body}
</main>
<script>{JS}</script>
</body>
</html>
"""


def _section(s: Section) -> str:
    blocks = "\n".join(_block(b) for b in s.blocks)
    return f'<section id="{escape(s.anchor)}">\n<h2>{escape(s.title)}</h2>\n{blocks}\n</section>'


def _block(block: Block) -> str:
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Stats):
        return f'<div class="stats">{"".join(_stat(s) for s in block.items)}</div>'
    if isinstance(block, Chart):
        return f"<figure>{block.svg}<figcaption>{escape(block.caption)}</figcaption></figure>"
    assert isinstance(block, Text)
    return "\n".join(f'<p class="text">{escape(line)}</p>' for line in block.text.splitlines())


def _stat(s: Stat) -> str:
    level = f" {_level_class(s.level)}" if s.level else ""
    delta = f'<div class="d">{escape(s.delta)}</div>' if s.delta else ""
    return (
        f'<div class="stat{level}"><div class="l">{escape(s.label)}</div>'
        f'<div class="v">{escape(s.text)}</div><div class="n">{escape(s.note)}</div>{delta}</div>'
    )


def _statuses(t: Table, row: list) -> list[str]:
    """Every status in a row: a side-by-side row has one per run, a row standing for several
    cases a list, and a status filter should find a row by any of them (not only by the first)."""
    found: list[str] = []
    for i, c in enumerate(t.columns):
        if c.kind == "status" and row[i] is not None:
            value = row[i]
            found += [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
    return list(dict.fromkeys(found))


def _badge(status: object) -> str:
    return f'<span class="st st-{escape(str(status))}">{escape(fmt.status(str(status)))}</span>'


def _sort_value(v: object) -> str:
    # What JS's parseFloat reads: Python writes "inf", which would sort as a blank.
    if isinstance(v, float) and math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return "" if v is None else escape(str(v))


def _table(t: Table) -> str:
    if not t.rows:
        return f'<p class="text empty">{escape(t.empty_text)}</p>'
    status_at = t.status_index()
    head = "".join(
        f'<th class="num">{escape(c.name)}</th>'
        if c.kind == "num"
        else f"<th>{escape(c.name)}</th>"
        for c in t.columns
    )
    rows = []
    for row in t.rows:
        cells = []
        for c, v in zip(t.columns, row, strict=True):
            text = escape(c.cell(v))
            if c.kind == "num":
                cells.append(f'<td class="num" data-v="{_sort_value(v)}">{text}</td>')
            elif c.kind == "status" and isinstance(v, (list, tuple)):
                cells.append(f"<td>{' '.join(_badge(s) for s in v)}</td>")
            elif c.kind == "status" and v is not None:
                cells.append(f'<td><span class="st st-{escape(str(v))}">{text}</span></td>')
            elif c.kind == "verdict" and v is not None:
                cells.append(f'<td><span class="vd {_level_class(str(v))}">{text}</span></td>')
            elif c.kind == "link" and v is not None:
                cells.append(f'<td><a href="#{escape(str(v))}">{text}</a></td>')
            else:
                cells.append(f"<td>{text}</td>")
            if c.facet:  # the value a facet's menu matches: the text the cell shows
                cells[-1] = cells[-1].replace("<td", f'<td data-f="{text}"', 1)
        status = (
            f' data-status="{escape(" ".join(_statuses(t, row)))}"' if status_at is not None else ""
        )
        rows.append(f"<tr{status}>{''.join(cells)}</tr>")
    caption = f"<caption>{escape(t.caption)}</caption>" if t.caption else ""
    table = (
        f'<div class="tablebox"><table>{caption}<thead><tr>{head}</tr></thead>'
        f"<tbody>\n" + "\n".join(rows) + "\n</tbody></table></div>"
    )
    return _drill_down(t, status_at, table) if t.drill_down else table


def _drill_down(t: Table, status_at: int | None, table: str) -> str:
    select = ""
    if status_at is not None:
        present = dict.fromkeys(s for row in t.rows for s in _statuses(t, row))
        options = "".join(
            f'<option value="{escape(s)}">{escape(fmt.status(s))}</option>' for s in present
        )
        select = f'<select><option value="">all statuses</option>{options}</select>'
    for i, c in enumerate(t.columns):
        if c.facet:
            values = sorted({c.cell(row[i]) for row in t.rows})
            options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
            select += (
                f'<select data-col="{i}" aria-label="{escape(c.name)}">'
                f'<option value="">all: {escape(c.name)}</option>{options}</select>'
            )
    filters = (
        f'<div class="filters"><input type="search" placeholder="filter rows…">'
        f'{select}<span class="count"></span></div>'
    )
    return f'<div class="drill">{filters}{table}</div>'
