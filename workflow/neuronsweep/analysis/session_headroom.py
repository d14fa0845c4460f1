"""Headroom per kind of step in a server's profile session: a SESSION-mode NTFF holds every execution of a
worker, of every NEFF it ran, in one device profile. Neuron Explorer's `ExecutionInfo` table has a row per
execution with the file name of its NEFF (`neff_name`) and its start and end ("in multi-NEFF profiles,
different executions may correspond to different NEFFs. Use execution_start_ts and execution_end_ts to
correlate the time range of each execution's data (instructions, DMAs, etc.) with the NEFF file name":
profile-schema-reference). So each NEFF's executions are windows of the worker's tables, and the bounds ladder
over those windows (analysis/window_inputs.py, as a layer's categories are bounded) is that kind of step's
headroom; over every rank, the ladder of their windows summed.

Two things the docs leave open are decided here and said: execution_start_ts and execution_end_ts are
"relative to the start of the profile", and the other tables' timestamps are read on that same clock (the
field test's `session executions' clock` line checks that the instructions fall in the executions); and a step's
graph is the NEFF's file name without `.neff`, as the steps from the system trace name it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from neuronsweep.analysis.intervals import merge, starts_inside
from neuronsweep.analysis.metrics.bounds import window_ladder
from neuronsweep.analysis.metrics.peaks import Peaks
from neuronsweep.analysis.profile_tables import ProfileTables, columns, find_table
from neuronsweep.analysis.window_inputs import WindowInputs, inputs_over, lacking

EXECUTIONS = "ExecutionInfo"
FIELDS = ("neff_name", "execution_start_ts", "execution_end_ts")
SHOWN = (  # the ladder's figures graphs.csv shows per kind of step
    "bottleneck_engine",
    "bound_memory_ideal_s",
    "bound_compute_ideal_s",
    "speedup_if_memory_ideal",
    "speedup_if_compute_ideal",
    "speedup_if_pipelined",
)


@dataclass(frozen=True)
class StepHeadroom:
    """One kind of step's ladder over every rank's executions of it: its figures per execution (the seconds
    divided by how many ran) and the speed-ups, with the notes of the ones left null."""

    graph: str
    executions: int
    figures: dict[str, object]
    notes: dict[str, str]


def windows(db: ProfileTables) -> tuple[dict[str, list[tuple[int, int]]] | None, str | None]:
    """Each NEFF's executions in one worker's profile, by graph (its file name without .neff): (spans in ns,
    None), or (None, why) where the profile has no ExecutionInfo with those fields or a table the ladder reads."""
    table = find_table(db, EXECUTIONS)
    if table is None:
        return None, f"the device profile has no {EXECUTIONS} table (each execution's NEFF and time range)"
    missing = [f for f in FIELDS if f not in columns(db, table)]
    if missing:
        return None, f"the device profile's {EXECUTIONS} has no {missing[0]}"
    absent = lacking(db)
    if absent:
        return None, f"the device profile has no {absent}, which the ladder over a window reads"
    rows = db.df(f'SELECT {", ".join(FIELDS)} FROM "{table}"').to_dict("records")
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        start, end, neff = row["execution_start_ts"], row["execution_end_ts"], row["neff_name"]
        if neff is None or start is None or end is None or start != start or end != end:  # NaN: a pre-v6 NTFF
            continue
        spans[PurePosixPath(str(neff)).name.removesuffix(".neff")].append((int(start), int(end)))
    if not spans:
        return None, f"no {EXECUTIONS} row has a NEFF and a time range (a pre-v6 NTFF has no execution timeline)"
    return dict(spans), None


def per_graph(workers: Sequence[tuple[str, ProfileTables, Peaks]]) -> tuple[list[StepHeadroom], list[str]]:
    """Each kind of step's ladder over every worker's executions of it (each worker's name, tables and peaks);
    and a sentence per worker left out."""
    summed: dict[str, WindowInputs] = {}
    counts: dict[str, int] = defaultdict(int)
    left_out, peaks = [], None
    for name, db, own in workers:
        found, why = windows(db)
        if found is None:
            left_out.append(f"{name}: {why}")
            continue
        peaks = peaks or own
        for graph, inputs in inputs_over(db, found).items():
            summed[graph] = summed[graph].plus(inputs) if graph in summed else inputs
            counts[graph] += len(found[graph])
    out = []
    for graph, inputs in sorted(summed.items(), key=lambda kv: -kv[1].window_s):
        ladder = window_ladder(inputs, peaks, None)
        values = dict(ladder.items())
        figures = {
            k: (v / counts[graph] if k.endswith("_s") and isinstance(v, float) else v)
            for k, v in values.items()
            if k in SHOWN
        }
        figures["execution_s"] = inputs.window_s / counts[graph]
        notes = {k: v for k, v in ladder.notes.items() if k in SHOWN and values.get(k) is None}
        out.append(StepHeadroom(graph, counts[graph], figures, notes))
    return out, left_out


def inside_share(db: ProfileTables) -> float | None:
    """The share (%) of the profile's instructions that start inside an execution's time range: 100 where the
    tables share ExecutionInfo's clock (what per_graph assumes), far less where they do not; None without both."""
    found, _ = windows(db)
    table = find_table(db, "Instruction")
    if found is None or table is None:
        return None
    spans = merge([s for v in found.values() for s, _ in v], [e for v in found.values() for _, e in v])
    starts = db.df(f'SELECT start_ts FROM "{table}"')["start_ts"]
    return 100 * float(starts_inside(spans, starts).mean()) if len(starts) else None
