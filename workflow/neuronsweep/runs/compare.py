"""`neuronsweep compare RUN_A RUN_B`: did the new SDK, compiler flag or kernel make it faster or slower?

Two finished runs (results/<run> folders) are matched by workload id. For each workload measured in
both: the time of A and B on the same basis (framework median where both have it, else the profiled
device time), their ratio, and the verdict of analysis/verdict.py, the rule the within-run ranking
uses too: a test on processes, or not judged (one process a side, a device time with no spread, a
test that could not see a change the size of the gate). Two cpu runs are timed again here by default,
both sides in alternation inside each fresh process (runs/interleave.py): stored timings of two runs
differ by the machine's moment as well as by their code. Every other numeric metric that
that differs is listed too, by what backs it (metric_kind): a count or size of the program, a rate
that follows the time's verdict, or one measurement a side, shown and not judged. The
toolchain versions and the config differences of A and B come first, so "SDK 2.27 vs 2.28" or
"optlevel 2 vs 3" is visible before any number. Times are compared only when both runs used the same backend.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.atomic import read_json, replacing
from neuronsweep.config.backends import BACKENDS
from neuronsweep.errors import UserError
from neuronsweep.report.page import human
from neuronsweep.runs import compare_page, interleave, profile_diff
from neuronsweep.runs.compare_page import ONCE, PROGRAM, TIME
from neuronsweep.store import layout
from neuronsweep.store.records import Timing, timing

NOT_METRICS = {  # bookkeeping of a run, or the comparison's own inputs: never a metric that changed
    "latency_n",
    "schema_version",
    "threads",
    "rank_in_group",
    "x_of_best",
    "significant",
    "latency_spread_s",
    "latency_iqr_s",
    "latency_rel_spread",
    "latency_min_s",
    "time_s",
    "noisy",
    "captured_under_load",
    "cache_hit",
}
# rates and shares computed from the timed median: they move with the time, whose verdict they follow
WITH_THE_TIME = {
    "achieved_flops_per_s",
    "roofline_efficiency_pct",
    "execute_median_s",
    "framework_overhead_s",
    "mfu_recomputed_pct",
    "mbu_recomputed_pct",
}


def metric_kind(metric: str) -> str:
    """What backs a difference of a summary column (compare_page's PROGRAM, ONCE or TIME; NOT_METRICS are
    none): a count or size of the program differs exactly (the programs differ); a measurement taken once
    a side (one profiled execution, one compile) is shown, not called a change, since nothing tests it; a
    rate from the time is listed where the time's test called it slower or faster."""
    if metric in WITH_THE_TIME:
        return TIME
    return ONCE if metric.endswith(("_s", "_pct", "_per_s")) or metric.startswith("max_") else PROGRAM


class Run:
    """One finished run folder: its plan, summary rows (one per workload), config and toolchains."""

    def __init__(self, folder: Path) -> None:
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
        self.workloads = layout.workloads_dir(self.folder, self.backend)

    def samples(self, wid: str) -> Timing | None:
        """The case's stored timing (samples and process medians), or None."""
        return timing(self.workloads / wid)

    def toolchains(self) -> dict[str, str]:
        """Package -> version(s), from the build records of this run's workloads."""
        seen: dict[str, set] = {}
        for path in self.workloads.glob("*/build/build.json"):
            try:
                chain = json.loads(path.read_text()).get("toolchain") or {}
            except (OSError, ValueError):
                continue
            for package, version in chain.items():
                seen.setdefault(package, set()).add(str(version))
        return {package: ", ".join(sorted(v)) for package, v in sorted(seen.items())}


def _flat(d: dict | None, prefix: str = "") -> dict:
    out = {}
    for key, value in (d or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, name + "."))
        else:
            out[name] = json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value
    return out


def config_differences(a: Run, b: Run) -> list[tuple[str, object, object]]:
    """The config keys whose values differ between the runs (or that one run does not record its config)."""
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


def _num(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if pd.isna(x) else x


def _basis(ra: dict | pd.Series, rb: dict | pd.Series) -> str | None:
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
    a: Run,
    b: Run,
    min_effect: float = verdict.MIN_EFFECT,
    timings: interleave.Pairs | None = None,
    gate: float | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per workload, one row per changed metric). The workloads timed on both sides are one
    family for the correction (analysis/verdict.py). `timings`: per workload id (A's Timing, B's
    Timing) taken again (runs/interleave.py), judged instead of the stored ones; `gate`: the change
    that matters (--fail-on-regression as a fraction), which a case's test must be able to see."""
    rows, changes = [], []
    family: list[tuple[dict[str, Any], tuple[Timing | None, Timing | None]]] = []
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
        if timed and wid in timings:
            again_a, again_b = timings[wid]
            family.append((row, (again_a, again_b)))
            ta, tb = statistics.median(again_a.samples), statistics.median(again_b.samples)
        else:
            family.append((row, (a.samples(wid) if timed else None, b.samples(wid) if timed else None)))
        row.update(
            basis=basis,
            timed="again, interleaved" if timed and wid in timings else "stored",
            time_a_s=ta,
            time_b_s=tb,
            ratio_b_over_a=tb / ta if ta and tb is not None else None,
            change_pct=(tb / ta - 1) * 100 if ta and tb is not None else None,
        )
        for metric in sorted(set(ra.index) & set(rb.index)):
            va, vb = _num(ra[metric]), _num(rb[metric])
            if metric in NOT_METRICS or metric == basis or va is None or vb is None or va == vb:
                continue
            change = {"workload_id": wid, "metric": metric, "kind": metric_kind(metric), "a": va, "b": vb}
            changes.append({**change, "change_pct": (vb / va - 1) * 100 if va else None})
    said_all = verdict.judge([pair for _, pair in family], min_effect=min_effect, gate=gate)
    for (row, _), said in zip(family, said_all):
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
            min_detectable_pct=None if said.detectable is None else 100 * said.detectable,
            beyond_noise=said.beyond,
            verdict=said.said,
        )
    table = pd.DataFrame(rows)
    changes_df = pd.DataFrame(changes, columns=["workload_id", "metric", "kind", "a", "b", "change_pct"])
    if len(changes_df):  # a rate from the time is listed only where the time was judged different
        beyond = set(
            table.loc[table.get("beyond_noise", pd.Series(dtype=bool)).fillna(False).astype(bool), "workload_id"]
        )
        changes_df = changes_df[(changes_df["kind"] != TIME) | changes_df["workload_id"].isin(beyond)]
    return table, changes_df.reset_index(drop=True)


def unseen(timings: interleave.Pairs, gate: float, min_effect: float = verdict.MIN_EFFECT) -> list[str]:
    """The workloads of `timings` (wid -> (A, B)) whose test could not yet see a change the size of `gate`."""
    said = verdict.judge(list(timings.values()), min_effect=min_effect, gate=gate)
    return [wid for wid, v in zip(timings, said) if v.said.startswith(verdict.BLIND)]


def header(a: Run, b: Run) -> list[str]:
    """compare's first lines: the runs, their backends, and their toolchains side by side."""
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


def retime_by_default(a: Run, b: Run) -> tuple[interleave.Pairs | None, list[str]]:
    """Both cpu runs' programs timed again in turns, interleave.DEFAULT_ROUNDS a side: the mode that
    met the goals (docs/comparing-runs.md). Stored timings of two runs differ by the machine's moment
    as well as by the code, even with rounds in processes (two default runs four minutes apart: 11 and
    18 % on two cases whose three processes a side agreed within 2 %). Where it cannot be done (a
    run off cpu, a program missing, another torch), the stored timings stand and the line says why."""
    wids = timed_in_both(a, b)
    if not wids:
        return None, []
    elsewhere = next((run for run in (a, b) if not BACKENDS[run.backend].retimed_here), None)
    if elsewhere is not None:  # its programs need their device; the stored timings are what there is
        return None, [
            f"timings: the stored ones ({elsewhere.folder} ran on {elsewhere.backend}; only cpu runs are timed again)"
        ]
    rounds = interleave.DEFAULT_ROUNDS
    try:
        timings = interleave.retime(a, b, wids, rounds)
    except UserError as exc:
        return None, [f"not timed again ({exc}); the stored timings are judged where they can be"]
    return timings, [
        f"timings: both runs' programs timed again here for the {len(wids)} workload(s) timed in both, "
        f"{rounds} rounds a side,",
        "  each round a fresh process timing A and B in alternation (A's capture settings); --stored judges the "
        "stored ones",
    ]


EXPLAINS_WITHIN = 2.0  # an op explains a change when its delta is within this factor of it, same sign


def explanation(row: pd.Series, ops: pd.DataFrame) -> str:
    """The op that explains a judged change, named only when its delta agrees with the change in sign
    and within EXPLAINS_WITHIN in size: both profiles are one execution each, and an op delta 50x the
    timed change (or of the other sign) explains nothing about it."""
    top = ops[ops["workload_id"] == row["workload_id"]].head(1)
    if not len(top):
        return "inside: no profile tables on both sides"
    t = top.iloc[0]
    change_ns = (row["ratio_b_over_a"] - 1) * row["time_a_s"] * 1e9
    share = t["delta_ns"] / change_ns if change_ns else float("nan")
    where = f"{t['dimension']} {t['key']} {human('delta_ns', t['delta_ns'])}"
    if 1 / EXPLAINS_WITHIN <= share <= EXPLAINS_WITHIN:
        return f"most of it: {where}"
    return (
        f"no op explains it: the largest delta ({where}, one profiled execution a side) is not within "
        f"{EXPLAINS_WITHIN:g}x of the change ({human('delta_ns', change_ns)}); compare_ops.csv has every row"
    )


def drift(table: pd.DataFrame, min_effect_pct: float) -> tuple[int, int, float] | None:
    """(moved the same way, compared, median change %) when at least 3 workloads were compared and
    at least 80 % moved the same way past the minimum effect: the signature of the machine's moment
    (docs/comparing-runs.md), not of a change of code, which moves the workloads it touches."""
    pct = table["change_pct"].dropna() if "change_pct" in table else pd.Series(dtype=float)
    if len(pct) < 3:
        return None
    up, down = int((pct >= min_effect_pct).sum()), int((pct <= -min_effect_pct).sum())
    same = max(up, down)
    return (same, len(pct), float(pct.median())) if same >= 0.8 * len(pct) else None


def judging_command(a: Run, b: Run) -> str:
    """The one command that would judge what one process a side cannot."""
    if BACKENDS[a.backend].retimed_here and BACKENDS[b.backend].retimed_here:
        return f"neuronsweep compare {a.folder} {b.folder} --interleaved {interleave.DEFAULT_ROUNDS}"
    return (  # neuron and xla time each round in a process of its own when asked
        "run both sweeps again with capture.rounds_in_processes: true (each of the repeats rounds a process of "
        "its own, on the device for neuron; collectives excepted), then compare them"
    )


def hints(a: Run, b: Run, table: pd.DataFrame, min_effect_pct: float, retimed: bool) -> list[str]:
    """One line each: what was not judged and the one command that would judge it; a drift of the
    whole run."""
    lines = []
    one = int((table["verdict"] == verdict.ONE_PROCESS).sum()) if len(table) else 0
    if one:
        lines.append(
            f"not judged: {one} workload(s) timed in one process a side (its samples test that process, not the "
            f"code; ratios only). To judge them: {judging_command(a, b)}"
        )
    moved = drift(table, min_effect_pct)
    if moved and not retimed:
        same, n, median = moved
        lines.append(
            f"drift: {same} of {n} workloads moved the same way (median {median:+.1f}%), the signature of the "
            f"machine's moment rather than of code. Time both again in turns: {judging_command(a, b)}"
        )
    return lines


def run(
    folder_a: Path,
    folder_b: Path,
    out: Path,
    fail_on_regression: float | None = None,
    min_effect_pct: float = verdict.MIN_EFFECT * 100,
    interleaved: int | None = None,
    stored: bool = False,
    budget_s: float = interleave.DEFAULT_BUDGET_S,
) -> tuple[list[str], int]:
    """Write compare.csv, compare_metrics.csv, compare_ops.csv and compare.html into `out`; returns the
    lines to print and the exit code (1 when --fail-on-regression PCT and a workload fails the gate:
    analysis/verdict.py's fails_gate). `interleaved`: rounds a side to time both runs' programs again
    in turns here (runs/interleave.py) instead of judging their stored timings. Without it, two cpu
    runs with their programs are timed again so, 8 rounds a side; `stored`: never (one process a side
    is then not judged); `budget_s`: with a gate, the seconds all timing may take, further rounds going
    to the cases whose test could not see the gate (interleave.more_rounds)."""
    a, b = Run(folder_a), Run(folder_b)
    lines = header(a, b)
    gate = None if fail_on_regression is None else fail_on_regression / 100
    timings = _timings(a, b, lines, interleaved, stored, gate, min_effect_pct, budget_s)
    table, changes = compare(a, b, min_effect=min_effect_pct / 100, timings=timings, gate=gate)
    ops = _inside(a, b, table)
    out.mkdir(parents=True, exist_ok=True)
    for name, df in (("compare.csv", table), ("compare_metrics.csv", changes), ("compare_ops.csv", ops)):
        with replacing(out / name) as tmp:
            df.to_csv(tmp, index=False)
    notes = hints(a, b, table, min_effect_pct, retimed=timings is not None)
    with replacing(out / "compare.html") as tmp:
        tmp.write_text(compare_page.render(lines, notes, table, changes, ops, fail_on_regression, min_effect_pct))
    judged = table[table["beyond_noise"].fillna(False).astype(bool)] if "beyond_noise" in table else table.iloc[:0]
    lines += _verdict_lines(table, judged, ops, changes) + notes
    lines.append(f"wrote {out / 'compare.csv'}, compare_metrics.csv, compare_ops.csv and compare.html")
    if fail_on_regression is None:
        return lines, 0
    said, code = _gate(table, judged, fail_on_regression)
    return lines + said, code


def _timings(
    a: Run,
    b: Run,
    lines: list[str],
    interleaved: int | None,
    stored: bool,
    gate: float | None,
    min_effect_pct: float,
    budget_s: float,
) -> interleave.Pairs | None:
    """The timings compare judges (None: the stored ones), the lines saying how they were taken added to `lines`:
    both runs' programs timed again `interleaved` rounds a side, or by default where they can be, and more rounds
    where the gate needs them, within the budget."""
    started = time.monotonic()
    timings = None
    if interleaved is not None:
        wids = timed_in_both(a, b)
        timings = interleave.retime(a, b, wids, interleaved)
        lines += [
            f"timings: taken again on this host for the {len(wids)} workload(s) timed in both, "
            f"{interleaved} rounds a side,",
            "  each round a fresh process timing A and B in alternation (A's capture settings); the stored ones "
            "are not judged",
        ]
    elif not stored:
        timings, said = retime_by_default(a, b)
        lines += said
    if timings and gate is not None:  # rounds where the gate needs them, within the budget
        blind = lambda now: unseen(now, gate, min_effect_pct / 100)  # noqa: E731
        lines += interleave.more_rounds(a, b, timings, blind, budget_s, time.monotonic() - started)
    return timings


def _verdict_lines(table: pd.DataFrame, judged: pd.DataFrame, ops: pd.DataFrame, changes: pd.DataFrame) -> list[str]:
    """The count of each verdict, then each change beyond noise with its interval, what changed inside and
    which of its performance bounds moved (a neuron case: the gap a kernel edit or a tune closed)."""
    said = table["verdict"] if len(table) else pd.Series(dtype=str)
    blind_rows = said.str.startswith(verdict.BLIND)
    counts = said[~blind_rows].value_counts().to_dict()
    if blind_rows.any():  # one count, with the range of what those tests could show
        shown = table.loc[blind_rows, "min_detectable_pct"]
        over = (
            f"{shown.min():.0f}" if round(shown.min()) == round(shown.max()) else f"{shown.min():.0f}-{shown.max():.0f}"
        )
        counts[f"{verdict.BLIND} {over} % (wider than the gate)"] = int(blind_rows.sum())
    lines = ["workloads: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))]
    for _, r in (judged.sort_values("change_pct", ascending=False) if len(judged) else judged).iterrows():
        lines.append(
            f"  {r['verdict']:7} {r['change_pct']:+7.1f}%  {r['workload_id']}  ({human('time_s', r['time_a_s'])} -> "
            f"{human('time_s', r['time_b_s'])}, 95% CI of B/A {r['ratio_ci_low']:.3f}..{r['ratio_ci_high']:.3f}, "
            f"Holm p {r['p_holm']:.2g}, {r['n_a']:.0f} vs {r['n_b']:.0f} processes)"
        )
        lines.append("          " + explanation(r, ops))
        moved = compare_page.bounds_moved(changes, r["workload_id"])
        if moved:
            lines.append("          " + moved)
    return lines


def _gate(table: pd.DataFrame, judged: pd.DataFrame, fail_on_regression: float) -> tuple[list[str], int]:
    """--fail-on-regression PCT: the lines on what it found and the exit code (1: a judged workload regressed)."""
    lines, code = [], 0
    worse = judged.iloc[:0]
    if len(judged):
        fails = [
            verdict.fails_gate(v, low, fail_on_regression) for v, low in zip(judged["verdict"], judged["ratio_ci_low"])
        ]
        worse = judged[fails]
    if len(worse):
        lines.append(
            f"regression: {len(worse)} workload(s) slower by more than {fail_on_regression}% with 95% "
            f"confidence (worst {worse['change_pct'].max():+.1f}%: "
            f"{worse.sort_values('change_pct').iloc[-1]['workload_id']})"
        )
        code = 1
    unjudged = int((table["verdict"] == verdict.ONE_PROCESS).sum()) if len(table) else 0
    if unjudged:
        lines.append(
            f"gate: {unjudged} workload(s) timed in one process a side were not judged, so not gated"
            + ("" if code else "; no judged workload regressed")
        )
    return lines, code
