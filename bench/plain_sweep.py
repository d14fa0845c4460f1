"""The anchor of the default sweep's speed: the same workloads measured by a plain in-process script, as seed
001 does by hand (issue 72): per workload build the program (torch.export, saved), warm up, 3 x 10 timed
calls, one profiled call exported as a Chrome trace. No records, report, cache or single-target reruns: what
neuron-sweep adds those for is the ratio bench/default_sweep.py prints.
    python bench/plain_sweep.py [--config config/config.yaml | --plan results/<run>/plan.json]
(prints one JSON line: wall_s, cases). With --plan, the workloads a sweep ran (its plan leaves out what this
host cannot run fast, e.g. bf16 without native support); with --config, every workload the config plans.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROUNDS, CALLS, WARMUP = 3, 10, 2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "config" / "config.yaml"))
    ap.add_argument("--plan", help="a sweep's plan.json: its workloads, the ones it ran")
    args = ap.parse_args()
    t0 = time.perf_counter()
    import torch

    from neuronsweep.backends.cpu_timing import inputs
    from neuronsweep.config import schema
    from neuronsweep.config.run_config import RunConfig
    from neuronsweep.stages.plan import make_plan
    from neuronsweep.workloads import torch_module

    if args.plan:
        workloads = json.loads(Path(args.plan).read_text())["workloads"]
    else:
        workloads = make_plan(RunConfig.of(schema.load(args.config)), "cpu").workloads
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        for wid, spec in workloads.items():
            x = inputs(torch, spec)
            module = torch_module(spec)
            torch.export.save(torch.export.export(module, tuple(x)), f"{tmp}/{wid}.pt2")  # the build
            with torch.inference_mode():
                for _ in range(WARMUP):
                    module(*x)
                for _ in range(ROUNDS):
                    for _ in range(CALLS):
                        s = time.perf_counter_ns()
                        module(*x)
                        time.perf_counter_ns() - s
                with torch.profiler.profile() as prof:
                    module(*x)
            prof.export_chrome_trace(f"{tmp}/{wid}.json")
    print(json.dumps({"anchor": "plain script", "wall_s": round(time.perf_counter() - t0, 2), "cases": len(workloads)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
