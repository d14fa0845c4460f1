"""The HTML shell shared by report.html and compare.html: one file that opens from disk with no network,
plotly.js embedded once, tables sortable (click a header) and filterable (type in the box above), wide
tables scrolling sideways instead of being cut at the page edge.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

import pandas as pd

CSS = """body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222}
main{max-width:1400px}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table.t{border-collapse:collapse;font-size:12px}table.t td,table.t th{padding:2px 8px;border-bottom:1px solid #eee;
text-align:right;white-space:nowrap}table.t th{cursor:pointer;position:sticky;top:0;background:#f6f6f6}
table.t th.asc:after{content:" \\25B2"}table.t th.desc:after{content:" \\25BC"}table.t td:first-child{text-align:left}
li{margin:.3em 0}.muted{color:#777}.scroll{overflow:auto;max-width:100%;max-height:70vh;border:1px solid #eee}
input.filter{margin:.5em 0;padding:3px 6px;width:24em}.figure{width:100%;min-height:420px}"""

# Sort on a header click (numbers as numbers, empty cells last), filter rows on every keystroke.
TABLE_JS = """document.querySelectorAll('table.t').forEach(function(t){
 var body=t.tBodies[0]; if(!body) return;
 t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
  var asc=!th.classList.contains('asc');
  t.querySelectorAll('th').forEach(function(h){h.classList.remove('asc','desc')});
  th.classList.add(asc?'asc':'desc');
  var rows=Array.prototype.slice.call(body.rows);
  function v(r){var c=r.cells[i];return c.dataset.v!==undefined?c.dataset.v:c.innerText.replace(/,/g,'');}
  rows.sort(function(a,b){var x=v(a),y=v(b);
   if(x===''||y==='') return (x==='')-(y==='');
   var nx=parseFloat(x),ny=parseFloat(y),c=(!isNaN(nx)&&!isNaN(ny)&&isFinite(x)&&isFinite(y))?nx-ny:x.localeCompare(y);
   return asc?c:-c;});
  rows.forEach(function(r){body.appendChild(r)});});});
 var box=t.parentNode.previousElementSibling;
 if(box&&box.classList.contains('filter')) box.addEventListener('input',function(){
  var q=box.value.toLowerCase(); Array.prototype.forEach.call(body.rows,function(r){
   r.style.display=r.innerText.toLowerCase().indexOf(q)<0?'none':'';});});});"""


TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))
BINARY = ((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"))
DECIMAL = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _scaled(value: float, units: Iterable[tuple[float, str]], unit: str = "") -> str:
    for size, prefix in units:
        if abs(value) >= size:
            return f"{value / size:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def human(column: str, value: object) -> str:
    """A number as a reader wants it, from its column's SI unit: `latency_median_s` 0.004244 -> 4.24 ms,
    `achieved_flops_per_s` 3.162e10 -> 31.6 GFLOP/s, `*_bytes` -> GiB. The CSVs keep the SI values."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return "" if value is None or (isinstance(value, float) and value != value) else str(value)
    name = column.lower()
    if name.endswith("_ns"):
        return human(name[:-3] + "_s", value * 1e-9)
    if name.endswith("_s") and not name.endswith("per_s"):
        if value == 0:
            return "0 s"
        return next((f"{value / size:.3g} {unit}" for size, unit in TIME_UNITS if abs(value) >= size), f"{value:.3g} s")
    if "flops_per_s" in name:
        return _scaled(value, DECIMAL, "FLOP/s")
    if "bytes_per_s" in name:
        return _scaled(value, DECIMAL, "B/s")
    if name.endswith("bytes") and "per" not in name:
        return _scaled(value, BINARY, "B") if abs(value) >= 1024 else f"{value:,.0f} B"
    if name == "flops" or name.endswith("_flops"):
        return _scaled(value, DECIMAL, "FLOP")
    if name.endswith(("_pct", "_percent")):
        return f"{value:.3g} %"
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def table(df: pd.DataFrame, escape: bool = True) -> str:
    """A sortable, filterable table without all-empty columns (no Trainium columns on cpu rows). Numbers
    are shown in human units (`human`) and sorted on their value (each cell's data-v)."""
    df = df.dropna(axis=1, how="all")
    text = (lambda v: html.escape(str(v))) if escape else str
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for record in df.itertuples(index=False, name=None):
        cells = []
        for column, value in zip(df.columns, record):
            if hasattr(value, "item"):  # a NumPy scalar
                value = value.item()
            if value is None or value is pd.NA or (isinstance(value, float) and value != value):
                cells.append("<td></td>")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(f'<td data-v="{value!r}">{html.escape(human(str(column), value))}</td>')
            else:
                cells.append(f"<td>{text(value)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    body = f'<table class="t"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    return f'<input class="filter" placeholder="filter rows ({len(df)})"><div class="scroll">{body}</div>'


def page(title: str, parts: list[str], plotly: bool = False) -> str:
    """One self-contained page; with `plotly`, the library's JS once in the head (about 4.6 MB)."""
    head_js = ""
    if plotly:
        from plotly.offline import get_plotlyjs

        head_js = f"<script>{get_plotlyjs()}</script>"
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style>{head_js}</head><body><main>{''.join(parts)}</main>"
        f"<script>{TABLE_JS}</script></body></html>"
    )
