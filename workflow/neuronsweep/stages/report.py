"""report stage: results/<run>/report.html, one self-contained interactive page (plotly figures,
sortable tables, links to every case's files) from summary.csv, roofline_targets.csv and the
per-workload tables. Every recommendation quotes the numbers it rests on.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from neuronsweep.analysis import deployments, headroom, model_rollup
from neuronsweep.analysis import ranking as compare
from neuronsweep.analysis.stats import NOISY_REL_SPREAD
from neuronsweep.atomic import read_json, replacing
from neuronsweep.config.backends import BACKENDS
from neuronsweep.report import figures as figs
from neuronsweep.report.page import human, page, table
from neuronsweep.store import layout
from neuronsweep.store.plan_document import PlanDocument


def _us(seconds: float | None) -> str:
    return "n/a" if seconds is None or pd.isna(seconds) else f"{seconds * 1e6:,.1f} us"


# ------------------------------------------------------------------------------ recommendations


def _host_only(row: pd.Series) -> str:
    return BACKENDS[row["backend"]].host_only()


def recommendations(table: pd.DataFrame) -> list[str]:
    """Timing comparisons only between cases measured cleanly (not noisy); what does not rest on a
    timing ratio (memory bound, recompilation, overhead) stands for every case; ratios measured on the
    host say they are host-only."""
    ok = table[table["status"] == "ok"]
    noisy = _matching(ok, GROUPS["noisy"].column, GROUPS["noisy"].value)
    recs = [] if ok.empty else _measured_recommendations(ok, ok.drop(noisy.index))  # nothing measured: no metrics
    for _, r in table[table["status"].isin(("failed", "wrong"))].iterrows():
        recs.append(f"{r['scenario_id']} {'failed' if r['status'] == 'failed' else 'is wrong'}: {r['reason']}")
    if len(noisy):
        recs.append(
            f"Not compared above, their spread is over {100 * NOISY_REL_SPREAD:.0f}% of the median (noisy): "
            + _named(list(_per_workload(noisy)), "noisy")
            + "; recapture them on a quiet machine."
        )
    return recs


LINK = re.compile(r"\[([^\]]+)\]\(#([\w-]+)\)")


def _linked(text: str) -> str:
    """A recommendation as HTML: escaped, its "[all N](#anchor)" a link to the table of the cases it counts."""
    return LINK.sub(lambda m: f'<a href="#{m.group(2)}">{m.group(1)}</a>', html.escape(text))


def _per_workload(rows: pd.DataFrame) -> Iterator[tuple[str, pd.Series]]:
    """(label, row) once per workload: scenarios that share one (ffn_up and ffn_gate of an llm) are one
    measurement, said once with every scenario named."""
    for _, part in rows.groupby("workload_id" if "workload_id" in rows else "scenario_id", sort=False):
        names = list(dict.fromkeys(part["scenario_id"]))
        yield (names[0] if len(names) == 1 else " and ".join(names) + " (one workload)"), part.iloc[0]


def _span(values: Sequence[float], fmt: str) -> str:
    """One figure, or the range of several ("0.5-2.0"), as a grouped recommendation names them."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}-{high}"


NAMED = 3  # a recommendation names at most this many cases; the rest are a count and a link to their table


def _recoverable_s(r: pd.Series, share_pct: str) -> float:
    """The time a case could recover (x its count in a model's forward): its time above what `share_pct` says
    it reaches (the roofline's efficiency, or the device's active share), all of it where that is unknown."""
    time = next((r[k] for k in ("time_s", "latency_median_s") if pd.notna(r.get(k))), None)  # a model's GEMM: no time_s
    share, count = r.get(share_pct), r.get("count") if pd.notna(r.get("count")) else 1
    if time is None:
        return 0.0
    reached = min(max(float(share), 0.0), 100.0) / 100 if share is not None and pd.notna(share) else 0.0
    return float(time) * (1 - reached) * float(count)


@dataclass(frozen=True)
class Group:
    """A recommendation about several cases that share a cause: which rows, what orders them, and its table."""

    column: str  # summary.csv's column that picks its rows, and the value it picks them by
    value: object
    title: str  # of the table of all its cases
    order: str  # that table's column the cases rank by: seconds recoverable, or a noisy case's spread
    said: str  # the word after each named case's figure
    first: str  # how the named few are introduced

    def weigh(self, r: pd.Series) -> float:
        """The case's figure: the time it could recover, or its spread."""
        if self.order == "latency_spread_s":
            return float(r["latency_spread_s"]) if pd.notna(r.get("latency_spread_s")) else 0.0
        share = "roofline_efficiency_pct" if self.value == "memory" else "profile_active_pct"
        return _recoverable_s(r, share)


RECOVERABLE = ("recoverable_s", "recoverable", "most time recoverable")
GROUPS = {  # a grouped recommendation's anchor on the page -> its group
    "memory-bound": Group("roofline_bound", "memory", "The memory-bound cases, by time recoverable", *RECOVERABLE),
    "overhead-bound": Group("bound_class", "overhead", "The overhead-bound cases, by time recoverable", *RECOVERABLE),
    "noisy": Group("noisy", True, "The noisy cases, by spread", "latency_spread_s", "spread", "widest spread"),
}


def _named(cases: list[tuple[str, pd.Series]], anchor: str) -> str:
    """The cases a grouped recommendation names: all of a few; else the NAMED that weigh most (time recoverable,
    or spread), each with its figure, then how many more and where the whole list is ("[all N](#anchor)", a
    link on the page to grouped_cases' table)."""
    if len(cases) <= NAMED:
        return ", ".join(label for label, _ in cases)
    group = GROUPS[anchor]
    top = sorted(cases, key=lambda c: -group.weigh(c[1]))[:NAMED]
    shown = ", ".join(f"{label} ({human('time_s', group.weigh(r))} {group.said})" for label, r in top)
    return f"{group.first}: {shown}; and {len(cases) - NAMED} more, [all {len(cases)}](#{anchor})"


def _matching(rows: pd.DataFrame, column: str, value: object) -> pd.DataFrame:
    """The rows whose `column` is `value` (none where summary.csv has no such column)."""
    return rows[rows[column] == value] if column in rows else rows.iloc[0:0]


def grouped_cases(ok: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per grouped recommendation naming more than NAMED cases, the table of all of them (its anchor -> rows),
    those that weigh most first."""
    out = {}
    for anchor, group in GROUPS.items():
        cases = list(_per_workload(_matching(ok, group.column, group.value)))
        if len(cases) > NAMED:
            rows = pd.DataFrame([{"case": label, group.order: group.weigh(r)} for label, r in cases])
            out[anchor] = rows.sort_values(group.order, ascending=False, kind="stable")
    return out


def _memory_bound(ok: pd.DataFrame) -> list[str]:
    """The memory-bound cases: one line for a case alone, one line naming them where several share the cause
    (a model's decode GEMMs), with the range of their figures, not a line each; past NAMED cases, those with the
    most time recoverable by name and the rest as a count (grouped_cases lists them all)."""
    cases = list(_per_workload(ok[ok["roofline_bound"] == "memory"]))
    if not cases:
        return []
    intensity = [float(r["arithmetic_intensity_flops_per_byte"]) for _, r in cases]
    ridge = [float(r["ridge_flops_per_byte"]) for _, r in cases]
    reach = [100 * i / g for i, g in zip(intensity, ridge)]
    if len(cases) == 1:
        label, r = cases[0]
        return [
            f"{label} is memory-bound: arithmetic intensity {intensity[0]:.1f} FLOP/B is below the ridge "
            f"{ridge[0]:.1f}, so at most {reach[0]:.0f}% of peak compute is reachable; batch more rows (larger M) "
            "or fuse it with its neighbours" + _host_only(r) + "."
        ]
    return [
        f"{len(cases)} cases are memory-bound ({_named(cases, 'memory-bound')}): "
        f"arithmetic intensity {_span(intensity, '.1f')} FLOP/B, below the ridge {_span(ridge, '.1f')}, so at most "
        f"{_span(reach, '.0f')}% of peak compute is reachable; batch more rows (larger M) or fuse them with their "
        "neighbours" + _host_only(cases[0][1]) + "."
    ]


def _measured_recommendations(ok: pd.DataFrame, clean: pd.DataFrame) -> list[str]:
    recs = _memory_bound(ok)
    for _, r in clean[(clean["significant"] == True) & (clean["x_of_best"] >= 1.2)].iterrows():  # noqa: E712
        best = clean[(clean["group"] == r["group"]) & (clean["rank_in_group"] == 1)]
        if best.empty:  # the fastest of its group is noisy: no clean comparison
            continue
        best = best.iloc[0]
        per = "time" if r["flops"] == best["flops"] else "time per FLOP"
        extra = _host_only(r)
        if r["suite"] == "tiling" and pd.notna(r.get("tiles_total")):  # the tile model: a NeuronCore's cases only
            extra = (
                f" ({int(r['tiles_total'])} tiles at {r['tile_utilization_pct']:.0f}% utilization against "
                f"{int(best['tiles_total'])} at {best['tile_utilization_pct']:.0f}%)"
            )
        recs.append(
            f"{r['scenario_id']} takes {r['x_of_best']:.2f}x the {per} of {best['scenario_id']} in "
            f"[{r['group']}]: {_us(r['time_s'])} against {_us(best['time_s'])}, beyond the spread "
            f"({_us(r.get('latency_spread_s'))} / {_us(best.get('latency_spread_s'))}){extra}."
        )
    for label, r in _per_workload(_matching(ok, "recompilation_detected", True)):
        during = r.get("recompiles_during_timing")
        counted = (
            f"{int(during)} compiles in {int(r['latency_n'])} timed calls"
            if pd.notna(during)
            else "the kernel recompiled on a repeated call"
        )
        recs.append(
            f"{label}: recompilation detected ({counted}); every call pays compile time: "
            "keep shapes and baked-in Python values fixed between calls, or cache the kernel."
        )
    recs += _collective_recommendations(ok)
    return recs + _overhead_bound(ok)


def _overhead_bound(ok: pd.DataFrame) -> list[str]:
    """The overhead-bound cases, one line per advice: a case alone with its evidence, several named together."""
    by_advice: dict[str, list[tuple[str, pd.Series]]] = {}
    for label, r in _per_workload(_matching(ok, "bound_class", "overhead")):
        advice = (
            "the collective's fixed cost dominates at this size: fewer, larger messages (bucketed) amortize "
            "it (see the knee)"
            if r.get("suite") == "collectives"
            else "launch, synchronization and compiles dominate: batch more work per call"
        )
        by_advice.setdefault(advice, []).append((label, r))
    recs = []
    for advice, cases in by_advice.items():
        if len(cases) == 1:
            label, r = cases[0]
            recs.append(f"{label}: overhead-bound ({r['bound_evidence']}): {advice}.")
            continue
        active = [float(r["profile_active_pct"]) for _, r in cases if pd.notna(r.get("profile_active_pct"))]
        shown = f"; device active {_span(active, '.1f')}% of the profiled call" if active else ""
        names = _named(cases, "overhead-bound")
        recs.append(f"{len(cases)} cases are overhead-bound ({names}{shown}): {advice}.")
    return recs


STRAGGLER = 1.2  # slowest rank's median over the fastest's, above which a rank is called out


def _collective_recommendations(ok: pd.DataFrame) -> list[str]:
    """Per operation, world size and dtype: the knee (below it latency dominates, so bucket smaller
    messages) and ranks that lag the others."""
    if "coll_op" not in ok or ok["coll_op"].isna().all():
        return []
    recs = []
    rows = ok[ok["coll_op"].notna()]
    for (op, world, dtype), part in rows.sort_values("coll_bytes").groupby(["coll_op", "coll_world", "dtype"]):
        knee = figs.knee_bytes(part)
        if knee is None:
            if len(part) >= 3:
                recs.append(
                    f"{op} among {int(world)} ranks ({dtype}): busbw still climbs at the largest size "
                    f"({int(part['coll_bytes'].iloc[-1]):,} B), so its knee is beyond the sizes measured; "
                    "extend suites.collectives.sizes to find it."
                )
            continue
        if knee == part["coll_bytes"].iloc[0]:
            continue
        best = part.loc[part["busbw_bytes_per_s"].astype(float).idxmax()]
        small = part.iloc[0]
        recs.append(
            f"{op} among {int(world)} ranks ({dtype}): busbw reaches half its best "
            f"({best['busbw_bytes_per_s'] / 1e9:.3g} GB/s at {int(best['coll_bytes']):,} B) from "
            f"{int(knee):,} B; below that latency dominates ({_us(small['time_s'])} at "
            f"{int(small['coll_bytes']):,} B), so bucket smaller messages to at least {int(knee):,} B"
            + (
                ""
                if BACKENDS[small["backend"]].neuron_device
                else " (host-only: gloo ranks on this host, not a prediction for NeuronLink)"
            )
            + "."
        )
    crowded = rows[rows["coll_oversubscribed"] == True]  # noqa: E712
    if len(crowded):
        recs.append(
            f"{len(crowded)} collective case(s) ran more ranks than this host has cores "
            f"({', '.join(crowded['scenario_id'])}): their ranks waited for a core, so their times and "
            "straggler figures are the host's, not the collective's; run them on a host with a core per rank."
        )
    for label, r in _per_workload(rows[rows["rank_straggler_ratio"].astype(float) > STRAGGLER]):  # said once
        recs.append(
            f"{label}: the slowest rank's median is {r['rank_straggler_ratio']:.2f}x the fastest's "
            f"({_us(r['rank_time_max_s'])} against {_us(r['rank_time_min_s'])}; tables/ranks.csv): a straggler "
            "sets every collective's time."
        )
    return recs


# ------------------------------------------------------------------------------------------ html

PERFETTO_HINT = (
    "trace: open https://ui.perfetto.dev and drop the .pftrace on the page (Open trace file); "
    "it is read in your browser, nothing is uploaded"
)
PLOT_CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "toImageButtonOptions": {"format": "png", "scale": 2},
}  # the camera button saves a PNG


def _figure(name: str, fig: go.Figure | None) -> str:
    if fig is None:
        return ""
    body = pio.to_html(
        fig, include_plotlyjs=False, full_html=False, config=PLOT_CONFIG, div_id=f"fig-{name}", default_width="100%"
    )
    return f'<div class="figure" data-figure="{name}">{body}</div>'


def _across_runs(run_dir: Path, tunes: Sequence[str] = ()) -> str:
    """Links to the history page (results/history/history.html), to each tuned model's tune.html and to
    the comparisons made into this run's folder (`neuronsweep compare A <this run>` writes
    compare-<A>/compare.html), relative to report.html. A tune runs beside the report (a tune that fails
    as a whole must not cost the run its report), so its page may not exist yet: it is named with the
    command that tells where the tune stands."""
    links = []
    if (run_dir.parent / "history" / "history.html").is_file():
        links.append('<a href="../history/history.html">history</a> (every run of results/, change points)')
    for model in sorted(set(tunes) | {p.parent.name for p in run_dir.glob("tune/*/tune.html")}):
        rel = f"tune/{model}/tune.html"
        link = f'<a href="{html.escape(rel)}">tune of {html.escape(model)}</a>'
        if not (run_dir / rel).is_file():
            link += (
                f" (not written when this page was: the tune job runs after the sweep; "
                f"<code>neuronsweep search status CONFIG --name {html.escape(model)}</code> says where it stands)"
            )
        links.append(link)
    for page_ in sorted(run_dir.glob("compare-*/compare.html")):
        rel = page_.relative_to(run_dir).as_posix()
        links.append(f'<a href="{html.escape(rel)}">{html.escape(page_.parent.name)}</a>')
    if not links:
        return ""
    return (
        "<p>Across runs: "
        + ", ".join(links)
        + ". <span class=muted>neuronsweep compare A B; neuronsweep history.</span></p>"
    )


def _links(wids: pd.Series, run_dir: Path, backend: str) -> pd.Series:
    """Per case: its folder, its metrics.json and (where one was written) its .pftrace, relative to
    report.html so the links work wherever results/<run> is copied."""

    def one(wid: str) -> str:
        rel = layout.workload_dir(".", backend, wid).as_posix().removeprefix("./")
        links = [f'<a href="{rel}/">folder</a>', f'<a href="{rel}/metrics.json">metrics.json</a>']
        if (run_dir / rel / "view" / "trace.pftrace").is_file():
            links.append(f'<a href="{rel}/view/trace.pftrace" title="{html.escape(PERFETTO_HINT)}">trace.pftrace</a>')
        return " ".join(links)

    return wids.map(one)


def _escaped(df: pd.DataFrame) -> pd.DataFrame:
    return df.apply(lambda col: col.map(lambda v: html.escape(v) if isinstance(v, str) else v))


def _targets(path: Path | None) -> pd.DataFrame:
    """roofline_targets.csv, empty where no workload has a roofline (a sweep of collectives only)."""
    try:
        return pd.read_csv(path) if path and path.is_file() else pd.DataFrame()
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _figures(ok: pd.DataFrame, plan: PlanDocument, targets_csv: Path | None, workloads_dir: Path) -> list[str]:
    """The figures of the measured rows (with their `files` links) and each suite's figure and table."""
    parts = []
    targets = _targets(targets_csv)
    # a workload shared by two suites is one bar; collectives have their own figure
    per_workload = ok[ok["suite"] != "collectives"].drop_duplicates("workload_id")
    for name, title, fig in [
        ("roofline", "roofline", figs.roofline(ok, _platform(plan))),
        ("targets", "roofline on the targets (model)", figs.target_rooflines(targets) if len(targets) else None),
        (
            "breakdown",
            "where the time goes",
            figs.breakdown(per_workload, workloads_dir) if len(per_workload) else None,
        ),
        ("framework_vs_device", "framework against device", figs.framework_device(per_workload)),
    ]:
        if fig is not None:
            parts.append(f"<h2>{title}</h2>" + _figure(name, fig))
    for suite, rows in ok.groupby("suite"):
        collectives = suite == "collectives"
        fig = figs.collectives(rows) if collectives else figs.suite(suite, rows)
        parts.append(f"<h2>suite {suite}</h2>" + _figure(f"suite_{suite}", fig))
        rows = rows.sort_values(
            ["coll_op", "coll_world", "dtype", "coll_bytes"] if collectives else ["group", "rank_in_group"]
        )
        cols = [c for c in (COLLECTIVE_COLUMNS if collectives else SUITE_COLUMNS) if c in rows]
        parts.append(table(_escaped(rows[cols]).assign(files=rows["files"]), escape=False))
    if (ok["suite"] == "loops").any():
        parts.append("<h2>vmap / scan / for-loop</h2>" + table(compare.loops_table(ok)))
    return parts


def _apart(table_: pd.DataFrame, workloads_dir: Path) -> list[str]:
    """What is listed apart from the figures: traces not drawn as recorded, wrong outputs, cases not measured."""
    parts = []
    converted = _conversion(workloads_dir, table_["workload_id"].drop_duplicates())
    if len(converted):  # the trace is whole, but not as its thread drew it, or not all of it was read
        parts.append(
            "<h2>Traces not drawn as recorded</h2><p class=muted>Slices that do not nest in their thread "
            "are kept whole on a track beside it (named '(overlapping N)' in trace.pftrace), so no time is "
            "cut; events the converter could not read are counted, never changed.</p>" + table(converted)
        )
    wrong = table_[table_["status"] == "wrong"][["scenario_id", "status", "reason"]]
    if len(wrong):  # measured, but its output is wrong: never ranked, listed apart
        parts.append("<h2>Wrong output (not ranked)</h2>" + table(wrong))
    others = table_[~table_["status"].isin(("ok", "wrong"))][["scenario_id", "status", "reason"]]
    if len(others):
        parts.append("<h2>Not measured</h2>" + table(others))
    return parts


def _headroom(ok: pd.DataFrame) -> str:
    """Per suite, the neuron cases ranked by the time their largest gap could recover, and each case's time
    split into its gaps (analysis/headroom.py); a line saying why where no case has a bounds ladder."""
    ranked = headroom.ranked(ok) if "bound_reference_s" in ok else pd.DataFrame()
    if ranked.empty:
        return (
            "<h2>Headroom</h2><p class=muted>No case here has a bounds ladder: it rests on a NeuronCore profile's "
            "summary (the neuron backend; docs/metrics.md, Headroom).</p>"
        )
    cols = ["scenario_id", "suite", "bottleneck_engine", "reference_s", "largest_gap", "count", "recoverable_s"]
    return (
        "<h2>Headroom</h2><p class=muted>Neuron Explorer's performance bounds: each case's time split into what "
        "each kind of overhead accounts for (engines waiting, then the bottleneck's own ladder), ranked by the "
        "time the largest gap could recover (x the GEMM's count in its model's forward). The gaps are not "
        "predicted savings: peaks are not reachable, and engines are coupled. metrics.json has each bound, its "
        "speed-up and the profile's insights and warnings.</p>"
        + _figure("headroom", figs.headroom(ranked, headroom.GAPS))
        + table(ranked[cols])
        + _layer_windows(ok)
    )


def _layer_windows(ok: pd.DataFrame) -> str:
    """Each layer case's categories and the engine bounding each one's window (metrics.json's split_bounds:
    the same ladder over the category's own intervals), where the profile's tables gave them."""
    if "split_bottlenecks" not in ok:
        return ""
    rows = ok[ok["split_bottlenecks"].notna() & (ok["split_bottlenecks"].astype(str) != "")]
    if rows.empty:
        return ""
    return (
        "<h3>Inside each layer: the engine bounding each category's window</h3><p class=muted>The ladder over "
        "each category's own intervals (DMA packets, engine activity and MATMUL FLOPs clipped to them): a "
        "category bound by dma waits on memory, one bound by tensor on TensorE. metrics.json's split_bounds "
        "has each window's rungs.</p>" + table(rows[["scenario_id", "split_bottlenecks"]])
    )


def _platform(plan: PlanDocument) -> str:
    return BACKENDS[plan["backend"]].platform(plan.get("config", {}))


SUITE_COLUMNS = [
    "scenario_id",
    "workload_id",
    "time_s",
    "latency_spread_s",
    "noisy",
    "captured_under_load",
    "x_of_best",
    "significant",
    "achieved_flops_per_s",
    "roofline_bound",
    "roofline_efficiency_pct",
    "tiles_total",
    "tile_utilization_pct",
    "compile_s",
    "cache_hit",
    "recompilation_detected",
]


COLLECTIVE_COLUMNS = [
    "scenario_id",
    "coll_op",
    "coll_world",
    "coll_bytes",
    "dtype",
    "time_s",
    "latency_spread_s",
    "noisy",
    "captured_under_load",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
    "busbw_factor",
    "rank_time_max_s",
    "rank_time_min_s",
    "rank_straggler_ratio",
    "coll_oversubscribed",
    "nccom_test_time_s",
    "nccom_test_busbw_bytes_per_s",
    "busbw_vs_nccom_test",
    "x_of_best",
    "significant",
]


def _conversion(workloads_dir: Path, wids: Iterable[str]) -> pd.DataFrame:
    """Per workload whose Chrome trace did not convert as drawn (view.json's pftrace_counts): slices
    put beside their thread, and what was not converted."""
    rows = []
    for wid in wids:
        path = workloads_dir / str(wid) / "view" / "view.json"
        counts = (read_json(path).get("pftrace_counts") or {}) if path.is_file() else {}
        skipped = "; ".join(
            f"{v['count']} {k} (first: {v['first']})" for k, v in counts.get("not_converted", {}).items()
        )
        if counts.get("overlapping") or skipped:
            rows.append(
                {
                    "workload_id": wid,
                    "slices beside their thread": counts.get("overlapping", 0),
                    "not converted": skipped,
                }
            )
    return pd.DataFrame(rows)


def _whole_model(suite: str, folder: Path) -> str:
    """A model measured whole (suites/<suite>-forward.csv and -isolation.csv): each forward's estimate, the
    share of each category, and each GEMM's time inside its layer over alone."""
    forward_csv, gap_csv = folder / f"{suite}-forward.csv", folder / f"{suite}-isolation.csv"
    if not forward_csv.is_file():
        return ""
    forward = pd.read_csv(forward_csv)
    gap = pd.read_csv(gap_csv) if gap_csv.is_file() and gap_csv.stat().st_size > 1 else pd.DataFrame()
    name = html.escape(suite.removeprefix("model-"))
    split = forward.dropna(subset=["gemm_pct"]) if "gemm_pct" in forward else forward.iloc[:0]
    cols = ["phase", "batch", "seq", "dtype", "tp", "layout", "forward_time_s", "collectives_time_s", "collectives_pct"]
    cols += ["gemms_alone_time_s", "gemm_pct", "forward_why"]
    if "tp" in forward and forward["tp"].nunique() < 2 and (forward["tp"] == 1).all():  # no parallel layout
        cols = [c for c in cols if c not in ("tp", "layout", "collectives_time_s", "collectives_pct")]
    return (
        f"<h2>model {name}: the whole forward</h2>"
        "<p class=muted>Each kind of decoder layer and the head measured as the model runs them (seeded weights; "
        "experts fed the routing policy's tokens): the forward's estimate is each layer kind's latency x its "
        "layers plus the head's. The categories are shares of their profiled executions (cpu: torch.profiler "
        "ranges around the program's ops; xla: XLA's span per HLO op to its completion; neuron: the profile's "
        "FrameworkInstruction table; other is what no op covers). Under a parallel layout every figure is one "
        "rank's, per tp, and the forward adds each collective's count x its measured latency: collectives are "
        "a category of their own. The isolation gap (cpu) is a GEMM's time "
        "inside its layer over count x its latency timed alone.</p>"
        + (_figure(f"categories_{suite}", figs.model_categories(split, model_rollup.CATEGORIES)) if len(split) else "")
        + table(forward[[c for c in cols if c in forward]])
        + _across_ranks(forward)
        + (_figure(f"isolation_{suite}", figs.isolation_gap(gap)) if _has_gap(gap) else NO_GAP if len(gap) else "")
        + (table(gap) if len(gap) else "")
    )


def _across_ranks(forward: pd.DataFrame) -> str:
    """The forward run across its ranks beside the sum of its parts: a sentence per graph saying where the gap
    sits, and the table; empty where none ran."""
    if "forward_measured_layers" not in forward or forward["forward_measured_layers"].isna().all():
        return ""
    lines = []
    for _, r in forward.dropna(subset=["forward_measured_layers"]).iterrows():
        graph = f"{r['phase']} at batch {r['batch']}, seq {r['seq']}, {r.get('layout') or 'tp ' + str(r['tp'])}"
        measured, parts = r.get("forward_measured_s"), r.get("forward_parts_s")
        if pd.isna(measured) or pd.isna(parts):
            lines.append(f"{graph}: {r.get('forward_gap_in')}")
            continue
        took, summed = human("forward_measured_s", measured), human("forward_parts_s", parts)
        lines.append(
            f"{graph}: {int(r['forward_measured_layers'])} layers on every rank at once took {took} against "
            f"{summed} summed from their parts ({r['forward_parts_gap_pct']:+.0f} %); the gap sits in "
            f"{r['forward_gap_in']}"
        )
    cols = ["phase", "batch", "seq", "tp", "layout", "forward_measured_layers", "forward_measured_s"]
    cols += ["forward_parts_s", "forward_parts_gap_pct", "forward_collectives_inside_s", "forward_collectives_alone_s"]
    cols += ["straggler_rank", "rank_wait_max_s", "collective_wait_pct"]
    shown = forward.dropna(subset=["forward_measured_layers"])
    if "collective_overlap_pct" in shown and shown["collective_overlap_pct"].notna().any():  # neuron: measured
        cols.append("collective_overlap_pct")
    return (
        "<h3>the forward across its ranks</h3>"
        "<p class=muted>The rank's shard of the first forward_measured_layers decoder layers run on every rank at "
        "once, each layer's collectives where the stack issues them (docs/your-code.md), beside the same layers "
        "and collectives each timed alone. The collectives' time inside the forward includes each rank's wait for "
        "the last to arrive; on cpu the case's capture/ranks.pftrace shows every rank's forwards above its "
        "collective calls (on neuron the collectives run inside the NEFF: each rank's profile of one forward "
        "holds them, and the case's view/ranks.pftrace draws every rank's calls from those profiles).</p>"
        f"<ul>{''.join(f'<li>{html.escape(line)}</li>' for line in lines)}</ul>"
        + table(shown[[c for c in cols if c in shown]])
    )


NO_GAP = (
    "<p class=muted>No GEMM's time inside its layer here: only the cpu backend names each op by its module "
    "path, which matches a GEMM to its time alone (xla and neuron name an op by its source line or module "
    "class). The table gives each GEMM's time alone.</p>"
)


def _has_gap(gap: pd.DataFrame) -> bool:
    return "isolation_gap" in gap and bool(pd.to_numeric(gap["isolation_gap"], errors="coerce").notna().any())


def _deployment(rows: pd.DataFrame) -> str:
    """Which stack the model is deployed as, at which TP degrees, and what its deployment left out and the
    plan assumed; empty for a model without a deployment."""
    if "stack" not in rows or rows["stack"].isna().all():
        return ""
    stacks = ", ".join(sorted(rows["stack"].dropna().unique()))
    tps = ", ".join(str(int(t)) for t in sorted(pd.to_numeric(rows["tp"], errors="coerce").dropna().unique()))
    said = sorted(rows["assumed"].dropna().unique()) if "assumed" in rows else []
    assumed = f" Assumed where the deployment says nothing: {html.escape('; '.join(said))}." if said else ""
    fused = (
        " On the device some GEMMs run inside fused kernels (the table's fused_on_device): there the layer "
        "measured whole is the figure that counts."
        if "fused_on_device" in rows and rows["fused_on_device"].notna().any()
        else ""
    )
    return f"<p>As {html.escape(stacks)} runs it, one rank's shard at tp {tps}.{assumed}{fused}</p>"


def _model_section(suite: str, rows: pd.DataFrame, folder: Path | None = None) -> str:
    """A model's roll-up: where its GEMM time goes per forward, a stacked figure and the table; measured
    whole too (folder: the run's suites/), the forward's split and the isolation gap."""
    whole = _whole_model(suite, folder) if folder else ""
    rows = rows[rows["part"].isna()] if "part" in rows else rows
    rolled = model_rollup.rollup(rows)
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in model_rollup.headlines(rows))
    cols = ["phase", "batch", "seq", "dtype", "gemm", "module", "count", "m", "k", "n", "latency_median_s"]
    cols += ["gemm_time_s", "share_pct", "model_gemm_time_s", "fused_on_device", "status"]
    return (
        f"<h2>model {html.escape(suite.removeprefix('model-'))}: its GEMMs</h2>{_deployment(rows)}<ul>{lines}</ul>"
        "<p class=muted>The GEMMs' time, count x measured latency of each, not the model's latency: attention's "
        "softmax, the norms, activations and communication are not in it.</p>"
        + _figure(f"rollup_{suite}", figs.model_rollup(rolled[rolled["gemm_time_s"].notna()]))
        + table(rolled[[c for c in cols if c in rolled]])
        + whole
        + (_deployments(suite, folder) if folder else "")
    )


def _deployments(suite: str, folder: Path) -> str:
    """The deployment that meets the model's latency target (suites/<suite>-deployments.csv): the verdict,
    the frontier and every candidate with what binds it."""
    path = folder / f"{suite}-deployments.csv"
    if not path.is_file():
        return ""
    rows = pd.read_csv(path)
    name = html.escape(suite.removeprefix("model-"))
    return (
        f"<h2>model {name}: the deployment that meets your latency</h2>"
        f"<p><b>{html.escape(deployments.verdict(rows))}</b></p>"
        "<p class=muted>Each candidate's TTFT (the decode step in flight, then the prompt's prefill chunks at "
        "their token buckets) and ITL (its decode graph at max_num_seqs over each step's context) are sums of "
        "this run's measured graphs, layers measured whole plus measured collectives, not a served request's "
        "timeline; tokens per second per instance are the instance's replicas x batch / ITL. Measured on "
        f"{html.escape(str(rows.get('measured_on', pd.Series(['this host'])).iloc[0]))}: on cpu every figure "
        "is this host's, not a NeuronCore's. A candidate that cannot fit (cores, HBM, max_model_len) is never "
        "chosen and says why.</p>" + _figure(f"frontier_{suite}", figs.deployment_frontier(rows)) + table(rows)
    )


def run(
    summary_csv: Path, plan_json: Path, out_html: Path, targets_csv: Path | None = None, tunes: Sequence[str] = ()
) -> None:
    """Write report.html: one self-contained page of figures, rankings and recommendations.

    Args:
        summary_csv: the run's summary.csv (aggregate).
        plan_json: the run's plan.json (backend, config, unsupported cases).
        out_html: the page to write.
        targets_csv: roofline_targets.csv, for the figure of the workloads on the targets.
        tunes: the models the run tunes (the tune rule runs beside the report, not before it).
    """
    table_ = pd.read_csv(summary_csv).copy()  # one block per dtype: read_csv leaves a wide table fragmented
    plan: PlanDocument = read_json(plan_json)
    run_dir = plan_json.parent
    workloads_dir = layout.workloads_dir(run_dir, plan["backend"])
    ok = table_[table_["status"] == "ok"]
    parts = [
        f"<h1>neuron-sweep report: run {html.escape(plan['run'])}</h1>",
        f"<p>backend <b>{html.escape(plan['backend'])}</b> ({html.escape(plan.get('backend_reason', ''))}); "
        f"{len(table_)} scenarios, {len(plan['workloads'])} workloads built and captured; status: "
        f"{html.escape(', '.join(f'{k} {v}' for k, v in table_['status'].value_counts().items()))}.</p>"
        "<p class=muted>Hover a point or bar for its workload and numbers; click a legend entry to hide "
        "a series; drag to zoom, double-click to reset; the camera icon saves a PNG. Click a table header "
        f"to sort, type in the box above it to filter. {html.escape(PERFETTO_HINT)}.</p>",
    ]
    parts.append(_across_runs(run_dir, tunes))
    recs = recommendations(table_)
    parts.append(
        "<h2>Recommendations</h2><ul>" + "".join(f"<li>{_linked(r)}</li>" for r in recs) + "</ul>"
        if recs
        else "<h2>Recommendations</h2><p class=muted>Nothing stands out beyond the spread.</p>"
    )
    parts += [
        f'<h3 id="{anchor}">{GROUPS[anchor].title}</h3>' + table(rows) for anchor, rows in grouped_cases(ok).items()
    ]
    parts.append(_headroom(ok))
    kinds = (  # what each row's suite is; summaries written before suite_kind name a model's suite model-<name>
        table_["suite_kind"]
        if "suite_kind" in table_
        else table_["suite"].astype(str).str.replace(r"^model-.*", "model", regex=True)
    )
    for suite in sorted(table_.loc[kinds == "model", "suite"].unique()):  # a model's GEMMs first
        parts.append(_model_section(suite, table_[table_["suite"] == suite], summary_csv.parent / "suites"))
    if len(ok):
        linked = ok.assign(files=_links(ok["workload_id"], run_dir, plan["backend"]))
        parts += _figures(linked, plan, targets_csv, workloads_dir)
    parts += _apart(table_, workloads_dir)
    parts.append(
        "<p class=muted>Units and formulas: docs/metrics.md. Every number comes from summary.csv "
        f"({html.escape(str(summary_csv))}).</p>"
    )
    with replacing(out_html) as tmp:
        tmp.write_text(page(f"neuron-sweep {plan['run']}", parts, plotly=bool(len(ok))))
