"""report stage: results/<run>/report.html (self-contained: figures embedded) plus the figures as PNGs,
from summary.csv and the per-workload tables. Every recommendation quotes the numbers it rests on.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .analysis import compare  # noqa: E402
from .atomic import read_json, replacing  # noqa: E402
from .backends import BACKENDS  # noqa: E402
from .extract import NOISY_REL_SPREAD  # noqa: E402

ENGINE_COLS = ["tensor_engine_active_pct", "vector_engine_active_pct", "scalar_engine_active_pct",
               "gpsimd_engine_active_pct", "dma_active_pct"]


def _us(seconds) -> str:
    return "n/a" if seconds is None or pd.isna(seconds) else f"{seconds * 1e6:,.1f} us"


def _short(wid: str) -> str:
    return wid.replace("matmul-", "").replace("loops-", "").replace("mlp-", "")


# ------------------------------------------------------------------------------------- figures


def _whiskers(rows: pd.DataFrame):
    """Asymmetric error bars in ms: median +- half the spread, the lower end clipped at the fastest
    sample (a time is never negative, and a log axis needs a positive end)."""
    if "latency_spread_s" not in rows:
        return None
    med = rows["time_s"].astype(float)
    half = rows["latency_spread_s"].astype(float).fillna(0) / 2
    floor = rows["latency_min_s"].astype(float).fillna(med) if "latency_min_s" in rows else med
    lower = (med - (med - half).clip(lower=floor)).clip(lower=0)
    return [lower.to_numpy() * 1e3, half.to_numpy() * 1e3]


def _log_if_wide(ax, values, axis: str) -> None:
    """A log axis where the values span more than a factor of 20: a linear one hides the small bars."""
    vals = pd.Series(values, dtype=float).dropna()
    vals = vals[vals > 0]
    if len(vals) > 1 and vals.max() / vals.min() > 20:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def fig_suite(suite: str, rows: pd.DataFrame):
    """Latency (or throughput) against the suite's own axis."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    if suite in ("llm", "tiling"):
        x, series = ("m", ["phase", "projection"]) if suite == "llm" else ("value", ["dim", "boundary"])
        for key, part in rows.sort_values(x).groupby(series):
            ax.plot(part[x], part["achieved_flops_per_s"] / 1e9, marker="o", label=" ".join(map(str, key)))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M (rows = batch x seq or batch)" if suite == "llm" else "dimension value")
        ax.set_ylabel("achieved GFLOP/s")
        if suite == "tiling":
            for b in sorted(set(rows["boundary"])):
                for mult in sorted(set(rows["multiple"])):
                    ax.axvline(b * mult, color="grey", lw=0.6, ls=":")
    else:
        rows = rows.sort_values(["group", "time_s"])
        labels = [_short(w) for w in rows["scenario_id"]]
        ms = rows["time_s"].astype(float) * 1e3
        ax.barh(labels, ms, xerr=_whiskers(rows), color=["#c44e52" if n is True else "#4c72b0" for n in
                                                           rows.get("noisy", [None] * len(rows))])
        _log_if_wide(ax, ms, "x")
        ax.set_xlabel("time per execution (ms; bars: median, whiskers: half the spread each way, never below the "
                      "fastest sample; red: noisy)")
        ax.invert_yaxis()
    ax.set_title(f"{suite}: {'throughput against size' if suite in ('llm', 'tiling') else 'time per execution'}")
    if suite in ("llm", "tiling"):
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def fig_roofline(rows: pd.DataFrame):
    """Every workload against its dtype's roof, in the roof's colour, each point labelled."""
    rows = rows.dropna(subset=["peak_flops_per_s", "peak_bytes_per_s", "roofline_time_s"])
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ai = rows["arithmetic_intensity_flops_per_byte"].astype(float)
    ridge = (rows["peak_flops_per_s"] / rows["peak_bytes_per_s"]).astype(float)
    ai_min, ai_max = min(ai.min(), ridge.min()) / 4, max(ai.max(), ridge.max()) * 4
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, (dtype, part) in enumerate(rows.groupby("dtype")):
        colour = colours[j % len(colours)]
        peak, bw = float(part["peak_flops_per_s"].max()), float(part["peak_bytes_per_s"].median())
        xs = [ai_min * (ai_max / ai_min) ** (i / 100) for i in range(101)]
        ax.plot(xs, [min(peak, x * bw) / 1e9 for x in xs], lw=1.5, color=colour,
                label=f"{dtype} roof: {peak / 1e9:,.0f} GFLOP/s, {bw / 1e9:,.0f} GB/s (ridge {peak / bw:.1f} FLOP/B)")
        achieved = part["flops"].astype(float) / part["roofline_time_s"].astype(float) / 1e9
        ax.scatter(part["arithmetic_intensity_flops_per_byte"], achieved, s=24, color=colour, zorder=3,
                   edgecolor="black", linewidth=0.4)
        if len(rows) <= 40:
            for x, y, wid in zip(part["arithmetic_intensity_flops_per_byte"], achieved, part["workload_id"]):
                ax.annotate(_short(wid), (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(ai_min, ai_max)
    ax.set_xlabel("arithmetic intensity (FLOP per minimal byte)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title("roofline: every workload against its dtype's peaks on its platform")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    return fig


def _self_time_shares(rows: pd.DataFrame, workloads_dir: Path, keep) -> dict[str, pd.Series]:
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


def fig_breakdown(rows: pd.DataFrame, workloads_dir: Path):
    """Neuron: engine and DMA active % per workload. cpu: share of profiled op time by op (top 5).
    xla: share of the profiled calls' wall time per step (tracing, mark_step, wait_device_ops)."""
    fig, ax = plt.subplots(figsize=(8, max(3, 0.3 * len(rows) + 1.5)))
    labels = [_short(w) for w in rows["workload_id"]]
    if rows[ENGINE_COLS].notna().any().any():
        left = [0.0] * len(rows)
        for col in ENGINE_COLS:
            vals = rows[col].fillna(0).tolist()
            ax.barh(labels, vals, left=left, label=col.replace("_active_pct", "").replace("_engine", ""))
            left = [a + b for a, b in zip(left, vals)]
        ax.set_xlabel("% of device total_time each engine / DMA is active (they overlap, so bars can pass 100)")
    else:
        xla = (rows["backend"] == "xla").any()
        steps = BACKENDS["xla"].call_steps
        shares = _self_time_shares(rows, workloads_dir, (lambda n: n in steps) if xla else
                                   (lambda n: str(n).startswith("aten::")))
        if xla:
            top = steps
        else:
            top = pd.concat(shares, axis=1).fillna(0).sum(axis=1).nlargest(5).index if shares else []
        left = [0.0] * len(rows)
        for op in top:
            vals = [float(shares.get(w, pd.Series(dtype=float)).get(op, 0)) for w in rows["workload_id"]]
            ax.barh(labels, vals, left=left, label=op)
            left = [a + b for a, b in zip(left, vals)]
        ax.set_xlabel("% of the profiled calls' wall time per step (XLA compiles inside mark_step)" if xla else
                      "% of profiled aten op self time, top 5 ops (cpu has no engine counters)")
    ax.invert_yaxis()
    ax.legend(fontsize=7)
    ax.set_title("where the time goes")
    return fig


def fig_framework_device(rows: pd.DataFrame):
    rows = rows.dropna(subset=["latency_median_s"])
    fig, ax = plt.subplots(figsize=(8, max(3, 0.3 * len(rows) + 1.5)))
    labels = [_short(w) for w in rows["workload_id"]]
    backend = rows["backend"].iloc[0] if len(rows) else "cpu"
    device_col, device_label = BACKENDS[backend].device_time
    ys = range(len(rows))
    ax.barh([y - 0.2 for y in ys], rows["latency_median_s"] * 1e3, height=0.4, label="framework median")
    ax.barh([y + 0.2 for y in ys], rows[device_col] * 1e3, height=0.4, label=device_label)
    ax.set_yticks(list(ys), labels)
    ax.invert_yaxis()
    _log_if_wide(ax, pd.concat([rows["latency_median_s"], rows[device_col]]) * 1e3, "x")
    ax.set_xlabel("ms")
    ax.set_title("framework time against device time")
    ax.legend(fontsize=7)
    return fig


# ------------------------------------------------------------------------------ recommendations


def _host_only(row) -> str:
    return "" if row["backend"] == "neuron" else \
        f" (host-only: measured against this host's peaks on the {row['backend']} backend, not a Trainium prediction)"


def recommendations(table: pd.DataFrame) -> list[str]:
    """Timing comparisons only between cases measured cleanly (not noisy); what does not rest on a
    timing ratio (memory bound, recompilation, overhead) stands for every case; ratios measured on the
    host say they are host-only."""
    ok = table[table["status"] == "ok"]
    noisy = ok[ok.get("noisy", pd.Series(dtype=object)) == True]  # noqa: E712
    recs = [] if ok.empty else _measured_recommendations(ok, ok.drop(noisy.index))  # nothing measured: no metrics
    for _, r in table[table["status"] == "failed"].iterrows():
        recs.append(f"{r['scenario_id']} failed: {r['reason']}")
    if len(noisy):
        recs.append(f"Not compared above, their spread is over {100 * NOISY_REL_SPREAD:.0f}% of the median (noisy): "
                    + ", ".join(noisy["scenario_id"]) + "; recapture them on a quiet machine.")
    return recs


def _measured_recommendations(ok: pd.DataFrame, clean: pd.DataFrame) -> list[str]:
    recs = []
    for _, r in ok[ok["roofline_bound"] == "memory"].iterrows():
        attainable = r["arithmetic_intensity_flops_per_byte"] / r["ridge_flops_per_byte"] * 100
        recs.append(f"{r['scenario_id']} is memory-bound: arithmetic intensity "
                    f"{r['arithmetic_intensity_flops_per_byte']:.1f} FLOP/B is below the ridge "
                    f"{r['ridge_flops_per_byte']:.1f}, so at most {attainable:.0f}% of peak compute is reachable; "
                    "batch more rows (larger M) or fuse it with its neighbours" + _host_only(r) + ".")
    for _, r in clean[(clean["significant"] == True) & (clean["x_of_best"] >= 1.2)].iterrows():  # noqa: E712
        best = clean[(clean["group"] == r["group"]) & (clean["rank_in_group"] == 1)]
        if best.empty:  # the fastest of its group is noisy: no clean comparison
            continue
        best = best.iloc[0]
        per = "time" if r["flops"] == best["flops"] else "time per FLOP"
        extra = _host_only(r)
        if r["suite"] == "tiling" and r["backend"] == "neuron" and pd.notna(r.get("tiles_total")):
            extra = (f" ({int(r['tiles_total'])} tiles at {r['tile_utilization_pct']:.0f}% utilization against "
                     f"{int(best['tiles_total'])} at {best['tile_utilization_pct']:.0f}%)")
        recs.append(f"{r['scenario_id']} takes {r['x_of_best']:.2f}x the {per} of {best['scenario_id']} in "
                    f"[{r['group']}]: {_us(r['time_s'])} against {_us(best['time_s'])}, beyond the spread "
                    f"({_us(r.get('latency_spread_s'))} / {_us(best.get('latency_spread_s'))}){extra}.")
    for _, r in ok[ok.get("recompilation_detected", pd.Series(dtype=object)) == True].iterrows():  # noqa: E712
        during = r.get("recompiles_during_timing")
        counted = f"{int(during)} compiles in {int(r['latency_n'])} timed calls" if pd.notna(during) else \
            "the kernel recompiled on a repeated call"
        recs.append(f"{r['scenario_id']}: recompilation detected ({counted}); every call pays compile time: "
                    "keep shapes and baked-in Python values fixed between calls, or cache the kernel.")
    for _, r in ok[ok.get("bound_class", pd.Series(dtype=object)) == "overhead"].iterrows():
        recs.append(f"{r['scenario_id']}: overhead-bound ({r['bound_evidence']}): launch, synchronization "
                    "and compiles dominate: batch more work per call.")
    return recs


# ------------------------------------------------------------------------------------------ html


def _img(fig, path: Path) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = buf.getvalue()
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _table(df: pd.DataFrame) -> str:
    """An HTML table without all-empty columns (no Trainium columns on cpu rows), scrolling sideways
    rather than being cut at the page edge."""
    df = df.dropna(axis=1, how="all")
    return ('<div class="scroll">' + df.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0,
                                                 classes="t") + "</div>")


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table.t{border-collapse:collapse;font-size:12px}table.t td,table.t th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
img{max-width:100%}li{margin:.3em 0}.muted{color:#777}.scroll{overflow-x:auto;max-width:100%}"""


def run(summary_csv: Path, plan_json: Path, out_html: Path, fig_dir: Path) -> list[Path]:
    table = pd.read_csv(summary_csv)
    plan = read_json(plan_json)
    fig_dir.mkdir(parents=True, exist_ok=True)  # an output of the rule even when nothing was measured
    workloads_dir = plan_json.parent / plan["backend"] / "workloads"
    ok = table[table["status"] == "ok"]
    parts = [f"<h1>neuron-sweep report: run {html.escape(plan['run'])}</h1>",
             f"<p>backend <b>{html.escape(plan['backend'])}</b> ({html.escape(plan.get('backend_reason', ''))}); "
             f"{len(table)} scenarios, {len(plan['workloads'])} workloads built and captured; status: "
             f"{html.escape(', '.join(f'{k} {v}' for k, v in table['status'].value_counts().items()))}.</p>"]
    recs = recommendations(table)
    parts.append("<h2>Recommendations</h2><ul>" + "".join(f"<li>{html.escape(r)}</li>" for r in recs) + "</ul>"
                 if recs else "<h2>Recommendations</h2><p class=muted>Nothing stands out beyond the spread.</p>")
    figures = []
    if len(ok):
        for name, fig in [("roofline", fig_roofline(ok)), ("breakdown", fig_breakdown(ok, workloads_dir)),
                          ("framework_vs_device", fig_framework_device(ok))]:
            figures.append(fig_dir / f"{name}.png")
            parts.append(f"<h2>{name.replace('_', ' ')}</h2>" + _img(fig, figures[-1]))
        for suite, rows in ok.groupby("suite"):
            figures.append(fig_dir / f"suite_{suite}.png")
            parts.append(f"<h2>suite {suite}</h2>" + _img(fig_suite(suite, rows), figures[-1]))
            cols = [c for c in ["scenario_id", "workload_id", "time_s", "latency_spread_s", "noisy",
                                "captured_under_load", "x_of_best", "significant",
                                "achieved_flops_per_s", "roofline_bound", "roofline_efficiency_pct", "tiles_total",
                                "tile_utilization_pct", "compile_s", "cache_hit", "recompilation_detected"]
                    if c in rows]
            parts.append(_table(rows.sort_values(["group", "rank_in_group"])[cols]))
        if (ok["suite"] == "loops").any():
            parts.append("<h2>vmap / scan / for-loop</h2>" + _table(compare.loops_table(ok)))
    others = table[table["status"] != "ok"][["scenario_id", "status", "reason"]]
    if len(others):
        parts.append("<h2>Not measured</h2>" + _table(others))
    parts.append("<p class=muted>Units and formulas: docs/metrics.md. Every number comes from summary.csv "
                 f"({html.escape(str(summary_csv))}).</p>")
    page = f"<!doctype html><html><head><meta charset=utf-8><title>neuron-sweep {html.escape(plan['run'])}</title>" \
           f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>"
    with replacing(out_html) as tmp:
        tmp.write_text(page)
    return figures
