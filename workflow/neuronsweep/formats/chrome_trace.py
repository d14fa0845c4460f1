"""The events of a Chrome trace (torch.profiler's export) as columns in a table on disk, for
pftrace.py to sort and encode and for the cpu and xla views to summarize.

A million-op trace is about 100 MB of JSON; `json.load` alone costs 2.5 us an event and a dict per
event. Here the `traceEvents` array is cut into record batches without decoding it
(analysis/json_records.py) and pyarrow's JSON reader (C++) parses each batch into columns. A batch
whose columns Arrow cannot give exactly as the JSON wrote them goes through orjson and a loop
instead: counters ('C'), pid/tid that are not integers, a `null`, args holding lists, objects or
floats (Arrow makes 1 and 1.5 both doubles; the loop keeps 1 an int). Both paths fill the same
columns, so what is written does not depend on which one read a batch.

Each batch goes straight into a DuckDB table (`ev`, below) in a temporary folder beside the output,
under a memory limit: a Chrome trace interleaves tracks, so nesting and time order need a sort over
the whole trace, and DuckDB's sort spills to disk where a numpy sort would hold every event.
Slices ('X') and instants ('i'/'I') keep their args, already encoded as the packet's debug
annotations (protowire.py). Counters become one value per series. Other phases are only counted.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from neuronsweep.atomic import remove_stale
from neuronsweep.errors import UserError
from neuronsweep.formats import json_records, protowire

SLICE, INSTANT, COUNTER = 0, 1, 2
FAST_ARGS = (pa.types.is_int64, pa.types.is_boolean, pa.types.is_string, pa.types.is_null)
MEMORY_MB = 64  # DuckDB's share at first; it spills the rest of a trace to the temporary folder
SPILL_PREFIX = ".trace-events."
DICTS_AT_ONCE = 1 << 16  # events of a trace given as a list, per batch
# seq: the event's position among those kept, in input order; kind: SLICE, INSTANT, COUNTER; key:
# the track's ordinal in Events.keys; ts, dur in ns; name, cat: ordinals in Events.names and
# Events.cats (-1: none, and every counter); value: a counter's; ann: a slice's or instant's
# TrackEvent.debug_annotations as bytes (NULL for counters)
TABLE = (
    "CREATE TABLE ev (seq BIGINT, kind TINYINT, key INTEGER, ts BIGINT, dur BIGINT, name INTEGER, "
    "cat INTEGER, value DOUBLE, ann BLOB)"
)


def out_of_memory(error: BaseException) -> bool:
    """Whether DuckDB ran out of its memory share (as itself, or through an Arrow stream of a result)."""
    return isinstance(error, duckdb.OutOfMemoryException) or (
        isinstance(error, (OSError, pa.ArrowException)) and str(error).startswith("Out of Memory Error")
    )


def _cap_mb() -> int:
    """Half the host's memory, in MB: the most DuckDB's share grows to."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 >> 20


def _ns(values) -> np.ndarray:
    """Microseconds to integer nanoseconds, rounded half to even as Python's round()."""
    return np.rint(np.asarray(values, np.float64) * 1000.0).astype(np.int64)


@dataclass
class Part:
    """One batch's slices, instants and counters, in input order."""

    kind: np.ndarray  # SLICE, INSTANT, COUNTER
    key: np.ndarray  # the track's ordinal in Events.keys
    ts: np.ndarray  # ns
    dur: np.ndarray  # ns, slices only
    name: np.ndarray  # ordinal in Events.names (-1: a counter)
    cat: np.ndarray  # ordinal in Events.cats, -1 for none
    value: np.ndarray  # counters only
    args: pa.StructArray | list  # per slice and instant (not counters), in order


class Events:
    """Every event to write: the table `ev` (TABLE) in `db`, and the names and track keys its rows
    refer to, each numbered in order of first appearance (the order tracks are described in). A
    context manager: leaving it removes the table's folder."""

    def __init__(self, spill_dir: str | Path | None = None, source: str = "a Chrome trace"):
        self.source = source  # for messages
        folder = Path(spill_dir or tempfile.gettempdir())
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale(folder, SPILL_PREFIX)  # a killed writer's table
        self.folder = Path(tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{os.getpid()}.", suffix=".tmp", dir=folder))
        # in memory up to the limit, the rest in the folder: nothing is kept, so nothing is checkpointed
        self.memory_mb = MEMORY_MB
        self.db = duckdb.connect(
            ":memory:",
            config={
                "memory_limit": f"{self.memory_mb}MB",
                "threads": 1,
                "temp_directory": str(self.folder),
                "preserve_insertion_order": False,
            },
        )
        self.db.execute(TABLE)
        self.clear()

    def clear(self) -> None:
        self.db.execute("DELETE FROM ev")
        self.rows = 0
        self.keys: dict = {}  # (pid, tid) or ("counter", pid, name, series) -> ordinal
        self.names: dict = {}
        self.cats: dict = {}
        self.proc_names: dict = {}
        self.thread_names: dict = {}
        self.counts = {"slices": 0, "instants": 0, "counters": 0, "skipped": 0}

    def __enter__(self) -> Events:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def sort_memory(self) -> None:
        """DuckDB's share for sorting the table: its sort spills runs to disk but merges them with a
        block of each in memory, so past about 4 M slices (8 M packets) 64 MB is not enough;
        measured here, 16 bytes a row is (16 M slices sorted under 256 MB)."""
        self._memory(min(max(self.memory_mb, 16 * self.rows >> 20), max(self.memory_mb, _cap_mb())))

    def grow(self, what: str) -> None:
        """After DuckDB ran out of its share doing `what`: twice the share (said on stderr), up to
        half the host's memory; there, one sentence."""
        tried = self.memory_mb
        if tried >= _cap_mb():
            raise UserError(
                f"{what} needs more than {tried} MB of memory, half of this host's; convert the "
                "trace on a host with more memory."
            )
        self._memory(min(2 * tried, _cap_mb()))
        print(f"{what} needs more than {tried} MB; again with {self.memory_mb} MB", file=sys.stderr)

    def _memory(self, mb: int) -> None:
        self.memory_mb = mb
        self.db.execute(f"SET memory_limit = '{mb}MB'")

    def _add(self, part: Part) -> None:
        """One batch's rows into `ev`, its args encoded."""
        n = part.kind.size
        annotated = protowire.annotations(part.args)
        named = part.kind != COUNTER
        if not named.all():  # the loop's batches: counters have no args, the others' rows in order
            rows = np.cumsum(named) - 1
            annotated = pc.take(annotated, pa.array(rows, mask=~named))
        batch = pa.table(
            {
                "seq": np.arange(self.rows, self.rows + n),
                "kind": part.kind,
                "key": part.key.astype(np.int32),
                "ts": part.ts,
                "dur": part.dur,
                "name": part.name.astype(np.int32),
                "cat": part.cat.astype(np.int32),
                "value": part.value,
                "ann": annotated,
            }
        )
        self.db.register("batch", batch)
        while True:
            try:
                self.db.execute("INSERT INTO ev SELECT * FROM batch")  # all or nothing
                break
            except duckdb.Error as e:
                if not out_of_memory(e):
                    raise
                self.grow(f"{self.source}: storing {self.rows + n} trace events")
        self.db.unregister("batch")
        self.rows += n

    def slices_around(self, name: str) -> tuple[dict[str, np.ndarray], int] | None:
        """The complete ('X') events that overlap or touch the first one called `name` (columns
        name, cat, ts, dur in ns; input order) and that one's row; None when there is none. What a
        summary of one execution needs, without reading the rest of the trace."""
        found = self.names.get(name)
        if found is None:
            return None
        x = self.db.execute(
            f"""
            WITH span AS (SELECT seq, ts, dur FROM ev WHERE kind = {SLICE} AND name = ? ORDER BY seq LIMIT 1)
            SELECT ev.seq = span.seq AS is_span, ev.name, ev.cat, ev.ts, ev.dur FROM ev, span
            WHERE ev.kind = {SLICE} AND ev.ts <= span.ts + span.dur
              AND (ev.ts + ev.dur >= span.ts OR ev.ts >= span.ts)
            ORDER BY ev.seq""",
            [found],
        ).fetchnumpy()
        rows = np.flatnonzero(x.pop("is_span"))
        return ({c: np.asarray(v) for c, v in x.items()}, int(rows[0])) if rows.size else None

    def _ordinal(self, table: dict, value) -> int:
        """`value`'s number in `table`, the next one when it is new."""
        found = table.get(value)
        if found is None:
            found = table[value] = len(table)
        return found

    def _metadata(self, name, pid, tid, args) -> None:
        if name == "process_name":
            self.proc_names[pid] = (args or {}).get("name", "")
        elif name == "thread_name":
            self.thread_names[(pid, tid)] = (args or {}).get("name", "")

    def add_dicts(self, events: list) -> None:
        """The loop: any JSON the trace holds."""
        kind, key, ts, dur, name, cat, value, args = [], [], [], [], [], [], [], []
        counts = self.counts
        for e in events:
            ph = e.get("ph") if isinstance(e, dict) else None
            if ph == "M":
                self._metadata(e.get("name"), e.get("pid"), e.get("tid"), e.get("args"))
                continue
            if ph not in ("X", "i", "I", "C") or not isinstance(e.get("ts"), (int, float)):
                counts["skipped"] += 1
                continue
            if ph == "C":
                for series, v in sorted((e.get("args") or {}).items()):
                    kind.append(COUNTER)
                    key.append(self._ordinal(self.keys, ("counter", e.get("pid"), e.get("name"), series)))
                    ts.append(e["ts"])
                    dur.append(0)
                    name.append(-1)
                    cat.append(-1)
                    value.append(float(v))
                    counts["counters"] += 1
                continue
            if ph == "X":
                kind.append(SLICE)
                key.append(self._ordinal(self.keys, (e.get("pid"), e.get("tid"))))
                dur.append(e.get("dur") or 0)
                counts["slices"] += 1
            else:
                tid = None if e.get("s") == "g" else e.get("tid")
                kind.append(INSTANT)
                key.append(self._ordinal(self.keys, (e.get("pid"), "instants" if tid is None else tid)))
                dur.append(0)
                counts["instants"] += 1
            ts.append(e["ts"])
            name.append(self._ordinal(self.names, e.get("name") or ""))
            cat.append(self._ordinal(self.cats, e["cat"]) if e.get("cat") else -1)
            value.append(0.0)
            args.append(e.get("args") or {})
        if kind:
            self._add(
                Part(
                    np.array(kind, np.int8),
                    np.array(key, np.int64),
                    _ns(ts),
                    _ns(dur),
                    np.array(name, np.int64),
                    np.array(cat, np.int64),
                    np.array(value, np.float64),
                    args,
                )
            )

    def add_table(self, t: pa.Table, raw: bytes) -> bool:
        """The fast path: False (and nothing added) where the batch's columns are not exactly its JSON."""
        if not _fast(t, raw):
            return False
        ph = t["ph"].combine_chunks()
        col = {n: t[n].combine_chunks() for n in t.column_names}
        is_x = pc.equal(ph, "X").to_numpy(zero_copy_only=False)
        is_i = pc.is_in(ph, pa.array(["i", "I"])).to_numpy(zero_copy_only=False)
        is_m = pc.equal(ph, "M").to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(is_x | is_i)
        take = pa.array(rows)
        ts = pc.take(col["ts"], take) if "ts" in col else None
        if (
            ts is None
            or ts.null_count
            or pc.take(col["pid"], take).null_count
            or pc.take(col["tid"], pa.array(np.flatnonzero(is_x))).null_count
        ):
            return False  # the loop says what to skip
        for r in np.flatnonzero(is_m).tolist():
            row = t.slice(r, 1).to_pylist()[0]
            self._metadata(row.get("name"), row.get("pid"), row.get("tid"), row.get("args"))
        self.counts["skipped"] += int(t.num_rows - rows.size - is_m.sum())
        if not rows.size:
            return True
        x = is_x[rows]
        self.counts["slices"] += int(x.sum())
        self.counts["instants"] += int((~x).sum())
        key = self._keys(col, rows, x)
        name = self._ordinals(
            self.names, pc.fill_null(pc.take(col["name"], take), "") if "name" in col else pa.array([""] * rows.size)
        )
        if "cat" in col:
            cats = pc.take(col["cat"], take)
            cat = np.where(
                pc.fill_null(pc.not_equal(cats, ""), False).to_numpy(zero_copy_only=False),
                self._ordinals(self.cats, pc.fill_null(cats, "")),
                -1,
            )
        else:
            cat = np.full(rows.size, -1, np.int64)
        dur = pc.take(col["dur"], take).to_numpy(zero_copy_only=False) if "dur" in col else np.zeros(rows.size)
        dur = np.where(x, np.nan_to_num(np.asarray(dur, np.float64)), 0.0)
        args = (
            pc.take(col["args"], take)
            if "args" in col and pa.types.is_struct(col["args"].type)
            else pa.array([{}] * rows.size, pa.struct([]))
        )
        self._add(
            Part(
                np.where(x, SLICE, INSTANT).astype(np.int8),
                key,
                _ns(ts.to_numpy(zero_copy_only=False)),
                _ns(dur),
                name,
                cat,
                np.zeros(rows.size),
                args,
            )
        )
        return True

    def _ordinals(self, table: dict, values: pa.Array) -> np.ndarray:
        encoded = values.dictionary_encode()
        ids = np.array([self._ordinal(table, v) for v in encoded.dictionary.to_pylist()], np.int64)
        return ids[encoded.indices.to_numpy(zero_copy_only=False)]

    def _keys(self, col: dict, rows: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Each row's track ordinal; new tracks numbered in order of their first row, as the loop does."""
        pid = pc.take(col["pid"], pa.array(rows)).to_numpy(zero_copy_only=False)
        tid = pc.take(col["tid"], pa.array(rows)).fill_null(0).to_numpy(zero_copy_only=False)
        found = []  # (first row, key)
        key = np.empty(rows.size, np.int64)
        xs = np.flatnonzero(x)
        if xs.size:
            pairs, first, inverse = np.unique(
                np.stack([pid[xs], tid[xs]], 1), axis=0, return_index=True, return_inverse=True
            )
            pair_keys = [tuple(p) for p in pairs.tolist()]
            found += [(xs[f], k) for f, k in zip(first.tolist(), pair_keys)]
        instants = np.flatnonzero(~x).tolist()
        if instants:
            rows_i = rows[instants]
            scope = pc.take(col["s"], pa.array(rows_i)).to_pylist() if "s" in col else [None] * len(instants)
            tids = pc.take(col["tid"], pa.array(rows_i)).to_pylist()
            inst_keys = [
                (p, "instants" if s == "g" or t is None else t) for p, t, s in zip(pid[instants].tolist(), tids, scope)
            ]
            found += list(zip(instants, inst_keys))
        for _, k in sorted(found, key=lambda f: f[0]):
            self._ordinal(self.keys, k)
        if xs.size:
            key[xs] = np.array([self.keys[k] for k in pair_keys], np.int64)[inverse.reshape(-1)]
        if instants:
            key[instants] = [self.keys[k] for k in inst_keys]
        return key


def _fast(t: pa.Table, raw: bytes) -> bool:
    """Whether Arrow's columns are exactly what the JSON wrote (see the module docstring)."""
    types = {n: t.schema.field(n).type for n in t.column_names}
    if b"null" in raw or not pa.types.is_string(types.get("ph", pa.null())):
        return False
    if pc.any(pc.equal(t["ph"], "C")).as_py():
        return False
    if not all(pa.types.is_int64(types.get(k, pa.null())) for k in ("pid", "tid")):
        return False
    if not all(pa.types.is_integer(types[k]) or pa.types.is_floating(types[k]) for k in ("ts", "dur") if k in types):
        return False
    if not all(pa.types.is_string(types[k]) for k in ("name", "cat", "s") if k in types):
        return False
    args = types.get("args", pa.null())
    if pa.types.is_null(args):
        return True
    return pa.types.is_struct(args) and all(any(ok(f.type) for ok in FAST_ARGS) for f in args)


def _parse(raw: bytes) -> pa.Table | None:
    import pyarrow.json as pj

    try:
        return pj.read_json(
            pa.BufferReader(raw), read_options=pj.ReadOptions(use_threads=False, block_size=len(raw) + 1)
        )
    except pa.ArrowInvalid:
        return None


def read(source, spill_dir: str | Path | None = None) -> Events:
    """A trace's events (close them, or use them as a context manager): `source` is a Chrome trace
    dict or list, or a JSON file's path; their table lives in a temporary folder in `spill_dir`."""
    events = Events(spill_dir, str(source) if isinstance(source, (str, Path)) else "a Chrome trace")
    try:
        _fill(events, source)
    except BaseException:
        events.close()
        raise
    return events


def _fill(events: Events, source) -> None:
    if not isinstance(source, (str, Path)):
        listed = source.get("traceEvents", []) if isinstance(source, dict) else source
        for lo in range(0, len(listed), DICTS_AT_ONCE):
            events.add_dicts(listed[lo : lo + DICTS_AT_ONCE])
        return
    found = json_records.Split()
    try:
        for _, raw, _ in json_records.split(Path(source), {"traceEvents"}, set(), found):
            if "traceEvents" in found.irregular:
                break
            table = _parse(raw)
            if table is None or not events.add_table(table, raw):
                events.add_dicts(json_records.batch_records(raw))
    except (json_records.NotJSON, json.JSONDecodeError, orjson.JSONDecodeError) as e:
        raise UserError(f"{source} is not a readable Chrome trace ({e}); capture this case again") from None
    if "traceEvents" in found.irregular or "traceEvents" not in found.records:
        events.clear()  # what was read so far goes: the whole file is read again as one
        _fill(events, json.loads(Path(source).read_bytes()))  # not an object of event records: read it whole
