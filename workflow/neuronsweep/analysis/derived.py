"""Tables derived from a ProfileDB: what extract writes per workload and the report reads.

Engine busy time is an interval union (instructions pipeline within an engine and DMA queues
overlap, so summing durations overstates it). Where the view has the profile's instruction table
(legacy json `instruction`, parquet `Instruction`), busy time comes from it per engine, named by
the instruction's `label` / `engine`; otherwise from the .pftrace slices per track class (track
names, profile_db.classify). Never from opcode names. Semaphore waits are instructions too (on a
real inf2 capture two EVENT_SEMAPHORE waits span the whole 1.87 ms profile): they are neither busy
time nor work. Instructions without an `hlo_name` are runtime control (DRAIN, NOTIFY,
SET_ORDERING_MODE): busy time, but not the workload's op mix.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from neuronsweep.analysis.profile_tables import ProfileTables
from neuronsweep.json_numbers import finite_number

if TYPE_CHECKING:
    import pandas as pd


def _union(source: str) -> str:
    """SQL: the interval union per class and physical core of `source` rows (class, core, ts, te), as
    (class, core, grp, b, e). Under LNC 2 a logical core is two physical ones (the profile's
    pcore_idx 0 and 1), each with its own engines: their intervals are never merged."""
    return f"""
WITH s AS ({source}), o AS (
  SELECT *, max(te) OVER (PARTITION BY class, core ORDER BY ts, te
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pe
  FROM s
), g AS (
  SELECT *, sum(CASE WHEN pe IS NULL OR ts > pe THEN 1 ELSE 0 END)
              OVER (PARTITION BY class, core ORDER BY ts, te) AS grp
  FROM o
)
SELECT class, core, grp, min(ts) AS b, max(te) AS e FROM g GROUP BY class, core, grp
"""


def _core(cols: set[str]) -> str:
    """The physical core column of a table (parquet's pcore_idx), else core 0 for every row."""
    return "coalesce(pcore_idx, 0)" if "pcore_idx" in cols else "0"


SLICES = """
  SELECT c.class, 0 AS core, sl.track_id, sl.ts, sl.ts + sl.dur AS te
  FROM slice sl JOIN track_class c ON c.track_id = sl.track_id AND c.workload_id = sl.workload_id
  WHERE sl.dur > 0 AND c.class IS NOT NULL"""
WAIT = "upper(CAST(opcode AS VARCHAR)) LIKE '%SEMAPHORE%'"
# instruction label / engine -> the summary's engine names ({engine}_engine_active_time)
ENGINE_OF_LABEL = (
    "CASE WHEN lower(CAST({col} AS VARCHAR)) LIKE 'tensor%' OR lower(CAST({col} AS VARCHAR)) = 'pe' "
    "THEN 'tensor' ELSE lower(CAST({col} AS VARCHAR)) END"
)


def _instruction_columns(db: ProfileTables) -> tuple[str, str, str, str, str] | None:
    """(table, engine column, start column, duration column) of an instruction table with timing."""
    found = _instruction_table(db)
    if found is None:
        return None
    table, cols, dur = found
    engine = next((c for c in ("label", "engine") if c in cols), None)
    start = next((c for c in ("timestamp", "start_ts") if c in cols), None)
    if not (engine and start and dur and "opcode" in cols):
        return None
    return table, engine, start, dur, _core(cols)


NUMBER_TYPES = (
    *("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"),
    *("FLOAT", "DOUBLE", "DECIMAL"),
)


def type_problems(db: ProfileTables, where: str | Path) -> list[str]:
    """One sentence per column the tables below read whose type cannot be what it is read as (text or a
    list where a time, a size or a core index belongs; anything but text where an engine, opcode or
    queue name belongs), whatever the profile names it: checked once, before any SQL binds it, so a
    damaged file is named, never a DuckDB binder error."""
    picked: list[tuple[str, list[str], list[str]]] = []  # (table, number columns, text columns)
    instruction, dma = _instruction_columns(db), _dma_columns(db)
    if instruction:
        table, engine, start, dur, _ = instruction
        picked.append((table, [start, dur, "pcore_idx"], [engine, "opcode"]))
    if dma:
        table, name, start, dur, size, _ = dma
        picked.append((table, [start, dur, size or "", "pcore_idx"], [name] if name != "dma_queue" else []))
    out = []
    for table, numbers, texts in picked:
        have = dict(db.describe(table))
        for column in [c for c in numbers + texts if c in have]:
            kind, text = have[column], column in texts
            number = kind.startswith(NUMBER_TYPES) and not kind.endswith("]")  # BIGINT[] is a list
            if (kind == "VARCHAR") != text or (not text and not number):
                out.append(
                    f"{where}: the {table} table's {column} column is {kind}, where the profile schema has "
                    f"{'text' if text else 'a number'}; the file is damaged: view the capture again"
                )
    return out


def _dma_columns(db: ProfileTables) -> tuple[str, str, str, str, str | None, str] | None:
    """(table, queue name column, start, duration, size) of the DMA table (legacy `dma`, parquet `DmaPacket`)."""
    table = next((t for t in db.tables if t.lower() in ("dma", "dmapacket")), None)
    if table is None:
        return None
    cols = {column for column, _ in db.describe(table)}
    pick = lambda *names: next((c for c in names if c in cols), None)  # noqa: E731
    found = (
        table,
        pick("queue_name", "subgroup", "dma_queue"),
        pick("timestamp", "start_ts"),
        pick("duration", "duration_ns"),
        pick("transfer_size", "transfer_bytes"),
        _core(cols),
    )
    return found if all(found[1:4]) else None  # type: ignore[return-value]  # the three checked here


def dma_packet_count(db: ProfileTables | None) -> int | None:
    """Rows of the profile's DMA table; None when the view has none. Zero rows is what a capture without
    DGE notifications may leave (Neuron Explorer's capture guide)."""
    found = _dma_columns(db) if db is not None else None
    return (
        None if db is None or found is None else (db.sql(f'SELECT count(*) FROM "{found[0]}"').fetchone() or (None,))[0]
    )


def _device_intervals(db: ProfileTables) -> str | None:
    """SQL rows (class, ts, te, dur) of the profile's own instructions per engine, semaphore waits
    left out, plus its DMA packets as class 'dma'; None without an instruction table with timing."""
    found = _instruction_columns(db)
    if found is None:
        return None
    table, engine, start, dur, core = found
    sql = (
        f"SELECT {ENGINE_OF_LABEL.format(col=engine)} AS class, {core} AS core, {start} AS ts, {start} + {dur} AS te, "
        f'{dur} AS dur FROM "{table}" WHERE {dur} > 0 AND NOT {WAIT}'
    )
    dma = _dma_columns(db)
    if dma:
        dtable, _, dstart, ddur, _, dcore = dma
        sql += (
            f" UNION ALL SELECT 'dma', {dcore}, {dstart}, {dstart} + {ddur}, {ddur} FROM \"{dtable}\" WHERE {ddur} > 0"
        )
    return sql


def engine_busy(db: ProfileTables) -> pd.DataFrame | None:
    """Busy ns per engine (interval union, semaphore waits left out) beside the summed durations and,
    where the summary has it, the tool's own `<engine>_engine_active_time`; from the instruction table
    when there is one, else per .pftrace track class. Each physical core's engines are their own
    (pcore_idx under LNC 2): the first rows (pcore_idx empty) are the mean over the physical cores, a
    share of total_time like the summary's percent; with two cores a row per core follows."""
    intervals = _device_intervals(db)
    if intervals is not None:
        table = db.df(f"""
            WITH u AS ({_union(intervals)}),
            sums AS (SELECT class, core, count(*) AS instructions, sum(dur) AS summed_ns
                     FROM ({intervals}) GROUP BY class, core),
            per_core AS (SELECT u.class, u.core, sum(e - b) AS busy_ns, any_value(sums.instructions) AS instructions,
                                any_value(sums.summed_ns) AS summed_ns
                         FROM u JOIN sums USING (class, core) GROUP BY u.class, u.core),
            cores AS (SELECT count(DISTINCT core) AS n FROM ({intervals}))
            SELECT class, NULL AS pcore_idx, sum(busy_ns) / any_value(cores.n) AS busy_ns,
                   sum(instructions) AS instructions, sum(summed_ns) AS summed_ns, 'instruction' AS source
            FROM per_core, cores GROUP BY class
            UNION ALL
            SELECT class, core, busy_ns, instructions, summed_ns, 'instruction'
            FROM per_core WHERE (SELECT n FROM cores) > 1
            ORDER BY pcore_idx NULLS FIRST, busy_ns DESC""")
        return _beside_tool(db, table)
    if "slice" not in db.tables:
        return None
    return db.df(f"""
        WITH u AS ({_union(SLICES)}),
        sums AS (SELECT c.class, count(*) AS slices, sum(sl.dur) AS summed_ns
                 FROM slice sl JOIN track_class c USING (track_id, workload_id)
                 WHERE sl.dur > 0 AND c.class IS NOT NULL GROUP BY c.class)
        SELECT u.class, sum(e - b) AS busy_ns, any_value(sums.slices) AS slices, any_value(sums.summed_ns) AS summed_ns,
               'pftrace' AS source
        FROM u JOIN sums USING (class) GROUP BY u.class ORDER BY busy_ns DESC""")


def _beside_tool(db: ProfileTables, table: pd.DataFrame) -> pd.DataFrame:
    """Add the summary's own active time per engine (ns) and total_time, where the summary has them as
    times (a legacy profile's table holds whatever its JSON held: text, a number too large for a float)."""
    if "summary" not in db.tables:
        return table
    cursor = db.sql("SELECT * FROM summary LIMIT 1")
    row = dict(zip((d[0] for d in cursor.description), cursor.fetchone() or ()))

    def ns(field: str) -> float | None:
        seconds = finite_number(row.get(field))
        return seconds * 1e9 if seconds is not None and seconds >= 0 else None

    table["tool_active_ns"] = [
        ns("dma_active_time" if c == "dma" else f"{c}_engine_active_time") for c in table["class"]
    ]
    table["total_time_ns"] = ns("total_time")
    return table


def overlap(db: ProfileTables) -> pd.DataFrame | None:
    """ns during which two engines (classes) are both busy (the diagonal is each one's busy time), on
    the same physical core; under LNC 2 the mean over the two physical cores, as engine_busy's."""
    if "slice" not in db.tables and _device_intervals(db) is None:
        return None
    source = _device_intervals(db) or SLICES
    return db.df(f"""
        WITH u AS ({_union(source)}), cores AS (SELECT count(DISTINCT core) AS n FROM ({source}))
        SELECT a.class AS class_a, b.class AS class_b,
               sum(greatest(0, least(a.e, b.e) - greatest(a.b, b.b))) / any_value(cores.n) AS overlap_ns
        FROM u a JOIN u b ON a.core = b.core AND a.b < b.e AND b.b < a.e, cores
        GROUP BY 1, 2 ORDER BY 1, 2""")


def opcodes(db: ProfileTables) -> pd.DataFrame | None:
    """Per class and slice name (opcode on Neuron, aten op on cpu): count, duration distribution, and
    self time (duration minus nested children), which adds up without double counting."""
    if "slice" not in db.tables:
        return None
    return db.df("""
        WITH kids AS (SELECT workload_id, parent_id, sum(dur) AS child_ns FROM slice
                      WHERE parent_id IS NOT NULL AND dur > 0 GROUP BY 1, 2)
        SELECT coalesce(c.class, 'unclassified') AS class, sl.name, count(*) AS count, sum(sl.dur) AS total_ns,
               sum(sl.dur - coalesce(k.child_ns, 0)) AS self_ns,
               avg(sl.dur) AS mean_ns, quantile_cont(sl.dur, 0.5) AS p50_ns, quantile_cont(sl.dur, 0.9) AS p90_ns,
               quantile_cont(sl.dur, 0.99) AS p99_ns
        FROM slice sl LEFT JOIN track_class c USING (track_id, workload_id)
        LEFT JOIN kids k ON k.workload_id = sl.workload_id AND k.parent_id = sl.id
        WHERE sl.dur > 0 GROUP BY 1, 2 ORDER BY total_ns DESC""")


def unknown_tracks(db: ProfileTables) -> pd.DataFrame | None:
    """The profile's tracks no class pattern matched (track_id, name), so a user can add a pattern for them; None
    without classified tracks."""
    if "track_class" not in db.tables:
        return None
    return db.df("SELECT track_id, name FROM track_class WHERE class IS NULL ORDER BY name")


def _instruction_table(db: ProfileTables) -> tuple[str, set[str], str | None] | None:
    """(name, columns, duration column or None) of the Instruction table (neuron legacy json or parquet,
    or the xla backend's HLO module), or None when the view has none."""
    table = next((t for t in db.tables if t.lower() == "instruction"), None)
    if table is None:
        return None
    cols = {column for column, _ in db.describe(table)}
    return table, cols, next((c for c in ("duration", "duration_ns") if c in cols), None)


def _work(cols: set[str]) -> str:
    """SQL condition for instructions that are the workload's work: no semaphore waits, and (where the
    table names HLO ops) an HLO op behind it."""
    cond = [f"NOT {WAIT}"] if "opcode" in cols else ["TRUE"]
    if "hlo_name" in cols:
        cond.append("coalesce(CAST(hlo_name AS VARCHAR), '') <> ''")
    return " AND ".join(cond)


def top_sources(db: ProfileTables, limit: int = 20) -> pd.DataFrame | None:
    """Work instruction time by NKI source line or HLO name (semaphore waits and runtime control left out)."""
    found = _instruction_table(db)
    if found is None:
        return None
    table, cols, dur = found
    keys = [k for k in ("nki_source_location", "hlo_name") if k in cols]
    if not dur or not keys:
        return None
    parts = [
        f"SELECT '{k}' AS source_kind, CAST({k} AS VARCHAR) AS source, count(*) AS instructions, "
        f"sum({dur}) AS total_time FROM \"{table}\" WHERE {_work(cols)} AND coalesce(CAST({k} AS VARCHAR), '') "
        f"NOT IN ('', '[]') GROUP BY 1, 2"
        for k in keys
    ]
    return db.df(" UNION ALL ".join(parts) + f" ORDER BY total_time DESC LIMIT {limit}")


def op_mix(db: ProfileTables) -> pd.DataFrame | None:
    """Work instructions per opcode (and engine) from the Instruction table, with their time where the
    table has one (the xla HLO dump has none)."""
    found = _instruction_table(db)
    if found is None or "opcode" not in found[1]:
        return None
    table, cols, dur = found
    group = ["opcode"] + [c for c in ("computation_kind", "engine", "label") if c in cols]
    extra = [f"sum({dur}) AS total_time" if dur else "NULL AS total_time"]
    if "elements" in cols:
        extra.append("sum(elements) AS output_elements")
    return db.df(f"""
        SELECT {", ".join(group)}, count(*) AS instructions, {", ".join(extra)}
        FROM "{table}" WHERE {_work(cols)} GROUP BY {", ".join(group)} ORDER BY instructions DESC, opcode""")


def dma_queues(db: ProfileTables) -> pd.DataFrame | None:
    """Per DMA queue (named by the legacy json's `subgroup`, e.g. qSyncSpillReload0-Q1-E0, since its
    `dma_queue` is only a number; parquet DmaPacket's `queue_name`): packets, bytes, busy time."""
    found = _dma_columns(db)
    if found is None:
        return None
    table, name, start, dur, size, core = found
    intervals = (
        f"SELECT CAST({name} AS VARCHAR) AS class, {core} AS core, {start} AS ts, {start} + {dur} AS te "
        f'FROM "{table}" WHERE {dur} > 0'
    )
    return db.df(f"""
        WITH u AS ({_union(intervals)}),
        busy AS (SELECT class AS queue, sum(e - b) AS busy_ns FROM u GROUP BY 1)
        SELECT CAST({name} AS VARCHAR) AS queue, count(*) AS packets,
               {f"sum({size})" if size else "NULL"} AS bytes, any_value(busy.busy_ns) AS busy_ns
        FROM "{table}" LEFT JOIN busy ON busy.queue = CAST({name} AS VARCHAR)
        GROUP BY 1 ORDER BY bytes DESC NULLS LAST, queue""")


TABLES = {
    "engine_busy": engine_busy,
    "overlap": overlap,
    "opcodes": opcodes,
    "unknown_tracks": unknown_tracks,
    "top_sources": top_sources,
    "op_mix": op_mix,
    "dma_queues": dma_queues,
}


def framework_ops(db: ProfileTables | None) -> tuple[list | None, str | None]:
    """(framework_name, time_intervals) of every row of the parquet FrameworkInstruction table, or (None, why)
    where the table lacks them; (None, None) where the view has no such table."""
    table = next((t for t in db.tables if t.lower() == "frameworkinstruction"), None) if db is not None else None
    if db is None or table is None:
        return None, None
    cols = {column for column, _ in db.describe(table)}
    lacking = [c for c in ("framework_name", "time_intervals") if c not in cols]
    if lacking:
        return None, f"the profile's FrameworkInstruction table has no {' or '.join(lacking)} column"
    rows = db.sql(f'SELECT CAST(framework_name AS VARCHAR), CAST(time_intervals AS VARCHAR) FROM "{table}"').fetchall()
    return rows, None
