"""The HTML shell shared by report.html and compare.html: one file that opens from disk with no network,
plotly.js embedded once, tables sortable (click a header) and filterable (type in the box above), wide
tables scrolling sideways instead of being cut at the page edge.
"""

from __future__ import annotations

import html

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
  rows.sort(function(a,b){var x=a.cells[i].innerText.replace(/,/g,''),y=b.cells[i].innerText.replace(/,/g,'');
   if(x===''||y==='') return (x==='')-(y==='');
   var nx=parseFloat(x),ny=parseFloat(y),c=(!isNaN(nx)&&!isNaN(ny)&&isFinite(x)&&isFinite(y))?nx-ny:x.localeCompare(y);
   return asc?c:-c;});
  rows.forEach(function(r){body.appendChild(r)});});});
 var box=t.parentNode.previousElementSibling;
 if(box&&box.classList.contains('filter')) box.addEventListener('input',function(){
  var q=box.value.toLowerCase(); Array.prototype.forEach.call(body.rows,function(r){
   r.style.display=r.innerText.toLowerCase().indexOf(q)<0?'none':'';});});});"""


def table(df: pd.DataFrame, escape: bool = True) -> str:
    """A sortable, filterable table without all-empty columns (no Trainium columns on cpu rows)."""
    df = df.dropna(axis=1, how="all")
    body = df.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0, classes="t", escape=escape)
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
