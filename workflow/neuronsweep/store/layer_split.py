"""A measured layer's time by category: the one record every backend's split produces and metrics read.

A layer case (workloads/layer.py) is split by one producer per backend, each from what its platform
records: cpu from profiler ranges around the exported program's ops (backends/layer_split.py), xla from
XLA's span per HLO op (backends/xla_split.py), neuron from the profile's FrameworkInstruction table
(analysis/framework_split.py). Which one a backend has is its descriptor's `layer_split` (config/backends.py).
Each gives its executions' spans and per-category seconds to `LayerSplitRecord.median_of`, which keeps
the execution whose span is the median and makes `other` the rest of its span, so the categories add up
to the span on every backend. A capture's split travels in capture.json (CaptureRecord.layer_split); the
metrics read it (analysis/metrics/layer_split.py), and so will the headroom's windowed bounds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from neuronsweep.errors import UserError

OTHER = "other"  # the category that takes what no op's time claims (analysis/layer_categories.CATEGORIES)


@dataclass(frozen=True)
class LayerSplitRecord:
    """One layer's split: the span of the execution it describes, its seconds per category (adding up to the
    span, `other` the rest), how it was measured, and each GEMM module's seconds inside the layer where the
    producer can name the modules (else why not)."""

    span_s: float
    categories_s: dict[str, float]
    method: str
    executions: int
    gemms_inside_s: dict[str, float] | None = None
    gemms_inside_why: str | None = None
    spans_s: list[float] | None = None  # every execution's span, where several were read
    framework_ops: int | None = None  # neuron: the FrameworkInstruction rows the split read

    @classmethod
    def median_of(
        cls,
        executions: list[tuple[float, dict[str, float]]],
        method: str,
        gemms_inside_s: dict[str, float] | None = None,
        gemms_inside_why: str | None = None,
        framework_ops: int | None = None,
    ) -> LayerSplitRecord:
        """The split of the execution whose span is the median of `executions` ((span_s, seconds per
        category claimed by ops), at least one), `other` raised by what no category claims of its span."""
        if not executions:
            raise ValueError("a layer split needs at least one execution")
        span, claimed = sorted(executions, key=lambda e: e[0])[len(executions) // 2]
        categories = dict(claimed)
        categories[OTHER] = categories.get(OTHER, 0.0) + span - sum(claimed.values())
        return cls(
            span_s=span,
            categories_s=categories,
            method=method,
            executions=len(executions),
            gemms_inside_s=gemms_inside_s,
            gemms_inside_why=gemms_inside_why,
            spans_s=[round(s, 9) for s, _ in executions] if len(executions) > 1 else None,
            framework_ops=framework_ops,
        )

    def to_dict(self) -> dict:
        """The record as capture.json keeps it."""
        return {k: v for k, v in asdict(self).items() if v is not None or k == "gemms_inside_s"}

    @classmethod
    def from_dict(cls, data: object, where: str = "capture.json") -> LayerSplitRecord:
        """The record as `to_dict` wrote it (a key an earlier version wrote beside, as xla's span_spread_s, is
        passed over); another shape is one sentence naming `where`."""
        record = None
        if isinstance(data, dict):
            known = {f.name for f in fields(cls)}
            try:
                record = cls(**{k: v for k, v in data.items() if k in known})
            except TypeError:  # a key this version needs is missing
                pass
        if record is None or not isinstance(record.categories_s, dict) or not isinstance(record.span_s, int | float):
            raise UserError(
                f"{where}: its layer_split is not this version's ({str(data)[:80]}); rerun the capture stage for "
                "this case."
            )
        return record
