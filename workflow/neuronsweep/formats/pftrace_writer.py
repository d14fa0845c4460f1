"""Write Chrome trace JSON (torch.profiler's export) as a Perfetto .pftrace.

Why not hand the JSON to the Perfetto UI? The Neuron tools emit .pftrace, and one format downstream
means one reader (formats/pftrace_reader.py) and one set of SQL. Complete events ('X') and B/E pairs
become BEGIN/END slices on one track per (pid, tid); a slice that does not nest there goes whole
to a track beside it (no duration is cut); instants ('i') become instant events; counters ('C')
counter tracks; flow events flow ids on the slices they bind to; args debug annotations. Names and
categories are interned.

A million-slice trace is normal, and memory must not grow with it: the events wait in a DuckDB
table on disk (chrome_trace.py), one sort there puts each track's events in the order a nesting
stack meets them (a second, before it, binds flow events to slices where there are any), and the
sort streams out in chunks that are encoded with numpy and pyarrow (protowire.py) straight into
the file, track by track. The file is in time order per track, not across tracks: trace_processor
sorts every event by time (stably, so a track's order among equal times stays), and
pftrace_reader pairs a track's BEGINs and ENDs in file order; a global time order cost a second
sort of twice the rows. The bytes are those the protobuf classes would write (tests serialize the
parsed file again and compare); the classes themselves cost about 3 us a packet, and importing
them 50 ms (1.5% of a million-slice conversion), so none is used here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neuronsweep.atomic import replacing
from neuronsweep.errors import UserError
from neuronsweep.formats import chrome_trace
from neuronsweep.formats.protowire import (
    EMPTY,
    annotation,
    field,
    fixed_part,
    join,
    ragged,
    rows_of,
    varint,
    varint_part,
)

BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4  # TrackEvent.Type (tests check them against the protobuf classes)
SEQ_ID = 0x5EEB  # trusted_packet_sequence_id: one sequence for the whole file
CHUNK = 1 << 13  # rows streamed out of the sort and encoded at a time (more cost page faults, not less CPU)

# Field tags of the messages written (perfetto_trace.proto), in field-number order, which is the
# order the protobuf classes serialize them in.
PACKET, TIMESTAMP, SEQUENCE, TRACK_EVENT, INTERNED = b"\x0a", b"\x40", b"\x50", b"\x5a", b"\x62"
CATEGORY_IID, TYPE, NAME_IID, TRACK_UUID, DOUBLE_COUNTER = b"\x18", b"\x48", b"\x50", b"\x58", b"\xe1\x02"
INTERNED_CATEGORY, INTERNED_NAME, IID, NAME = b"\x0a", b"\x12", b"\x08", b"\x12"
FLOW_ID = b"\xf9\x02"  # TrackEvent.flow_ids (47, fixed64)
NEEDS_STATE = b"\x68\x02"  # sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE, after the first packet
CLEARED = b"\x03"  # SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE: the first packet's flags
# TracePacket.track_descriptor and the TrackDescriptor fields written, in field-number order
DESCRIPTOR, UUID, TRACK_NAME, PROCESS, THREAD, PARENT, COUNTER_TRACK = (
    b"\xe2\x03",
    b"\x08",
    b"\x12",
    b"\x1a",
    b"\x22",
    b"\x28",
    b"\x42",
)
PID, TID, THREAD_NAME, PROCESS_NAME, UNIT_NAME = b"\x08", b"\x10", b"\x2a", b"\x32", b"\x32"


# ------------------------------------------------------------------------------------ the trace

NEVER = 2**63 - 1  # the end of a slice that does not end (a B never closed)
UNBOUND = "flow events with no slice to bind to"
SYNTHETIC_ID = 1 << 30  # ids given to pids and tids Perfetto cannot hold count up from here
PID_RANGE, TID_RANGE = (-(2**31), 2**31), (-(2**63), 2**63)  # ProcessDescriptor.pid int32; ThreadDescriptor.tid int64


def _valid(value: object, bounds: tuple[int, int]) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value < bounds[1]


def _remap(values: list, bounds: tuple[int, int]) -> dict:
    """An id Perfetto can hold for each value that is not one (text, past its integer range, a
    float, null), counting up from SYNTHETIC_ID past the ids the trace uses itself."""
    used = {v for v in values if _valid(v, bounds)}
    out, nxt = {}, SYNTHETIC_ID
    for v in values:
        if not _valid(v, bounds) and v not in out:
            while nxt in used:
                nxt += 1
            out[v], nxt = nxt, nxt + 1
    return out


class _Tracks:
    """Track descriptors, written as they are made: every key known after reading, then each lane
    beside a thread as the nesting finds it, before the first packet on it. Encoded here as the
    protobuf classes would (tests compare): importing them cost 1.5% of a million-slice
    conversion."""

    def __init__(self, handle: BinaryIO, events: chrome_trace.Events) -> None:
        self.handle, self.next_uuid = handle, 1
        threads = [k for k in events.keys if k[0] == "thread"]
        self.pids = _remap([k[1] for k in threads] + [k[1] for k in events.keys if k[0] == "process"], PID_RANGE)
        self.tids = _remap([k[2] for k in threads], TID_RANGE)
        self.processes: dict = {}
        self.uuids: list[int] = []
        self.names: list[str | None] = []
        self.kept: list[bytes] = []  # per key: the debug annotations keeping a pid or tid Perfetto cannot hold

    def write(self, body: bytes) -> None:
        self.handle.write(PACKET + varint(len(body)) + body)

    def add(
        self,
        name: str,
        pid: int | None = None,
        tid: int | None = None,
        counter_unit: str | None = None,
        parent: int | None = None,
    ) -> int:
        uuid, self.next_uuid = self.next_uuid, self.next_uuid + 1
        body = UUID + varint(uuid)
        if pid is not None and tid is not None:  # int32 and int64: a negative one as ten bytes
            ids = PID + varint(pid & 0xFFFFFFFFFFFFFFFF) + TID + varint(tid & 0xFFFFFFFFFFFFFFFF)
            body += field(THREAD, ids + field(THREAD_NAME, name.encode()))
        elif pid is not None:
            body += field(PROCESS, PID + varint(pid & 0xFFFFFFFFFFFFFFFF) + field(PROCESS_NAME, name.encode()))
        else:
            body += field(TRACK_NAME, name.encode())
        if parent is not None:
            body += PARENT + varint(parent)
        if counter_unit is not None:
            body += field(COUNTER_TRACK, field(UNIT_NAME, counter_unit.encode()))
        self.write(field(DESCRIPTOR, body))
        return uuid

    def _process(self, events: chrome_trace.Events, raw: Hashable) -> int:
        if raw not in self.processes:
            name = events.proc_names.get(raw) or (raw if isinstance(raw, str) else f"process {raw}")
            self.processes[raw] = self.add(name, pid=self.pids.get(raw, raw))
        return self.processes[raw]

    def describe(self, events: chrome_trace.Events) -> tuple[np.ndarray, pa.Array | None]:
        """Describe the keys not described yet, in the keys' order (a thread's process first); returns
        a uuid per key and, where any track keeps an original pid or tid, its annotations per key."""
        pids, tids = self.pids, self.tids
        for key in list(events.keys)[len(self.uuids) :]:
            extra, name = b"", None
            if key[0] == "counter":
                _, _, counter, series = key
                uuid = self.add(f"{counter}.{series}", counter_unit="")
            elif key[0] == "lane":  # slices of a thread that do not nest in it: a track beside it
                _, base, lane = key
                name = f"{self.names[base]} (overlapping {lane})"
                uuid, extra = self.add(name, parent=self.uuids[base]), self.kept[base]
            elif key[0] == "global":
                uuid = self.add("global instants")
            elif key[0] == "process":
                uuid = self._process(events, key[1])
                extra = annotation("chrome pid", _text(key[1])) if key[1] in pids else b""
            else:
                _, pid, tid = key
                name = events.thread_names.get((pid, tid)) or f"{pid}/{tid}"
                uuid = self.add(name, pid=pids.get(pid, pid), tid=tids.get(tid, tid), parent=self._process(events, pid))
                extra = (annotation("chrome pid", _text(pid)) if pid in pids else b"") + (
                    annotation("chrome tid", _text(tid)) if tid in tids else b""
                )
            self.uuids.append(uuid)
            self.names.append(name)
            self.kept.append(extra)
        kept = pa.array(self.kept, pa.large_binary()) if any(self.kept) else None
        return np.array(self.uuids, np.uint64), kept


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class _Lanes:
    """Slices in (track, start, longer first) order, a chunk at a time, each given a lane of its
    track where it nests (0: the track itself; a slice that does not nest in any lane opens the next
    one), so no duration is cut. Flow events sorted among them are bound as the Trace Event Format
    says: 's', 't' and 'f' with bp "e" to the innermost slice open at their time, other 'f' to the
    next slice that begins. The lanes' stacks of open (end, seq, start) are carried from chunk to
    chunk. Slices that already nest (a profiler's usual output) are found, and the flow events
    among them bound, with numpy (_bind); otherwise the stacks run per slice, in Python."""

    SLICE, NEXT, ENCLOSING = 1, 0, 2  # classes of the rows (flow events binding to the next slice sort first)

    def __init__(self) -> None:
        self.stacks: list[list[tuple]] = [[]]
        self.track = None
        self.pending: list[tuple[int, int]] = []  # (seq, ts) of flow events waiting for the next slice
        self.bound: list[tuple[int, int]] = []  # (flow event seq, slice seq), bound by _loop
        self.bound_parts: list[np.ndarray] = []  # (n, 2) arrays of the same, bound by _bind
        self.unbound: list[tuple[int, int]] = []  # (flow event seq, ts)

    def __call__(
        self, cls: np.ndarray, seq: np.ndarray, start: np.ndarray, end: np.ndarray, track: np.ndarray
    ) -> np.ndarray:
        """Each row's lane (slices; -1 for flow events)."""
        lane, n, j = np.full(start.size, -1, np.int64), start.size, 0
        while j < n and track[j] == self.track:  # the rows the carried stacks (as they grow) still reach
            open_ = [s[0][0] for s in self.stacks if s]
            if not open_ or start[j] >= max(open_):
                break
            beyond = (track[j:] != self.track) | (start[j:] >= max(open_))
            k = j + (int(np.argmax(beyond)) if beyond.any() else n - j)
            self._loop(cls, seq, start, end, track, lane, j, k)
            j = k
        if j == n:
            return lane
        sl = np.flatnonzero(cls[j:] == self.SLICE) + j
        if not self.pending and sl.size and _nested(start[sl], end[sl], track[sl]):
            lane[sl] = 0
            if sl.size < n - j:
                self._bind(cls, seq, start, end, track, sl, np.flatnonzero(cls[j:] != self.SLICE) + j)
            last = sl[-1]
            on = sl[(track[sl] == track[last]) & (end[sl] > start[last])]
            on = on[on < last]
            self.stacks = [
                [
                    *zip(end[on].tolist(), seq[on].tolist(), start[on].tolist()),
                    (int(end[last]), int(seq[last]), int(start[last])),
                ]
            ]
            self.track = track[last]
            if track[n - 1] != self.track:  # the chunk ends on a track with flow events only
                self.stacks, self.track = [[]], track[n - 1]
        else:
            self._loop(cls, seq, start, end, track, lane, j, n)
        return lane

    def _bind(
        self,
        cls: np.ndarray,
        seq: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        track: np.ndarray,
        sl: np.ndarray,
        fl: np.ndarray,
    ) -> None:
        """Flow events `fl` among slices `sl` that nest (rows of one chunk, none reaching the carried
        stacks), bound as _loop binds them, with numpy: one enclosing its time walks up from the last
        slice before it through the parents; one binding to the next slice takes the next row's."""
        st, en, tr = start[sl], end[sl], track[sl]
        m, level = sl.size, _levels(st, en, tr)
        span = int(level.max()) + 2
        comp = np.sort((tr.astype(np.int64) * span + level) * m + np.arange(m))
        query = (tr.astype(np.int64) * span + level - 1) * m + np.arange(m)
        at = np.searchsorted(comp, query) - 1
        found = (at >= 0) & (comp[np.maximum(at, 0)] // m == query // m) & (level > 0)
        parent = np.where(found, comp[np.maximum(at, 0)] % m, -1)
        before = np.searchsorted(sl, fl) - 1  # the last slice before each flow event (index into sl)
        t, b = track[fl], start[fl]
        enclosing = cls[fl] == self.ENCLOSING
        to = np.full(fl.size, -1, np.int64)
        cand = before.copy()
        walk = enclosing & (cand >= 0) & (tr[np.maximum(cand, 0)] == t)
        while walk.any():
            hit = walk & (en[np.maximum(cand, 0)] > b)
            to[hit] = cand[hit]
            walk &= ~hit
            cand[walk] = parent[cand[walk]]
            walk &= cand >= 0
        nxt = before + 1
        follows = ~enclosing & (nxt < m) & (tr[np.minimum(nxt, m - 1)] == t)
        to[follows] = nxt[follows]
        waits = ~enclosing & ~follows & (t == track[-1])  # the chunk's last track goes on: the next slice may come
        ok = to >= 0
        self.bound_parts.append(np.stack([seq[fl[ok]], seq[sl[to[ok]]]], 1).astype(np.int64))
        lost = ~ok & ~waits
        self.unbound += list(zip(seq[fl[lost]].tolist(), b[lost].tolist()))
        self.pending = list(zip(seq[fl[waits]].tolist(), b[waits].tolist()))

    def _loop(
        self,
        cls: np.ndarray,
        seq: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        track: np.ndarray,
        lane_out: np.ndarray,
        lo: int,
        hi: int,
    ) -> None:
        stacks, current, pending = self.stacks, self.track, self.pending
        for i, (c, s, b, f, trk) in enumerate(
            zip(
                cls[lo:hi].tolist(),
                seq[lo:hi].tolist(),
                start[lo:hi].tolist(),
                end[lo:hi].tolist(),
                track[lo:hi].tolist(),
            ),
            start=lo,
        ):
            if trk != current:
                self.unbound += pending
                pending, stacks, current = [], [[]], trk
            if c == self.SLICE:
                self.bound += [(p, s) for p, _ in pending]
                pending = []
                lane_out[i] = _place(stacks, (f, s, b))
            elif c == self.NEXT:
                pending.append((s, b))
            else:
                innermost = None
                for stack in stacks:
                    while stack and stack[-1][0] <= b:
                        stack.pop()
                    if stack and (innermost is None or stack[-1][2] > innermost[2]):
                        innermost = stack[-1]
                if innermost is None:
                    self.unbound.append((s, b))
                else:
                    self.bound.append((s, innermost[1]))
        self.stacks, self.track, self.pending = stacks, current, pending

    def finish(self) -> None:
        self.unbound += self.pending
        self.pending = []

    def pairs(self) -> np.ndarray:
        """Every (flow event seq, slice seq) bound, as one (n, 2) array (16 bytes a flow event)."""
        return np.concatenate([np.array(self.bound, np.int64).reshape(-1, 2), *self.bound_parts])


def _place(stacks: list[list[tuple]], entry: tuple) -> int:
    """Push `entry` (end, seq, start) on the first lane whose open slices (ended ones popped at its
    start) it nests in, a new lane if none; returns the lane."""
    end, _, start = entry
    for k, stack in enumerate(stacks):
        while stack and stack[-1][0] <= start:
            stack.pop()
        if not stack or end <= stack[-1][0]:
            stack.append(entry)
            return k
    stacks.append([entry])
    return len(stacks) - 1


def _lexsort(keys: tuple) -> np.ndarray:
    """np.lexsort (the last key first, stable), as one stable argsort of the keys packed into one
    integer where their ranges fit in 63 bits (a chunk's usually do): np.lexsort's pass per key
    cost 1.7x as much on a chunk's begins and ends. Small packed values (depths) sort by radix (4x)."""
    lows = [int(k.min()) if k.size else 0 for k in keys]
    bits = [(int(k.max()) - low).bit_length() if k.size else 0 for k, low in zip(keys, lows)]
    if sum(bits) > 63:
        return np.lexsort(keys)
    packed, shift = np.zeros(keys[0].size, np.int64), 0
    for k, low, b in zip(keys, lows, bits):
        packed |= (k.astype(np.int64) - low) << shift
        shift += b
    small = np.int16 if shift < 16 else np.int32 if shift < 32 else np.int64
    return np.argsort(packed.astype(small, copy=False), kind="stable")


def _order(start: np.ndarray, end: np.ndarray, track: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Begins and ends of slices in (track, start, longer first) order, in the order a nesting stack
    meets them (_track_order's ties), and the depth after each; row i < n is slice i's begin."""
    n = start.size
    i = np.arange(n)
    zero = end == start
    cls = np.concatenate([np.ones(n, np.int8), zero.astype(np.int8)])
    sub = np.concatenate([2 * i, np.where(zero, 2 * i + 1, -i)])
    order = _lexsort((sub, cls, np.concatenate([start, end]), np.concatenate([track, track])))
    return order, np.cumsum(np.where(order < n, 1, -1))


def _levels(start: np.ndarray, end: np.ndarray, track: np.ndarray) -> np.ndarray:
    """Each slice's nesting depth among these (0: none of them encloses it), for slices that nest."""
    order, depth = _order(start, end, track)
    level = np.empty(start.size, np.int64)
    begin = order < start.size
    level[order[begin]] = depth[begin] - 1
    return level


def _nested(start: np.ndarray, end: np.ndarray, track: np.ndarray) -> bool:
    """Whether slices in (track, start, longer first) order nest already, so one stack per track
    would take them all: with begins and ends in the order the stack meets them, each level of
    nesting depth holds each slice's begin followed by its own end."""
    n = start.size
    order, depth = _order(start, end, track)
    begin = order < n
    level = np.where(begin, depth - 1, depth)
    by_level = order[_lexsort((level,))]
    return bool((by_level[0::2] < n).all() and (by_level[0::2] + n == by_level[1::2]).all())


def _sorted(events: chrome_trace.Events, kinds: tuple, keys_only: bool = False) -> pa.RecordBatchReader:
    """Rows of these kinds in (track, start, class, longer first, input) order, streamed in chunks:
    the order a nesting stack meets a track's slices in. Classes (_Lanes): instants, counters and
    flow events binding to the next slice first, then slices, then flow events binding to the slice
    around them."""
    slice_ = chrome_trace.SLICE
    ce = f"CASE WHEN kind = {slice_} AND dur < 0 THEN {NEVER} WHEN kind = {slice_} THEN ts + dur ELSE ts END"
    cls = (
        f"CASE kind WHEN {chrome_trace.SLICE} THEN {_Lanes.SLICE} WHEN {chrome_trace.FLOW_IN_NEXT} THEN {_Lanes.NEXT} "
        f"WHEN {chrome_trace.INSTANT} THEN {_Lanes.NEXT} WHEN {chrome_trace.COUNTER} THEN {_Lanes.NEXT} "
        f"ELSE {_Lanes.ENCLOSING} END"
    )
    columns = "seq, key, ts, ce" if keys_only else "seq, kind, key, ts, ce, name, cat, value, ann"
    source = f"SELECT {cls} AS cls, *, {ce} AS ce FROM ev"
    query = (
        f"SELECT cls, {columns} FROM ({source}) WHERE kind IN ({', '.join(map(str, kinds))}) "
        "ORDER BY key, ts, cls, ce DESC, seq"
    )
    return events.db.cursor().sql(query).to_arrow_reader(CHUNK)


def _bind_flows(events: chrome_trace.Events) -> None:
    """Table `flows` (seq, flows): each slice's flow ids, found by a pass of the nesting over slices
    and flow events (_Lanes binds them); its lanes are found again by the pass that writes."""
    lanes = _Lanes()
    for batch in _sorted(events, (chrome_trace.SLICE, *chrome_trace.FLOWS), keys_only=True):
        lanes(*(batch[c].to_numpy() for c in ("cls", "seq", "ts", "ce", "key")))
    lanes.finish()
    _flows(events, lanes)


def _flows(events: chrome_trace.Events, lanes: _Lanes) -> None:
    """Table `flows` (seq, flows): the flow ids of each slice a flow event was bound to. A flow is a
    chain of events sharing (cat, id), from an 's' through 't's to its 'f'; an id used again after
    that starts another flow."""
    db = events.db
    db.execute("CREATE OR REPLACE TABLE flows (seq BIGINT, flows UBIGINT[])")
    if lanes.unbound:
        ts = lanes.unbound[0][1]
        events.problem(UNBOUND, f"at ts {chrome_trace.us_text(ts)}", len(lanes.unbound))
    pairs = lanes.pairs()
    if not pairs.size:
        events.counts["flows"] = 0
        return
    fseq, slice_seq = pairs[:, 0], pairs[:, 1]
    db.register("bound", pa.table({"fseq": fseq, "slice": slice_seq}))
    flow_kinds = ", ".join(map(str, chrome_trace.FLOWS))
    events.execute(
        f"{events.source}: binding flows",
        f"""CREATE OR REPLACE TABLE flows AS
        WITH f AS (
            SELECT seq AS fseq, fkey, ts,
                   sum(CASE WHEN kind = {chrome_trace.FLOW_OUT} THEN 1 ELSE 0 END)
                       OVER (PARTITION BY fkey ORDER BY ts, seq ROWS UNBOUNDED PRECEDING) AS chain
            FROM ev WHERE kind IN ({flow_kinds})),
        u AS (SELECT fseq, CAST(dense_rank() OVER (ORDER BY fkey, chain) AS UBIGINT) AS uuid FROM f)
        SELECT slice AS seq, list(DISTINCT uuid ORDER BY uuid) AS flows
        FROM bound JOIN u USING (fseq) GROUP BY slice""",
    )
    db.unregister("bound")
    events.counts["flows"] = db.execute(
        "WITH ids AS (SELECT unnest(flows) AS uuid FROM flows) "
        "SELECT count(*) FROM (SELECT uuid FROM ids GROUP BY uuid HAVING count(*) >= 2)"
    ).fetchall()[0][0]


class _FlowIds:
    """Table `flows` in memory (one row per slice a flow event binds to: far fewer than the events),
    each chunk's flow ids looked up by seq; a join in the sort carried them at a memory cost growing
    with every event's args."""

    def __init__(self, events: chrome_trace.Events) -> None:
        table = (
            events.db.sql("SELECT seq, flows FROM flows ORDER BY seq").to_arrow_reader(CHUNK).read_all()
            if events.counts["flows"]
            else None
        )
        self.seq = np.zeros(0, np.int64) if table is None else table["seq"].to_numpy()
        self.ids = None if table is None else _array(table["flows"])

    def of(self, seq: np.ndarray, none: np.ndarray) -> pa.Array:
        """Each row's flow ids (null where it has none, or where `none`)."""
        if self.ids is None:
            return pa.nulls(seq.size, pa.list_(pa.uint64()))
        at = np.minimum(np.searchsorted(self.seq, seq), self.seq.size - 1)
        miss = none | (self.seq[at] != seq)
        return pc.take(self.ids, pa.array(at, mask=miss))


class _Ends:
    """The ENDs of slices whose BEGIN is written and whose END cannot be yet: a later chunk may still
    begin a slice on their track before they end."""

    def __init__(self) -> None:
        self.key = self.base = self.end = self.rank = self.start = np.zeros(0, np.int64)

    def add(self, key: np.ndarray, base: np.ndarray, end: np.ndarray, rank: np.ndarray, start: np.ndarray) -> None:
        self.key, self.base, self.end, self.rank, self.start = (
            np.concatenate([a, b.astype(np.int64)])
            for a, b in zip((self.key, self.base, self.end, self.rank, self.start), (key, base, end, rank, start))
        )

    def take(self, until: np.ndarray) -> tuple[np.ndarray, ...]:
        """The ENDs before `until` (per END), removed; slices that never end stay."""
        now = (self.end < until) & (self.end < NEVER)
        out = tuple(a[now] for a in (self.key, self.end, self.rank, self.start))
        self.key, self.base, self.end, self.rank, self.start = (
            a[~now] for a in (self.key, self.base, self.end, self.rank, self.start)
        )
        return out


def _track_order(
    events: chrome_trace.Events,
    batch: pa.RecordBatch,
    lanes: _Lanes,
    ends: _Ends,
    flow_ids: _FlowIds,
    rank: int,
    goes_on: tuple[int, int] | None,
) -> tuple[pa.RecordBatch, int]:
    """One chunk of the sorted rows as packets in the order written: per track (a thread, or a lane
    beside it), by time; at one time instants and counters first, then ends (inner first), then
    begins (outer first), a zero-length slice's end right after its begin. The file is not in time
    order across tracks: trace_processor sorts every event by time (stably, so this order stays
    among equal times on a track), and pftrace_reader pairs a track's events in file order.
    Returns the packets' columns (as _encode takes them) and the next rank."""
    kind, key = batch["kind"].to_numpy(), batch["key"].to_numpy().astype(np.int64)
    ts, ce = batch["ts"].to_numpy(), batch["ce"].to_numpy()
    rows = np.flatnonzero(kind == chrome_trace.SLICE)
    seq = batch["seq"].to_numpy()
    lane = lanes(np.full(rows.size, _Lanes.SLICE), seq[rows], ts[rows], ce[rows], key[rows])
    out = key.copy()
    if (lane > 0).any():
        out[rows] = [
            events._ordinal(events.keys, ("lane", k, ln)) if ln else k
            for k, ln in zip(key[rows].tolist(), lane.tolist())
        ]
        events.counts["overlapping"] = events.counts.get("overlapping", 0) + int((lane > 0).sum())
    rank_of = rank + np.arange(rows.size)
    ends.add(out[rows], key[rows], ce[rows], rank_of, ts[rows])
    # an END waits while the chunk's last track goes on: (key, ts) of its next row, None at the end
    until = np.full(ends.end.size, NEVER, np.int64)
    if goes_on is not None:
        until[ends.base == goes_on[0]] = goes_on[1]
    e_key, e_end, e_rank, e_start = ends.take(until)
    points = np.flatnonzero(kind != chrome_trace.SLICE)
    zero = e_end == e_start
    track = np.concatenate([out[rows], e_key, out[points]])
    time = np.concatenate([ts[rows], e_end, ts[points]])
    cls = np.concatenate([np.full(rows.size, 2), np.where(zero, 2, 1), np.zeros(points.size, np.int64)])
    sub = np.concatenate([2 * rank_of, np.where(zero, 2 * e_rank + 1, -e_rank), seq[points]])
    src = np.concatenate([rows, np.full(e_key.size, -1), points])  # the chunk's row, -1 for an END
    order = _lexsort((sub, cls, time, track))
    src, is_end = src[order], order >= rows.size
    is_end[order >= rows.size + e_key.size] = False
    at, pick = np.maximum(src, 0), pa.array(src, mask=src < 0)
    typ = np.where(
        is_end,
        END,
        np.select([kind[at] == chrome_trace.SLICE, kind[at] == chrome_trace.INSTANT], [BEGIN, INSTANT], COUNTER),
    )
    columns = {
        "ts": time[order],
        "type": typ,
        "key": track[order],
        "name": np.where(is_end, -1, batch["name"].to_numpy()[at]),
        "cat": np.where(is_end, -1, batch["cat"].to_numpy()[at]),
        "value": np.where(is_end, 0.0, batch["value"].to_numpy()[at]),
        "ann": _array(pc.take(batch["ann"], pick)),
        "flows": flow_ids.of(seq[at], src < 0),
    }
    return pa.record_batch(columns), rank + rows.size


class _Interning:
    """Name and category iids numbered by first use in the written order, each entry sent with
    the packet that uses it first (as a writer interning on the fly does), chunk after chunk."""

    def __init__(self, events: chrome_trace.Events) -> None:
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


def _flow_ids(flows: pa.Array) -> pa.Array:
    """Each row's TrackEvent.flow_ids (repeated fixed64, one field per id), from a list column."""
    flows = _array(flows)
    counts = pc.fill_null(pc.list_value_length(flows), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    ids = pc.list_flatten(flows).to_numpy(zero_copy_only=False).astype("<u8")
    body = np.concatenate(
        [np.broadcast_to(np.frombuffer(FLOW_ID, np.uint8), (ids.size, 2)), ids.view(np.uint8).reshape(-1, 8)], 1
    )
    return ragged(counts * body.shape[1], body.tobytes())


def _encode(batch: pa.RecordBatch, uuids: np.ndarray, kept: pa.Array | None, interning: _Interning) -> pa.Array:
    """A chunk of _track_order's rows, each length-delimited as a Trace's `packet` field. The fields of
    fixed size either side of the annotations are made in two gathers (protowire.rows_of) and the
    lengths of the TrackEvent and the packet from the parts' lengths, so each byte is copied into
    a row once and the row once more into the packet (the join: its cost grows with its parts, so
    where no packet of the chunk has flows or interned data the last field joins the second gather)."""
    kind = batch["type"].to_numpy().astype(np.int64)
    named = (kind == BEGIN) | (kind == INSTANT)
    counter = kind == COUNTER
    cat, name, interned = interning(named, batch["cat"].to_numpy(), batch["name"].to_numpy())
    annotations = pc.fill_null(batch["ann"].cast(pa.large_binary()), EMPTY)
    key = batch["key"].to_numpy()
    if kept is not None:  # the original pid and tid of tracks whose ids Perfetto could not hold
        annotations = join(annotations, pc.if_else(pa.array(named), pc.take(kept, pa.array(key)), EMPTY))
    flows = _flow_ids(batch["flows"]) if batch["flows"].null_count < batch.num_rows else None
    after = [  # the TrackEvent's fields after its annotations, in field-number order
        varint_part(kind, TYPE),
        varint_part(name, NAME_IID, named),
        varint_part(uuids[key], TRACK_UUID),
    ]
    if counter.any():  # ten bytes a row, kept by few rows: a column of the gather only where one is
        value = np.where(counter, batch["value"].to_numpy(), 0.0).astype("<f8").view(np.uint8).reshape(-1, 8)
        after.append(fixed_part(DOUBLE_COUNTER, value, counter))
    category = varint_part(cat, CATEGORY_IID, cat > 0)
    track_event = category[1] + _lengths(annotations) + sum(n for _, n in after) + _lengths(flows)
    header = varint_part(track_event, TRACK_EVENT)
    stamp = varint_part(batch["ts"].to_numpy(), TIMESTAMP)
    sequence, none = SEQUENCE + varint(SEQ_ID), np.zeros((kind.size, 0), np.uint8)
    interned_length = _lengths(interned)
    packet = stamp[1] + len(sequence) + header[1] + track_event + interned_length + len(NEEDS_STATE)
    before = rows_of(varint_part(packet, PACKET), stamp, fixed_part(sequence, none), header, category)
    if flows is None and not np.any(interned_length):  # the usual chunk: the last field in the same gather
        return join(before, annotations, rows_of(*after, fixed_part(NEEDS_STATE, none)))
    return join(before, annotations, rows_of(*after), *([flows] if flows is not None else []), interned, NEEDS_STATE)


def _lengths(column: pa.Array | None) -> np.ndarray | int:
    return 0 if column is None else pc.binary_length(column).to_numpy().astype(np.int64)


def _write_column(handle: BinaryIO, packets: pa.Array, first: bool) -> None:
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
    """Write `events` (chrome_trace.read) to `out` (.pftrace); returns counts of what was written and
    what was not (`not_converted`: reason -> count and first example). Where DuckDB's memory share is
    too small to sort them, again with twice the share (Events.grow)."""
    if not events.rows and events.problems:  # events there were, none of them convertible
        why = "; ".join(f"{n} {reason}, first {first}" for reason, (n, first) in events.problems.items())
        raise UserError(f"{events.source}: every event was skipped ({why}); capture the trace again.")
    if not events.rows:
        raise UserError(
            f"{events.source}: no events to convert (its traceEvents holds no timed event); capture the trace again."
        )
    # the file appears whole or not at all (replacing), and packets stream into it as they are made
    with replacing(out) as tmp:
        events.sort_memory()
        while True:
            try:
                _write(events, tmp)
                break
            except Exception as e:  # noqa: BLE001 - re-raised below unless it is DuckDB's memory
                if not chrome_trace.out_of_memory(e):
                    raise
                events.grow(f"{out}: sorting {events.rows} trace events")
    counts: dict[str, object] = {
        k: v for k, v in events.counts.items() if k in ("slices", "instants", "counters", "flows", "skipped") or v
    }
    if counts.get("overlapping"):
        print(
            f"{events.source}: {counts['overlapping']} slices do not nest in their thread; kept whole, on "
            "tracks beside it named '(overlapping N)'",
            file=sys.stderr,
        )
    if events.problems:
        counts["not_converted"] = {
            reason: {"count": n, "first": first} for reason, (n, first) in events.problems.items()
        }
    return counts


def _write(events: chrome_trace.Events, path: Path) -> None:
    """One sort of the events (two where flows must be bound first), each chunk nested, ordered per
    track and encoded straight into the file."""
    events.counts.pop("overlapping", None)  # counted again on a second try
    events.problems.pop(UNBOUND, None)
    with open(path, "wb", buffering=1 << 20) as handle:
        events.counts["flows"] = 0
        if events.counts["flow_events"]:
            _bind_flows(events)
        tracks, interning, first = _Tracks(handle, events), _Interning(events), True
        lanes, ends, flow_ids, rank = _Lanes(), _Ends(), _FlowIds(events), 0
        stream = iter(_sorted(events, (chrome_trace.SLICE, chrome_trace.INSTANT, chrome_trace.COUNTER)))
        held = None  # the rows of one (track, time) a chunk ended in: written with the rest of that time
        for batch in stream:
            batch = pa.Table.from_batches([batch])
            batch = pa.concat_tables([held, batch]) if held is not None and held.num_rows else batch
            key, ts = batch["key"].to_numpy(), batch["ts"].to_numpy()
            differs = np.flatnonzero((key != key[-1]) | (ts != ts[-1]))
            cut = int(differs[-1]) + 1 if differs.size else 0
            held = batch.slice(cut)
            if cut:
                packets, rank = _track_order(
                    events, batch.slice(0, cut), lanes, ends, flow_ids, rank, (key[-1], ts[-1])
                )
                first = _written(handle, events, packets, tracks, interning, first)
        if held is not None:
            packets, rank = _track_order(events, held, lanes, ends, flow_ids, rank, None)
            _written(handle, events, packets, tracks, interning, first)


def _array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _written(
    handle: BinaryIO,
    events: chrome_trace.Events,
    packets: pa.RecordBatch,
    tracks: _Tracks,
    interning: _Interning,
    first: bool,
) -> bool:
    """Encode and write a chunk's packets (the lanes it opened described first); whether the next
    packet is still the sequence's first."""
    uuids, kept = tracks.describe(events)
    _write_column(handle, _encode(packets, uuids, kept, interning), first)
    return first and not packets.num_rows


def chrome_to_pftrace(trace: str | Path | dict | list, out: str | Path) -> dict:
    """Convert a Chrome trace (a dict or list, or a JSON file's path, plain or gzip) to `out` (.pftrace)."""
    with chrome_trace.read(trace, spill_dir=Path(out).parent) as events:
        return write(events, out)
