"""Read a .pftrace without trace_processor: decode TrackEvent packets into tracks, slices and counters.

The trace_processor binary cannot be installed here (the `perfetto` package downloads it at run
time), so this decodes the protobuf with the package's own classes and rebuilds the parts of
Perfetto's table model we query. Features this decoder does not implement fail loudly instead of
producing silently wrong numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

from ..errors import UserError


@dataclass
class Track:
    uuid: int
    name: str
    parent_uuid: int | None = None
    is_counter: bool = False
    pid: int | None = None
    tid: int | None = None


@dataclass
class Slice:
    track_uuid: int
    ts: int
    dur: int  # -1 for a BEGIN never closed
    name: str
    category: str | None
    depth: int
    parent: int | None  # index into the slice list
    args: dict = field(default_factory=dict)


@dataclass
class Counter:
    track_uuid: int
    ts: int
    value: float


@dataclass
class DecodedTrace:
    tracks: dict[int, Track]
    slices: list[Slice]
    counters: list[Counter]


def _varint(data, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def packets(data: bytes, path: str | Path = "trace"):
    """The TracePackets of a trace file one at a time (a Trace is `repeated TracePacket packet = 1`:
    length-delimited packets one after another), so memory holds one decoded packet, not the trace."""
    view, pos, end = memoryview(data), 0, len(data)
    try:
        while pos < end:
            key, pos = _varint(data, pos)
            field, wire = key >> 3, key & 7
            if wire == 2:
                size, pos = _varint(data, pos)
                if pos + size > end:
                    raise IndexError(pos)
                if field == 1:
                    yield TracePacket.FromString(view[pos:pos + size])
                pos += size
            elif wire == 0:
                _, pos = _varint(data, pos)
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                raise DecodeError(f"wire type {wire}")
    except (IndexError, DecodeError) as exc:
        raise UserError(f"{path}: not a readable Perfetto trace (truncated or damaged near byte {pos}: "
                        f"{type(exc).__name__}); recreate it (rerun the view stage).") from None


def _value(ann):
    kind = ann.WhichOneof("value")
    return getattr(ann, kind) if kind in ("int_value", "uint_value", "double_value", "string_value", "bool_value") else None


def read(path: str | Path) -> DecodedTrace:
    """One pass over the packets. The packet's `data` oneof and the event's oneofs are asked once each
    (WhichOneof) instead of field by field: most of the cost is Python touching each packet."""
    data = Path(path).read_bytes()
    tracks: dict[int, Track] = {}
    slices: list[Slice] = []
    counters: list[Counter] = []
    seq_state: dict[int, dict] = {}
    stacks: dict[int, list[int]] = {}
    BEGIN, END, INSTANT, COUNTER = (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_INSTANT,
                                    TrackEvent.TYPE_COUNTER)
    CLEARED = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED

    for p in packets(data, path):
        data = p.WhichOneof("data")
        if data == "compressed_packets":
            raise UserError(f"{path}: compressed packets are not supported by this reader; "
                            "decompress the trace with trace_processor first.")
        if p.HasField("timestamp_clock_id"):
            raise UserError(f"{path}: packets with a non-default clock (timestamp_clock_id) are not supported.")
        seq = p.trusted_packet_sequence_id
        state = seq_state.get(seq)
        if state is None or p.sequence_flags & CLEARED:
            state = seq_state[seq] = {"names": {}, "cats": {}, "ann": {}, "default_track": None}
        if p.HasField("interned_data"):
            state["names"].update({e.iid: e.name for e in p.interned_data.event_names})
            state["cats"].update({e.iid: e.name for e in p.interned_data.event_categories})
            state["ann"].update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
        if data != "track_event":
            if p.HasField("trace_packet_defaults") and p.trace_packet_defaults.HasField("track_event_defaults"):
                state["default_track"] = p.trace_packet_defaults.track_event_defaults.track_uuid
            if data == "track_descriptor":
                td = p.track_descriptor
                name = td.name or td.static_name or td.thread.thread_name or td.process.process_name
                tracks[td.uuid] = Track(
                    uuid=td.uuid, name=name, parent_uuid=td.parent_uuid if td.HasField("parent_uuid") else None,
                    is_counter=td.HasField("counter"),
                    pid=td.thread.pid if td.HasField("thread") else (td.process.pid if td.HasField("process") else None),
                    tid=td.thread.tid if td.HasField("thread") else None)
            continue
        ev = p.track_event
        if ev.WhichOneof("timestamp") is not None:
            raise UserError(f"{path}: legacy TrackEvent timestamps are not supported by this reader.")
        track = ev.track_uuid if ev.HasField("track_uuid") else state["default_track"]
        if track is None:
            raise UserError(f"{path}: a track event names no track and its sequence has no default track.")
        stack = stacks.get(track)
        if stack is None:
            stack = stacks[track] = []
        kind = ev.type
        if kind == BEGIN or kind == INSTANT:
            name = ev.name if ev.WhichOneof("name_field") == "name" else state["names"].get(ev.name_iid, "")
            cats = list(ev.categories) or [state["cats"].get(i, "") for i in ev.category_iids]
            args = {}
            for ann in ev.debug_annotations:
                key = ann.name if ann.WhichOneof("name_field") == "name" else state["ann"].get(ann.name_iid, "")
                args[f"debug.{key}"] = _value(ann)
            slices.append(Slice(track, p.timestamp, -1 if kind == BEGIN else 0, name,
                                ",".join(cats) or None, len(stack), stack[-1] if stack else None, args))
            if kind == BEGIN:
                stack.append(len(slices) - 1)
        elif kind == END:
            if not stack:
                raise UserError(f"{path}: a slice END at ts={p.timestamp} on track {track} has no open slice.")
            s = slices[stack.pop()]
            s.dur = p.timestamp - s.ts
        elif kind == COUNTER:
            value = ev.double_counter_value if ev.HasField("double_counter_value") else ev.counter_value
            counters.append(Counter(track, p.timestamp, float(value)))
    return DecodedTrace(tracks=tracks, slices=slices, counters=counters)
