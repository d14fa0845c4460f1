"""Benchmark: how long the README's test commands take, each against its budget on 2 cores.

    python bench/test_suite.py [--only full fast slow] [-- extra pytest args]

`full` is the README's `pytest` (budget 8 minutes), `fast` the inner loop `pytest -m "not workflow"`
(budget 60 s), `slow` (only when asked) the long end-to-end runs that `pytest` deselects and CI runs after
it (budget 30 minutes, so that CI stays well under an hour). A benchmark, not a timed test: it runs each
tier as a user would, from the repository root, prints one JSON line per tier, and exits 1 when a tier
fails or runs over its budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIERS = {"full": ([], 480.0), "fast": (["-m", "not workflow"], 60.0), "slow": (["--slow", "-m", "slow"], 1800.0)}


def run_tier(name: str, extra: list[str]) -> tuple[dict, bool]:
    args, budget = TIERS[name]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    closing = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    result = {
        "bench": "test_suite",
        "tier": name,
        "command": " ".join(["pytest", *args]),
        "wall_s": round(wall, 1),
        "budget_s": budget,
        "exit": proc.returncode,
        "pytest": closing,
    }
    print(json.dumps(result))
    print(f"{name}: {wall:.0f} s wall ({closing}); budget {budget:.0f} s: {'met' if wall <= budget else 'NOT met'}")
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
    return result, proc.returncode == 0 and wall <= budget


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="+", choices=list(TIERS), default=["full", "fast"])
    ap.add_argument("pytest_args", nargs="*")
    args = ap.parse_args()
    ok = [run_tier(name, args.pytest_args)[1] for name in args.only]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
