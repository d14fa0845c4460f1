"""Chrome trace -> .pftrace with the perfetto classes, read back with our own decoder."""

from __future__ import annotations

import json

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket

from neuronsweep.analysis.pftrace_reader import read
from neuronsweep.errors import UserError
from neuronsweep.pftrace import chrome_to_pftrace


def chrome(events):
    meta = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}}]
    return {"traceEvents": meta + events}


def test_nested_slices_args_instants_counters_round_trip(tmp_path):
    trace = chrome([
        {"ph": "X", "cat": "user_annotation", "name": "exec_2", "pid": 7, "tid": 8, "ts": 100.0, "dur": 50.0,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::matmul", "pid": 7, "tid": 8, "ts": 110.0, "dur": 30.0,
         "args": {"Input Dims": [[2, 3], [3, 4]], "Sequence number": 0}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": 111.0, "dur": 29.0004,
         "args": {"ratio": 0.5, "flag": True}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 9, "ts": 105.0, "dur": 10.0},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 90.0, "dur": 100.0},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 191.0},
        {"ph": "C", "name": "mem", "pid": 7, "ts": 120.0, "args": {"bytes": 4096}},
    ])
    out = tmp_path / "t.pftrace"
    counts = chrome_to_pftrace(trace, out)
    assert counts == {"slices": 5, "instants": 1, "counters": 1, "skipped": 0}

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
    assert decoded.slices[mm.parent] is matmul and decoded.slices[matmul.parent] is exec_
    assert mm.ts + mm.dur <= matmul.ts + matmul.dur  # 111+29.0004 µs rounds past its parent: clamped
    assert matmul.args == {"debug.Input Dims": json.dumps([[2, 3], [3, 4]]), "debug.Sequence number": 0}
    assert mm.args == {"debug.ratio": 0.5, "debug.flag": True}
    assert mm.category == "cpu_op"
    assert all(s.dur >= 0 for s in decoded.slices)
    instant = by_name["Record Window End"][0]
    assert instant.dur == 0 and instant.ts == 191_000
    assert [(c.ts, c.value) for c in decoded.counters] == [(120_000, 4096.0)]


def test_names_are_interned_once(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": float(i * 10), "dur": 5.0}
              for i in range(20)]
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
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 3}", "pid": 1, "tid": 2, "ts": float(i * 10), "dur": 5.0,
               "args": {"i": i}} for i in range(200)]
    out = tmp_path / "t.pftrace"
    chrome_to_pftrace(chrome(events), out)
    whole = Trace.FromString(out.read_bytes())  # the packets written one by one parse as one Trace
    assert sum(p.HasField("track_event") for p in whole.packet) == 400
    assert [s.args["debug.i"] for s in read(out).slices] == list(range(200))
    (tmp_path / "cut.pftrace").write_bytes(out.read_bytes()[:-7])
    with pytest.raises(UserError, match=r"cut.pftrace: not a readable Perfetto trace \(truncated or damaged near byte"):
        read(tmp_path / "cut.pftrace")


def test_a_profile_is_decoded_once_and_its_tables_reused_until_it_changes(tmp_path, monkeypatch):
    from neuronsweep.analysis import pftrace_reader
    from neuronsweep.analysis.profile_db import ProfileDB, patterns_from

    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": float(i * 10), "dur": 5.0}
              for i in range(30)]
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
