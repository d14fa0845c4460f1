"""Read a .pftrace without trace_processor: decode TrackEvent packets into tracks, slices and counters.

The trace_processor binary cannot be installed here (the `perfetto` package downloads it at run
time), so this rebuilds the parts of Perfetto's table model we query. The many small messages
(packets, track events, debug annotations) are decoded a chunk of packets at a time with numpy
(protoscan: Python's cost per field position, not per message); the few that carry state
(interned names, track descriptors, packet defaults) with the `perfetto` package's classes.
Features this decoder does not implement fail loudly instead of producing silently wrong numbers.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from google.protobuf.message import DecodeError, Message
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

from neuronsweep.errors import UserError
from neuronsweep.formats import heap, protoscan


@dataclass
class Track:
    """A track of the trace: its uuid, name, parent, and whether it holds counters."""

    uuid: int
    name: str
    parent_uuid: int | None = None
    is_counter: bool = False
    pid: int | None = None
    tid: int | None = None


@dataclass
class Slice:
    """One slice, for readers that want rows (tests, small traces); the decoder keeps columns."""

    track_uuid: int
    ts: int
    dur: int  # -1 for a BEGIN never closed
    name: str
    category: str | None
    depth: int
    parent: int | None  # index into the slices
    args: dict = field(default_factory=dict)


def _ints(kind: str = "q") -> Any:
    return field(default_factory=lambda: array(kind))


@dataclass
class Slices:
    """The slices as columns (a Python object per slice cost as much as decoding the trace; ints are
    kept in 8-byte arrays, strings shared), and the args as (slice index, key, value) columns.
    `parent` is -1 for a slice at depth 0."""

    track_uuid: array = _ints("Q")
    ts: array = _ints()
    dur: array = _ints()
    name: list = field(default_factory=list)
    category: list = field(default_factory=list)
    depth: array = _ints()
    parent: array = _ints()
    arg_slice: array = _ints()
    arg_key: list = field(default_factory=list)
    arg_value: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)

    def __getitem__(self, i: int) -> Slice:
        args = {k: v for s, k, v in zip(self.arg_slice, self.arg_key, self.arg_value) if s == i}
        return Slice(
            self.track_uuid[i],
            self.ts[i],
            self.dur[i],
            self.name[i],
            self.category[i],
            self.depth[i],
            None if self.parent[i] < 0 else self.parent[i],
            args,
        )

    def __iter__(self) -> Iterator[Slice]:
        args: dict[int, dict] = {}
        for s, k, v in zip(self.arg_slice, self.arg_key, self.arg_value):
            args.setdefault(s, {})[k] = v
        for i in range(len(self.ts)):
            yield Slice(
                self.track_uuid[i],
                self.ts[i],
                self.dur[i],
                self.name[i],
                self.category[i],
                self.depth[i],
                None if self.parent[i] < 0 else self.parent[i],
                args.get(i, {}),
            )


@dataclass
class Counter:
    """One counter value on its track at a time."""

    track_uuid: int
    ts: int
    value: float


@dataclass
class DecodedTrace:
    """What a .pftrace holds that neuron-sweep reads: tracks, slices, counters and flows."""

    tracks: dict[int, Track]
    slices: Slices
    counters: list[Counter]
    flows: list[tuple[int, int]] = field(default_factory=list)  # (slice out, slice in), as trace_processor's flow table


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


CHUNK = 1 << 20  # bytes of packets decoded together (4 MiB took as long and held 40 MB more)


@functools.cache
def _frames_message() -> type[Message]:
    """`message Frames { repeated bytes packet = 1; }`: a Trace whose packets stay bytes, so that the
    protobuf runtime's C parser finds where each packet is (a Python walk over the length prefixes
    cost a quarter of the read)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="neuronsweep_frames.proto", package="neuronsweep", syntax="proto2")
    proto.message_type.add(name="Frames").field.add(
        name="packet",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("neuronsweep.Frames"))


def _frames(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """Every packet's payload bounds in `data`, from the C parser's packet lengths, or None where the
    file is not framed the plain way and the walk in `_chunks` must find them (damaged, or a header
    written long: a top-level field other than the packets, a padded tag or length). Exact: the C
    parser read the file as packets and unknown fields, and only if each packet's header is field 1's
    one-byte tag and its length's shortest varint, with nothing else, do the sizes add up to the file."""
    from google.protobuf.internal import api_implementation

    if api_implementation.Type() == "python":  # the pure-Python runtime: no faster than the walk
        return None
    try:
        packets = _frames_message().FromString(data).packet
    except DecodeError:
        return None
    lengths = np.fromiter(map(len, packets), np.int64, count=len(packets))
    del packets
    prefix = 2 + (lengths >= 1 << 7)  # the tag and the length's varint
    for bits in range(14, 64, 7):
        prefix += lengths >= 1 << bits
    ends = np.cumsum(prefix + lengths)
    if not ends.size or int(ends[-1]) != len(data):
        return None
    return ends - lengths, ends


def _chunks(data: bytes, path: str | Path) -> Iterator[tuple[int, bytes, np.ndarray, np.ndarray]]:
    """The trace file in chunks of whole packets (a Trace is `repeated TracePacket packet = 1`:
    length-delimited packets one after another) with each packet's payload bounds in the chunk, so
    memory holds one chunk's fields, not the trace's."""
    framed = _frames(data)
    if framed is None:
        yield from _walked_chunks(data, path)
        return
    starts, ends = framed
    first = 0
    while first < starts.size:
        start = int(ends[first - 1]) if first else 0  # where the chunk's first packet's header is
        last = max(first + 1, int(np.searchsorted(ends, start + CHUNK, "right")))
        stop = int(ends[last - 1])
        yield start, data[start:stop], starts[first:last] - start, ends[first:last] - start
        first = last


def _walked_chunks(data: bytes, path: str | Path) -> Iterator[tuple[int, bytes, np.ndarray, np.ndarray]]:
    """`_chunks` by a walk over the packets' headers in Python: for a file the C parser's frames do
    not match, and to name where a damaged one breaks."""
    pos, end = 0, len(data)
    try:
        while pos < end:
            start, limit = pos, min(end, pos + CHUNK)
            starts, ends = [], []
            while pos < limit:
                if data[pos] == 0x0A and data[pos + 1] < 0x80:  # field 1 (packet), a length under 128
                    starts.append(pos + 2 - start)
                    pos += 2 + data[pos + 1]
                    ends.append(pos - start)
                    continue
                key, pos = _varint(data, pos)
                wire = key & 7
                if wire == 2:
                    size, pos = _varint(data, pos)
                    if key >> 3 == 1:
                        starts.append(pos - start)
                        ends.append(pos + size - start)
                    pos += size
                elif wire == 0:
                    _, pos = _varint(data, pos)
                elif wire in (1, 5):
                    pos += 8 if wire == 1 else 4
                else:
                    raise DecodeError(f"wire type {wire}")
            if pos > end:
                raise IndexError(pos)
            yield start, data[start:pos], np.array(starts, np.int64), np.array(ends, np.int64)
    except (IndexError, DecodeError) as exc:
        raise UserError(
            f"{path}: not a readable Perfetto trace (truncated or damaged near byte {pos}: "
            f"{type(exc).__name__}); {remedy(path)}"
        ) from None


BEGIN, END, INSTANT, COUNTER = (
    TrackEvent.TYPE_SLICE_BEGIN,
    TrackEvent.TYPE_SLICE_END,
    TrackEvent.TYPE_INSTANT,
    TrackEvent.TYPE_COUNTER,
)
CLEARED = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
# field numbers (perfetto_trace.proto)
P_TIMESTAMP, P_SEQ, P_EVENT, P_INTERNED, P_FLAGS, P_COMPRESSED, P_CLOCK, P_DEFAULTS, P_TRACK = (
    8,
    10,
    11,
    12,
    13,
    50,
    58,
    59,
    60,
)
E_CAT_IIDS, E_ANNOTATIONS, E_TYPE, E_NAME_IID, E_TRACK, E_CATS, E_NAME, E_COUNTER, E_DOUBLE_COUNTER = (
    3,
    4,
    9,
    10,
    11,
    22,
    23,
    30,
    44,
)
E_LEGACY_TIMESTAMPS = (1, 16)
E_FLOW_IDS, E_TERMINATING_FLOW_IDS, E_FLOW_IDS_OLD, E_TERMINATING_FLOW_IDS_OLD = 47, 48, 36, 42
V, L, F64 = protoscan.VARINT, protoscan.LEN, protoscan.I64
# the wire types of the fields read (perfetto_trace.proto): any other is a damaged or foreign message
PACKET_WIRES = {
    P_TIMESTAMP: {V},
    P_SEQ: {V},
    P_EVENT: {L},
    P_INTERNED: {L},
    P_FLAGS: {V},
    P_DEFAULTS: {L},
    P_TRACK: {L},
}
EVENT_WIRES = {
    E_CAT_IIDS: {V, L},
    E_ANNOTATIONS: {L},
    E_TYPE: {V},
    E_NAME_IID: {V},
    E_TRACK: {V},
    E_CATS: {L},
    E_NAME: {L},
    E_COUNTER: {V},
    E_DOUBLE_COUNTER: {F64},
    E_FLOW_IDS: {F64},
    E_TERMINATING_FLOW_IDS: {F64},
    E_FLOW_IDS_OLD: {V},
    E_TERMINATING_FLOW_IDS_OLD: {V},
}
A_NAME_IID, A_BOOL, A_UINT, A_INT, A_DOUBLE, A_STRING, A_NAME = 1, 2, 3, 4, 5, 6, 10
ANNOTATION_WIRES = {A_NAME_IID: {V}, A_BOOL: {V}, A_UINT: {V}, A_INT: {V}, A_DOUBLE: {F64}, A_STRING: {L}, A_NAME: {L}}
INT64_MAX = 2**63 - 1


@dataclass
class _Generation:
    """A sequence's incremental state between two clears: interned names and the default track
    (a list of (packet number, track uuid), in order)."""

    names: dict = field(default_factory=dict)
    cats: dict = field(default_factory=dict)
    ann: dict = field(default_factory=dict)
    default_track: list = field(default_factory=list)


class _Reader:
    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.tracks: dict[int, Track] = {}
        self.slices = Slices()
        self.counters: list[Counter] = []
        self.gens: list[_Generation] = []
        self.gen_of_seq: dict[int, int] = {}
        self.stacks: dict[int, list[int]] = {}
        self.packets_seen = 0
        self.keys: dict[str, str] = {}
        self.flows: list[tuple[int, int]] = []
        self.flow_last: dict[int, int] = {}  # flow id -> the last slice it reached

    def fail(self, what: str) -> NoReturn:
        raise UserError(f"{self.path}: {what}")

    def wires(self, fields: protoscan.Fields, expected: dict, what: str) -> None:
        """Refuse a field read here written with another wire type (its value would be misread).
        One lookup in a (field number, wire type) table, not a pass over the fields per number."""
        top = max(expected) + 1
        allowed = np.ones((top + 1, 8), bool)  # the last row: fields not read here, any wire type
        for num, wires in expected.items():
            allowed[num] = False
            allowed[num, list(wires)] = True
        row = np.where(fields.num < top, fields.num, top)
        bad = np.flatnonzero(~allowed[row, fields.wire & 7])
        if bad.size:
            num, wire = int(fields.num[bad[0]]), int(fields.wire[bad[0]])
            wanted = " or ".join(map(str, sorted(expected[num])))
            self.fail(
                f"field {num} of a {what} has wire type {wire}, not {wanted}: not a Perfetto trace this reader "
                "can trust; recreate it."
            )

    def chunk(self, raw: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
        buf = protoscan.padded(raw)
        n = starts.size
        pf = protoscan.scan(buf, starts, ends)
        self.wires(pf, PACKET_WIRES, "TracePacket")
        if pf.where(P_COMPRESSED).any():
            self.fail(
                "compressed packets are not supported by this reader; decompress the trace with trace_processor first."
            )
        clock, _ = pf.last(P_CLOCK, n)
        if clock.any():
            self.fail("packets with a non-default clock (timestamp_clock_id) are not supported.")
        raw_ts = pf.last(P_TIMESTAMP, n)[0]
        if (raw_ts > np.uint64(INT64_MAX)).any():
            self.fail(f"a packet's timestamp {int(raw_ts.max())} is past 2^63-1 ns; recreate the trace.")
        ts = raw_ts.astype(np.int64)
        gen = self._generations(pf.last(P_SEQ, n)[0], pf.last(P_FLAGS, n)[0])
        for i in np.unique(pf.msg[np.isin(pf.num, (P_INTERNED, P_DEFAULTS, P_TRACK))]).tolist():
            self._stateful(TracePacket.FromString(raw[starts[i] : ends[i]]), self.gens[gen[i]], self.packets_seen + i)
        ev = pf.where(P_EVENT, protoscan.LEN)
        self._events(buf, raw, pf.msg[ev], pf.at[ev], pf.value[ev].astype(np.int64), ts, gen)
        self.packets_seen += n

    def _generations(self, seq: np.ndarray, flags: np.ndarray) -> np.ndarray:
        """Each packet's generation: its sequence's state, new at each SEQ_INCREMENTAL_STATE_CLEARED."""
        gen = np.zeros(seq.size, np.int64)
        cleared = (flags & np.uint64(CLEARED)) != 0
        for s in np.unique(seq).tolist():
            idx = np.flatnonzero(seq == s)
            local = np.cumsum(cleared[idx])  # 0: the generation this sequence already has open
            ids: list[int] = []
            for known in [self.gen_of_seq.get(s)] + [None] * int(local[-1]):
                if known is None:
                    known = len(self.gens)
                    self.gens.append(_Generation())
                ids.append(known)
            gen[idx] = np.array(ids)[local]
            self.gen_of_seq[s] = ids[-1]
        return gen

    def _stateful(self, p: TracePacket, g: _Generation, number: int) -> None:
        """The rare packets decoded whole: interned names, packet defaults, track descriptors."""
        if p.HasField("interned_data"):
            g.names.update({e.iid: _text(e.name) for e in p.interned_data.event_names})
            g.cats.update({e.iid: _text(e.name) for e in p.interned_data.event_categories})
            g.ann.update({e.iid: _text(e.name) for e in p.interned_data.debug_annotation_names})
        if p.HasField("trace_packet_defaults") and p.trace_packet_defaults.HasField("track_event_defaults"):
            g.default_track.append((number, p.trace_packet_defaults.track_event_defaults.track_uuid))
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            name = _text(td.name or td.static_name or td.thread.thread_name or td.process.process_name)
            self.tracks[td.uuid] = Track(
                uuid=td.uuid,
                name=name,
                parent_uuid=td.parent_uuid if td.HasField("parent_uuid") else None,
                is_counter=td.HasField("counter"),
                pid=td.thread.pid if td.HasField("thread") else (td.process.pid if td.HasField("process") else None),
                tid=td.thread.tid if td.HasField("thread") else None,
            )

    def _events(
        self,
        buf: np.ndarray,
        raw: bytes,
        packet: np.ndarray,
        at: np.ndarray,
        length: np.ndarray,
        ts: np.ndarray,
        gen: np.ndarray,
    ) -> None:
        n = packet.size
        ef = protoscan.scan(buf, at, at + length)
        self.wires(ef, EVENT_WIRES, "TrackEvent")
        if np.isin(ef.num, E_LEGACY_TIMESTAMPS).any():
            self.fail("legacy TrackEvent timestamps are not supported by this reader.")
        kind = ef.last(E_TYPE, n, dtype=np.int64)[0]
        track, has_track = ef.last(E_TRACK, n)
        ev_ts, ev_gen = ts[packet], gen[packet]
        missing = np.flatnonzero(~has_track)
        for g in np.unique(ev_gen[missing]).tolist():  # the generation's default track at that packet
            sel = missing[ev_gen[missing] == g]
            defaults = self.gens[g].default_track
            at = np.searchsorted([number for number, _ in defaults], self.packets_seen + packet[sel], "right") - 1
            if not defaults or (at < 0).any():
                self.fail("a track event names no track and its sequence has no default track.")
            track[sel] = np.array([t for _, t in defaults], np.uint64)[at]
        opens = (kind == BEGIN) | (kind == INSTANT)
        names = self._names(buf, raw, ef, n, ev_gen, opens)
        cats = self._categories(raw, ef, n, ev_gen, opens)
        counter_int = ef.last(E_COUNTER, n)[0].view(np.int64)
        counter_double, is_double = ef.last(E_DOUBLE_COUNTER, n)
        counter_value = np.where(is_double, counter_double.view(np.float64), counter_int.astype(np.float64))

        slice_of = self._pair(kind, track, ev_ts)
        sl = self.slices
        for j in np.flatnonzero(kind == COUNTER).tolist():
            self.counters.append(Counter(int(track[j]), int(ev_ts[j]), float(counter_value[j])))
        sl.name += names
        sl.category += cats
        self._args(buf, raw, ef, slice_of, ev_gen)
        self._flows(ef, slice_of)

    def _flows(self, ef: protoscan.Fields, slice_of: np.ndarray) -> None:
        """Flow ids link each slice to the previous one with the same id (trace_processor's v2 flows);
        a terminating id links and then ends its flow, so the id may start another."""
        ids = ef.where(E_FLOW_IDS, protoscan.I64) | ef.where(E_FLOW_IDS_OLD, protoscan.VARINT)
        ends = ef.where(E_TERMINATING_FLOW_IDS, protoscan.I64) | ef.where(E_TERMINATING_FLOW_IDS_OLD, protoscan.VARINT)
        rows = np.flatnonzero(ids | ends)
        for msg, fid, ending in zip(ef.msg[rows].tolist(), ef.value[rows].tolist(), ends[rows].tolist()):
            s = int(slice_of[msg])
            if s < 0:
                continue
            prev = self.flow_last.get(fid)
            if prev is not None and prev != s:
                self.flows.append((prev, s))
            if ending:
                self.flow_last.pop(fid, None)
            else:
                self.flow_last[fid] = s

    def _pair(self, kind: np.ndarray, track: np.ndarray, ev_ts: np.ndarray) -> np.ndarray:
        """BEGIN/END paired into slices per track with numpy, the open slices carried between chunks
        (self.stacks); returns each event's slice index (-1: none). Depth after each event is a
        per-track cumulative sum; a slice's BEGIN and END sit at one level (the BEGIN's depth after,
        the END's before), so sorted by (track, level, position) each END follows its BEGIN, and a
        slice's parent is the latest entry one level up (or the slice carried open there)."""
        n = kind.size
        is_b, is_e = kind == BEGIN, kind == END
        opens = is_b | (kind == INSTANT)
        sl = self.slices
        base = len(sl.ts)
        slice_of = np.full(n, -1, np.int64)
        slice_of[opens] = base + np.arange(int(opens.sum()))
        if not n:
            return slice_of
        tracks, tk = np.unique(track, return_inverse=True)
        tk = tk.reshape(-1)
        carried = [self.stacks.get(t, []) for t in tracks.tolist()]
        stack = np.full((tracks.size, max(map(len, carried)) + 1), -1, np.int64)  # [track, level - 1]
        for t, s in enumerate(carried):
            stack[t, : len(s)] = s
        delta = is_b.astype(np.int64) - is_e
        order = np.argsort(tk, kind="stable")
        cs = np.cumsum(delta[order])
        group = np.flatnonzero(np.r_[True, tk[order][1:] != tk[order][:-1]])
        depth = np.empty(n, np.int64)  # after each event
        depth[order] = (
            np.array(list(map(len, carried)), np.int64)[tk[order]]
            + cs
            - np.repeat((cs - delta[order])[group], np.diff(np.r_[group, n]))
        )
        bad = np.flatnonzero(is_e & (depth < 0))
        if bad.size:
            j = int(bad[0])
            self.fail(f"a slice END at ts={int(ev_ts[j])} on track {int(track[j])} has no open slice.")

        be = np.flatnonzero(is_b | is_e)
        level = np.where(is_b, depth, depth + 1)
        be = be[np.lexsort((be, level[be], tk[be]))]  # by track, level, position
        e_tk, e_level = tk[be], level[be]
        follows = np.r_[False, (e_tk[1:] == e_tk[:-1]) & (e_level[1:] == e_level[:-1])]
        closes = is_e[be]
        dur = np.where(is_b, -1, 0)[opens]
        paired = np.flatnonzero(closes & follows)
        begins, ends = be[paired - 1], be[paired]
        dur[slice_of[begins] - base] = ev_ts[ends] - ev_ts[begins]
        if (ev_ts[ends] < ev_ts[begins]).any():
            j = int(np.flatnonzero(ev_ts[ends] < ev_ts[begins])[0])
            self.fail(
                f"a slice END at ts={int(ev_ts[ends[j]])} comes before its BEGIN at ts={int(ev_ts[begins[j]])} "
                f"on track {int(track[ends[j]])}; recreate the trace."
            )
        for i in np.flatnonzero(closes & ~follows).tolist():  # ends a slice opened in an earlier chunk
            was_open = int(stack[e_tk[i], e_level[i] - 1])
            if int(ev_ts[be[i]]) < sl.ts[was_open]:
                self.fail(f"a slice END at ts={int(ev_ts[be[i]])} comes before its BEGIN at ts={sl.ts[was_open]}.")
            sl.dur[was_open] = int(ev_ts[be[i]]) - sl.ts[was_open]

        d = np.where(is_b, depth - 1, depth)[opens]  # each new slice's depth: its parent is at level d
        o = np.flatnonzero(opens)
        span = int(max(e_level.max(initial=0), d.max(initial=0))) + 1
        keys = (e_tk * span + e_level) * n + be
        query = (tk[o] * span + d) * n + o
        at = np.maximum(np.searchsorted(keys, query) - 1, 0)
        here = (keys[at] // n == query // n) & (keys[at] < query) if be.size else np.zeros(o.size, bool)
        inner = slice_of[be[at]] if be.size else -1  # the latest entry one level up: an open BEGIN
        outer = stack[tk[o], np.clip(d - 1, 0, stack.shape[1] - 1)]  # the slice carried open at level d
        parent = np.where(d < 1, -1, np.where(here, inner, outer))

        last = np.flatnonzero(np.r_[(e_tk[1:] != e_tk[:-1]) | (e_level[1:] != e_level[:-1]), True][: be.size])
        final = np.empty(tracks.size, np.int64)
        final[tk[order][np.r_[group[1:] - 1, n - 1]]] = depth[order][np.r_[group[1:] - 1, n - 1]]
        still = [list(c[:f]) + [-1] * (f - len(c)) for c, f in zip(carried, final.tolist())]
        for t, lv, pos in zip(e_tk[last].tolist(), e_level[last].tolist(), be[last].tolist()):
            if lv <= final[t]:
                still[t][lv - 1] = int(slice_of[pos])  # the latest entry of an open level is its BEGIN
        for t, s in zip(tracks.tolist(), still):
            self.stacks[t] = s

        sl.track_uuid.frombytes(track[opens].astype(np.uint64).tobytes())
        sl.ts.frombytes(ev_ts[opens].astype(np.int64).tobytes())
        sl.dur.frombytes(dur.astype(np.int64).tobytes())
        sl.depth.frombytes(d.astype(np.int64).tobytes())
        sl.parent.frombytes(parent.astype(np.int64).tobytes())
        return slice_of

    def _interned(
        self, table: str, gens: np.ndarray, iids: np.ndarray, convert: Callable[[str], str] = lambda name: name
    ) -> np.ndarray:
        """Interned names of (generation, iid) pairs ("" if unknown), looked up and converted once per
        distinct pair."""
        iids = iids.astype(np.uint64)
        if iids.size and (int(iids.max()) >= 1 << 40 or int(gens.max()) >= 1 << 23):  # no room for one key
            return np.array(
                [convert(getattr(self.gens[g], table).get(i, "")) for g, i in zip(gens.tolist(), iids.tolist())], object
            )
        keys, inverse = np.unique((gens.astype(np.uint64) << np.uint64(40)) | iids, return_inverse=True)
        names = [convert(getattr(self.gens[k >> 40], table).get(k & ((1 << 40) - 1), "")) for k in keys.tolist()]
        return np.array(names, object)[inverse] if keys.size else np.zeros(0, object)

    def _names(
        self, buf: np.ndarray, raw: bytes, ef: protoscan.Fields, n: int, ev_gen: np.ndarray, opens: np.ndarray
    ) -> list[str]:
        """The names of the events that open slices: interned (name_iid) or inline (name)."""
        iid, _ = ef.last(E_NAME_IID, n)
        names = self._interned("names", ev_gen, iid)
        inline = _last_of_each(ef, ef.where(E_NAME, protoscan.LEN) & (iid[ef.msg] == 0))
        names[ef.msg[inline]] = protoscan.texts(buf, raw, ef.at[inline], ef.value[inline])
        return names[opens].tolist()

    def _categories(
        self, raw: bytes, ef: protoscan.Fields, n: int, ev_gen: np.ndarray, opens: np.ndarray
    ) -> list[str | None]:
        """Categories joined by commas: the inline strings, else the interned ids' names. An event
        with one interned id (the usual case) is looked up per distinct id; any other, one by one."""
        inline = ef.where(E_CATS, protoscan.LEN)
        unpacked = ef.where(E_CAT_IIDS, protoscan.VARINT)
        packed = ef.where(E_CAT_IIDS, protoscan.LEN)
        ids_per_event = np.bincount(ef.msg[unpacked], minlength=n)
        other = np.zeros(n, bool)
        other[ef.msg[inline | packed]] = True
        single = (ids_per_event == 1) & ~other
        out = np.full(n, None, object)
        iid, _ = ef.last(E_CAT_IIDS, n)
        found = self._interned("cats", ev_gen[single], iid[single])
        out[single] = [c or None for c in found.tolist()]
        rest = np.flatnonzero(opens & ~single & ((ids_per_event > 0) | other))
        for j, lo, hi in zip(
            rest.tolist(), np.searchsorted(ef.msg, rest).tolist(), np.searchsorted(ef.msg, rest, "right").tolist()
        ):
            at, value = ef.at[lo:hi], ef.value[lo:hi]
            cats = protoscan.text(raw, at[inline[lo:hi]], value[inline[lo:hi]])
            if not cats:
                ids = value[unpacked[lo:hi]].tolist()
                for a, m in zip(at[packed[lo:hi]].tolist(), value[packed[lo:hi]].tolist()):
                    pos = a
                    while pos < a + m:
                        one, pos = _varint(raw, pos)
                        ids.append(one)
                cats = [self.gens[ev_gen[j]].cats.get(i, "") for i in ids]
            out[j] = ",".join(cats) or None
        return out[opens].tolist()

    def _key(self, name: str) -> str:
        """`debug.<name>`, one string object per distinct name (a million copies would cost 60 MB)."""
        key = self.keys.get(name)
        if key is None:
            key = self.keys[name] = f"debug.{name}"
        return key

    def _args(
        self, buf: np.ndarray, raw: bytes, ef: protoscan.Fields, slice_of: np.ndarray, ev_gen: np.ndarray
    ) -> None:
        """The debug annotations of the events that opened slices, as `debug.<name>` args."""
        ann = ef.where(E_ANNOTATIONS, protoscan.LEN)
        event = ef.msg[ann]
        keep = slice_of[event] >= 0
        event, at, length = event[keep], ef.at[ann][keep], ef.value[ann][keep].astype(np.int64)
        if not event.size:
            return
        m = event.size
        af = protoscan.scan(buf, at, at + length)
        self.wires(af, ANNOTATION_WIRES, "DebugAnnotation")
        iid, _ = af.last(A_NAME_IID, m)
        keys = np.full(m, self._key(""), object)
        named = iid != 0
        keys[named] = self._interned("ann", ev_gen[event][named], iid[named], self._key)
        inline = _last_of_each(af, af.where(A_NAME, protoscan.LEN) & ~named[af.msg])
        keys[af.msg[inline]] = protoscan.texts(buf, raw, af.at[inline], af.value[inline], self._key)
        values = np.full(m, None, object)
        for num, convert in (
            (A_INT, lambda v: v.view(np.int64)),
            (A_UINT, lambda v: v),
            (A_DOUBLE, lambda v: v.view(np.float64)),
            (A_BOOL, lambda v: v != 0),
        ):
            mask = af.where(num)
            values[af.msg[mask]] = convert(af.value[mask]).tolist()
        strings = af.where(A_STRING, protoscan.LEN)
        values[af.msg[strings]] = protoscan.texts(buf, raw, af.at[strings], af.value[strings])
        self.slices.arg_slice.extend(slice_of[event].tolist())
        self.slices.arg_key += keys.tolist()
        self.slices.arg_value += values.tolist()


def _last_of_each(fields: protoscan.Fields, mask: np.ndarray) -> np.ndarray:
    """`mask` less every field that its message repeats later (the last occurrence wins, as protobuf
    says; numpy's assignment through repeated indices keeps none in particular)."""
    idx = np.flatnonzero(mask)
    msg = fields.msg[idx]
    out = np.zeros_like(mask)
    if idx.size:
        out[idx[np.append(msg[1:] != msg[:-1], True)]] = True
    return out


def _text(value: str | bytes) -> str:
    """A string field as text: the protobuf runtime hands over bytes where they are not UTF-8."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def remedy(path: str | Path) -> str:
    """What to do about an unreadable trace: a sweep's own (in a view folder) is made again by its
    stage; a file the user brought is not a trace, and rerunning a stage would not change it."""
    if Path(path).parent.name == "view":
        return "recreate it (rerun the view stage)."
    return "pass a trace that Perfetto or `neuronsweep convert` wrote (a .pftrace is a protobuf file, not text)."


def read(path: str | Path) -> DecodedTrace:
    """The trace's tracks, slices (as columns) and counters."""
    data = Path(path).read_bytes()
    if not data:
        raise UserError(f"{path}: is empty (0 bytes), not a Perfetto trace; {remedy(path)}")
    reader = _Reader(path)
    for start, raw, starts, ends in _chunks(data, path):
        try:
            reader.chunk(raw, starts, ends)
        except (protoscan.DecodeError, DecodeError):
            raise UserError(
                f"{path}: not a readable Perfetto trace (damaged after byte {start}); {remedy(path)}"
            ) from None
    del data
    heap.trim()
    return DecodedTrace(tracks=reader.tracks, slices=reader.slices, counters=reader.counters, flows=reader.flows)
