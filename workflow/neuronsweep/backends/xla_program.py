"""The torch-xla side of a build or a framework timing, run in a child process.

A child, because NEURON_CC_FLAGS, NEURON_COMPILE_CACHE_URL, NEURON_FRAMEWORK_DEBUG and XLA_* must
be set before torch_xla is imported. The program runs in phases and lists the compiled artifacts
(files matching --artifact-glob) after each, so the parent can tell the graph that moved the
inputs to the device from the graph of the workload itself, without "newest file" guessing:

  inputs     create the module and inputs on the CPU, move them to the device, sync
  workload   run the workload once, sync                      (its graph compiles here)
  timing     (--iterations > 0) warmup + iterations, each synced with wait_device_ops

Compile counts and times come from torch_xla.debug.metrics, not wall clocks; a compile during the
timing phase means the graph changed between iterations (recompilation).
    python -m neuronsweep.backends.xla_program --spec JSON --out result.json --artifact-glob GLOB ...
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import time
from pathlib import Path


def artifacts(patterns: list[str]) -> dict[str, str]:
    """Matching files -> sha256 of their content (a cache copy and a debug copy of one NEFF match)."""
    found = {}
    for pattern in patterns:
        for path in glob.glob(pattern, recursive=True):
            if os.path.isfile(path):
                found[os.path.abspath(path)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


def _metric(met, name: str) -> tuple[int, float]:
    """(count, total seconds) of a torch_xla metric; (0, 0.0) when it was never recorded."""
    data = met.metric_data(name)
    if not data:
        return 0, 0.0
    count, total_ns = data[0], data[1]
    return int(count), float(total_ns) * 1e-9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--artifact-glob", action="append", default=[])
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args(argv)

    import torch
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    from ..stats import latency_stats
    from ..workloads import TORCH_DTYPES, kind_of

    spec = json.loads(args.spec)
    kind = kind_of(spec)
    device = xm.xla_device()
    phases = {"start": artifacts(args.artifact_glob)}

    gen = torch.Generator().manual_seed(0)
    shapes, dtype = kind.tensor_shapes(spec), getattr(torch, TORCH_DTYPES[spec["dtype"]])
    module = kind.torch_module(spec).to(device)  # weights move with the inputs, before the workload graph
    inputs = [torch.randn(shapes[n], generator=gen, dtype=dtype).to(device) for n in kind.input_names(spec)]
    xm.mark_step()
    xm.wait_device_ops()
    phases["inputs"] = artifacts(args.artifact_glob)
    compiles_before = _metric(met, "CompileTime")

    t0 = time.perf_counter()
    module(*inputs)
    xm.mark_step()
    xm.wait_device_ops()
    first_run_s = time.perf_counter() - t0
    phases["workload"] = artifacts(args.artifact_glob)
    compiles_workload = _metric(met, "CompileTime")

    result = {
        "phases": {name: sorted(files) for name, files in phases.items()},
        "digests": {path: digest for files in phases.values() for path, digest in files.items()},
        "compile": {"count": compiles_workload[0] - compiles_before[0],
                    "seconds": compiles_workload[1] - compiles_before[1],
                    "input_phase_count": compiles_before[0]},
        "first_run_wall_s": first_run_s,
        "torch": torch.__version__,
    }
    if args.iterations:
        for _ in range(args.warmup):
            module(*inputs)
            xm.mark_step()
            xm.wait_device_ops()
        after_warmup = _metric(met, "CompileTime")[0]
        samples = []
        for _ in range(args.repeats * args.iterations):
            t0 = time.perf_counter_ns()
            module(*inputs)
            xm.mark_step()
            xm.wait_device_ops()
            samples.append((time.perf_counter_ns() - t0) * 1e-9)
        result["timing"] = {**latency_stats(samples, args.repeats),
                            "recompiles_during_timing": _metric(met, "CompileTime")[0] - after_warmup,
                            "sync": "xm.mark_step() + xm.wait_device_ops() per iteration"}
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
