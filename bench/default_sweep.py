"""Benchmark: the default sweep (config/config.yaml) from a cold compile cache, wall time and peak RSS.

Target (issue: foundation): under 5 minutes on 2 cores. Exits 1 when over budget.
    python bench/default_sweep.py [--cores 1] [--budget-s 300]
Runs in a temporary working directory, so it never touches results/ or your compile cache.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=300.0)
    args = ap.parse_args()
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
            str(args.cores),
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        rows = (
            (Path(tmp) / "results" / "default" / "summary.csv").read_text().count("\n") - 1
            if proc.returncode == 0
            else 0
        )
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"default sweep, cold cache, --cores {args.cores}: {wall:.1f} s wall, {rows} scenarios, "
        f"peak RSS of one process {peak_mb:.0f} MB (budget {args.budget_s:.0f} s)"
    )
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        return 1
    return 0 if wall <= args.budget_s else 1


if __name__ == "__main__":
    sys.exit(main())
