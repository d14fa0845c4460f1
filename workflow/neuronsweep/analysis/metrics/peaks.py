"""The peaks a neuron profile is measured against: the profile's own metadata where the view has it,
else the configured target's table row (host/targets.py), both per logical core (LNC): one physical core's
TensorE and DMA peaks, each times the physical cores behind the logical one (docs/metrics.md, "Headroom")."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis import roofline
from neuronsweep.host.targets import TARGETS, Target, target_family
from neuronsweep.store.records import BuildRecord


@dataclass(frozen=True)
class Peaks:
    """One logical NeuronCore's peaks, and the sentences saying where they come from."""

    bf16_flops_per_s: float  # TensorE's bf16 rate x the physical cores, the profiler's MFU convention
    fp32_ratio: float  # how many times slower fp32 runs on the target generation
    hbm_bytes_per_s: float  # one HBM stack: the profiler's MBU denominator (the roofline's memory side)
    target: str
    lnc: int  # the physical cores behind the profiled logical core: both the TensorE and the DMA peak scale by it
    source: str
    dma_bytes_per_s: float | None  # dma_ddr_bandwidth x the physical cores: the bounds' DMA peak; None: unknown
    dma_source: str  # where dma_bytes_per_s comes from, or why there is none


def neuron_peaks(build: BuildRecord | None, summary: dict, metadata: dict | None, notes: dict[str, str]) -> Peaks:
    """Says in notes["neuron_target"] when the configured target is not the instance the profile was
    captured on."""
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
        if meta["dma_bytes_per_s"] is None:
            meta["dma_bytes_per_s"], meta["dma_source"] = _target_dma(row, meta["lnc"], "the profile's metadata")
        return Peaks(**meta, fp32_ratio=row.fp32_ratio, target=target)
    dma, dma_source = _target_dma(row, lnc, "the view's profile metadata")
    return Peaks(
        bf16_flops_per_s=row.bf16_flops(lnc),
        fp32_ratio=row.fp32_ratio,
        hbm_bytes_per_s=row.hbm_bytes_per_s,
        target=target,
        lnc=lnc,
        source=f"{row.peak_source} (neuron.target {target}, LNC {lnc}; the view had no profile metadata)",
        dma_bytes_per_s=dma,
        dma_source=dma_source,
    )


def _target_dma(row: Target, cores: int, lacking: str) -> tuple[float | None, str]:
    """The target's documented DMA peak of one physical core times `cores`, or None with why: never the HBM
    stack's bandwidth, which every core on the chip shares (AWS's performance-bounds.md)."""
    if row.dma_bytes_per_core_per_s is None:
        return None, f"{lacking} has no dma_ddr_bandwidth, and {row.name} has {row.dma_source}"
    return (
        row.dma_bytes_per_core_per_s * cores,
        f"{row.dma_source} x {cores} physical core(s) ({lacking} has no dma_ddr_bandwidth)",
    )
