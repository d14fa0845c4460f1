"""CPU backend: PyTorch on the host CPU, measured for real.

build   torch.export the workload to a .pt2 (export uses meta tensors, so no input memory is needed; a
        user's function gets cpu ones, as it may make tensors of its own)
capture load the .pt2, warm up, run num_exec executions with the nth under torch.profiler, then warm
        up again and time `repeats` x `iterations` executions one by one (perf_counter_ns); with
        capture.rounds_in_processes each round in a fresh interpreter (cpu_round.py)
view    Chrome trace -> .pftrace, and a summary with the Neuron summary's field names and units
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import cast

from neuronsweep.analysis.correctness import check
from neuronsweep.analysis.intervals import union_length
from neuronsweep.analysis.stats import latency_stats
from neuronsweep.atomic import read_json, replacing, write_json
from neuronsweep.backends import BACKENDS, cpu_split
from neuronsweep.backends.cpu_timing import (
    WARMUP_MIN_S,
    inputs,
    round_in_process,
    timing_loop,
    torch_dtype,
    warm_then_time,
)
from neuronsweep.backends.programs import gloo
from neuronsweep.backends.trace_spans import EXEC_MARK, profiled_span
from neuronsweep.config.settings import BuildSettings, CaptureSettings, ViewSettings
from neuronsweep.errors import UserError
from neuronsweep.formats import chrome_trace
from neuronsweep.formats import pftrace_writer as pftrace
from neuronsweep.host import caps, devicelock
from neuronsweep.store.cache import CompileCache, cache_key
from neuronsweep.store.records import BuildRecord, CaptureFields, CaptureRecord, ViewFields
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import (
    described,
    dtype_of,
    export_program,
    input_names,
    load_program,
    tensor_shapes,
    working_set_bytes,
    workload_id,
)

ARTIFACT = BACKENDS["cpu"].artifacts["build"]
TRACE = BACKENDS["cpu"].artifacts["capture"]
ARTIFACT_FORMAT = "torch.export .pt2, v3"  # v3: a prefill layer writes its KV cache
MEMORY_HEADROOM = 0.8  # use at most this share of available RAM for one case's tensors


def build(spec: Spec, out_dir: Path, cache: CompileCache, settings: BuildSettings) -> dict:
    """Export the workload with torch.export to a .pt2 in out_dir (a collective: the gloo rank plan), through the
    compile cache.

    Args:
        spec: the workload (workloads/).
        out_dir: the case's build/ folder.
        cache: the compile cache (keyed by spec, torch and Python).
        settings: the build settings (threads, time limit).

    Returns:
        build.json's fields: toolchain, compiler, artifact and its format, compile time, cache hit, recompilation check.
    """
    if described(spec).ranks:
        return gloo.build(spec, out_dir)
    import torch

    def export(entry: Path) -> tuple[Path, dict]:
        shapes = tensor_shapes(spec)
        dtype = torch_dtype(torch, dtype_of(spec))
        # meta tensors need no input memory, but a user's function may make tensors of its own on the
        # default device (torch.zeros(m, n)), which cannot mix with meta ones: its inputs are real
        device = "cpu" if described(spec).real_inputs else "meta"
        example = tuple(torch.empty(shapes[n], dtype=dtype, device=device) for n in input_names(spec))
        t0 = time.perf_counter()
        program = export_program(spec, example)  # a model's layer: traced on fake tensors, saved without weights
        export_s = time.perf_counter() - t0
        with replacing(out_dir / ARTIFACT) as tmp:
            torch.export.save(program, str(tmp))
        return out_dir / ARTIFACT, {"compile_s": export_s, "compile_s_source": "this build (torch.export.export)"}

    material = {"spec": spec, "backend": "cpu", "torch": torch.__version__, "format": ARTIFACT_FORMAT}
    _, fields = cache.through(material, ARTIFACT, out_dir / ARTIFACT, export)
    return {
        "toolchain": {"torch": torch.__version__, "python": platform.python_version()},
        "compiler": "torch.export",
        "artifact_format": ARTIFACT_FORMAT,
        **fields,
    }


def _available_bytes() -> int:
    import psutil

    return psutil.virtual_memory().available


def _check_memory(spec: Spec) -> int:
    need = working_set_bytes(spec)
    avail = _available_bytes()
    if need > MEMORY_HEADROOM * avail:
        raise UserError(
            f"case {workload_id(spec)}: its tensors and intermediates need {need / 2**30:.1f} GiB but only "
            f"{avail / 2**30:.1f} GiB of RAM is available; shrink the shape or run it on a larger machine."
        )
    return need


def capture(build: BuildRecord, build_dir: Path, settings: CaptureSettings, out_dir: Path) -> CaptureFields:
    """Load the .pt2, profile the nth of num_exec executions with torch.profiler, then time repeats x iterations
    executions one by one (each round in a fresh process with capture.rounds_in_processes) and check the output.

    Args:
        build: the case's build record.
        build_dir: the folder holding its artifact.
        settings: the capture settings (warmup, iterations, repeats, threads, nth_exec).
        out_dir: the case's capture/ folder (trace.json goes there).

    Returns:
        capture.json's fields: profiler, latency statistics, round pids, threads, host load, correctness.
    """
    if described(build.spec).ranks:
        return gloo.capture(build, build_dir, settings, out_dir)
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    spec = build.spec
    working_set = _check_memory(spec)
    module = load_program(build_dir / ARTIFACT, spec)
    torch.set_num_threads(settings.threads)
    names, args = input_names(spec), inputs(torch, spec)
    timed = timing_loop(module, args)
    nth, prof = settings.nth_exec, None
    with torch.inference_mode():
        correctness = check(spec, dict(zip(names, args)), module(*args))  # once, before the warm-up
        warm_then_time(timed, settings.warmup, 0)
        for i in range(1, settings.num_exec + 1):
            if i != nth:
                module(*args)
                continue
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
                with record_function(f"{EXEC_MARK}{i}"):
                    module(*args)
        if not settings.rounds_in_processes:
            # warm already: the loop itself again until WARMUP_MIN_S (the profiler's exit left it cold)
            samples = warm_then_time(timed, 1, settings.repeats * settings.iterations)
        split = cpu_split.measure(module, args) if described(spec).layer_split else None
    if prof is None:  # the config keeps nth_exec within num_exec; settings made by hand may not
        raise UserError(
            f"case {build.workload_id}: nth_exec {nth} is not one of its {settings.num_exec} executions, so none "
            "was profiled; set capture.nth_exec between 1 and capture.num_exec."
        )
    with replacing(out_dir / TRACE) as tmp:
        prof.export_chrome_trace(str(tmp))
    pids = []
    if settings.rounds_in_processes:
        rounds = [
            round_in_process(build_dir, settings.threads, settings.warmup, settings.iterations, settings.timeout_s, r)
            for r in range(1, settings.repeats + 1)
        ]
        samples, pids = [s for r in rounds for s in r["samples"]], [r["pid"] for r in rounds]
    return {
        "profiler": f"torch.profiler (torch {torch.__version__})",
        "profiler_flops": sum(int(e.flops or 0) for e in prof.key_averages()),
        "latency": latency_stats(samples, settings.repeats, in_processes=settings.rounds_in_processes),
        "round_pids": pids or None,
        "warmup_min_s": WARMUP_MIN_S,
        "correctness": correctness,
        "threads": torch.get_num_threads(),
        "working_set_bytes": working_set,
        **({"layer_split": split} if split else {}),
        "host": caps.host_record(),
        "artifacts": {"trace": TRACE},
    }


def summarize_trace(events: chrome_trace.Events, cap: CaptureRecord) -> dict:
    """The Neuron summary's fields that a CPU trace can honestly fill, in the same units (s, fractions)."""
    x, span = profiled_span(events, cap.captured_with().nth_exec)
    ts, dur = x["ts"], x["dur"]
    start, end = ts[span], ts[span] + dur[span]
    ops = (x["cat"] == events.cats.get("cpu_op", -2)) & (start <= ts) & (ts <= end)
    total_s = dur[span] * 1e-9
    active_s = union_length(ts[ops], ts[ops] + dur[ops]) * 1e-9
    return {
        "total_time": total_s,
        "total_active_time": active_s,
        "total_active_time_percent": active_s / total_s if total_s > 0 else None,
        "event_count": int(ops.sum()),
        "model_flops": cap.details.get("profiler_flops"),
        "instance_type": cap.details["host"]["cpu"],
        "profiler_version": cap.profiler,
    }


def view(cap: CaptureRecord, capture_dir: Path, out_dir: Path, settings: ViewSettings) -> ViewFields:
    """Summarize the capture's Chrome trace around the profiled execution in the Neuron summary's field names and
    units, and convert it to trace.pftrace.

    Args:
        cap: the case's capture record.
        capture_dir: the folder holding its trace.
        out_dir: the case's view/ folder.
        settings: the view settings (the cpu backend uses none of the profiler's).

    Returns:
        view.json's fields: the summary and the pftrace's name and event counts.
    """
    with chrome_trace.read(capture_dir / TRACE, spill_dir=out_dir) as events:
        summary = summarize_trace(events, cap)
        counts = pftrace.write(events, out_dir / "trace.pftrace")
    return {"summary": summary, "pftrace": "trace.pftrace", "pftrace_counts": counts}


CALIBRATION_FORMAT = (
    "gemm grown from 256^3 until one run takes 0.2 s, best within 3 s, per dtype; copy 256 MiB best-of-5, v2"
)
CALIB_RUN_S = 0.2  # one GEMM this long is past caches and thread start-up on any host
CALIB_MAX_N = 4096


def _calibrate_gemm(torch: ModuleType, dtype: str) -> caps.GemmRate:
    """Grow an n^3 GEMM until one run takes CALIB_RUN_S (or the budget would not allow the next
    size), then keep its best rate over the remaining budget."""
    deadline = time.perf_counter() + caps.CALIBRATION_BUDGET_S
    n = caps.PROBE_N
    while True:
        rate, _ = caps.measure_gemm(torch, dtype, n, 0.0)
        run_s = 2 * n**3 / rate
        # the next size costs ~8x (a warm-up and a timed run), and the final measurement one run more
        if run_s >= CALIB_RUN_S or n >= CALIB_MAX_N or time.perf_counter() + 3 * 8 * run_s > deadline:
            break
        n *= 2
    rate, runs = caps.measure_gemm(torch, dtype, n, max(0.0, min(1.0, deadline - time.perf_counter())))
    return {"flops_per_s": rate, "n": n, "runs": runs}


def calibrate(threads: int, cache_root: Path, dtypes: list[str], device_lock: str | Path) -> caps.Calibration:
    """The host's measured peaks for the roofline: GEMM FLOP/s for each dtype asked (sized by time) and
    copy bandwidth. Cached per machine (CPU model, cores, torch, threads) under the compile cache root;
    a dtype not yet in the cache entry is measured and added. Measures under the device lock, so no
    capture of any process runs beside it."""
    import torch

    fingerprint: caps.KeyedFingerprint = {**caps.fingerprint(threads), "format": CALIBRATION_FORMAT}
    entry = Path(cache_root).expanduser() / "calibration" / f"{cache_key(dict(fingerprint))[:16]}.json"
    cached = read_json(entry) if entry.is_file() else None
    missing = [d for d in dtypes if not cached or d not in cached["gemm"]]
    if cached and not missing:
        return _calibration_view(cached, dtypes, cache_hit=True)
    torch.set_num_threads(threads)
    with devicelock.held(device_lock, f"cpu calibration ({', '.join(missing)})"), torch.inference_mode():
        gemm = {**(cached or {}).get("gemm", {}), **{d: _calibrate_gemm(torch, d) for d in missing}}
        copy = cached["copy"] if cached else _calibrate_copy(torch)
    record: caps.CalibrationEntry = {
        **fingerprint,
        "flags": caps.cpu_flags(),
        "gemm": gemm,
        "copy": copy,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "method": "torch.matmul of n x n per dtype, n grown until one run takes 0.2 s, best run within 3 s; "
        "Tensor.copy_ of 256 MiB (read + write), best of 5 after warm-up",
        "theoretical_peak_note": "not derived: the FMA units per core and the sustained vector clock are not "
        "exposed by the OS; the CPU flags above say which vector paths exist",
    }
    write_json(entry, record)
    return _calibration_view(record, dtypes, cache_hit=False)


def _calibrate_copy(torch: ModuleType) -> dict[str, float]:
    src = torch.empty(64 * 2**20, dtype=torch.float32)  # 256 MiB, far beyond any cache
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(5))
    return {"bytes_per_s": 2 * src.numel() * 4 / best}


def _calibration_view(record: caps.CalibrationEntry, dtypes: list[str], cache_hit: bool) -> caps.Calibration:
    """calibration.json: the cache entry restricted to the sweep's dtypes, with the peaks extract reads."""
    gemm = {d: record["gemm"][d] for d in dtypes}
    rest = {k: v for k, v in record.items() if k != "gemm"}  # the entry's own order, the sweep's gemm after it
    return cast(
        caps.Calibration,
        {
            **rest,
            "gemm": gemm,
            "peak_flops_per_s": {d: g["flops_per_s"] for d, g in gemm.items()},
            "peak_bytes_per_s": record["copy"]["bytes_per_s"],
            "cache_hit": cache_hit,
        },
    )


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
