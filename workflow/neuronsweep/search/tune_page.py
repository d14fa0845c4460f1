"""tune.html: what a model's dispatch table buys. The GEMMs' time per forward with the defaults and with
the table (and the forward projected, where the model was measured whole), then the shapes ranked by the
time they save, each winner with its judged speed-up, then the shapes where nothing beat the compiler."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from neuronsweep.report.figures import COLOURS
from neuronsweep.report.page import human, page
from neuronsweep.report.page import table as html_table


def before_after(gain: pd.DataFrame) -> go.Figure | None:
    """A pair of bars per forward: the GEMMs' time with the compiler's builds and with the table."""
    shown = gain.dropna(subset=["gemm_tuned_s"]) if "gemm_tuned_s" in gain else gain.iloc[0:0]
    if shown.empty:
        return None
    labels = [f"{r.phase} b{r.batch} s{r.seq} {r.dtype}" for r in shown.itertuples()]
    fig = go.Figure()
    fig.add_bar(x=labels, y=shown["gemm_default_s"] * 1e3, name="compiler (default)", marker_color=COLOURS[1])
    fig.add_bar(x=labels, y=shown["gemm_tuned_s"] * 1e3, name="dispatch table", marker_color=COLOURS[0])
    fig.update_layout(
        title="The model's GEMM time per forward (count x median)",
        yaxis_title="ms",
        barmode="group",
        template="plotly_white",
        height=360,
    )
    return fig


def ranked(table: pd.DataFrame) -> pd.DataFrame:
    """The shapes by model time saved per forward (count x (default - winner) where the winner ships)."""
    out = table.copy()
    ships = out["ships"].fillna("compiler") if "ships" in out else pd.Series("compiler", index=out.index)
    winner = pd.to_numeric(out.get("winner_median_s"), errors="coerce")
    default = pd.to_numeric(out["default_median_s"], errors="coerce")
    out["saved_s"] = (out["count"] * (default - winner)).where(ships != "compiler", 0.0)
    return out.sort_values(["saved_s", "count"], ascending=False, kind="stable")


def counted(table: pd.DataFrame) -> str:
    """One sentence: how many shapes ship a candidate, had one the test did not confirm, kept the compiler
    as the fastest measured, had no candidate that ran, or were not searched."""
    ships = table["ships"].fillna("compiler") if "ships" in table else pd.Series("compiler", index=table.index)
    said = table["verdict"].fillna("").astype(str) if "verdict" in table else pd.Series("", index=table.index)
    raced = table["winner"].notna() & (table["winner"] != "compiler") if "winner" in table else ships.isna()
    parts = [
        (int((ships != "compiler").sum()), "ship a candidate judged faster than the compiler's build"),
        (
            int((raced & (ships == "compiler")).sum()),
            "had a candidate faster on its stored timing that the test did not confirm (a tie, slower, or not judged)",
        ),
        (
            int(said.str.startswith("the compiler's build was the fastest").sum()),
            "kept the compiler's build as the fastest measured",
        ),
        (int(said.str.startswith("no candidate ran").sum()), "had no candidate that ran correctly"),
    ]
    rest = len(table) - sum(n for n, _ in parts)
    return (
        f"{len(table)} shapes: "
        + "; ".join(f"{n} {what}" for n, what in parts if n)
        + (f"; {rest} not searched or not measured." if rest else ".")
    )


def render(model: str, table: pd.DataFrame, gain: pd.DataFrame) -> str:
    """tune.html: the gain, the figure, the shapes ranked, the shapes the compiler keeps."""
    parts = [f"<h1>neuron-sweep tune: {html.escape(model)}</h1>", f"<p>{html.escape(counted(table))}</p>"]
    for r in gain.itertuples():
        if pd.isna(getattr(r, "gemm_tuned_s", None)):
            parts.append(f"<p>{r.phase} b{r.batch} s{r.seq} {r.dtype}: {html.escape(str(getattr(r, 'why', '')))}</p>")
            continue
        line = (
            f"{r.phase} at batch {r.batch}, seq {r.seq} ({r.dtype}): GEMMs {human('time_s', r.gemm_default_s)} with "
            f"the compiler's builds, {human('time_s', r.gemm_tuned_s)} with the table ({r.saving_pct:.1f} % saved)"
        )
        if pd.notna(getattr(r, "forward_tuned_s", None)):
            line += (
                f"; the forward {human('time_s', r.forward_s)} projected to {human('time_s', r.forward_tuned_s)} "
                f"(GEMMs {r.gemm_share_pct:.0f} % of it, measured)"
            )
        parts.append(f"<p><b>{html.escape(line)}</b></p>")
    notes = sorted({str(p) for p in gain.get("projection", pd.Series(dtype=str)).dropna()})
    parts += [f"<p class=muted>Projection: {html.escape(n)}.</p>" for n in notes]
    fig = before_after(gain)
    if fig is not None:
        body = pio.to_html(fig, include_plotlyjs=False, full_html=False, default_width="100%")
        parts.append(f'<div class="figure" style="min-height:0">{body}</div>')
    order = ranked(table)
    columns = [
        "shape",
        "gemms",
        "count",
        "ships",
        "verdict",
        "speedup",
        "speedup_low",
        "speedup_high",
        "saved_s",
        "winner",
        "params",
        "winner_median_s",
        "default_median_s",
        "correct",
        "max_rel_error",
        "trials",
        "candidates_out",
    ]
    parts += [
        "<h2>Shapes, by model time saved per forward</h2>",
        "<p class=muted>A winner ships only where it was judged faster than the compiler's build on fresh "
        "processes; elsewhere (a tie, or not judged) the compiler's build ships and saves nothing.</p>",
        html_table(order[[c for c in columns if c in order]]),
    ]
    return page(f"neuron-sweep tune {model}", parts, plotly=fig is not None)
