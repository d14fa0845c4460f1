"""Write Chrome trace JSON (torch.profiler's export) as a Perfetto .pftrace with the `perfetto` protobuf classes.

Why not hand the JSON to the Perfetto UI? The Neuron tools emit .pftrace, and one format downstream
means one reader (analysis/pftrace_reader.py) and one set of SQL. Complete events ('X') become
BEGIN/END slices on one track per (pid, tid), nested strictly (a child that outlives its parent
after µs→ns rounding is clamped); instants ('i') become instant events; counters ('C') become
counter tracks; args become debug annotations. Names and categories are interned.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

from .atomic import replacing

SEQ_ID = 0x5EEB  # trusted_packet_sequence_id: one sequence for the whole file
_INT64 = (-(2**63), 2**63 - 1)


def _ns(us: float) -> int:
    return int(round(float(us) * 1000.0))


def _annotate(event, args: dict) -> None:
    for key, value in args.items():
        ann = event.debug_annotations.add()
        ann.name = str(key)
        if isinstance(value, bool):
            ann.bool_value = value
        elif isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
            ann.int_value = value
        elif isinstance(value, float):
            ann.double_value = value
        elif isinstance(value, str):
            ann.string_value = value
        else:
            ann.string_value = json.dumps(value)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Writer:
    """Writes each TracePacket as it is made (a Trace is `repeated TracePacket packet = 1`, so the
    file is the packets length-delimited one after another): no whole trace is held in memory."""

    def __init__(self, handle):
        self.handle = handle
        self.pending: TracePacket | None = None
        self.next_uuid = 1
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.first = True

    def add_packet(self) -> TracePacket:
        self.flush()
        self.pending = TracePacket()
        return self.pending

    def flush(self) -> None:
        if self.pending is not None:
            data = self.pending.SerializeToString()
            self.handle.write(b"\x0a" + _varint(len(data)) + data)
            self.pending = None

    def track(self, name: str, pid=None, tid=None, counter_unit: str | None = None, parent: int | None = None) -> int:
        uuid, self.next_uuid = self.next_uuid, self.next_uuid + 1
        td = self.add_packet().track_descriptor
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
        return uuid

    def _packet(self, ts: int) -> TracePacket:
        p = self.add_packet()
        p.timestamp = ts
        p.trusted_packet_sequence_id = SEQ_ID
        if self.first:
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            self.first = False
        else:
            p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        return p

    def _iid(self, packet, table: dict, name: str, interned_field: str) -> int:
        if name not in table:
            table[name] = len(table) + 1  # iid 0 is invalid
            entry = getattr(packet.interned_data, interned_field).add()
            entry.iid, entry.name = table[name], name
        return table[name]

    def event(self, ts: int, kind: int, track: int, name: str | None = None, cat: str | None = None,
              args: dict | None = None, value: float | None = None) -> None:
        p = self._packet(ts)
        ev = p.track_event
        ev.type = kind
        ev.track_uuid = track
        if name is not None:
            ev.name_iid = self._iid(p, self.names, name, "event_names")
        if cat:
            ev.category_iids.append(self._iid(p, self.cats, cat, "event_categories"))
        if args:
            _annotate(ev, args)
        if value is not None:
            ev.double_counter_value = float(value)


def _slice_stream(events: list[dict], track: int):
    """(ts, order, kind, track, event) for one track's complete events, strictly nested."""
    spans = sorted(((_ns(e["ts"]), _ns(e["ts"]) + max(_ns(e.get("dur", 0)), 0), i, e)
                    for i, e in enumerate(events)), key=lambda t: (t[0], -t[1], t[2]))
    stack: list[int] = []
    out = []
    for start, end, _, ev in spans:
        while stack and stack[-1] <= start:
            out.append((stack.pop(), TrackEvent.TYPE_SLICE_END, track, None))
        if stack:
            end = min(end, stack[-1])
        out.append((start, TrackEvent.TYPE_SLICE_BEGIN, track, ev))
        stack.append(end)
    while stack:
        out.append((stack.pop(), TrackEvent.TYPE_SLICE_END, track, None))
    return out


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
        w.flush()
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
    streams, counts = [], {"slices": 0, "instants": 0, "counters": 0, "skipped": 0}
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            by_track.setdefault(thread_track(e.get("pid"), e.get("tid")), []).append(e)
            counts["slices"] += 1
        elif ph == "i" or ph == "I":
            tid = None if e.get("s") == "g" else e.get("tid")
            trk = thread_track(e.get("pid"), tid if tid is not None else "instants")
            streams.append([(_ns(e["ts"]), TrackEvent.TYPE_INSTANT, trk, e)])
            counts["instants"] += 1
        elif ph == "C":
            for series, value in sorted(e.get("args", {}).items()):
                key = ("counter", e.get("pid"), e.get("name"), series)
                if key not in tracks:
                    tracks[key] = w.track(f"{e.get('name')}.{series}", counter_unit="")
                streams.append([(_ns(e["ts"]), TrackEvent.TYPE_COUNTER, tracks[key], {"value": value})])
                counts["counters"] += 1
        elif ph != "M":
            counts["skipped"] += 1
    streams += [_slice_stream(evs, trk) for trk, evs in by_track.items()]

    for ts, kind, trk, ev in heapq.merge(*streams, key=lambda t: t[0]):
        if kind == TrackEvent.TYPE_COUNTER:
            w.event(ts, kind, trk, value=ev["value"])
        elif kind == TrackEvent.TYPE_SLICE_END:
            w.event(ts, kind, trk)
        else:
            w.event(ts, kind, trk, name=ev.get("name", ""), cat=ev.get("cat"), args=ev.get("args"))
    return counts
