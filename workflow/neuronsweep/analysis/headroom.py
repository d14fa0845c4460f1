"""Across a sweep, where the headroom is: each neuron case's time split into the gaps of its bounds ladder
(analysis/metrics/bounds.py), and the cases ranked by the time their largest gap could recover.

The two families of the ladder (memory, compute) both start from the reference time, so adding them would
count time twice. One split that adds up: the reference is engines waiting on each other (the reference less
the perfect pipeline), then the bottleneck engine's own ladder: for the DMA, its inefficiency (its active time
less the ideal at peak), the excess traffic (that less the necessary bytes at peak) and the necessary
transfer; for TensorE, its under-use, the transposes and the useful FLOPs at peak; for another engine, its
active time. Where a rung is null (a missing input, a profile that says its DMA figures are incomplete), the
time below the last known rung stays one part, named for that rung. The gaps are not predicted savings.
"""

from __future__ import annotations

import math

import pandas as pd

GAPS = {  # gap -> what it is, as the report names it
    "waiting": "engines waiting on each other",
    "dma_inefficiency": "DMA inefficiency",
    "excess_traffic": "excess traffic (reloads, spills)",
    "te_underuse": "TensorE under-used",
    "transposes": "TensorE transposes",
    "work": "the bottleneck's necessary work at peak",
}
LADDERS = {  # the bottleneck engine -> its rungs below the pipeline bound, and the gap above each
    "dma": (("bound_memory_ideal_s", "dma_inefficiency"), ("bound_memory_no_reloads_s", "excess_traffic")),
    "tensor": (("bound_compute_ideal_s", "te_underuse"), ("bound_compute_useful_s", "transposes")),
}


def _number(row: pd.Series, key: str) -> float | None:
    value = row.get(key)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def split(row: pd.Series) -> dict[str, float] | None:
    """A case's reference time split into the gaps (seconds, adding up to bound_reference_s); None without a
    ladder (not a neuron case, or no pipeline bound)."""
    reference, pipeline = _number(row, "bound_reference_s"), _number(row, "bound_pipeline_s")
    if reference is None or pipeline is None:
        return None
    out = dict.fromkeys(GAPS, 0.0)
    out["waiting"] = max(0.0, reference - pipeline)
    above = min(pipeline, reference)
    for key, gap in LADDERS.get(str(row.get("bottleneck_engine")), ()):
        rung = _number(row, key)
        if rung is None:
            break
        rung = min(rung, above)
        out[gap] = above - rung
        above = rung
    out["work"] = above
    return out


def ranked(rows: pd.DataFrame) -> pd.DataFrame:
    """Per neuron case with a ladder: its gaps, the largest one and the time it could recover (x the GEMM's
    count in its model's forward where the row has one), the most recoverable first."""
    out = []
    for _, r in rows.iterrows():
        gaps = split(r)
        if gaps is None:
            continue
        largest = max((g for g in GAPS if g != "work"), key=lambda g: gaps[g])
        count = _number(r, "count") or 1.0
        out.append(
            {"scenario_id": r["scenario_id"], "suite": r["suite"], "bottleneck_engine": r.get("bottleneck_engine")}
            | {"reference_s": _number(r, "bound_reference_s"), **{f"{g}_s": v for g, v in gaps.items()}}
            | {"largest_gap": GAPS[largest], "count": count, "recoverable_s": count * gaps[largest]}
        )
    table = pd.DataFrame(out)
    return table.sort_values("recoverable_s", ascending=False, kind="stable") if len(table) else table
