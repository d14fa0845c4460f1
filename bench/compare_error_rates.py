"""Benchmark: how often `neuronsweep compare` raises a false alarm, how often it finds a real change, and
what each case's test could see.

    python bench/compare_error_rates.py [--runs 7] [--config config/config.yaml] [--effect 10] [--gate 5]
    python bench/compare_error_rates.py --stored --config config/examples/regression.yaml

Runs the sweep RUNS times back to back (one compile cache, so only the first run compiles), then
judges every pair of runs as `neuronsweep compare --fail-on-regression GATE` does by default: both runs'
programs timed again here, 8 fresh processes each timing A and B in alternation (runs/interleave.py),
more rounds for the cases whose test could not yet see the gate, within compare's budget:
- A/A: every pair as it is. Goals: at most 1 pair in 20 fails the gate; in every pair at least two
  thirds of the cases timed in both are judged (their minimum detectable change within the gate).
- A/B: every pair again, with B's rounds of every other workload (a known half, by id) made EFFECT %
  longer: a change of exactly known size on top of the noise of real paired rounds, which is what a
  slower build of those programs looks like to the test. Goals: `slower` in >= 90 % of the cases it
  touches, and nothing called different that it does not touch.
- The minimum detectable change per workload (median over the A/A pairs), beside its median time:
  small programs are noisier than large ones.
With --stored each pair is judged on the runs' stored timings (`compare --stored`; give a config
that times its rounds in processes, or every case is `not judged`), A/B on a copy of B whose timed
samples and round medians are EFFECT % longer.

Prints one JSON line and the figures beside their goals; exits 1 when a goal is not met. Runs in a
temporary directory, so it never touches results/ or your compile cache.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
# analysis/verdict.JUDGED: a test made that could see the gate (this script imports the package only inside its
# functions, so that --help needs nothing installed)
JUDGED = ["unchanged (within noise)", "unchanged (within the minimum effect)", "slower", "faster"]
BIN = Path(sys.executable).parent


def sweep(work: Path, config: Path, run: str) -> Path:
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "--directory", str(work)]
    cmd += ["--configfile", str(config), "--config", f"run={run}", f"cache_dir={work}/cache", "--cores", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the sweep {run} failed:\n{proc.stderr[-3000:]}")
    return work / "results" / run


def slowed(run: Path, dest: Path, factor: float) -> Path:
    """A copy of `run` whose every timed sample (and round median, and median) is `factor` times longer."""
    shutil.copytree(run, dest)
    for path in dest.glob("*/workloads/*/capture/capture.json"):
        record = json.loads(path.read_text())
        latency = record.get("latency") or {}
        for key in ("samples_s", "round_medians_s"):
            if latency.get(key):
                latency[key] = [s * factor for s in latency[key]]
        path.write_text(json.dumps(record))
    summary = pd.read_csv(dest / "summary.csv")
    for column in ("latency_median_s", "latency_spread_s", "latency_iqr_s", "latency_min_s", "time_s"):
        if column in summary:
            summary[column] = summary[column] * factor
    summary.to_csv(dest / "summary.csv", index=False)
    return dest


def compare(a: Path, b: Path, out: Path, gate: float) -> tuple[int, pd.DataFrame]:
    proc = subprocess.run(
        [str(BIN / "neuronsweep"), "compare", str(a), str(b), "--out", str(out), "--fail-on-regression", str(gate)]
        + ["--stored"],
        capture_output=True,
        text=True,
    )
    if proc.returncode not in (0, 1):
        sys.exit(f"compare failed:\n{proc.stderr}")
    return proc.returncode, pd.read_csv(out / "compare.csv")


def interleaved_pair(a: Path, b: Path, rounds: int, seed: int, gate: float, effect: float) -> dict:
    """One pair judged on rounds taken again as compare takes them (paired, more where the gate needs
    them): the A/A table, then A/B with B's rounds of every other workload slowed by exactly `effect` %."""
    from neuronsweep.analysis import verdict
    from neuronsweep.runs import compare, interleave

    ra, rb = compare.Run(a), compare.Run(b)
    started = time.monotonic()
    timings = interleave.retime(ra, rb, compare.timed_in_both(ra, rb), rounds, seed=seed, say=lambda _: None)

    more = interleave.more_rounds(
        ra,
        rb,
        timings,
        lambda now: compare.unseen(now, gate / 100),
        interleave.DEFAULT_BUDGET_S,
        time.monotonic() - started,
        say=lambda _: None,
    )
    aa, _ = compare.compare(ra, rb, timings=timings, gate=gate / 100)
    touched = sorted(timings)[::2]
    slowed_b = {w: (ta, tb.scaled(1 + effect / 100) if w in touched else tb) for w, (ta, tb) in timings.items()}
    ab, _ = compare.compare(ra, rb, timings=slowed_b, gate=gate / 100)
    return {
        "rounds": {w: {"a": ta.rounds, "b": tb.rounds} for w, (ta, tb) in timings.items()},
        "more_rounds": more,
        "timing_s": round(time.monotonic() - started, 1),
        "aa": aa,
        "aa_failed": int(any(verdict.fails_gate(v, low, gate) for v, low in zip(aa["verdict"], aa["ratio_ci_low"]))),
        "ab": ab.assign(touched=ab["workload_id"].isin(touched)),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    ap.add_argument("--effect", type=float, default=10.0, help="the injected change, percent")
    ap.add_argument("--gate", type=float, default=5.0, help="--fail-on-regression of the A/A pairs")
    ap.add_argument(
        "--interleaved",
        type=int,
        metavar="N",
        default=8,
        help="paired rounds timed again before any more (compare's default: 8)",
    )
    ap.add_argument("--stored", action="store_true", help="judge the stored timings (compare --stored)")
    ap.add_argument("--keep", type=Path, help="keep the runs and comparisons in this folder (default: a temporary one)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep.resolve() if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        runs = [sweep(work, args.config.resolve(), f"aa{i}") for i in range(args.runs)]
        aa_failed = aa_alarms = ab_found = ab_touched = ab_false = ab_untouched = 0
        judged_shares, detectable, timing_s = [], [], []
        for i, (a, b) in enumerate(itertools.combinations(runs, 2)):
            if not args.stored:
                got = interleaved_pair(a, b, args.interleaved, i, args.gate, args.effect)
                code, table, ab = got["aa_failed"], got["aa"], got["ab"]
                timing_s.append(got["timing_s"])
                for name in ("aa", "ab"):
                    got[name].to_csv(work / f"interleaved-{name}{i}.csv", index=False)
                (work / f"interleaved-rounds{i}.json").write_text(json.dumps(got["rounds"]))
            else:
                code, table = compare(a, b, work / f"cmp-aa{i}", args.gate)
                _, ab = compare(a, slowed(b, work / f"slow{i}", 1 + args.effect / 100), work / f"cmp-ab{i}", args.gate)
                ab = ab.assign(touched=True)
            timed = table[table["p_value"].notna()] if "p_value" in table else table.iloc[:0]
            judged = timed["verdict"].isin(JUDGED)
            judged_shares.append(judged.mean() if len(timed) else 0.0)
            detectable.append(timed[["workload_id", "time_a_s", "min_detectable_pct"]])
            aa_failed += code
            aa_alarms += int(timed["verdict"].isin(["slower", "faster"]).sum())
            ab = ab[ab["p_value"].notna()] if "p_value" in ab else ab.iloc[:0]
            ab_touched += int(ab["touched"].sum())
            ab_found += int((ab["touched"] & (ab["verdict"] == "slower")).sum())
            ab_untouched += int((~ab["touched"]).sum())
            ab_false += int((~ab["touched"] & ab["verdict"].isin(["slower", "faster"])).sum())
    pairs = args.runs * (args.runs - 1) // 2
    detected = ab_found / ab_touched if ab_touched else 0.0
    per_workload = (
        pd.concat(detectable).groupby("workload_id").median().sort_values("time_a_s")
        if detectable
        else pd.DataFrame(columns=["time_a_s", "min_detectable_pct"])
    )
    result = {
        "bench": "compare_error_rates",
        "config": str(args.config),
        "runs": args.runs,
        "mode": "stored"
        if args.stored
        else f"timed again, {args.interleaved} paired rounds and more within the budget",
        "pairs": pairs,
        "aa_pairs_failing_gate": aa_failed,
        "aa_gate_pct": args.gate,
        "aa_share_judged_min": round(min(judged_shares), 3) if judged_shares else None,
        "aa_share_judged_median": round(float(pd.Series(judged_shares).median()), 3) if judged_shares else None,
        "aa_cases_called_slower_or_faster": aa_alarms,
        "ab_effect_pct": args.effect,
        "ab_cases_touched": ab_touched,
        "ab_detected": ab_found,
        "ab_detection_rate": round(detected, 3),
        "ab_cases_untouched": ab_untouched,
        "ab_untouched_called_different": ab_false,
        "timing_s_per_pair_median": round(float(pd.Series(timing_s).median()), 1) if timing_s else None,
        "min_detectable_pct_by_workload": {
            w: [round(float(r.time_a_s), 6), round(float(r.min_detectable_pct), 2)] for w, r in per_workload.iterrows()
        },
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(result))
    print(
        f"A/A: {aa_failed} of {pairs} pairs fail --fail-on-regression {args.gate:g} (goal: at most 1 in 20); "
        f"share of the timed cases judged: at least {100 * (result['aa_share_judged_min'] or 0):.0f} % in every pair "
        f"(goal >= 67 %); {aa_alarms} cases called slower or faster at the 2 % minimum effect"
    )
    print(
        f"A/B (+{args.effect:g} % on half the workloads): detected in {ab_found} of {ab_touched} cases touched = "
        f"{100 * detected:.1f} % (goal >= 90 %); {ab_false} of {ab_untouched} untouched called different (goal 0)"
    )
    for w, r in per_workload.iterrows():
        print(f"  {w:42} {1e3 * r.time_a_s:9.3f} ms   could show {r.min_detectable_pct:5.1f} %")
    ok = aa_failed <= max(1, pairs // 20) and (result["aa_share_judged_min"] or 0) >= 2 / 3
    return 0 if ok and detected >= 0.90 and ab_false == 0 else 1


def binomial_interval(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95 % interval of a share of k in n."""
    from scipy.stats import binomtest

    if not n:
        return 0.0, 1.0
    ci = binomtest(k, n).proportion_ci(0.95)
    return float(ci.low), float(ci.high)


if __name__ == "__main__":
    sys.exit(main())
