"""The events of a Chrome trace (torch.profiler's export, or any Trace Event Format file) as columns
in a table on disk, for pftrace_writer.py to sort and encode and for the cpu and xla views to summarize.

Exact times. Kineto writes epoch microseconds (about 1.7e15 ns), where a float64 holds only
multiples of 256 ns, so `ts` and `dur` are never read as floats: pyarrow parses them as decimals
with 3 places (Kineto's), whose unscaled integer is the nanoseconds; from a trace's first stamp
with a digit below the nanosecond on, with 9 places, rounded to 3 (half to even); a batch Arrow
cannot parse that way (a stamp written as a string, or with more than 9 decimals) is read by the
standard library with Decimal numbers. The same integers come out whichever path read an event.

Speed. A million-op trace is about 100 MB of JSON; `json.load` alone costs 2.5 us an event and a
dict per event. Here the `traceEvents` array is cut into record batches without decoding it
(json_records.py) and pyarrow's JSON reader (C++) parses each batch into columns. A batch whose
columns Arrow cannot give exactly as the JSON wrote them is halved, down to LOOP_BYTES, and what
is left goes through orjson and a loop: B/E and counter phases, pid/tid that are not integers, a
`null`, args holding objects or floats (Arrow makes 1 and 1.5 both doubles; the loop keeps 1 an int),
lists with such values (arrow_json.py makes the others' text). Both paths fill the same columns, so
what is written does not depend on which one read a batch.

Each batch goes straight into a DuckDB table (`ev`, below) in a temporary folder beside the output,
under a memory limit: a Chrome trace interleaves tracks, so nesting and B/E pairing need a sort over
the whole trace, and DuckDB's sort spills to disk where a numpy sort would hold every event.


Kept: complete events ('X'), B/E pairs (matched per thread in time order, as the format says;
a B never ended stays a slice that does not end), instants ('i'/'I', thread, process or global),
counters ('C', one value per series), flow events ('s'/'t'/'f', bound to slices by the writer).
Not converted, and counted and named (`Events.problems`), never silently changed: negative
durations and negative stamps (a .pftrace timestamp is unsigned), stamps that are not numbers,
counter values that are not numbers, an E with no B open, phases this converter does not know.
gzip or plain input is told by content, not by name.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Hashable
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from neuronsweep.atomic import remove_stale
from neuronsweep.errors import UserError
from neuronsweep.formats import gzip_files, json_records, protowire
from neuronsweep.json_numbers import finite_number

# kinds of rows in `ev`: what the writer emits (SLICE, INSTANT, COUNTER), what it pairs or binds first
SLICE, INSTANT, COUNTER, BEGIN, END, FLOW_OUT, FLOW_STEP, FLOW_IN, FLOW_IN_NEXT = range(9)
FLOWS = (FLOW_OUT, FLOW_STEP, FLOW_IN, FLOW_IN_NEXT)
UNFINISHED = -1  # the dur of a B never ended
FAST_PHASES = pa.array(["X", "i", "I", "M", "s", "t", "f"])
# How ts and dur are parsed: microseconds with 3 places (Kineto's), whose unscaled integer is the
# nanoseconds, or, from a trace's first finer stamp on, with 9 (29 digits of microseconds)
NS, STAMP = pa.decimal128(38, 3), pa.decimal128(38, 9)
STAMPS = pa.schema([("ts", STAMP), ("dur", STAMP)])


def _fields(stamp: pa.DataType) -> pa.Schema:
    """What the fast path reads as these types (a batch where one is not fails to parse and is
    halved); named, Arrow's parser infers less (7% of its time); other keys it infers."""
    common = [("ph", pa.string()), ("name", pa.string()), ("cat", pa.string()), ("pid", pa.int64())]
    return pa.schema([*common, ("tid", pa.int64()), ("ts", stamp), ("dur", stamp)])


FIELDS, FINE_FIELDS = _fields(NS), _fields(STAMP)
# DuckDB's share while the trace is read (it spills the rest of the table to the temporary folder),
# and at least while it is sorted, once the batches' memory is given back: a million slices sort
# without spilling at 160 MB (at 64 the sort wrote and read back 86 MB, 4% of the converter's time),
# and the sort's peak stays below the read's (memory flat in trace size)
MEMORY_MB, SORT_MB = 64, 160
SPILL_PREFIX = ".trace-events."
DICTS_AT_ONCE = 1 << 16  # events of a trace given as a list, per batch
NOT_A_TRACE = "no traceEvents and not a JSON array of events"
# seq: the event's position among those kept, in input order; kind: above; key: the track's ordinal
# in Events.keys; ts, dur in ns; name, cat: ordinals in Events.names and Events.cats (-1: none, and
# every counter); value: a counter's; ann: a slice's or instant's TrackEvent.debug_annotations as
# bytes (NULL for counters); fkey: a flow event's identity, its cat and id as text (_flow_key)
TABLE = (
    "CREATE TABLE ev (seq BIGINT, kind TINYINT, key INTEGER, ts BIGINT, dur BIGINT, name INTEGER, "
    "cat INTEGER, value DOUBLE, ann BLOB, fkey VARCHAR)"
)
PHASES = {"X": SLICE, "B": BEGIN, "E": END, "i": INSTANT, "I": INSTANT, "s": FLOW_OUT, "t": FLOW_STEP}


def out_of_memory(error: BaseException) -> bool:
    """Whether DuckDB ran out of its memory share (as itself, or through an Arrow stream of a result)."""
    return isinstance(error, duckdb.OutOfMemoryException) or (
        isinstance(error, (OSError, pa.ArrowException)) and str(error).startswith("Out of Memory Error")
    )


def _cap_mb() -> int:
    """Half the host's memory, in MB: the most DuckDB's share grows to."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 >> 20


# ------------------------------------------------------------------------------------ exact times


LIMIT_US = Decimal(2**63 - 1) / 1000  # a stamp Perfetto holds (int64 nanoseconds) is below this


def exact_ns(value: object) -> int | None:
    """Microseconds as the JSON wrote them (an int, a decimal string, a Decimal; a float only as its
    shortest repr, all a float still knows) to integer nanoseconds; None if it is no finite number
    or past int64 nanoseconds (never wrapped around)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value * 1000 if abs(value) < LIMIT_US else None
    try:
        d = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except InvalidOperation:
        return None
    if not d.is_finite() or abs(d) >= LIMIT_US:
        return None
    return int((d * 1000).to_integral_value(ROUND_HALF_EVEN))


def us_text(ns: int) -> str:
    """Nanoseconds as the microseconds a Chrome trace writes (for messages)."""
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    whole, frac = divmod(ns, 1000)
    return f"{sign}{whole}" + (f".{frac:03d}".rstrip("0") if frac else "")


def _decimal_ns(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A decimal128 column of microseconds as int64 nanoseconds, and where that is a value (not null,
    and inside int64)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(col)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    if col.type == NS:  # parsed with three places: nothing to rescale
        r = col
    else:
        try:  # no digit below a nanosecond: the cast alone is exact
            r = col.cast(NS)
        except pa.ArrowInvalid:
            r = pc.round(col, ndigits=3, round_mode="half_to_even").cast(NS, safe=False)
    words = np.frombuffer(r.buffers()[1], np.int64)[2 * r.offset : 2 * (r.offset + n)].reshape(n, 2)
    ns = words[:, 0].copy()
    ok = (words[:, 1] == ns >> 63) & r.is_valid().to_numpy(zero_copy_only=False)
    ns[~ok] = 0
    return ns, ok


def _stamps(raw: bytes | bytearray, records: list) -> tuple[list, list]:
    """Each record's ts and dur in ns (None: absent or no number), read from the batch's text: by
    Arrow as decimals, else (a stamp Arrow cannot parse as one) by the standard library."""
    try:
        t = pj.read_json(
            pa.BufferReader(raw),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(raw) + 1),
            parse_options=pj.ParseOptions(explicit_schema=STAMPS, unexpected_field_behavior="ignore"),
        )
        if t.num_rows == len(records):
            out = []
            for name in ("ts", "dur"):
                ns, ok = _decimal_ns(t[name])
                out.append([v if k else None for v, k in zip(ns.tolist(), ok.tolist())])
            return out[0], out[1]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    exact = json.loads(b"[" + raw.replace(b"\n", b",") + b"]", parse_float=Decimal)
    return (
        [exact_ns(e.get("ts")) if isinstance(e, dict) else None for e in exact],
        [exact_ns(e.get("dur")) if isinstance(e, dict) else None for e in exact],
    )


# ----------------------------------------------------------------------------------------- events


@dataclass
class Part:
    """One batch's rows, in input order."""

    kind: np.ndarray  # SLICE, INSTANT, COUNTER, BEGIN, END, FLOW_*
    key: np.ndarray  # the track's ordinal in Events.keys
    ts: np.ndarray  # ns
    dur: np.ndarray  # ns, slices only
    name: np.ndarray  # ordinal in Events.names (-1: a counter)
    cat: np.ndarray  # ordinal in Events.cats, -1 for none
    value: np.ndarray  # counters only
    args: pa.StructArray | list  # per row that is not a counter, in order
    fkey: pa.Array | None = None  # flow events' identity (_flow_key; null otherwise)


class Events:
    """Every event to write: the table `ev` (TABLE) in `db`, and the names and track keys its rows
    refer to, each numbered in order of first appearance (the order tracks are described in). A
    context manager: leaving it removes the table's folder.

    Track keys: ("thread", pid, tid) a thread as the trace names it (any JSON value); ("process",
    pid) a process-scoped instant's; ("global",) global instants'; ("counter", pid, name, series);
    ("lane", key, n) the writer's n-th track beside a thread for slices that do not nest in it."""

    def __init__(self, spill_dir: str | Path | None = None, source: str = "a Chrome trace") -> None:
        self.source = source  # for messages
        self.fields = FIELDS  # how Arrow parses a batch (_parse)
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
        """Forget every event read so far (the next trace starts empty in the same spill folder)."""
        self.db.execute("DELETE FROM ev")
        self.rows = self.ann_bytes = 0
        self.keys: dict = {}
        self.names: dict = {}
        self.cats: dict = {}
        self.proc_names: dict = {}
        self.thread_names: dict = {}
        self.counts = {"slices": 0, "instants": 0, "counters": 0, "flow_events": 0, "unfinished": 0, "skipped": 0}
        self.problems: dict[str, list] = {}  # what was not converted: reason -> [count, first example]

    def __enter__(self) -> Events:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the spill database and remove its folder."""
        self.db.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def problem(self, reason: str, example: str, count: int = 1) -> None:
        """Count one kind of event that was skipped, keeping its first example for the message."""
        found = self.problems.setdefault(reason, [0, example])
        found[0] += count

    def said(self) -> str | None:
        """One line naming what was not converted (None: everything was)."""
        if not self.problems:
            return None
        parts = [f"{n} {reason} (first: {first})" for reason, (n, first) in self.problems.items()]
        return f"{self.source}: not converted: {'; '.join(parts)}"

    def sort_memory(self) -> None:
        """DuckDB's share for sorting the table (Arrow's pages kept for the batches handed back
        first): SORT_MB, or more where its sort needs it: it spills runs to disk but merges them
        with a block of each in memory; measured here, 16 bytes a row is enough (16 M slices sorted
        under 256 MB), and an eighth of the args' bytes the sort carries past 32 a row (3 M
        torch.profiler events with 514 MB of args needed 80 MB)."""
        need = max(SORT_MB, 16 * self.rows + max(0, self.ann_bytes - 32 * self.rows) // 8 >> 20)
        pa.default_memory_pool().release_unused()
        self._memory(min(max(self.memory_mb, need), max(self.memory_mb, _cap_mb())))

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

    def execute(self, what: str, sql: str) -> None:
        """`sql` (all or nothing), again with more memory where DuckDB's share was too small."""
        while True:
            try:
                self.db.execute(sql)
                return
            except duckdb.Error as e:
                if not out_of_memory(e):
                    raise
                self.grow(what)

    def _add(self, part: Part, annotated: pa.Array | None = None) -> None:
        """One batch's rows into `ev`, its args encoded (unless `annotated` already holds them)."""
        n = part.kind.size
        if annotated is None:
            annotated = protowire.debug_annotations(part.args)
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
                "fkey": pa.nulls(n, pa.string()) if part.fkey is None else part.fkey,
            }
        )
        self.db.register("batch", batch)
        self.execute(f"{self.source}: storing {self.rows + n} trace events", "INSERT INTO ev SELECT * FROM batch")
        self.db.unregister("batch")
        self.rows += n
        self.ann_bytes += pc.sum(pc.binary_length(annotated)).as_py() or 0

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

    def complete_slices(self) -> list[tuple[str, int, int]]:
        """Every complete ('X') event as (name, ts, dur) in ns, by start (input order among equal starts):
        what a reader of a whole short trace needs (backends/xla_split.py)."""
        names = {ordinal: name for name, ordinal in self.names.items()}
        x = self.db.execute(f"SELECT name, ts, dur FROM ev WHERE kind = {SLICE} ORDER BY ts, seq").fetchnumpy()
        return [(str(names[n]), int(t), int(d)) for n, t, d in zip(x["name"], x["ts"], x["dur"])]

    def _ordinal(self, table: dict, value: Hashable) -> int:
        """`value`'s number in `table`, the next one when it is new."""
        found = table.get(value)
        if found is None:
            found = table[value] = len(table)
        return found

    def _metadata(self, name: object, pid: object, tid: object, args: object) -> None:
        value = (args or {}).get("name", "") if isinstance(args, dict) else ""
        if name == "process_name":
            self.proc_names[_hashable(pid)] = str(value)
        elif name == "thread_name":
            self.thread_names[(_hashable(pid), _hashable(tid))] = str(value)

    def add_dicts(self, events: list, ts_ns: list | None = None, dur_ns: list | None = None) -> None:
        """The loop: any JSON the trace holds. `ts_ns`/`dur_ns`: each event's stamps read exactly
        from the file's text (_stamps); without them (events given as Python objects), from the values."""
        kind, key, ts, dur, name, cat, value, args = [], [], [], [], [], [], [], []
        fkey: list[str | None] = []  # a flow's key, None for every other event
        counts = self.counts
        for i, e in enumerate(events):
            ph = e.get("ph") if isinstance(e, dict) else None
            if ph == "M":
                self._metadata(e.get("name"), e.get("pid"), e.get("tid"), e.get("args"))
                continue
            k = PHASES.get(ph) if isinstance(ph, str) else None
            if ph == "f":
                k = FLOW_IN if e.get("bp") == "e" else FLOW_IN_NEXT
            elif ph == "C":
                k = COUNTER
            label = repr(e.get("name") if isinstance(e, dict) else e)
            if k is None:
                counts["skipped"] += 1
                self.problem(f"events of phase {ph!r} (not a phase this converter reads)", label)
                continue
            t = exact_ns(e.get("ts")) if ts_ns is None else ts_ns[i]
            if t is None:
                self.problem("events whose ts is not a number (or past 2^63 ns)", f"{label} with ts {e.get('ts')!r}")
                continue
            if t < 0:  # a .pftrace stamp is unsigned: written, it would wrap past 2^63 and be refused on reading
                self.problem(
                    "events with a negative ts (a .pftrace timestamp is unsigned)", f"{label} at ts {us_text(t)}"
                )
                continue
            pid = _hashable(e.get("pid"))
            if k == COUNTER:
                for series, v in sorted((e.get("args") or {}).items()) if isinstance(e.get("args"), dict) else ():
                    number = finite_number(v)
                    if number is None:
                        self.problem("counter values that are not numbers", f"{label}.{series} = {v!r}")
                        continue
                    kind.append(COUNTER)
                    key.append(self._ordinal(self.keys, ("counter", pid, _hashable(e.get("name")), series)))
                    ts.append(t)
                    dur.append(0)
                    name.append(-1)
                    cat.append(-1)
                    value.append(number)
                    fkey.append(None)
                    counts["counters"] += 1
                continue
            d = 0
            if k == SLICE:
                given = (exact_ns(e.get("dur")) if dur_ns is None else dur_ns[i]) if "dur" in e else 0
                if given is None:
                    self.problem(
                        "complete events whose dur is not a number (or past 2^63 ns)", f"{label} at ts {us_text(t)}"
                    )
                    continue
                if given < 0:
                    self.problem("complete events with a negative duration", f"{label} at ts {us_text(t)}")
                    continue
                d = given
                counts["slices"] += 1
            elif k == INSTANT:
                scope = e.get("s")
                counts["instants"] += 1
            elif k in FLOWS:
                counts["flow_events"] += 1
            track: tuple
            if k == INSTANT and scope == "g":
                track = ("global",)
            elif k == INSTANT and scope == "p":
                track = ("process", pid)
            else:
                track = ("thread", pid, _hashable(e.get("tid")))
            kind.append(k)
            key.append(self._ordinal(self.keys, track))
            ts.append(t)
            dur.append(d)
            name.append(self._ordinal(self.names, str(e.get("name") or "")))
            cat.append(self._ordinal(self.cats, str(e["cat"])) if e.get("cat") else -1)
            value.append(0.0)
            fkey.append(_flow_key(e) if k in FLOWS else None)
            a = e.get("args")
            args.append(a if isinstance(a, dict) else {} if a is None else {"args": a})
        if kind:
            self._add(
                Part(
                    np.array(kind, np.int8),
                    np.array(key, np.int64),
                    np.array(ts, np.int64),
                    np.array(dur, np.int64),
                    np.array(name, np.int64),
                    np.array(cat, np.int64),
                    np.array(value, np.float64),
                    args,
                    pa.array(fkey, pa.string()),
                )
            )

    def add_table(self, t: pa.Table, raw: bytes | bytearray) -> bool:
        """The fast path: False (and nothing added) where the batch's columns are not exactly its JSON."""
        if not _fast(t, raw):
            return False
        col = {n: t[n].combine_chunks() for n in t.column_names}
        ph = col["ph"].dictionary_encode()  # the few phases looked up once, not compared per row
        phases, code = ph.dictionary.to_pylist(), ph.indices.to_numpy(zero_copy_only=False)
        kind = np.array([PHASES.get(p, -1) for p in phases], np.int8)[code]  # -1: metadata, not a row of `ev`
        is_f = np.array([p == "f" for p in phases])[code]
        if is_f.any():  # 'f' binds to the slice enclosing it with bp "e", else to the next one
            enclosing = (
                pc.fill_null(pc.equal(col["bp"], "e"), False).to_numpy(zero_copy_only=False) if "bp" in col else False
            )
            kind[is_f] = np.where(enclosing, FLOW_IN, FLOW_IN_NEXT)[is_f] if "bp" in col else FLOW_IN_NEXT
        is_m = np.array([p == "M" for p in phases])[code]
        rows = np.flatnonzero(kind >= 0)
        if rows.size < len(ph):  # else (a profiler's usual batch) the columns as they are
            col = {n: pc.take(c, pa.array(rows)) for n, c in col.items()}
        kind = kind[rows]
        flow = np.isin(kind, FLOWS)
        ts = col["ts"] if "ts" in col else None
        if (
            ts is None
            or ts.null_count
            or col["pid"].null_count
            or col["tid"].null_count
            or ("s" in col and pc.any(pc.is_in(col["s"], pa.array(["g", "p"]))).as_py())
            or (flow.any() and ("id" not in col or pc.any(pc.is_null(pc.filter(col["id"], flow))).as_py()))
        ):
            return False  # the loop says what to skip, scopes instants and names a flow without an id
        ts_ns, ts_ok = _decimal_ns(ts)
        dur_ns, dur_ok = _decimal_ns(col["dur"]) if "dur" in col else (None, None)
        x = kind == SLICE
        if not ts_ok.all() or (dur_ok is not None and not dur_ok[x].all()) or (ts_ns < 0).any():
            return False  # past int64 nanoseconds, or before zero: the loop names them
        dur = (
            np.where(x, np.where(dur_ok, dur_ns, 0), 0)
            if dur_ns is not None and dur_ok is not None
            else np.zeros(rows.size, np.int64)
        )
        if (dur < 0).any():
            return False  # the loop names them
        args = (
            col["args"]
            if "args" in col and pa.types.is_struct(col["args"].type)
            else pa.array([{}] * rows.size, pa.struct([]))
        )
        annotated = protowire.debug_annotations(args)
        if annotated is None:
            return False  # an arg whose text only the loop makes exactly
        for r in np.flatnonzero(is_m).tolist():
            row = t.slice(r, 1).to_pylist()[0]
            self._metadata(row.get("name"), row.get("pid"), row.get("tid"), row.get("args"))
        if not rows.size:
            return True
        key = self._keys(col)
        name = self._ordinals(
            self.names, pc.fill_null(col["name"], "") if "name" in col else pa.array([""] * rows.size)
        )
        if "cat" in col:
            cats = col["cat"]
            cat = np.where(
                pc.fill_null(pc.not_equal(cats, ""), False).to_numpy(zero_copy_only=False),
                self._ordinals(self.cats, pc.fill_null(cats, "")),
                -1,
            )
        else:
            cats, cat = pa.nulls(rows.size, pa.string()), np.full(rows.size, -1, np.int64)
        fkey = None
        if flow.any():  # a flow's identity: its cat and id as text, as _flow_key makes it
            pairs = pc.binary_join_element_wise(pc.fill_null(cats, ""), pc.cast(col["id"], pa.string()), "\x00")
            fkey = pc.if_else(pa.array(flow), pairs, pa.scalar(None, pa.string()))
        self.counts["slices"] += int(x.sum())
        self.counts["instants"] += int((kind == INSTANT).sum())
        self.counts["flow_events"] += int(flow.sum())
        self._add(Part(kind, key, ts_ns, dur, name, cat, np.zeros(rows.size), args, fkey), annotated)
        return True

    def _ordinals(self, table: dict, values: pa.Array) -> np.ndarray:
        encoded = values.dictionary_encode()
        ids = np.array([self._ordinal(table, v) for v in encoded.dictionary.to_pylist()], np.int64)
        return ids[encoded.indices.to_numpy(zero_copy_only=False)]

    def _keys(self, col: dict) -> np.ndarray:
        """Each row's track ordinal; new tracks numbered in order of their first row, as the loop does."""
        pid = col["pid"].to_numpy(zero_copy_only=False)
        tid = col["tid"].to_numpy(zero_copy_only=False)
        if pid.min() >= 0 and pid.max() < 1 << 31 and tid.min() >= 0 and tid.max() < 1 << 32:  # one int each
            pairs, first, inverse = np.unique((pid << 32) | tid, return_index=True, return_inverse=True)
            pair_keys = [("thread", p >> 32, p & 0xFFFFFFFF) for p in pairs.tolist()]
        else:
            pairs, first, inverse = np.unique(np.stack([pid, tid], 1), axis=0, return_index=True, return_inverse=True)
            pair_keys = [("thread", *p) for p in pairs.tolist()]
        for f in np.argsort(first, kind="stable").tolist():
            self._ordinal(self.keys, pair_keys[f])
        return np.array([self.keys[k] for k in pair_keys], np.int64)[inverse.reshape(-1)]

    # ----------------------------------------------------------------------------------- B/E pairs

    def pair_begin_end(self) -> None:
        """Each B closed by the next E on its thread in time order (input order among equal times)
        becomes a slice with both events' args; a B never closed, a slice that does not end
        (dur UNFINISHED, as Perfetto keeps it); an E with nothing open is named, not converted."""
        if not self.db.execute(f"SELECT count(*) FROM ev WHERE kind IN ({BEGIN}, {END})").fetchall()[0][0]:
            return
        reader = (
            self.db.cursor()
            .sql(
                f"SELECT seq, kind, key, ts, name, cat, ann FROM ev WHERE kind IN ({BEGIN}, {END}) "
                "ORDER BY key, ts, seq"
            )
            .to_arrow_reader(1 << 16)
        )
        names = list(self.names)
        out: dict[str, list] = {c: [] for c in ("seq", "key", "ts", "dur", "name", "cat", "ann")}
        stack: list = []
        current = None

        def close_all() -> None:
            for seq, key, ts, name, cat, ann in stack:
                for c, v in zip(out, (seq, key, ts, UNFINISHED, name, cat, ann)):
                    out[c].append(v)
                self.counts["unfinished"] += 1
            stack.clear()

        for batch in reader:
            cols = batch.to_pydict()
            for seq, kind, key, ts, name, cat, ann in zip(*cols.values()):
                if key != current:
                    close_all()
                    current = key
                if kind == BEGIN:
                    stack.append((seq, key, ts, name, cat, ann))
                elif stack:
                    b_seq, b_key, b_ts, b_name, b_cat, b_ann = stack.pop()
                    if not names[b_name] and names[name]:
                        b_name = name
                    row = (
                        b_seq,
                        b_key,
                        b_ts,
                        ts - b_ts,
                        b_name,
                        b_cat if b_cat >= 0 else cat,
                        (b_ann or b"") + (ann or b""),
                    )
                    for c, v in zip(out, row):
                        out[c].append(v)
                else:
                    label = f"{names[name]!r} at" if names[name] else "one at"
                    self.problem("E events with no B open on their thread", f"{label} ts {us_text(ts)}")
        close_all()
        pairs = len(out["seq"])
        self.counts["slices"] += pairs
        table = pa.table(
            {
                **{c: pa.array(out[c], pa.int64()) for c in ("seq", "key", "ts", "dur", "name", "cat")},
                "ann": pa.array(out["ann"], pa.binary()),
            }
        )
        self.db.register("pairs", table)
        self.execute(
            f"{self.source}: pairing B and E events",
            f"INSERT INTO ev SELECT seq, {SLICE}, key, ts, dur, name, cat, 0.0, ann, NULL FROM pairs",
        )
        self.db.unregister("pairs")
        self.db.execute(f"DELETE FROM ev WHERE kind IN ({BEGIN}, {END})")


def _hashable(value: Any) -> Hashable:
    """A JSON value usable in a track key (lists and objects as their JSON text)."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _flow_key(e: dict) -> str:
    """The identity a flow event shares with the rest of its flow: `id` (or id2's local or global)
    within its category, as the Trace Event Format scopes it; as text, `cat` NUL `id`."""
    ident = e.get("id")
    if ident is None and isinstance(e.get("id2"), dict):
        ident = e["id2"].get("local", e["id2"].get("global"))
    return f"{e.get('cat') or ''}\x00{ident}"


def _fast(t: pa.Table, raw: bytes | bytearray) -> bool:
    """Whether Arrow's columns are exactly what the JSON wrote (see the module docstring)."""
    types = {n: t.schema.field(n).type for n in t.column_names}
    if any(map(_holds_null, t.columns)) and b"null" in raw:  # else no JSON null: each would be an Arrow null
        return False
    if not pa.types.is_string(types.get("ph", pa.null())):
        return False
    if not pc.all(pc.is_in(t["ph"], FAST_PHASES)).as_py():
        return False
    if not all(pa.types.is_int64(types.get(k, pa.null())) for k in ("pid", "tid")):
        return False
    if not all(types[k] in (NS, STAMP) for k in ("ts", "dur") if k in types):
        return False
    if not all(pa.types.is_string(types[k]) for k in ("name", "cat", "s", "bp") if k in types):
        return False
    if "id2" in types or not (pa.types.is_int64(types.get("id", pa.int64())) or pa.types.is_string(types["id"])):
        return False  # a flow's id the loop reads (_flow_key)
    args = types.get("args", pa.null())
    return pa.types.is_null(args) or pa.types.is_struct(args)  # which args it holds: protowire.debug_annotations


def _holds_null(column: pa.ChunkedArray | pa.Array) -> bool:
    """Whether a column, or any value nested in it, is null (a JSON null, or a key some rows lack)."""
    if isinstance(column, pa.ChunkedArray):
        return any(map(_holds_null, column.chunks))
    if column.null_count:
        return True
    if pa.types.is_struct(column.type):
        return any(_holds_null(column.field(i)) for i in range(column.type.num_fields))
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        return _holds_null(column.values)
    return False


def _parse(raw: bytes | bytearray, events: Events) -> pa.Table | None:
    """Arrow's columns of a batch (None: it cannot read them as `events.fields` says). A stamp with
    digits below a nanosecond's place fails the parse with 3 places: that batch and the rest of the
    trace are parsed with 9 (rescaling every stamp cost 2-4% of a conversion)."""
    while True:
        try:
            return pj.read_json(
                pa.BufferReader(raw),
                read_options=pj.ReadOptions(use_threads=False, block_size=len(raw) + 1),
                parse_options=pj.ParseOptions(explicit_schema=events.fields),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            if events.fields is FINE_FIELDS or "decimal" not in str(e):
                return None
            events.fields = FINE_FIELDS


# ------------------------------------------------------------------------------------------ read

TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
SNIFF = 4 << 20  # bytes of a JSON file looked at to tell a Chrome trace from a Neuron profile
LOOP_BYTES = 1 << 16  # a batch Arrow cannot read is halved down to this, then read by the loop


def looks_like(path: Path) -> bool:
    """Whether a JSON file (plain or gzip) is a Chrome trace: an array of events, or an object whose
    first SNIFF bytes open `traceEvents` (torch.profiler writes a few small keys before it)."""
    if json_records.first_byte(path) == b"[":
        return True
    with gzip_files.open_bytes(path) as handle:
        return bool(TRACE_EVENTS.search(handle.read(SNIFF)))


def read(source: str | Path | dict | list, spill_dir: str | Path | None = None) -> Events:
    """A trace's events (close them, or use them as a context manager): `source` is a Chrome trace
    dict or list, or a JSON file's path (plain or gzip); their table lives in a temporary folder in
    `spill_dir`. What could not be converted is said in one line on stderr (Events.said)."""
    _keep_freed_pages()
    events = Events(spill_dir, str(source) if isinstance(source, (str, Path)) else "a Chrome trace")
    try:
        _fill(events, source)
        events.pair_begin_end()
    except RecursionError:
        events.close()
        raise UserError(
            f"{events.source}: values nested deeper than Python can read; not a trace a profiler writes "
            "(capture it again)."
        ) from None
    except BaseException:
        events.close()
        raise
    if events.said():
        print(events.said(), file=sys.stderr)
    return events


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)


def _keep_freed_pages() -> None:
    """Arrow's allocator (jemalloc) hands the pages of each freed batch back to the OS a moment
    later and faults them in again for the next batch: a third of the converter's time on a real
    trace went to the kernel. Kept, they serve the next batch; memory stays flat in trace size (glibc's
    allocator, tried too, grew 25 MB per million events); Events.sort_memory hands them back.
    The batches' text (16 MB blocks, let go as each is read) comes from glibc's malloc, which maps
    such blocks anew each time: kept in its heap (below 64 MB, trimmed past 128 MB free) they fault
    in once (a million slices: 30 k faults and 0.1 s of CPU fewer, the same peak)."""
    try:
        pa.jemalloc_set_decay_ms(-1)
    except (pa.ArrowNotImplementedError, NotImplementedError):  # a pyarrow built without jemalloc
        pass
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc's; other C libraries lack it
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, 64 << 20)
        mallopt(M_TRIM_THRESHOLD, 128 << 20)


def _fill(events: Events, source: str | Path | dict | list) -> None:
    if not isinstance(source, (str, Path)):
        if isinstance(source, dict) and isinstance(source.get("traceEvents"), list):
            listed = source["traceEvents"]
        elif isinstance(source, list):
            listed = source
        else:
            raise UserError(f"{events.source}: {NOT_A_TRACE}; pass a Chrome trace (torch.profiler's export).")
        for lo in range(0, len(listed), DICTS_AT_ONCE):
            events.add_dicts(listed[lo : lo + DICTS_AT_ONCE])
        return
    path = Path(source)
    if not path.is_file():  # a folder, a FIFO (reading it would wait forever), a dangling or looping link
        what = "no such file" if not path.exists() else "not a regular file"
        raise UserError(f"{path}: {what}; pass a Chrome trace file (.json or .json.gz).")
    try:
        first = json_records.first_byte(path)
    except (OSError, EOFError) as e:
        raise UserError(f"{path} is not a readable Chrome trace ({e}); capture it again.") from None
    if not first:
        raise UserError(f"{path} is empty; its writer left nothing in it (capture the trace again).")
    if first == b"{":
        try:
            for raw in json_records.quick_split(path, TRACE_EVENTS):
                _batch(events, raw)
            return
        except (ValueError, EOFError, OSError):  # cut in the wrong place, or damaged: read it carefully
            events.clear()
    found = json_records.split(path, {"traceEvents"})
    try:
        for _, part, _ in found:
            if "traceEvents" in found.irregular:
                break
            _batch(events, part)
    except (json_records.NotJSON, ValueError, EOFError, OSError) as e:
        raise UserError(f"{path} is not a readable Chrome trace ({e}); capture it again.") from None
    if "traceEvents" in found.repeated:
        raise UserError(
            f"{path}: the key traceEvents appears twice (a JSON reader keeps only the last); keep one array."
        )
    if first == b"{" and "traceEvents" not in found.irregular and "traceEvents" not in found.records:
        raise UserError(f"{path}: {NOT_A_TRACE}; pass a Chrome trace (torch.profiler's export).")
    if first == b"[" or "traceEvents" in found.irregular:  # not an object of event records: read it whole
        events.clear()  # what was read so far goes
        try:
            whole = json.loads(gzip_files.read_bytes(path), parse_float=Decimal)
        except (ValueError, EOFError, OSError) as e:
            raise UserError(f"{path} is not a readable Chrome trace ({e}); capture it again.") from None
        if isinstance(whole, dict) and isinstance(whole.get("traceEvents"), list):
            whole = whole["traceEvents"]
        if not isinstance(whole, list):
            raise UserError(f"{path}: {NOT_A_TRACE}; pass a Chrome trace (torch.profiler's export).")
        for event in whole:  # exact stamps from the Decimals; args as orjson would give them
            if isinstance(event, dict) and "args" in event:
                event["args"] = _floats(event["args"])
        _fill(events, whole)
    elif first != b"{":
        raise UserError(f"{path}: not JSON ({NOT_A_TRACE}); pass a Chrome trace (torch.profiler's export).")


def _batch(events: Events, raw: bytes | bytearray) -> None:
    """One ndjson batch of events: Arrow's columns where they are exact, else each half the same way,
    down to LOOP_BYTES, which the loop reads: a few odd events (torch.profiler's global instants with
    text pids, say) send only their neighbourhood to the loop, not their whole batch."""
    table = _parse(raw, events)
    try:
        fast = table is not None and events.add_table(table, raw)
    except (pa.ArrowInvalid, UnicodeDecodeError):  # text that is not UTF-8 (Arrow's parser lets it through)
        fast = False  # the loop's parser refuses it in one sentence
    if fast:
        return
    middle = raw.find(b"\n", len(raw) // 2)
    if len(raw) > LOOP_BYTES and middle > 0:
        _batch(events, raw[:middle])  # in order: rows are numbered as they are added
        _batch(events, raw[middle + 1 :])
        return
    records = json_records.batch_records(raw)
    events.add_dicts(records, *_stamps(raw, records))


def _floats(value: Any) -> Any:
    """Decimals (json.loads with parse_float=Decimal) back to floats, inside lists and objects."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value
