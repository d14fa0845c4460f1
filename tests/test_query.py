"""`neuronsweep query` as a Perfetto or HTA user meets it: a file it cannot read is one sentence naming
the file and what to do (compressed inputs too), and a result prints as numbers people read: integers
as integers, the first N rows then how many more (--csv: every row unless --max-rows, a note on stderr), "no rows"."""

from __future__ import annotations

import csv
import gzip
import shutil

import pytest
from helpers import DATA, cli_here

TRACE = DATA / "chrome" / "eager_backward.json"


def main(capsys, *argv) -> tuple[int, str, str]:
    """The command in this process (a start-up per case would cost more than the test)."""
    code = cli_here(*argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def query(capsys, *argv) -> tuple[int, str, str]:
    return main(capsys, "query", *argv)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """A real torch.profiler trace, its tables cached once for the module."""
    path = tmp_path_factory.mktemp("query") / "eager.json"
    shutil.copy(TRACE, path)
    return path


def _damaged(tmp_path, name: str, content: bytes):
    path = tmp_path / name
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "name, content, said",
    [
        (
            "cut.json.gz",
            gzip.compress(TRACE.read_bytes(), mtime=0)[:1500],
            "a damaged gzip file (it ends early: truncated)",
        ),
        (
            "bad.json.gz",
            gzip.compress(TRACE.read_bytes(), mtime=0)[:20] + b"\x00" * 200,
            "a damaged gzip file (corrupt:",
        ),
        ("empty.json.gz", b"", "is empty (0 bytes); pass the file the profiler wrote."),
        (
            "words.json.gz",
            gzip.compress(b"hello, not a trace\n" * 50, mtime=0),
            "a gzip file whose content is not a Chrome trace",
        ),
        ("notes.pftrace", b"these are my notes, not a trace\n", "pass a trace that Perfetto or `neuronsweep convert`"),
    ],
)
def test_an_input_it_cannot_read_is_one_sentence_naming_it(capsys, tmp_path, name, content, said):
    path = _damaged(tmp_path, name, content)
    code, out, err = query(capsys, path, "SELECT 1")
    assert code == 2 and said in err and str(path) in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "rerun the view stage" not in err  # the user's own file: no stage made it


def test_a_path_that_does_not_exist_says_so(capsys, tmp_path):
    code, _, err = query(capsys, tmp_path / "nope.pftrace", "SELECT 1")
    assert code == 2 and f"{tmp_path / 'nope.pftrace'}: no such file or folder" in err


def test_a_damaged_gzip_is_one_sentence_for_convert_too(capsys, tmp_path):
    path = _damaged(tmp_path, "cut.json.gz", gzip.compress(TRACE.read_bytes(), mtime=0)[:1500])
    code, _, err = main(capsys, "convert", path)
    assert code == 2 and f"{path} is not a readable Chrome trace (Compressed file ended" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_integers_print_as_integers_in_both_modes(capsys, trace):
    sql = "SELECT sum(dur) AS total, count(*) AS n, avg(dur) AS mean FROM slice"
    code, table, _ = query(capsys, trace, sql)
    assert code == 0
    total = int(table.split()[3])
    assert "e+" not in table and total > 1000
    _, csv, _ = query(capsys, trace, sql, "--csv")
    assert csv.splitlines()[1].split(",")[0] == str(total)  # not 2.64e+11, not 264258245000.0


def test_max_rows_shows_the_first_rows_then_how_many_more_and_csv_is_every_row_unless_asked(capsys, trace):
    sql = "SELECT id FROM slice ORDER BY id"
    _, everything, _ = query(capsys, trace, sql, "--max-rows", "0", "--csv")
    n = len(everything.splitlines()) - 1
    _, table, _ = query(capsys, trace, sql, "--max-rows", "3")
    lines = table.strip().splitlines()
    assert [x.strip() for x in lines[1:4]] == ["0", "1", "2"] and "..." not in table
    assert lines[-1] == f"({n - 3} more rows; --max-rows 0 prints all)"
    _, csv, note = query(capsys, trace, sql, "--max-rows", "3", "--csv")
    assert csv.splitlines() == ["id", "0", "1", "2"]  # the CSV holds rows only; the note is on stderr
    assert note.strip() == f"({n - 3} more rows not written; --max-rows 0 writes all)"
    _, table, _ = query(capsys, trace, sql)
    assert len(table.strip().splitlines()) == 1 + 60 + 1  # a table on the terminal: 60 rows, then how many more
    _, csv, note = query(capsys, trace, sql, "--csv")
    assert csv == everything and n > 60 and not note  # piped into a file: every row, nothing else


def test_an_empty_result_says_no_rows(capsys, trace):
    code, out, _ = query(capsys, trace, "SELECT name FROM slice WHERE false")
    assert code == 0 and out.strip() == "no rows"
    _, csv, _ = query(capsys, trace, "SELECT name FROM slice WHERE false", "--csv")
    assert csv.strip() == "name"


def test_perfetto_names_and_the_first_answers_on_a_trace_with_known_times(capsys, tmp_path):
    """trace_processor's thread, process, thread_slice and args.<name>; each slice's self time, each
    track's busy time as an interval union, the ops by self time."""
    import json

    def x(name, ts, dur, tid, **args):
        return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid, "args": args}

    events = [
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "main"}},
        x("step", 0, 100, 1),
        x("aten::mm", 10, 50, 1, **{"Input Dims": "[[4, 8], [8, 2]]"}),
        x("aten::add", 70, 20, 1),
        x("aten::mm", 200, 30, 1),
    ]
    path = tmp_path / "known.json"
    path.write_text(json.dumps({"traceEvents": events}))

    def rows(sql):
        code, out, err = query(capsys, path, sql, "--csv")
        assert code == 0, err
        return list(csv.reader(out.strip().splitlines()))[1:]

    assert rows("SELECT tid FROM thread WHERE tid = 1") == [["1"]]
    assert rows("SELECT pid FROM process") == [["7"]]
    assert rows("SELECT count(*) FROM thread_slice WHERE utid = 1") == [["4"]]
    dims = "SELECT EXTRACT_ARG(arg_set_id, 'args.Input Dims') FROM slice WHERE name = 'aten::mm' AND ts = 10000"
    assert rows(dims) == [["[[4, 8], [8, 2]]"]]
    self_ns = dict(rows("SELECT name, sum(self_dur) FROM slice_self_dur GROUP BY name"))
    assert self_ns == {"step": "30000", "aten::mm": "80000", "aten::add": "20000"}  # 100 - 50 - 20 = 30 us
    assert rows("SELECT busy_dur, span_dur FROM track_busy") == [["130000", "230000"]]  # [0, 100), [200, 230)
    top = rows("SELECT name, calls, self_dur FROM top_ops WHERE name LIKE 'aten::%'")
    assert top[0] == ["aten::mm", "2", "80000"]


def test_busy_time_counts_overlapping_slices_of_one_track_once():
    """Slices of one track that overlap without nesting (a device engine's, an async track's): the
    union, not the sum; touching and disjoint ones add up; two workloads with the same ids stay apart."""
    import pyarrow as pa

    from neuronsweep.formats.profile_db import ProfileDB

    db = ProfileDB()
    for wid in ("w1", "w2"):
        ts, dur = [0, 20, 60, 100, 200], [40, 40, 40, 10, 5]  # [0,40) [20,60) [60,100) [100,110) [200,205)
        slices = {"id": list(range(5)), "ts": ts, "dur": dur, "track_id": [0] * 5, "name": ["op"] * 5}
        nulls = pa.nulls(5, pa.int64())
        db._add("slice", wid, pa.table({**slices, "depth": [0] * 5, "parent_id": nulls, "arg_set_id": nulls}))
        track = {"id": [0], "name": ["engine"], "parent_id": pa.nulls(1, pa.int64()), "type": ["track"]}
        db._add("track", wid, pa.table({**track, "utid": pa.nulls(1, pa.int64()), "upid": [1]}))
        none = {k: pa.nulls(0, pa.string()) for k in ("key", "string_value")}
        db._add(
            "args",
            wid,
            pa.table(
                {
                    **none,
                    "arg_set_id": pa.nulls(0, pa.int64()),
                    "int_value": pa.nulls(0, pa.int64()),
                    "real_value": pa.nulls(0, pa.float64()),
                }
            ),
        )
    db.finish()
    assert db.sql("SELECT workload_id, busy_dur, span_dur, slices FROM track_busy ORDER BY 1").fetchall() == [
        ("w1", 115, 205, 5),
        ("w2", 115, 205, 5),
    ]
