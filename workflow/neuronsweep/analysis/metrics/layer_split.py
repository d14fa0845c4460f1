"""A model's layer measured whole (workloads/layer.py): its time by category and each GEMM's time inside it,
as the capture measured them (cpu: backends/layer_split.py; xla: backends/xla_split.py) or as a neuron
profile's FrameworkInstruction table says (analysis/framework_split.py)."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis.layer_categories import CATEGORIES
from neuronsweep.analysis.metrics.parts import Part, ratio
from neuronsweep.store.records import CaptureRecord

NO_SPLIT = {
    "neuron": "the profile has no FrameworkInstruction table, which Neuron Explorer's parquet output has for a NEFF "
    "compiled with XLA_IR_DEBUG=1 and XLA_HLO_DEBUG=1 (a layer case's build sets them on every route)",
}


@dataclass(kw_only=True)
class LayerSplit(Part):
    """The profiled execution's span and its categories (they add up to the span: `other` is the rest),
    the span over the timed median (what the ranges cost), and each GEMM module's seconds inside the layer."""

    split_span_s: float | None
    split_gemm_s: float | None
    split_attention_s: float | None
    split_norm_s: float | None
    split_elementwise_s: float | None
    split_rope_s: float | None
    split_moe_routing_s: float | None
    split_collectives_s: float | None
    split_other_s: float | None
    split_span_over_latency: float | None
    gemms_inside_s: dict | None


def layer_split(
    capture: CaptureRecord | None,
    backend: str,
    latency_median_s: float | None,
    profile: tuple[dict | None, str | None] | None = None,
) -> LayerSplit:
    """The capture's split, else the profile's (`profile`: framework_split.split's (split, why), None where
    the view has no FrameworkInstruction table), or every key null with why."""
    split = capture.details.get("layer_split") if capture else None
    if not split and profile:
        split, why = profile
        if not split:
            return LayerSplit.null(why or "")
    if not split:
        why = capture.details.get("layer_split_why") if capture else None
        return LayerSplit.null(why or NO_SPLIT.get(backend, "the capture recorded no split of this layer"))
    values = {f"split_{c}_s": split["categories_s"].get(c) for c in CATEGORIES}
    part = LayerSplit(
        split_span_s=split["span_s"],
        **values,
        split_span_over_latency=ratio(split["span_s"], latency_median_s),
        gemms_inside_s=split["gemms_inside_s"],
        notes={"split_span_s": split["method"]},
    )
    if split["gemms_inside_s"] is None:
        part.notes["gemms_inside_s"] = split.get("gemms_inside_why") or "the split has no GEMM's time inside the layer"
    return part
