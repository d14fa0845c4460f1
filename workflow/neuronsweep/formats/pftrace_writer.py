"""Write Chrome trace JSON (torch.profiler's export) as a Perfetto .pftrace.

Why not hand the JSON to the Perfetto UI? The Neuron tools emit .pftrace, and one format downstream
means one reader (analysis/pftrace_reader.py) and one set of SQL. Complete events ('X') become
BEGIN/END slices on one track per (pid, tid), nested strictly (a child that outlives its parent
after us->ns rounding is clamped); instants ('i') become instant events; counters ('C') become
counter tracks; args become debug annotations. Names and categories are interned.

A million-slice trace is normal, and memory must not grow with it: the events wait in a DuckDB
table on disk (chrome_trace.py), two sorts there put them in order (per track for the nesting
stack, then by time), and each sort streams out in chunks that are encoded with numpy and
pyarrow (protowire.py) straight into the file. The bytes are those the protobuf classes would
write (tests serialize the parsed file again and compare); the classes themselves cost about 3 us
a packet and write only the few track descriptors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

from neuronsweep.atomic import replacing
from neuronsweep.formats import chrome_trace
from neuronsweep.formats.protowire import EMPTY, field, fixed, join, length_prefixed, ragged, varint, varints

BEGIN, END, INSTANT, COUNTER = (
    TrackEvent.TYPE_SLICE_BEGIN,
    TrackEvent.TYPE_SLICE_END,
    TrackEvent.TYPE_INSTANT,
    TrackEvent.TYPE_COUNTER,
)
SEQ_ID = 0x5EEB  # trusted_packet_sequence_id: one sequence for the whole file
CHUNK = 1 << 18  # rows streamed out of a sort and encoded at a time

# Field tags of the messages written (perfetto_trace.proto), in field-number order, which is the
# order the protobuf classes serialize them in.
PACKET, TIMESTAMP, SEQUENCE, TRACK_EVENT, INTERNED = b"\x0a", b"\x40", b"\x50", b"\x5a", b"\x62"
CATEGORY_IID, TYPE, NAME_IID, TRACK_UUID, DOUBLE_COUNTER = b"\x18", b"\x48", b"\x50", b"\x58", b"\xe1\x02"
INTERNED_CATEGORY, INTERNED_NAME, IID, NAME = b"\x0a", b"\x12", b"\x08", b"\x12"
NEEDS_STATE = b"\x68\x02"  # sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE, after the first packet
CLEARED = bytes([TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE])


# ------------------------------------------------------------------------------------ the trace


class _Tracks:
    """Track descriptors, written as they are made (a few, with the protobuf classes)."""

    def __init__(self, handle):
        self.handle, self.next_uuid = handle, 1

    def write(self, body: bytes) -> None:
        self.handle.write(PACKET + varint(len(body)) + body)

    def add(self, name: str, pid=None, tid=None, counter_unit: str | None = None, parent: int | None = None) -> int:
        uuid, self.next_uuid = self.next_uuid, self.next_uuid + 1
        p = TracePacket()
        td = p.track_descriptor
        td.uuid = uuid
        if parent is not None:
            td.parent_uuid = parent
        if isinstance(pid, int) and isinstance(tid, int):
            td.thread.pid, td.thread.tid, td.thread.thread_name = pid, tid, name
        elif isinstance(pid, int) and tid is None:
            td.process.pid, td.process.process_name = pid, name
        else:
            td.name = name
        if counter_unit is not None:
            td.counter.unit_name = counter_unit
        self.write(p.SerializeToString())
        return uuid

    def of_keys(self, events: chrome_trace.Events) -> np.ndarray:
        """A uuid per track key, described in the keys' order: a thread's process first."""
        processes: dict = {}
        uuids = []
        for key in events.keys:
            if len(key) == 4:  # ("counter", pid, name, series)
                _, _, name, series = key
                uuids.append(self.add(f"{name}.{series}", counter_unit=""))
                continue
            pid, tid = key
            if isinstance(pid, int) and pid not in processes:
                processes[pid] = self.add(events.proc_names.get(pid) or f"process {pid}", pid=pid)
            name = events.thread_names.get(key) or f"{pid}/{tid}"
            uuids.append(
                self.add(name, pid=pid, tid=tid if isinstance(pid, int) else None, parent=processes.get(pid))
                if isinstance(tid, int)
                else self.add(name)
            )
        return np.array(uuids, np.uint64)


class _Clamp:
    """Slices in (track, start, longer first) order, a chunk at a time: each end clamped to its
    parent's, so they nest strictly. The stack is carried from chunk to chunk. Slices that already
    nest (a profiler's usual output) are found with numpy and left as they are; otherwise the stack
    runs per slice, in Python."""

    def __init__(self):
        self.stack: list[int] = []
        self.track = None

    def __call__(self, start: np.ndarray, end: np.ndarray, track: np.ndarray) -> np.ndarray:
        out, n, j = end.copy(), start.size, 0
        if n and self.stack and track[0] == self.track:  # the slices the carried stack still encloses
            beyond = (track != self.track) | (start >= self.stack[0])  # stack[0] is the outermost
            j = int(np.argmax(beyond)) if beyond.any() else n
            out[:j] = self._loop(start[:j], end[:j], track[:j])
        if j == n:
            return out
        start, end, track = start[j:], end[j:], track[j:]
        if _nested(start, end, track):
            last = start.size - 1
            open_ = np.flatnonzero((track == track[last]) & (end > start[last]))
            self.stack, self.track = [*end[open_[open_ < last]].tolist(), int(end[last])], track[last]
        else:
            self.stack, self.track = [], None
            out[j:] = self._loop(start, end, track)
        return out

    def _loop(self, start: np.ndarray, end: np.ndarray, track: np.ndarray) -> np.ndarray:
        out = end.tolist()
        stack, current = self.stack, self.track
        for i, (b, f, trk) in enumerate(zip(start.tolist(), out, track.tolist())):
            if trk != current:
                stack, current = [], trk
            while stack and stack[-1] <= b:
                stack.pop()
            if stack and stack[-1] < f:
                f = out[i] = stack[-1]
            stack.append(f)
        self.stack, self.track = stack, current
        return np.array(out, np.int64)


def _nested(start: np.ndarray, end: np.ndarray, track: np.ndarray) -> bool:
    """Whether slices in (track, start, longer first) order nest already, so the stack would clamp
    nothing: with begins and ends in the order the stack meets them (_packets' ties), each level of
    nesting depth holds each slice's begin followed by its own end."""
    n = start.size
    i = np.arange(n)
    zero = end == start
    cls = np.concatenate([np.ones(n, np.int8), zero.astype(np.int8)])
    sub = np.concatenate([2 * i, np.where(zero, 2 * i + 1, -i)])
    order = np.lexsort((sub, cls, np.concatenate([start, end]), np.concatenate([track, track])))
    begin = order < n
    depth = np.cumsum(np.where(begin, 1, -1))
    level = np.where(begin, depth - 1, depth)
    by_level = order[np.argsort(level, kind="stable")]
    return bool((by_level[0::2] < n).all() and (by_level[0::2] + n == by_level[1::2]).all())


def _nest(events: chrome_trace.Events) -> None:
    """Table `nested`: every slice with its clamped end (`ce`) and its rank in (track, start, longer
    first, input) order, which is the order a nesting stack emits a track's slices in; and table
    `streams`: each slice track's first slice, which orders tracks whose events share a time."""
    db = events.db
    db.execute(
        "CREATE OR REPLACE TABLE nested (seq BIGINT, key INTEGER, ts BIGINT, ce BIGINT, rank BIGINT, "
        "name INTEGER, cat INTEGER, ann BLOB)"
    )
    db.execute(
        f"CREATE OR REPLACE TABLE streams AS SELECT key, min(seq) AS first FROM ev "
        f"WHERE kind = {chrome_trace.SLICE} GROUP BY key"
    )
    sorted_slices = (
        db.cursor()
        .sql(
            "SELECT seq, key, ts, ts + greatest(dur, 0) AS ce, name, cat, ann FROM ev "
            f"WHERE kind = {chrome_trace.SLICE} "
            "ORDER BY key, ts, ce DESC, seq"
        )
        .to_arrow_reader(CHUNK)
    )
    clamp, rank = _Clamp(), 0
    for batch in sorted_slices:
        n = batch.num_rows
        start, key = batch["ts"].to_numpy(), batch["key"].to_numpy()
        ce = clamp(start, batch["ce"].to_numpy(), key)
        rows = pa.table(
            {
                "seq": batch["seq"],
                "key": batch["key"],
                "ts": batch["ts"],
                "ce": ce,
                "rank": np.arange(rank, rank + n),
                "name": batch["name"],
                "cat": batch["cat"],
                "ann": batch["ann"],
            }
        )
        db.register("rows", rows)
        db.execute("INSERT INTO nested SELECT * FROM rows")
        db.unregister("rows")
        rank += n


def _packets(events: chrome_trace.Events) -> str:
    """Every track event in the order written: by time; ties by stream (each instant or counter its
    own, in input order, then one per slice track, in order of its first slice), then within a
    track slice by slice as a nesting stack emits them: at one time ends before begins and inner
    ends first; a zero-length slice ends right after it begins. The ties are one integer, as
    (stream * 2 + class) * span + sub, which DuckDB sorts faster than four keys (0.5 s, not 0.8 s,
    for 2 M packets); it stays inside 64 bits below about 10^8 events."""
    n, rows = events.counts["slices"], events.rows
    span = 3 * n + 2
    track = f"2 * ({rows} + first) * {span} + {n}"  # a slice track's stream, class 0
    return f"""
SELECT ts, type, key, name, cat, value, ann FROM (
    SELECT ts, CASE kind WHEN {chrome_trace.INSTANT} THEN {INSTANT} ELSE {COUNTER} END AS type, key, name, cat,
           value, ann, 2 * seq * {span} + {n} AS tie
    FROM ev WHERE kind <> {chrome_trace.SLICE}
    UNION ALL
    SELECT ts, {BEGIN}, key, name, cat, 0.0, ann, {track} + {span} + 2 * rank FROM nested JOIN streams USING (key)
    UNION ALL
    SELECT ce, {END}, key, -1, -1, 0.0, NULL,
           CASE WHEN ce = ts THEN {track} + {span} + 2 * rank + 1 ELSE {track} - rank END
    FROM nested JOIN streams USING (key)
) ORDER BY ts, tie"""


class _Interning:
    """Name and category iids numbered by first use in the written order, each entry sent with
    the packet that uses it first (as a writer interning on the fly does), chunk after chunk."""

    def __init__(self, events: chrome_trace.Events):
        # one more than the table: index -1 (none) stays iid 0
        self.tables = [
            (INTERNED_CATEGORY, list(events.cats), np.zeros(len(events.cats) + 1, np.int64)),
            (INTERNED_NAME, list(events.names), np.zeros(len(events.names) + 1, np.int64)),
        ]
        self.used = [0, 0]

    def __call__(self, named: np.ndarray, cat: np.ndarray, name: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Array]:
        """Each row's category and name iid (0 where not `named`), and its interned_data field."""
        pos = np.flatnonzero(named)
        entries: dict[int, list[bytes]] = {}
        for t, ((tag, text, iids), ids) in enumerate(zip(self.tables, (cat, name))):
            at, ids = pos[ids[pos] >= 0], ids[pos][ids[pos] >= 0]
            new = iids[ids] == 0
            distinct, first = np.unique(ids[new], return_index=True)
            by_use = np.argsort(first)
            for i, f in zip(distinct[by_use].tolist(), at[new][first[by_use]].tolist()):
                self.used[t] += 1
                iids[i] = self.used[t]
                entries.setdefault(f, []).append(field(tag, IID + varint(self.used[t]) + field(NAME, text[i].encode())))
        cat_iid, name_iid = (np.where(named, iids[ids], 0) for (_, _, iids), ids in zip(self.tables, (cat, name)))
        lengths = np.zeros(named.size, np.int64)
        blobs = [field(INTERNED, b"".join(entries[p])) for p in sorted(entries)]
        lengths[sorted(entries)] = [len(b) for b in blobs]
        return cat_iid, name_iid, ragged(lengths, b"".join(blobs))


def _encode(batch: pa.RecordBatch, uuids: np.ndarray, interning: _Interning) -> pa.Array:
    """A chunk of _packets' rows, each length-delimited as a Trace's `packet` field."""
    kind = batch["type"].to_numpy().astype(np.int64)
    named = (kind == BEGIN) | (kind == INSTANT)
    counter = kind == COUNTER
    cat, name, interned = interning(named, batch["cat"].to_numpy(), batch["name"].to_numpy())
    annotations = pc.fill_null(batch["ann"].cast(pa.large_binary()), EMPTY)
    value = np.where(counter, batch["value"].to_numpy(), 0.0).astype("<f8").view(np.uint8).reshape(-1, 8)
    body = join(
        varints(cat, CATEGORY_IID, cat > 0),
        annotations,
        varints(kind, TYPE),
        varints(name, NAME_IID, named),
        varints(uuids[batch["key"].to_numpy()], TRACK_UUID),
        fixed(DOUBLE_COUNTER, value, counter),
    )
    payload = join(
        varints(batch["ts"].to_numpy(), TIMESTAMP),
        SEQUENCE + varint(SEQ_ID),
        length_prefixed(TRACK_EVENT, body),
        interned,
        NEEDS_STATE,
    )
    return length_prefixed(PACKET, payload)


def _write_column(handle, packets: pa.Array, first: bool) -> None:
    """The column's bytes as they lie in its buffer; the sequence's first packet clears its state
    (the same flag byte, another value: its last)."""
    offsets = np.frombuffer(packets.buffers()[1], np.int64)[packets.offset : packets.offset + len(packets) + 1]
    data = memoryview(packets.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
    if first and len(packets):
        cut = int(offsets[1] - offsets[0]) - 1
        handle.write(data[:cut])
        handle.write(CLEARED)
        data = data[cut + 1 :]
    handle.write(data)


def write(events: chrome_trace.Events, out: str | Path) -> dict:
    """Write `events` (chrome_trace.read) to `out` (.pftrace); returns counts of what was written.
    Where DuckDB's memory share is too small to sort them, again with twice the share (Events.grow)."""
    # the file appears whole or not at all (replacing), and packets stream into it as they are made
    with replacing(out) as tmp:
        events.sort_memory()
        while True:
            try:
                _write(events, tmp)
                return events.counts
            except Exception as e:  # noqa: BLE001 - re-raised below unless it is DuckDB's memory
                if not chrome_trace.out_of_memory(e):
                    raise
                events.grow(f"{out}: sorting {events.rows} trace events")


def _write(events: chrome_trace.Events, path: Path) -> None:
    with open(path, "wb", buffering=1 << 20) as handle:
        uuids = _Tracks(handle).of_keys(events)
        _nest(events)
        interning, first = _Interning(events), True
        for batch in events.db.cursor().sql(_packets(events)).to_arrow_reader(CHUNK):
            _write_column(handle, _encode(batch, uuids, interning), first)
            first = first and not batch.num_rows


def chrome_to_pftrace(trace, out: str | Path) -> dict:
    """Convert a Chrome trace (a dict, or a JSON file's path) to `out` (.pftrace)."""
    with chrome_trace.read(trace, spill_dir=Path(out).parent) as events:
        return write(events, out)
