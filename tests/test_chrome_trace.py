"""Chrome traces converted exactly: every stamp, every duration, B/E pairs, flows, gzip, hostile ids,
and the converter as a command. Sources are checked against their own text, read independently."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from helpers import BIN, DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuronsweep.errors import UserError
from neuronsweep.formats.pftrace_writer import chrome_to_pftrace
from neuronsweep.formats.profile_db import ProfileDB

EPOCH_US = 1_712_183_498_000_000  # Kineto's epoch microseconds: a float64 holds only 256 ns steps here


def us(ns: int) -> str:
    """Nanoseconds as a Chrome trace's decimal microseconds, written as text (never through a float)."""
    whole, frac = divmod(ns, 1000)
    return f"{whole}.{frac:03d}" if frac else str(whole)


def write(path: Path, events: list[str], gz: bool = False) -> Path:
    text = '{"traceEvents": [' + ",\n".join(events) + "]}"
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def tables(pftrace: Path) -> ProfileDB:
    return ProfileDB().load(pftrace)


@st.composite
def traces(draw):
    """A trace with epoch-scale stamps (whole and fractional microseconds): per thread, slices back to
    back, nested and overlapping; B/E pairs; flows from one slice to another; counters and instants."""
    events, expect, stamps, flows = [], defaultdict(lambda: [0, 0]), [], 0
    base = EPOCH_US * 1000 + draw(st.integers(0, 10**9))
    threads = draw(st.integers(1, 3))
    starts = []  # (thread, ts, dur) of slices that can take a flow (dur > 0)
    for tid in range(1, threads + 1):
        t = base
        for _i in range(draw(st.integers(1, 25))):
            shape = draw(st.sampled_from(["after", "touching", "inside", "overlap", "same"]))
            dur = draw(st.integers(0, 5000)) * draw(st.sampled_from([1, 1000]))  # ns, or whole us
            if shape == "after":
                t += draw(st.integers(1, 3000))
            elif shape == "overlap" and starts:
                t -= min(draw(st.integers(1, 2000)), t - base)
            elif shape == "inside":
                dur = 0 if not dur else dur // 3
            name = f"x{draw(st.integers(0, 4))}"
            events.append(f'{{"ph":"X","name":"{name}","pid":1,"tid":{tid},"ts":{us(t)},"dur":{us(dur)}}}')
            expect[name][0] += 1
            expect[name][1] += dur
            stamps.append((name, t))
            if dur:
                starts.append((tid, t, dur))
            if shape == "touching":
                t += dur  # the next slice starts where this one ends
        for k in range(draw(st.integers(0, 3))):  # B/E pairs nested inside each other, after the slices
            t += draw(st.integers(1, 100))
            events.append(f'{{"ph":"B","name":"b{k}","pid":2,"tid":{tid},"ts":{us(t)}}}')
            stamps.append((f"b{k}", t))
            inner = draw(st.integers(1, 2000))  # at one time, file order decides: shuffled, it would not pair
            events.append(f'{{"ph":"E","pid":2,"tid":{tid},"ts":{us(t + inner)}}}')
            t += inner
            expect[f"b{k}"][0] += 1
            expect[f"b{k}"][1] += inner
    for fid in range(draw(st.integers(0, 3)) if starts else 0):  # a flow runs forward in time
        (a_tid, a_ts, _), (b_tid, b_ts, _) = sorted(
            (draw(st.sampled_from(starts)), draw(st.sampled_from(starts))), key=lambda s: s[1]
        )
        if a_ts == b_ts:
            continue
        events.append(f'{{"ph":"s","id":{fid},"cat":"ac2g","name":"ac2g","pid":1,"tid":{a_tid},"ts":{us(a_ts)}}}')
        events.append(
            f'{{"ph":"f","bp":"e","id":{fid},"cat":"ac2g","name":"ac2g","pid":1,"tid":{b_tid},"ts":{us(b_ts)}}}'
        )
        flows += 1
    counters = [base + draw(st.integers(0, 10**6)) for _ in range(draw(st.integers(0, 3)))]
    events += [f'{{"ph":"C","name":"mem","pid":1,"ts":{us(t)},"args":{{"bytes":{i}}}}}' for i, t in enumerate(counters)]
    instants = [base + draw(st.integers(0, 10**6)) for _ in range(draw(st.integers(0, 3)))]
    events += [f'{{"ph":"i","s":"t","name":"mark","pid":1,"tid":1,"ts":{us(t)}}}' for t in instants]
    order = draw(st.permutations(range(len(events))))
    return [events[i] for i in order], dict(expect), stamps, flows, counters, instants


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces(), gz=st.booleans(), chunk=st.sampled_from([3, 17, None]))
def test_every_stamp_count_and_duration_survives_to_the_nanosecond(trace, gz, chunk, tmp_path_factory):
    """Per name, the count and total duration of slices; every stamp of slices, instants and counters;
    every flow: as the source says, whether the sort streams out a few rows at a time or all at once."""
    from neuronsweep.formats import pftrace_writer

    events, expect, stamps, flows, counters, instants = trace
    tmp = tmp_path_factory.mktemp("t")
    default = pftrace_writer.CHUNK
    pftrace_writer.CHUNK = chunk or default
    try:
        counts = chrome_to_pftrace(write(tmp / "trace.json", events, gz), tmp / "t.pftrace")
    finally:
        pftrace_writer.CHUNK = default
    db = tables(tmp / "t.pftrace")
    got = db.sql("SELECT name, count(*), sum(dur)::BIGINT FROM slice WHERE name <> 'mark' GROUP BY name").fetchall()
    assert {n: [c, d] for n, c, d in got} == {n: list(v) for n, v in expect.items()}
    assert Counter(db.sql("SELECT name, ts FROM slice WHERE name <> 'mark'").fetchall()) == Counter(stamps)
    assert sorted(t for (t,) in db.sql("SELECT ts FROM slice WHERE name = 'mark'").fetchall()) == sorted(instants)
    assert sorted(t for (t,) in db.sql("SELECT ts FROM counter").fetchall()) == sorted(counters)
    assert counts["flows"] == flows == db.sql("SELECT count(*) FROM flow").fetchone()[0]
    assert "not_converted" not in counts


def convert(tmp: Path, name: str, events: list[str]) -> tuple[dict, ProfileDB]:
    counts = chrome_to_pftrace(write(tmp / f"{name}.json", events), tmp / f"{name}.pftrace")
    return counts, tables(tmp / f"{name}.pftrace")


def test_the_reproductions_of_the_issue(tmp_path):
    """Epoch stamps keep their nanoseconds; back-to-back slices stay siblings whole; slices that
    overlap on one thread keep their whole duration on a track beside it, counted."""
    _, db = convert(tmp_path, "a", ['{"ph":"X","name":"e","pid":1,"tid":1,"ts":1666149715033200,"dur":10}'])
    assert db.sql("SELECT ts, dur FROM slice").fetchall() == [(1666149715033200000, 10000)]
    x = '{{"ph":"X","name":"{}","pid":1,"tid":1,"ts":{},"dur":{}}}'.format
    _, db = convert(tmp_path, "b", [x("a", "1712183498123456.1", "0.1"), x("b", "1712183498123456.2", "0.1")])
    rows = db.sql("SELECT name, ts, dur, depth FROM slice ORDER BY ts").fetchall()
    assert rows == [("a", 1712183498123456100, 100, 0), ("b", 1712183498123456200, 100, 0)]
    _, db = convert(tmp_path, "c", [x("A", 1679055439000001, 10), x("B", 1679055439000011, 1000000)])
    rows = db.sql("SELECT name, dur, depth, track_id FROM slice ORDER BY ts").fetchall()
    assert rows == [("A", 10_000, 0, 1), ("B", 1_000_000_000, 0, 1)]  # siblings, B whole
    counts, db = convert(tmp_path, "d", [x("collective", 1679055439000000, 500), x("frame", 1679055438999900, 300)])
    rows = db.sql("SELECT s.name, s.dur, t.name FROM slice s JOIN track t ON s.track_id = t.id ORDER BY s.ts")
    assert rows.fetchall() == [("frame", 300_000, "1/1"), ("collective", 500_000, "1/1 (overlapping 1)")]
    assert counts["overlapping"] == 1


def test_real_torch_profiler_traces_convert_exactly(tmp_path):
    """Kineto's own files (tests/data/chrome): per name, the count and total duration in the slice
    table equal the file's, read with exact decimals; its forward-to-backward flows are flow rows."""
    for name in ("eager_backward.json", "compiled_threads.json.gz"):
        src = DATA / "chrome" / name
        opener = gzip.open if name.endswith(".gz") else open
        with opener(src, "rb") as f:
            events = json.loads(f.read(), parse_float=Decimal)["traceEvents"]
        want = defaultdict(lambda: [0, 0])
        for e in events:
            if e.get("ph") == "X":
                want[e["name"]][0] += 1
                want[e["name"]][1] += int(Decimal(str(e["dur"])) * 1000)
        counts = chrome_to_pftrace(src, tmp_path / f"{name}.pftrace")
        db = tables(tmp_path / f"{name}.pftrace")
        got = db.sql("SELECT name, count(*), sum(dur)::BIGINT FROM slice GROUP BY name").fetchall()
        got = {n: [c, d] for n, c, d in got}
        assert {n: got.get(n) for n in want} == want
        first = min((e for e in events if e.get("ph") == "X"), key=lambda e: Decimal(str(e["ts"])))
        assert db.sql("SELECT min(ts) FROM slice WHERE dur > 0").fetchone()[0] == int(Decimal(str(first["ts"])) * 1000)
        flows = sum(e.get("ph") == "f" for e in events)
        assert counts["flows"] == flows == db.sql("SELECT count(*) FROM flow").fetchone()[0]
        assert "not_converted" not in counts
    assert flows == 0 and counts["slices"] > 10  # the compiled trace: string pids and tids made threads
    tracks = dict(db.sql("SELECT name, type FROM track").fetchall())
    assert tracks["Spans/PyTorch Profiler"] == "thread_track"


def _everything(db: ProfileDB) -> dict:
    """A converted trace as sets of rows: slices, their args (typed), flows, tracks."""
    slices = "SELECT s.id, s.ts, s.dur, s.name, s.depth, t.name AS track FROM slice s JOIN track t ON s.track_id = t.id"
    return {
        "slices": Counter(db.sql(f"SELECT ts, dur, name, depth, track FROM ({slices})").fetchall()),
        "args": Counter(
            db.sql(
                "SELECT s.ts, s.name, a.key, a.value_type, a.display_value FROM slice s JOIN args a USING (arg_set_id)"
            ).fetchall()
        ),
        "flows": Counter(
            db.sql(
                f"SELECT o.ts, o.name, i.ts, i.name FROM flow f JOIN ({slices}) o ON f.slice_out = o.id "
                f"JOIN ({slices}) i ON f.slice_in = i.id"
            ).fetchall()
        ),
    }


def test_torch_profilers_list_args_and_flows_take_the_columnar_path_and_match_the_loop(tmp_path, monkeypatch):
    """Kineto's ops carry lists ("Input Dims": [[4, 32, 64], [], []]) and its traces flows; both are
    read by Arrow's columns now (the per-event loop cost 3 us an event), and what is written equals
    what the loop writes: every slice, every arg with its type and JSON text, every flow."""
    from neuronsweep.formats import chrome_trace

    src = DATA / "chrome" / "eager_backward.json"
    monkeypatch.setattr(chrome_trace, "LOOP_BYTES", 2048)  # this file is small: halve its batch further
    looped = []
    loop = chrome_trace.Events.add_dicts
    monkeypatch.setattr(
        chrome_trace.Events, "add_dicts", lambda self, ev, *a: looped.append(len(ev)) or loop(self, ev, *a)
    )
    chrome_to_pftrace(src, tmp_path / "columns.pftrace")
    events = json.loads(src.read_text())["traceEvents"]
    assert sum(looped) < len(events) / 10  # the few Arrow cannot read exactly (text pids), and their neighbours
    assert any(isinstance(v, list) for e in events for v in (e.get("args") or {}).values())
    monkeypatch.setattr(chrome_trace.Events, "add_table", lambda self, t, raw: False)
    chrome_to_pftrace(src, tmp_path / "loop.pftrace")
    columns, loop_only = (
        _everything(tables(tmp_path / "columns.pftrace")),
        _everything(tables(tmp_path / "loop.pftrace")),
    )
    assert columns == loop_only
    assert any(k == "debug.Input Dims" and v.startswith("[[") for _, _, k, _, v in columns["args"])
    assert len(columns["flows"]) == sum(e.get("ph") == "f" for e in events) > 0


def test_stamps_finer_than_a_nanosecond_switch_the_columns_to_nine_places_once(tmp_path, monkeypatch):
    """Stamps are parsed with three places (Kineto's); the first batch with a digit below the
    nanosecond's is parsed again with nine, and so is every batch after it: no event goes to the
    loop, one parse is repeated, and the nanoseconds (rounded half to even) are the loop's."""
    from neuronsweep.formats import chrome_trace, json_records

    monkeypatch.setattr(json_records, "BLOCK", 2048)  # about twenty events a batch
    events = [
        {"ph": "X", "cat": "op", "name": f"op{i % 3}", "pid": 1, "tid": 1, "ts": f"@{i}", "dur": "@d"}
        for i in range(200)
    ]
    text = json.dumps({"traceEvents": events})
    for i in range(200):  # three places for the first 60 events, then six and four: half a ns, to even
        ts = f"1712183498{10 * i:06d}.{i:03d}" + ("" if i < 60 else "500")
        text = text.replace(f'"@{i}"', ts, 1).replace('"@d"', "2.5" if i < 60 else "1.0025", 1)
    path = tmp_path / "trace.json"
    path.write_text(text)
    parses, looped = [], []
    read_json, loop = chrome_trace.pj.read_json, chrome_trace.Events.add_dicts
    monkeypatch.setattr(chrome_trace.pj, "read_json", lambda *a, **k: parses.append(1) or read_json(*a, **k))
    monkeypatch.setattr(chrome_trace.Events, "add_dicts", lambda self, *a: looped.append(1) or loop(self, *a))
    chrome_to_pftrace(path, tmp_path / "columns.pftrace")
    batches = sum(1 for _ in json_records.quick_split(path, chrome_trace.TRACE_EVENTS))
    assert not looped and len(parses) == batches + 1
    monkeypatch.setattr(chrome_trace.Events, "add_table", lambda self, t, raw: False)
    chrome_to_pftrace(path, tmp_path / "loop.pftrace")
    columns, loop_only = (_everything(tables(tmp_path / f"{n}.pftrace")) for n in ("columns", "loop"))
    assert columns == loop_only
    durs, stamps = Counter(), set()
    for (ts, dur, *_), count in columns["slices"].items():
        durs[dur] += count
        stamps.add(ts)
    assert durs == {2500: 60, 1002: 140}
    assert {1712183498000590059, 1712183498000610062} <= stamps  # ...610.0615 us: 61.5 ns, to even


def test_begin_end_pairs_unfinished_and_unmatched(tmp_path):
    events = [
        '{"ph":"B","name":"outer","pid":1,"tid":1,"ts":10,"args":{"from_b":1}}',
        '{"ph":"B","name":"inner","pid":1,"tid":1,"ts":12}',
        '{"ph":"E","pid":1,"tid":1,"ts":15,"args":{"from_e":2}}',
        '{"ph":"E","pid":1,"tid":1,"ts":19}',
        '{"ph":"E","pid":1,"tid":1,"ts":20}',
        '{"ph":"B","name":"open","pid":1,"tid":1,"ts":21}',
    ]
    counts = chrome_to_pftrace(write(tmp_path / "t.json", events), tmp_path / "t.pftrace")
    db = tables(tmp_path / "t.pftrace")
    rows = db.sql("SELECT name, ts, dur, depth FROM slice ORDER BY ts").fetchall()
    assert rows == [("outer", 10_000, 9_000, 0), ("inner", 12_000, 3_000, 1), ("open", 21_000, -1, 0)]
    args = dict(db.sql("SELECT key, int_value FROM args").fetchall())
    assert args == {"debug.from_e": 2, "debug.from_b": 1}
    assert counts["unfinished"] == 1
    assert counts["not_converted"] == {"E events with no B open on their thread": {"count": 1, "first": "one at ts 20"}}


def test_hostile_ids_values_and_stamps_are_mapped_or_named(tmp_path, capfd):
    events = [
        '{"ph":"X","name":"big","pid":1099511627776,"tid":1180591620717411303424,"ts":1,"dur":2}',
        '{"ph":"X","name":"stream","pid":0,"tid":"stream 7","ts":1,"dur":2}',
        '{"ph":"X","name":"neg","pid":0,"tid":1,"ts":5,"dur":-3}',
        '{"ph":"X","name":"text ts","pid":0,"tid":1,"ts":"12.5","dur":1}',
        '{"ph":"X","name":"bad ts","pid":0,"tid":1,"ts":"soon","dur":1}',
        '{"ph":"C","name":"mem","pid":0,"ts":3,"args":{"bytes":"lots","free":7}}',
        '{"ph":"b","name":"async","pid":0,"tid":1,"ts":4,"id":1}',
    ]
    counts = chrome_to_pftrace(write(tmp_path / "t.json", events), tmp_path / "t.pftrace")
    said = capfd.readouterr().err
    db = tables(tmp_path / "t.pftrace")
    threads = db.sql(
        "SELECT s.name, t.name, t.utid, t.upid FROM slice s JOIN track t ON s.track_id = t.id ORDER BY s.name"
    ).fetchall()
    assert threads[0][:2] == ("big", "1099511627776/1180591620717411303424") and threads[0][2] < 2**63
    assert threads[0][3] < 2**31
    assert threads[1][:2] == ("stream", "0/stream 7") and isinstance(threads[1][2], int)
    assert threads[2][:2] == ("text ts", "0/1")
    kept = db.sql(
        "SELECT s.name, a.key, a.string_value FROM slice s JOIN args a ON a.arg_set_id = s.arg_set_id"
    ).fetchall()
    assert sorted(kept) == [
        ("big", "debug.chrome pid", "1099511627776"),
        ("big", "debug.chrome tid", "1180591620717411303424"),
        ("stream", "debug.chrome tid", "stream 7"),
    ]
    assert db.sql("SELECT value FROM counter").fetchall() == [(7.0,)]
    assert set(counts["not_converted"]) == {
        "complete events with a negative duration",
        "events whose ts is not a number (or past 2^63 ns)",
        "counter values that are not numbers",
        "events of phase 'b' (not a phase this converter reads)",
    }
    assert (
        counts["not_converted"]["events whose ts is not a number (or past 2^63 ns)"]["first"]
        == "'bad ts' with ts 'soon'"
    )
    assert said.count("\n") == 1 and "t.json: not converted: 1 complete events with a negative duration" in said


@pytest.mark.parametrize(
    "content, said",
    [
        (b"", "is empty"),
        (b"   \n", "is empty"),
        (b'{"schemaVersion": 1}', "no traceEvents and not a JSON array of events"),
        (b"hello", "not JSON (no traceEvents and not a JSON array of events)"),
        (b'{"traceEvents": [{"ph": "X"', "is not a readable Chrome trace (the JSON ends inside"),
        (gzip.compress(b'{"traceEvents": [{"ph": "X"', mtime=0)[:-5], "is not a readable Chrome trace"),
    ],
    ids=["empty", "blank", "no traceEvents", "not JSON", "cut short", "gzip cut short"],
)
def test_what_is_not_a_chrome_trace_is_one_sentence(content, said, tmp_path):
    (tmp_path / "trace.json").write_bytes(content)
    with pytest.raises(UserError, match=re.escape(said)):
        chrome_to_pftrace(tmp_path / "trace.json", tmp_path / "t.pftrace")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


@pytest.mark.workflow  # the `neuronsweep` command in children, as a user runs it: the README's tier
def test_convert_and_query_a_chrome_trace_from_the_command_line(tmp_path):
    """`neuronsweep convert` writes <name>.pftrace beside a gzip trace; `query` reads a Chrome trace
    through the same conversion, cached beside it; a JSON that is no profile leaves nothing behind."""
    src = tmp_path / "trace.json.gz"
    src.write_bytes((DATA / "chrome" / "compiled_threads.json.gz").read_bytes())
    done = subprocess.run([BIN / "neuronsweep", "convert", src], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "trace.json.gz -> " in done.stdout + done.stderr and (tmp_path / "trace.pftrace").is_file()
    plain = tmp_path / "eager.json"
    plain.write_bytes((DATA / "chrome" / "eager_backward.json").read_bytes())
    sql = "SELECT count(*) AS n FROM flow"
    done = subprocess.run([BIN / "neuronsweep", "query", plain, sql, "--csv"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == ["n", "6"], done.stderr
    assert (tmp_path / ".eager.json.tables" / "flow.parquet").is_file()
    (tmp_path / "other.json").write_text('{"answer": 42}')
    done = subprocess.run([BIN / "neuronsweep", "query", tmp_path / "other.json"], capture_output=True, text=True)
    assert done.returncode == 2 and "neither a Neuron profile" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / ".other.json.tables").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _mixed(trace: dict) -> str:
    """Compact for the first blocks, then pretty-printed: the split decides on whitespace around the
    commas from the first block, so what follows is split with the loop's help."""
    events = [json.dumps(e) for e in trace["traceEvents"]]
    rest = {k: v for k, v in trace.items() if k != "traceEvents"}
    return (
        '{"traceEvents": [' + ",".join(events[:25]) + ",\n  " + ",\n  ".join(events[25:]) + "], " + json.dumps(rest)[1:]
    )


@pytest.mark.parametrize("indent", [None, 1, "mixed"])
def test_the_quick_split_is_read_again_carefully_where_it_cut_wrong(indent, tmp_path, monkeypatch):
    """The optimistic split (every `}, {` a record edge) on compact, pretty and mixed files with a key
    after the array: where a string or a nested list holds `}, {` (the loop re-joins a cut inside a
    batch; a cut at a batch's edge sends the file to the careful split), the bytes written equal
    those of the events given as objects; where nothing does, the careful split is never needed."""
    from neuronsweep.formats import json_records

    careful = []
    split = json_records.split
    monkeypatch.setattr(json_records, "split", lambda *a: careful.append(1) or split(*a))
    monkeypatch.setattr(json_records, "BLOCK", 700)  # batch edges everywhere
    plain = [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5} for i in range(60)]
    quirky = [dict(e, args={"s": "a},{b", "o": [{"x": 1}, {"y": 2}]}) if i % 7 == 3 else e for i, e in enumerate(plain)]
    for events, cut_wrong in ((plain, False), (quirky, True)):
        careful.clear()
        trace = {"traceEvents": events, "traceName": "x"}
        (tmp_path / "t.json").write_text(_mixed(trace) if indent == "mixed" else json.dumps(trace, indent=indent))
        chrome_to_pftrace(tmp_path / "t.json", tmp_path / "file.pftrace")
        chrome_to_pftrace(trace, tmp_path / "dicts.pftrace")
        assert (tmp_path / "file.pftrace").read_bytes() == (tmp_path / "dicts.pftrace").read_bytes()
        if not cut_wrong:
            assert not careful  # the quick split read it all


def _hostile(tmp: Path, kind: str) -> Path:
    path = tmp / "trace.json"
    if kind == "folder":
        path.mkdir()
    elif kind == "dangling link":
        path.symlink_to(tmp / "gone.json")
    elif kind == "link loop":
        path.symlink_to(tmp / "trace.json")
    elif kind == "fifo":
        import os

        os.mkfifo(path)
    else:
        path.write_bytes(
            {
                "not utf-8": b'{"traceEvents": [{"ph":"X","name":"\xff\xfe","pid":1,"tid":1,"ts":1,"dur":1}]}',
                "traceEvents null": b'{"traceEvents": null}',
                "traceEvents object": b'{"traceEvents": {"ph": "X"}}',
                "traceEvents twice": b'{"traceEvents": [{"ph":"i","name":"a","pid":1,"tid":1,"ts":1}],'
                b' "traceEvents": [{"ph":"i","name":"b","pid":1,"tid":1,"ts":2}]}',
                "no events": b'{"traceEvents": []}',
                "deep": b'{"traceEvents": [{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{"x":'
                + b"[" * 100_000
                + b"]" * 100_000
                + b"}}]}",
            }[kind]
        )
    return path


@pytest.mark.parametrize(
    "kind, said",
    [
        ("folder", "not a regular file"),
        ("dangling link", "no such file"),
        ("link loop", "no such file"),
        ("fifo", "not a regular file"),
        ("not utf-8", "is not a readable Chrome trace"),
        ("traceEvents null", "no traceEvents and not a JSON array of events"),
        ("traceEvents object", "no traceEvents and not a JSON array of events"),
        ("traceEvents twice", "the key traceEvents appears twice"),
        ("no events", "no events to convert"),
        ("deep", "is not a readable Chrome trace|nested deeper than Python can read"),
    ],
)
def test_hostile_files_are_one_sentence_naming_them(kind, said, tmp_path):
    path = _hostile(tmp_path, kind)
    with pytest.raises(UserError, match=said) as e:
        chrome_to_pftrace(path, tmp_path / "out" / "t.pftrace")
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing left behind


def test_stamps_past_int64_nanoseconds_and_true_are_named_not_wrapped(tmp_path):
    events = [
        '{"ph":"X","name":"far","pid":1,"tid":1,"ts":9300000000000000,"dur":1}',
        '{"ph":"X","name":"long","pid":1,"tid":1,"ts":1,"dur":9300000000000000}',
        '{"ph":"X","name":"yes","pid":1,"tid":1,"ts":true,"dur":1}',
        '{"ph":"X","name":"fine","pid":1,"tid":1,"ts":9000000000000000,"dur":1}',
    ]
    counts = chrome_to_pftrace(write(tmp_path / "t.json", events), tmp_path / "t.pftrace")
    rows = tables(tmp_path / "t.pftrace").sql("SELECT name, ts FROM slice").fetchall()
    assert rows == [("fine", 9_000_000_000_000_000_000)]
    assert counts["not_converted"]["events whose ts is not a number (or past 2^63 ns)"]["count"] == 2
    assert counts["not_converted"]["complete events whose dur is not a number (or past 2^63 ns)"]["count"] == 1


@settings(max_examples=300, deadline=None)
@given(ns=st.integers(0, 10**15))
def test_the_xla_trace_writers_float_stamps_read_back_exactly(ns):
    """The xla capture writes `(t - first call) / 1000.0` µs (backends/programs/xla_program.py): below 10^15 ns
    (11 days from the first call) a float's shortest text is the exact 3-decimal value, so the
    converter's decimal reading gives back every nanosecond."""
    from neuronsweep.formats.chrome_trace import exact_ns

    assert exact_ns(json.loads(json.dumps(ns / 1000.0), parse_float=Decimal)) == ns


def test_the_report_lists_cases_whose_trace_was_not_drawn_as_recorded(tmp_path):
    from neuronsweep.stages.report import _conversion

    (tmp_path / "w1" / "view").mkdir(parents=True)
    (tmp_path / "w2" / "view").mkdir(parents=True)
    negative = {"complete events with a negative duration": {"count": 1, "first": "'x' at ts 5"}}
    counts = {"slices": 5, "overlapping": 2, "not_converted": negative}
    (tmp_path / "w1" / "view" / "view.json").write_text(json.dumps({"pftrace_counts": counts}))
    (tmp_path / "w2" / "view" / "view.json").write_text(json.dumps({"pftrace_counts": {"slices": 5}}))
    assert _conversion(tmp_path, ["w1", "w2", "w3"]).to_dict("records") == [
        {
            "workload_id": "w1",
            "slices beside their thread": 2,
            "not converted": "1 complete events with a negative duration (first: 'x' at ts 5)",
        }
    ]


def test_flow_events_with_no_slice_to_bind_to_are_named(tmp_path):
    events = [
        '{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":5}',
        '{"ph":"f","id":1,"cat":"c","name":"f","pid":1,"tid":1,"ts":7}',  # no slice begins after it
        '{"ph":"s","id":2,"cat":"c","name":"s","pid":1,"tid":2,"ts":9}',  # no slice open on its thread
    ]
    counts, db = convert(tmp_path, "t", events)
    assert counts["not_converted"] == {"flow events with no slice to bind to": {"count": 2, "first": "at ts 7"}}
    assert counts["flows"] == 0 and db.sql("SELECT count(*) FROM flow").fetchone() == (0,)
