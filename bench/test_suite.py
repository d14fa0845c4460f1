"""Benchmark: how long the README's test commands take, each against its budget on 2 cores.

    python bench/test_suite.py [--only full fast slow] [--anchor REV [--runs N]] [-- extra pytest args]

`full` is the README's `pytest` (budget 8 minutes), `fast` the inner loop `pytest -m "not workflow"`
(budget 60 s), `slow` (only when asked) the long end-to-end runs that `pytest` deselects and CI runs after
it (budget 30 minutes, so that CI stays well under an hour). A benchmark, not a timed test: it runs each
tier as a user would, from the repository root, prints one JSON line per tier, and exits 1 when a tier
fails or runs over its budget.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIERS = {"full": ([], 480.0), "fast": (["-m", "not workflow"], 60.0), "slow": (["--slow", "-m", "slow"], 1800.0)}


def timed(name: str, extra: list[str], tree: Path = REPO) -> tuple[float, subprocess.CompletedProcess]:
    """The tier's wall time in `tree` (another tree's package first on the path)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[name][0], *extra]
    env = {**os.environ, "PYTHONPATH": str(tree / "workflow")} if tree != REPO else None
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, proc


def paired(name: str, extra: list[str], anchor: str, runs: int) -> bool:
    """The tier here and at `anchor` in turn, `runs` times each: medians and the median ratio; False when
    a run of either failed."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "anchor"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), anchor], cwd=REPO, check=True)
        try:
            runs_ = [(timed(name, extra), timed(name, extra, tree)) for _ in range(runs)]
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
    pairs = [(a[0], b[0]) for a, b in runs_]
    passed = all(a[1].returncode == 0 and b[1].returncode == 0 for a, b in runs_)
    here, there = (statistics.median(p[i] for p in pairs) for i in (0, 1))
    ratio = statistics.median(a / b for a, b in pairs)
    print(
        json.dumps(
            {
                "bench": "test_suite",
                "tier": name,
                "anchor": anchor,
                "runs": runs,
                "wall_s": round(here, 1),
                "anchor_wall_s": round(there, 1),
                "ratio": round(ratio, 3),
            }
        )
    )
    print(f"{name}: {here:.0f} s here, {there:.0f} s at {anchor} (median of {runs} pairs: {ratio:.2f}x)")
    return passed


def run_tier(name: str, extra: list[str]) -> tuple[dict, bool]:
    args, budget = TIERS[name]
    wall, proc = timed(name, extra)
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
    ap.add_argument("--anchor", help="a git revision: time each tier against that tree's, in turn")
    ap.add_argument("--runs", type=int, default=3, help="pairs with --anchor (default 3)")
    ap.add_argument("pytest_args", nargs="*")
    args = ap.parse_args()
    if args.anchor:
        return 0 if all(paired(name, args.pytest_args, args.anchor, args.runs) for name in args.only) else 1
    ok = [run_tier(name, args.pytest_args)[1] for name in args.only]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
