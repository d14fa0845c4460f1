"""The capture's timed executions: latency and its spread (and whether it is too noisy to judge), the
host's load, the device's own execute time, threads, framework overhead and compiles during timing."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis.metrics.parts import Part, ratio
from neuronsweep.analysis.stats import DEVICE_TIMES, NOISY_REL_SPREAD
from neuronsweep.config.backends import BACKENDS
from neuronsweep.store.records import CaptureRecord


@dataclass(kw_only=True)
class Timing(Part):
    """The framework's timed executions (median, IQR, min, spread, count), whether they are too noisy or were taken
    under load, and what else the timing loop saw."""

    latency_median_s: float | None
    latency_iqr_s: float | None
    latency_min_s: float | None
    latency_spread_s: float | None
    latency_n: int | None
    latency_rel_spread: float | None
    noisy: bool | None
    captured_under_load: bool | None
    execute_median_s: float | None
    threads: int | None
    framework_overhead_s: float | None
    recompiles_during_timing: int | None


def timing(capture: CaptureRecord | None, backend: str, profile_total_time_s: float | None) -> Timing:
    """Timing from capture.json's latency; framework overhead is the median less the device's time
    (neuron: the profile's total_time, xla: ExecuteTime's median)."""
    notes: dict[str, str] = {}
    lat = (capture.latency if capture else None) or {}
    median, spread = lat.get("median_s"), lat.get("spread_s")
    rel_spread = ratio(spread, median)
    noisy = None if rel_spread is None else rel_spread > NOISY_REL_SPREAD
    if noisy is None:
        notes["latency_rel_spread"] = notes["noisy"] = "no framework timing with a spread was recorded"
    elif noisy and spread is not None and rel_spread is not None:
        notes["noisy"] = (
            f"spread {spread * 1e6:.1f} us is {100 * rel_spread:.0f}% of the "
            f"median: not used for recommendations; recapture on a quiet machine"
        )
    load = capture.host_load if capture else None
    if load is None:
        notes["captured_under_load"] = "capture.json has no host load snapshot"
    elif load["under_load"]:
        notes["captured_under_load"] = load["under_load"]
    execute = (lat.get("execute") or {}).get("median_s")
    if execute is None:
        notes["execute_median_s"] = (
            f"the {backend} framework timing has no per-iteration ExecuteTime "
            "(torch_xla.debug.metrics, recorded by the torch-xla runtime)"
        )
    threads = capture.threads if capture else None
    if threads is None:
        notes["threads"] = f"the {backend} backend leaves threading to its runtime"
    # the backend's device time where its device is apart from the framework (cpu's profiled time is the host's)
    device_s = {"profile_total_time_s": profile_total_time_s, "execute_median_s": execute}.get(
        BACKENDS[backend].device_time[0]
    )
    overhead = None
    if lat.get("samples_are") == DEVICE_TIMES:  # NKI: the samples are the profiler's device times
        notes["framework_overhead_s"] = notes["latency_median_s"] = lat["basis"]
    elif median is not None and device_s is not None:
        overhead = median - device_s
    else:
        notes["framework_overhead_s"] = (
            "framework median minus device time (neuron: profile total_time; xla: "
            "ExecuteTime median): needs both, and a device separate from the framework"
        )
    if not lat:
        notes["latency_median_s"] = (
            capture.latency_note if capture else None
        ) or f"no framework timing recorded (capture.json {'absent' if not capture else 'has none'})"
    recompiles = lat.get("recompiles_during_timing")
    if recompiles is None:
        notes["recompiles_during_timing"] = f"the {backend} framework timing does not count compiles"
    return Timing(
        latency_median_s=median,
        latency_iqr_s=lat.get("iqr_s"),
        latency_min_s=lat.get("min_s"),
        latency_spread_s=spread,
        latency_n=lat.get("n"),
        latency_rel_spread=rel_spread,
        noisy=noisy,
        captured_under_load=None if load is None else load["under_load"] is not None,
        execute_median_s=execute,
        threads=threads,
        framework_overhead_s=overhead,
        recompiles_during_timing=recompiles,
        notes=notes,
    )
