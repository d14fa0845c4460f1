"""The torch-xla program shared by the neuron and xla backends: one code path, only the device and
the environment differ (NEURON_* for neuronx-cc on a NeuronCore; PJRT_DEVICE and XLA_FLAGS for XLA).

The child (`main`) runs in its own process, because PJRT_DEVICE, NEURON_CC_FLAGS,
NEURON_COMPILE_CACHE_URL, NEURON_FRAMEWORK_DEBUG and XLA_* must be set before torch_xla is
imported. It runs in phases and lists the compiled artifacts (files matching --artifact-glob: NEFFs,
or dumped HLO modules) after each, so the parent can tell the graph that moved the inputs to the
device from the graph of the workload itself, without "newest file" guessing:

  inputs     create the module and inputs on the CPU, move them to the device, sync
  workload   run the workload once, sync                      (its graph compiles here)
  second     run it again with the same inputs, sync          (a compile here = the graph changed)
  trace      (--trace-out) warmup, then num_exec executions with wall-clock spans per step and the
             torch_xla.debug.metrics samples (ExecuteTime, CompileTime) as a Chrome trace
  timing     (--iterations > 0) warmup + iterations, each synced with wait_device_ops; wall clock and
             the ExecuteTime the metrics recorded for each iteration

Compile counts and times come from torch_xla.debug.metrics, not wall clocks; a compile after the
first run means the graph changed between calls (recompilation). The output of every call is kept
alive until its sync: a lazy tensor dropped before mark_step is never computed.

The parent side (`run`, `attribute`) does not import torch.
    python -m neuronsweep.backends.programs.xla_program --spec JSON --out result.json --artifact-glob GLOB ...
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NotRequired, TypedDict

from neuronsweep.analysis.correctness import Correctness, check
from neuronsweep.analysis.stats import latency_stats
from neuronsweep.atomic import write_json
from neuronsweep.backends import BACKENDS, processes
from neuronsweep.backends.processes import run_child
from neuronsweep.backends.trace_spans import EXEC_MARK
from neuronsweep.errors import UserError
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import (
    TORCH_DTYPES,
    described,
    dtype_of,
    input_names,
    layer,
    tensor_shapes,
    torch_module,
    workload_id,
)

PHASES = ("start", "inputs", "workload", "second")
TRACKS = {"python": 1, "execute": 2, "compile": 3}  # Chrome trace tids of the xla backend's tracks
STEPS = BACKENDS["xla"].call_steps  # one call's steps, in order: the spans of the capture trace


class Compiles(TypedDict):
    """XLA's CompileTime over the workload's first call, and over a second call (a recompile)."""

    count: int
    seconds: float
    input_phase_count: int
    second_call_count: int
    second_call_seconds: float


class XlaResult(TypedDict):
    """What the child writes (out_json): the artifacts each phase made, their digests, the compiles, the timing
    and the check where asked."""

    phases: dict[str, list[str]]  # start, inputs, workload, second -> artifact paths that appeared then
    digests: dict[str, str]  # path -> sha256
    compile: Compiles
    first_run_wall_s: float
    experts_implementation: str | None
    torch: str
    device: str
    pid: int
    timing: NotRequired[dict[str, Any]]  # analysis/stats.LatencyStats, recompiles, sync, XLA's execute times
    correctness: NotRequired[Correctness]
    ranks: NotRequired[list[dict[str, Any]]]  # a collective's: every rank's times (xla_collective.py)


# ------------------------------------------------------------------------------- parent side


def run(
    spec: Spec, out_json: Path, env: dict[str, str], cwd: Path, globs: list[str], timeout_s: float, **settings: object
) -> XlaResult:
    """Run the child in `cwd` with `env` (killed after timeout_s) and return its result; settings:
    warmup, iterations, repeats, num_exec, nth_exec, trace_out, profile_dir, profile_executions."""
    cwd, out_json = cwd.resolve(), out_json.resolve()
    run_child("xla_program", child_args(spec, out_json, globs, settings), spec, cwd, env, "torch-xla run", timeout_s)
    return json.loads(out_json.read_text())


def child_args(spec: Spec, out: Path, globs: list[str], settings: dict) -> list[str]:
    """The child's command line: the spec, where to write, the settings given, and the artifact globs."""
    return processes.child_args(spec, out, **settings) + [a for g in globs for a in ("--artifact-glob", g)]


def attribute(result: XlaResult, spec: Spec, noun: str) -> tuple[str, list[dict]]:
    """The workload's compiled artifact (a NEFF, an HLO module): what appeared in the workload phase
    and not before. Every candidate seen is returned for build.json, with the phase it appeared in;
    zero or several distinct workload artifacts fail clearly."""
    phases, digests = result["phases"], result["digests"]
    seen: set[str] = set()
    candidates = []
    for phase in PHASES:
        for path in phases.get(phase, []):
            if path not in seen:
                seen.add(path)
                candidates.append({"path": path, "phase": phase, "sha256": digests[path]})
    before = {digests[p] for p in phases["inputs"]}
    workload: dict[str, dict] = {}  # distinct artifacts by content; the first path seen names each
    for c in candidates:
        if c["phase"] == "workload" and c["sha256"] not in before:
            workload.setdefault(c["sha256"], c)
    wid = workload_id(spec)
    if not workload:
        raise UserError(
            f"case {wid}: no {noun} was compiled for the workload graph (candidates: "
            f"{[c['path'] for c in candidates] or 'none'}); check the compiler flags and the log above."
        )
    if len(workload) > 1:
        raise UserError(
            f"case {wid}: the workload compiled {len(workload)} different {noun}s "
            f"({', '.join(Path(c['path']).name for c in workload.values())}); the graph is split, "
            f"so no single {noun} is the workload: simplify the workload or profile each graph."
        )
    return next(iter(workload.values()))["path"], candidates


# -------------------------------------------------------------------------------- child side


def artifacts(patterns: list[str]) -> dict[str, str]:
    """Matching files -> sha256 of their content (a cache copy and a debug copy of one NEFF match)."""
    found = {}
    for pattern in patterns:
        for path in glob.glob(pattern, recursive=True):
            if os.path.isfile(path):
                found[os.path.abspath(path)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


def metric(met: ModuleType, name: str) -> tuple[int, float]:
    """(count, total seconds) of a torch_xla metric; (0, 0.0) when it was never recorded."""
    data = met.metric_data(name)
    if not data:
        return 0, 0.0
    count, total_ns = data[0], data[1]
    return int(count), float(total_ns) * 1e-9


def _samples(met: ModuleType, name: str) -> list[tuple[float, float]]:
    """The metric's recent samples as (wall-clock seconds when recorded, value ns)."""
    data = met.metric_data(name)
    return [(float(ts), float(v)) for ts, v in data[2]] if data and len(data) > 2 else []


class _Step:
    """One call of the workload, synced, with perf_counter_ns at each boundary (a monotonic clock:
    the wall clock can be stepped while timing)."""

    def __init__(self, module: Callable, inputs: list, xm: ModuleType) -> None:
        self.module, self.inputs, self.xm = module, inputs, xm
        self.first_output = None  # the first call's result, for the correctness check

    def __call__(self) -> tuple[int, int, int, int]:
        t0 = time.perf_counter_ns()
        out = self.module(*self.inputs)  # lazy: only traced here
        t1 = time.perf_counter_ns()
        self.xm.mark_step()  # compile (if the graph is new) and launch
        t2 = time.perf_counter_ns()
        self.xm.wait_device_ops()
        t3 = time.perf_counter_ns()
        if self.first_output is None:
            self.first_output = out  # computed; copied to the host only after every phase and timing
        del out
        return t0, t1, t2, t3


def _trace(step: _Step, met: ModuleType, num_exec: int, nth: int, device: str) -> dict:
    """Chrome trace of num_exec executions: per execution a span with its tracing, mark_step and
    wait_device_ops children on the Python thread, and the XLA execute and compile samples the
    metrics recorded meanwhile on tracks of their own (a sample's timestamp, wall clock, is when it
    ended; one offset taken here maps it onto the perf_counter spans)."""
    pid = os.getpid()
    wall_minus_perf = time.time_ns() - time.perf_counter_ns()
    spans = [step() for _ in range(num_exec)]
    base = spans[0][0]

    def us(ns: int) -> float:  # Chrome trace time: µs from the first call's start
        return (ns - base) / 1000.0

    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"torch-xla ({device})"}}]
    for name, tid in (
        ("python: torch-xla tracing and sync", TRACKS["python"]),
        (f"XLA execute ({device})", TRACKS["execute"]),
        ("XLA compile", TRACKS["compile"]),
    ):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    for i, (t0, t1, t2, t3) in enumerate(spans, start=1):
        py = {"ph": "X", "pid": pid, "tid": TRACKS["python"], "cat": "framework"}
        events += [
            {**py, "name": f"{EXEC_MARK}{i}", "ts": us(t0), "dur": (t3 - t0) / 1000.0, "args": {"profiled": i == nth}},
            *(
                {**py, "name": name, "ts": us(b), "dur": (e - b) / 1000.0}
                for name, b, e in zip(STEPS, (t0, t1, t2), (t1, t2, t3))
            ),
        ]
    first, last = spans[0][0], spans[-1][3]
    for metric, track, cat in (("ExecuteTime", "execute", "xla_execute"), ("CompileTime", "compile", "xla_compile")):
        for ts_s, value_ns in _samples(met, metric):
            end = int(ts_s * 1e9) - wall_minus_perf
            if first <= end <= last + 1_000_000:  # recorded during these executions (1 ms of clock slack)
                events.append(
                    {
                        "ph": "X",
                        "pid": pid,
                        "tid": TRACKS[track],
                        "cat": cat,
                        "name": metric,
                        "ts": us(end - int(value_ns)),
                        "dur": value_ns / 1000.0,
                        "args": {"source": f"torch_xla.debug.metrics {metric}"},
                    }
                )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "clock": "perf_counter_ns spans; metric samples mapped from the wall clock",
            "base_unix_ns": base + wall_minus_perf,
            "thread": threading.get_native_id(),
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run the spec's workload on the XLA device in phases, listing the artifacts that appear in each; check, time and
    trace it as asked; writes the result JSON given by --out."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--artifact-glob", action="append", default=[])
    # The parent passes the capture settings it has (capture.* of the config, via CaptureSettings); a
    # phase whose settings are absent does not run (a build passes none), so none has a default here.
    ap.add_argument("--check", type=int, default=0, help="1: check the first call's output against NumPy")
    ap.add_argument("--warmup", type=int, default=0, help="absent: no warm-up calls")
    ap.add_argument("--iterations", type=int, help="absent: no timing")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--num-exec", type=int, help="with --trace-out: the executions recorded")
    ap.add_argument("--nth-exec", type=int, help="with --trace-out: the profiled one")
    ap.add_argument("--trace-out")
    ap.add_argument("--profile-dir", help="then this many executions under torch-xla's profiler (a layer's split)")
    ap.add_argument("--profile-executions", type=int, default=0)
    args = ap.parse_args(argv)
    if args.trace_out and (args.num_exec is None or args.nth_exec is None):
        ap.error("--trace-out needs --num-exec and --nth-exec")
    if args.iterations and args.repeats is None:
        ap.error("--iterations needs --repeats")

    import torch
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    # inference: with autograd on, the tensors a module's ops save for a backward stay alive past the call,
    # and torch-xla computes and returns every live tensor in each graph (a layer's weights transposed, ...)
    torch.set_grad_enabled(False)
    spec = json.loads(args.spec)
    device = xm.xla_device()
    phases = {"start": artifacts(args.artifact_glob)}

    gen = torch.Generator().manual_seed(0)
    shapes, dtype = tensor_shapes(spec), getattr(torch, TORCH_DTYPES[dtype_of(spec)])
    module = torch_module(spec).to(device)  # weights move with the inputs, before the workload graph
    experts = layer.use_experts(module, layer.XLA_EXPERTS) if described(spec).layer_split else None
    host_inputs = [torch.randn(shapes[n], generator=gen, dtype=dtype) for n in input_names(spec)]
    inputs = [t.to(device) for t in host_inputs]
    xm.mark_step()
    xm.wait_device_ops()
    phases["inputs"] = artifacts(args.artifact_glob)
    compiles = {"inputs": metric(met, "CompileTime")}
    step = _Step(module, inputs, xm)

    t0, *_, t3 = step()
    phases["workload"] = artifacts(args.artifact_glob)
    compiles["workload"] = metric(met, "CompileTime")
    step()
    phases["second"] = artifacts(args.artifact_glob)
    compiles["second"] = metric(met, "CompileTime")

    result = {
        "phases": {name: sorted(files) for name, files in phases.items()},
        "digests": {path: digest for files in phases.values() for path, digest in files.items()},
        "compile": {
            "count": compiles["workload"][0] - compiles["inputs"][0],
            "seconds": compiles["workload"][1] - compiles["inputs"][1],
            "input_phase_count": compiles["inputs"][0],
            "second_call_count": compiles["second"][0] - compiles["workload"][0],
            "second_call_seconds": compiles["second"][1] - compiles["workload"][1],
        },
        "first_run_wall_s": (t3 - t0) * 1e-9,
        "experts_implementation": experts,
        "torch": torch.__version__,
        "device": str(device),
        "pid": os.getpid(),  # a round in a process of its own (capture.rounds_in_processes) is this process
    }
    for _ in range(args.warmup):
        step()
    if args.trace_out:
        trace = _trace(step, met, args.num_exec, args.nth_exec, str(device))
        write_json(args.trace_out, trace)  # whole or not at all, like every stage output
    if args.iterations:
        after_warmup = metric(met, "CompileTime")[0]
        walls, executes = [], []
        for _ in range(args.repeats * args.iterations):
            before = metric(met, "ExecuteTime")
            t0, *_, t3 = step()
            after = metric(met, "ExecuteTime")
            walls.append((t3 - t0) * 1e-9)
            executes.append(after[1] - before[1] if after[0] > before[0] else None)
        known = [e for e in executes if e is not None]  # every iteration's, or no execute statistics
        result["timing"] = {
            **latency_stats(walls, args.repeats),
            "recompiles_during_timing": metric(met, "CompileTime")[0] - after_warmup,
            "sync": "xm.mark_step() + xm.wait_device_ops() per iteration",
            "execute": latency_stats(known, args.repeats) if len(known) == len(executes) else None,
            "execute_source": "torch_xla.debug.metrics ExecuteTime, per iteration",
        }
    if args.profile_dir:  # XLA's per-thunk spans (backends/xla_split.py), apart from the timed executions
        import torch_xla.debug.profiler as xp

        xp.start_trace(args.profile_dir)
        for _ in range(args.profile_executions):
            step()
        xp.stop_trace()
    if args.check:  # last: the copy to the host must not count as a phase's artifact or a timed compile
        out = step.first_output
        assert out is not None  # the step ran: every phase calls it before this
        host_out = tuple(o.cpu() for o in out) if isinstance(out, tuple | list) else out.cpu()  # a head: two
        result["correctness"] = check(spec, dict(zip(input_names(spec), host_inputs)), host_out)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
