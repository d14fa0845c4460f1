"""`neuronsweep compare RUN_A RUN_B`: did the new SDK, compiler flag or kernel make it faster or slower?

Two finished runs (results/<run> folders) are matched by workload id. For each workload measured in
both: the time of A and B on the same basis (framework median where both have it, else the profiled
device time), their ratio, and the verdict of analysis/verdict.py, the rule the within-run ranking
uses too: beyond the larger measured spread, or not judged (noisy, a device time with no spread, too
few samples). Every other numeric metric that changed by more than the timing
noise (or at all, where both runs agree exactly) is listed too. The toolchain versions and the config
differences of A and B come first, so "SDK 2.27 vs 2.28" or "optlevel 2 vs 3" is visible before any
number. Times are compared only when both runs used the same backend.
"""

from __future__ import annotations

import html
import json
import statistics
from pathlib import Path

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.atomic import read_json, replacing
from neuronsweep.errors import UserError
from neuronsweep.report.page import human, page
from neuronsweep.report.page import table as html_table
from neuronsweep.runs import interleave, profile_diff
from neuronsweep.store.records import Timing, timing

NOT_METRICS = {
    "latency_n",
    "schema_version",
    "threads",
    "rank_in_group",
    "x_of_best",
    "latency_spread_s",
    "latency_iqr_s",
    "latency_rel_spread",
    "time_s",
}  # bookkeeping, or the comparison's own inputs


class Run:
    """One finished run folder: its plan, summary rows (one per workload), config and toolchains."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        summary, plan = self.folder / "summary.csv", self.folder / "plan.json"
        if not summary.is_file() or not plan.is_file():
            raise UserError(
                f"{self.folder}: not a finished run (needs summary.csv and plan.json); pass a "
                "results/<run> folder that snakemake has written."
            )
        self.plan = read_json(plan)
        self.backend = self.plan["backend"]
        self.rows = pd.read_csv(summary).drop_duplicates("workload_id").set_index("workload_id")
        self.config = self.plan.get("config")
        self.workloads = self.folder / self.backend / "workloads"

    def samples(self, wid: str) -> Timing | None:
        return timing(self.workloads / wid)

    def toolchains(self) -> dict[str, str]:
        """Package -> version(s), from the build records of this run's workloads."""
        seen: dict[str, set] = {}
        for path in (self.folder / self.backend / "workloads").glob("*/build/build.json"):
            try:
                chain = json.loads(path.read_text()).get("toolchain") or {}
            except (OSError, ValueError):
                continue
            for package, version in chain.items():
                seen.setdefault(package, set()).add(str(version))
        return {package: ", ".join(sorted(v)) for package, v in sorted(seen.items())}


def _flat(d, prefix="") -> dict:
    out = {}
    for key, value in (d or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, name + "."))
        else:
            out[name] = json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value
    return out


def config_differences(a: Run, b: Run) -> list[tuple[str, object, object]]:
    if a.config is None or b.config is None:
        return [
            (
                "config (plan.json of an older neuron-sweep does not record it)",
                "not recorded" if a.config is None else "recorded",
                "not recorded" if b.config is None else "recorded",
            )
        ]
    fa, fb = _flat(a.config), _flat(b.config)
    return [(k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def _num(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if pd.isna(x) else x


def _basis(ra, rb) -> str | None:
    for column in ("latency_median_s", "profile_total_time_s"):
        if _num(ra.get(column)) is not None and _num(rb.get(column)) is not None:
            return column
    return None


def timed_in_both(a: Run, b: Run) -> list[str]:
    """The workloads measured in both runs by a framework timing (what --interleaved times again)."""
    if a.backend != b.backend:
        return []
    both = sorted(set(a.rows.index) & set(b.rows.index))
    return [
        w
        for w in both
        if a.rows.loc[w]["status"] == "ok" == b.rows.loc[w]["status"]
        and _basis(a.rows.loc[w], b.rows.loc[w]) == "latency_median_s"
    ]


def compare(
    a: Run, b: Run, min_effect: float = verdict.MIN_EFFECT, timings: dict | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per workload, one row per changed metric). The workloads timed on both sides are one
    family for the correction (analysis/verdict.py). `timings`: per workload id (A's Timing, B's
    Timing, noisy) taken again (runs/interleave.py), judged instead of the stored ones."""
    rows, changes, family = [], [], []
    timings = timings or {}
    for wid in sorted(set(a.rows.index) | set(b.rows.index)):
        ra = a.rows.loc[wid] if wid in a.rows.index else None
        rb = b.rows.loc[wid] if wid in b.rows.index else None
        row = {
            "workload_id": wid,
            "status_a": None if ra is None else ra["status"],
            "status_b": None if rb is None else rb["status"],
        }
        rows.append(row)
        if ra is None or rb is None or ra["status"] != "ok" or rb["status"] != "ok":
            row["verdict"] = "only in A" if rb is None else "only in B" if ra is None else "not measured in both"
            continue
        basis = _basis(ra, rb)
        if a.backend != b.backend or basis is None:
            row["verdict"] = (
                f"not comparable ({a.backend} vs {b.backend})"
                if a.backend != b.backend
                else "not comparable (no common time)"
            )
            continue
        ta, tb = _num(ra[basis]), _num(rb[basis])
        timed = basis == "latency_median_s"  # a profiled device time has no samples: never judged
        noisy = verdict.flag(ra.get("noisy")) or verdict.flag(rb.get("noisy"))
        if timed and wid in timings:
            again_a, again_b, noisy = timings[wid]
            family.append((row, (again_a, again_b, noisy)))
            ta, tb = statistics.median(again_a.samples), statistics.median(again_b.samples)
        else:
            family.append((row, (a.samples(wid) if timed else None, b.samples(wid) if timed else None, noisy)))
        row.update(
            basis=basis,
            timed="again, interleaved" if timed and wid in timings else "stored",
            time_a_s=ta,
            time_b_s=tb,
            ratio_b_over_a=tb / ta if ta else None,
            change_pct=(tb / ta - 1) * 100 if ta else None,
        )
        rel_noise = max(_num(ra.get("latency_rel_spread")) or 0.0, _num(rb.get("latency_rel_spread")) or 0.0)
        for metric in sorted(set(ra.index) & set(rb.index)):
            va, vb = _num(ra[metric]), _num(rb[metric])
            if metric in NOT_METRICS or metric == basis or va is None or vb is None or va == vb:
                continue
            rel = abs(vb - va) / abs(va) if va else float("inf")
            if rel > rel_noise:
                changes.append(
                    {
                        "workload_id": wid,
                        "metric": metric,
                        "a": va,
                        "b": vb,
                        "change_pct": (vb / va - 1) * 100 if va else None,
                        "noise_rel": rel_noise,
                    }
                )
    for (row, _), said in zip(family, verdict.judge([pair for _, pair in family], min_effect=min_effect)):
        if said.ratio is not None and said.p_value is not None:  # judged: the ratio the test gives
            row.update(ratio_b_over_a=said.ratio, change_pct=(said.ratio - 1) * 100)
        row.update(
            n_a=said.n_a,
            n_b=said.n_b,
            ratio_ci_low=said.ci_low,
            ratio_ci_high=said.ci_high,
            p_value=said.p_value,
            p_holm=said.p_adjusted,
            tested_on=said.unit,
            beyond_noise=said.beyond,
            verdict=said.said,
        )
    return pd.DataFrame(rows), pd.DataFrame(
        changes, columns=["workload_id", "metric", "a", "b", "change_pct", "noise_rel"]
    )


def header(a: Run, b: Run) -> list[str]:
    lines = [f"A: {a.folder} ({a.backend}), B: {b.folder} ({b.backend})"]
    ta, tb = a.toolchains(), b.toolchains()
    for package in sorted(set(ta) | set(tb)):
        same = "" if ta.get(package) == tb.get(package) else "   <- differs"
        lines.append(f"  {package}: {ta.get(package, 'n/a')} vs {tb.get(package, 'n/a')}{same}")
    diffs = config_differences(a, b)
    lines.append("config differences:" if diffs else "config: the same")
    lines += [f"  {key}: {va!r} vs {vb!r}" for key, va, vb in diffs]
    if a.backend != b.backend:
        lines.append(
            f"backends differ ({a.backend} vs {b.backend}): times are not compared, since a "
            "host measurement and a device profile do not measure the same thing."
        )
    return lines


def _inside(a: Run, b: Run, table: pd.DataFrame) -> pd.DataFrame:
    """profile_diff over every workload judged slower or faster."""
    judged = table[table["verdict"].isin([verdict.SLOWER, verdict.FASTER])] if len(table) else table
    parts = [
        profile_diff.diff(r.workload_id, r.verdict, a.workloads / r.workload_id, b.workloads / r.workload_id)
        for r in judged.itertuples()
    ]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=profile_diff.COLUMNS)


def _inside_html(ops: pd.DataFrame, top: int = 8) -> list[str]:
    parts = ["<h2>What changed inside the workloads that got slower or faster</h2>"]
    if not len(ops):
        return parts + ["<p>none judged slower or faster, or no profile tables on both sides</p>"]
    parts.append(
        "<p class=muted>From each run's profile tables (one profiled execution each): per opcode, engine, "
        "DMA queue and source line, the time in A and B, the delta and its share of the table's total "
        f"change, largest first (the top {top} of each; compare_ops.csv has every row).</p>"
    )
    for wid, rows in ops.groupby("workload_id", sort=False):
        parts.append(f"<h3>{html.escape(str(wid))} ({html.escape(str(rows['verdict'].iloc[0]))})</h3>")
        changed = rows[rows["count_changed"].astype(bool)]
        if len(changed):
            parts.append(
                "<p><b>Counts changed</b> (other instructions or calls: a different program, not the same one "
                "run slower): "
                + html.escape(
                    "; ".join(
                        f"{r.key}: {_count(r.count_a)} -> {_count(r.count_b)}" for r in changed.head(top).itertuples()
                    )
                )
                + "</p>"
            )
        for _, part in rows.groupby("dimension", sort=False):
            parts.append(html_table(part.head(top).drop(columns=["workload_id", "verdict"])))
    return parts


def _count(value) -> str:
    return "absent" if pd.isna(value) else f"{value:,.0f}"


def _in_units(changes: pd.DataFrame) -> pd.DataFrame:
    """a and b in their metric's unit (the page only; compare_metrics.csv keeps SI values)."""
    return changes.assign(
        a=[human(m, v) for m, v in zip(changes["metric"], changes["a"])],
        b=[human(m, v) for m, v in zip(changes["metric"], changes["b"])],
    )


def _html(head: list[str], table: pd.DataFrame, changes: pd.DataFrame, ops: pd.DataFrame) -> str:
    return page(
        "neuron-sweep compare",
        [
            "<h1>neuron-sweep: B against A</h1>",
            f"<pre>{html.escape(chr(10).join(head))}</pre>",
            "<h2>Workloads</h2>",
            "<p class=muted>slower / faster: the test on both runs' timings (<code>tested_on</code>: the timed "
            "samples, or the rounds where each ran in a process of its own) rejects after Holm's correction over the "
            "workloads and the change is at least the minimum effect; the regression gate also needs the "
            "95 % interval wholly past its margin (docs/comparing-runs.md).</p>",
            html_table(table),
            *_inside_html(ops),
            "<h2>Metrics that changed beyond the timing noise</h2>",
            html_table(_in_units(changes)) if len(changes) else "<p>none</p>",
        ],
    )


def run(
    folder_a: Path,
    folder_b: Path,
    out: Path,
    fail_on_regression: float | None = None,
    min_effect_pct: float = verdict.MIN_EFFECT * 100,
    interleaved: int | None = None,
) -> tuple[list[str], int]:
    """Write compare.csv, compare_metrics.csv, compare_ops.csv and compare.html into `out`; returns the
    lines to print and the exit code (1 when --fail-on-regression PCT and a workload fails the gate:
    analysis/verdict.py's fails_gate). `interleaved`: rounds a side to time both runs' programs again
    in turns here (runs/interleave.py) instead of judging their stored timings."""
    a, b = Run(folder_a), Run(folder_b)
    lines = header(a, b)
    timings = None
    if interleaved is not None:
        wids = timed_in_both(a, b)
        timings = interleave.retime(a, b, wids, interleaved)
        lines += [
            f"timings: taken again on this host for the {len(wids)} workload(s) timed in both, "
            f"{interleaved} rounds a side,",
            "  A and B in turns (each round a fresh process, A's capture settings); the stored ones are not judged",
        ]
    table, changes = compare(a, b, min_effect=min_effect_pct / 100, timings=timings)
    ops = _inside(a, b, table)
    out.mkdir(parents=True, exist_ok=True)
    for name, df in (("compare.csv", table), ("compare_metrics.csv", changes), ("compare_ops.csv", ops)):
        with replacing(out / name) as tmp:
            df.to_csv(tmp, index=False)
    with replacing(out / "compare.html") as tmp:
        tmp.write_text(_html(lines, table, changes, ops))
    counts = table["verdict"].value_counts().to_dict() if len(table) else {}
    lines.append("workloads: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    judged = table[table["beyond_noise"].fillna(False).astype(bool)] if "beyond_noise" in table else table.iloc[:0]
    for _, r in (judged.sort_values("change_pct", ascending=False) if len(judged) else judged).iterrows():
        lines.append(
            f"  {r['verdict']:7} {r['change_pct']:+7.1f}%  {r['workload_id']}  ({human('time_s', r['time_a_s'])} -> "
            f"{human('time_s', r['time_b_s'])}, 95% CI of B/A {r['ratio_ci_low']:.3f}..{r['ratio_ci_high']:.3f}, "
            f"Holm p {r['p_holm']:.2g})"
        )
        top = ops[ops["workload_id"] == r["workload_id"]].head(1)
        if len(top):
            t = top.iloc[0]
            lines.append(f"          most of it: {t['dimension']} {t['key']} {human('delta_ns', t['delta_ns'])}")
    lines.append(f"wrote {out / 'compare.csv'}, compare_metrics.csv, compare_ops.csv and compare.html")
    code = 0
    if fail_on_regression is not None and len(judged):
        gate = [
            verdict.fails_gate(v, low, fail_on_regression) for v, low in zip(judged["verdict"], judged["ratio_ci_low"])
        ]
        worse = judged[gate]
        if len(worse):
            lines.append(
                f"regression: {len(worse)} workload(s) slower by more than {fail_on_regression}% with 95% "
                f"confidence (worst {worse['change_pct'].max():+.1f}%: "
                f"{worse.sort_values('change_pct').iloc[-1]['workload_id']})"
            )
            code = 1
    return lines, code
