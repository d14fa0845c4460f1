"""Benchmark: what a search trial costs beyond the time it spends measuring (docs/autotune.md).

    python bench/search_trial_cost.py [--configs 9] [--full 3]

config/examples/kernels/gelu_mm.py's blocked matmul (256 x 1024 x 256) at CONFIGS block sizes, in a temporary directory:
- anchor: kernel_tuner's way, one in-process loop timing each configuration (2 warm-up calls and 5
  timed ones, as the screen takes), its wall time and the time spent in the timed calls;
- screen: halving's cheap rung (search/driver.py ParamSearch.screen): every configuration in one fresh
  process, plus the plan's look at the function. Goal: at most 1 s a trial beyond the time measured;
- full: FULL configurations as ordinary cases of the workflow (one Snakemake call: plan, build,
  capture with its profile, view, extract, aggregate, report), the cost a trial has at the full rung
  and in the other strategies, per trial.

Prints one JSON line and the figures beside their goal; exits 1 when the screen misses it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "config" / "examples" / "kernels"  # gelu_mm.py: blocked_mm
BLOCKS = [8, 16, 32, 64, 128, 256, 512, 1024, 4, 2, 1]


def anchor(blocks: list[int]) -> dict:
    import torch

    sys.path.insert(0, str(KERNELS))
    from gelu_mm import blocked_mm as blocked

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 1024, generator=gen), torch.randn(1024, 256, generator=gen)
    t0, timed = time.perf_counter(), 0.0
    with torch.inference_mode():
        for block in blocks:
            for _ in range(2):
                blocked(a, b, block=block)
            for _ in range(5):
                s = time.perf_counter()
                blocked(a, b, block=block)
                timed += time.perf_counter() - s
    return {"wall_s": time.perf_counter() - t0, "timed_s": timed}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=int, default=9)
    ap.add_argument("--full", type=int, default=3)
    args = ap.parse_args()
    from neuronsweep.config import schema
    from neuronsweep.search import driver

    blocks = BLOCKS[: args.configs]
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        entry = {
            "name": "blocked",
            "function": f"{KERNELS / 'gelu_mm.py'}:blocked_mm",
            "inputs": {"a": [256, 1024], "b": [1024, 256]},
            "search": {"space": {"block": blocks}, "strategy": "halving", "budget": {"trials": len(blocks)}},
        }
        cfg = schema.validate(
            {
                "run": "bench",
                "backend": "cpu",
                "capture": {"warmup": 2, "iterations": 5, "repeats": 1},
                "suites": {"custom": [entry]},
            },
            base=Path(tmp),
        )
        search = driver.ParamSearch(cfg, cfg["suites"]["custom"][0], "bench")
        trials = [{"block": b} for b in blocks]
        base = anchor(blocks)
        t0 = time.perf_counter()
        screened = search.screen(trials, 0)
        screen_wall = time.perf_counter() - t0
        # the time spent measuring: 5 timed calls a configuration, about 5 x its median
        screen_timed = sum(r["objective_s"] * 5 for r in screened if r["objective_s"])
        t0 = time.perf_counter()
        full = search.measure(trials[: args.full], 1) if args.full else []  # --full 0: the screen alone
        full_wall = time.perf_counter() - t0
    out = {
        "configs": len(blocks),
        "anchor_wall_s": round(base["wall_s"], 3),
        "anchor_timed_s": round(base["timed_s"], 3),
        "screen_wall_s": round(screen_wall, 3),
        "screen_overhead_per_trial_s": round((screen_wall - screen_timed) / len(blocks), 3),
        "full_trials": args.full,
        "full_wall_s": round(full_wall, 3),
        "full_per_trial_s": round(full_wall / args.full, 3) if args.full else None,
        "full_ok": sum(r["status"] == "ok" for r in full),
    }
    print(json.dumps(out))
    goal = out["screen_overhead_per_trial_s"] <= 1.0
    print(
        f"screen: {out['screen_overhead_per_trial_s']} s a trial beyond the time measured (goal <= 1 s: "
        f"{'met' if goal else 'MISSED'}); anchor loop {out['anchor_wall_s']} s for all {len(blocks)}, the "
        f"screen {out['screen_wall_s']} s; full rung {out['full_per_trial_s']} s a trial "
        f"({args.full} trials, one Snakemake call)"
    )
    return 0 if goal else 1


if __name__ == "__main__":
    sys.exit(main())
