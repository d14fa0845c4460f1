"""One case's metrics.json values: the parts in the file's order, each built from the records and the
parts before it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from neuronsweep.analysis.device_collectives import DeviceRanks
from neuronsweep.analysis.metrics.bounds import Bounds, Efficiency, Evidence, headroom, window_ladder
from neuronsweep.analysis.metrics.collectives import (
    RanksProfiled,
    collective,
    forward_across_ranks,
    nccom_test,
    rank_latency,
    rank_spread,
    rank_waits,
)
from neuronsweep.analysis.metrics.compilation import compilation
from neuronsweep.analysis.metrics.counters import profile_counters
from neuronsweep.analysis.metrics.layer_split import layer_split
from neuronsweep.analysis.metrics.memory import memory
from neuronsweep.analysis.metrics.output_check import correctness
from neuronsweep.analysis.metrics.parts import Part
from neuronsweep.analysis.metrics.peaks import Peaks, neuron_peaks
from neuronsweep.analysis.metrics.timing import timing
from neuronsweep.analysis.metrics.utilization import utilization
from neuronsweep.analysis.metrics.work import work
from neuronsweep.analysis.window_inputs import WindowInputs
from neuronsweep.config.backends import BACKENDS
from neuronsweep.host.caps import Calibration
from neuronsweep.store.layer_split import LayerSplitRecord
from neuronsweep.store.records import BuildRecord, CaptureRecord
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import described

SCHEMA_VERSION = 1


@dataclass(kw_only=True)
class Identity(Part):
    """Which case, which backend, which profile format and which NeuronCore target."""

    schema_version: int
    workload_id: str | None
    backend: str
    kind: str | None
    instance_type: str | None
    profile_schema_version: str | None
    neuron_target: str | None
    lnc: int | None


@dataclass(kw_only=True)
class SingleIo(Part):
    """Whether the neuron capture ran in the profiler's --single-io mode (its OOM retry)."""

    single_io: bool | None


def compose(
    summary: dict,
    capture: CaptureRecord | None,
    build: BuildRecord | None,
    calibration: Calibration | None = None,
    metadata: dict | None = None,
    usage: dict | None = None,
    ranks: list[dict] | None = None,
    dma_packets: int | None = None,
    profile_split: tuple[LayerSplitRecord | None, str | None] | None = None,
    warnings: list | None = None,
    windows: tuple[dict[str, WindowInputs] | None, str | None] | None = None,
    *,
    evidence: Evidence | None = None,
    invalid: dict[str, str] | None = None,
    no_device_why: dict[str, str | None] | None = None,
    device: DeviceRanks | None = None,
) -> dict[str, Any]:
    """metrics.json's values from a view summary plus, when known, the capture and build records, (cpu) the
    host calibration and (neuron) the profile's metadata, whose device peaks beat any table, and a layer's split
    (framework_split.split's (split, why)); with "spec" and "notes" (every null value's reason). `warnings`: the
    profile's own (None where its form has none); `evidence`: its tables' throttling and DMA descriptors
    (bounds.evidence); `invalid`: summary field -> why the reader left it out; `no_device_why`: backend -> why;
    `device`: the profiled ranks' collective operations on one timeline (analysis/device_collectives.py)."""
    known = [r for r in (build, capture) if r is not None]
    spec = next((r.spec for r in known if r.spec), None)
    backend = known[0].backend if known else "neuron"  # a bare summary-json is a Neuron tool's output
    no_device = (no_device_why or {}).get(backend)
    identity = Identity(
        schema_version=SCHEMA_VERSION,
        workload_id=known[0].workload_id if known else None,
        backend=backend,
        kind=described(spec).name if spec else None,
        instance_type=summary.get("instance_type"),
        profile_schema_version=(metadata or {}).get("profile_schema_version"),
        neuron_target=None,
        lnc=None,
    )
    if identity.profile_schema_version is None:
        identity.notes["profile_schema_version"] = "the view has no parquet Metadata with profile_schema_version"
    peaks = neuron_peaks(build, summary, metadata, identity.notes) if BACKENDS[backend].neuron_device else None
    if peaks:
        identity.neuron_target, identity.lnc = peaks.target, peaks.lnc
    else:
        identity.notes["neuron_target"] = identity.notes["lnc"] = (
            f"only neuron profiles run on a NeuronCore target (this is {backend})"
        )
    counters = profile_counters(
        summary,
        backend,
        invalid or {},
        no_device,
        summary.get("dma_transfer_count") if dma_packets is None else dma_packets,
        capture,
    )
    timed = timing(capture, backend, counters.profile_total_time_s)
    parts: list[Part] = [identity, counters, timed, memory(usage, backend, no_device)]
    if peaks is not None:  # a NeuronCore's profile: its headroom
        parts += headroom(summary, counters, peaks, warnings, evidence)
    else:
        why = no_device or f"the {backend} backend's profile has no NeuronCore summary to bound"
        parts += [Bounds.null(why), Efficiency.null(why)]
    parts += _ranks(spec, capture, timed.latency_median_s, identity.neuron_target, ranks, device)
    if described(spec).layer_split:  # only a model's layer or head has a split
        bounded = _window_ladders(windows, peaks, warnings)
        parts.append(layer_split(capture, backend, timed.latency_median_s, profile_split, bounded))
    analytic, tiles, placed = work(spec, backend, build, peaks, calibration, counters, timed.latency_median_s)
    parts += [
        analytic,
        tiles,
        placed,
        compilation(build, backend, timed.recompiles_during_timing),
        correctness(build, capture),
        utilization(backend, peaks, counters, analytic, placed),
        SingleIo(
            single_io=capture.single_io if capture else None,
            notes={}
            if capture and capture.single_io is not None
            else {"single_io": "only neuron captures have a --single-io mode"},
        ),
    ]
    return {**_joined(parts), "spec": spec}


def _window_ladders(
    windows: tuple[dict[str, WindowInputs] | None, str | None] | None,
    peaks: Peaks | None,
    warnings: list | None,
) -> tuple[dict[str, dict] | None, str | None] | None:
    """Each category's window ladder (bounds.window_ladder), or why none; None where no window was read."""
    if windows is None:
        return None
    found, why = windows
    ladders = {c: window_ladder(w, peaks, warnings) for c, w in (found or {}).items()}
    return {
        c: {**dict(b.items()), "notes": b.notes} for c, b in ladders.items()
    } or None, why  # as metrics.json has them


def _ranks(
    spec: Spec | None,
    capture: CaptureRecord | None,
    median_s: float | None,
    target: str | None,
    ranks: list[dict] | None,
    device: DeviceRanks | None = None,
) -> list[Part]:
    """A collective's size, rank spread and nccom-test figures; a multi-worker capture's spread of each rank's
    device time; how many ranks were profiled."""
    device_times = [r["total_time_s"] for r in ranks or [] if r["total_time_s"] is not None]
    parts: list[Part] = []
    if spec and described(spec).ranks:  # only a case run on ranks has these keys
        medians = [r["median_s"] for r in rank_latency(capture)]
        spread = rank_spread(
            device_times if ranks else medians, None if medians else "capture.json has no per-rank times"
        )
        if described(spec).bandwidth:  # a collective alone: its size, algbw and busbw
            size = collective(spec, capture, median_s, target, ranks)
            parts += [size, spread, nccom_test(capture, size.busbw_bytes_per_s), rank_waits(capture, device)]
        else:  # a forward across ranks
            parts += [spread, rank_waits(capture, device), forward_across_ranks(capture, ranks, device)]
    elif ranks:  # a multi-worker neuron capture: each rank's device time, its collectives on one timeline
        parts += [rank_spread(device_times)] + ([rank_waits(capture, device)] if device is not None else [])
    if ranks:
        parts.append(RanksProfiled(ranks_profiled=len(ranks)))
    return parts


def _joined(parts: list[Part]) -> dict[str, Any]:
    """The parts' values and, under "notes", every null value's reason; a number that cannot be true (NaN,
    infinity: not even JSON) is never written, its note says why."""
    values: dict[str, Any] = {}
    notes: dict[str, str] = {}
    for part in parts:
        values.update(part.items())
        notes.update(part.notes)
    for key, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            values[key] = None
            notes[key] = f"came out {value} from the inputs; left null"
    return {**values, "notes": notes}
