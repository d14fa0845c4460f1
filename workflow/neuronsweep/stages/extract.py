"""extract stage: one normalized metrics.json per workload, same keys on every backend (docs/metrics.md).

Never imports torch. A value a backend cannot measure is null, with the reason in `notes`.
Neuron summary `*_percent` fields are fractions 0..1; they become `_pct` (0..100) here, once.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from neuronsweep.analysis import derived, roofline
from neuronsweep.analysis.stats import NOISY_REL_SPREAD
from neuronsweep.atomic import read_json, replacing
from neuronsweep.backends import BACKENDS
from neuronsweep.errors import UserError
from neuronsweep.formats import json_records, legacy_json, neuron_summary, profile_schema
from neuronsweep.formats.profile_db import ProfileDB, patterns_from
from neuronsweep.host.targets import TARGETS, target_family
from neuronsweep.store.records import BuildRecord, CaptureRecord, MetricsRecord, provenance
from neuronsweep.workloads import DTYPE_BYTES, collective, has_roofline, kind_of

SCHEMA_VERSION = 1
FRACTION_TO_PCT = 100.0
# spread / median above this marks a case noisy: torch.utils.benchmark's "gross" IQR/median warning

# metric key -> (summary field, scale). Units are in the key names.
PROFILE_FIELDS = {
    "profile_total_time_s": ("total_time", 1.0),
    "profile_active_time_s": ("total_active_time", 1.0),
    "profile_active_pct": ("total_active_time_percent", FRACTION_TO_PCT),
    "profile_flops_tool": ("model_flops", 1.0),
}
DEVICE_FIELDS = {
    **{
        f"{e}_engine_active_time_s": (f"{e}_engine_active_time", 1.0)
        for e in ("tensor", "vector", "scalar", "gpsimd", "sync")
    },
    **{
        f"{e}_engine_active_pct": (f"{e}_engine_active_time_percent", FRACTION_TO_PCT)
        for e in ("tensor", "vector", "scalar", "gpsimd", "sync")
    },
    "dma_active_time_s": ("dma_active_time", 1.0),
    "dma_active_pct": ("dma_active_time_percent", FRACTION_TO_PCT),
    "dma_transfer_bytes": ("dma_transfer_total_bytes", 1.0),
    "hbm_read_bytes": ("hbm_read_bytes", 1.0),
    "hbm_write_bytes": ("hbm_write_bytes", 1.0),
    "sbuf_read_bytes": ("sbuf_read_bytes", 1.0),
    "sbuf_write_bytes": ("sbuf_write_bytes", 1.0),
    "psum_read_bytes": ("psum_read_bytes", 1.0),
    "psum_write_bytes": ("psum_write_bytes", 1.0),
    "spill_save_bytes": ("spill_save_bytes", 1.0),
    "spill_reload_bytes": ("spill_reload_bytes", 1.0),
    "mfu_tool_pct": ("mfu_estimated_percent", FRACTION_TO_PCT),
    "mbu_tool_pct": ("mbu_estimated_percent", FRACTION_TO_PCT),
}


def _ratio(num, den):
    return num / den if num is not None and den else None


def compute(
    summary: dict,
    capture: CaptureRecord | None,
    build: BuildRecord | None,
    calibration: dict | None = None,
    metadata: dict | None = None,
    usage: dict | None = None,
    ranks: list[dict] | None = None,
    dma_packets: int | None = None,
) -> dict:
    """metrics.json's values from a view summary plus, when known, the capture and build records, (cpu)
    the host calibration and (neuron) the profile's metadata, whose device peaks beat any table. Every
    value that stays null gets its reason in `notes`; the parts below add their keys in metrics.json's
    order."""
    known = [r for r in (build, capture) if r is not None]
    spec = next((r.spec for r in known if r.spec), None)
    backend = known[0].backend if known else "neuron"  # a bare summary-json is a Neuron tool's output
    notes: dict[str, str] = {}
    m: dict = {
        "schema_version": SCHEMA_VERSION,
        "workload_id": known[0].workload_id if known else None,
        "backend": backend,
        "kind": spec["kind"] if spec else None,
        "instance_type": summary.get("instance_type"),
        "profile_schema_version": (metadata or {}).get("profile_schema_version"),
    }
    if m["profile_schema_version"] is None:
        notes["profile_schema_version"] = "the view has no parquet Metadata with profile_schema_version"
    peaks = neuron_peaks(build, summary, metadata, notes) if backend == "neuron" else None
    m.update(neuron_target=peaks["target"] if peaks else None, lnc=peaks["lnc"] if peaks else None)
    if not peaks:
        notes["neuron_target"] = notes["lnc"] = f"only neuron profiles run on a NeuronCore target (this is {backend})"
    _profile_counters(m, summary, backend, notes)
    _dma_evidence(m, summary.get("dma_transfer_count") if dma_packets is None else dma_packets, capture, notes)
    _framework_timing(m, capture, backend, notes)
    m.update(_memory(usage, backend, notes))
    m.update(_collective(spec, capture, m["latency_median_s"], notes, m["neuron_target"], ranks))
    if ranks:  # a multi-worker neuron capture: each rank's device time
        m.update(
            _rank_spread([r["total_time_s"] for r in ranks if r["total_time_s"] is not None]), ranks_profiled=len(ranks)
        )
    _work_and_roofline(m, spec, backend, build, peaks, calibration, notes)
    _compile(m, build, backend, notes)
    _correctness(m, build, capture, notes)
    m.update(_utilization(m, backend, peaks, notes))
    m["single_io"] = capture.single_io if capture else None
    if m["single_io"] is None:
        notes["single_io"] = "only neuron captures have a --single-io mode"
    for key, value in m.items():  # a number that cannot be true is never written (NaN is not even JSON)
        if isinstance(value, float) and not math.isfinite(value):
            m[key] = None
            notes[key] = f"came out {value} from the inputs; left null"
    m["spec"] = spec
    m["notes"] = notes
    return m


def _profile_counters(m: dict, summary: dict, backend: str, notes: dict) -> None:
    """The profile summary's fields, in our units; a device counter the backend has no device for is null."""
    for fields, device_only in ((PROFILE_FIELDS, False), (DEVICE_FIELDS, True)):
        for key, (field, scale) in fields.items():
            value = summary.get(field)
            m[key] = None if value is None else value * scale
            if value is None:
                why = summary.get(neuron_summary.INVALID, {}).get(field)
                why = why or (BACKENDS[backend].device_counters_missing if device_only else None)
                notes[key] = why or f"the {backend} profile summary has no '{field}' field"


CORRECTNESS = ("max_abs_error", "max_rel_error", "tolerance_rel", "correct")


def _correctness(m: dict, build: BuildRecord | None, capture: CaptureRecord | None, notes: dict) -> None:
    """The case's output against the float64 NumPy reference, checked once where the workload ran
    (build.json on neuron and xla, capture.json on cpu): analysis/correctness.py."""
    record = next((r.details["correctness"] for r in (build, capture) if r and r.details.get("correctness")), None)
    for key in CORRECTNESS:
        m[key] = (record or {}).get(key)
    why = (record or {}).get("correct_why") or (None if record else "this case's output was not checked")
    if why:
        notes["correct"] = why
    for key in CORRECTNESS[:3]:
        if m[key] is None:
            notes[key] = why or "not checked"


DMA_METRICS = ("dma_active_time_s", "dma_active_pct", "dma_transfer_bytes")


def _dma_evidence(m: dict, dma_packets: int | None, capture: CaptureRecord | None, notes: dict) -> None:
    """An empty DMA table (or, without one in the view, the summary's dma_transfer_count of 0) makes the
    summary's DMA figures null with the reason, never 0: without DGE notifications the runtime may
    record no DMA packets at all, or inaccurate ones."""
    dge = capture.details.get("dge_notifications") if capture else None
    if dma_packets == 0:
        why = "the profile's DMA table is empty" + (
            " (captured without DGE notifications: set neuron.enable_dge_notifs and capture again)"
            if dge is False
            else ""
        )
        for key in DMA_METRICS:
            m[key] = None
            notes[key] = why
    elif dge is False:
        for key in DMA_METRICS:
            notes.setdefault(key, "captured without DGE notifications: DMA figures may be inaccurate")


def _framework_timing(m: dict, capture: CaptureRecord | None, backend: str, notes: dict) -> None:
    """The capture's timed executions: latency and its spread (and whether it is too noisy to judge), the
    host's load, the device's own execute time, threads, framework overhead and compiles during timing."""
    lat = (capture.latency if capture else None) or {}
    for key in ("median", "iqr", "min", "spread"):
        m[f"latency_{key}_s"] = lat.get(f"{key}_s")
    m["latency_n"] = lat.get("n")
    m["latency_rel_spread"] = _ratio(m["latency_spread_s"], m["latency_median_s"])
    m["noisy"] = None if m["latency_rel_spread"] is None else m["latency_rel_spread"] > NOISY_REL_SPREAD
    if m["noisy"] is None:
        notes["latency_rel_spread"] = notes["noisy"] = "no framework timing with a spread was recorded"
    elif m["noisy"]:
        notes["noisy"] = (
            f"spread {m['latency_spread_s'] * 1e6:.1f} us is {100 * m['latency_rel_spread']:.0f}% of the "
            f"median: not used for recommendations; recapture on a quiet machine"
        )
    load = capture.host_load if capture else None
    m["captured_under_load"] = None if load is None else load["under_load"] is not None
    if load is None:
        notes["captured_under_load"] = "capture.json has no host load snapshot"
    elif load["under_load"]:
        notes["captured_under_load"] = load["under_load"]
    m["execute_median_s"] = (lat.get("execute") or {}).get("median_s")
    if m["execute_median_s"] is None:
        notes["execute_median_s"] = (
            f"the {backend} framework timing has no per-iteration ExecuteTime "
            "(torch_xla.debug.metrics, recorded by the torch-xla runtime)"
        )
    m["threads"] = capture.threads if capture else None
    if m["threads"] is None:
        notes["threads"] = f"the {backend} backend leaves threading to its runtime"
    device_s = {"neuron": m["profile_total_time_s"], "xla": m["execute_median_s"]}.get(backend)
    if lat.get("basis", "").startswith("device time per execution"):  # NKI: the samples are device times
        m["framework_overhead_s"] = None
        notes["framework_overhead_s"] = notes["latency_median_s"] = lat["basis"]
    elif m["latency_median_s"] is not None and device_s is not None:
        m["framework_overhead_s"] = m["latency_median_s"] - device_s
    else:
        m["framework_overhead_s"] = None
        notes["framework_overhead_s"] = (
            "framework median minus device time (neuron: profile total_time; xla: "
            "ExecuteTime median): needs both, and a device separate from the framework"
        )
    if not lat:
        notes["latency_median_s"] = (
            capture.latency_note if capture else None
        ) or f"no framework timing recorded (capture.json {'absent' if not capture else 'has none'})"
    m["recompiles_during_timing"] = lat.get("recompiles_during_timing")
    if m["recompiles_during_timing"] is None:
        notes["recompiles_during_timing"] = f"the {backend} framework timing does not count compiles"


def _work_and_roofline(
    m: dict,
    spec: dict | None,
    backend: str,
    build: BuildRecord | None,
    peaks: dict | None,
    calibration: dict | None,
    notes: dict,
) -> None:
    """The workload's analytic FLOPs and bytes, the rates they give, the Trainium tile model (neuron only)
    and the roofline; a collective has none of them (it moves data), a bare summary no spec to count."""
    if spec and not has_roofline(spec):
        why = getattr(kind_of(spec), "no_roofline_why", None)
        for key in ANALYTIC + ROOFLINE:
            m[key] = None
            notes[key] = (
                why(spec)
                if why
                else f"a {spec['kind']} moves data between ranks and does no FLOPs to place on a roofline; "
                "see algbw_bytes_per_s and busbw_bytes_per_s"
            )
        return
    if not spec:
        for key in ANALYTIC + ROOFLINE:
            m[key] = None
            notes[key] = "no build.json given, so the workload spec (and its FLOPs and bytes) is unknown"
        return
    kind = kind_of(spec)
    flops, min_bytes = kind.flops(spec), kind.min_bytes(spec, DTYPE_BYTES[spec["dtype"]])
    if hasattr(kind, "counted_how"):  # a user's function: where its FLOPs and bytes came from
        notes["flops"], notes["min_bytes"] = kind.counted_how(spec)
    m.update(
        flops=flops,
        achieved_flops_per_s=_ratio(flops, m["latency_median_s"]),
        profile_flops_per_s=_ratio(flops, m["profile_total_time_s"]),
        min_bytes=min_bytes,
        arithmetic_intensity_flops_per_byte=flops / min_bytes,
    )
    if backend == "neuron":
        m.update(roofline.tiles(kind.gemms(spec)))
        for key in ("tiles_m", "tiles_k", "tiles_n", "tiles_total"):
            if m[key] is None:
                notes[key] = (
                    f"the tile model counts GEMMs, and a {spec['kind']} workload names none"
                    if not kind.gemms(spec)
                    else f"a {spec['kind']} workload is several GEMMs; see tiles_total"
                )
    else:
        for key in TILES:
            m[key] = None
            notes[key] = (
                f"the Trainium tile model (128x128 PE array) says nothing about the {backend} backend; "
                "roofline_targets.csv has every workload's tiles on trn1, inf2 and trn2"
            )
    m.update(_roofline(m, spec, backend, build, peaks, calibration, notes))


def _compile(m: dict, build: BuildRecord | None, backend: str, notes: dict) -> None:
    """The build's compile time and count, whether the cache served it, and recompilation from either
    signal: a second call with the same inputs compiled again, or compiles during the timed runs."""
    m["compile_s"] = build.compile_s if build else None
    m["compile_count"] = build.compile_count if build else None
    m["cache_hit"] = build.cache.get("hit") if build else None
    if not build:
        notes["compile_s"] = notes["cache_hit"] = "no build.json given"
    elif m["compile_s"] is None:
        notes["compile_s"] = build.compile_s_source or "the build did not time its compile"
    if m["compile_count"] is None:
        notes["compile_count"] = f"the {build.compiler if build else backend} build does not count compiles"
    signals = [
        s
        for s in (
            build.recompiled_on_second_call if build else None,
            None if m["recompiles_during_timing"] is None else m["recompiles_during_timing"] > 0,
        )
        if s is not None
    ]
    m["recompilation_detected"] = any(signals) if signals else None
    if not signals:
        notes["recompilation_detected"] = f"the {backend} backend has no compile counter or repeated-call check"


MEMORY = (
    "hbm_tensors_bytes",
    "hbm_scratchpad_bytes",
    "hbm_dram_spill_bytes",
    "sbuf_peak_usage_pct",
    "psum_peak_usage_pct",
    "largest_tensor_bytes",
)
HBM_USAGE = {
    "hbm_tensors_bytes": ("Tensors",),
    "hbm_scratchpad_bytes": ("Scratchpad", "Shared Scratchpad"),
    "hbm_dram_spill_bytes": ("DRAM Spill",),
}


def _memory(usage: dict | None, backend: str, notes: dict) -> dict:
    """Device memory from the fields the legacy profile writes: `nc_mem_usage` (bytes per usage type) and
    `instruction_usage` (SBUF and PSUM use over time, as fractions). The Memory Tracker's per-tensor view
    has no exported field, so largest_tensor_bytes is always null with that reason."""
    out = dict.fromkeys(MEMORY)
    notes["largest_tensor_bytes"] = (
        "the Memory Tracker (neuron.memory_tracker) draws its per-tensor breakdown in "
        "the profiler's UI; no exported field holds it, so it is not read"
    )
    if backend != "neuron":
        for key in MEMORY[:-1]:
            notes[key] = BACKENDS[backend].device_counters_missing
        return out
    usage = usage or {}
    rows = [r for r in usage.get("nc_mem_usage") or () if isinstance(r, dict)]
    for key, types in HBM_USAGE.items():
        found = [r.get("amount_bytes") for r in rows if r.get("usage_type") in types]
        amounts = [json_records.finite_number(a) for a in found]
        if found and any(a is None or a < 0 for a in amounts):
            out[key] = None
            notes[key] = f"the legacy profile's nc_mem_usage amounts {json.dumps(found)[:80]} are not all bytes >= 0"
            continue
        out[key] = sum(a for a in amounts if a is not None) if found else None
        if not found:
            notes[key] = f"the legacy profile's nc_mem_usage has no {' / '.join(types)} row" if rows else NO_USAGE
    series = [r for r in usage.get("instruction_usage") or () if isinstance(r, dict)]
    for key, kind in (("sbuf_peak_usage_pct", "sb"), ("psum_peak_usage_pct", "psum")):
        raw = [r.get("usage_avg") for r in series if r.get("type") == kind and r.get("usage_avg") is not None]
        values = [json_records.finite_number(v) for v in raw]
        if any(v is None or not 0 <= v <= 1 for v in values):
            out[key] = None
            notes[key] = f"the legacy profile's instruction_usage {kind} values are not all fractions 0..1"
            continue
        out[key] = 100.0 * max(v for v in values if v is not None) if values else None
        if not values:
            notes[key] = f"the legacy profile's instruction_usage has no {kind} series" if series else NO_USAGE
    return out


NO_USAGE = (
    "read from the legacy full profile (neuron.json: true; nc_mem_usage, instruction_usage); the parquet "
    "HbmUsage / SbufUsage / PsumUsage columns are not documented, so they are not read"
)


def _collective(
    spec: dict | None,
    capture: CaptureRecord | None,
    median_s: float | None,
    notes: dict,
    target: str | None = None,
    workers: list[dict] | None = None,
) -> dict:
    """A collective's size, world, algbw and busbw (nccl-tests' definitions, workloads/collective.py),
    the link each rank is allowed (neuron: `target`'s, where the profiled `workers` span chips), its
    ranks' spread (the slowest and fastest rank's median and their ratio: the straggler figure) and
    nccom-test's figures beside ours."""
    if not spec or spec["kind"] != "collective":
        return {}  # not applicable, like a suite's own labels: only a collective's metrics have these keys

    out = {
        "coll_op": spec["op"],
        "coll_world": spec["world"],
        "coll_bytes": spec["bytes"],
        "busbw_factor": collective.BUSBW_FACTOR[spec["op"]](spec["world"]),
        **collective.bandwidths(spec, median_s),
        "link_bytes_per_s": None,
    }
    if capture and capture.backend == "neuron":
        out["link_bytes_per_s"] = _link_per_rank(target, workers, notes)
    else:
        notes["link_bytes_per_s"] = (
            "gloo ranks on one host exchange over loopback and shared memory: no link's bandwidth bounds busbw"
            if capture and capture.backend == "cpu"
            else "no link bandwidth is known for this platform"
        )
    if median_s is None:
        notes["algbw_bytes_per_s"] = notes["busbw_bytes_per_s"] = "no latency was measured"
    crowded = capture.details.get("oversubscribed") if capture else None
    out["coll_oversubscribed"] = None if capture is None else bool(crowded)
    if crowded:
        notes["coll_oversubscribed"] = crowded
    medians = [r["median_s"] for r in rank_latency(capture)]
    out.update(_rank_spread(medians))
    out.update(_nccom_test(spec, capture, out["busbw_bytes_per_s"], notes))
    if not medians:
        for key in ("rank_time_max_s", "rank_time_min_s", "rank_straggler_ratio"):
            notes[key] = "capture.json has no per-rank times"
    return out


def _link_per_rank(target: str | None, ranks: list[dict] | None, notes: dict) -> float | None:
    """What NeuronLink allows each rank (busbw is a rank's figure, as in nccom-test): the chip's link
    bandwidth shared by the ranks on the busiest chip; null where the ranks never leave one chip (the
    profiles' nd_idx), or the target has no sourced figure."""
    from collections import Counter

    chips = Counter(r["nd_idx"] for r in ranks or [] if r.get("nd_idx") is not None)
    known = TARGETS.get(target or "")
    if not chips:
        notes["link_bytes_per_s"] = "no rank's profile says which chip it ran on (nd_idx)"
    elif len(chips) == 1:
        notes["link_bytes_per_s"] = (
            f"every rank ran on chip {next(iter(chips))}: they exchange on the chip, and no sourced figure bounds that"
        )
    elif known is None or known.chip_link_bytes_per_s is None:
        notes["link_bytes_per_s"] = known.chip_link_source if known else f"the target {target!r} is not known"
    else:
        share = max(chips.values())
        notes["link_bytes_per_s"] = f"{known.chip_link_source}, shared by the {share} rank(s) on the busiest chip"
        return known.chip_link_bytes_per_s / share
    return None


def rank_latency(capture: CaptureRecord | None) -> list[dict]:
    """Each rank's own framework times: gloo's `ranks`, neuron's `rank_latency` (its `ranks` are the
    profiled workers' files)."""
    details = capture.details if capture else {}
    return [r for r in (details.get("rank_latency") or details.get("ranks") or []) if "median_s" in r]


NCCOM_KEYS = (
    "nccom_test_time_s",
    "nccom_test_algbw_bytes_per_s",
    "nccom_test_busbw_bytes_per_s",
    "busbw_vs_nccom_test",
)


def _nccom_test(spec: dict, capture: CaptureRecord | None, busbw: float | None, notes: dict) -> dict:
    """Neuron's own benchmark of the same collective (nccom-test, run by the neuron capture) beside ours."""
    anchor = capture.details.get("nccom_test") if capture else None
    row = (anchor or {}).get("result")
    if not row:
        why = (anchor or {}).get("why") or (
            "nccom-test is Neuron's collectives benchmark: it runs beside the neuron backend's collectives only"
        )
        notes.update({k: why for k in NCCOM_KEYS})
        return dict.fromkeys(NCCOM_KEYS)
    if busbw is None:
        notes["busbw_vs_nccom_test"] = "no latency was measured"
    return {
        "nccom_test_time_s": row["time_s"],
        "nccom_test_algbw_bytes_per_s": row["algbw_bytes_per_s"],
        "nccom_test_busbw_bytes_per_s": row["busbw_bytes_per_s"],
        "busbw_vs_nccom_test": _ratio(busbw, row["busbw_bytes_per_s"]),
    }


def _rank_spread(times: list[float]) -> dict:
    """The slowest and fastest rank's time and their ratio: the straggler figure."""
    top, bottom = (max(times), min(times)) if times else (None, None)
    return {"rank_time_max_s": top, "rank_time_min_s": bottom, "rank_straggler_ratio": _ratio(top, bottom)}


TILES = ("tiles_m", "tiles_k", "tiles_n", "tiles_total", "tile_utilization_pct")
ANALYTIC = (
    "flops",
    "achieved_flops_per_s",
    "profile_flops_per_s",
    "min_bytes",
    "arithmetic_intensity_flops_per_byte",
    *TILES,
)
ROOFLINE = (
    "peak_flops_per_s",
    "peak_bytes_per_s",
    "peak_source",
    "ideal_compute_s",
    "ideal_memory_s",
    "ridge_flops_per_byte",
    "roofline_bound",
    "roofline_time_s",
    "roofline_efficiency_pct",
)


def neuron_peaks(build: BuildRecord | None, summary: dict, metadata: dict | None, notes: dict) -> dict:
    """The peaks a neuron profile is measured against: the profile's own metadata where the view has
    it, else the configured target's table row, both per logical core (LNC). Says when the configured
    target is not the instance the profile was captured on."""
    found = target_family(summary.get("instance_type"))
    target = build.target if build and build.target in TARGETS else (found or "trn1")
    row = TARGETS[target]
    lnc = row.lnc(build.lnc if build else None)
    if found and TARGETS[found].bf16_flops_per_core != row.bf16_flops_per_core:
        notes["neuron_target"] = (
            f"neuron.target is {target} but the profile was captured on "
            f"{summary['instance_type']}; set neuron.target: {found}"
        )
    elif found and found != target:
        notes["neuron_target"] = (
            f"neuron.target is {target}, the profile was captured on {summary['instance_type']} "
            "(the same NeuronCore generation, so the peaks agree)"
        )
    meta = roofline.metadata_peaks(metadata, lnc)
    if meta:  # the metadata gives TensorE's bf16 rate; the fp32 ratio is the target generation's
        return {**meta, "fp32_ratio": row.fp32_ratio, "target": target, "lnc": lnc}
    return {
        "bf16_flops_per_s": row.bf16_flops(lnc),
        "fp32_ratio": row.fp32_ratio,
        "hbm_bytes_per_s": row.hbm_bytes_per_s,
        "target": target,
        "lnc": lnc,
        "source": f"{row.peak_source} (neuron.target {target}, LNC {lnc}; the view had no profile metadata)",
    }


def _roofline(
    m: dict,
    spec: dict,
    backend: str,
    build: BuildRecord | None,
    peaks: dict | None,
    calibration: dict | None,
    notes: dict,
) -> dict:
    """Peaks of the platform that ran it (the Neuron profile's metadata or target table, or the host's
    calibration) and where the measurement sits against them. Measured time: device busy time on neuron
    (total_time also holds about 2 ms of start-up per execution on real trn1 profiles), framework
    median on cpu."""
    if peaks is not None:
        peak_f = peaks["bf16_flops_per_s"] / (peaks["fp32_ratio"] if spec["dtype"] == "fp32" else 1)
        peak_b, source = peaks["hbm_bytes_per_s"], peaks["source"]
        measured, basis = m["profile_active_time_s"], "profile_active_time_s"
        if measured is None:
            measured, basis = _busiest_engine_time(m)
            if measured is not None:
                notes["roofline_time_s"] = (
                    f"the summary has no total_active_time (tools before 2.27): {basis}, the busiest engine's "
                    "active time, a lower bound of the device's active time"
                )
    elif backend == "xla" and build and build.pjrt_device != "CPU":
        for key in ROOFLINE:
            notes[key] = f"no peaks known for PJRT device {build.pjrt_device} (the host calibration is the CPU's)"
        return dict.fromkeys(ROOFLINE)
    elif calibration and calibration["peak_flops_per_s"].get(spec["dtype"]):
        peak_f, peak_b = calibration["peak_flops_per_s"][spec["dtype"]], calibration["peak_bytes_per_s"]
        source = f"measured on this host: {calibration['method']} ({calibration['measured_at']})"
        measured, basis = m["latency_median_s"], "latency_median_s"
    else:
        why = (
            "no host calibration given (neuronsweep calibrate)"
            if not calibration
            else f"the host calibration has no {spec['dtype']} peak"
        )
        for key in ROOFLINE:
            notes[key] = why
        return dict.fromkeys(ROOFLINE)
    out = {
        "peak_flops_per_s": peak_f,
        "peak_bytes_per_s": peak_b,
        "peak_source": source,
        **roofline.roofline(m["flops"], m["min_bytes"], peak_f, peak_b, measured),
        "roofline_time_s": measured,
    }
    if measured is None:
        notes["roofline_efficiency_pct"] = f"no {basis} was measured"
    elif out["roofline_efficiency_pct"] > 100 and backend != "neuron":
        out.update(roofline.raised_to_achieved(m["flops"], m["min_bytes"], peak_f, peak_b, measured, source))
    elif out["roofline_efficiency_pct"] > 100:
        notes["roofline_efficiency_pct"] = (
            f"above 100%: this run beat the {(peaks or {}).get('target')} peak it is "
            "measured against; check the target and the profile's time basis"
        )
    return out


def _busiest_engine_time(m: dict) -> tuple[float | None, str]:
    """The longest active time of one engine or DMA: raw seconds where the summary has them, else the
    tool's fraction of total_time (which is how it defines the fraction)."""
    total = m["profile_total_time_s"]
    times = {}
    for name in [f"{e}_engine" for e in ENGINES] + ["dma"]:
        raw, pct = m.get(f"{name}_active_time_s"), m.get(f"{name}_active_pct")
        value = raw if raw is not None else (pct / FRACTION_TO_PCT * total if pct is not None and total else None)
        if value is not None:
            times[name] = value
    if not times:
        return None, "an engine's active time"
    top = max(times, key=lambda name: times[name])
    return times[top], f"{top}_active_time"


ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
IDLE_PCT = 50.0  # below this device-active share, launch/sync/start-up overhead dominates


def _utilization(m: dict, backend: str, peaks: dict | None, notes: dict) -> dict:
    """MFU and MBU recomputed from raw fields (beside the tool's mfu_tool_pct / mbu_tool_pct), and the
    bound class: overhead when the device is active under IDLE_PCT of the profiled call (neuron:
    engines, xla: XLA execute), else the busiest engine or DMA (neuron), else the roofline bound."""
    out: dict[str, float | str | None] = dict.fromkeys(
        ("mfu_recomputed_pct", "mbu_recomputed_pct", "bound_class", "bound_evidence")
    )
    busy: dict[str, float] = {}
    if peaks is not None:
        flops = m.get("profile_flops_tool") or m.get("flops")
        total = m["profile_total_time_s"]
        if flops and total:  # the profiler's convention: TensorE peak (bf16 rate), over total_time
            out["mfu_recomputed_pct"] = 100.0 * flops / (peaks["bf16_flops_per_s"] * total)
        hbm = (m["hbm_read_bytes"] or 0) + (m["hbm_write_bytes"] or 0)
        if total and m["hbm_read_bytes"] is not None:  # over one HBM stack, as the profiler's MBU
            out["mbu_recomputed_pct"] = 100.0 * hbm / total / peaks["hbm_bytes_per_s"]
        names = {e: f"{e}_engine_active_time_s" for e in ENGINES if e != "sync"} | {"dma": "dma_active_time_s"}
        busy = {name: m[key] for name, key in names.items() if m.get(key) is not None}
    else:
        for key in ("mfu_recomputed_pct", "mbu_recomputed_pct"):
            notes[key] = f"the {backend} backend has no tool MFU/MBU to recompute; see roofline_efficiency_pct"
    active = m.get("profile_active_pct")
    if backend in ("neuron", "xla") and active is not None and active < IDLE_PCT:
        out["bound_class"] = "overhead"
        out["bound_evidence"] = f"device active {active:.1f}% of the profiled call ({backend}: " + (
            "total_time)" if backend == "neuron" else "XLA execute; the rest is tracing, compiling and dispatch)"
        )
    elif busy:
        top = max(busy, key=lambda name: busy[name])
        out["bound_class"] = {"tensor": "compute", "dma": "memory"}.get(top, top)
        out["bound_evidence"] = (
            f"busiest: {top} {busy[top] * 1e6:.1f} us of {m['profile_total_time_s'] * 1e6:.1f} us; "
            f"roofline says {m.get('roofline_bound')}"
        )
    elif m.get("roofline_bound"):
        out["bound_class"] = m["roofline_bound"]
        out["bound_evidence"] = (
            f"roofline only (no engine counters on {backend}): AI "
            f"{m['arithmetic_intensity_flops_per_byte']:.1f} FLOP/B vs ridge "
            f"{m['ridge_flops_per_byte']:.1f}"
        )
    for key in ("bound_class", "bound_evidence"):
        if out[key] is None:
            notes[key] = "neither engine/DMA busy times nor a roofline are known"
    return out


def view_db(view_dir: Path, track_patterns: dict | None = None):
    """The view's profile tables, read once for the metadata and every derived table (a legacy json is
    a gigabyte-sized stream); None when the folder holds none."""
    db = ProfileDB(patterns_from(track_patterns))
    db.load_view(view_dir, view_dir.parent.name)
    if not db.tables:
        return None
    db.finish()
    return db


def write_tables(db, out_dir: Path) -> dict:
    """Per-workload tables from the view (derived.TABLES) as CSV; returns name -> rows written."""
    if db is None:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, fn in derived.TABLES.items():
        table = fn(db)
        if table is not None:
            with replacing(out_dir / f"{name}.csv") as tmp:
                table.to_csv(tmp, index=False)
            written[name] = len(table)
    return written


def profile_metadata(db, summary_json: Path) -> dict | None:
    """The device metadata (peaks, clocks, bandwidth): the view's parquet `Metadata` or legacy json
    `metadata` table; else, when the summary file given is itself a legacy full profile, its
    `metadata[0]`; None otherwise (summary-json carries none)."""
    if db is not None and "metadata" in {t.lower() for t in db.tables}:
        cursor = db.con.execute("SELECT * FROM metadata LIMIT 1")
        names = [d[0] for d in cursor.description]
        row = cursor.fetchone()
        return neuron_summary.metadata({k: v for k, v in zip(names, row) if k != "workload_id"}) if row else None
    with open(summary_json, "rb") as handle:
        if not handle.read(64).lstrip().startswith(b"{"):  # raw summary-json starts with log lines
            return None
    return neuron_summary.metadata(legacy_json.first_record(summary_json, "metadata"))  # damaged: one sentence


RANK_TIMES = ("median_s", "iqr_s", "min_s", "spread_s", "n")


def gloo_rank_rows(capture: CaptureRecord | None) -> list[dict]:
    """One row per rank of a gloo collective: its own times (capture.json `ranks`)."""
    return [{k: r.get(k) for k in ("rank", *RANK_TIMES)} for r in rank_latency(capture)]


def neuron_rank_rows(view_dir: Path) -> list[dict]:
    """One row per worker of a multi-worker neuron capture (the view's ranks/rank_<r>/summary.json):
    where it ran and its device time."""
    rows = []
    for path in sorted((view_dir / "ranks").glob("rank_*/summary.json"), key=lambda p: int(p.parent.name[5:])):
        s = neuron_summary.load(path)
        rows.append(
            {
                "rank": int(path.parent.name[5:]),
                "nc_idx": s.get("nc_idx"),
                "nd_idx": s.get("nd_idx"),
                "total_time_s": s.get("total_time"),
                "active_time_s": s.get("total_active_time"),
                "cc_op_time_s": s.get("cc_op_time"),
                "cc_op_count": s.get("cc_op_count"),
            }
        )
    return rows


def write_ranks(rows: list[dict], path: Path) -> int:
    """tables/ranks.csv, one row per rank."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_text(buf.getvalue())
    return len(rows)


def run(
    summary_json: Path,
    out: Path,
    capture_json: Path | None = None,
    build_json: Path | None = None,
    profile_json: Path | None = None,
    calibration_json: Path | None = None,
    track_patterns: dict | None = None,
) -> MetricsRecord:
    """Extract one case's metrics: latency, FLOPs and bytes, roofline, engine activity, memory,
    collectives; every number the records do not hold is null with its reason in notes.

    Args:
        summary_json: the view's summary.json (or a profiler's raw summary-json output).
        out: the metrics.json to write; the case's tables/ go beside it.
        capture_json: the capture record (timing, settings, correctness), where there is one.
        build_json: the build record (spec, toolchain, compile time), where there is one.
        profile_json: a legacy full-profile JSON for fields summary.json lacks.
        calibration_json: cpu: the host's measured peaks (neuronsweep calibrate).
        track_patterns: {class: regex} to classify the profile's tracks.

    Returns:
        The MetricsRecord written to out.
    """
    started = time.time()
    summary = neuron_summary.load(summary_json)
    json_skipped = legacy_json.skipped(profile_json) if profile_json else None
    if json_skipped:  # the view could not write it (a tool after SDK 2.33): its fields are null with this reason
        profile_json = None
    if profile_json:  # fields summary-json lacks, from the full profile's own summary (early in the file)
        summary = {**(legacy_json.first_record(profile_json, "summary") or {}), **summary}
    capture = CaptureRecord.read(capture_json) if capture_json else None
    build = BuildRecord.read(build_json) if build_json else None
    calibration = read_json(calibration_json) if calibration_json else None
    db = view_db(summary_json.parent, track_patterns)
    if db is not None:  # a damaged parquet column is one sentence before any SQL binds it
        wrong = profile_schema.type_problems(db, summary.get("profile_schema_version"), summary_json.parent)
        if wrong:
            raise UserError(f"{wrong[0]}.")
    metadata = profile_metadata(db, summary_json)
    usage = None
    if capture is None or capture.backend == "neuron":  # only Neuron profiles have device memory
        legacy = profile_json or summary_json  # the summary file given may itself be a legacy full profile
        usage = {key: legacy_json.small_array(legacy, key) for key in ("nc_mem_usage", "instruction_usage")}
    workers = neuron_rank_rows(summary_json.parent)
    dma_packets = derived.dma_packet_count(db)
    values = compute(summary, capture, build, calibration, metadata, usage, workers, dma_packets)
    if capture is not None and capture.details.get("profile_scope"):  # an inspect session: several executions
        values["notes"]["profile_total_time_s"] = capture.details["profile_scope"]
    missing = profile_schema.problems(db, values["profile_schema_version"]) if db is not None else []
    if missing:  # a column the schema lacks: named, and the tables that need it are not written
        values["notes"]["profile_schema"] = " ".join(f"{m}." for m in missing)
        print("\n".join(missing), file=sys.stderr)
    for key in MEMORY[:-1] if json_skipped else ():
        values["notes"][key] = json_skipped
    timed = {r["rank"]: r for r in rank_latency(capture)}
    if workers and timed:  # a neuron collective: each worker's profile and its framework times
        workers = [{**row, **{k: timed.get(row["rank"], {}).get(k) for k in RANK_TIMES}} for row in workers]
    ranks = workers or gloo_rank_rows(capture)
    sources = [str(p) for p in (summary_json, profile_json, capture_json, build_json, calibration_json) if p]
    tables = write_tables(db, out.parent / "tables")
    if ranks:
        tables["ranks"] = write_ranks(ranks, out.parent / "tables" / "ranks.csv")
    record = MetricsRecord(
        values={k: v for k, v in values.items() if k not in ("spec", "notes")},
        notes=values["notes"],
        spec=values["spec"],
        provenance={
            **provenance("extract", started),
            "sources": sources,
            "tables": tables,
            "metadata_peaks": metadata is not None,
        },
    )
    record.write(out)
    return record
