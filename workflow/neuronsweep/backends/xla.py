"""xla backend: the neuron build's framework half (torch-xla, SyncTensorsGraph, mark_step) run for real
on a PJRT device, PJRT_DEVICE=CPU here. Optional: `pip install -e ".[xla]"` (torch-xla 2.9.0).

build   xla_program, the child the neuron build runs, with PJRT_DEVICE and XLA_FLAGS=--xla_dump_to;
        the workload's module is the optimized HLO (module_NNNN.SyncTensorsGraph.<id>.*after_optimizations.txt,
        the analog of MODULE_<n>_SyncTensorsGraph.<id>_<hash>.neff) that appears while the workload
        runs, attributed exactly like neuron's NEFFs; a second call shows whether the graph recompiles
capture the same program again: warmup, num_exec executions (the nth is the profiled one) as a
        Chrome trace of wall-clock spans and metric samples, then timing rounds (wall clock and
        ExecuteTime per iteration). PJRT CPU cannot load serialized executables (torch-xla 2.9 logs
        "Deserializing serialized executable not supported"), so the capture compiles its graph again;
        that compile is recorded, checked against the build's module, and not counted as a recompile.
        With capture.rounds_in_processes that process times round 1 and each other round is a process
        of its own (round_<r>/, compiling the graph again), so compare can test processes
view    trace.json -> trace.pftrace, a summary with the Neuron summary's fields, and the op mix of
        the workload's module as parquet/Instruction.parquet (analysis/hlo.py)
"""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

import numpy as np

from neuronsweep.analysis.intervals import union_length
from neuronsweep.analysis.stats import process_rounds
from neuronsweep.backends import BACKENDS, xla_split
from neuronsweep.backends.build_facts import package_versions, recompilation_flag
from neuronsweep.backends.processes import fresh
from neuronsweep.backends.programs import xla_program
from neuronsweep.backends.trace_spans import profiled_span
from neuronsweep.config.settings import BuildSettings, CaptureSettings, ViewSettings
from neuronsweep.formats import chrome_trace, hlo
from neuronsweep.formats import pftrace_writer as pftrace
from neuronsweep.host import caps
from neuronsweep.store.cache import CompileCache
from neuronsweep.store.records import BuildRecord, CaptureFields, CaptureRecord, ViewFields
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import described

ARTIFACT = BACKENDS["xla"].artifacts["build"]
TRACE = BACKENDS["xla"].artifacts["capture"]
ARTIFACT_FORMAT = "optimized HLO text via torch-xla, v3"  # v3: autograd off
MODULE_GLOB = "module_*after_optimizations.txt"  # cpu_after_optimizations.txt on PJRT CPU
INSTRUCTION_TABLE = "parquet/Instruction.parquet"
PACKAGES = ("torch", "torch-xla")


def xla_env(options: dict, dump_dir: Path) -> dict[str, str]:
    """The child's environment: the PJRT device, the HLO dump, and the IR debug names when asked."""
    env = dict(os.environ)
    env["PJRT_DEVICE"] = options["pjrt_device"]
    env["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), f"--xla_dump_to={dump_dir}"]))
    if options.get("xla_debug"):
        env.update({"XLA_IR_DEBUG": "1", "XLA_HLO_DEBUG": "1"})
    return env


def _fresh(workdir: Path) -> Path:
    """An empty workdir holding an empty dump/ folder."""
    return fresh(fresh(workdir) / "dump")


def build(spec: Spec, out_dir: Path, cache: CompileCache, settings: BuildSettings) -> dict:
    """Run the workload on the PJRT device once with XLA dumping its HLO, and attribute the HLO module that belongs
    to it.

    Args:
        spec: the workload (workloads/).
        out_dir: the case's build/ folder (the HLO dump goes there).
        cache: the compile cache (xla keeps no artifact in it: torch-xla compiles again in the capture).
        settings: the build settings (the xla section: pjrt_device, xla_debug).

    Returns:
        build.json's fields: toolchain, the PJRT device, the HLO module and its attribution, compile time and count,
        correctness.
    """
    versions = package_versions(PACKAGES)
    options = settings.options
    if described(spec).layer_split:  # its split reads each HLO op's source line (xla_split.py)
        options = {**options, "xla_debug": True}
    device = options["pjrt_device"]

    def compile_module(entry: Path) -> tuple[Path, dict]:
        workdir = out_dir.resolve() / "xla"
        dump = _fresh(workdir)
        result = xla_program.run(
            spec,
            workdir / "xla_result.json",
            xla_env(options, dump),
            workdir,
            [str(dump / MODULE_GLOB)],
            settings.timeout_s,
            check=1,
        )
        module, candidates = xla_program.attribute(result, spec, "HLO module")
        comp = result["compile"]
        return Path(module), {
            "module_source": module,
            "candidates": candidates,
            "compile_s": comp["seconds"],
            "compile_s_source": "torch_xla.debug.metrics CompileTime",
            "compile_count": comp["count"],
            "second_call_compile_count": comp["second_call_count"],
            "recompiled_on_second_call": comp["second_call_count"] > 0,
            "device": result["device"],
            "experts_implementation": result.get("experts_implementation"),  # a layer's (workloads/layer.py)
            "correctness": result["correctness"],
        }

    material = {
        "spec": spec,
        "backend": "xla",
        "pjrt_device": device,
        "xla_debug": bool(options["xla_debug"]),
        "versions": versions,
        "format": ARTIFACT_FORMAT,
    }
    meta, fields = cache.through(material, ARTIFACT, out_dir / ARTIFACT, compile_module)
    env = {
        k: v
        for k, v in xla_env(options, Path("<build>/xla/dump")).items()
        if k in ("PJRT_DEVICE", "XLA_FLAGS", "XLA_IR_DEBUG", "XLA_HLO_DEBUG")
    }
    return {
        "toolchain": {**versions, "python": platform.python_version()},
        "compiler": f"XLA via torch-xla (PJRT_DEVICE={device})",
        "artifact_format": ARTIFACT_FORMAT,
        "pjrt_device": device,
        "env": env,
        **{k: v for k, v in meta.items() if k != "made_at"},
        **fields,
        "recompilation_flag": recompilation_flag("graph") if meta["recompiled_on_second_call"] else None,
    }


def capture(build: BuildRecord, build_dir: Path, settings: CaptureSettings, out_dir: Path) -> CaptureFields:
    """Time the workload on the PJRT device (each execution synced) and trace its executions with torch-xla's
    metrics.

    Args:
        build: the case's build record.
        build_dir: the folder of its HLO dump.
        settings: the capture settings (warmup, iterations, repeats, nth_exec).
        out_dir: the case's capture/ folder.

    Returns:
        capture.json's fields: latency with XLA's ExecuteTime, compiles during timing, correctness.
    """
    spec = build.spec
    options = {"pjrt_device": build.pjrt_device, "xla_debug": "XLA_HLO_DEBUG" in build.env}
    workdir = out_dir.resolve() / "xla"
    dump = _fresh(workdir)
    trace_out = out_dir.resolve() / TRACE
    layer = described(spec).layer_split
    split_dir = workdir / "split-profile"
    in_processes = settings.rounds_in_processes and settings.repeats > 1
    result = xla_program.run(
        spec,
        workdir / "capture_result.json",
        xla_env(options, dump),
        workdir,
        [str(dump / MODULE_GLOB)],
        settings.timeout_s,
        warmup=settings.warmup,
        iterations=settings.iterations,
        repeats=1 if in_processes else settings.repeats,
        num_exec=settings.num_exec,
        nth_exec=settings.nth_exec,
        trace_out=trace_out,
        profile_dir=split_dir if layer else None,
        profile_executions=xla_split.EXECUTIONS if layer else None,
    )
    module, _ = xla_program.attribute(result, spec, "HLO module")
    timing = result["timing"]
    if in_processes:  # round 1 is the process above; each other round a process of its own, run as it was
        runs = [{**timing, "pid": result["pid"]}]
        for r in range(2, settings.repeats + 1):
            folder = _fresh(workdir / f"round_{r}")
            more = xla_program.run(
                spec,
                folder.parent / "timing.json",
                xla_env(options, folder),
                folder.parent,
                [],
                settings.timeout_s,
                warmup=settings.warmup,
                iterations=settings.iterations,
                repeats=1,
                num_exec=settings.num_exec,  # traced as round 1 was, so every round ran the same calls first
                nth_exec=settings.nth_exec,
                trace_out=folder.parent / TRACE,
            )
            shutil.rmtree(folder)  # the round's own compile's dump: the module is round 1's
            runs.append({**more["timing"], "pid": more["pid"]})
        timing = process_rounds(runs)
    split, split_why = None, None
    if layer:
        try:
            split = xla_split.measure(split_dir, module)
        except (OSError, ValueError, KeyError) as e:  # the profiler wrote no trace, or not one we can read
            split_why = f"no split of this layer: {e}"
    build_module = (build_dir / ARTIFACT).resolve()
    matches = Path(module).read_bytes() == build_module.read_bytes()
    return {
        "profiler": f"wall clock + torch_xla.debug.metrics (torch-xla {package_versions(PACKAGES)['torch-xla']})",
        "module": str(build_module),
        "module_matches_build": matches,
        "module_note": None
        if matches
        else f"this process compiled a different module ({module}) than the "
        "build; the trace and timings are of this process's graph",
        "capture_compile": result["compile"],
        "latency": timing,
        "threads": None,
        "device": result["device"],
        "host": caps.host_record(),
        "artifacts": {"trace": TRACE},
        **({"layer_split": split, "layer_split_why": split_why} if layer else {}),
    }


def summarize_trace(events: chrome_trace.Events, cap: CaptureRecord) -> dict:
    """The Neuron summary's fields this trace can honestly fill, in the same units (s, fractions):
    total_time is the profiled execution's wall span, total_active_time the XLA execute time in it."""
    x, span = profiled_span(events, cap.captured_with().nth_exec)
    ts, dur = x["ts"], x["dur"]
    start, end = ts[span], ts[span] + dur[span]
    inside = (ts < end) & (ts + dur > start)  # overlaps
    inside[span] = False
    executes = inside & (x["cat"] == events.cats.get("xla_execute", -2))
    total_s = dur[span] * 1e-9
    active_s = (
        union_length(np.maximum(ts[executes], start), np.minimum(ts[executes] + dur[executes], end)) * 1e-9
        if executes.any()
        else None
    )
    return {
        "total_time": total_s,
        "total_active_time": active_s,
        "total_active_time_percent": active_s / total_s if active_s is not None and total_s > 0 else None,
        "event_count": int(inside.sum()),
        "compile_in_profiled_exec": int((inside & (x["cat"] == events.cats.get("xla_compile", -2))).sum()),
        "instance_type": f"{cap.details['host']['cpu']} ({cap.details['device']})",
        "profiler_version": cap.profiler,
    }


def view(cap: CaptureRecord, capture_dir: Path, out_dir: Path, settings: ViewSettings) -> ViewFields:
    """Summarize the capture's Chrome trace around the profiled execution and convert it to trace.pftrace.

    Args:
        cap: the case's capture record.
        capture_dir: the folder holding its trace.
        out_dir: the case's view/ folder.
        settings: the view settings.

    Returns:
        view.json's fields: the summary and the pftrace's name and event counts.
    """
    with chrome_trace.read(capture_dir / TRACE, spill_dir=out_dir) as events:
        summary = summarize_trace(events, cap)
        counts = pftrace.write(events, out_dir / "trace.pftrace")
    rows = hlo.read(cap.details["module"])
    hlo.write_parquet(rows, out_dir / INSTRUCTION_TABLE)
    return {
        "summary": summary,
        "pftrace": "trace.pftrace",
        "pftrace_counts": counts,
        "outputs": {"instruction": INSTRUCTION_TABLE},
        "hlo_instructions": len(rows),
    }
