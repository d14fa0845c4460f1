"""Any profile, view folder or whole run as DuckDB tables, with Perfetto's table and column names.

Sources, whichever a view folder holds:
  trace.pftrace   decoded without trace_processor (pftrace_reader): slice, track, counter, args,
                  flow, with PERFETTO_VIEWS over them (thread_track, counter_track, thread, process,
                  thread_slice, instant, slice_self_dur, track_busy, top_ops), plus track_class (our
                  classification). A Chrome trace is converted to one first.
  parquet/        neuron-explorer tables, read directly (Instruction, DmaPacket, Summary, ...; split
                  tables such as BirInstruction_0/_1 become one); on xla the HLO Instruction table
  profile.json    legacy full profile: instruction and dma streamed into Parquet a batch at a time
                  (legacy_json: bounded memory, 64-bit ids kept), queried in place; its summary and
                  metadata as one-row tables
A .pftrace or legacy JSON is decoded once: its tables are cached as Parquet beside it (table_cache).
  summary.json    one-row summary
A Chrome trace (.json or .json.gz, told by content) is converted as the cpu view does and gives the
.pftrace tables, cached beside it.
A run folder (or several workloads) gives the same tables with a leading workload_id column.
"""

from __future__ import annotations

import re
import sys
import tempfile
from array import array
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from neuronsweep.config.schema import check_regexes
from neuronsweep.errors import UserError
from neuronsweep.formats import (
    chrome_trace,
    gzip_files,
    legacy_json,
    neuron_summary,
    pftrace_reader,
    pftrace_writer,
)
from neuronsweep.formats.table_cache import dictionary_columns, tables_for

if TYPE_CHECKING:
    import pandas as pd

# Track name -> class; first match wins; names no pattern matches are reported as unknown.
DEFAULT_TRACK_PATTERNS = [
    ("dma", r"(?i)^q[A-Z]|dma"),
    ("collectives", r"(?i)cc-core"),
    ("tensor", r"(?i)tensor|^pe\b"),
    ("vector", r"(?i)vector"),
    ("scalar", r"(?i)scalar|^act\b"),
    ("gpsimd", r"(?i)gpsimd|^pool\b"),
    ("sync", r"(?i)^sync"),
    ("xla_execute", r"(?i)^xla execute"),
    ("xla_compile", r"(?i)^xla compile"),
    ("cpu_thread", r"(?i)^thread \d+|python"),
]
# columns of the legacy instruction and dma tables that hold integers (ns, bytes) derived tables compute on
NUMERIC_COLUMNS = (
    "timestamp",
    "duration",
    "evt_wait_time",
    "transfer_size",
    "transfer_bytes",
    "start_ts",
    "duration_ns",
)
VIEW_FILES = ("trace.pftrace", "parquet", "profile.json", "summary.json")
REGEXP = re.compile(r"([\w.]+)\s+REGEXP\s+('(?:[^']|'')*')", re.IGNORECASE)


def patterns_from(mapping: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """Config `track_patterns` ({class: regex}, in order) or the defaults; bad regexes fail clearly."""
    if not mapping:
        return DEFAULT_TRACK_PATTERNS
    check_regexes(mapping, "track_patterns", "--track-patterns")
    return list(mapping.items())


def classify(name: str, patterns: list[tuple[str, str]] = DEFAULT_TRACK_PATTERNS) -> str | None:
    """A track's class (the first pattern its name matches: dma, collectives, tensor, vector, ...) or None."""
    for cls, pattern in patterns:
        if re.search(pattern, name or ""):
            return cls
    return None


def _pftrace_tables(path: Path) -> dict[str, pa.Table]:
    """Perfetto's table model (slice, track, args, counter), from the decoder's columns."""
    import pyarrow.compute as pc

    trace = pftrace_reader.read(path)
    ids = {uuid: i for i, uuid in enumerate(sorted(trace.tracks))}
    tracks = [trace.tracks[u] for u in sorted(trace.tracks)]
    sl = trace.slices
    n = len(sl)
    i64, text, f64 = pa.int64(), pa.string(), pa.float64()
    ids_col = pa.array(np.arange(n), i64)
    cats = pa.array(sl.category, text)
    parent = np.frombuffer(sl.parent, np.int64) if n else np.zeros(0, np.int64)
    arg_slice = np.frombuffer(sl.arg_slice, np.int64) if len(sl.arg_slice) else np.zeros(0, np.int64)
    has_args = np.zeros(n, bool)
    has_args[arg_slice] = True
    # Perfetto's tables hold the slice's track as the track's id: its rank among the sorted uuids
    uuids = np.frombuffer(sl.track_uuid, np.uint64) if n else np.zeros(0, np.uint64)
    track_of = pc.index_in(pa.array(uuids), value_set=pa.array(sorted(trace.tracks), pa.uint64()))
    keys = pa.array(sl.arg_key, text)

    def ints(col: bytes | array) -> pa.Array:
        return pa.array(np.frombuffer(col, np.int64) if len(col) else np.zeros(0, np.int64), i64)

    tables = {
        "slice": pa.table(
            {
                "id": ids_col,
                "ts": ints(sl.ts),
                "dur": ints(sl.dur),
                "track_id": track_of.cast(i64),
                "category": cats,
                "name": pa.array(sl.name, text),
                "depth": ints(sl.depth),
                "parent_id": pa.array(parent, i64, mask=parent < 0),
                "arg_set_id": pa.array(np.arange(n), i64, mask=~has_args),
            }
        ),
        "track": pa.table(
            {
                "id": pa.array([ids[t.uuid] for t in tracks], i64),
                "name": pa.array([t.name for t in tracks], text),
                "parent_id": pa.array([None if t.parent_uuid is None else ids.get(t.parent_uuid) for t in tracks], i64),
                "type": pa.array(
                    [
                        "counter_track" if t.is_counter else "thread_track" if t.tid is not None else "track"
                        for t in tracks
                    ],
                    text,
                ),
                "utid": pa.array([t.tid for t in tracks], i64),
                "upid": pa.array([t.pid for t in tracks], i64),
            }
        ),
        "args": pa.table({"arg_set_id": pa.array(arg_slice, i64), "key": keys, **_arg_values(sl.arg_value)}),
        "flow": pa.table(
            {
                "id": pa.array(range(len(trace.flows)), i64),
                "slice_out": pa.array([o for o, _ in trace.flows], i64),
                "slice_in": pa.array([i for _, i in trace.flows], i64),
                "trace_id": pa.nulls(len(trace.flows), i64),
                "arg_set_id": pa.nulls(len(trace.flows), i64),
            }
        ),
        "counter": pa.table(
            {
                "id": pa.array(range(len(trace.counters)), i64),
                "ts": pa.array([c.ts for c in trace.counters], i64),
                "track_id": pa.array([ids[c.track_uuid] for c in trace.counters], i64),
                "value": pa.array([c.value for c in trace.counters], f64),
            }
        ),
    }
    return tables


# Perfetto's columns that hold the same values as another (slice_id is id, cat is category, flat_key is
# key): written once in the cached tables and named twice in the view over them, in Perfetto's order
COLUMNS = {
    "slice": "id, id AS slice_id, ts, dur, track_id, category, category AS cat, name, depth, parent_id, arg_set_id",
    "args": "arg_set_id, key AS flat_key, key, int_value, string_value, real_value, value_type, display_value",
}


def write_pftrace_tables(trace: Path, folder: Path) -> None:
    """The .pftrace's tables as `<name>.parquet` in folder."""
    import pyarrow.parquet as pq

    for name, table in _pftrace_tables(trace).items():
        pq.write_table(table, folder / f"{name}.parquet", use_dictionary=dictionary_columns(table.schema))


def pftrace_view(folder: Path, name: str) -> str:
    """The cached table `name` as a relation with Perfetto's columns."""
    files = read_parquet([folder / f"{name}.parquet"])
    return f"(SELECT {COLUMNS[name]} FROM {files})" if name in COLUMNS else files


def _arg_values(values: list) -> dict[str, pa.Array]:
    """Perfetto's typed value columns of the args: a column at a time where every value has one type
    (the usual case), value by value otherwise."""
    import pyarrow.compute as pc

    i64, text, f64 = pa.int64(), pa.string(), pa.float64()
    kinds = {bool: "bool", int: "int", float: "real", str: "string"}
    try:
        arr = pa.array(values)
        kind = (
            {pa.bool_(): "bool", i64: "int", f64: "real", text: "string"}.get(arr.type) if not arr.null_count else None
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        kind = None
    n = len(values)
    if kind is not None or not n:
        kind = kind or "int"
        none = pa.nulls(n)
        return {
            "int_value": arr.cast(i64) if kind in ("int", "bool") else none.cast(i64),
            "string_value": arr if kind == "string" else none.cast(text),
            "real_value": arr if kind == "real" else none.cast(f64),
            "value_type": pa.array([kind] * n, text),
            "display_value": pc.if_else(arr, "True", "False")
            if kind == "bool"
            else pa.array([str(v) for v in values], text)
            if kind == "real"  # Arrow writes 1.0 as "1"
            else arr.cast(text),
        }
    cols: dict[str, list] = {k: [] for k in ("int_value", "string_value", "real_value", "value_type", "display_value")}
    for value in values:
        kind = kinds.get(type(value), "string")
        cols["int_value"].append(int(value) if kind in ("int", "bool") else None)
        cols["string_value"].append(value if kind == "string" else None)
        cols["real_value"].append(value if kind == "real" else None)
        cols["value_type"].append(kind)
        cols["display_value"].append(str(value))
    return {
        "int_value": pa.array(cols["int_value"], i64),
        "string_value": pa.array(cols["string_value"], text),
        "real_value": pa.array(cols["real_value"], f64),
        "value_type": pa.array(cols["value_type"], text),
        "display_value": pa.array(cols["display_value"], text),
    }


def _track_class(track: pa.Table, patterns: list[tuple[str, str]]) -> pa.Table:
    """Our class of every non-counter track (config track_patterns), from the track table: kept out of
    the cached tables, since the patterns may change between queries."""
    rows = [r for r in track.select(["id", "name", "type"]).to_pylist() if r["type"] != "counter_track"]
    return pa.table(
        {
            "track_id": pa.array([r["id"] for r in rows], pa.int64()),
            "name": pa.array([r["name"] for r in rows], pa.string()),
            "class": pa.array([classify(r["name"], patterns) for r in rows], pa.string()),
        }
    )


def sql_text(value: object) -> str:
    """A SQL string literal: file and folder names with quotes must simply work, never run as SQL."""
    return "'" + str(value).replace("'", "''") + "'"


def read_parquet(files: Iterable[str | Path]) -> str:
    """DuckDB's read_parquet over these files, their columns united by name."""
    return f"read_parquet([{', '.join(sql_text(f) for f in files)}], union_by_name=true)"


# Perfetto trace_processor's names beside the tables (its `thread`, `process`, `thread_track`,
# `counter_track`, `instant`, and `thread_slice` of older releases), and the answers HTA gives in one call:
# each slice's self time (`slice_self_dur`, Perfetto's stdlib name), each track's busy time as the
# union of its slices' intervals (`track_busy`: overlapping slices count once), and the ops ranked by
# self time (`top_ops`). Every join keeps workload_id: ids restart in each workload's profile.
PERFETTO_VIEWS = {
    "thread_track": "SELECT id, name, type, utid, upid, workload_id FROM track WHERE type = 'thread_track'",
    "counter_track": "SELECT id, name, parent_id, type, NULL AS unit, workload_id FROM track "
    "WHERE type = 'counter_track'",
    "instant": "SELECT ts, track_id, name, arg_set_id, workload_id FROM slice WHERE dur = 0",
    "thread": "SELECT DISTINCT utid, utid AS tid, upid, name, workload_id FROM track WHERE type = 'thread_track'",
    "process": "SELECT DISTINCT upid, upid AS pid, workload_id FROM track WHERE upid IS NOT NULL",
    "thread_slice": "SELECT s.*, t.utid, t.upid FROM slice s JOIN track t "
    "ON t.id = s.track_id AND t.workload_id = s.workload_id AND t.type = 'thread_track'",
    "slice_self_dur": "SELECT s.workload_id, s.id, s.name, s.dur, greatest(s.dur - coalesce(c.child_dur, 0), 0) "
    "AS self_dur FROM slice s LEFT JOIN (SELECT workload_id, parent_id, sum(dur) AS child_dur FROM slice "
    "WHERE parent_id IS NOT NULL GROUP BY ALL) c ON c.parent_id = s.id AND c.workload_id = s.workload_id",
    "track_busy": "WITH s AS (SELECT workload_id, track_id, ts, ts + dur AS e FROM slice WHERE dur > 0), "
    "o AS (SELECT *, max(e) OVER (PARTITION BY workload_id, track_id ORDER BY ts, e "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach FROM s), "
    "g AS (SELECT *, sum(CASE WHEN reach IS NULL OR ts > reach THEN 1 ELSE 0 END) OVER (PARTITION BY "
    "workload_id, track_id ORDER BY ts, e ROWS UNBOUNDED PRECEDING) AS island FROM o), "
    "i AS (SELECT workload_id, track_id, island, min(ts) AS a, max(e) AS b, count(*) AS n FROM g GROUP BY ALL) "
    "SELECT i.workload_id, i.track_id, t.name AS track_name, sum(b - a) AS busy_dur, max(b) - min(a) AS span_dur, "
    "sum(n) AS slices FROM i LEFT JOIN track t ON t.id = i.track_id AND t.workload_id = i.workload_id "
    "GROUP BY ALL ORDER BY busy_dur DESC",
    "top_ops": "SELECT *, round(100.0 * self_dur / sum(self_dur) OVER (PARTITION BY workload_id), 2) AS self_pct "
    "FROM (SELECT workload_id, name, count(*) AS calls, sum(self_dur) AS self_dur, sum(dur) AS total_dur "
    "FROM slice_self_dur GROUP BY workload_id, name) ORDER BY self_dur DESC",
}


class ProfileDB:
    """A DuckDB connection holding the tables of one or more view folders."""

    def __init__(self, patterns: list[tuple[str, str]] = DEFAULT_TRACK_PATTERNS, memory_limit: str = "256MB") -> None:
        self.con = duckdb.connect()
        # bounded memory: past the limit DuckDB spills to its temp directory instead of growing
        self._spill = tempfile.TemporaryDirectory(prefix="neuronsweep-duckdb-")
        self.con.execute(f"SET memory_limit = '{memory_limit}'")
        self.con.execute(f"SET temp_directory = '{self._spill.name}'")
        self.patterns = patterns
        self.tables: dict[str, list[str]] = {}  # table -> the per-source relations behind it
        self.sources: list[str] = []  # what was loaded, for messages

    def _add(
        self,
        table: str,
        workload_id: str,
        data: str | pa.Table,
        materialize: bool = True,
        source: str | Path | None = None,
    ) -> None:
        """Store `data` (an Arrow table, or a SQL relation text) for one workload under `table`; a
        relation on files (parquet) stays a view unless materialize is asked."""
        part = f"part_{sum(map(len, self.tables.values()))}"  # DuckDB names are case-insensitive
        if isinstance(data, str):
            kind = "TABLE" if materialize else "VIEW"
            try:
                self.con.execute(
                    f'CREATE TEMP {kind} "{part}" AS SELECT {sql_text(workload_id)} AS workload_id, * FROM {data}'
                )
            except duckdb.Error as exc:  # a damaged file behind the relation: its footer, its columns
                raise UserError(
                    f"{source or data}: not readable as the table {table} ({str(exc).splitlines()[0]}); "
                    "make it again (rerun the view stage) or remove it."
                ) from None
        else:
            self.con.register("_incoming", data)
            self.con.execute(
                f'CREATE TEMP TABLE "{part}" AS SELECT {sql_text(workload_id)} AS workload_id, * FROM _incoming'
            )
            self.con.unregister("_incoming")
        table = next((t for t in self.tables if t.lower() == table.lower()), table)  # Summary == summary
        self.tables.setdefault(table, []).append(part)

    def _add_pftrace(self, path: Path, workload_id: str) -> None:
        """A .pftrace's tables, decoded once and cached as Parquet beside it (table_cache)."""
        import pyarrow.parquet as pq

        folder = tables_for(path, lambda folder: write_pftrace_tables(path, folder), Path(self._spill.name))
        for name in ("slice", "track", "args", "counter", "flow"):
            self._add(name, workload_id, pftrace_view(folder, name), materialize=False)
        self._add("track_class", workload_id, _track_class(pq.read_table(folder / "track.parquet"), self.patterns))

    def _add_chrome(self, path: Path, workload_id: str) -> None:
        """A Chrome trace (plain or gzip): converted to a .pftrace (pftrace_writer) and decoded into
        the same tables, cached beside it (table_cache); nothing is left behind when it fails."""
        import pyarrow.parquet as pq

        def make(folder: Path) -> None:
            pftrace_writer.chrome_to_pftrace(path, folder / "trace.pftrace")
            write_pftrace_tables(folder / "trace.pftrace", folder)
            (folder / "trace.pftrace").unlink()

        folder = tables_for(path, make, Path(self._spill.name))
        for name in ("slice", "track", "args", "counter", "flow"):
            data = pftrace_view(folder, name)
            if name == "args":  # trace_processor keys a JSON trace's args as args.<name> (debug.<name> in protobuf)
                data = (
                    "(SELECT * REPLACE (regexp_replace(key, '^debug\\.', 'args.') AS key, "
                    f"regexp_replace(flat_key, '^debug\\.', 'args.') AS flat_key) FROM {data})"
                )
            self._add(name, workload_id, data, materialize=False)
        self._add("track_class", workload_id, _track_class(pq.read_table(folder / "track.parquet"), self.patterns))

    def _add_json(self, path: Path, workload_id: str, with_summary: bool = True, alone: bool = False) -> None:
        """A legacy full-profile JSON: instruction and dma streamed into Parquet (legacy_json), and its
        one-record summary and metadata; parsed once and cached beside it (table_cache). `alone`: the
        file is all that was asked for, so one without any of those is refused (in a view folder it may
        be the marker of a json export the tool could not make)."""

        def make(out: Path) -> None:
            legacy_json.write_tables(path, out)
            if alone and not any(out.iterdir()):
                raise UserError(
                    f"{path}: neither a Neuron profile (no instruction, dma or summary in it) nor a Chrome "
                    f"trace ({chrome_trace.NOT_A_TRACE}); point `query` at a profile or a trace."
                )

        folder = tables_for(path, make, Path(self._spill.name))
        for key in ("instruction", "dma"):
            files = sorted(folder.glob(f"{key}-*.parquet"))
            if files:
                self._add(key, workload_id, self._numeric(path, key, read_parquet(files)), materialize=False)
        for key in ("summary", "metadata")[0 if with_summary else 1 :]:
            if (folder / f"{key}.parquet").is_file():
                self._add(key, workload_id, read_parquet([folder / f"{key}.parquet"]), materialize=False)

    def _numeric(self, path: Path, key: str, relation: str) -> str:
        """`relation` with the times and sizes the derived tables compute on as integers: a column the
        profile wrote a non-number into became text, and each value that is not a number becomes
        NULL, counted in one line on stderr (it never fails a query, nor is it read as 0)."""
        types = dict(
            self.con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {relation})").fetchall()
        )
        text = [c for c in NUMERIC_COLUMNS if types.get(c) == "VARCHAR"]
        if not text:
            return relation
        cast = {c: f'coalesce(TRY_CAST("{c}" AS BIGINT), TRY_CAST(TRY_CAST("{c}" AS DOUBLE) AS BIGINT))' for c in text}
        for c, expr in cast.items():
            bad, first = self.con.execute(
                f'SELECT count(*), any_value("{c}") FROM {relation} WHERE "{c}" IS NOT NULL AND {expr} IS NULL'
            ).fetchone() or (0, None)  # an aggregate always answers one row
            if bad:
                print(
                    f"{path}: {bad} {key} {c} values are not numbers (first: {first!r}); read as null", file=sys.stderr
                )
        replaced = ", ".join(f'{e} AS "{c}"' for c, e in cast.items())
        return f"(SELECT * REPLACE ({replaced}) FROM {relation})"

    def load_view(self, view_dir: Path, workload_id: str) -> None:
        """The profile tables of one view folder, as `workload_id`."""
        if not self.sources:  # loaded alone (extract): the folder a failed query names
            self.sources.append(str(view_dir))
        if (view_dir / "trace.pftrace").is_file():
            self._add_pftrace(view_dir / "trace.pftrace", workload_id)
        parquet = view_dir / "parquet"
        if parquet.is_dir():
            groups: dict[str, list[str]] = {}
            for f in sorted(parquet.rglob("*.parquet")):
                groups.setdefault(re.sub(r"_\d+$", "", f.stem), []).append(str(f))
            for name, files in groups.items():
                self._add(name, workload_id, read_parquet(files), materialize=False, source=", ".join(files))
        summary = view_dir / "summary.json"
        if (view_dir / "profile.json").is_file() and not parquet.is_dir():  # parquet is the same data, official
            self._add_json(view_dir / "profile.json", workload_id, with_summary=not summary.is_file())
        if summary.is_file() and not (parquet / "Summary.parquet").is_file():
            self._add("summary", workload_id, legacy_json.batch_table([neuron_summary.load(summary)]))

    def load(self, path: str | Path) -> ProfileDB:
        """A .pftrace, a view folder, a workload folder, or a run folder (every workload)."""
        path = Path(path)
        self.sources.append(str(path))
        if not path.exists():
            raise UserError(
                f"{path}: no such file or folder; pass a profile (.pftrace, .parquet, .json), a Chrome trace "
                "(.json, .json.gz), a view or workload folder, or a run folder (results/<run>)."
            )
        if path.is_file() and path.stat().st_size == 0:
            raise UserError(f"{path}: is empty (0 bytes); pass the file the profiler wrote.")
        with gzip_files.gzip_damage(path):
            self._load(path)
        if not self.tables:
            raise UserError(
                f"{path}: no profile tables found (no trace.pftrace, parquet/, profile.json or summary.json)."
            )
        self.finish()
        return self

    def _load(self, path: Path) -> None:
        if path.is_file() and path.suffix == ".pftrace":
            self._add_pftrace(path, path.stem)
        elif path.is_file() and path.suffix == ".parquet":
            self._add(re.sub(r"_\d+$", "", path.stem), path.stem, read_parquet([path]), materialize=False, source=path)
        elif path.is_file() and path.suffix in (".json", ".gz") and chrome_trace.looks_like(path):
            self._add_chrome(path, path.name.removesuffix(".gz").removesuffix(".json"))
        elif path.is_file() and path.suffix == ".json":
            self._add_json(path, path.stem, alone=True)
        elif path.is_dir() and any((path / name).exists() for name in VIEW_FILES):  # a view folder
            self.load_view(path, path.parent.name)
        elif path.is_dir():  # a workload folder, a backend folder, or a run folder
            views = (
                sorted(path.glob("view"))
                or sorted(path.glob("workloads/*/view"))
                or sorted(path.glob("*/workloads/*/view"))
            )
            for view in views:
                self.load_view(view, view.parent.name)
        elif path.is_file() and gzip_files.is_gzip(path):
            raise UserError(
                f"{path}: a gzip file whose content is not a Chrome trace (no traceEvents at its start); pass "
                "torch.profiler's export (.json or .json.gz)."
            )
        else:
            raise UserError(
                f"{path}: not a profile (.pftrace, .parquet, .json), a Chrome trace (.json, .json.gz), a view "
                "or workload folder, or a run folder; point `query` at one of those."
            )

    def finish(self) -> None:
        """Create the unified views (call once after loading)."""
        for table, parts in self.tables.items():
            union = " UNION ALL BY NAME ".join(f'SELECT * FROM "{p}"' for p in parts)
            name = table.replace('"', '""')  # a table named after a file may hold any character
            self.con.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS {union}')
        if "slice" in self.tables:
            for name, body in PERFETTO_VIEWS.items():
                self.con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {body}")
            self.con.execute(
                "CREATE OR REPLACE MACRO EXTRACT_ARG(set_id, k) AS (SELECT coalesce(string_value, "
                "CAST(int_value AS VARCHAR), CAST(real_value AS VARCHAR)) FROM args "
                "WHERE arg_set_id = set_id AND key = k LIMIT 1)"
            )

    @property
    def names(self) -> list[str]:
        """Every table and view a query can name."""
        views = list(PERFETTO_VIEWS) if "slice" in self.tables else []
        return sorted(set(self.tables) | set(views), key=str.lower)

    def describe(self, table: str) -> list[tuple[str, str]]:
        """(column, type) of a table or view; its name quoted as DuckDB documents (a double quote inside
        a quoted identifier is written twice), since a table named after a file may hold any character."""
        quoted = table.replace('"', '""')
        try:  # a damaged file's schema (a column name that is not UTF-8) fails only here
            return [(c, t) for c, t, *_ in self.con.execute(f'DESCRIBE "{quoted}"').fetchall()]
        except duckdb.Error as exc:
            raise self._failed(exc) from None

    def sql(self, text: str) -> duckdb.DuckDBPyConnection:
        """Run SQL; `x REGEXP 'p'` (SQLite / Perfetto syntax) is rewritten to regexp_matches(x, 'p')."""
        try:
            return self.con.execute(REGEXP.sub(r"regexp_matches(\1, \2)", text))
        except duckdb.Error as exc:
            raise self._failed(exc) from None

    def df(self, text: str) -> pd.DataFrame:
        """A query's whole result as a pandas DataFrame, with the errors of reading it as `sql`'s."""
        relation = self.sql(text)
        try:
            return relation.df()
        except duckdb.Error as exc:
            raise self._failed(exc) from None

    def fetch(self, text: str, limit: int | None) -> tuple[list[str], list[tuple], int]:
        """(columns, the first `limit` rows (all when None), how many rows in all) of a query. Rows are
        read as DuckDB streams them, so a damaged value found only then (text that is not UTF-8 deep in
        a parquet file) is the same one sentence as an error found at once."""
        relation = self.sql(text)
        try:
            rows = relation.fetchall() if limit is None else relation.fetchmany(limit)
            total = len(rows)
            while limit is not None and (more := len(relation.fetchmany(100_000))):  # counted, not kept
                total += more
        except duckdb.Error as exc:
            raise self._failed(exc) from None
        return [d[0] for d in relation.description], rows, total

    def _failed(self, exc: Exception) -> UserError:
        return UserError(
            f"query over {', '.join(self.sources) or 'nothing'} failed: {str(exc).splitlines()[0]}; "
            f"tables here: {', '.join(self.names)}."
        )
