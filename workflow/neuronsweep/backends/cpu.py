"""CPU backend: PyTorch on the host CPU, measured for real.

build   torch.export the workload to a .pt2 (export uses meta tensors, so no input memory is needed)
capture load the .pt2, warm up, run num_exec executions with the nth under torch.profiler, then time
        `iterations` executions one by one (perf_counter_ns)
view    Chrome trace -> .pftrace, and a summary with the Neuron summary's field names and units
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from .. import pftrace
from ..analysis.intervals import union_length
from ..atomic import replacing, write_json
from ..cache import CompileCache, cache_key
from ..errors import UserError
from ..stats import latency_stats
from ..workloads import TORCH_DTYPES, kind_of, tensor_bytes, workload_id
from . import ARTIFACTS, EXEC_MARK, profiled_span

ARTIFACT = ARTIFACTS["cpu"]["build"]
TRACE = ARTIFACTS["cpu"]["capture"]
ARTIFACT_FORMAT = "torch.export .pt2, v1"
MEMORY_HEADROOM = 0.8  # use at most this share of available RAM for one case's tensors


def _torch_dtype(torch, name: str):
    return getattr(torch, TORCH_DTYPES[name])


def host_cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build(spec: dict, out_dir: Path, cache: CompileCache, options: dict) -> dict:
    import torch

    kind = kind_of(spec)
    key = cache_key({"spec": spec, "backend": "cpu", "torch": torch.__version__, "format": ARTIFACT_FORMAT})
    dest = out_dir / ARTIFACT
    meta = cache.fetch(key, ARTIFACT, dest)
    hit = meta is not None
    if not hit:
        shapes = kind.tensor_shapes(spec)
        dtype = _torch_dtype(torch, spec["dtype"])
        example = tuple(torch.empty(shapes[n], dtype=dtype, device="meta") for n in kind.input_names(spec))
        t0 = time.perf_counter()
        program = torch.export.export(kind.torch_module(spec), example)
        export_s = time.perf_counter() - t0
        with replacing(dest) as tmp:
            torch.export.save(program, str(tmp))
        meta = {"workload_id": workload_id(spec), "export_s": export_s, "torch_version": torch.__version__,
                "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        cache.store(key, dest, meta)
    return {
        "toolchain": {"torch": torch.__version__, "python": platform.python_version()},
        "compiler": "torch.export",
        "artifact_format": ARTIFACT_FORMAT,
        "compile_s": meta["export_s"],
        "compile_s_source": "this build" if not hit else f"cache entry exported {meta['exported_at']}",
        "cache": {"dir": str(cache.root), "key": key, "hit": hit, "entry": str(cache.entry(key))},
    }


def _available_bytes() -> int:
    import psutil

    return psutil.virtual_memory().available


def _check_memory(spec: dict) -> int:
    need = tensor_bytes(spec)
    avail = _available_bytes()
    if need > MEMORY_HEADROOM * avail:
        raise UserError(
            f"case {workload_id(spec)}: its tensors need {need / 2**30:.1f} GiB but only "
            f"{avail / 2**30:.1f} GiB of RAM is available; shrink the shape or run it on a larger machine.")
    return need


def capture(build_record: dict, build_dir: Path, settings: dict, out_dir: Path) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    spec = build_record["spec"]
    kind = kind_of(spec)
    tensor_bytes = _check_memory(spec)
    torch.set_num_threads(settings["threads"])
    module = torch.export.load(str(build_dir / ARTIFACT)).module()
    gen = torch.Generator().manual_seed(0)
    shapes, dtype = kind.tensor_shapes(spec), _torch_dtype(torch, spec["dtype"])
    inputs = [torch.randn(shapes[n], generator=gen, dtype=dtype) for n in kind.input_names(spec)]

    nth, prof = settings["nth_exec"], None
    with torch.inference_mode():
        for _ in range(settings["warmup"]):
            module(*inputs)
        for i in range(1, settings["num_exec"] + 1):
            if i != nth:
                module(*inputs)
                continue
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
                with record_function(f"{EXEC_MARK}{i}"):
                    module(*inputs)
        samples = []
        for _ in range(settings.get("repeats", 1) * settings["iterations"]):
            t0 = time.perf_counter_ns()
            module(*inputs)
            samples.append((time.perf_counter_ns() - t0) * 1e-9)
    with replacing(out_dir / TRACE) as tmp:
        prof.export_chrome_trace(str(tmp))
    return {
        "profiler": f"torch.profiler (torch {torch.__version__})",
        "profiled_exec": nth,
        "profiler_flops": sum(int(e.flops or 0) for e in prof.key_averages()),
        "latency": latency_stats(samples, settings.get("repeats", 1)),
        "threads": torch.get_num_threads(),
        "tensor_bytes": tensor_bytes,
        "host": {"cpu": host_cpu(), "machine": platform.machine(), "python": sys.version.split()[0]},
        "artifacts": {"trace": TRACE},
    }


def summarize_trace(trace: dict, capture_record: dict) -> dict:
    """The Neuron summary's fields that a CPU trace can honestly fill, in the same units (s, fractions)."""
    events, span = profiled_span(trace, capture_record["profiled_exec"])
    start, end = span["ts"], span["ts"] + span["dur"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and start <= e["ts"] <= end]
    total_s = span["dur"] * 1e-6
    active_s = union_length((e["ts"], e["ts"] + e["dur"]) for e in ops) * 1e-6
    return {
        "total_time": total_s,
        "total_active_time": active_s,
        "total_active_time_percent": active_s / total_s if total_s > 0 else None,
        "event_count": len(ops),
        "model_flops": capture_record.get("profiler_flops"),
        "instance_type": capture_record["host"]["cpu"],
        "profiler_version": capture_record["profiler"],
    }


def view(capture_record: dict, capture_dir: Path, out_dir: Path, options: dict) -> dict:
    trace = json.loads((capture_dir / TRACE).read_text())
    counts = pftrace.chrome_to_pftrace(trace, out_dir / "trace.pftrace")
    return {"summary": summarize_trace(trace, capture_record), "pftrace": "trace.pftrace", "pftrace_counts": counts}


CALIBRATION_FORMAT = "gemm 2048^3 best-of-5 + copy 256 MiB best-of-5, v1"


def calibrate(threads: int, cache_root: Path) -> dict:
    """The host's measured peaks for the roofline: best-of-5 GEMM FLOP/s per dtype and copy bandwidth.
    Cached per machine (CPU model, core count, torch, threads) under the compile cache root."""
    import torch

    fingerprint = {"cpu": host_cpu(), "machine": platform.machine(), "cores": os.cpu_count(),
                   "torch": torch.__version__, "threads": threads, "format": CALIBRATION_FORMAT}
    entry = Path(cache_root).expanduser() / "calibration" / f"{cache_key(fingerprint)[:16]}.json"
    if entry.is_file():
        return {**json.loads(entry.read_text()), "cache_hit": True}
    torch.set_num_threads(threads)
    peaks = {}
    with torch.inference_mode():
        for name in ("fp32", "bf16"):  # fp16 is not run on cpu (workloads/__init__.py CPU_UNSUPPORTED_DTYPES)
            a = torch.randn(2048, 2048, dtype=_torch_dtype(torch, name))
            for _ in range(2):
                a @ a
            best = min(_timed(lambda: a @ a) for _ in range(5))
            peaks[name] = 2 * 2048**3 / best
        src = torch.empty(64 * 2**20, dtype=torch.float32)  # 256 MiB, far beyond any cache
        dst = torch.empty_like(src)
        dst.copy_(src)
        best = min(_timed(lambda: dst.copy_(src)) for _ in range(5))
    record = {**fingerprint, "peak_flops_per_s": peaks, "peak_bytes_per_s": 2 * src.numel() * 4 / best,
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "method": "torch.matmul of 2048x2048 per dtype and Tensor.copy_ of 256 MiB (read + write), "
                        "best of 5 after warm-up"}
    write_json(entry, record)
    return {**record, "cache_hit": False}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
