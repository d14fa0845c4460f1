"""Benchmark: how long the README's test command (`pytest`) takes, wall time against a 10-minute budget.

    python bench/test_suite.py [--budget-s 600] [-- extra pytest args]
A benchmark, not a timed test: it runs the suite as a user would, from the repository root, and
exits 1 when the suite fails or runs over budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-s", type=float, default=600.0)
    ap.add_argument("pytest_args", nargs="*")
    args = ap.parse_args()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.pytest_args],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    closing = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    print(json.dumps({"bench": "test_suite", "wall_s": round(wall, 1), "budget_s": args.budget_s,
                      "exit": proc.returncode, "pytest": closing}))
    print(f"pytest: {wall:.0f} s wall ({closing}); budget {args.budget_s:.0f} s")
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
        return 1
    return 0 if wall <= args.budget_s else 1


if __name__ == "__main__":
    sys.exit(main())
