"""What the host CPU can do, for the cpu backend: its relevant flags, a 50 ms GEMM probe per dtype,
and the load on the machine around a measurement.

PyTorch's bf16 and fp16 GEMMs are fast only where the CPU (or oneDNN's emulation) has a path for
them; elsewhere they fall back to a reference loop hundreds of times slower than fp32 (0.34 GFLOP/s
bf16 against 74 fp32 on a 2-core AVX2 laptop). Flags alone cannot tell (AVX-512 hosts without
avx512_bf16 still emulate bf16 well), so the plan rests on a measured probe: a 256^3 GEMM per dtype,
timed for about 50 ms outside Snakemake's own process (the run's warm server on a cold cache, else a
child of its own), cached per host and torch version beside the compile cache.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, NotRequired, TypedDict

from neuronsweep.atomic import read_json, write_json
from neuronsweep.environment import WARM_JOB
from neuronsweep.errors import UserError
from neuronsweep.store.cache import cache_key
from neuronsweep.workloads import TORCH_DTYPES

PROBE_FORMAT = "gemm 256^3 per dtype for ~50 ms, v2"
PROBE_N = 256  # below this, fast paths may not kick in; above it, a slow path takes seconds
PROBE_BUDGET_S = 0.05
# A dtype whose probe rate is below fp32's / SLOW_FACTOR has no fast path: natively supported and
# emulated bf16 run at 0.5-3x fp32, reference paths at 1/50-1/250 (measured on our hosts).
SLOW_FACTOR = 8.0
DTYPES = ("fp32", "bf16", "fp16")
CALIBRATION_BUDGET_S = 3.0  # per dtype (backends/cpu.py calibrate; plan.estimate counts it): never outweighs the sweep
# flags that decide whether a dtype's GEMM has a fast path (x86 /proc/cpuinfo "flags", arm "Features")
RELEVANT_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
    "asimd",
    "asimdhp",
    "fphp",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
)


@dataclass(frozen=True)
class HostProbe:
    """The host's probe as its cached record holds it (<cache_dir>/host/probe-*.json, whose keys stay the
    file's): each dtype's GEMM rate, the CPU's relevant flags, what importing the table stack and torch took,
    and how, where and when it was measured."""

    gemm_flops_per_s: Mapping[str, float]
    stack_import_s: float
    torch_import_s: float
    flags: tuple[str, ...] = ()
    threads: int | None = None
    method: str | None = None
    measured_at: str | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> HostProbe:
        """The probe of a record (the cached file's, or a test's)."""
        said = ("threads", "method", "measured_at")
        return cls(
            dict(record["gemm_flops_per_s"]),
            record["stack_import_s"],
            record["torch_import_s"],
            tuple(record.get("flags") or ()),
            **{k: record[k] for k in said if k in record},
        )


def host_record() -> dict[str, str]:
    """What a capture record says of the host it measured on."""
    import platform
    import sys

    return {"cpu": cpu_model(), "machine": platform.machine(), "python": sys.version.split()[0]}


def cpu_model() -> str:
    """The CPU's model name (for the calibration cache key and capture.json's host)."""
    for line in _cpuinfo_lines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def cpu_flags() -> list[str]:
    """The relevant CPU flags present on this host (empty where /proc/cpuinfo is not available)."""
    for line in _cpuinfo_lines():
        if line.startswith(("flags", "Features")):
            present = set(line.split(":", 1)[1].split())
            return [f for f in RELEVANT_FLAGS if f in present]
    return []


class Fingerprint(TypedDict):
    """What a probe or calibration result depends on (its cache entry's key)."""

    cpu: str
    machine: str
    cores: int | None
    threads: int
    torch: str | None


class KeyedFingerprint(Fingerprint):
    """A fingerprint with the format of the record it keys (a new format measures again)."""

    format: str


class GemmRate(TypedDict):
    """A dtype's measured GEMM rate: the best of `runs` n^3 GEMMs."""

    flops_per_s: float
    n: int
    runs: int


class CalibrationEntry(KeyedFingerprint):
    """A host calibration as its cache entry keeps it: each dtype's GEMM rate and the copy bandwidth."""

    flags: list[str]
    gemm: dict[str, GemmRate]
    copy: dict[str, float]  # bytes_per_s
    measured_at: str
    method: str
    theoretical_peak_note: str


class Calibration(CalibrationEntry):
    """calibration.json: the entry for the sweep's dtypes, with the peaks extract reads."""

    peak_flops_per_s: dict[str, float]
    peak_bytes_per_s: float
    cache_hit: bool


def fingerprint(threads: int) -> Fingerprint:
    """What a probe or calibration result depends on; read without importing torch."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return {
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "threads": threads,
        "torch": torch_version,
    }


def measure_gemm(torch: ModuleType, dtype_name: str, n: int, budget_s: float) -> tuple[float, int]:
    """Best FLOP/s of n^3 GEMMs repeated for about budget_s (at least one timed run after one warm-up)."""
    a = torch.randn(n, n, dtype=getattr(torch, TORCH_DTYPES[dtype_name]))
    with torch.inference_mode():
        a @ a
        best, runs, t_end = float("inf"), 0, time.perf_counter() + budget_s
        while runs == 0 or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            a @ a
            best = min(best, time.perf_counter() - t0)
            runs += 1
    return 2 * n**3 / best, runs


STACK = ("duckdb", "pandas", "pyarrow")  # the table stack view, extract and aggregate import


def timed_imports() -> dict[str, float]:
    """Import the table stack, then torch, each timed: what every job pays on its own (plan's estimate).
    Only meaningful in a process that has imported neither yet (the probe's child, or the warm server as
    it starts)."""
    import importlib

    t0 = time.perf_counter()
    for name in STACK:
        importlib.import_module(name)
    t1 = time.perf_counter()
    import torch  # noqa: F401

    t2 = time.perf_counter()
    return {"stack_import_s": t1 - t0, "torch_import_s": t2 - t1}


def gemm_rates(threads: int) -> dict[str, dict[str, float]]:
    """Each dtype's GEMM rate on `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    return {"gemm_flops_per_s": {d: measure_gemm(torch, d, PROBE_N, PROBE_BUDGET_S)[0] for d in DTYPES}}


def probe(cache_root: str | Path, threads: int, measure: Callable[[int], dict | None] | None = None) -> HostProbe:
    """The host's probe (its record cached, read as a HostProbe): flags, import times, GEMM FLOP/s per dtype.
    Measured by `measure(threads)` when given and it answers (the run's warm server, which imports torch
    anyway: common.smk), else in a child of its own (torch stays out of Snakemake's process)."""
    fp: KeyedFingerprint = {**fingerprint(threads), "format": PROBE_FORMAT}
    entry = _entry(cache_root, fp)
    if entry.is_file():
        return HostProbe.of(read_json(entry))
    measured = measure(threads) if measure is not None else None
    where = "the run's warm server" if measured is not None else "a child of its own"
    record = {
        **fp,
        "flags": cpu_flags(),
        **(measured if measured is not None else _measure_in_child(threads)),
        "measured_in": where,
        "method": PROBE_FORMAT,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        write_json(entry, record)
    except OSError as exc:
        raise UserError(
            f"config key 'cache_dir' = {str(cache_root)!r} is not a writable folder ({exc.strerror} "
            f"at {exc.filename or entry}); point it at one."
        ) from None
    return HostProbe.of(record)


def probe_entry(cache_root: str | Path, threads: int) -> Path:
    """Where the probe record of this host (and torch, and thread count) is kept."""
    return _entry(cache_root, {**fingerprint(threads), "format": PROBE_FORMAT})


def _entry(cache_root: str | Path, fp: KeyedFingerprint) -> Path:
    return Path(cache_root).expanduser() / "host" / f"probe-{cache_key(dict(fp))[:16]}.json"


def _measure_in_child(threads: int) -> dict:
    cmd = [sys.executable, "-m", __name__, "--threads", str(threads)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise UserError(
            "the host probe (a 256^3 GEMM per dtype) did not finish in 300 s; the machine is "
            "overloaded or torch is broken: check `python -c 'import torch'`."
        ) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"the host probe failed ({last}); the cpu backend needs a working PyTorch "
            "(pip install torch==2.13.0, or PyTorch's CPU wheel)."
        )
    return json.loads(proc.stdout)


def slow_dtypes(probe: HostProbe) -> dict[str, str]:
    """dtype -> why the cpu backend will not run it on this host (its GEMM has no fast path here)."""
    rates = probe.gemm_flops_per_s
    flags = ", ".join(probe.flags) or "none of " + ", ".join(RELEVANT_FLAGS[:8])
    out = {}
    for dtype, rate in rates.items():
        if dtype != "fp32" and rate * SLOW_FACTOR < rates["fp32"]:
            out[dtype] = (
                f"this host has no fast {dtype} GEMM: a {PROBE_N}^3 {dtype} matmul ran at "
                f"{rate / 1e9:.2f} GFLOP/s against {rates['fp32'] / 1e9:.1f} for fp32 "
                f"({rates['fp32'] / rate:.0f}x slower; CPU flags: {flags}); on cpu use fp32, "
                "or a host with native support (avx512_bf16/amx for bf16, avx512_fp16/amx_fp16 for fp16)"
            )
    return out


# ----------------------------------------------------------------------------------- machine load


class LoadWatch:
    """The host's load over one capture: started before it, read after it. Other processes' CPU use
    is measured over the whole span (psutil's counters primed at the start), so a process that ran
    only while the workload was timed is seen, and no capture waits for a sampling window."""

    def __init__(self) -> None:
        import psutil

        me = psutil.Process()
        self._own = {me.pid} | {p.pid for p in me.parents()}  # the job, its shell, Snakemake
        job = os.environ.get(WARM_JOB)  # forked by the warm server: the job's own line
        if job and job.isdigit():
            try:
                self._own |= {int(job)} | {p.pid for p in psutil.Process(int(job)).parents()}
            except psutil.Error:
                pass
        self._procs = []
        for p in psutil.process_iter(["pid", "name"]):
            if p.pid in self._own:
                continue
            try:
                p.cpu_percent(None)
                self._procs.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        self.start = _host_state()  # other processes' CPU is measured over the span: see `stop`

    def stop(self) -> HostState:
        """The end snapshot: other processes' CPU use since the start, the load average now."""
        import psutil

        busy = []
        for p in self._procs:
            try:
                pct = p.cpu_percent(None)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if pct >= 5.0:
                busy.append({"pid": p.pid, "name": p.info["name"], "cpu_pct": round(pct, 1)})
        busy.sort(key=lambda b: -b["cpu_pct"])
        return {
            **_host_state(),
            "other_processes_cpu_pct": round(sum(b["cpu_pct"] for b in busy), 1),
            "busiest_others": busy[:5],
        }


class HostState(TypedDict):
    """The host at one moment of a capture (capture.json's `host_load` start and end)."""

    unix: float
    loadavg_1m: float
    cores: int | None
    governor: str | None  # the CPU frequency governors, joined
    cpu_mhz: int | None
    other_processes_cpu_pct: float | None  # over the capture (the end's; None at the start)
    busiest_others: NotRequired[list[dict[str, Any]]]  # pid, name, cpu_pct of each busy other process


def _host_state() -> HostState:
    import psutil

    governors = set()
    for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"):
        try:
            governors.add(path.read_text().strip())
        except OSError:
            pass
    freq = psutil.cpu_freq()
    return {
        "unix": time.time(),
        "loadavg_1m": os.getloadavg()[0],
        "cores": os.cpu_count(),
        "governor": ", ".join(sorted(governors)) or None,
        "cpu_mhz": round(freq.current) if freq else None,
        "other_processes_cpu_pct": None,
    }


LOADED_CPU_PCT = 50.0  # other processes using half a core or more


def under_load(start: HostState, end: HostState) -> str | None:
    """Why a capture counts as taken under load, or None."""
    worst = max((start, end), key=lambda s: s.get("other_processes_cpu_pct") or 0.0)
    if (worst.get("other_processes_cpu_pct") or 0.0) < LOADED_CPU_PCT:
        return None
    names = ", ".join(f"{b['name']} ({b['cpu_pct']:.0f}%)" for b in worst["busiest_others"][:3])
    return (
        f"other processes used {worst['other_processes_cpu_pct']:.0f}% of a core beside the capture "
        f"({names}); load average {worst['loadavg_1m']:.2f} on {worst['cores']} cores"
    )


def main(argv: list[str] | None = None) -> int:
    """The host probe in its own process: one GEMM per dtype timed, printed as JSON (plan's estimate)."""
    import argparse

    ap = argparse.ArgumentParser(description="time one GEMM per dtype (the host probe); prints JSON")
    ap.add_argument("--threads", type=int, required=True)
    args = ap.parse_args(argv)
    print(json.dumps({**timed_imports(), **gemm_rates(args.threads)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
