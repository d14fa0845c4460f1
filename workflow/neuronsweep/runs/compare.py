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
from pathlib import Path

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.atomic import read_json, replacing
from neuronsweep.errors import UserError
from neuronsweep.report.page import page
from neuronsweep.report.page import table as html_table

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


def compare(a: Run, b: Run) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per workload, one row per changed metric)."""
    rows, changes = [], []
    for wid in sorted(set(a.rows.index) | set(b.rows.index)):
        ra = a.rows.loc[wid] if wid in a.rows.index else None
        rb = b.rows.loc[wid] if wid in b.rows.index else None
        row = {
            "workload_id": wid,
            "status_a": None if ra is None else ra["status"],
            "status_b": None if rb is None else rb["status"],
        }
        if ra is None or rb is None or ra["status"] != "ok" or rb["status"] != "ok":
            row["verdict"] = "only in A" if rb is None else "only in B" if ra is None else "not measured in both"
            rows.append(row)
            continue
        basis = _basis(ra, rb)
        if a.backend != b.backend or basis is None:
            row["verdict"] = (
                f"not comparable ({a.backend} vs {b.backend})"
                if a.backend != b.backend
                else "not comparable (no common time)"
            )
            rows.append(row)
            continue
        ta, tb = _num(ra[basis]), _num(rb[basis])
        timed = basis == "latency_median_s"  # a profiled device time has no spread: never judged
        sa, sb = (_num(r.get("latency_spread_s")) if timed else None for r in (ra, rb))
        na, nb = (r.get("latency_n") if timed else None for r in (ra, rb))
        noisy = verdict.flag(ra.get("noisy")) or verdict.flag(rb.get("noisy"))
        judged, beyond = verdict.judge(ta, sa, na, tb, sb, nb, noisy)
        noise = max(sa, sb) if sa is not None and sb is not None else None
        change = (tb / ta - 1) * 100 if ta else None
        row.update(
            basis=basis,
            time_a_s=ta,
            time_b_s=tb,
            ratio_b_over_a=tb / ta if ta else None,
            change_pct=change,
            noise_s=noise,
            beyond_noise=beyond,
            verdict=judged,
        )
        rows.append(row)
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


def _html(head: list[str], table: pd.DataFrame, changes: pd.DataFrame) -> str:
    return page(
        "neuron-sweep compare",
        [
            "<h1>neuron-sweep: B against A</h1>",
            f"<pre>{html.escape(chr(10).join(head))}</pre>",
            "<h2>Workloads</h2>",
            html_table(table),
            "<h2>Metrics that changed beyond the timing noise</h2>",
            html_table(changes) if len(changes) else "<p>none</p>",
        ],
    )


def run(folder_a: Path, folder_b: Path, out: Path, fail_on_regression: float | None = None) -> tuple[list[str], int]:
    """Write compare.csv, compare_metrics.csv and compare.html into `out`; returns the lines to print and
    the exit code (1 when --fail-on-regression PCT and a workload is slower by more than PCT beyond noise)."""
    a, b = Run(folder_a), Run(folder_b)
    lines = header(a, b)
    table, changes = compare(a, b)
    out.mkdir(parents=True, exist_ok=True)
    for name, df in (("compare.csv", table), ("compare_metrics.csv", changes)):
        with replacing(out / name) as tmp:
            df.to_csv(tmp, index=False)
    with replacing(out / "compare.html") as tmp:
        tmp.write_text(_html(lines, table, changes))
    counts = table["verdict"].value_counts().to_dict() if len(table) else {}
    lines.append("workloads: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    judged = (
        table[table["beyond_noise"].fillna(False).astype(bool)]
        if "beyond_noise" in table
        else pd.DataFrame(columns=["workload_id", "verdict", "change_pct", "time_a_s", "time_b_s", "noise_s"])
    )
    for _, r in judged.sort_values("change_pct", ascending=False).iterrows():
        lines.append(
            f"  {r['verdict']:7} {r['change_pct']:+7.1f}%  {r['workload_id']}  "
            f"({r['time_a_s'] * 1e6:,.1f} -> {r['time_b_s'] * 1e6:,.1f} us, noise {r['noise_s'] * 1e6:,.1f} us)"
        )
    lines.append(f"wrote {out / 'compare.csv'}, {out / 'compare_metrics.csv'} and {out / 'compare.html'}")
    code = 0
    if fail_on_regression is not None and len(judged):
        worse = judged[(judged["verdict"] == "slower") & (judged["change_pct"] > fail_on_regression)]
        if len(worse):
            lines.append(
                f"regression: {len(worse)} workload(s) slower by more than {fail_on_regression}% beyond "
                f"noise (worst {worse['change_pct'].max():+.1f}%: "
                f"{worse.sort_values('change_pct').iloc[-1]['workload_id']})"
            )
            code = 1
    return lines, code
