"""Tables derived from a ProfileDB: what extract writes per workload and the report reads.

Engine busy time is an interval union per track (instructions pipeline within an engine and DMA
queues overlap, so summing durations overstates it), then per class; the overlap matrix is the
time two classes are busy at once. Classes come from track names (profile_db.classify), never from
opcode names.
"""

from __future__ import annotations

MERGED = """
WITH s AS (
  SELECT c.class, sl.track_id, sl.ts, sl.ts + sl.dur AS te
  FROM slice sl JOIN track_class c ON c.track_id = sl.track_id AND c.workload_id = sl.workload_id
  WHERE sl.dur > 0 AND c.class IS NOT NULL
), o AS (
  SELECT *, max(te) OVER (PARTITION BY class ORDER BY ts, te ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pe
  FROM s
), g AS (
  SELECT *, sum(CASE WHEN pe IS NULL OR ts > pe THEN 1 ELSE 0 END) OVER (PARTITION BY class ORDER BY ts, te) AS grp
  FROM o
)
SELECT class, grp, min(ts) AS b, max(te) AS e FROM g GROUP BY class, grp
"""


def engine_busy(db):
    """Busy ns per track class (interval union across all tracks of the class) and the slice sum beside it."""
    if "slice" not in db.tables:
        return None
    return db.con.execute(f"""
        WITH u AS ({MERGED}),
        sums AS (SELECT c.class, count(*) AS slices, sum(sl.dur) AS summed_ns
                 FROM slice sl JOIN track_class c USING (track_id, workload_id)
                 WHERE sl.dur > 0 AND c.class IS NOT NULL GROUP BY c.class)
        SELECT u.class, sum(e - b) AS busy_ns, any_value(sums.slices) AS slices, any_value(sums.summed_ns) AS summed_ns
        FROM u JOIN sums USING (class) GROUP BY u.class ORDER BY busy_ns DESC""").df()


def overlap(db):
    """ns during which two classes are both busy (the diagonal is each class's busy time)."""
    if "slice" not in db.tables:
        return None
    return db.con.execute(f"""
        WITH u AS ({MERGED})
        SELECT a.class AS class_a, b.class AS class_b,
               sum(greatest(0, least(a.e, b.e) - greatest(a.b, b.b))) AS overlap_ns
        FROM u a JOIN u b ON a.b < b.e AND b.b < a.e
        GROUP BY 1, 2 ORDER BY 1, 2""").df()


def opcodes(db):
    """Per class and slice name (opcode on Neuron, aten op on cpu): count, duration distribution, and
    self time (duration minus nested children), which adds up without double counting."""
    if "slice" not in db.tables:
        return None
    return db.con.execute("""
        WITH kids AS (SELECT workload_id, parent_id, sum(dur) AS child_ns FROM slice
                      WHERE parent_id IS NOT NULL AND dur > 0 GROUP BY 1, 2)
        SELECT coalesce(c.class, 'unclassified') AS class, sl.name, count(*) AS count, sum(sl.dur) AS total_ns,
               sum(sl.dur - coalesce(k.child_ns, 0)) AS self_ns,
               avg(sl.dur) AS mean_ns, quantile_cont(sl.dur, 0.5) AS p50_ns, quantile_cont(sl.dur, 0.9) AS p90_ns,
               quantile_cont(sl.dur, 0.99) AS p99_ns
        FROM slice sl LEFT JOIN track_class c USING (track_id, workload_id)
        LEFT JOIN kids k ON k.workload_id = sl.workload_id AND k.parent_id = sl.id
        WHERE sl.dur > 0 GROUP BY 1, 2 ORDER BY total_ns DESC""").df()


def unknown_tracks(db):
    if "track_class" not in db.tables:
        return None
    return db.con.execute("SELECT track_id, name FROM track_class WHERE class IS NULL ORDER BY name").df()


def _instruction_table(db):
    """(name, columns, duration column or None) of the Instruction table (neuron legacy json or parquet,
    or the xla backend's HLO module), or None when the view has none."""
    table = next((t for t in db.tables if t.lower() == "instruction"), None)
    if table is None:
        return None
    cols = {r[0] for r in db.con.execute(f'DESCRIBE "{table}"').fetchall()}
    return table, cols, next((c for c in ("duration", "duration_ns") if c in cols), None)


def top_sources(db, limit: int = 20):
    """Instruction time by NKI source line or HLO name, from the legacy json or parquet Instruction table."""
    found = _instruction_table(db)
    if found is None:
        return None
    table, cols, dur = found
    keys = [k for k in ("nki_source_location", "hlo_name") if k in cols]
    if not dur or not keys:
        return None
    parts = [f"SELECT '{k}' AS source_kind, CAST({k} AS VARCHAR) AS source, count(*) AS instructions, "
             f"sum({dur}) AS total_time FROM \"{table}\" WHERE {k} IS NOT NULL GROUP BY 1, 2" for k in keys]
    return db.con.execute(" UNION ALL ".join(parts) + f" ORDER BY total_time DESC LIMIT {limit}").df()


def op_mix(db):
    """Instructions per opcode from the Instruction table, with their time where the table has one
    (the HLO dump has none)."""
    found = _instruction_table(db)
    if found is None or "opcode" not in found[1]:
        return None
    table, cols, dur = found
    group = ["opcode"] + [c for c in ("computation_kind", "engine") if c in cols]
    extra = [f"sum({dur}) AS total_time" if dur else "NULL AS total_time"]
    if "elements" in cols:
        extra.append("sum(elements) AS output_elements")
    return db.con.execute(f"""
        SELECT {', '.join(group)}, count(*) AS instructions, {', '.join(extra)}
        FROM "{table}" GROUP BY {', '.join(group)} ORDER BY instructions DESC, opcode""").df()


TABLES = {"engine_busy": engine_busy, "overlap": overlap, "opcodes": opcodes, "unknown_tracks": unknown_tracks,
          "top_sources": top_sources, "op_mix": op_mix}
