"""Read a .pftrace without trace_processor: decode TrackEvent packets into tracks, slices and counters.

The trace_processor binary cannot be installed here (the `perfetto` package downloads it at run
time), so this decodes the protobuf with the package's own classes and rebuilds the parts of
Perfetto's table model we query. Features this decoder does not implement fail loudly instead of
producing silently wrong numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

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


def _value(ann):
    for kind in ("int_value", "uint_value", "double_value", "string_value", "bool_value"):
        if ann.HasField(kind):
            return getattr(ann, kind)
    return None


def read(path: str | Path) -> DecodedTrace:
    trace = Trace.FromString(Path(path).read_bytes())
    tracks: dict[int, Track] = {}
    slices: list[Slice] = []
    counters: list[Counter] = []
    seq_state: dict[int, dict] = {}
    stacks: dict[int, list[int]] = {}

    for p in trace.packet:
        if p.HasField("compressed_packets"):
            raise UserError(f"{path}: compressed packets are not supported by this reader; "
                            "decompress the trace with trace_processor first.")
        if p.HasField("timestamp_clock_id"):
            raise UserError(f"{path}: packets with a non-default clock (timestamp_clock_id) are not supported.")
        seq = p.trusted_packet_sequence_id
        if seq not in seq_state or p.sequence_flags & TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            seq_state[seq] = {"names": {}, "cats": {}, "ann": {}, "default_track": None}
        state = seq_state[seq]
        if p.HasField("interned_data"):
            state["names"].update({e.iid: e.name for e in p.interned_data.event_names})
            state["cats"].update({e.iid: e.name for e in p.interned_data.event_categories})
            state["ann"].update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
        if p.HasField("trace_packet_defaults") and p.trace_packet_defaults.HasField("track_event_defaults"):
            state["default_track"] = p.trace_packet_defaults.track_event_defaults.track_uuid
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            name = td.name or td.static_name or td.thread.thread_name or td.process.process_name
            tracks[td.uuid] = Track(
                uuid=td.uuid, name=name, parent_uuid=td.parent_uuid if td.HasField("parent_uuid") else None,
                is_counter=td.HasField("counter"),
                pid=td.thread.pid if td.HasField("thread") else (td.process.pid if td.HasField("process") else None),
                tid=td.thread.tid if td.HasField("thread") else None)
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        if ev.HasField("timestamp_delta_us") or ev.HasField("timestamp_absolute_us"):
            raise UserError(f"{path}: legacy TrackEvent timestamps are not supported by this reader.")
        track = ev.track_uuid if ev.HasField("track_uuid") else state["default_track"]
        if track is None:
            raise UserError(f"{path}: a track event names no track and its sequence has no default track.")
        stack = stacks.setdefault(track, [])
        if ev.type in (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_INSTANT):
            name = ev.name if ev.HasField("name") else state["names"].get(ev.name_iid, "")
            cats = list(ev.categories) or [state["cats"].get(i, "") for i in ev.category_iids]
            args = {}
            for ann in ev.debug_annotations:
                key = ann.name if ann.HasField("name") else state["ann"].get(ann.name_iid, "")
                args[f"debug.{key}"] = _value(ann)
            slices.append(Slice(track, p.timestamp, -1 if ev.type == TrackEvent.TYPE_SLICE_BEGIN else 0, name,
                                ",".join(cats) or None, len(stack), stack[-1] if stack else None, args))
            if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
                stack.append(len(slices) - 1)
        elif ev.type == TrackEvent.TYPE_SLICE_END:
            if not stack:
                raise UserError(f"{path}: a slice END at ts={p.timestamp} on track {track} has no open slice.")
            s = slices[stack.pop()]
            s.dur = p.timestamp - s.ts
        elif ev.type == TrackEvent.TYPE_COUNTER:
            value = ev.double_counter_value if ev.HasField("double_counter_value") else ev.counter_value
            counters.append(Counter(track, p.timestamp, float(value)))
    return DecodedTrace(tracks=tracks, slices=slices, counters=counters)
