"""The workload's analytic FLOPs and bytes, the rates they give, the Trainium tile model (neuron only)
and where the measurement sits on the roofline of the platform that ran it; a collective has none of
them (it moves data), a bare summary no spec to count."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis import roofline
from neuronsweep.analysis.metrics.counters import ProfileCounters
from neuronsweep.analysis.metrics.parts import Part, ratio
from neuronsweep.analysis.metrics.peaks import Peaks
from neuronsweep.config.backends import BACKENDS
from neuronsweep.host.caps import Calibration
from neuronsweep.store.records import BuildRecord
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import counted_how, described, dtype_of, gemms, has_roofline, min_bytes, no_roofline_why
from neuronsweep.workloads import flops as work_flops


@dataclass(kw_only=True)
class Work(Part):
    """The workload's analytic FLOPs and minimum bytes (workloads/), the rates they give over the measured times, and
    its arithmetic intensity."""

    flops: float | None
    achieved_flops_per_s: float | None
    profile_flops_per_s: float | None
    min_bytes: float | None
    arithmetic_intensity_flops_per_byte: float | None


@dataclass(kw_only=True)
class Tiles(Part):
    """The Trainium tile model: tile counts on the 128x128 PE array (analysis/roofline.py `tiles`)."""

    tiles_m: int | None
    tiles_k: int | None
    tiles_n: int | None
    tiles_total: int | None
    tile_utilization_pct: float | None


@dataclass(kw_only=True)
class Roofline(Part):
    """The platform's peaks and their source, the ideal compute and memory times, the ridge point, the bound, and the
    measured time's efficiency against the roofline."""

    peak_flops_per_s: float | None
    peak_bytes_per_s: float | None
    peak_source: str | None
    ideal_compute_s: float | None
    ideal_memory_s: float | None
    ridge_flops_per_byte: float | None
    roofline_bound: str | None
    roofline_efficiency_pct: float | None
    roofline_time_s: float | None


def work(
    spec: Spec | None,
    backend: str,
    build: BuildRecord | None,
    peaks: Peaks | None,
    calibration: Calibration | None,
    counters: ProfileCounters,
    latency_median_s: float | None,
) -> tuple[Work, Tiles, Roofline]:
    """The analytic work, the tile model and the roofline placement of one case, or all three null with the reason (a
    collective, a user's function without FLOPs, no spec)."""
    if spec and not has_roofline(spec):
        reason = no_roofline_why(spec)
        return Work.null(reason), Tiles.null(reason), Roofline.null(reason)
    if not spec:
        reason = "no build.json given, so the workload spec (and its FLOPs and bytes) is unknown"
        return Work.null(reason), Tiles.null(reason), Roofline.null(reason)
    flops, least = work_flops(spec), min_bytes(spec)
    analytic = Work(
        flops=flops,
        achieved_flops_per_s=ratio(flops, latency_median_s),
        profile_flops_per_s=ratio(flops, counters.profile_total_time_s),
        min_bytes=least,
        arithmetic_intensity_flops_per_byte=flops / least,
    )
    counted = counted_how(spec)  # a user's function, a model's part: where its FLOPs and bytes came from
    if counted:
        analytic.notes["flops"], analytic.notes["min_bytes"] = counted
    if BACKENDS[backend].neuron_device:
        tiles = Tiles(**roofline.tiles(gemms(spec)))
        for key in ("tiles_m", "tiles_k", "tiles_n", "tiles_total"):
            if getattr(tiles, key) is None:
                tiles.notes[key] = (
                    f"the tile model counts GEMMs, and a {described(spec).name} workload names none"
                    if not gemms(spec)
                    else f"a {described(spec).name} workload is several GEMMs; see tiles_total"
                )
    else:
        tiles = Tiles.null(
            f"the Trainium tile model (128x128 PE array) says nothing about the {backend} backend; "
            "roofline_targets.csv has every workload's tiles on trn1, inf2 and trn2"
        )
    return (
        analytic,
        tiles,
        _roofline(analytic, dtype_of(spec), backend, build, peaks, calibration, counters, latency_median_s),
    )


def _roofline(
    analytic: Work,
    dtype: str,
    backend: str,
    build: BuildRecord | None,
    peaks: Peaks | None,
    calibration: Calibration | None,
    counters: ProfileCounters,
    latency_median_s: float | None,
) -> Roofline:
    """Peaks of the platform that ran it (the Neuron profile's metadata or target table, or the host's
    calibration) and where the measurement sits against them. Measured time: device busy time on neuron
    (total_time also holds about 2 ms of start-up per execution on real trn1 profiles), framework
    median on cpu."""
    notes: dict[str, str] = {}
    if peaks is not None:
        peak_f = peaks.bf16_flops_per_s / (peaks.fp32_ratio if dtype == "fp32" else 1)
        peak_b, source = peaks.hbm_bytes_per_s, peaks.source
        measured, basis = counters.profile_active_time_s, "profile_active_time_s"
        if measured is None:
            measured, basis = _busiest_engine_time(counters)
            if measured is not None:
                notes["roofline_time_s"] = (
                    f"the summary has no total_active_time (tools before 2.27): {basis}, the busiest engine's "
                    "active time, a lower bound of the device's active time"
                )
    elif BACKENDS[backend].pjrt and build and build.pjrt_device != "CPU":
        return Roofline.null(f"no peaks known for PJRT device {build.pjrt_device} (the host calibration is the CPU's)")
    elif calibration and calibration["peak_flops_per_s"].get(dtype):
        peak_f, peak_b = calibration["peak_flops_per_s"][dtype], calibration["peak_bytes_per_s"]
        source = f"measured on this host: {calibration['method']} ({calibration['measured_at']})"
        measured, basis = latency_median_s, "latency_median_s"
    else:
        return Roofline.null(
            "no host calibration given (neuronsweep calibrate)"
            if not calibration
            else f"the host calibration has no {dtype} peak"
        )
    flops, min_bytes = analytic.flops, analytic.min_bytes
    assert flops is not None and min_bytes is not None  # a spec with a roofline counts both
    place = roofline.roofline(flops, min_bytes, peak_f, peak_b, measured)
    efficiency = place["roofline_efficiency_pct"]
    if measured is None:
        notes["roofline_efficiency_pct"] = f"no {basis} was measured"
    elif efficiency is not None and efficiency > 100 and peaks is None:  # host peaks: a floor, not a ceiling
        raised = roofline.raised_to_achieved(flops, min_bytes, peak_f, peak_b, measured, source)
        peak_f, peak_b, source = raised["peak_flops_per_s"], raised["peak_bytes_per_s"], raised["peak_source"]
        place = roofline.roofline(flops, min_bytes, peak_f, peak_b, measured)  # raised's own place, its peaks apart
    elif efficiency is not None and efficiency > 100:
        notes["roofline_efficiency_pct"] = (
            f"above 100%: this run beat the {peaks.target if peaks else None} peak it is "
            "measured against; check the target and the profile's time basis"
        )
    return Roofline(
        peak_flops_per_s=peak_f,
        peak_bytes_per_s=peak_b,
        peak_source=source,
        **place,
        roofline_time_s=measured,
        notes=notes,
    )


def _busiest_engine_time(counters: ProfileCounters) -> tuple[float | None, str]:
    """The longest active time of one engine or DMA."""
    times = {name: t for name, t in counters.engine_times().items() if t is not None}
    if not times:
        return None, "an engine's active time"
    top = max(times, key=lambda name: times[name])
    return times[top], f"{top}_active_time"
