"""MFU and MBU recomputed from raw fields (beside the tool's mfu_tool_pct / mbu_tool_pct), and the bound
class: overhead when the device is active under IDLE_PCT of the profiled call (neuron: engines, xla:
XLA execute), else the busiest engine or DMA (neuron), else the roofline bound."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis.engines import ENGINES
from neuronsweep.analysis.metrics.counters import ProfileCounters
from neuronsweep.analysis.metrics.parts import Part
from neuronsweep.analysis.metrics.peaks import Peaks
from neuronsweep.analysis.metrics.work import Roofline, Work
from neuronsweep.config.backends import BACKENDS

IDLE_PCT = 50.0  # below this device-active share, launch/sync/start-up overhead dominates


@dataclass(kw_only=True)
class Utilization(Part):
    """MFU and MBU recomputed from the profile's raw fields, and the bound class with its evidence."""

    mfu_recomputed_pct: float | None = None
    mbu_recomputed_pct: float | None = None
    bound_class: str | None = None
    bound_evidence: str | None = None


def utilization(
    backend: str, peaks: Peaks | None, counters: ProfileCounters, analytic: Work, placed: Roofline
) -> Utilization:
    """MFU/MBU against the neuron peaks (the profiler's convention: TensorE's bf16 rate over total_time, one HBM stack),
    then the bound class: overhead, the busiest engine, or the roofline's bound."""
    out = Utilization()
    busy: dict[str, float] = {}
    total = counters.profile_total_time_s
    if peaks is not None:
        flops = counters.profile_flops_tool or analytic.flops
        if flops and total:  # the profiler's convention: TensorE peak (bf16 rate), over total_time
            out.mfu_recomputed_pct = 100.0 * flops / (peaks.bf16_flops_per_s * total)
        hbm = (counters.hbm_read_bytes or 0) + (counters.hbm_write_bytes or 0)
        if total and counters.hbm_read_bytes is not None:  # over one HBM stack, as the profiler's MBU
            out.mbu_recomputed_pct = 100.0 * hbm / total / peaks.hbm_bytes_per_s
        names = {e: f"{e}_engine_active_time_s" for e in ENGINES if e != "sync"} | {"dma": "dma_active_time_s"}
        busy = {name: getattr(counters, key) for name, key in names.items() if getattr(counters, key) is not None}
    else:
        for key in ("mfu_recomputed_pct", "mbu_recomputed_pct"):
            out.notes[key] = f"the {backend} backend has no tool MFU/MBU to recompute; see roofline_efficiency_pct"
    active = counters.profile_active_pct
    share_of = BACKENDS[backend].active_share_of
    if share_of and active is not None and active < IDLE_PCT:
        out.bound_class = "overhead"
        out.bound_evidence = f"device active {active:.1f}% of the profiled call ({backend}: {share_of})"
    elif busy:
        top = max(busy, key=lambda name: busy[name])
        out.bound_class = {"tensor": "compute", "dma": "memory"}.get(top, top)
        out.bound_evidence = (
            f"busiest: {top} {busy[top] * 1e6:.1f} us of {(total or 0) * 1e6:.1f} us; "
            f"roofline says {placed.roofline_bound}"
        )
    elif placed.roofline_bound:
        out.bound_class = placed.roofline_bound
        out.bound_evidence = (
            f"roofline only (no engine counters on {backend}): AI "
            f"{analytic.arithmetic_intensity_flops_per_byte:.1f} FLOP/B vs ridge "
            f"{placed.ridge_flops_per_byte:.1f}"
        )
    for key in ("bound_class", "bound_evidence"):
        if getattr(out, key) is None:
            out.notes[key] = "neither engine/DMA busy times nor a roofline are known"
    return out
