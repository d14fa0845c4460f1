"""Write Chrome trace JSON (torch.profiler's export) as a Perfetto .pftrace.

Why not hand the JSON to the Perfetto UI? The Neuron tools emit .pftrace, and one format downstream
means one reader (analysis/pftrace_reader.py) and one set of SQL. Complete events ('X') become
BEGIN/END slices on one track per (pid, tid), nested strictly (a child that outlives its parent
after us->ns rounding is clamped); instants ('i') become instant events; counters ('C') become
counter tracks; args become debug annotations. Names and categories are interned.

A million-slice trace is normal, so nothing here is done per event in Python where it can be
avoided: the events arrive as columns (chrome_trace.py), the packets' order is one numpy sort, and
track events are encoded from the columns with numpy (varints) and pyarrow's element-wise binary
joins, a chunk of packets at a time, straight into the file. The bytes are those the protobuf
classes would write (tests serialize the parsed file again and compare); the classes themselves
cost about 3 us a packet and write only the few track descriptors.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

from . import chrome_trace
from .atomic import replacing

BEGIN, END, INSTANT, COUNTER = (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_INSTANT,
                                TrackEvent.TYPE_COUNTER)
SEQ_ID = 0x5EEB  # trusted_packet_sequence_id: one sequence for the whole file
CHUNK = 1 << 18  # packets encoded at a time

# Field tags of the messages written (perfetto_trace.proto), in field-number order, which is the
# order the protobuf classes serialize them in.
PACKET, TIMESTAMP, SEQUENCE, TRACK_EVENT, INTERNED, FLAGS = b"\x0a", b"\x40", b"\x50", b"\x5a", b"\x62", b"\x68"
CATEGORY_IID, ANNOTATION, TYPE, NAME_IID, TRACK_UUID, DOUBLE_COUNTER = b"\x18", b"\x22", b"\x48", b"\x50", b"\x58", b"\xe1\x02"
INTERNED_CATEGORY, INTERNED_NAME, IID, NAME = b"\x0a", b"\x12", b"\x08", b"\x12"
ANN_BOOL, ANN_INT, ANN_DOUBLE, ANN_STRING, ANN_NAME = b"\x10", b"\x20", b"\x29", b"\x32", b"\x52"
NEEDS_STATE = b"\x68\x02"  # sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE, after the first packet
CLEARED = bytes([TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE])
EMPTY = pa.scalar(b"", pa.large_binary())
_INT64 = (-(2**63), 2**63 - 1)


# ----------------------------------------------------------------------------- encoding, one value

def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _annotation(key, value) -> bytes:
    """One debug annotation as the loop reads it from a dict: ints, bools, floats as themselves,
    anything else as its JSON text."""
    if isinstance(value, bool):
        body = ANN_BOOL + (b"\x01" if value else b"\x00")
    elif isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        body = ANN_INT + _varint(value & 0xFFFFFFFFFFFFFFFF)  # int64 on the wire: two's complement
    elif isinstance(value, float):
        body = ANN_DOUBLE + struct.pack("<d", value)
    else:
        body = _field(ANN_STRING, (value if isinstance(value, str) else json.dumps(value)).encode())
    return _field(ANNOTATION, body + _field(ANN_NAME, str(key).encode()))


# ------------------------------------------------------------------------- encoding, columns

def _ragged(lengths: np.ndarray, data) -> pa.Array:
    """A binary column from each row's length and all rows' bytes one after another."""
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), lengths.size, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _rows(matrix: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary column of each row's first `lengths` bytes of `matrix`."""
    return _ragged(lengths, matrix[np.arange(matrix.shape[1]) < lengths[:, None]])


def _varints(values, tag: bytes = b"", mask=None) -> pa.Array:
    """Each row `tag` + the varint of its value (negative int64 as two's complement), empty where
    `mask` is False."""
    v = np.asarray(values).astype(np.uint64)
    t = len(tag)
    out = np.zeros((v.size, t + 10), np.uint8)
    out[:, :t] = np.frombuffer(tag, np.uint8)
    lengths = np.full(v.size, t + 1, np.int64)
    for k in range(10):
        rest = v >> np.uint64(7)
        more = rest > 0
        out[:, t + k] = (v & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
        lengths += more
        v = rest
        if not more.any():
            break
    if mask is not None:
        lengths[~mask] = 0
    return _rows(out, lengths)


def _fixed(tag: bytes, payload: np.ndarray, mask: np.ndarray) -> pa.Array:
    """Each row `tag` + its fixed-size payload (an (n, k) uint8 array), empty where `mask` is False."""
    out = np.concatenate([np.broadcast_to(np.frombuffer(tag, np.uint8), (payload.shape[0], len(tag))), payload], 1)
    return _rows(out, np.where(mask, out.shape[1], 0))


def _join(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*(pa.scalar(p, pa.large_binary()) if isinstance(p, bytes) else p
                                         for p in parts), EMPTY)


def _length_prefixed(tag: bytes, payload: pa.Array, mask=None) -> pa.Array:
    """Each row a length-delimited field: `tag`, the payload's length, the payload."""
    lengths = pc.binary_length(payload).to_numpy()
    head = _varints(lengths, tag)
    whole = _join(head, payload)
    return whole if mask is None else pc.if_else(pa.array(mask), whole, EMPTY)


def _struct_annotations(args: pa.StructArray) -> pa.Array:
    """Each row's debug annotations from an Arrow struct of int64, bool or string children (the
    fast path's args; chrome_trace.FAST_ARGS): the bytes `_annotation` makes of the same values."""
    out = _ragged(np.zeros(len(args), np.int64), b"")
    parent = args.is_valid().to_numpy(zero_copy_only=False)
    for i, f in enumerate(args.type):
        child = pc.struct_field(args, [i])
        valid = parent & child.is_valid().to_numpy(zero_copy_only=False)
        if not valid.any():
            continue
        if pa.types.is_int64(f.type):
            value = _varints(child.fill_null(0).to_numpy(zero_copy_only=False), ANN_INT, valid)
        elif pa.types.is_boolean(f.type):
            flag = child.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)[:, None]
            value = _fixed(ANN_BOOL, flag, valid)
        else:  # string
            text = pc.fill_null(child, "").cast(pa.large_binary())
            value = _length_prefixed(ANN_STRING, text, valid)
        body = _join(value, _field(ANN_NAME, f.name.encode()))
        out = _join(out, _length_prefixed(ANNOTATION, body, valid))
    return out


def _dict_annotations(args: list) -> pa.Array:
    encoded = [b"".join([_annotation(k, v) for k, v in a.items()]) for a in args]
    return _ragged(np.fromiter(map(len, encoded), np.int64, len(encoded)), b"".join(encoded))


# ------------------------------------------------------------------------------------ the trace

class _Tracks:
    """Track descriptors, written as they are made (a few, with the protobuf classes)."""

    def __init__(self, handle):
        self.handle, self.next_uuid = handle, 1

    def write(self, body: bytes) -> None:
        self.handle.write(PACKET + _varint(len(body)) + body)

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
            uuids.append(self.add(name, pid=pid, tid=tid if isinstance(pid, int) else None,
                                  parent=processes.get(pid)) if isinstance(tid, int) else self.add(name))
        return np.array(uuids, np.uint64)


def _clamped_ends(start: np.ndarray, end: np.ndarray, track: np.ndarray) -> np.ndarray:
    """Slices sorted by (track, start, longer first): each end clamped to its parent's, so they nest
    strictly. A track whose slices never overlap needs nothing; otherwise a stack, per slice."""
    same = track[1:] == track[:-1]
    if not (same & (end[:-1] > start[1:])).any():
        return end
    out = end.tolist()
    starts, tracks = start.tolist(), track.tolist()
    stack: list[int] = []
    current = None
    for i, (b, f, trk) in enumerate(zip(starts, out, tracks)):
        if trk != current:
            stack, current = [], trk
        while stack and stack[-1] <= b:
            stack.pop()
        if stack and stack[-1] < f:
            f = out[i] = stack[-1]
        stack.append(f)
    return np.array(out, np.int64)


class _Packets:
    """Every track event as columns, in the order they are written: by time; ties by stream (each
    instant or counter its own, then one per slice track, in input order), then within a track
    slice by slice as a nesting stack emits them (`_clamped_ends`)."""

    def __init__(self, events: chrome_trace.Events, uuids: np.ndarray):
        parts, events.parts = events.parts, []  # concatenated here: each part's columns freed as it goes
        # each part's args, annotated: rows in order of its slices and instants
        self.annotations = pa.chunked_array([_struct_annotations(p.args) if isinstance(p.args, pa.StructArray)
                                             else _dict_annotations(p.args) for p in parts], pa.large_binary())

        def column(name: str, dtype) -> np.ndarray:
            out = np.concatenate([getattr(p, name) for p in parts]).astype(dtype, copy=False) if parts \
                else np.zeros(0, dtype)
            for p in parts:
                setattr(p, name, None)
            return out

        kind, key, ts, dur = column("kind", np.int8), column("key", np.int32), column("ts", np.int64), column("dur", np.int64)
        self.name_of, self.cat_of, self.value = column("name", np.int32), column("cat", np.int32), column("value", np.float64)
        self.uuids = uuids
        named = np.flatnonzero(kind != chrome_trace.COUNTER)
        self.annotation_row = np.full(kind.size, -1, np.int64)
        self.annotation_row[named] = np.arange(named.size)

        others = np.flatnonzero(kind != chrome_trace.SLICE)
        x = np.flatnonzero(kind == chrome_trace.SLICE)
        x_tracks, first_x = np.unique(key[x], return_index=True)
        stream_of_track = np.zeros(max(len(events.keys), 1), np.int64)
        stream_of_track[x_tracks[np.argsort(first_x)]] = others.size + np.arange(x_tracks.size)
        start = ts[x]
        end = start + np.maximum(dur[x], 0)
        del dur
        o = np.lexsort((x, -end, start, key[x]))
        x, start, end = x[o], start[o], end[o]
        x_key = key[x]
        ce = _clamped_ends(start, end, x_key)
        del end, o
        # the stack's order as one sort key after the time: the stream, then at one time ends before
        # begins and inner ends first; a zero-length slice ends right after it begins
        n = x.size
        zero = ce == start
        rank = np.arange(n, dtype=np.int64)
        track_stream = 2 * stream_of_track[x_key] * (3 * n + 2) + n  # (stream * 2 + cls) * span + sub + n
        tie = np.concatenate([2 * np.arange(others.size, dtype=np.int64) * (3 * n + 2) + n,
                              track_stream + (3 * n + 2) + 2 * rank,
                              track_stream + np.where(zero, (3 * n + 2) + 2 * rank + 1, -rank)])
        del rank, zero, track_stream
        self.ts = np.concatenate([ts[others], start, ce])
        del ts, start, ce
        self.order = np.lexsort((tie, self.ts))
        del tie
        kinds = np.where(kind[others] == chrome_trace.INSTANT, INSTANT, COUNTER)
        self.kind = np.concatenate([kinds, np.full(n, BEGIN), np.full(n, END)]).astype(np.int8)
        self.event = np.concatenate([others, x, np.full(n, -1)]).astype(np.int32)
        self.key = np.concatenate([key[others], x_key, x_key])
        self._intern(events)

    def _intern(self, events: chrome_trace.Events) -> None:
        """Name and category iids numbered by first use in the written order, and each entry sent
        with the packet that uses it first (as a writer interning on the fly does)."""
        order = self.order
        named_pos = np.flatnonzero(np.isin(self.kind[order], (BEGIN, INSTANT)))
        ev = self.event[order[named_pos]]
        self.name_iid = np.zeros(len(events.names), np.int64)
        self.cat_iid = np.zeros(len(events.cats) + 1, np.int64)  # index -1: none, iid 0
        entries: dict[int, list[bytes]] = {}
        for table, of, iids, tag in ((events.cats, self.cat_of, self.cat_iid, INTERNED_CATEGORY),
                                     (events.names, self.name_of, self.name_iid, INTERNED_NAME)):
            text = list(table)
            ids = of[ev]
            used = ids >= 0
            distinct, first = np.unique(ids[used], return_index=True)
            by_use = np.argsort(first)
            iids[distinct[by_use]] = np.arange(1, distinct.size + 1)
            for n, (i, f) in enumerate(zip(distinct[by_use].tolist(), named_pos[used][first[by_use]].tolist())):
                entries.setdefault(f, []).append(_field(tag, IID + _varint(n + 1) + _field(NAME, text[i].encode())))
        self.interned_at = np.array(sorted(entries), np.int64)  # positions in the written order
        self.interned = [_field(INTERNED, b"".join(entries[p])) for p in self.interned_at.tolist()]

    def encode(self, lo: int, hi: int) -> pa.Array:
        """Packets lo..hi of the written order, each length-delimited as a Trace's `packet` field."""
        idx = self.order[lo:hi]
        kind, ev = self.kind[idx].astype(np.int64), self.event[idx]
        named = (kind == BEGIN) | (kind == INSTANT)
        counter = kind == COUNTER
        name = np.where(named, self.name_iid[self.name_of[ev]], 0)
        cat = np.where(named, self.cat_iid[self.cat_of[ev]], 0)
        rows = np.where(named, self.annotation_row[ev], -1)
        annotations = pc.take(self.annotations, pa.array(rows, mask=~named)).combine_chunks()
        annotations = pc.fill_null(annotations, EMPTY)
        value = np.where(counter, self.value[ev], 0.0).astype("<f8").view(np.uint8).reshape(-1, 8)
        body = _join(_varints(cat, CATEGORY_IID, cat > 0), annotations, _varints(kind, TYPE),
                     _varints(name, NAME_IID, named), _varints(self.uuids[self.key[idx]], TRACK_UUID),
                     _fixed(DOUBLE_COUNTER, value, counter))
        a, b = np.searchsorted(self.interned_at, [lo, hi])
        lengths = np.zeros(hi - lo, np.int64)
        lengths[self.interned_at[a:b] - lo] = [len(e) for e in self.interned[a:b]]
        interned = _ragged(lengths, b"".join(self.interned[a:b]))
        payload = _join(_varints(self.ts[idx], TIMESTAMP), SEQUENCE + _varint(SEQ_ID),
                        _length_prefixed(TRACK_EVENT, body), interned, NEEDS_STATE)
        return _length_prefixed(PACKET, payload)


def _write_column(handle, packets: pa.Array, first: bool) -> None:
    """The column's bytes as they lie in its buffer; the sequence's first packet clears its state
    (the same flag byte, another value: its last)."""
    offsets = np.frombuffer(packets.buffers()[1], np.int64)[packets.offset:packets.offset + len(packets) + 1]
    data = memoryview(packets.buffers()[2])[int(offsets[0]):int(offsets[-1])]
    if first and len(packets):
        cut = int(offsets[1] - offsets[0]) - 1
        handle.write(data[:cut])
        handle.write(CLEARED)
        data = data[cut + 1:]
    handle.write(data)


def write(events: chrome_trace.Events, out: str | Path) -> dict:
    """Write `events` (chrome_trace.read) to `out` (.pftrace), consuming them; returns counts of
    what was written."""
    # the file appears whole or not at all (replacing), and packets stream into it as they are made
    with replacing(out) as tmp, open(tmp, "wb", buffering=1 << 20) as handle:
        uuids = _Tracks(handle).of_keys(events)
        packets = _Packets(events, uuids)
        for lo in range(0, packets.order.size, CHUNK):
            _write_column(handle, packets.encode(lo, min(lo + CHUNK, packets.order.size)), lo == 0)
    return events.counts


def chrome_to_pftrace(trace, out: str | Path) -> dict:
    """Convert a Chrome trace (a dict, or a JSON file's path) to `out` (.pftrace)."""
    return write(chrome_trace.read(trace), out)
