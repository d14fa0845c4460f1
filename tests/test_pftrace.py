"""Chrome trace -> .pftrace with the perfetto classes, read back with our own decoder."""

from __future__ import annotations

import json

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket

from neuronsweep.errors import UserError
from neuronsweep.formats.pftrace_reader import read
from neuronsweep.formats.pftrace_writer import chrome_to_pftrace


def chrome(events):
    meta = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}},
    ]
    return {"traceEvents": meta + events}


def test_nested_slices_args_instants_counters_round_trip(tmp_path):
    trace = chrome(
        [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "exec_2",
                "pid": 7,
                "tid": 8,
                "ts": 100.0,
                "dur": 50.0,
                "args": {"External id": 1},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::matmul",
                "pid": 7,
                "tid": 8,
                "ts": 110.0,
                "dur": 30.0,
                "args": {"Input Dims": [[2, 3], [3, 4]], "Sequence number": 0},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 7,
                "tid": 8,
                "ts": 111.0,
                "dur": 29.0004,
                "args": {"ratio": 0.5, "flag": True},
            },
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 9, "ts": 105.0, "dur": 10.0},
            {
                "ph": "X",
                "cat": "Trace",
                "name": "PyTorch Profiler (0)",
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "ts": 90.0,
                "dur": 100.0,
            },
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 191.0},
            {"ph": "C", "name": "mem", "pid": 7, "ts": 120.0, "args": {"bytes": 4096}},
        ]
    )
    out = tmp_path / "t.pftrace"
    counts = chrome_to_pftrace(trace, out)
    assert counts == {"slices": 5, "instants": 1, "counters": 1, "flows": 0, "skipped": 0}

    decoded = read(out)
    names = {t.name for t in decoded.tracks.values()}
    assert {"python", "main", "7/9", "Spans/PyTorch Profiler", "mem.bytes"} <= names
    by_name = {}
    for s in decoded.slices:
        by_name.setdefault(s.name, []).append(s)
    exec_ = by_name["exec_2"][0]
    matmul = by_name["aten::matmul"][0]
    mm = next(s for s in by_name["aten::mm"] if s.track_uuid == exec_.track_uuid)
    assert (exec_.ts, exec_.dur, exec_.depth) == (100_000, 50_000, 0)
    assert (matmul.depth, mm.depth) == (1, 2)
    assert decoded.slices[mm.parent] == matmul and decoded.slices[matmul.parent] == exec_
    assert mm.ts + mm.dur <= matmul.ts + matmul.dur  # 111+29.0004 µs rounds past its parent: clamped
    assert matmul.args == {"debug.Input Dims": json.dumps([[2, 3], [3, 4]]), "debug.Sequence number": 0}
    assert mm.args == {"debug.ratio": 0.5, "debug.flag": True}
    assert mm.category == "cpu_op"
    assert all(s.dur >= 0 for s in decoded.slices)
    instant = by_name["Record Window End"][0]
    assert instant.dur == 0 and instant.ts == 191_000
    assert [(c.ts, c.value) for c in decoded.counters] == [(120_000, 4096.0)]


def test_names_are_interned_once(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": float(i * 10), "dur": 5.0}
        for i in range(20)
    ]
    out = tmp_path / "t.pftrace"
    chrome_to_pftrace(chrome(events), out)
    packets = Trace.FromString(out.read_bytes()).packet
    interned = [n.name for p in packets for n in p.interned_data.event_names]
    assert interned == ["aten::mm"]
    first_event = next(p for p in packets if p.HasField("track_event"))
    assert first_event.sequence_flags & TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert len(read(out).slices) == 20


def test_reader_fails_loudly_on_unsupported_features(tmp_path):
    trace = Trace()
    p = trace.packet.add()
    p.compressed_packets = b"\x00"
    path = tmp_path / "c.pftrace"
    path.write_bytes(trace.SerializeToString())
    with pytest.raises(UserError, match="compressed packets are not supported"):
        read(path)


def test_streamed_write_equals_one_trace_and_a_truncated_file_is_one_sentence(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i % 3}",
            "pid": 1,
            "tid": 2,
            "ts": float(i * 10),
            "dur": 5.0,
            "args": {"i": i},
        }
        for i in range(200)
    ]
    out = tmp_path / "t.pftrace"
    chrome_to_pftrace(chrome(events), out)
    whole = Trace.FromString(out.read_bytes())  # the packets written one by one parse as one Trace
    assert sum(p.HasField("track_event") for p in whole.packet) == 400
    assert [s.args["debug.i"] for s in read(out).slices] == list(range(200))
    (tmp_path / "cut.pftrace").write_bytes(out.read_bytes()[:-7])
    with pytest.raises(UserError, match=r"cut.pftrace: not a readable Perfetto trace \(truncated or damaged near byte"):
        read(tmp_path / "cut.pftrace")


def test_a_profile_is_decoded_once_and_its_tables_reused_until_it_changes(tmp_path, monkeypatch):
    from neuronsweep.formats import pftrace_reader
    from neuronsweep.formats.profile_db import ProfileDB, patterns_from

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": float(i * 10), "dur": 5.0}
        for i in range(30)
    ]
    out = tmp_path / "t.pftrace"
    chrome_to_pftrace(chrome(events), out)

    def count(path):
        return ProfileDB(patterns_from({})).load(path).sql("SELECT count(*) FROM slice").fetchone()[0]

    assert count(out) == 30 and (tmp_path / ".t.pftrace.tables" / "stamp.json").is_file()
    decoded = []
    monkeypatch.setattr(pftrace_reader, "read", lambda p: decoded.append(p))  # would break a second decode
    assert count(out) == 30 and not decoded  # read back from the cached Parquet
    monkeypatch.undo()
    chrome_to_pftrace(chrome(events[:10]), out)  # the profile changed: its tables are made again
    assert count(out) == 10
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_tables_another_process_published_meanwhile_are_kept_for_its_readers(tmp_path):
    """Two processes decoding one profile at once (CI's pytest workers on a fresh clone): the one that
    finishes second must not remove the folder the first published and is reading from."""
    from neuronsweep.formats.table_cache import tables_for

    source = tmp_path / "p.json"
    source.write_text("{}")
    folder = tmp_path / ".p.json.tables"

    def make(out):
        (out / "t.parquet").write_text("ours")
        if not folder.exists():  # the other process publishes first, while we decode
            tables_for(source, lambda other: (other / "t.parquet").write_text("theirs"), tmp_path)

    assert tables_for(source, make, tmp_path) == folder
    assert (folder / "t.parquet").read_text() == "theirs"  # still there for its reader
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".p.json.tables", ".p.json.tables.lock", "p.json"]  # ours removed


@pytest.mark.parametrize("chunk", [1, 100, 4 << 20])  # bytes per decoded chunk: 1 is a packet at a time
def test_packets_written_otherwise_decode_the_same(chunk, tmp_path, monkeypatch):
    """What other writers do and ours does not: inline names and categories, several categories,
    packed category ids, a default track instead of track_uuid, a second sequence, a cleared state
    that reuses iids, a counter as an int, annotations of every scalar type, uint64 track uuids."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

    trace = Trace()
    big = 2**64 - 3

    def packet(seq, ts=None, flags=0):
        p = trace.packet.add()
        p.trusted_packet_sequence_id = seq
        if ts is not None:
            p.timestamp = ts
        if flags:
            p.sequence_flags = flags
        return p

    for uuid, name in ((big, "big track"), (5, "five"), (6, "counter")):
        p = trace.packet.add()
        p.track_descriptor.uuid, p.track_descriptor.name = uuid, name
        if uuid == 6:
            p.track_descriptor.counter.unit_name = ""
    p = packet(1, 10, TracePacket.SEQ_INCREMENTAL_STATE_CLEARED)
    p.interned_data.event_names.add(iid=1, name="first")
    p.interned_data.event_categories.add(iid=1, name="c1")
    p.interned_data.event_categories.add(iid=2, name="c2")
    p.interned_data.debug_annotation_names.add(iid=1, name="k")
    p.trace_packet_defaults.track_event_defaults.track_uuid = 5
    ev = p.track_event
    ev.type, ev.name_iid = TrackEvent.TYPE_SLICE_BEGIN, 1
    ev.category_iids.extend([1, 2])  # several categories (proto2: not packed)
    a = ev.debug_annotations.add(name_iid=1)
    a.uint_value = 2**63 + 1
    for value in (dict(int_value=-4), dict(double_value=0.25), dict(bool_value=False), dict(string_value="s")):
        ev.debug_annotations.add(name="inline", **value)
    p = packet(1, 20)
    p.track_event.type, p.track_event.track_uuid, p.track_event.name = TrackEvent.TYPE_INSTANT, big, "inline name"
    p.track_event.categories.extend(["x", "y"])
    p = packet(2, 25)  # another sequence: its own state, no default track needed (uuid given)
    p.track_event.type, p.track_event.track_uuid, p.track_event.name = TrackEvent.TYPE_SLICE_BEGIN, 6, "on 6"
    p = packet(2, 26)
    p.track_event.type, p.track_event.track_uuid = TrackEvent.TYPE_SLICE_END, 6
    p = packet(3, 27)
    p.track_event.type, p.track_event.track_uuid, p.track_event.counter_value = TrackEvent.TYPE_COUNTER, 6, -7
    p = packet(1, 30)
    p.track_event.type = TrackEvent.TYPE_SLICE_END  # on the default track
    p = packet(1, 40, TracePacket.SEQ_INCREMENTAL_STATE_CLEARED)
    p.interned_data.event_names.add(iid=1, name="second")  # iid 1 again, new meaning
    p.interned_data.event_categories.add(iid=3, name="c3")
    p.interned_data.event_categories.add(iid=4, name="c4")
    p.track_event.type, p.track_event.track_uuid, p.track_event.name_iid = TrackEvent.TYPE_INSTANT, 5, 1
    # packed category ids (field 3 as one LEN of varints), which the classes would re-encode unpacked
    event = TrackEvent(type=TrackEvent.TYPE_INSTANT, track_uuid=5, name="packed").SerializeToString()
    event += bytes([3 << 3 | 2, 2, 3, 4])
    raw = TracePacket(timestamp=50, trusted_packet_sequence_id=1).SerializeToString()
    raw += bytes([11 << 3 | 2, len(event)]) + event
    path = tmp_path / "other.pftrace"
    path.write_bytes(trace.SerializeToString() + bytes([1 << 3 | 2, len(raw)]) + raw)
    from neuronsweep.formats import pftrace_reader

    monkeypatch.setattr(pftrace_reader, "CHUNK", chunk)

    decoded = read(path)
    rows = [(s.track_uuid, s.ts, s.dur, s.name, s.category, s.depth) for s in decoded.slices]
    assert rows == [
        (5, 10, 20, "first", "c1,c2", 0),
        (big, 20, 0, "inline name", "x,y", 0),
        (6, 25, 1, "on 6", None, 0),
        (5, 40, 0, "second", None, 0),
        (5, 50, 0, "packed", "c3,c4", 0),
    ]
    assert decoded.slices.arg_key == ["debug.k"] + ["debug.inline"] * 4
    assert decoded.slices.arg_value == [2**63 + 1, -4, 0.25, False, "s"] and list(decoded.slices.arg_slice) == [0] * 5
    assert [(c.track_uuid, c.ts, c.value) for c in decoded.counters] == [(6, 27, -7.0)]
    assert decoded.tracks[big].name == "big track"


def test_track_events_are_the_bytes_the_protobuf_classes_write(tmp_path):
    """The writer encodes track events itself: parsing its file and serializing it again with the
    protobuf classes (fields in number order, canonical varints) must give the same bytes."""
    events = [
        {
            "ph": "X",
            "cat": ["cpu_op", "python"][i % 2],
            "name": f"op{i % 7}",
            "pid": 7,
            "tid": 8 + i % 3,
            "ts": 1e6 + i * 3.0005,
            "dur": [2.0, 40.0, -1][i % 3],
            "args": {
                "i": i,
                "neg": -i,
                "big": 2**63 + i,
                "f": i / 3,
                "b": i % 2 == 0,
                "s": "é" * (i % 3),
                "l": [i, [i]],
                "huge": 10**30,
            },
        }
        for i in range(300)
    ]
    events += [
        {"ph": "i", "name": "mark", "pid": 7, "tid": 8, "ts": 1e6 + 5},
        {"ph": "C", "name": "mem", "pid": 7, "ts": 1e6 + 7, "args": {"bytes": 4096, "frac": 0.5}},
    ]
    out = tmp_path / "t.pftrace"
    counts = chrome_to_pftrace(chrome(events), out)
    negative = {"count": 100, "first": "'op2' at ts 1000006.001"}  # named, not changed
    assert counts == {
        "slices": 200,
        "instants": 1,
        "counters": 2,
        "flows": 0,
        "overlapping": 80,  # the 40 us slices (1 in 3) span the next ones: kept whole, beside their thread
        "skipped": 0,
        "not_converted": {"complete events with a negative duration": negative},
    }
    data = out.read_bytes()
    assert Trace.FromString(data).SerializeToString() == data
    decoded = read(out)
    assert len(decoded.slices) == 201 and sorted(set(decoded.slices.name)) == ["mark"] + [f"op{k}" for k in range(7)]
    first = next(s for s in decoded.slices if s.name == "op1" and s.args["debug.i"] == 1)
    assert first.args["debug.neg"] == -1 and first.args["debug.big"] == str(2**63 + 1)  # beyond int64: text
    assert first.args["debug.s"] == "é" and first.args["debug.l"] == "[1, [1]]" and first.args["debug.b"] is False
    from neuronsweep.formats.profile_db import ProfileDB

    shown = (
        ProfileDB()
        .load(out)
        .sql("SELECT DISTINCT display_value FROM args WHERE key = 'debug.f' AND real_value IN (0, 1)")
        .fetchall()
    )
    assert sorted(shown) == [("0.0",), ("1.0",)]  # as Python writes them, like every other value


def test_protoscan_reads_every_field_and_a_repeated_scalar_keeps_its_last_value():
    import numpy as np

    from neuronsweep.formats import protoscan

    # two messages: {9: 1, 9: 300, 23: "ab", 44: 0.5 (fixed64)} and {} (empty)
    first = (
        bytes([9 << 3, 1, 9 << 3, 0xAC, 0x02, 0xBA, 0x01, 2]) + b"ab" + bytes([0xE1, 0x02]) + np.float64(0.5).tobytes()
    )
    buf = protoscan.padded(first)
    fields = protoscan.scan(buf, np.array([0, len(first)]), np.array([len(first), len(first)]))
    value, present = fields.last(9, 2)
    assert value.tolist() == [300, 0] and present.tolist() == [True, False]
    assert fields.last(44, 2)[0].view(np.float64)[0] == 0.5
    name = fields.where(23, protoscan.LEN)
    assert protoscan.text(first, fields.at[name], fields.value[name]) == ["ab"]
    with pytest.raises(protoscan.DecodeError):
        protoscan.scan(buf, np.array([0]), np.array([len(first) - 3]))  # a field past its message's end


def _stack_reference(events):
    """Per track and lane, the (ts ns, type, name) sequence a nesting stack emits for complete
    events, as written by hand: sorted by start, longer first; a slice that does not nest in the
    thread's first lane goes to the first lane where it does (a new one if none), whole."""
    from neuronsweep.formats.chrome_trace import exact_ns

    by_track = {}
    for i, e in enumerate(events):
        if e.get("ph") == "X":
            by_track.setdefault((e["pid"], e["tid"]), []).append((exact_ns(e["ts"]), exact_ns(e["dur"]), i))
    out = {}
    for key, slices in by_track.items():
        lanes = []  # per lane: [emitted, stack]
        for start, dur, i in sorted(slices, key=lambda s: (s[0], -(s[0] + s[1]), s[2])):
            lane = 0
            while lane < len(lanes):
                seq, stack = lanes[lane]
                while stack and stack[-1] <= start:
                    seq.append((stack.pop(), "END", None))
                if not stack or start + dur <= stack[-1]:
                    break
                lane += 1
            if lane == len(lanes):
                lanes.append(([], []))
            seq, stack = lanes[lane]
            seq.append((start, "BEGIN", events[i]["name"]))
            stack.append(start + dur)
        for lane, (seq, stack) in enumerate(lanes):
            out[(*key, lane)] = seq + [(t, "END", None) for t in reversed(stack)]
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [3, 1 << 18])  # rows streamed out of a sort at a time
def test_slices_nest_as_a_stack_emits_them(seed, chunk, tmp_path, monkeypatch):
    """Ends and begins at one time, zero-length slices, equal starts and a child outliving its parent,
    on several tracks: each track's packets (and its lanes' beside it) in the order a stack emits
    them (so in time order), no slice cut, whether the sort streams out a few rows at a time or all
    at once. Across tracks the file is not in time order: trace_processor sorts all events."""
    import random

    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

    from neuronsweep.formats import pftrace_writer as pftrace

    monkeypatch.setattr(pftrace, "CHUNK", chunk)
    rng = random.Random(seed)
    events = [
        {
            "ph": "X",
            "name": f"s{i}",
            "pid": 7,
            "tid": rng.choice([8, 9]),
            "ts": float(rng.randrange(12)),
            "dur": rng.choice([0.0, 0.5, 1.0, 2.0, 4.0, 1.0004]),
        }
        for i in range(rng.randrange(5, 80))
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(chrome(events)))
    out = tmp_path / "t.pftrace"
    chrome_to_pftrace(path, out)
    packets = Trace.FromString(out.read_bytes()).packet
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}

    def uuid(u):  # (tid, lane) of a thread's track or of a lane beside it
        td = tracks[u]
        if td.HasField("thread"):
            return td.thread.tid, 0
        return tracks[td.parent_uuid].thread.tid, int(td.name.rsplit(" ", 1)[1][:-1])

    names, got = {}, {}
    for p in packets:
        if not p.HasField("track_event"):
            continue
        names.update({n.iid: n.name for n in p.interned_data.event_names})
        ev = p.track_event
        kind = "BEGIN" if ev.type == TrackEvent.TYPE_SLICE_BEGIN else "END"
        got.setdefault((7, *uuid(ev.track_uuid)), []).append(
            (p.timestamp, kind, names[ev.name_iid] if kind == "BEGIN" else None)
        )
    want = _stack_reference(events)
    assert got == want and any(k[2] for k in want) == any(k[2] for k in got)


def test_a_trace_file_reads_the_same_in_batches_parsed_fast_or_by_the_loop(tmp_path, monkeypatch):
    """Batches Arrow types exactly (ints, bools, strings) and batches only the loop reads exactly (a
    null, a counter, a pid that is text, a list, a float or an int past 64 bits in the args) make the
    same file as reading the whole trace as dicts."""
    from neuronsweep.formats import chrome_trace, json_records

    quirks = [{"n": None}, {"l": [1, 2]}, {"f": 0.5}, {"big": 2**64}, {"cut": "a},{b"}, {"o": [{"x": 1}, {"y": 2}]}, {}]
    events = []
    for i in range(400):
        e = {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i % 5}",
            "pid": 1,
            "tid": i % 3,
            "ts": i * 1.5,
            "dur": [1.0, 5.0004, 0][i % 3],
            "args": {"i": -i, "s": 'é"}{', "b": i % 2 == 0},
        }
        if i % 50 == 49:
            e["args"].update(quirks[i // 50 % len(quirks)])
        if i % 97 == 0:
            e["pid"] = "Spans"
        events.append(e)
        if i % 61 == 0:
            events.append({"ph": "C", "name": "mem", "pid": 1, "ts": i * 1.5, "args": {"bytes": i, "frac": i / 7}})
        if i % 43 == 0:
            events.append({"ph": "i", "s": "g" if i % 2 else "t", "name": "mark", "pid": 1, "tid": 2, "ts": i * 1.5})
    events.append({"ph": "f", "name": "flow", "pid": 1, "tid": 1, "ts": 3.0, "id": 1})
    trace = chrome(events)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))

    used = []
    fast = chrome_trace.Events.add_table
    monkeypatch.setattr(chrome_trace.Events, "add_table", lambda self, *a: used.append(fast(self, *a)) or used[-1])
    monkeypatch.setattr(json_records, "BLOCK", 2048)  # about ten events a batch
    counts = chrome_to_pftrace(path, tmp_path / "file.pftrace")
    assert True in used and False in used
    assert counts == chrome_to_pftrace(trace, tmp_path / "dicts.pftrace")
    assert counts == {
        "slices": 400,
        "instants": 10,
        "counters": 14,
        "flows": 0,
        "flow_events": 1,
        "overlapping": 65,
        "skipped": 0,
    }
    assert (tmp_path / "file.pftrace").read_bytes() == (tmp_path / "dicts.pftrace").read_bytes()


def test_track_descriptors_and_constants_are_the_protobuf_classes_bytes(tmp_path):
    """The writer encodes every packet itself: descriptors of threads with negative and remapped
    ids, processes, counters, global instants and lanes beside a thread re-serialize to the same
    bytes with perfetto's classes, and its enum values are theirs."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

    from neuronsweep.formats import pftrace_writer as w

    events = [
        {"ph": "X", "name": "a", "pid": -5, "tid": -7, "ts": 1, "dur": 10},
        {"ph": "X", "name": "over", "pid": -5, "tid": -7, "ts": 5, "dur": 10},  # a lane beside the thread
        {"ph": "X", "name": "b", "pid": 2**40, "tid": "stream 7", "ts": 1, "dur": 2},
        {"ph": "i", "s": "p", "name": "p", "pid": 3, "ts": 2},
        {"ph": "i", "s": "g", "name": "g", "pid": 3, "ts": 2},
        {"ph": "C", "name": "mem", "pid": 3, "ts": 3, "args": {"bytes": 7}},
    ]
    out = tmp_path / "t.pftrace"
    chrome_to_pftrace(chrome(events), out)
    data = out.read_bytes()
    assert Trace.FromString(data).SerializeToString() == data
    kinds = (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_INSTANT, TrackEvent.TYPE_COUNTER)
    assert (w.BEGIN, w.END, w.INSTANT, w.COUNTER) == kinds
    flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    assert w.CLEARED == bytes([flags]) and w.NEEDS_STATE == TracePacket(sequence_flags=2).SerializeToString()
    packets = Trace.FromString(data).packet
    threads = {p.track_descriptor.thread.tid for p in packets if p.track_descriptor.HasField("thread")}
    assert -7 in threads and sum(p.track_descriptor.HasField("counter") for p in packets) == 1


@pytest.mark.parametrize("null", [{"n": None}, {"n": [1, None]}, {"n": {"x": None}}], ids=["arg", "in-list", "nested"])
def test_a_json_null_where_every_row_has_the_key_is_read_as_the_loop_reads_it(tmp_path, null):
    """The fast path looks for `null` in the text only where Arrow's columns hold a null: a null
    nested in a key every event has (and every key the fast path names present) must be found there
    too: struct children, list values."""
    usual = (
        {"n": [1, 2]} if isinstance(null["n"], list) else {"n": {"x": 1}} if isinstance(null["n"], dict) else {"n": 1}
    )
    events = [
        {
            "ph": "X",
            "cat": "op",
            "name": "op",
            "pid": 1,
            "tid": 1,
            "ts": 10 * i,
            "dur": 5,
            "args": null if i == 3 else usual,
        }
        for i in range(8)
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))  # no metadata: it has no cat (a null column)
    chrome_to_pftrace(path, tmp_path / "file.pftrace")
    chrome_to_pftrace(events, tmp_path / "dicts.pftrace")
    assert (tmp_path / "file.pftrace").read_bytes() == (tmp_path / "dicts.pftrace").read_bytes()


def test_a_chrome_trace_that_is_not_json_is_one_sentence(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    with pytest.raises(UserError, match=r"trace.json is not a readable Chrome trace \(.*cut short\)"):
        chrome_to_pftrace(path, tmp_path / "t.pftrace")


@pytest.mark.parametrize("chunk", [1, 64, 4 << 20])
def test_begin_and_end_pair_as_a_stack_pairs_them_across_chunks(chunk, tmp_path, monkeypatch):
    """Random nesting on three tracks, instants and counters between, read a packet, a few packets or
    the whole file at a time (open slices carried over): each slice's duration, depth and parent are
    those a stack per track gives; an END with nothing open is one sentence."""
    import random

    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

    from neuronsweep.formats import pftrace_reader

    rng = random.Random(7)
    trace, expected, stacks, t = Trace(), [], {1: [], 2: [], 3: []}, 0
    for _ in range(600):
        track, t = rng.choice([1, 2, 3]), t + rng.randrange(3)
        kind = rng.choice(
            [
                TrackEvent.TYPE_SLICE_BEGIN,
                TrackEvent.TYPE_SLICE_BEGIN,
                TrackEvent.TYPE_SLICE_END,
                TrackEvent.TYPE_SLICE_END,
                TrackEvent.TYPE_INSTANT,
                TrackEvent.TYPE_COUNTER,
            ]
        )
        if kind == TrackEvent.TYPE_SLICE_END and not stacks[track]:
            continue
        p = trace.packet.add(timestamp=t, trusted_packet_sequence_id=1)
        p.track_event.type, p.track_event.track_uuid = kind, track
        if kind == TrackEvent.TYPE_COUNTER:
            p.track_event.double_counter_value = 1.0
        elif kind == TrackEvent.TYPE_SLICE_END:
            expected[stacks[track].pop()][2] = t
        else:
            p.track_event.name = f"s{len(expected)}"
            stack = stacks[track]
            expected.append(
                [track, t, t if kind == TrackEvent.TYPE_INSTANT else None, len(stack), stack[-1] if stack else -1]
            )
            if kind == TrackEvent.TYPE_SLICE_BEGIN:
                stack.append(len(expected) - 1)
    path = tmp_path / "nested.pftrace"
    path.write_bytes(trace.SerializeToString())
    monkeypatch.setattr(pftrace_reader, "CHUNK", chunk)
    s = read(path).slices
    got = [
        [s.track_uuid[i], s.ts[i], s.ts[i] + s.dur[i] if s.dur[i] >= 0 else None, s.depth[i], s.parent[i]]
        for i in range(len(s))
    ]
    assert got == expected and any(e[2] is None for e in expected) and max(e[3] for e in expected) >= 3

    p = trace.packet.add(timestamp=t + 1, trusted_packet_sequence_id=1)
    p.track_event.type, p.track_event.track_uuid = TrackEvent.TYPE_SLICE_END, 9
    path.write_bytes(trace.SerializeToString())
    with pytest.raises(UserError, match=f"a slice END at ts={t + 1} on track 9 has no open slice"):
        read(path)


def test_the_lanes_carried_from_chunk_to_chunk_are_those_of_one_pass(monkeypatch):
    """Slices cut into chunks anywhere: each slice's lane equals one pass over all of them, both
    where the slices already nest (found with numpy) and where some do not (the loop)."""
    import random

    import numpy as np

    from neuronsweep.formats import pftrace_writer as pftrace

    paths = []
    nested = pftrace._nested
    monkeypatch.setattr(pftrace, "_nested", lambda *a: paths.append(nested(*a)) or paths[-1])
    for seed in range(400):
        rng = random.Random(seed)
        if seed % 2:  # dyadic intervals never partly overlap: they nest
            rows = [
                (rng.randrange(2), s, s + rng.choice([size, 0]))
                for size in (2 ** rng.randrange(5) for _ in range(40))
                for s in [rng.randrange(0, 64, size)]
            ]
        else:
            rows = [
                (rng.randrange(3), s, s + rng.choice([0, 1, 2, 5, 10])) for s in (rng.randrange(30) for _ in range(40))
            ]
        rows.sort(key=lambda r: (r[0], r[1], -r[2]))
        track, start, end = (np.array(c, np.int64) for c in zip(*rows))
        want, lanes, current = [], [], None
        for t, b, f in rows:
            if t != current:
                lanes, current = [], t
            k = 0
            while k < len(lanes):
                while lanes[k] and lanes[k][-1] <= b:
                    lanes[k].pop()
                if not lanes[k] or f <= lanes[k][-1]:
                    break
                k += 1
            if k == len(lanes):
                lanes.append([])
            lanes[k].append(f)
            want.append(k)
        lanes, got, lo = pftrace._Lanes(), [], 0
        while lo < len(rows):
            hi = min(len(rows), lo + rng.randrange(1, 12))
            cls = np.full(hi - lo, pftrace._Lanes.SLICE)
            got += lanes(cls, np.arange(lo, hi), start[lo:hi], end[lo:hi], track[lo:hi]).tolist()
            lo = hi
        assert got == want, rows
    assert True in paths and False in paths


def test_flow_events_bound_in_chunks_with_numpy_are_bound_as_one_pass_of_the_loop(monkeypatch):
    """Flow events among slices that nest, cut into chunks anywhere: the slices they bind to (the
    innermost one open at their time, or the next one to begin) and those left unbound are the
    stack loop's over all rows at once."""
    import random

    import numpy as np

    from neuronsweep.formats import pftrace_writer as pftrace

    fast = []
    bind = pftrace._Lanes._bind
    monkeypatch.setattr(pftrace._Lanes, "_bind", lambda self, *a: fast.append(1) or bind(self, *a))
    L = pftrace._Lanes
    for seed in range(300):
        rng = random.Random(seed)
        rows = [
            (rng.randrange(2), s, L.SLICE, s + rng.choice([size, 0]))
            for size in (2 ** rng.randrange(5) for _ in range(30))
            for s in [rng.randrange(0, 64, size)]
        ]
        rows += [
            (rng.randrange(2), t, c, t)
            for t, c in ((rng.randrange(70), rng.choice([L.NEXT, L.ENCLOSING])) for _ in range(15))
        ]
        rows = [(*r, i) for i, r in enumerate(rows)]
        rows.sort(key=lambda r: (r[0], r[1], r[2], -r[3], r[4]))
        track, start, cls, end, seq = (np.array(c, np.int64) for c in zip(*rows))
        one = L()
        one._loop(cls, seq, start, end, track, np.full(len(rows), -1), 0, len(rows))
        one.finish()
        chunked, lo = L(), 0
        while lo < len(rows):
            hi = min(len(rows), lo + rng.randrange(1, 20))
            chunked(cls[lo:hi], seq[lo:hi], start[lo:hi], end[lo:hi], track[lo:hi])
            lo = hi
        chunked.finish()
        bound = sorted(map(tuple, chunked.pairs().tolist()))
        assert bound == sorted(one.bound) and sorted(chunked.unbound) == sorted(one.unbound), rows
    assert len(fast) > 100  # most chunks bound their flow events with numpy


def test_a_trace_too_large_for_the_memory_share_is_sorted_again_with_more(tmp_path, monkeypatch, capsys):
    """DuckDB's sort needs more memory the more events there are: where its share is too small the
    file is written again with twice the share (the same bytes); at half the host's memory it is one
    sentence, and no temporary folder is left either way."""
    from neuronsweep.formats import chrome_trace

    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i % 7}",
            "pid": 1,
            "tid": i % 4,
            "ts": float(i // 3),
            "dur": 2.5,
            "args": {"i": i, "s": "x" * (i % 5)},
        }
        for i in range(30_000)
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(chrome(events)))
    assert chrome_to_pftrace(path, tmp_path / "roomy.pftrace")["slices"] == 30_000
    monkeypatch.setattr(chrome_trace, "MEMORY_MB", 1)
    monkeypatch.setattr(chrome_trace, "SORT_MB", 1)
    chrome_to_pftrace(path, tmp_path / "tight.pftrace")
    said = capsys.readouterr().err
    assert "trace.json: storing" in said and "needs more than 1 MB; again with 2 MB" in said
    assert "tight.pftrace: sorting 30000 trace events needs more than" in said
    assert (tmp_path / "tight.pftrace").read_bytes() == (tmp_path / "roomy.pftrace").read_bytes()

    monkeypatch.setattr(chrome_trace, "_cap_mb", lambda: 1)
    with pytest.raises(
        UserError,
        match=r"trace.json: storing \d+ trace events needs more than 1 MB of memory, "
        r"half of this host's; convert the trace on a host with more memory",
    ):
        chrome_to_pftrace(path, tmp_path / "fail.pftrace")
    assert not (tmp_path / "fail.pftrace").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(chrome_trace.SPILL_PREFIX)]


def test_a_killed_writers_event_table_is_removed_by_the_next_writer(tmp_path):
    """The events wait in a folder beside the output; a SIGKILL skips its removal, so the next
    writer in that folder removes it (a live writer's is left alone), and its own goes when it ends."""
    import os

    from neuronsweep.formats import chrome_trace

    dead = tmp_path / f"{chrome_trace.SPILL_PREFIX}999999999.abc.tmp"
    live = tmp_path / f"{chrome_trace.SPILL_PREFIX}{os.getppid()}.abc.tmp"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "spill.block").write_bytes(b"x" * 100)
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}]
    chrome_to_pftrace(chrome(events), tmp_path / "t.pftrace")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".trace")) == [live.name]
    (tmp_path / "bad.json").write_text('{"traceEvents": [{"ph": "X"')
    with pytest.raises(UserError):
        chrome_to_pftrace(tmp_path / "bad.json", tmp_path / "bad.pftrace")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".trace")) == [live.name]


def _rows(decoded):
    s = decoded.slices
    return [(x.track_uuid, x.ts, x.dur, x.name, x.category, x.depth, x.parent, x.args) for x in s]


def test_packets_framed_by_the_c_parser_or_walked_give_the_same_trace(tmp_path, monkeypatch):
    """The C parser frames a plain file (the walk is not used); a file whose headers are written long
    (a padded length varint, a top-level field that is not a packet: both valid protobuf) is walked,
    and both read as the same slices."""
    from neuronsweep.formats import pftrace_reader

    events = [
        {"ph": "X", "name": f"op{i % 3}", "pid": 7, "tid": 8, "ts": i, "dur": 0.5, "args": {"i": i}} for i in range(50)
    ]
    (tmp_path / "t.json").write_text(json.dumps(chrome(events)))
    plain = tmp_path / "plain.pftrace"
    chrome_to_pftrace(tmp_path / "t.json", plain)
    data = plain.read_bytes()
    assert data[0] == 0x0A and data[1] < 0x80
    long = bytes([0x0A, data[1] | 0x80, 0x00]) + data[2:] + bytes([2 << 3, 5])  # length 0x05 as 0x85 0x00; field 2
    (tmp_path / "long.pftrace").write_bytes(long)
    assert pftrace_reader._frames(long) is None and pftrace_reader._frames(data) is not None

    walked = read(tmp_path / "long.pftrace")

    def no_walk(*args):
        raise AssertionError("a plain file is framed by the C parser")

    monkeypatch.setattr(pftrace_reader, "_walked_chunks", no_walk)
    framed = read(plain)
    assert _rows(framed) == _rows(walked) and len(framed.slices) == 50
    assert [s.args["debug.i"] for s in framed.slices] == list(range(50))


def test_texts_decodes_each_distinct_payload_once_and_a_hash_collision_the_slow_way(monkeypatch):
    import numpy as np

    from neuronsweep.formats import protoscan

    items = [b"", b"a", b"a\x00", b"abcdefgh", b"abcdefghi", b"p" * 16, b"q" * 17, "\u00e9".encode(), b"\xff", b"a"]
    raw = b"".join(items)
    at = np.cumsum([0] + [len(i) for i in items])[:-1]
    length = np.array([len(i) for i in items])
    expected = protoscan.text(raw, at, length)
    calls = []

    def counted(s):
        calls.append(s)
        return s.upper()

    got = protoscan.texts(protoscan.padded(raw), raw, at, length, counted)
    assert got.tolist() == [s.upper() for s in expected] and len(calls) == len(set(expected))
    monkeypatch.setattr(protoscan, "_MIX", [np.uint64(0)] * 3)  # every payload hashes alike: told apart anyway
    assert protoscan.texts(protoscan.padded(raw), raw, at, length).tolist() == expected
