"""A model's layer measured whole (workloads/layer.py): its time by category and each GEMM's time inside it,
read from the one record every backend's split makes (store/layer_split.py): the capture's (cpu:
backends/cpu_split.py; xla: backends/xla_split.py) or the profile's (neuron: analysis/framework_split.py),
as the backend's descriptor says (config/backends.py `layer_split`)."""

from __future__ import annotations

from dataclasses import dataclass

from neuronsweep.analysis.layer_categories import CATEGORIES
from neuronsweep.analysis.metrics.parts import Part, ratio
from neuronsweep.config.backends import BACKENDS
from neuronsweep.store.layer_split import LayerSplitRecord
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
    split_bounds: dict | None  # per category: its window's ladder (neuron, parquet: analysis/window_inputs.py)
    split_bottlenecks: str | None  # per category its window's bottleneck engine, one line for summary.csv


def layer_split(
    capture: CaptureRecord | None,
    backend: str,
    latency_median_s: float | None,
    profile: tuple[LayerSplitRecord | None, str | None] | None = None,
    windows: tuple[dict[str, dict] | None, str | None] | None = None,
) -> LayerSplit:
    """The layer's split where its backend measures one: the capture's record, or the profile's (`profile`:
    framework_split.split's (record, why), None where the view has no FrameworkInstruction table); else
    every key null with why. `windows`: each category's window ladder (bounds.window_ladder), or why none."""
    described = BACKENDS[backend]
    if described.layer_split == "profile":
        split, why = profile or (None, None)
    else:
        split, why = (capture.layer_split, capture.layer_split_why) if capture else (None, None)
    if split is None:
        return LayerSplit.null(why or described.layer_split_missing)
    part = LayerSplit(
        split_span_s=split.span_s,
        **{f"split_{c}_s": split.categories_s.get(c) for c in CATEGORIES},
        split_span_over_latency=ratio(split.span_s, latency_median_s),
        gemms_inside_s=split.gemms_inside_s,
        split_bounds=None,
        split_bottlenecks=None,
        notes={"split_span_s": split.method},
    )
    ladders, no_windows = windows or (None, described.window_bounds_missing)
    if ladders:
        part.split_bounds = ladders
        part.split_bottlenecks = "; ".join(
            f"{c}: {ladder['bottleneck_engine']}" for c, ladder in ladders.items() if ladder["bottleneck_engine"]
        )
    else:
        part.notes["split_bounds"] = part.notes["split_bottlenecks"] = no_windows or "no category has a window"
    if split.gemms_inside_s is None:
        part.notes["gemms_inside_s"] = split.gemms_inside_why or "the split has no GEMM's time inside the layer"
    return part
