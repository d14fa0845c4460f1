"""search.html: how a search got to its winner. The verdict first (the winner against the default, with
its interval where the finalists were timed again), then the best so far against the trials measured
and against the device seconds they held,
the space (each param against the objective; parallel coordinates with two or more params), the
params' importance, the failed and wrong trials with their reasons, and every trial."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from neuronsweep.report.figures import COLOURS, NOISY, axis_type
from neuronsweep.report.page import human, page
from neuronsweep.report.page import table as html_table
from neuronsweep.search.space import Point
from neuronsweep.search.trials import Best


def verdict_line(best: Best) -> str:
    """One sentence: the winner, its time, and what the evidence says of its speed-up over the default."""
    winner = best.get("winner")
    if not winner:
        return f"No winner: {best.get('why', 'no trial was ok and correct')}."
    won = f"Winner {_params(winner)}: {human('time_s', best['winner_objective_s'])}"
    if best.get("winner_is_default"):
        return f"{won}, the default configuration itself: no other configuration measured faster."
    found: list[dict[str, str | float | None] | None] = [*best.get("vs_default", [])] or [None]
    [vs] = found  # one shape: one verdict (several: their list is below)
    default = f" against {human('time_s', best['default_objective_s'])} for the default {_params(best['default'])}"
    if vs and vs.get("speedup_low") is not None:
        said = (
            f"{vs['speedup']:.2f}x faster than the default (95 % interval {vs['speedup_low']:.2f}-"
            f"{vs['speedup_high']:.2f}x, {vs['said']}, on {vs.get('on', 'fresh processes')})"
        )
    elif vs:
        said = f"{vs['speedup']:.2f}x on {vs.get('on', 'fresh processes')}, {vs['said']}"
    else:
        said = f"{best.get('speedup_stored', float('nan')):.2f}x faster than the default; {best.get('evidence')}"
    tie = (
        f" Tie: {_params(best['tie'][0])} and {_params(best['tie'][1])} are not told apart." if best.get("tie") else ""
    )
    return f"{won}{default if 'default_objective_s' in best else ''}; {said}.{tie}"


def _params(params: Point) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def progress(table: pd.DataFrame) -> go.Figure:
    """Each measured trial's objective and the best so far, in the order measured; failed or wrong
    trials as crosses along the top."""
    measured = table[table["measured"].astype(str).str.lower() == "true"].reset_index(drop=True)
    ok = measured[measured["status"] == "ok"]
    us = ok["objective_s"].astype(float) * 1e6
    full = ok["effort"] != "screen" if "effort" in ok else pd.Series(True, index=ok.index)
    fig = go.Figure()
    fig.add_scatter(
        x=ok.index[full] + 1, y=us[full], mode="markers", name="trial", marker=dict(color=COLOURS[0], size=9)
    )
    if (~full).any():  # halving's cheap rung: timed eagerly in one process, never a winner on its own
        fig.add_scatter(
            x=ok.index[~full] + 1,
            y=us[~full],
            mode="markers",
            name="screened (eager, one process)",
            marker=dict(color=COLOURS[0], size=9, symbol="circle-open"),
        )
    counted = measured["status"] == "ok"
    if "effort" in measured:
        counted &= measured["effort"] != "screen"
    best = measured["objective_s"].where(counted).astype(float).cummin() * 1e6
    fig.add_scatter(x=measured.index + 1, y=best, mode="lines", line_shape="hv", name="best so far")
    bad = measured[measured["status"] != "ok"]
    if len(bad):
        top = float(us.max()) if len(us) else 1.0
        fig.add_scatter(
            x=bad.index + 1,
            y=[top] * len(bad),
            mode="markers",
            name="failed or wrong",
            marker=dict(color=NOISY, symbol="x", size=11),
            text=bad["reason"],
        )
    fig.update_layout(title="Best so far against the trials measured", template="plotly_white", height=380)
    fig.update_xaxes(title="trials measured", dtick=1)
    fig.update_yaxes(
        title="objective (us, geometric mean of the cases' medians)", type=axis_type(us) if len(us) else None
    )
    return fig


def by_device_seconds(table: pd.DataFrame) -> go.Figure | None:
    """The best so far against the device seconds the trials held, in the order measured."""
    if "device_s" not in table or table["device_s"].isna().all():
        return None
    measured = table[table["measured"].astype(str).str.lower() == "true"]
    spent = measured["device_s"].fillna(0).astype(float).cumsum()
    counted = measured["status"] == "ok"
    if "effort" in measured:
        counted &= measured["effort"] != "screen"
    best = measured["objective_s"].where(counted).astype(float).cummin() * 1e6
    fig = go.Figure(go.Scatter(x=spent, y=best, mode="lines+markers", line_shape="hv", name="best so far"))
    fig.update_layout(title="Best so far against the device seconds spent", template="plotly_white", height=340)
    fig.update_xaxes(title="device seconds (each capture's lock span, summed)")
    fig.update_yaxes(title="objective (us)")
    return fig


def space(table: pd.DataFrame) -> go.Figure | None:
    """Each measured trial's objective over its params (None without one)."""
    ok = table[(table["status"] == "ok") & (table["measured"].astype(str).str.lower() == "true")]
    names = [c for c in table.columns if c.startswith("param.")]
    if ok.empty or not names:
        return None
    us = ok["objective_s"].astype(float) * 1e6
    if len(names) == 1:
        x = ok[names[0]]
        numeric = pd.api.types.is_numeric_dtype(x)
        fig = go.Figure(go.Scatter(x=x if numeric else x.astype(str), y=us, mode="markers", marker=dict(size=10)))
        fig.update_xaxes(title=names[0][len("param.") :], type=axis_type(x) if numeric else "category")
        fig.update_yaxes(title="objective (us)")
    else:
        dims = []
        for name in names:
            values = ok[name]
            if pd.api.types.is_numeric_dtype(values):
                dims.append(dict(label=name[len("param.") :], values=values))
            else:
                codes, labels = pd.factorize(values.astype(str))
                dims.append(
                    dict(
                        label=name[len("param.") :],
                        values=codes,
                        tickvals=list(range(len(labels))),
                        ticktext=list(labels),
                    )
                )
        dims.append(dict(label="objective (us)", values=us))
        fig = go.Figure(go.Parcoords(line=dict(color=us, colorscale="Viridis_r", showscale=True), dimensions=dims))
    fig.update_layout(title="The space: each trial's params and objective", template="plotly_white", height=380)
    return fig


def render(name: str, best: Best, table: pd.DataFrame) -> str:
    """search.html: the winner and its verdicts, the figures, every trial."""
    figs = [f for f in (progress(table), by_device_seconds(table), space(table)) if f is not None]
    parts = [
        f"<h1>neuron-sweep search: {html.escape(name)}</h1>",
        f"<p style='font-size:1.15em'><b>{html.escape(verdict_line(best))}</b></p>",
    ]
    parts.append(
        f"<p class=muted>{best.get('strategy')} strategy, seed {best.get('seed')}, {best.get('trials')} trials "
        f"measured, {best.get('failed_or_wrong')} failed or wrong. "
        f"Evidence: {html.escape(str(best.get('evidence')))}.</p>"
    )
    for fig in figs:
        body = pio.to_html(fig, include_plotlyjs=False, full_html=False, default_width="100%")
        parts.append(f'<div class="figure" style="min-height:0">{body}</div>')
    importance = best.get("importance")
    if importance:
        parts += [
            "<h2>Params' importance</h2>",
            html_table(pd.DataFrame(importance.items(), columns=["param", "importance"])),
        ]
    bad = table[table["status"] != "ok"]
    parts += [
        "<h2>Failed and wrong trials</h2>",
        html_table(bad[["trial", "status", "reason"]]) if len(bad) else "<p>none</p>",
    ]
    shown = table.assign(objective=[human("time_s", v) if pd.notna(v) else "" for v in table["objective_s"]])
    keep = [
        "trial",
        "round",
        *[c for c in table.columns if c.startswith("param.")],
        "status",
        "objective",
        "measured",
        "reason",
    ]
    parts += ["<h2>Every trial</h2>", html_table(shown[[c for c in keep if c in shown]])]
    return page(f"neuron-sweep search {name}", parts, plotly=bool(figs))
