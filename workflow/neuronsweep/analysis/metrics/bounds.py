"""Where a neuron case's headroom is, as Neuron Explorer's `recommend` computes it from a profile's summary: the
ladder of performance bounds, the summary's insights at their documented thresholds, and the profile's own
warnings about what it could not measure (docs/metrics.md, "Headroom"). Sources: AWS's profile-analysis
guidance for Neuron Explorer (aws-neuron/neuron-agentic-development, skills/neuron-nki-profile-querying/
references/performance-bounds.md and its investigations/) and Neuron Explorer's summary page
(overview-summary-page.rst) for the insights' thresholds.

Every bound is a time: how long the kernel would take were one kind of overhead gone. The gap between two
neighbouring bounds is what that overhead costs. The gaps are not predicted savings: peak rates are not
reachable, and an engine off the critical path gains nothing; the speed-ups are bottleneck-aware (a fix of
one family still waits on the engines it does not touch). A bound whose input is missing, or that the profile
itself says is incomplete, is null with the field or the warning named, never computed from a partial input.

AWS's bounds assume a single-core kernel, with per-NeuronCore peaks on both sides. A logical core of several
physical ones (LNC 2) is bounded the same way with both peaks of all its physical cores (analysis/metrics/
peaks.py): never TensorE's of two cores against the DMA of one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from neuronsweep.analysis.dma_descriptors import SMALL_DESCRIPTOR_BYTES, Descriptors, descriptors
from neuronsweep.analysis.engines import COMPUTE_ENGINES
from neuronsweep.analysis.metrics.counters import ProfileCounters
from neuronsweep.analysis.metrics.parts import Part, ratio
from neuronsweep.analysis.metrics.peaks import Peaks
from neuronsweep.analysis.profile_tables import ProfileTables
from neuronsweep.analysis.throttling import Activity, Throttling, from_profile
from neuronsweep.analysis.window_inputs import WindowInputs

DGE = "dynamic DMA metadata"  # the profiler's warning when a capture ran without DGE notifications
IDLE_SHARE = 0.5  # total_time this much idle or more: the execution's idle start, not the kernel (legacy JSON)
SMALL_DESCRIPTOR_SHARE_PCT = 10.0  # the small-DMA insight fires from this share of the bytes (ours: AWS gives none)


@dataclass(kw_only=True)
class Bounds(Part):
    """The ladder (seconds), its bottleneck engine and the speed-up of removing each family's overhead."""

    bound_reference_s: float | None
    bound_memory_s: float | None
    bound_memory_ideal_s: float | None
    bound_memory_no_reloads_s: float | None
    bound_compute_s: float | None
    bound_compute_ideal_s: float | None
    bound_compute_useful_s: float | None
    bound_pipeline_s: float | None
    bottleneck_engine: str | None
    speedup_if_memory_ideal: float | None
    speedup_if_no_reloads: float | None
    speedup_if_compute_ideal: float | None
    speedup_if_no_transposes: float | None
    speedup_if_pipelined: float | None


@dataclass(kw_only=True)
class Efficiency(Part):
    """The summary's fields the bounds and the insights rest on, in our units (FLOPs, bytes, percent)."""

    hardware_flops: float | None
    transpose_flops: float | None
    hfu_pct: float | None
    necessary_bytes: float | None
    dma_transfer_count: float | None
    dma_avg_transfer_bytes: float | None
    dma_achieved_pct_of_peak: float | None
    dma_excess_ratio: float | None
    dma_small_descriptor_bytes_pct: float | None  # of the kernel's DMA bytes, moved in descriptors under 4 KiB
    dma_small_descriptor_queues: str | None  # the queues moving the most of them
    throttle_util_limit_pct: float | None  # the most throttled activity's utilization limit (whole execution)
    throttled_time_pct: float | None  # and the share of the time it was in force
    throttling: list | None  # per throttling activity: its limit and its share of the time, as reported
    throttled_active_time_pct: float | None  # of TensorE's active time, under a limit below 100 %
    throttled_active_flops_pct: float | None  # of TensorE's capacity while active, taken by the limits
    profile_warnings: list | None
    insights: list | None


@dataclass(frozen=True)
class Evidence:
    """What a profile's tables add to its summary for the headroom: throttling and DMA descriptor sizes."""

    throttling: Throttling
    descriptors: Descriptors | None
    descriptors_why: str | None


def evidence(summary: dict, db: ProfileTables | None, legacy: dict[str, list | None] | None = None) -> Evidence:
    """The throttling and descriptor figures of a profile (`db`: its tables, None for a bare summary; `legacy`:
    a legacy JSON's `ham` and `active_time` arrays, which its tables do not load)."""
    found, why = descriptors(db)
    return Evidence(from_profile(summary, db, legacy), found, why)


def headroom(
    summary: dict,
    counters: ProfileCounters,
    peaks: Peaks,
    warnings: list | None,
    found: Evidence | None = None,
) -> list[Part]:
    """The ladder and the fields behind it for a neuron case (`peaks`: the profile's metadata or the target's
    documented figures; `warnings`: the profile's own list, None where its form carries none; `found`: what
    the profile's tables add, None for a bare summary, whose own fields are read then)."""
    said = [_warning_text(w) for w in warnings or []]
    dge = next((w for w in said if DGE in w), None)
    found = found or evidence(summary, None)
    efficiency = _efficiency(summary, counters, peaks, said if warnings is not None else None, dge, found)
    return [_ladder(counters, peaks, efficiency, dge), efficiency]


def _warning_text(entry: object) -> str:
    """A warning as `category: message`; an entry of another shape kept as its text."""
    if isinstance(entry, dict) and "message" in entry:
        return f"{entry.get('category') or 'warning'}: {entry['message']}"
    return str(entry)


FIELD_OF = {"necessary_bytes": "inputs_outputs_weights_size_bytes", "hfu_pct": "hfu_estimated_percent"}
NEEDS = {
    "dma_avg_transfer_bytes": "the transfer count",
    "dma_achieved_pct_of_peak": "the DMA active time and a peak DMA rate",
    "dma_excess_ratio": "the necessary bytes (inputs_outputs_weights_size_bytes)",
}


def _efficiency(
    summary: dict,
    counters: ProfileCounters,
    peaks: Peaks,
    warnings: list[str] | None,
    dge: str | None,
    found: Evidence,
) -> Efficiency:
    """The summary's fields the ladder and the insights read, and the tables' evidence, each null with why."""
    get = summary.get
    hfu, necessary, count = (
        get("hfu_estimated_percent"),
        get("inputs_outputs_weights_size_bytes"),
        get("dma_transfer_count"),
    )
    achieved = ratio(counters.dma_transfer_bytes, counters.dma_active_time_s)
    peak = peaks.dma_bytes_per_s
    throttling = found.throttling
    limited = [t for t in throttling.activities if t.util_limit_pct < 100]
    worst = min(limited, key=lambda t: t.util_limit_pct) if limited else None
    active = throttling.while_active
    small = found.descriptors
    part = Efficiency(
        hardware_flops=get("hardware_flops"),
        transpose_flops=get("transpose_flops"),
        hfu_pct=None if hfu is None else 100 * hfu,
        necessary_bytes=necessary,
        dma_transfer_count=count,
        dma_avg_transfer_bytes=ratio(counters.dma_transfer_bytes, count),
        dma_achieved_pct_of_peak=None if achieved is None or not peak else 100 * achieved / peak,
        dma_excess_ratio=ratio(counters.dma_transfer_bytes, necessary),
        dma_small_descriptor_bytes_pct=small.small_bytes_pct if small else None,
        dma_small_descriptor_queues=", ".join(small.small_queues) if small and small.small_queues else None,
        throttle_util_limit_pct=worst.util_limit_pct if worst else None,
        throttled_time_pct=worst.time_pct if worst else None,
        throttling=[t.as_dict() for t in throttling.activities] or None,
        throttled_active_time_pct=active.throttled_time_pct if active else None,
        throttled_active_flops_pct=active.lost_capacity_pct if active else None,
        profile_warnings=warnings,
        insights=None,
    )
    notes = part.notes
    for key in ("hardware_flops", "transpose_flops", "necessary_bytes", "dma_transfer_count", "hfu_pct"):
        if getattr(part, key) is None:
            notes[key] = f"the profile summary has no {FIELD_OF.get(key, key)}"
    for key, needs in NEEDS.items():
        if getattr(part, key) is None:
            notes[key] = f"needs the DMA bytes and {needs}"
        elif dge:
            notes[key] = f"the profile warns its DMA figures may be inaccurate ({dge})"
    if part.dma_achieved_pct_of_peak is not None:
        notes["dma_achieved_pct_of_peak"] = f"of {peaks.dma_source}" + (
            f"; {notes['dma_achieved_pct_of_peak']}" if dge else ""
        )
    if part.dma_excess_ratio is not None and part.dma_excess_ratio < 1:
        notes["dma_excess_ratio"] = (
            "below 1: the DMA bytes are fewer than the kernel's own inputs and outputs, so the profile's DMA "
            "figures are incomplete"
        )
    if small is None:
        notes["dma_small_descriptor_bytes_pct"] = notes["dma_small_descriptor_queues"] = found.descriptors_why or ""
    elif not small.small_queues:
        notes["dma_small_descriptor_queues"] = "no kernel transfer moved descriptors under 4 KiB"
    _throttle_notes(notes, throttling, worst)
    if warnings is None:
        notes["profile_warnings"] = "this form of the profile (a summary) carries no warnings list"
    return replace(part, insights=_insights(summary, part, throttling))


def _throttle_notes(notes: dict[str, str], throttling: Throttling, worst: Activity | None) -> None:
    """Where each throttling figure comes from, or why it has none."""
    source = throttling.activities_source
    if source is None:
        notes["throttling"] = "the profile has no ThrottleSummary table nor throttle_<activity>_* summary fields"
    else:
        notes["throttling"] = f"from {source}, over the whole execution"
    if worst is None:
        notes["throttle_util_limit_pct"] = notes["throttled_time_pct"] = (
            "no activity ran under a utilization limit below 100 %" if source else notes["throttling"]
        )
    else:
        notes["throttle_util_limit_pct"] = notes["throttled_time_pct"] = f"from {source}, over the whole execution"
        if worst.time_pct is None:
            notes["throttled_time_pct"] = f"{source} gives the limit but not the share of the time it was in force"
    if throttling.while_active is None:
        notes["throttled_active_time_pct"] = notes["throttled_active_flops_pct"] = throttling.while_active_why or ""


def _ladder(counters: ProfileCounters, peaks: Peaks | None, efficiency: Efficiency, dge: str | None) -> Bounds:
    """The bounds, each from the summary and the peaks (both of the same physical cores), or null with why."""
    notes: dict[str, str] = {}
    total, active = counters.profile_total_time_s, counters.profile_active_time_s
    reference: float | None = total
    if total and active and active < IDLE_SHARE * total:
        reference = active
        notes["bound_reference_s"] = (
            f"total_active_time: the profile's total_time ({total:.4g} s) is {100 * active / total:.1f} % active, "
            "the rest the execution's idle start; the kernel's own time is its active time"
        )
    else:
        notes["bound_reference_s"] = "total_time: the profiled execution"
    times = {e: getattr(counters, f"{e}_engine_active_time_s") for e in COMPUTE_ENGINES}
    times["dma"] = counters.dma_active_time_s
    dma_rate = peaks.dma_bytes_per_s if peaks else None
    dma_source = peaks.dma_source if peaks else "no peak DMA rate is known"
    incomplete = f"the profile warns its DMA figures may be inaccurate ({dge})" if dge else None
    if efficiency.dma_excess_ratio is not None and efficiency.dma_excess_ratio < 1:
        incomplete = incomplete or "the DMA bytes are fewer than the kernel's own inputs and outputs: incomplete"
    memory_ideal = None
    if incomplete:
        notes["bound_memory_ideal_s"] = incomplete
    else:
        memory_ideal = _over(
            counters.dma_transfer_bytes, dma_rate, "dma_transfer_total_bytes", notes, "bound_memory_ideal_s"
        )
    no_reloads = _over(
        efficiency.necessary_bytes, dma_rate, "inputs_outputs_weights_size_bytes", notes, "bound_memory_no_reloads_s"
    )
    te_peak = peaks.bf16_flops_per_s if peaks else None
    te_source = peaks.source if peaks else "no TensorE peak is known"
    hw, tr = efficiency.hardware_flops, efficiency.transpose_flops
    compute_ideal = _over(hw, te_peak, "hardware_flops", notes, "bound_compute_ideal_s")
    useful = None if hw is None or tr is None else hw - tr
    compute_useful = _over(useful, te_peak, "hardware_flops and transpose_flops", notes, "bound_compute_useful_s")
    for key in ("bound_memory_ideal_s", "bound_memory_no_reloads_s"):
        notes.setdefault(key, f"at {dma_source}" if dma_rate else f"no peak DMA rate: {dma_source}")
    for key in ("bound_compute_ideal_s", "bound_compute_useful_s"):
        notes.setdefault(key, f"at TensorE's peak: {te_source}")
    for key, engine, field in (
        ("bound_memory_s", "dma", "dma_active_time"),
        ("bound_compute_s", "tensor", "tensor_engine_active_time"),
    ):
        if times[engine] is None:
            notes[key] = f"the profile summary has no {field}"
    known = {e: t for e, t in times.items() if t is not None}
    bottleneck = max(known, key=lambda e: known[e]) if len(known) == len(times) else None
    if bottleneck is None:
        lacks = ", ".join(sorted(set(times) - set(known)))
        notes["bound_pipeline_s"] = notes["bottleneck_engine"] = (
            f"needs every engine's active time and the DMA's; the summary lacks {lacks}"
        )
    pipeline = known[bottleneck] if bottleneck else None
    rungs = {
        "bound_memory_ideal_s": memory_ideal,
        "bound_memory_no_reloads_s": no_reloads,
        "bound_compute_ideal_s": compute_ideal,
        "bound_compute_useful_s": compute_useful,
    }
    return Bounds(
        bound_reference_s=reference,
        bound_memory_s=times["dma"],
        bound_memory_ideal_s=memory_ideal,
        bound_memory_no_reloads_s=no_reloads,
        bound_compute_s=times["tensor"],
        bound_compute_ideal_s=compute_ideal,
        bound_compute_useful_s=compute_useful,
        bound_pipeline_s=pipeline,
        bottleneck_engine=bottleneck,
        **_speedups(reference, pipeline, rungs, known, notes),
        notes=notes,
    )


def _over(amount: float | None, rate: float | None, field: str, notes: dict, key: str) -> float | None:
    """amount / rate, or None with the missing input named."""
    if amount is None:
        notes[key] = f"the profile summary has no {field}"
        return None
    if not rate or rate <= 0:
        notes[key] = "no peak rate is known to divide by"
        return None
    return amount / rate


FAMILIES = {  # speed-up -> (its bound, the engine its fix touches)
    "speedup_if_memory_ideal": ("bound_memory_ideal_s", "dma"),
    "speedup_if_no_reloads": ("bound_memory_no_reloads_s", "dma"),
    "speedup_if_compute_ideal": ("bound_compute_ideal_s", "tensor"),
    "speedup_if_no_transposes": ("bound_compute_useful_s", "tensor"),
}


def _speedups(
    reference: float | None,
    pipeline: float | None,
    rungs: dict[str, float | None],
    times: dict[str, float],
    notes: dict[str, str],
) -> dict[str, float | None]:
    """reference / max(the family's bound, the engines its fix does not touch): what removing one family's
    overhead could buy at most, the rest of the kernel unchanged."""
    out: dict[str, float | None] = {}
    for key, (rung, touched) in FAMILIES.items():
        bound = rungs[rung]
        out[key] = None
        if bound is None:
            notes[key] = f"no {rung}: {notes.get(rung, 'not known')}"
        elif reference is None or len(times) < len(COMPUTE_ENGINES) + 1:
            notes[key] = "needs the reference time and every other engine's active time"
        else:
            out[key] = ratio(reference, max([bound, *(t for e, t in times.items() if e != touched)]))
    out["speedup_if_pipelined"] = ratio(reference, pipeline) if pipeline is not None and reference is not None else None
    if out["speedup_if_pipelined"] is None:
        notes["speedup_if_pipelined"] = "needs the pipeline bound and the reference"
    return out


def _insights(summary: dict, e: Efficiency, throttling: Throttling) -> list[dict]:
    """Neuron Explorer's summary insights that fire on this profile: rule, value, threshold, what to try, and
    the source each read."""
    out = []

    def fire(rule: str, value: float, threshold: float, sentence: str, source: str) -> None:
        out.append({"rule": rule, "value": round(value, 6), "threshold": threshold, "try": sentence, "source": source})

    model = summary.get("model_flops")
    if model is not None and e.hardware_flops:
        share = model / e.hardware_flops
        if share < 0.5:
            fire(
                "model FLOPs under 50 % of active FLOPs",
                share,
                0.5,
                "most of TensorE's work is not the model's (transposes, padding): see the transpose and tile figures",
                "the summary's model_flops and hardware_flops",
            )
    if e.transpose_flops is not None and e.hardware_flops:
        share = e.transpose_flops / e.hardware_flops
        if share > 0.1:
            fire(
                "transposes over 10 % of hardware FLOPs",
                share,
                0.1,
                "lay operands out as TensorE takes them (the left operand transposed) or transpose with DMA",
                "the summary's transpose_flops and hardware_flops",
            )
    active = throttling.while_active
    if active is not None and active.lost_capacity_pct > 0:
        fire(
            "active FLOPs throttled",
            active.lost_capacity_pct / 100,
            0.0,
            f"TensorE ran under a utilization limit (lowest {active.lowest_limit_pct or 0:.0f} %) for "
            f"{active.throttled_time_pct:.2g} % of its active time: the device's own limit (power, thermal), not "
            "the kernel; find what throttled it before tuning TensorE's work",
            "the profile's throttle events against TensorE's active time",
        )
    reload, reads = summary.get("spill_reload_bytes"), summary.get("hbm_read_bytes")
    if reload is not None and reads and reload / reads > 0.25:
        fire(
            "spill-reload bytes over 25 % of HBM reads",
            reload / reads,
            0.25,
            "keep intermediates in SBUF: smaller tiles or fewer live tensors per loop",
            "the summary's spill_reload_bytes and hbm_read_bytes",
        )
    small = e.dma_small_descriptor_bytes_pct
    if small is not None and small >= SMALL_DESCRIPTOR_SHARE_PCT:
        fire(
            f"small DMA descriptors (under {SMALL_DESCRIPTOR_BYTES // 1024} KiB)",
            small / 100,
            SMALL_DESCRIPTOR_SHARE_PCT / 100,
            f"{small:.0f} % of the kernel's DMA bytes move in descriptors under 4 KiB (queues: "
            f"{e.dma_small_descriptor_queues}): widen the free dimension of those transfers to at least 4 KiB a "
            "partition",
            "the profile's DmaPacketAggregated table: transfer_bytes over its SBUF partitions",
        )
    return out  # NKI instruction coverage: no profile here names the field, so it is not read


WINDOW_REFERENCE = (
    "the union of the category's op intervals (FrameworkInstruction): categories that run at once each count "
    "the overlap"
)
NO_WINDOW_NECESSARY_BYTES = "TensorInfo's necessary bytes are the kernel's tensors, not a window's"


def window_ladder(inputs: WindowInputs, peaks: Peaks | None, warnings: list | None) -> Bounds:
    """One category's window's ladder, the same rungs as the kernel's (analysis/window_inputs.py reads them
    from the tables): its reference is its window."""
    engine = inputs.engine_active_s.get
    counters = ProfileCounters(
        profile_total_time_s=inputs.window_s,
        profile_active_time_s=inputs.window_s,
        dma_active_time_s=inputs.dma_active_s,
        dma_transfer_bytes=inputs.dma_bytes,
        tensor_engine_active_time_s=engine("tensor"),
        vector_engine_active_time_s=engine("vector"),
        scalar_engine_active_time_s=engine("scalar"),
        gpsimd_engine_active_time_s=engine("gpsimd"),
    )
    efficiency = Efficiency.null(
        "a window reads only its FLOPs", hardware_flops=inputs.hardware_flops, transpose_flops=inputs.transpose_flops
    )
    dge = next((w for w in map(_warning_text, warnings or []) if DGE in w), None)
    part = _ladder(counters, peaks, efficiency, dge)
    part.notes["bound_reference_s"] = WINDOW_REFERENCE
    part.notes["bound_memory_no_reloads_s"] = part.notes["speedup_if_no_reloads"] = NO_WINDOW_NECESSARY_BYTES
    return part
