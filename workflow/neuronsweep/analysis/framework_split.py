"""A layer's time by category on neuron, from the profile's FrameworkInstruction table.

Neuron Explorer's parquet output rolls the device instructions up the compiler's hierarchy (Framework ->
HLO -> ... -> Instruction: profile-schema-reference.rst, "Hierarchical aggregation"). A FrameworkInstruction
row is one framework op, named by its module path and op (`framework_name`, the reference's example
`NeuronLlamaDecoderLayer[1]/function[2]/aten.add`), with the merged intervals of the device instructions it
became (`time_intervals`, ns). The profile has it for NEFFs compiled with XLA_IR_DEBUG=1 and XLA_HLO_DEBUG=1
(how-to-link-view-source-code.rst): neuron layer cases are built so.

Each op gets its category from analysis/layer_categories.py's rules (the op, the innermost module class).
The engines run in parallel, so ops overlap: an instant is shared equally among the categories running in
it (analysis/intervals.shares), and `other` is the execution's span (Summary.total_time) less the time no
op covers, so the categories add up to the span exactly (store/layer_split.py, the record every backend's
split makes). The names carry module classes, not the attribute paths (`self_attn.q_proj`)
that a GEMM timed alone is matched by, so no GEMM's time inside the layer is read from them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from neuronsweep.analysis.intervals import shares
from neuronsweep.analysis.layer_categories import CATEGORIES, categorize
from neuronsweep.store.layer_split import LayerSplitRecord

INDEX = re.compile(r"\[[^\]]*\]$")
METHOD = (
    "the profile's FrameworkInstruction intervals by category (Neuron Explorer); where ops of several categories "
    "overlap, the time is shared equally among them; other = Summary.total_time less what the ops cover"
)
NO_GEMM_MODULES = (
    "the profile names a framework op by its module classes (FrameworkInstruction.framework_name), not by the "
    "module path a GEMM timed alone is matched by"
)


def parse(name: str) -> tuple[str, str, str]:
    """(op, module path, innermost module class) of a framework_name: `A[0]/B[1]/function[2]/aten.mm` ->
    ("mm", "A.B", "B"). The `[i]` indices and the `function` scopes are not modules."""
    parts = [INDEX.sub("", p) for p in str(name).split("/") if p]
    if not parts:
        return "", "", ""
    op = parts[-1].rpartition(".")[2] if parts[-1].startswith(("aten.", "prims.")) else parts[-1]
    modules = [p for p in parts[:-1] if p and p != "function"]
    return op, ".".join(modules), modules[-1] if modules else ""


def intervals(text: Any) -> list[tuple[int, int]]:
    """The [[start, end], ...] of a time_intervals string; a malformed one raises ValueError."""
    pairs = json.loads(text) if isinstance(text, str) else text
    out = []
    for pair in pairs:
        start, end = (int(v) for v in pair)
        if end < start:
            raise ValueError(f"interval [{start}, {end}] ends before it starts")
        out.append((start, end))
    return out


def categorize_ops(rows: list[tuple[str, object]]) -> tuple[dict[str, list[tuple[int, int]]] | None, str | None]:
    """Each category's intervals (ns) from the rows (framework_name, time_intervals), or (None, why) where an
    interval is not [[start, end], ...]: the windows a category's time and its bounds are read over."""
    windows: dict[str, list[tuple[int, int]]] = {}
    for name, text in rows:
        op, module, cls = parse(name)
        try:
            windows.setdefault(categorize(op, module, cls), []).extend(intervals(text))
        except (ValueError, TypeError) as e:
            shown = str(text)[:60]
            return None, f"FrameworkInstruction {name!r}: time_intervals {shown!r} is not [[start, end], ...] ({e})"
    return windows, None


def split(rows: list[tuple[str, object]], span_s: float | None) -> tuple[LayerSplitRecord | None, str | None]:
    """(the layer's split, None), or (None, why): `rows` are (framework_name, time_intervals) of the
    profile's FrameworkInstruction table, `span_s` the profiled execution's total_time."""
    if not rows:
        return None, "the profile's FrameworkInstruction table is empty"
    if not span_s or span_s <= 0:
        return None, "the profile has no total_time to split"
    windows, why = categorize_ops(rows)
    if windows is None:
        return None, why
    ns, covered = shares([(s, e, category) for category, spans in windows.items() for s, e in spans])
    span_ns = span_s * 1e9
    if covered > span_ns * 1.0001:
        return None, (
            f"the FrameworkInstruction intervals cover {covered * 1e-9:.6g} s, more than the execution's "
            f"total_time {span_s:.6g} s: they are not of one execution"
        )
    categories = {c: ns.get(c, 0.0) * 1e-9 for c in CATEGORIES}
    record = LayerSplitRecord.median_of(
        [(span_s, categories)], METHOD, gemms_inside_why=NO_GEMM_MODULES, framework_ops=len(rows)
    )
    return record, None
