"""A neuron case's ranks on one timeline from their device profiles: each profiled rank's parquet view
(ranks/rank_<r>/parquet/) holds a `CcOp` table, one row per collective operation the collective engines
ran, with its `start_ts` and `end_ts`, the `trigger_start_ts` of the PSEUDO_TRIGGER_COLLECTIVE
instruction that triggered it and its `operation`; and an `ActiveTime` table, when each engine was busy
(Neuron Explorer's profile-schema-reference, schema 7.4.0 of SDK 2.31 onwards).

A rank arrives at a collective when its own instructions trigger it, and every rank leaves it together
at its end, so the clocks are aligned on the exits and each rank's wait is the last arrival minus its own
(analysis/rank_timeline.py, as for the gloo ranks). The i-th operation of every rank, in the order they
start, is one collective: each rank runs its own copy of the forward, and the docs do not say that an
`op_id` names the same call on every rank. A collective is overlapped by compute for the time a compute
engine of the same rank (ActiveTime: tensor, vector, scalar, gpsimd) is busy between its trigger and its end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from neuronsweep.analysis import rank_timeline
from neuronsweep.analysis.engines import COMPUTE_ENGINES
from neuronsweep.analysis.intervals import inside_each, merge
from neuronsweep.analysis.rank_timeline import RankTimeline, Span

CC_FIELDS = ("start_ts", "end_ts", "trigger_start_ts", "operation")
SOURCE = "each rank's CcOp table (trigger_start_ts, end_ts) in its parquet view"


@dataclass(frozen=True)
class DeviceRanks:
    """The profiled ranks' collectives on one timeline: per rank each collective's (arrival, exit) on its own
    clock, their operations, the aligned timeline, the share of the collectives' time a compute engine was
    busy, and the mean over the ranks of the time they waited in the profiled execution; or why not."""

    spans: tuple[tuple[Span, ...], ...] = ()
    operations: tuple[str, ...] = ()
    timeline: RankTimeline | None = None
    overlap_pct: float | None = None
    wait_s: float | None = None
    notes: tuple[str, ...] = ()
    why: str | None = None

    def summary(self) -> dict[str, object]:
        """view.json's `rank_timeline` (as a gloo capture's capture.json has it), with `why` when there is none."""
        t = self.timeline
        if t is None:
            return {"why": self.why}
        return {
            "source": SOURCE,
            "instances": len(t.arrivals_s),
            "ranks": len(t.offsets_s),
            "offsets_s": list(t.offsets_s),
            "residual_s": t.residual_s,
            "straggler_rank": t.straggler_rank,
            "rank_wait_max_s": t.rank_wait_max_s,
            "collective_wait_pct": t.collective_wait_pct,
            "collective_overlap_pct": self.overlap_pct,
            "wait_s": self.wait_s,
            "operations": list(self.operations),
            "notes": list(self.notes),
        }


def _table(folder: Path, name: str, columns: tuple[str, ...]) -> pd.DataFrame | None:
    """The parquet table `name` of one view (a large one is split as Name_0, Name_1: read together), with the
    `columns` it has; None where the view has no such table."""
    import pyarrow.parquet as pq

    files = sorted(folder.glob(f"{name}.parquet")) + sorted(folder.glob(f"{name}_[0-9]*.parquet"))
    if not files:
        return None
    have = set(pq.read_schema(files[0]).names)
    return pd.concat(
        [pq.read_table(f, columns=[c for c in columns if c in have]).to_pandas() for f in files], ignore_index=True
    )


def read(view_dir: Path) -> DeviceRanks | None:
    """The ranks of the view folder's ranks/rank_<r>/parquet/ on one timeline; None where no rank was viewed as
    parquet (a view without it, or a case not run on ranks)."""
    folders = sorted(view_dir.glob("ranks/rank_*/parquet"), key=lambda p: int(p.parent.name.removeprefix("rank_")))
    if not folders:
        return None
    try:
        ops = [_table(f, "CcOp", CC_FIELDS) for f in folders]
        active = [_table(f, "ActiveTime", ("start_ts", "end_ts", "engine")) for f in folders]
        return timeline(ops, active)
    except (OSError, ValueError, TypeError) as exc:  # pyarrow's errors are the first two; a text in a time column
        # the last: a damaged file is the reason, not a crash
        return DeviceRanks(why=f"a rank's parquet view is not readable ({(str(exc).splitlines() or [''])[0]})")


def timeline(ops: list[pd.DataFrame | None], active: list[pd.DataFrame | None]) -> DeviceRanks:
    """Each rank's CcOp rows (`ops`) and ActiveTime rows (`active`, None where it has none) on one timeline."""
    if len(ops) < 2:
        return DeviceRanks(why=f"{len(ops)} rank was profiled: a timeline needs two")
    lacking = [r for r, t in enumerate(ops) if t is None or t.empty]
    if lacking:
        return DeviceRanks(
            why=f"rank(s) {', '.join(map(str, lacking))} have no CcOp rows: no collective operation in their "
            "profiled execution, or a tool that does not write the table"
        )
    frames = [t for t in ops if t is not None]
    no_trigger = [r for r, t in enumerate(frames) if "trigger_start_ts" not in t or t["trigger_start_ts"].isna().any()]
    if no_trigger:
        return DeviceRanks(
            why=f"rank(s) {', '.join(map(str, no_trigger))}' CcOp rows lack trigger_start_ts (an optional field of "
            "the profile schema), so when a rank reached a collective is not known"
        )
    frames = [t.sort_values("start_ts", kind="stable").reset_index(drop=True) for t in frames]
    counts = [len(t) for t in frames]
    n = min(counts)
    notes = []
    if len(set(counts)) > 1:
        notes.append(f"the ranks ran {', '.join(map(str, counts))} collective operations: the first {n} are aligned")
    spans = tuple(
        tuple((float(a) * 1e-9, float(e) * 1e-9) for a, e in zip(t["trigger_start_ts"][:n], t["end_ts"][:n]))
        for t in frames
    )
    aligned = rank_timeline.align([list(s) for s in spans])
    overlap = _overlap(frames, active, n)
    if overlap is None:
        notes.append("a rank has no ActiveTime table: the overlap with compute is not known")
    waits = [sum(w[r] for w in aligned.waits_s) for r in range(len(frames))]
    operations = tuple(str(o) for o in frames[0]["operation"][:n]) if "operation" in frames[0] else ()
    return DeviceRanks(spans, operations, aligned, overlap, sum(waits) / len(waits), tuple(notes))


def _overlap(frames: list[pd.DataFrame], active: list[pd.DataFrame | None], n: int) -> float | None:
    """The share of the ranks' time inside their collectives (trigger to end) that a compute engine of the
    same rank was busy; None where a rank has no ActiveTime."""
    inside = covered = 0.0
    for ops, busy in zip(frames, active):
        if busy is None:
            return None
        compute = busy[busy["engine"].astype(str).str.lower().isin(COMPUTE_ENGINES)]
        window = merge(compute["start_ts"], compute["end_ts"])
        starts = ops["trigger_start_ts"][:n].to_numpy(np.float64)
        ends = ops["end_ts"][:n].to_numpy(np.float64)
        # each collective's time with compute: the merged compute intervals clipped to it
        covered += float(inside_each(window, starts, ends).sum())
        inside += float(np.clip(ends - starts, 0, None).sum())
    return 100 * covered / inside if inside > 0 else None
