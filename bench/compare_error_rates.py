"""Benchmark: how often `neuronsweep compare` raises a false alarm, and how often it finds a real change.

    python bench/compare_error_rates.py [--runs 7] [--config config/examples/smoke.yaml] [--effect 10]
    python bench/compare_error_rates.py --stored --config config/examples/regression.yaml

Runs the sweep RUNS times back to back (one compile cache, so only the first run compiles), then
judges every pair of runs as `neuronsweep compare` does by default: both runs' programs timed again
here, 8 rounds a side in turns (runs/interleave.py; --interleaved N for another N):
- A/A: every pair as it is, with `--fail-on-regression 5`. Goal: at most 5 % of the pairs fail,
  printed with its binomial 95 % interval (7 runs make 21 pairs). Also counted: cases called slower
  or faster at all (at the default 2 % minimum effect).
- A/B: every pair again, B's new rounds multiplied by 1 + EFFECT/100: a change of exactly known size
  on top of the noise of real rounds, which is what a slower build looks like to the test. (A
  workload made to do 10 % more work does not take exactly 10 % longer on a CPU with caches, so it
  could not tell a miss from a smaller change.) Goal: detected (`slower`) in >= 90 % of the cases
  not flagged noisy.
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
    """One pair judged on rounds taken again in turns: the A/A figures, then A/B with B's rounds
    slowed by exactly `effect` percent."""
    from neuronsweep.analysis import verdict
    from neuronsweep.runs import compare, interleave

    ra, rb = compare.Run(a), compare.Run(b)
    timings = interleave.retime(ra, rb, compare.timed_in_both(ra, rb), rounds, seed=seed, say=lambda _: None)
    aa, _ = compare.compare(ra, rb, timings=timings)
    slowed_b = {w: (ta, tb.scaled(1 + effect / 100), noisy) for w, (ta, tb, noisy) in timings.items()}
    ab, _ = compare.compare(ra, rb, timings=slowed_b)
    return {
        "rounds": {w: {"a": ta.rounds, "b": tb.rounds, "noisy": noisy} for w, (ta, tb, noisy) in timings.items()},
        "aa": aa,
        "aa_failed": int(any(verdict.fails_gate(v, low, gate) for v, low in zip(aa["verdict"], aa["ratio_ci_low"]))),
        "ab": ab,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--config", type=Path, default=REPO / "config" / "examples" / "smoke.yaml")
    ap.add_argument("--effect", type=float, default=10.0, help="the injected change, percent")
    ap.add_argument("--gate", type=float, default=5.0, help="--fail-on-regression of the A/A pairs")
    ap.add_argument(
        "--interleaved",
        type=int,
        metavar="N",
        default=8,
        help="rounds a side timed again in turns (compare's default: 8)",
    )
    ap.add_argument("--stored", action="store_true", help="judge the stored timings (compare --stored)")
    ap.add_argument("--keep", type=Path, help="keep the runs and comparisons in this folder (default: a temporary one)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep.resolve() if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        runs = [sweep(work, args.config.resolve(), f"aa{i}") for i in range(args.runs)]
        aa_failed = aa_alarms = aa_cases = ab_found = ab_cases = ab_noisy = 0
        for i, (a, b) in enumerate(itertools.combinations(runs, 2)):
            if not args.stored:
                got = interleaved_pair(a, b, args.interleaved, i, args.gate, args.effect)
                code, table = got["aa_failed"], got["aa"]
                for name in ("aa", "ab"):
                    got[name].to_csv(work / f"interleaved-{name}{i}.csv", index=False)
                (work / f"interleaved-rounds{i}.json").write_text(json.dumps(got["rounds"]))
            else:
                code, table = compare(a, b, work / f"cmp-aa{i}", args.gate)
            judged = table[~table["verdict"].str.startswith(("not judged", "noisy", "not ", "only "))]
            aa_failed += code
            aa_cases += len(judged)
            aa_alarms += int(judged["verdict"].isin(["slower", "faster"]).sum())
            if not args.stored:
                table = got["ab"]
            else:
                slower = slowed(b, work / f"slow{i}", 1 + args.effect / 100)
                _, table = compare(a, slower, work / f"cmp-ab{i}", args.gate)
            noisy = table["verdict"] == "noisy: not judged"
            ab_noisy += int(noisy.sum())
            measured = table[~noisy & (table["status_a"] == "ok") & (table["status_b"] == "ok")]
            ab_cases += len(measured)
            ab_found += int((measured["verdict"] == "slower").sum())
    pairs = args.runs * (args.runs - 1) // 2
    detected = ab_found / ab_cases if ab_cases else 0.0
    result = {
        "bench": "compare_error_rates",
        "config": str(args.config),
        "runs": args.runs,
        "mode": "stored" if args.stored else f"timed again in turns, {args.interleaved} rounds a side",
        "pairs": pairs,
        "aa_pairs_failing_gate": aa_failed,
        "aa_gate_pct": args.gate,
        "aa_cases_judged": aa_cases,
        "aa_cases_called_slower_or_faster": aa_alarms,
        "ab_effect_pct": args.effect,
        "ab_cases_not_noisy": ab_cases,
        "ab_cases_noisy": ab_noisy,
        "ab_detected": ab_found,
        "ab_detection_rate": round(detected, 3),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    share = aa_failed / pairs if pairs else 0.0
    low, high = binomial_interval(aa_failed, pairs)
    result.update(aa_share_failing=round(share, 3), aa_share_interval=[round(low, 3), round(high, 3)])
    print(json.dumps(result))
    print(
        f"A/A: {aa_failed} of {pairs} pairs fail --fail-on-regression {args.gate:g} = {100 * share:.1f} % "
        f"(binomial 95 % interval {100 * low:.1f}-{100 * high:.1f} %; goal <= 5 %); "
        f"{aa_alarms} of {aa_cases} judged cases called slower or faster at the 2 % minimum effect"
    )
    print(
        f"A/B (+{args.effect:g} %): detected in {ab_found} of {ab_cases} cases not flagged noisy = "
        f"{100 * detected:.1f} % (goal >= 90 %); {ab_noisy} noisy"
    )
    return 0 if share <= 0.05 and detected >= 0.90 else 1


def binomial_interval(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95 % interval of a share of k in n."""
    from scipy.stats import binomtest

    if not n:
        return 0.0, 1.0
    ci = binomtest(k, n).proportion_ci(0.95)
    return float(ci.low), float(ci.high)


if __name__ == "__main__":
    sys.exit(main())
