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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from neuronsweep.analysis.metrics.counters import ProfileCounters
from neuronsweep.analysis.metrics.parts import Part, ratio
from neuronsweep.analysis.metrics.peaks import Peaks
from neuronsweep.analysis.window_inputs import WindowInputs

ENGINES = ("tensor", "vector", "scalar", "gpsimd")  # the compute engines a bottleneck can be, beside dma
DGE = "dynamic DMA metadata"  # the profiler's warning when a capture ran without DGE notifications
IDLE_SHARE = 0.5  # total_time this much idle or more: the execution's idle start, not the kernel (legacy JSON)
SMALL_DMA_BYTES = 4096  # a DMA transfer below this is markedly less efficient (the insight's threshold)


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
    throttle_util_limit_pct: float | None  # the most throttled activity's utilization limit
    throttled_time_pct: float | None  # and the share of the time it was active
    throttling: list | None  # per throttling activity: its limit and its share of the time, as reported
    profile_warnings: list | None
    insights: list | None


def headroom(
    summary: dict, counters: ProfileCounters, metadata: dict | None, peaks: Peaks | None, warnings: list | None
) -> list[Part]:
    """The ladder and the fields behind it for a neuron case (`peaks`: the profile's metadata or the
    target's documented figures; `warnings`: the profile's own list, None where its form carries none)."""
    said = [_warning_text(w) for w in warnings or []]
    dge = next((w for w in said if DGE in w), None)
    dma_peak = _dma_peak(metadata, peaks)
    efficiency = _efficiency(summary, counters, dma_peak[0], said if warnings is not None else None, dge)
    bounds = _ladder(counters, dma_peak, peaks, efficiency, dge)
    efficiency.insights = _insights(summary, efficiency)
    return [bounds, efficiency]


def _warning_text(entry: object) -> str:
    """A warning as `category: message`; an entry of another shape kept as its text."""
    if isinstance(entry, dict) and "message" in entry:
        return f"{entry.get('category') or 'warning'}: {entry['message']}"
    return str(entry)


def _dma_peak(metadata: dict | None, peaks: Peaks | None) -> tuple[float | None, str]:
    """One NeuronCore's peak DMA rate and where it comes from: the metadata's dma_ddr_bandwidth, else the
    HBM bandwidth of the peaks (the metadata's one stack, or the target's documented figure)."""
    found = (metadata or {}).get("dma_ddr_bandwidth")
    if found:
        return float(found), "the profile's metadata dma_ddr_bandwidth"
    if peaks is not None:
        return peaks.hbm_bytes_per_s, f"the HBM bandwidth of {peaks.source} (the profile has no dma_ddr_bandwidth)"
    return None, "no peak DMA rate is known"


def _efficiency(
    summary: dict, counters: ProfileCounters, peak: float | None, warnings: list[str] | None, dge: str | None
) -> Efficiency:
    """The summary's fields the ladder and the insights read (`peak`: the DMA's), each null with why."""
    part = Efficiency(**dict.fromkeys(Efficiency.keys()))  # type: ignore[arg-type]  # filled below
    part.profile_warnings = warnings
    get = summary.get
    part.hardware_flops, part.transpose_flops = get("hardware_flops"), get("transpose_flops")
    hfu = get("hfu_estimated_percent")
    part.hfu_pct = None if hfu is None else 100 * hfu
    part.necessary_bytes = get("inputs_outputs_weights_size_bytes")
    part.dma_transfer_count = get("dma_transfer_count")
    part.dma_avg_transfer_bytes = ratio(counters.dma_transfer_bytes, part.dma_transfer_count)
    achieved = ratio(counters.dma_transfer_bytes, counters.dma_active_time_s)
    part.dma_achieved_pct_of_peak = None if achieved is None or not peak else 100 * achieved / peak
    part.dma_excess_ratio = ratio(counters.dma_transfer_bytes, part.necessary_bytes)
    part.throttling = _throttling(summary)
    limited = [t for t in part.throttling if t["util_limit_pct"] < 100]
    if limited:
        worst = min(limited, key=lambda t: t["util_limit_pct"])
        part.throttle_util_limit_pct, part.throttled_time_pct = worst["util_limit_pct"], worst["time_pct"]
    for key in ("hardware_flops", "transpose_flops", "necessary_bytes", "dma_transfer_count", "hfu_pct"):
        if getattr(part, key) is None:
            field = {"necessary_bytes": "inputs_outputs_weights_size_bytes", "hfu_pct": "hfu_estimated_percent"}
            part.notes[key] = f"the profile summary has no {field.get(key, key)}"
    for key in ("dma_avg_transfer_bytes", "dma_achieved_pct_of_peak", "dma_excess_ratio"):
        if getattr(part, key) is None:
            part.notes[key] = (
                "needs the DMA bytes and "
                + {
                    "dma_avg_transfer_bytes": "the transfer count",
                    "dma_achieved_pct_of_peak": "the DMA active time and a peak DMA rate",
                    "dma_excess_ratio": "the necessary bytes (inputs_outputs_weights_size_bytes)",
                }[key]
            )
        elif dge:
            part.notes[key] = f"the profile warns its DMA figures may be inaccurate ({dge})"
    if part.dma_excess_ratio is not None and part.dma_excess_ratio < 1:
        part.notes["dma_excess_ratio"] = (
            "below 1: the DMA bytes are fewer than the kernel's own inputs and outputs, so the profile's DMA "
            "figures are incomplete"
        )
    if not part.throttling:
        part.throttling = None
        part.notes["throttling"] = "the profile summary has no throttle_<activity>_* fields"
    if not limited:
        part.notes["throttle_util_limit_pct"] = part.notes["throttled_time_pct"] = (
            "no activity ran under a utilization limit below 100 %" if part.throttling else part.notes["throttling"]
        )
    if warnings is None:
        part.notes["profile_warnings"] = "this form of the profile (a summary) carries no warnings list"
    return part


THROTTLE = re.compile(r"^throttle_(activity_\d+|unknown)_(avg_util_limit|active_time)_nc(\d+)_percent$")


def _throttling(summary: dict) -> list[dict]:
    """Each throttling activity the summary reports (throttle_<activity>_avg_util_limit_nc<i>_percent and
    _active_time_nc<i>_percent, fractions): its utilization limit and its share of the time, in percent."""
    found: dict[tuple[str, str], dict] = {}
    for key, value in summary.items():
        match = THROTTLE.match(str(key))
        if match and isinstance(value, int | float):
            activity, what, core = match.groups()
            found.setdefault((activity, core), {})[what] = 100 * value
    return [
        {"activity": a, "nc": int(c), "util_limit_pct": v["avg_util_limit"], "time_pct": v.get("active_time")}
        for (a, c), v in sorted(found.items())
        if "avg_util_limit" in v
    ]


def _ladder(
    counters: ProfileCounters,
    dma_peak: tuple[float | None, str],
    peaks: Peaks | None,
    efficiency: Efficiency,
    dge: str | None,
) -> Bounds:
    """The bounds, each from the summary and the peaks, or null with why."""
    part = Bounds(**dict.fromkeys(Bounds.keys()))  # type: ignore[arg-type]  # filled below
    notes = part.notes
    total, active = counters.profile_total_time_s, counters.profile_active_time_s
    if total and active and active < IDLE_SHARE * total:
        part.bound_reference_s = active
        notes["bound_reference_s"] = (
            f"total_active_time: the profile's total_time ({total:.4g} s) is {100 * active / total:.1f} % active, "
            "the rest the execution's idle start; the kernel's own time is its active time"
        )
    else:
        part.bound_reference_s = total
        notes["bound_reference_s"] = "total_time: the profiled execution"
    times = {e: getattr(counters, f"{e}_engine_active_time_s") for e in ENGINES} | {"dma": counters.dma_active_time_s}
    part.bound_memory_s, part.bound_compute_s = times["dma"], times["tensor"]
    dma_rate, dma_source = dma_peak
    incomplete = f"the profile warns its DMA figures may be inaccurate ({dge})" if dge else None
    if efficiency.dma_excess_ratio is not None and efficiency.dma_excess_ratio < 1:
        incomplete = incomplete or "the DMA bytes are fewer than the kernel's own inputs and outputs: incomplete"
    if incomplete:
        notes["bound_memory_ideal_s"] = incomplete
    else:
        part.bound_memory_ideal_s = _over(
            counters.dma_transfer_bytes, dma_rate, "dma_transfer_total_bytes", notes, "bound_memory_ideal_s"
        )
    part.bound_memory_no_reloads_s = _over(
        efficiency.necessary_bytes, dma_rate, "inputs_outputs_weights_size_bytes", notes, "bound_memory_no_reloads_s"
    )
    te_peak = peaks.bf16_flops_per_s if peaks else None
    te_source = peaks.source if peaks else "no TensorE peak is known"
    hw, tr = efficiency.hardware_flops, efficiency.transpose_flops
    part.bound_compute_ideal_s = _over(hw, te_peak, "hardware_flops", notes, "bound_compute_ideal_s")
    useful = None if hw is None or tr is None else hw - tr
    part.bound_compute_useful_s = _over(
        useful, te_peak, "hardware_flops and transpose_flops", notes, "bound_compute_useful_s"
    )
    for key, source in (("bound_memory_ideal_s", dma_source), ("bound_memory_no_reloads_s", dma_source)):
        notes.setdefault(key, f"at {source}")
    for key in ("bound_compute_ideal_s", "bound_compute_useful_s"):
        notes.setdefault(key, f"at TensorE's peak: {te_source}")
    for key, field in (("bound_memory_s", "dma_active_time"), ("bound_compute_s", "tensor_engine_active_time")):
        if getattr(part, key) is None:
            notes[key] = f"the profile summary has no {field}"
    known = {e: t for e, t in times.items() if t is not None}
    if len(known) == len(times):
        part.bottleneck_engine = max(known, key=lambda e: known[e])
        part.bound_pipeline_s = known[part.bottleneck_engine]
    else:
        lacks = ", ".join(sorted(set(times) - set(known)))
        notes["bound_pipeline_s"] = notes["bottleneck_engine"] = (
            f"needs every engine's active time and the DMA's; the summary lacks {lacks}"
        )
    _speedups(part, known)
    return part


def _over(amount: float | None, rate: float | None, field: str, notes: dict, key: str) -> float | None:
    """amount / rate, or None with the missing input named."""
    if amount is None:
        notes[key] = f"the profile summary has no {field}"
        return None
    if not rate or rate <= 0:
        notes[key] = "no peak rate is known to divide by"
        return None
    return amount / rate


def _speedups(part: Bounds, times: dict[str, float]) -> None:
    """reference / max(the family's bound, the engines its fix does not touch): what removing one family's
    overhead could buy at most, the rest of the kernel unchanged."""
    families = {
        "speedup_if_memory_ideal": (part.bound_memory_ideal_s, "dma"),
        "speedup_if_no_reloads": (part.bound_memory_no_reloads_s, "dma"),
        "speedup_if_compute_ideal": (part.bound_compute_ideal_s, "tensor"),
        "speedup_if_no_transposes": (part.bound_compute_useful_s, "tensor"),
    }
    bound_of = {
        "speedup_if_memory_ideal": "bound_memory_ideal_s",
        "speedup_if_no_reloads": "bound_memory_no_reloads_s",
        "speedup_if_compute_ideal": "bound_compute_ideal_s",
        "speedup_if_no_transposes": "bound_compute_useful_s",
    }
    for key, (bound, touched) in families.items():
        others = [t for e, t in times.items() if e != touched]
        if bound is None:
            part.notes[key] = f"no {bound_of[key]}: {part.notes.get(bound_of[key], 'not known')}"
            continue
        if part.bound_reference_s is None or len(times) < len(ENGINES) + 1:
            part.notes[key] = "needs the reference time and every other engine's active time"
            continue
        setattr(part, key, ratio(part.bound_reference_s, max([bound, *others])))
    if part.bound_pipeline_s is None or part.bound_reference_s is None:
        part.notes["speedup_if_pipelined"] = "needs the pipeline bound and the reference"
    else:
        part.speedup_if_pipelined = ratio(part.bound_reference_s, part.bound_pipeline_s)


def _insights(summary: dict, e: Efficiency) -> list[dict]:
    """Neuron Explorer's summary insights that fire on this profile: rule, value, threshold, what to try."""
    out = []

    def fire(rule: str, value: float, threshold: float, sentence: str) -> None:
        out.append({"rule": rule, "value": round(value, 6), "threshold": threshold, "try": sentence})

    model = summary.get("model_flops")
    if model is not None and e.hardware_flops:
        share = model / e.hardware_flops
        if share < 0.5:
            fire(
                "model FLOPs under 50 % of active FLOPs",
                share,
                0.5,
                "most of TensorE's work is not the model's (transposes, padding): see the transpose and tile figures",
            )
    if e.transpose_flops is not None and e.hardware_flops:
        share = e.transpose_flops / e.hardware_flops
        if share > 0.1:
            fire(
                "transposes over 10 % of hardware FLOPs",
                share,
                0.1,
                "lay operands out as TensorE takes them (the left operand transposed) or transpose with DMA",
            )
    if e.throttle_util_limit_pct is not None:
        fire(
            "active FLOPs throttled",
            e.throttle_util_limit_pct / 100,
            1.0,
            f"the engines ran under a utilization limit of {e.throttle_util_limit_pct:.0f} % for "
            f"{e.throttled_time_pct or 0:.2g} % of the time: the device's own limit (power, thermal), not the kernel",
        )
    reload, reads = summary.get("spill_reload_bytes"), summary.get("hbm_read_bytes")
    if reload is not None and reads and reload / reads > 0.25:
        fire(
            "spill-reload bytes over 25 % of HBM reads",
            reload / reads,
            0.25,
            "keep intermediates in SBUF: smaller tiles or fewer live tensors per loop",
        )
    if e.dma_avg_transfer_bytes is not None and e.dma_avg_transfer_bytes < SMALL_DMA_BYTES:
        fire(
            "small DMA transfers (average under 4 KiB)",
            e.dma_avg_transfer_bytes,
            SMALL_DMA_BYTES,
            "move larger contiguous blocks per descriptor (at least 4 KiB per partition)",
        )
    return out  # NKI instruction coverage: no profile here names the field, so it is not read


WINDOW_REFERENCE = (
    "the union of the category's op intervals (FrameworkInstruction): categories that run at once each count "
    "the overlap"
)
NO_WINDOW_NECESSARY_BYTES = "TensorInfo's necessary bytes are the kernel's tensors, not a window's"


def window_ladder(
    inputs: WindowInputs, metadata: dict | None, peaks: Peaks | None, warnings: list | None
) -> dict[str, object]:
    """One category's window's ladder, the same rungs as the kernel's (analysis/window_inputs.py reads them
    from the tables), as a dict of the Bounds keys and their notes: its reference is its window."""
    counters = ProfileCounters(
        profile_total_time_s=inputs.window_s,
        profile_active_time_s=inputs.window_s,
        dma_active_time_s=inputs.dma_active_s,
        dma_transfer_bytes=inputs.dma_bytes,
    )
    for engine in ENGINES:
        setattr(counters, f"{engine}_engine_active_time_s", inputs.engine_active_s.get(engine))
    efficiency = Efficiency(**dict.fromkeys(Efficiency.keys()))  # type: ignore[arg-type]  # two inputs only
    efficiency.hardware_flops, efficiency.transpose_flops = inputs.hardware_flops, inputs.transpose_flops
    dge = next((w for w in map(_warning_text, warnings or []) if DGE in w), None)
    part = _ladder(counters, _dma_peak(metadata, peaks), peaks, efficiency, dge)
    part.notes["bound_reference_s"] = WINDOW_REFERENCE
    part.notes["bound_memory_no_reloads_s"] = part.notes["speedup_if_no_reloads"] = NO_WINDOW_NECESSARY_BYTES
    return {**{k: getattr(part, k) for k in Bounds.keys()}, "notes": part.notes}
