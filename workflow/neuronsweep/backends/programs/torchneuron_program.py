"""The TorchNeuron side of a neuron build and capture, in a child process: TORCH_NEURONX_*, NEURON_CC_FLAGS
and NEURON_RT_* are read when torch_neuronx loads and when the runtime starts.

TorchNeuron (SDK 2.33: "What is TorchNeuron?", "torch.compile on Neuron") is native PyTorch: a `neuron`
device, eager by default, and `torch.compile(fn, backend="neuron")` lowering a Dynamo graph through
StableHLO to neuronx-cc. Each run here:

  inputs    the module's weights and the inputs made on the CPU (seeded), moved to `neuron`, synced
  first     one call of torch.compile(module, backend="neuron", fullgraph=True), synced: the workload's
            NEFF is what appears in TORCH_NEURONX_NEFF_CACHE_DIR during this call
  second    the same call again: a NEFF here means the graph compiled again (recompilation)
  timing    (--iterations) warmup, then repeats x iterations calls, each timed by the wall clock between
            two torch.neuron.synchronize() calls, as the docs time compiled code
  inspect   (--inspect-nth) the runtime's inspect mode is in the environment: nth calls, so the runtime
            profiles the nth execution (NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP = nth - 1)

Grad mode is off: these are inference benchmarks, as on the other backends.
    python -m neuronsweep.backends.programs.torchneuron_program --spec JSON --out result.json --neff-cache DIR ...
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuronsweep.analysis.correctness import check
from neuronsweep.analysis.stats import latency_stats
from neuronsweep.workloads import TORCH_DTYPES, dtype_of, input_names, tensor_shapes, torch_module


def neffs(root: str) -> dict[str, str]:
    """Every NEFF under the cache folder -> sha256 of its content."""
    return {
        os.path.abspath(p): hashlib.sha256(Path(p).read_bytes()).hexdigest()
        for p in glob.glob(os.path.join(root, "**", "*.neff"), recursive=True)
    }


def first_two_calls(call: Callable[[], Any], neff_cache: str) -> tuple[Any, dict]:
    """The first compiled call and a second one with the NEFF cache listed around each: what the first
    adds is the workload's NEFF, what the second adds a recompile. `call()` returns (value, seconds);
    the first call's value is returned beside the listing."""
    before = neffs(neff_cache)
    value, first_s = call()
    after_first = neffs(neff_cache)
    _, second_s = call()
    after_second = neffs(neff_cache)
    return value, {
        "first_call": sorted(set(after_first) - set(before)),
        "second_call": sorted(set(after_second) - set(after_first)),
        "digests": after_second,
        "first_call_s": first_s,
        "second_call_s": second_s,
    }


def main(argv: list[str] | None = None) -> int:
    """Compile the spec's workload with torch.compile on the neuron device, note the NEFFs that appear, check the output
    and (optionally) time it; writes the result JSON given by --out."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--neff-cache", required=True, help="TORCH_NEURONX_NEFF_CACHE_DIR, listed around each call")
    ap.add_argument("--check", type=int, default=0, help="1: check the output against float64 (the build)")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--iterations", type=int, help="absent: no timing")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--inspect-nth", type=int, help="call the workload this many times in all (inspect capture)")
    args = ap.parse_args(argv)
    if args.iterations and args.repeats is None:
        ap.error("--iterations needs --repeats")

    import torch
    import torch_neuronx  # noqa: F401  (registers the neuron device and torch.compile backend)

    torch.set_grad_enabled(False)
    spec = json.loads(args.spec)
    gen = torch.Generator().manual_seed(0)
    shapes, dtype = tensor_shapes(spec), getattr(torch, TORCH_DTYPES[dtype_of(spec)])
    host_module = torch_module(spec)
    host_inputs = [torch.randn(shapes[n], generator=gen, dtype=dtype) for n in input_names(spec)]
    module = host_module.to("neuron")  # in place: the module's weights move to the device
    inputs = [x.to("neuron") for x in host_inputs]
    synchronize = torch.neuron.synchronize  # type: ignore[attr-defined]  # torch_neuronx registers it
    synchronize()
    if inputs[0].device.type != "neuron":
        raise SystemExit(f"torch_neuronx placed the inputs on {inputs[0].device}, not on the neuron device")

    compiled = torch.compile(module, backend="neuron", fullgraph=True, dynamic=False)

    def call() -> tuple[Any, float]:
        synchronize()
        t0 = time.perf_counter_ns()
        out = compiled(*inputs)
        synchronize()
        return out, (time.perf_counter_ns() - t0) * 1e-9

    out, result = first_two_calls(call, args.neff_cache)
    result = {
        **result,
        "torch": torch.__version__,
        "torch_neuronx": getattr(torch_neuronx, "__version__", None),
        "device": str(inputs[0].device),
        "pid": os.getpid(),  # a round in a process of its own (capture.rounds_in_processes) is this process
    }
    if args.check:
        host_out = tuple(o.cpu() for o in out) if isinstance(out, tuple | list) else out.cpu()  # a head: two
        result["correctness"] = check(spec, dict(zip(input_names(spec), host_inputs)), host_out)
    calls = 2
    if args.inspect_nth:
        for _ in range(max(0, args.inspect_nth - calls)):
            call()
        calls = max(calls, args.inspect_nth)
    for _ in range(args.warmup):
        call()
    if args.iterations:
        before_timing = neffs(args.neff_cache)
        samples = [call()[1] for _ in range(args.repeats * args.iterations)]
        result["timing"] = {
            **latency_stats(samples, args.repeats),
            "recompiles_during_timing": len(set(neffs(args.neff_cache)) - set(before_timing)),
            "sync": "torch.neuron.synchronize() before and after each call (wall clock between them)",
        }
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
