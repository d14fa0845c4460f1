"""Benchmark: the default sweep (config/config.yaml) from a cold compile cache: wall time, peak RSS, and
what a case costs beyond the time it measures, with warm start (the case stages forked from one process
that imported torch: neuronsweep/warmstart.py) beside the same sweep without it, in the same run.

Targets: under 5 minutes on 2 cores (issue: foundation); a case's overhead at most half of what it is
without warm start (issue: autotune); at most 3x the wall time of a plain in-process script measuring the same
workloads (bench/plain_sweep.py, issue 72). Exits 1 when a target is missed.
    python bench/default_sweep.py [--cores 2] [--budget-s 300] [--no-anchor]
Runs in temporary working directories, so it never touches results/ or your compile cache.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLAN = Path(tempfile.gettempdir()) / "neuronsweep-bench-default-plan.json"  # the warm sweep's, for the anchor


def sweep(cores: int, warm: bool) -> dict:
    """One cold-cache run of the default sweep; its wall time and the time its cases spent measuring."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(Path(sys.executable).parent / "snakemake"),
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            tmp,
            "--configfile",
            str(REPO / "config" / "config.yaml"),
            "--config",
            f"cache_dir={tmp}/cache",
            "--cores",
            str(cores),
        ]
        env = {**os.environ, "NEURONSWEEP_WARM_START": "1" if warm else "0"}
        t0, started = time.perf_counter(), time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
            raise SystemExit(1)
        run = Path(tmp) / "results" / "default"
        rows = list(csv.DictReader((run / "summary.csv").open()))
        PLAN.write_text((run / "plan.json").read_text())  # the anchor measures the same workloads
        captures = list(run.glob("*/workloads/*/capture/capture.json"))
        # what a case spends doing its work: the timed executions (median x count) and the build's compile
        measured = sum(_measured_s(json.loads(p.read_text())) for p in captures)
        compiled = sum(
            json.loads(p.read_text()).get("compile_s") or 0.0 for p in run.glob("*/workloads/*/build/build.json")
        )
        spans = timeline(run, started, wall)
    cases = len(captures)
    return {
        "timeline_s": spans,
        "warm_start": warm,
        "wall_s": round(wall, 1),
        "scenarios": len(rows),
        "cases": cases,
        "measured_s": round(measured, 2),
        "compile_s": round(compiled, 2),
        # the core-seconds the run had, less those its cases spent measuring and compiling, per case
        "overhead_per_case_s": round((wall * cores - measured - compiled) / max(cases, 1), 2),
    }


def timeline(run: Path, started: float, wall: float) -> dict:
    """Where the sweep's wall time went, from its cases' stage records (each has its start and its own wall):
    before the first case's record (Snakemake's start, the config, the host probe, the plan, the DAG), each
    stage's records summed, the time between the first record's start and the last one's end that no record
    holds (the jobs' own start and finish, the calibration), and after the last record (aggregate, history,
    report)."""
    records = []
    for path in [*run.glob("*/workloads/*/*/*.json"), *run.glob("*/workloads/*/metrics.json")]:
        data = json.loads(path.read_text())
        stamp = data.get("provenance", data) if isinstance(data, dict) else {}
        if isinstance(stamp, dict) and "started_unix" in stamp and "wall_s" in stamp:
            records.append((stamp["started_unix"], stamp["wall_s"], stamp.get("stage") or path.parent.name))
    first, last = min(r[0] for r in records), max(r[0] + r[1] for r in records)
    stages: dict[str, float] = {}
    for _, seconds, stage in records:
        stages[stage] = stages.get(stage, 0.0) + seconds
    covered = sum(seconds for _, seconds, _ in records)  # two jobs at once count twice: a lower bound of the rest
    return {
        "before_first_job": round(first - started, 1),
        **{f"{stage}_records": round(v, 1) for stage, v in sorted(stages.items())},
        "between_records": round(max(0.0, (last - first) - covered), 1),
        "after_last_record": round(started + wall - last, 1),
    }


def plain(plan: Path) -> dict:
    """The anchor: the workloads the sweep ran (its plan.json), measured by a plain in-process script
    (bench/plain_sweep.py)."""
    t0 = time.perf_counter()
    argv = [sys.executable, str(REPO / "bench" / "plain_sweep.py"), "--plan", str(plan)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        raise SystemExit(1)
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "wall_s": round(time.perf_counter() - t0, 1)}


def _measured_s(capture: dict) -> float:
    """The executions a capture runs (warm-up, timed, profiled) at its median latency."""
    latency, settings = capture.get("latency") or {}, capture["settings"]
    runs = settings["warmup"] + (latency.get("n") or 0) + settings["num_exec"]
    return (latency.get("median_s") or 0.0) * runs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--no-anchor", action="store_true", help="skip the run without warm start")
    args = ap.parse_args()
    runs = [sweep(args.cores, warm=True)]
    anchor = plain(PLAN)
    if not args.no_anchor:
        runs.append(sweep(args.cores, warm=False))
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    for run in runs:
        print(json.dumps({**run, "cores": args.cores, "budget_s": args.budget_s}))
    ok = runs[0]["wall_s"] <= args.budget_s
    line = f"default sweep, cold cache, --cores {args.cores}: {runs[0]['wall_s']} s wall"
    if len(runs) == 2:
        ratio = runs[0]["overhead_per_case_s"] / runs[1]["overhead_per_case_s"]
        ok = ok and ratio <= 0.5
        line += (
            f", {runs[0]['overhead_per_case_s']} s of overhead a case (core-seconds) against "
            f"{runs[1]['overhead_per_case_s']} s without warm start ({runs[1]['wall_s']} s wall): {ratio:.2f}x"
            " (goal <= 0.5x)"
        )
    over = runs[0]["wall_s"] / anchor["wall_s"]
    print(json.dumps(anchor))
    line += (
        f"; {over:.1f}x the plain script's {anchor['wall_s']} s for the same {anchor['cases']} workloads (goal <= 3x)"
    )
    print(f"{line}; peak RSS of one process {peak_mb:.0f} MB")
    return 0 if ok and over <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
