"""compare.html: the verdicts and the changes first, one forest plot of every workload's B/A ratio
with its interval, then the table in human units, what changed inside, the other metrics, and last
the versions and config of both runs. The CSVs beside it keep the SI values."""

from __future__ import annotations

import html
import math

import pandas as pd
import plotly.io as pio

from neuronsweep.analysis import verdict
from neuronsweep.report import figures
from neuronsweep.report.page import human, page
from neuronsweep.report.page import table as html_table

# what backs a metric's difference (compare_metrics.csv `kind`, runs/compare.py metric_kind)
PROGRAM, ONCE, TIME = "the program's own count or size", "measured once a side: shown, not judged", "with the time"


def p_text(p: float | None) -> str:
    """A p-value as a reader wants it: two digits, and "< 0.001" below that."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return ""
    return "< 0.001" if p < 0.001 else f"{p:.2g}"


def _interval(low: float | None, high: float | None) -> str:
    return "" if pd.isna(low) or pd.isna(high) else f"{low:.3f} .. {high:.3f}"


def bounds_moved(changes: pd.DataFrame, wid: str) -> str:
    """The performance bounds of a workload that changed between the runs (one profiled execution a side:
    shown beside the judged time, not tested), as `bounds: bound_memory_s -12.0%, ...`; "" for none."""
    if changes.empty or "metric" not in changes:
        return ""
    rows = changes[(changes["workload_id"] == wid) & changes["metric"].astype(str).str.startswith("bound_")]
    said = [f"{r['metric']} {r['change_pct']:+.1f}%" for _, r in rows.iterrows() if pd.notna(r.get("change_pct"))]
    return "bounds (one profiled execution a side): " + ", ".join(said) if said else ""


def workloads(table: pd.DataFrame, changes: pd.DataFrame | None = None) -> pd.DataFrame:
    """compare.csv as a reader wants it: verdict and change first, times in their unit; a neuron case's
    performance bounds that moved beside its time (`changes`: compare_metrics.csv's rows)."""
    if not len(table):
        return table

    def col(name: str) -> pd.Series:
        return table[name] if name in table else pd.Series([None] * len(table), index=table.index)

    shown = pd.DataFrame(
        {
            "verdict": table["verdict"],
            "change": [("" if pd.isna(c) else f"{c:+.1f} %") for c in col("change_pct")],
            "workload": table["workload_id"],
            "A": [human("time_s", t) for t in col("time_a_s")],
            "B": [human("time_s", t) for t in col("time_b_s")],
            "B/A 95 % interval": [_interval(lo, hi) for lo, hi in zip(col("ratio_ci_low"), col("ratio_ci_high"))],
            "Holm p": [p_text(p) for p in col("p_holm")],
            "could show": [("" if pd.isna(d) else f"±{d:.1f} %") for d in col("min_detectable_pct")],
            "tested on": [  # only what was tested: a case not judged has no test to name
                "" if pd.isna(u) or pd.isna(p) else f"{na:.0f} vs {nb:.0f} {u}"
                for u, na, nb, p in zip(col("tested_on"), col("n_a"), col("n_b"), col("p_holm"))
            ],
            "time": [
                "" if pd.isna(basis) else f"{'framework median' if basis == 'latency_median_s' else 'device'}, {t}"
                for basis, t in zip(col("basis"), col("timed"))
            ],
        }
    )
    moved = [bounds_moved(changes, w).partition(": ")[2] for w in table["workload_id"]] if changes is not None else []
    if any(moved):
        shown["bounds moved (one profile a side)"] = moved
    order = {verdict.SLOWER: 0, verdict.FASTER: 1}
    key = [order.get(v, 2 if v in verdict.JUDGED else 3) for v in shown["verdict"]]
    return shown.assign(_k=key).sort_values(["_k", "workload"]).drop(columns="_k")


def _inside(ops: pd.DataFrame, top: int = 8) -> list[str]:
    parts = ["<h2>What changed inside the workloads judged slower or faster</h2>"]
    if not len(ops):
        return parts + ["<p>none judged slower or faster, or no profile tables on both sides</p>"]
    parts.append(
        "<p class=muted>From each run's profile tables (one profiled execution each): per opcode, engine, "
        "DMA queue and source line, the time in A and B, the delta and its share of the table's total "
        f"change, largest first (the top {top} of each; compare_ops.csv has every row). Where to look, "
        "not a measurement of the change: an op is named as its explanation only when its delta agrees "
        "with the judged change in sign and within 2x in size.</p>"
    )
    for wid, rows in ops.groupby("workload_id", sort=False):
        parts.append(f"<h3>{html.escape(str(wid))} ({html.escape(str(rows['verdict'].iloc[0]))})</h3>")
        changed = rows[rows["count_changed"].astype(bool)]
        if len(changed):
            said = "; ".join(
                f"{r.key}: {_count(r.count_a)} -> {_count(r.count_b)}" for r in changed.head(top).itertuples()
            )
            parts.append(
                "<p><b>Counts changed</b> (other instructions or calls: a different program, not the same one "
                f"run slower): {html.escape(said)}</p>"
            )
        for _, part in rows.groupby("dimension", sort=False):
            parts.append(html_table(_op_rows(part.head(top))))
    return parts


def _op_rows(part: pd.DataFrame) -> pd.DataFrame:
    """compare_ops.csv's rows as a reader wants them: times in their unit, the share in percent."""
    return pd.DataFrame(
        {
            "dimension": part["dimension"],
            "key": part["key"],
            "time in A": [human("time_ns", v) for v in part["time_a_ns"]],
            "time in B": [human("time_ns", v) for v in part["time_b_ns"]],
            "delta": [("+" if v > 0 else "") + human("time_ns", v) for v in part["delta_ns"]],
            "share of the change": [("" if pd.isna(v) else f"{100 * v:.0f} %") for v in part["share_of_change"]],
            "count in A": [_count(v) for v in part["count_a"]],
            "count in B": [_count(v) for v in part["count_b"]],
        }
    )


def _count(value: float | None) -> str:
    return "absent" if pd.isna(value) else f"{value:,.0f}"


def _in_units(changes: pd.DataFrame) -> pd.DataFrame:
    """a and b in their metric's unit (the page only; compare_metrics.csv keeps SI values)."""
    return changes.assign(
        a=[human(m, v) for m, v in zip(changes["metric"], changes["a"])],
        b=[human(m, v) for m, v in zip(changes["metric"], changes["b"])],
    )


def _metrics(changes: pd.DataFrame) -> list[str]:
    """The other metrics that differ, by what backs them: the programs' own counts and the rates of a
    time judged different first, then what was measured once a side (shown, never called a change)."""
    once = changes["kind"] == ONCE if len(changes) else pd.Series(dtype=bool)
    parts = ["<h2>Metrics that differ: the programs' counts and sizes, and rates of a time judged different</h2>"]
    parts.append(html_table(_in_units(changes[~once])) if (~once).any() else "<p>none</p>")
    parts.append("<h2>Measured once a side: shown, not judged</h2>")
    parts.append(
        "<p class=muted>One profiled execution or one compile a side: nothing tests whether these moved beyond "
        "their own noise, so none of them is called a change.</p>"
    )
    parts.append(html_table(_in_units(changes[once])) if once.any() else "<p>none</p>")
    return parts


def _summary(table: pd.DataFrame) -> str:
    counts = table["verdict"].value_counts() if len(table) else pd.Series(dtype=int)
    slower, faster = int(counts.get(verdict.SLOWER, 0)), int(counts.get(verdict.FASTER, 0))
    judged = int(sum(n for v, n in counts.items() if v in verdict.JUDGED))
    return (
        f"<p style='font-size:1.15em'><b>{slower} slower, {faster} faster</b> of {judged} judged; "
        f"{len(table) - judged} not judged or not comparable (of {len(table)} workloads).</p>"
    )


def render(
    head: list[str],
    notes: list[str],
    table: pd.DataFrame,
    changes: pd.DataFrame,
    ops: pd.DataFrame,
    gate_pct: float | None,
    min_effect_pct: float,
) -> str:
    """compare.html: the verdicts, the forest plot, and the tables of what changed."""
    margin = gate_pct if gate_pct is not None else min_effect_pct
    fig = figures.forest(table, margin, "gate margin" if gate_pct is not None else "minimum effect")
    parts = ["<h1>neuron-sweep: B against A</h1>", _summary(table)]
    parts += [f"<p><b>{html.escape(n.split(':')[0])}:</b>{html.escape(n.split(':', 1)[1])}</p>" for n in notes]
    if fig is not None:
        body = pio.to_html(fig, include_plotlyjs=False, full_html=False, default_width="100%")
        parts.append(f'<div class="figure" style="min-height:0">{body}</div>')
    parts += [
        "<h2>Workloads</h2>",
        "<p class=muted>slower / faster: a t-test on the round medians of processes of their own (each side at "
        "least 3; on each process's ratio B/A where one process timed both sides in alternation; the fastest and "
        "slowest fifth trimmed, so one outlying process does not decide it) rejects after Holm's correction over "
        "the workloads, and the change is at least the minimum "
        "effect; the regression gate also needs the 95 % interval wholly past its margin. <i>could show</i>: the "
        "minimum detectable change, the smallest change that case's processes could have called different; "
        "where it is wider than the gate, the case is not judged and says so. One process a side is not judged: "
        "its samples test that process, not the code (docs/comparing-runs.md).</p>",
        html_table(workloads(table, changes)),
        *_inside(ops),
        *_metrics(changes),
        "<h2>The two runs</h2>",
        f"<pre>{html.escape(chr(10).join(head))}</pre>",
    ]
    return page("neuron-sweep compare", parts, plotly=fig is not None)
