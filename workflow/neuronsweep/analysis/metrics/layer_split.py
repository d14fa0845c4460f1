"""A model's layer measured whole (workloads/layer.py): its time by category and each GEMM's time inside it,
as the cpu capture measured them (backends/layer_split.py)."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis.layer_categories import CATEGORIES
from neuronsweep.analysis.metrics.parts import Part, ratio
from neuronsweep.store.records import CaptureRecord


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


def layer_split(capture: CaptureRecord | None, backend: str, latency_median_s: float | None) -> LayerSplit:
    """The capture's split, or every key null with why."""
    split = capture.details.get("layer_split") if capture else None
    if not split:
        why = (
            f"the {backend} backend does not split a layer's time by category yet (the cpu backend does)"
            if backend != "cpu"
            else "the capture recorded no split of this layer"
        )
        return LayerSplit.null(why)
    values = {f"split_{c}_s": split["categories_s"].get(c) for c in CATEGORIES}
    return LayerSplit(
        split_span_s=split["span_s"],
        **values,
        split_span_over_latency=ratio(split["span_s"], latency_median_s),
        gemms_inside_s=split["gemms_inside_s"],
        notes={"split_span_s": split["method"]},
    )
