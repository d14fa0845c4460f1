"""The report's figures as plotly figures: hover names the workload and its numbers, legends toggle
series, axes zoom, the camera button saves a PNG. Every number drawn comes from summary.csv,
roofline_targets.csv or a workload's tables/opcodes.csv.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from neuronsweep.analysis import verdict
from neuronsweep.backends import BACKENDS
from neuronsweep.host.targets import TARGETS
from neuronsweep.workloads.dtypes import TORCH_DTYPES

ENGINE_COLS = [
    "tensor_engine_active_pct",
    "vector_engine_active_pct",
    "scalar_engine_active_pct",
    "gpsimd_engine_active_pct",
    "dma_active_pct",
]
COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
NOISY = "#c44e52"


def dtype_colour(dtype: str) -> str:
    """One colour per dtype in every figure (bf16 was blue on one roofline and orange on the next)."""
    names = list(TORCH_DTYPES)
    return COLOURS[names.index(dtype) if dtype in names else len(names)]


def _layout(fig: go.Figure, title: str, height: int = 460) -> go.Figure:
    fig.update_layout(
        title=title,
        height=height,
        template="plotly_white",
        hovermode="closest",
        margin=dict(l=60, r=20, t=50, b=50),
        legend=dict(font=dict(size=10)),
    )
    return fig


def whiskers(rows: pd.DataFrame) -> list[np.ndarray] | None:
    """Asymmetric error bars in ms: median +- half the spread, the lower end clipped at the fastest
    sample (a time is never negative, and a log axis needs a positive end)."""
    if "latency_spread_s" not in rows:
        return None
    med = rows["time_s"].astype(float)
    half = rows["latency_spread_s"].astype(float).fillna(0) / 2
    floor = rows["latency_min_s"].astype(float).fillna(med) if "latency_min_s" in rows else med
    lower = (med - (med - half).clip(lower=floor)).clip(lower=0)
    return [lower.to_numpy() * 1e3, half.to_numpy() * 1e3]


def axis_type(values: Iterable) -> str:
    """log where the values span more than a factor of 20: a linear axis hides the small bars."""
    vals = pd.Series(values, dtype=float).dropna()
    vals = vals[vals > 0]
    return "log" if len(vals) > 1 and vals.max() / vals.min() > 20 else "linear"


def _roof_x(ai: pd.Series, ridges: pd.Series) -> list[float]:
    """From two decades below the lowest ridge (so the bandwidth slope always shows) to 4x past the
    furthest point or ridge."""
    lo = min(float(ai.min()), float(ridges.min()) / 100) / 2
    hi = max(float(ai.max()), float(ridges.max())) * 4
    return [lo * (hi / lo) ** (i / 120) for i in range(121)]


def _add_roof(fig: go.Figure, xs: list[float], peak: float, bw: float, label: str, colour: str, **where: int) -> None:
    """Both roofs (bandwidth slope, compute flat) and the ridge point where they meet."""
    ridge = peak / bw
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[min(peak, x * bw) / 1e9 for x in xs],
            mode="lines",
            name=f"{label} roof",
            legendgroup=label,
            line=dict(color=colour, width=1.5),
            hovertemplate=f"{label}: min({peak / 1e9:,.0f} GFLOP/s, AI x {bw / 1e9:,.0f} GB/s)<extra></extra>",
        ),
        **where,
    )
    fig.add_trace(
        go.Scatter(
            x=[ridge],
            y=[peak / 1e9],
            mode="markers",
            name=f"{label} ridge",
            legendgroup=label,
            showlegend=False,
            marker=dict(symbol="diamond-open", size=11, color=colour),
            hovertemplate=f"{label} ridge point: {ridge:.1f} FLOP/B, {peak / 1e9:,.0f} GFLOP/s<extra></extra>",
        ),
        **where,
    )


def roofline(rows: pd.DataFrame, platform: str) -> go.Figure | None:
    """Measured: every workload at its arithmetic intensity and achieved rate, against its dtype's
    roofs on the platform it ran on."""
    rows = rows.dropna(subset=["peak_flops_per_s", "peak_bytes_per_s", "roofline_time_s"])
    if rows.empty:
        return None
    fig = go.Figure()
    ai = rows["arithmetic_intensity_flops_per_byte"].astype(float)
    xs = _roof_x(ai, (rows["peak_flops_per_s"] / rows["peak_bytes_per_s"]).astype(float))
    for dtype, part in rows.groupby("dtype"):
        colour = dtype_colour(dtype)
        peak, bw = float(part["peak_flops_per_s"].max()), float(part["peak_bytes_per_s"].median())
        _add_roof(fig, xs, peak, bw, dtype, colour)
        achieved = part["flops"].astype(float) / part["roofline_time_s"].astype(float) / 1e9
        custom = part[["roofline_time_s", "roofline_efficiency_pct", "roofline_bound"]].copy()
        custom["roofline_time_s"] = custom["roofline_time_s"].astype(float) * 1e6
        fig.add_trace(
            go.Scatter(
                x=part["arithmetic_intensity_flops_per_byte"],
                y=achieved,
                mode="markers",
                name=f"{dtype} workloads",
                legendgroup=dtype,
                text=part["workload_id"],
                customdata=custom.to_numpy(),
                marker=dict(size=9, color=colour, line=dict(color="black", width=0.5)),
                hovertemplate="<b>%{text}</b><br>%{x:.3g} FLOP/B, %{y:,.4g} GFLOP/s<br>%{customdata[0]:,.1f} us, "
                "%{customdata[1]:.0f}% of the roof, %{customdata[2]} bound<extra></extra>",
            )
        )
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP per minimal byte)")
    fig.update_yaxes(type="log", title="achieved GFLOP/s")
    return _layout(fig, f"roofline, measured on {platform}: every workload against its dtype's roofs", 520)


def target_rooflines(targets: pd.DataFrame) -> go.Figure | None:
    """Modelled, not measured: every workload on trn1, inf2 and trn2 at the rate its roofline allows
    (roofline_targets.csv: ideal compute and memory time), under the targets' peaks (TARGETS)."""
    targets = targets.dropna(subset=["ideal_compute_s", "ideal_memory_s"])
    targets = targets[(targets["ideal_compute_s"] > 0) & (targets["ideal_memory_s"] > 0)]
    if targets.empty:
        return None
    names = list(dict.fromkeys(targets["target"]))
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, shared_yaxes=True)
    ai_all = targets["flops"] / targets["min_bytes"]
    dtypes = list(dict.fromkeys(targets["dtype"]))
    for col, target in enumerate(names, start=1):
        part_t, t = targets[targets["target"] == target], TARGETS[target]
        bw = t.hbm_bytes_per_s
        xs = _roof_x(ai_all, pd.Series([t.peak_flops(d) / bw for d in dtypes]))
        for dtype, part in part_t.groupby("dtype", sort=False):
            colour, label = dtype_colour(dtype), dtype
            _add_roof(fig, xs, t.peak_flops(dtype), bw, label, colour, row=1, col=col)
            fig.data[-2].showlegend = col == 1
            ideal = part[["ideal_compute_s", "ideal_memory_s"]].max(axis=1)
            fig.add_trace(
                go.Scatter(
                    x=part["flops"] / part["min_bytes"],
                    y=part["flops"] / ideal / 1e9,
                    mode="markers",
                    name=f"{dtype} workloads",
                    legendgroup=label,
                    showlegend=col == 1,
                    text=part["workload_id"],
                    customdata=(ideal * 1e6).to_frame().assign(bound=part["roofline_bound"]).to_numpy(),
                    marker=dict(size=8, color=colour, line=dict(color="black", width=0.5)),
                    hovertemplate=f"<b>%{{text}}</b> on {target}<br>%{{x:.3g}} FLOP/B, at best %{{y:,.4g}} GFLOP/s"
                    "<br>ideal %{customdata[0]:,.2f} us, %{customdata[1]} bound<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(type="log", title="FLOP per minimal byte")
    fig.update_yaxes(type="log")
    fig.update_yaxes(title="attainable GFLOP/s (model)", row=1, col=1)
    return _layout(fig, "on Trainium and Inferentia targets: modelled from datasheet peaks, not measured", 480)


def _self_time_shares(rows: pd.DataFrame, workloads_dir: Path, keep: Callable[[str], bool]) -> dict[str, pd.Series]:
    """Per workload, % of the profiled self time on the Python/CPU thread by slice name, for the
    names `keep` accepts (from tables/opcodes.csv)."""
    shares = {}
    for wid in rows["workload_id"]:
        path = workloads_dir / wid / "tables" / "opcodes.csv"
        if path.is_file():
            ops = pd.read_csv(path)
            ops = ops[(ops["class"] == "cpu_thread") & ops["name"].map(keep)]
            total = ops["self_ns"].sum()
            shares[wid] = (ops.groupby("name")["self_ns"].sum() / total * 100) if total else pd.Series(dtype=float)
    return shares


def breakdown(rows: pd.DataFrame, workloads_dir: Path) -> go.Figure:
    """Neuron: engine and DMA active % per workload. cpu: share of profiled op time by op (top 5).
    xla: share of the profiled calls' wall time per step (tracing, mark_step, wait_device_ops)."""
    fig = go.Figure()
    wids = list(rows["workload_id"])
    if rows[ENGINE_COLS].notna().any().any():
        series = {
            col.replace("_active_pct", "").replace("_engine", ""): rows[col].fillna(0).tolist() for col in ENGINE_COLS
        }
        xlabel = "% of device total_time each engine / DMA is active (they overlap, so bars can pass 100)"
    else:
        described = BACKENDS[rows["backend"].iloc[0]]
        steps = described.call_steps  # its trace's Python-side steps, else aten ops
        shares = _self_time_shares(
            rows, workloads_dir, (lambda n: n in steps) if steps else (lambda n: str(n).startswith("aten::"))
        )
        top = steps if steps else (pd.concat(shares, axis=1).fillna(0).sum(axis=1).nlargest(5).index if shares else [])
        series = {op: [float(shares.get(w, pd.Series(dtype=float)).get(op, 0)) for w in wids] for op in top}
        # the rest, so each bar reaches 100 % of what was profiled (a workload without tables: none)
        series["other"] = [
            max(0.0, 100 - sum(v[i] for v in series.values())) if w in shares else 0.0 for i, w in enumerate(wids)
        ]
        xlabel = (
            f"% of the profiled calls' wall time per step ({described.call_steps_note})"
            if steps
            else "% of profiled aten op self time: the top 5 ops and the rest (cpu has no engine counters)"
        )
    for j, (name, vals) in enumerate(series.items()):
        fig.add_trace(
            go.Bar(
                y=wids,
                x=vals,
                name=name,
                orientation="h",
                marker_color=COLOURS[j % len(COLOURS)],
                hovertemplate="<b>%{y}</b><br>" + name + ": %{x:.1f}%<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title=xlabel)
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=9))
    return _layout(fig, "where the time goes", max(360, 22 * len(rows) + 140))


def framework_device(rows: pd.DataFrame) -> go.Figure | None:
    """Framework latency beside the profiled device time per case (None when no case was timed)."""
    rows = rows.dropna(subset=["latency_median_s"])
    if rows.empty:
        return None
    device_col, device_label = BACKENDS[rows["backend"].iloc[0]].device_time
    fig = go.Figure()
    for col, label, colour in (
        ("latency_median_s", "framework median", COLOURS[0]),
        (device_col, device_label, COLOURS[1]),
    ):
        fig.add_trace(
            go.Bar(
                y=rows["workload_id"],
                x=rows[col].astype(float) * 1e3,
                name=label,
                orientation="h",
                marker_color=colour,
                hovertemplate="<b>%{y}</b><br>" + label + ": %{x:.4g} ms<extra></extra>",
            )
        )
    both = pd.concat([rows["latency_median_s"], rows[device_col]]).astype(float) * 1e3
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="ms", type=axis_type(both))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=9))
    title = "framework time against device time"
    note = BACKENDS[rows["backend"].iloc[0]].profiled_time_note  # e.g. both host times, one under a profiler
    if note:
        title += f" ({note})"
    return _layout(fig, title, max(360, 26 * len(rows) + 140))


def suite(name: str, rows: pd.DataFrame) -> go.Figure:
    """Throughput against the suite's axis (llm, tiling), else time per execution with its spread."""
    fig = go.Figure()
    if name in ("llm", "tiling"):
        x, keys = ("m", ["phase", "projection"]) if name == "llm" else ("value", ["dim", "boundary"])
        for j, (key, part) in enumerate(rows.sort_values(x).groupby(keys)):
            label = " ".join(map(str, key))
            fig.add_trace(
                go.Scatter(
                    x=part[x],
                    y=part["achieved_flops_per_s"] / 1e9,
                    mode="lines+markers",
                    name=label,
                    text=part["scenario_id"],
                    customdata=part["time_s"].astype(float) * 1e6,
                    line=dict(color=COLOURS[j % len(COLOURS)]),
                    hovertemplate="<b>%{text}</b><br>" + x + " %{x}: %{y:,.4g} GFLOP/s, %{customdata:,.1f} us"
                    "<extra></extra>",
                )
            )
        if name == "tiling":
            for edge in sorted({b * m for b in set(rows["boundary"]) for m in set(rows["multiple"])}):
                fig.add_vline(x=edge, line=dict(color="grey", width=0.6, dash="dot"))
        if name == "llm":
            fig.update_xaxes(type="log", title="M (rows = batch x seq or batch)")
        else:  # whole dimensions around a boundary: a linear axis with integer ticks
            fig.update_xaxes(type="linear", title="dimension value", tickformat="d")
        fig.update_yaxes(title="achieved GFLOP/s", rangemode="tozero")  # from 0: 13 % must not look like 3x
        return _layout(fig, f"{name}: throughput against size")
    rows = rows.sort_values(["group", "time_s"])
    ms = rows["time_s"].astype(float) * 1e3
    err = whiskers(rows)
    noisy = rows["noisy"] if "noisy" in rows else pd.Series([None] * len(rows), index=rows.index)
    fig.add_trace(
        go.Bar(
            y=rows["scenario_id"],
            x=ms,
            orientation="h",
            name="median",
            marker_color=[NOISY if n is True else COLOURS[0] for n in noisy],
            error_x=None if err is None else dict(type="data", symmetric=False, arrayminus=err[0], array=err[1]),
            customdata=rows[["group"]].assign(noisy=noisy.map({True: " (noisy)"}).fillna("")).to_numpy(),
            hovertemplate="<b>%{y}</b><br>%{x:.4g} ms median%{customdata[1]}<br>group %{customdata[0]}<extra></extra>",
        )
    )
    fig.update_xaxes(
        type=axis_type(ms),
        title="time per execution (ms; bars: median, whiskers: half the spread "
        "each way, never below the fastest sample; red: noisy)",
    )
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=9))
    return _layout(fig, f"{name}: time per execution", max(360, 22 * len(rows) + 140))


SATURATED = 0.2  # the largest size's busbw gains less than this over the next smaller: the curve has flattened


def knee_bytes(part: pd.DataFrame) -> float | None:
    """Where latency stops dominating: the smallest message size whose busbw reaches half the series'
    best (Hockney's half-performance length, n 1/2). Only once the curve has flattened (the best is
    then close to the asymptote); None while busbw still climbs at the largest size, or is unknown."""
    part = part.dropna(subset=["busbw_bytes_per_s"]).sort_values("coll_bytes")
    bw = part["busbw_bytes_per_s"].astype(float).tolist()
    if len(bw) < 3 or bw[-1] > (1 + SATURATED) * bw[-2]:
        return None
    half = max(bw) / 2
    return float(part.loc[part["busbw_bytes_per_s"] >= half, "coll_bytes"].iloc[0])


def collectives(rows: pd.DataFrame) -> go.Figure:
    """busbw (left) and latency (right) against message size, one line per operation and world size
    (one dtype each), the knee marked on each busbw line."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("bus bandwidth (nccl-tests busbw)", "latency"))
    keys = ["coll_op", "coll_world", "dtype"]
    for j, (key, part) in enumerate(rows.sort_values("coll_bytes").groupby(keys)):
        label, colour = f"{key[0]} n={int(key[1])} {key[2]}", COLOURS[j % len(COLOURS)]
        custom = part[["algbw_bytes_per_s", "time_s"]].astype(float).to_numpy() * [1e-9, 1e6]
        common = dict(
            text=part["workload_id"],
            customdata=custom,
            legendgroup=label,
            line=dict(color=colour),
            mode="lines+markers",
        )
        fig.add_trace(
            go.Scatter(
                x=part["coll_bytes"],
                y=part["busbw_bytes_per_s"] / 1e9,
                name=label,
                **common,
                hovertemplate="<b>%{text}</b><br>%{x:,} B: busbw %{y:.3g} GB/s, algbw "
                "%{customdata[0]:.3g} GB/s, %{customdata[1]:,.1f} us<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=part["coll_bytes"],
                y=part["time_s"] * 1e6,
                name=label,
                showlegend=False,
                **common,
                hovertemplate="<b>%{text}</b><br>%{x:,} B: %{y:,.1f} us<extra></extra>",
            ),
            row=1,
            col=2,
        )
        if part.get("nccom_test_busbw_bytes_per_s", pd.Series(dtype=float)).notna().any():  # the anchor, dashed
            _nccom_anchor(fig, part, label, colour)
        knee = knee_bytes(part)
        if knee is not None:
            at = part[part["coll_bytes"] == knee].iloc[0]
            fig.add_trace(
                go.Scatter(
                    x=[knee],
                    y=[at["busbw_bytes_per_s"] / 1e9],
                    mode="markers",
                    legendgroup=label,
                    showlegend=False,
                    marker=dict(symbol="star", size=13, color=colour),
                    hovertemplate=f"{label}: knee at {knee:,.0f} B (busbw reaches half its best)<extra></extra>",
                ),
                row=1,
                col=1,
            )
    fig.update_xaxes(type="log", title="message size (bytes)")
    fig.update_yaxes(title="GB/s", row=1, col=1)
    fig.update_yaxes(type="log", title="us (the slowest rank's, median)", row=1, col=2)
    return _layout(
        fig,
        "collectives against message size (star: the knee, where busbw reaches half its best; dashed: nccom-test)",
        480,
    )


def _nccom_anchor(fig: go.Figure, part: pd.DataFrame, label: str, colour: str) -> None:
    """nccom-test's busbw and latency of the same collectives beside ours, dashed, in each subplot."""
    anchor = dict(
        text=part["workload_id"],
        legendgroup=label,
        mode="lines+markers",
        showlegend=False,
        line=dict(color=colour, dash="dash"),
        marker=dict(symbol="x"),
    )
    fig.add_trace(
        go.Scatter(
            x=part["coll_bytes"],
            y=part["nccom_test_busbw_bytes_per_s"] / 1e9,
            **anchor,
            hovertemplate="<b>%{text}</b><br>%{x:,} B: nccom-test busbw %{y:.3g} GB/s<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=part["coll_bytes"],
            y=part["nccom_test_time_s"] * 1e6,
            **anchor,
            hovertemplate="<b>%{text}</b><br>%{x:,} B: nccom-test %{y:,.1f} us<extra></extra>",
        ),
        row=1,
        col=2,
    )


def _forward_label(rows: pd.DataFrame) -> pd.Series:
    """The label `phase batch seq dtype` per row (a Series even of no rows, where a row-wise join gives a frame)."""
    cols = [rows[c].astype(str) for c in ("phase", "batch", "seq", "dtype")]
    label = cols[0] + " " + cols[1] + " " + cols[2] + " " + cols[3]
    tp = pd.to_numeric(rows["tp"], errors="coerce") if "tp" in rows else None
    return label if tp is None or not (tp > 1).any() else label + " tp" + tp.fillna(1).astype(int).astype(str)


def model_rollup(rolled: pd.DataFrame) -> go.Figure:
    """Each forward's GEMM time (count x measured latency), stacked by GEMM: where a model's GEMM time goes."""
    fig = go.Figure()
    rolled = rolled.assign(forward=_forward_label(rolled))
    for j, (gemm, part) in enumerate(rolled.sort_values("forward").groupby("gemm", sort=False)):
        fig.add_trace(
            go.Bar(
                x=part["forward"],
                y=part["gemm_time_s"].astype(float) * 1e3,
                name=gemm,
                customdata=part[["count", "share_pct"]].astype(float),
                marker=dict(color=COLOURS[j % len(COLOURS)]),
                hovertemplate="<b>" + gemm + "</b> x %{customdata[0]:.0f}: %{y:,.4g} ms, %{customdata[1]:.0f} %"
                "<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="phase, batch, seq, dtype")
    fig.update_yaxes(title="GEMM time per forward, ms (count x measured latency)", rangemode="tozero")
    return _layout(fig, "the model's GEMMs: count x measured latency, stacked (not the model's latency)")


def model_categories(forward: pd.DataFrame, categories: tuple[str, ...]) -> go.Figure:
    """Each forward's profiled time by category (the layers weighted by how many there are, the head once),
    stacked to 100 %: where the model's time goes beyond the GEMMs."""
    fig = go.Figure()
    label = _forward_label(forward)
    for j, c in enumerate(categories):
        fig.add_trace(
            go.Bar(
                x=label,
                y=forward[f"{c}_pct"].astype(float),
                name=c,
                marker=dict(color=COLOURS[j % len(COLOURS)]),
                hovertemplate="<b>" + c + "</b>: %{y:.1f} %<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="phase, batch, seq, dtype")
    fig.update_yaxes(title="share of the forward's profiled time, %", range=[0, 100])
    return _layout(fig, "where the forward's time goes: each layer kind's split x its layers, plus the head")


def headroom(ranked: pd.DataFrame, gaps: dict[str, str]) -> go.Figure:
    """Each neuron case's time split into the gaps of its bounds ladder (analysis/headroom.py), stacked: how much
    of it each kind of overhead accounts for, and what is left at peak."""
    fig = go.Figure()
    for j, (gap, name) in enumerate(gaps.items()):
        fig.add_trace(
            go.Bar(
                y=ranked["scenario_id"],
                x=ranked[f"{gap}_s"].astype(float) * 1e6,
                name=name,
                orientation="h",
                marker=dict(color=COLOURS[j % len(COLOURS)]),
                hovertemplate="<b>%{y}</b>: " + name + " %{x:,.2f} us<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="us of the case's time (bound_reference_s)")
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=9))
    title = "where the headroom is: each case's time split into the gaps of its bounds (not predicted savings)"
    return _layout(fig, title, max(360, 26 * len(ranked) + 140))


def isolation_gap(gap: pd.DataFrame) -> go.Figure:
    """Each GEMM module's time inside its layer over its time alone (1: the same; above: slower inside)."""
    fig = go.Figure()
    gap = gap.dropna(subset=["isolation_gap"])
    for j, ((phase, part), rows) in enumerate(gap.groupby(["phase", "part"], sort=True)):
        fig.add_trace(
            go.Bar(
                x=rows["module"],
                y=rows["isolation_gap"].astype(float),
                name=f"{phase} {part}",
                customdata=rows[["inside_s", "alone_s"]].astype(float) * 1e6,
                marker=dict(color=COLOURS[j % len(COLOURS)]),
                hovertemplate="<b>%{x}</b>: inside %{customdata[0]:,.1f} us, alone %{customdata[1]:,.1f} us"
                "<extra></extra>",
            )
        )
    fig.add_hline(y=1, line_dash="dash", line_color="#888")
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="GEMM module (relative to its layer)")
    fig.update_yaxes(title="inside the layer / alone", rangemode="tozero")
    return _layout(fig, "the isolation gap: each GEMM's time inside its layer over its time alone")


def forest(table: pd.DataFrame, margin_pct: float, margin_name: str) -> go.Figure:
    """compare's forest plot: each workload's B/A ratio, its 95 % interval where it was judged (filled,
    coloured by verdict), the ratio alone where it was not (hollow, grey), the minimum detectable change
    of each test as two ticks, 1 and the margin drawn.
    None when no workload has a ratio."""
    rows = table.dropna(subset=["ratio_b_over_a"]) if "ratio_b_over_a" in table else table.iloc[:0]
    if not len(rows):
        return None
    rows = rows.sort_values("ratio_b_over_a")
    fig = go.Figure()
    groups = (
        ("slower", rows["verdict"] == verdict.SLOWER, "#c44e52", "circle"),
        ("faster", rows["verdict"] == verdict.FASTER, "#55a868", "circle"),
        ("unchanged", rows["verdict"].isin([verdict.UNCHANGED, verdict.SMALL]), "#4c72b0", "circle"),
        ("not judged (ratio only)", ~rows["verdict"].isin(verdict.JUDGED), "#8c8c8c", "circle-open"),
    )
    for name, mask, colour, symbol in groups:
        part = rows[mask]
        if not len(part):
            continue
        low, high = part.get("ratio_ci_low"), part.get("ratio_ci_high")
        bars = None
        if low is not None and high is not None and low.notna().any():
            bars = dict(
                type="data",
                symmetric=False,
                array=(high - part["ratio_b_over_a"]).fillna(0).to_numpy(),
                arrayminus=(part["ratio_b_over_a"] - low).fillna(0).to_numpy(),
                color=colour,
            )
        fig.add_trace(
            go.Scatter(
                x=part["ratio_b_over_a"],
                y=part["workload_id"],
                mode="markers",
                name=name,
                marker=dict(color=colour, symbol=symbol, size=9, line=dict(width=2, color=colour)),
                error_x=bars,
                customdata=part[["verdict"]].to_numpy(),
                hovertemplate="%{y}<br>B/A %{x:.3f}<br>%{customdata[0]}<extra></extra>",
            )
        )
    detectable = rows.dropna(subset=["min_detectable_pct"]) if "min_detectable_pct" in rows else rows.iloc[:0]
    if len(detectable):  # where each case's test could have called a change: ticks at 1 / (1 + d) and 1 + d
        d = detectable["min_detectable_pct"] / 100
        fig.add_trace(
            go.Scatter(
                x=[*(1 / (1 + d)), *(1 + d)],
                y=[*detectable["workload_id"]] * 2,
                mode="markers",
                name="minimum detectable change",
                marker=dict(color="#999", symbol="line-ns-open", size=12, line=dict(width=2, color="#999")),
                hovertemplate="%{y}<br>could show a change past %{x:.3f}<extra></extra>",
            )
        )
    fig.add_vline(x=1, line=dict(color="#222", width=1))
    for side in (1, -1):
        fig.add_vline(x=1 + side * margin_pct / 100, line=dict(color="#999", dash="dash", width=1))
    fig.add_annotation(
        x=1 + margin_pct / 100,
        y=1,
        yref="paper",
        text=f"{margin_name} ±{margin_pct:g} %",
        showarrow=False,
        xanchor="right",
        yanchor="bottom",
        font=dict(size=10, color="#777"),
    )
    fig = _layout(fig, "B / A per workload (95 % interval where judged)", height=140 + 26 * len(rows))
    fig.update_yaxes(categoryorder="array", categoryarray=list(rows["workload_id"]))  # by ratio, not by verdict
    ends = [*rows["ratio_b_over_a"], 1 - margin_pct / 100, 1 + margin_pct / 100]
    ends += [*(1 / (1 + detectable["min_detectable_pct"] / 100)), *(1 + detectable["min_detectable_pct"] / 100)]
    for column in ("ratio_ci_low", "ratio_ci_high"):
        ends += list(rows[column].dropna()) if column in rows else []
    pad = 0.05 * (max(ends) - min(ends))
    fig.update_xaxes(title="time of B / time of A", range=[min(ends) - pad, max(ends) + pad])
    fig.update_yaxes(automargin=True)
    return fig


def deployment_frontier(rows: pd.DataFrame) -> go.Figure:
    """Each candidate deployment's ITL against its tokens per second per instance, those meeting the latency
    target apart from those missing it, the chosen one ringed, the ITL target a vertical line."""
    fig = go.Figure()
    measured = rows[pd.to_numeric(rows["itl_s"], errors="coerce").notna()]
    for meets, part in measured.groupby("meets_slo"):
        fig.add_trace(
            go.Scatter(
                x=part["itl_s"].astype(float) * 1e3,
                y=part["tokens_per_s_per_instance"].astype(float),
                text=part["candidate"],
                mode="markers+text",
                textposition="top center",
                name="meets the target" if meets else "misses it",
                marker=dict(size=11, color=COLOURS[0] if meets else COLOURS[3]),
                hovertemplate="<b>%{text}</b><br>ITL %{x:.3g} ms: %{y:.3g} tokens/s per instance<extra></extra>",
            )
        )
    chosen = measured[measured["chosen"].astype(bool)]
    if len(chosen):
        fig.add_trace(
            go.Scatter(
                x=chosen["itl_s"].astype(float) * 1e3,
                y=chosen["tokens_per_s_per_instance"].astype(float),
                mode="markers",
                name="chosen",
                marker=dict(size=22, symbol="circle-open", color="black", line=dict(width=2)),
                hoverinfo="skip",
            )
        )
    if len(rows):
        fig.add_vline(x=float(rows["itl_target_s"].iloc[0]) * 1e3, line_dash="dash", annotation_text="ITL target")
    fig.update_xaxes(title="ITL (ms)")
    fig.update_yaxes(title="tokens per second per instance")
    return _layout(fig, "each deployment: inter-token latency against throughput per instance")
