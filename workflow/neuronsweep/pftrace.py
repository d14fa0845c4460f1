"""Write Chrome trace JSON (torch.profiler's export) as a Perfetto .pftrace.

Why not hand the JSON to the Perfetto UI? The Neuron tools emit .pftrace, and one format downstream
means one reader (analysis/pftrace_reader.py) and one set of SQL. Complete events ('X') become
BEGIN/END slices on one track per (pid, tid), nested strictly (a child that outlives its parent
after µs→ns rounding is clamped); instants ('i') become instant events; counters ('C') become
counter tracks; args become debug annotations. Names and categories are interned. Track events
are encoded here byte by byte (the protobuf classes cost about 3 us a packet, most of the time on
a million slices); tests hold the bytes to the classes' own.
"""

from __future__ import annotations

import json
import struct
from array import array
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

from .atomic import replacing

BEGIN, END, INSTANT, COUNTER = (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_INSTANT,
                                TrackEvent.TYPE_COUNTER)
SEQ_ID = 0x5EEB  # trusted_packet_sequence_id: one sequence for the whole file
_INT64 = (-(2**63), 2**63 - 1)


def _ns(us: float) -> int:
    return int(round(float(us) * 1000.0))


def _slow_varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_slow_varint(n) for n in range(1 << 14)]  # the varints of lengths, iids and small values


def _varint(n: int) -> bytes:
    return _SMALL[n] if n < 16384 else _slow_varint(n)


def _signed(n: int) -> bytes:
    return _varint(n & 0xFFFFFFFFFFFFFFFF)  # int64 on the wire: two's complement in 10 bytes


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


# Field tags of the messages written (perfetto_trace.proto), in field-number order, which is the
# order the protobuf classes serialize them in: the bytes are those TracePacket.SerializeToString gives.
PACKET, TIMESTAMP, SEQUENCE, TRACK_EVENT, INTERNED, FLAGS = b"\x0a", b"\x40", b"\x50", b"\x5a", b"\x62", b"\x68"
CATEGORY_IID, ANNOTATION, TYPE, NAME_IID, TRACK_UUID, DOUBLE_COUNTER = b"\x18", b"\x22", b"\x48", b"\x50", b"\x58", b"\xe1\x02"
INTERNED_CATEGORY, INTERNED_NAME, IID, NAME = b"\x0a", b"\x12", b"\x08", b"\x12"
ANN_BOOL, ANN_INT, ANN_DOUBLE, ANN_STRING, ANN_NAME = b"\x10", b"\x20", b"\x29", b"\x32", b"\x52"
NEEDS_STATE = b"\x68\x02"  # sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE, after the first packet


class _Writer:
    """Writes each TracePacket as it is made (a Trace is `repeated TracePacket packet = 1`, so the
    file is the packets length-delimited one after another): no whole trace is held in memory.
    Track descriptors (a few) are built with the protobuf classes; track events (millions) are
    encoded here directly, byte for byte what the classes would write, at a fraction of the cost."""

    def __init__(self, handle):
        self.handle = handle
        self.next_uuid = 1
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.keys: dict[str, bytes] = {}  # annotation name -> its encoded name field
        self.sequence = SEQUENCE + _varint(SEQ_ID)
        self.flags = FLAGS + _varint(TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)

    def write(self, body: bytes) -> None:
        self.handle.write(PACKET + _varint(len(body)) + body)

    def track(self, name: str, pid=None, tid=None, counter_unit: str | None = None, parent: int | None = None) -> int:
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

    def _annotation(self, key, value) -> bytes:
        name = self.keys.get(key)
        if name is None:
            name = self.keys[key] = _field(ANN_NAME, str(key).encode())
        kind = type(value)
        if kind is int and 0 <= value < 16384:
            body = ANN_INT + _SMALL[value]
        elif kind is bool:
            body = ANN_BOOL + (b"\x01" if value else b"\x00")
        elif isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
            body = ANN_INT + _signed(value)
        elif isinstance(value, float):
            body = ANN_DOUBLE + struct.pack("<d", value)
        else:
            body = _field(ANN_STRING, (value if isinstance(value, str) else json.dumps(value)).encode())
        return _field(ANNOTATION, body + name)

    def _intern(self, table: dict, name: str, field_tag: bytes) -> tuple[int, bytes]:
        """The iid of `name`, and the interned entry to send with it on first use ("" after)."""
        iid = table.get(name)
        if iid is not None:
            return iid, b""
        iid = table[name] = len(table) + 1  # iid 0 is invalid
        return iid, _field(field_tag, IID + _varint(iid) + _field(NAME, name.encode()))

    def events(self, packets: "_Packets") -> None:
        """Every track event, in time order, encoded here: the bytes the protobuf classes would write
        (fields in number order), at a fraction of their cost (about 3 us a packet)."""
        order = packets.order()
        ts = np.frombuffer(packets.ts, np.int64)
        seq = self.sequence
        kinds = {k: TYPE + _varint(k) for k in (BEGIN, END, INSTANT, COUNTER)}
        end_suffix: dict[int, bytes] = {}  # track -> what follows an END packet's timestamp (always the same)
        tracks: dict[int, bytes] = {}
        p_kind, p_track, p_event = packets.kind, packets.track, packets.event
        annotation, intern, cat_table, name_table = self._annotation, self._intern, self.cats, self.names
        out = []
        for stamp, i in self._stamped(ts, order):
            kind, track = p_kind[i], p_track[i]
            if kind == END:
                suffix = end_suffix.get(track)
                if suffix is None:
                    suffix = end_suffix[track] = (seq + _field(TRACK_EVENT, kinds[END] + TRACK_UUID + _varint(track))
                                                  + NEEDS_STATE)
                out.append(b"".join((PACKET, _SMALL[1 + len(stamp) + len(suffix)], TIMESTAMP, stamp, suffix)))
                continue
            tb = tracks.get(track)
            if tb is None:
                tb = tracks[track] = TRACK_UUID + _varint(track)
            ev = p_event[i]
            interned = b""
            if kind == COUNTER:
                body = kinds[COUNTER] + tb + DOUBLE_COUNTER + struct.pack("<d", float(ev))
            else:
                cat, args = ev.get("cat"), ev.get("args")
                body = cats = b""
                if cat:
                    iid, cats = intern(cat_table, cat, INTERNED_CATEGORY)
                    body = CATEGORY_IID + _varint(iid)
                if args:
                    body += b"".join([annotation(k, v) for k, v in args.items()])
                iid, names = intern(name_table, ev.get("name", ""), INTERNED_NAME)
                body += kinds[kind] + NAME_IID + _varint(iid) + tb
                if cats or names:
                    interned = _field(INTERNED, cats + names)
            packet = b"".join((TIMESTAMP, stamp, seq, _field(TRACK_EVENT, body), interned, NEEDS_STATE))
            out.append(PACKET + _varint(len(packet)) + packet)
            if len(out) >= 65536:
                self._flush(out)
                out = []
        self._flush(out)

    @staticmethod
    def _stamped(ts: np.ndarray, order: np.ndarray, chunk: int = 1 << 16):
        """(encoded timestamp, packet index) in order, the varints made a chunk at a time."""
        for lo in range(0, order.size, chunk):
            idx = order[lo:lo + chunk]
            yield from zip(_varints(ts[idx]), idx.tolist())

    def _flush(self, out: list[bytes]) -> None:
        if out and self.flags:  # the sequence's first packet clears its state: same length, other value
            out[0] = out[0][:-len(NEEDS_STATE)] + self.flags
            self.flags = b""
        self.handle.write(b"".join(out))


def _varints(values) -> list[bytes]:
    """Many unsigned varints at once (numpy), each as its bytes."""
    v = np.asarray(values, np.uint64)
    out = np.zeros((v.size, 10), np.uint8)
    length = np.ones(v.size, np.int64)
    for k in range(10):
        rest = v >> np.uint64(7)
        more = rest > 0
        out[:, k] = (v & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
        length += more
        v = rest
        if not more.any():
            break
    flat = out.tobytes()
    return [flat[10 * i:10 * i + m] for i, m in enumerate(length.tolist())]


def _ns_array(values) -> np.ndarray:
    """Microseconds to integer nanoseconds, rounded as _ns rounds (half to even)."""
    return np.rint(np.asarray(values, np.float64) * 1000.0).astype(np.int64)


def _slice_stream(events: list[dict], track: int, out: "_Packets") -> None:
    """One track's complete events as BEGIN/END packets, strictly nested (a child that outlives its
    parent is clamped): sorted by start, longer first, then by input order."""
    start = _ns_array([e["ts"] for e in events])
    end = start + np.maximum(_ns_array([e.get("dur", 0) for e in events]), 0)
    order = np.lexsort((np.arange(len(events)), -end, start)).tolist()
    starts, ends = start.tolist(), end.tolist()
    stack: list[int] = []
    stream = out.new_stream()
    ts, kind, event = [], [], []  # this track's packets, in order
    for i in order:
        begin, finish = starts[i], ends[i]
        while stack and stack[-1] <= begin:
            ts.append(stack.pop())
            kind.append(END)
            event.append(None)
        if stack and stack[-1] < finish:
            finish = stack[-1]
        ts.append(begin)
        kind.append(BEGIN)
        event.append(events[i])
        stack.append(finish)
    while stack:
        ts.append(stack.pop())
        kind.append(END)
        event.append(None)
    out.extend(ts, kind, track, event, stream)


class _Packets:
    """Every track event to write, as columns (8-byte arrays: millions of them), then written in
    time order (ties: the stream that began first, then the stream's own order)."""

    def __init__(self):
        self.ts, self.kind, self.track, self.stream = array("q"), array("q"), array("Q"), array("q")
        self.event: list = []
        self.streams = 0

    def new_stream(self) -> int:
        self.streams += 1
        return self.streams - 1

    def add(self, ts, kind, track, event, stream) -> None:
        self.extend([ts], [kind], track, [event], stream)

    def extend(self, ts: list, kind: list, track: int, event: list, stream: int) -> None:
        self.ts.extend(ts)
        self.kind.extend(kind)
        self.track.extend([track] * len(ts))
        self.event += event
        self.stream.extend([stream] * len(ts))

    def order(self) -> np.ndarray:
        ts, stream = np.frombuffer(self.ts, np.int64), np.frombuffer(self.stream, np.int64)
        return np.lexsort((np.arange(ts.size), stream, ts))


def chrome_to_pftrace(trace: dict, out: str | Path) -> dict:
    """Convert a Chrome trace dict to `out` (.pftrace); returns counts of what was written."""
    events = trace.get("traceEvents", trace if isinstance(trace, list) else [])
    proc_names, thread_names = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            proc_names[e.get("pid")] = e.get("args", {}).get("name", "")
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names[(e.get("pid"), e.get("tid"))] = e.get("args", {}).get("name", "")

    # the file appears whole or not at all (replacing), and packets stream into it as they are made
    with replacing(out) as tmp, open(tmp, "wb", buffering=1 << 20) as handle:
        w = _Writer(handle)
        counts = _write_events(events, w, proc_names, thread_names)
    return counts


def _write_events(events: list[dict], w: _Writer, proc_names: dict, thread_names: dict) -> dict:
    process_tracks: dict = {}
    tracks: dict = {}

    def thread_track(pid, tid) -> int:
        if (pid, tid) not in tracks:
            name = thread_names.get((pid, tid)) or f"{pid}/{tid}"
            if isinstance(pid, int) and pid not in process_tracks:
                process_tracks[pid] = w.track(proc_names.get(pid) or f"process {pid}", pid=pid)
            tracks[(pid, tid)] = w.track(name, pid=pid, tid=tid if isinstance(pid, int) else None,
                                         parent=process_tracks.get(pid)) if isinstance(tid, int) \
                else w.track(name)
        return tracks[(pid, tid)]

    by_track: dict[int, list] = {}
    packets = _Packets()
    counts = {"slices": 0, "instants": 0, "counters": 0, "skipped": 0}
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            key = (e.get("pid"), e.get("tid"))
            trk = tracks.get(key)
            if trk is None:
                trk = thread_track(*key)
            evs = by_track.get(trk)
            if evs is None:
                evs = by_track[trk] = []
            evs.append(e)
        elif ph == "i" or ph == "I":
            tid = None if e.get("s") == "g" else e.get("tid")
            trk = thread_track(e.get("pid"), tid if tid is not None else "instants")
            packets.add(_ns(e["ts"]), INSTANT, trk, e, packets.new_stream())
            counts["instants"] += 1
        elif ph == "C":
            for series, value in sorted(e.get("args", {}).items()):
                key = ("counter", e.get("pid"), e.get("name"), series)
                if key not in tracks:
                    tracks[key] = w.track(f"{e.get('name')}.{series}", counter_unit="")
                packets.add(_ns(e["ts"]), COUNTER, tracks[key], value, packets.new_stream())
                counts["counters"] += 1
        elif ph != "M":
            counts["skipped"] += 1
    for trk, evs in by_track.items():
        counts["slices"] += len(evs)
        _slice_stream(evs, trk, packets)
    w.events(packets)
    return counts
