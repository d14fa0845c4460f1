"""The peaks a neuron profile is measured against: the profile's own metadata where the view has it,
else the configured target's table row (host/targets.py), both per logical core (LNC)."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis import roofline
from neuronsweep.host.targets import TARGETS, target_family
from neuronsweep.store.records import BuildRecord


@dataclass(frozen=True)
class Peaks:
    """One NeuronCore's peaks at the run's LNC, and the sentence saying where they come from."""

    bf16_flops_per_s: float  # TensorE's bf16 rate, the profiler's MFU convention
    fp32_ratio: float  # how many times slower fp32 runs on the target generation
    hbm_bytes_per_s: float
    target: str
    lnc: int
    source: str


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
        return Peaks(**meta, fp32_ratio=row.fp32_ratio, target=target, lnc=lnc)
    return Peaks(
        bf16_flops_per_s=row.bf16_flops(lnc),
        fp32_ratio=row.fp32_ratio,
        hbm_bytes_per_s=row.hbm_bytes_per_s,
        target=target,
        lnc=lnc,
        source=f"{row.peak_source} (neuron.target {target}, LNC {lnc}; the view had no profile metadata)",
    )
