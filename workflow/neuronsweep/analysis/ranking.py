"""Comparisons inside each suite: who is fastest among scenarios that do comparable work, by how
much, and whether the difference is beyond the noise between processes (otherwise it is not called
out; one process a case, as a run without rounds in processes has, is never called out).

Equal work (same FLOPs: dtypes or impls of one shape, loop patterns of one size) compares time;
different work (tiling offsets, LLM buckets) compares throughput (FLOP/s); collectives compare the
dtypes of one operation, world and message size. Time is the framework
median where measured, else the profiled device time; whether a difference is called out is
analysis/verdict.py's rule (a test on the processes, Holm over the group, a minimum effect), the one
`neuronsweep compare` uses.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from neuronsweep.analysis import verdict
from neuronsweep.store.records import Timing

GROUPS = {  # suite -> columns that define "comparable"
    "matmul": ["m", "k", "n"],
    "tiling": ["dim", "boundary", "multiple", "dtype"],
    "llm": ["model", "phase", "projection", "dtype"],
    "mlp": ["b", "s", "h", "i", "dtype"],
    "loops": ["size", "dtype"],
    "collectives": ["op", "world", "bytes"],  # dtypes of one message size
}


def _time(row: pd.Series) -> tuple[float | None, str | None]:
    """(time, basis): the framework median where measured, else the device time."""
    if pd.notna(row.get("latency_median_s")):
        return row["latency_median_s"], "latency_median_s"
    if pd.notna(row.get("profile_total_time_s")):
        return row["profile_total_time_s"], "profile_total_time_s"
    return None, None


def _costs(samples: Mapping[str, Timing | list[float] | None], row: pd.Series, per: float) -> Timing | None:
    """A case's timing as costs (per FLOP where the group's work differs); None: no samples."""
    timing = verdict.as_timing(samples.get(row.get("workload_id")))
    return None if timing is None else timing.scaled(per)


def compare(table: pd.DataFrame, samples: Mapping[str, Timing | list[float] | None] | None = None) -> pd.DataFrame:
    """Adds group, time_s, time_basis, rank_in_group, x_of_best and significant to the ok rows.
    `samples`: workload id -> its Timing (a device time has none, and is ranked, never judged)."""
    samples = samples or {}
    out = table.copy()
    for col in ("group", "time_s", "time_basis", "rank_in_group", "x_of_best", "significant"):
        out[col] = pd.Series([None] * len(out), dtype="object")
    for suite, cols in GROUPS.items():
        rows = out[(out["suite"] == suite) & (out["status"] == "ok")]
        if rows.empty or not set(cols) <= set(out.columns):
            continue
        for key, grp in rows.groupby(cols, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            label = ", ".join(f"{c}={v}" for c, v in zip(cols, key))
            timed = [(i, *_time(r)) for i, r in grp.iterrows()]
            timed = [t for t in timed if t[1] is not None]
            if not timed:
                continue
            equal_work = grp["flops"].nunique(dropna=False) <= 1  # collectives: no FLOPs, equal bytes
            # cost per unit of work: time (equal work) or time per FLOP (different work)
            per = {i: 1.0 if equal_work else 1.0 / grp.loc[i, "flops"] for i, _, _ in timed}
            cost = {i: float(t) * per[i] for i, t, _ in timed if t is not None}
            best = min(cost, key=lambda i: cost[i])
            order = sorted(timed, key=lambda x: cost[x[0]])

            # the rule compare uses (analysis/verdict.py): each against the best, Holm over the group
            costs = {i: _costs(samples, grp.loc[i], per[i]) for i, _, _ in timed}
            said = verdict.judge([(costs[best], costs[i]) for i, _, _ in order[1:]])
            for rank, (i, t, basis) in enumerate(order, start=1):
                sig = None
                if rank > 1 and said[rank - 2].judged:
                    sig = said[rank - 2].beyond
                elif rank == 1 and verdict.unjudged(costs[i]) is None:
                    sig = False
                out.loc[i, ["group", "time_s", "time_basis", "rank_in_group", "x_of_best", "significant"]] = [
                    label,
                    t,
                    basis,
                    rank,
                    cost[i] / cost[best],
                    sig,
                ]
    return out


def loops_table(table: pd.DataFrame) -> pd.DataFrame:
    """Seed 000's vmap / scan / for-loop comparison, per size, on measured numbers."""
    rows = table[(table["suite"] == "loops") & (table["status"] == "ok")]
    cols = [
        "size",
        "steps",
        "pattern",
        "workload_id",
        "time_s",
        "time_basis",
        "latency_iqr_s",
        "latency_spread_s",
        "x_of_best",
        "significant",
        "rank_in_group",
        "compile_s",
        "profile_active_time_s",
        "tensor_engine_active_pct",
        "vector_engine_active_pct",
        "dma_active_pct",
        "bound_class",
    ]
    return rows[[c for c in cols if c in rows.columns]].sort_values(["steps", "rank_in_group"])
