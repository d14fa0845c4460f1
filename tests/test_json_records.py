"""The legacy profile's fast path (json_records + pyarrow.json) against the value-by-value path it
replaced (ijson + batch_table): the same tables for real files and for every quirk a JSON writer
may produce, whatever the block size; arrays it cannot split, and truncated files, handled."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from helpers import DATA

from neuronsweep.errors import UserError
from neuronsweep.formats import json_records, legacy_json

REAL = sorted((DATA / "neuron" / "inf2-profiles").glob("profile_*.json"))
SMALLEST = [min(REAL, key=lambda p: p.stat().st_size)]
KEYS = ("instruction", "dma", "summary", "metadata")


def value_by_value(path: Path, out: Path) -> None:
    out.mkdir()
    for key in ("instruction", "dma"):
        legacy_json.array_to_parquet(path, key, out)
    for key in ("summary", "metadata"):
        record = legacy_json.first_record(path, key)
        if record:
            pq.write_table(legacy_json.batch_table([record]), out / f"{key}.parquet")


def fast(path: Path, out: Path) -> None:
    out.mkdir()
    legacy_json.write_tables(path, out)


def tables(out: Path) -> dict:
    """Every table's rows with their DuckDB types (as the union of its files reads)."""
    found = {}
    for key in KEYS:
        files = sorted(out.glob(f"{key}-*.parquet")) or sorted(out.glob(f"{key}.parquet"))
        if files:
            rel = duckdb.sql(f"SELECT * FROM read_parquet({[str(f) for f in files]}, union_by_name = true)")
            found[key] = (dict(zip(rel.columns, map(str, rel.types))), rel.fetchall())
    return found


def record(i: int) -> dict:
    """A record with the quirks: 64-bit ids, escapes and brackets in strings, a number written as
    text now and then, ints among floats, nested lists, and one-off odd columns."""
    r = {
        "id": 2**62 + i,
        "timestamp": i * 10,
        "opcode": ["MATMUL", 'q"{[}]\\', "é\n\t"][i % 3],
        "duration": 7 + i % 3,
        "dma_queue": str(i) if i % 7 == 0 else i,
        "f": 1.5 if i % 11 == 0 else i,
    }
    if i % 5 == 0:
        r["source"] = [["WEIGHT"], ['x"y']]
    extra = {60: ("ts", "2020-01-01T00:00:00Z"), 70: ("obj", {"a": 1}), 80: ("fl", [1.5, 2]), 90: ("big", 2**60 * 7.0)}
    if i in extra:
        r[extra[i][0]] = extra[i][1]
    return r


DOCS = {
    "compact": (
        {
            "summary": [{"total_time": 1.0}],
            "metadata": {"v": 1},
            "instruction": [record(i) for i in range(200)],  # each quirk recurs by i = 90
            "dma": [],
        },
        {"separators": (",", ":"), "ensure_ascii": False},
    ),
    "pretty": (
        {"instruction": [record(i) for i in range(150)], "dma": [record(i) for i in range(5)], "summary": [{"a": "}"}]},
        {"indent": 2},
    ),
    "flat": (
        {
            "summary": [{"total_time": 1.0, "x": None}],
            "instruction": [{"a": i, "b": "s", "c": [[i]]} for i in range(300)],  # 10.6 kB: 3 blocks of 4096
        },
        {},
    ),
    "not_records": ({"instruction": [record(0), 5, record(1)], "dma": [[1, 2], record(2)], "summary": []}, {}),
}


@pytest.mark.parametrize("block", [5, 97, 4096, json_records.BLOCK])
@pytest.mark.parametrize("name", sorted(DOCS))
def test_the_fast_path_gives_the_same_tables_as_value_by_value(name, block, tmp_path, monkeypatch):
    doc, style = DOCS[name]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc, **style))
    value_by_value(path, tmp_path / "slow")
    monkeypatch.setattr(json_records, "BLOCK", block)
    fast(path, tmp_path / "fast")
    expected, got = tables(tmp_path / "slow"), tables(tmp_path / "fast")
    assert got == expected and got["instruction"][1]
    found = json_records.split(path, {"instruction", "dma"}, {"summary", "metadata"})
    list(found)
    assert found.irregular == ({"instruction", "dma"} if name == "not_records" else set())
    if name != "not_records":
        assert found.records["instruction"] == len(doc["instruction"])


# Small blocks cut every array into hundreds of files (4 s a block over the three profiles): the smallest
# profile takes them, every profile the real block size. Its records are 425 to 1408 bytes: a block of 61
# reads each in 7 to 23 pieces and writes a file per record (327 files; a block of 7 did the same in 34,000
# blocks and 5 s, which the quirk documents below cut at 5 bytes already); one of 1024 holds a record or
# two, cut anywhere.
@pytest.mark.parametrize(
    "block, profiles",
    [(61, SMALLEST), (1024, SMALLEST), (json_records.BLOCK, REAL)],
    ids=["61-smallest", "1024-smallest", "all"],
)
def test_real_profiles_give_the_same_tables_either_way(block, profiles, tmp_path, monkeypatch):
    monkeypatch.setattr(json_records, "BLOCK", block)
    for path in profiles:
        slow, quick = tmp_path / f"{path.stem}.slow", tmp_path / f"{path.stem}.fast"
        value_by_value(path, slow)
        fast(path, quick)
        got = tables(quick)
        assert got == tables(slow) and got["instruction"][0]["id"] == "BIGINT"


def test_ints_beyond_64_bits_stay_exact_as_text(tmp_path):
    path = tmp_path / "profile.json"  # ijson (yajl) refuses these: the fast path must not lose them
    path.write_text(json.dumps({"instruction": [{"id": 1}, {"id": 2**64 + 5}, {"id": 2**63}]}))
    fast(path, tmp_path / "out")
    assert duckdb.sql(f"SELECT id FROM '{tmp_path}/out/instruction-*.parquet'").fetchall() == [
        ("1",),
        (str(2**64 + 5),),
        (str(2**63),),
    ]


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_a_profile_cut_short_is_refused_in_one_sentence(cut, tmp_path):
    whole = json.dumps({"summary": [{"t": 1}], "instruction": [record(i) for i in range(200)]}).encode()
    path = tmp_path / "profile.json"
    path.write_bytes(whole[: int(len(whole) * cut)])
    with pytest.raises(UserError, match=r"profile.json is not a readable legacy profile \(.*cut short.*run the view"):
        fast(path, tmp_path / "out")


def test_the_depth_guard_bounds_each_lines_brackets_strings_included():
    """quick_split's guard: a line opening MAX_DEPTH brackets (`{` or `[`, counted inside strings
    too) sends the file to the careful splitter; fewer on every line, the batch passes unchanged."""
    limit = json_records.MAX_DEPTH
    fine = b'{"a": [1, {"b": 2}]}\n{"s": "' + b"[" * (limit - 2) + b'"}\n' + b"[" * (limit - 1)
    assert json_records._shallow(fine) is fine
    for deep in (b"{}\n" + b"{" * limit, b'{"s": "' + b"[" * (limit - 1) + b'"}\n{}', b"[" * limit):
        with pytest.raises(json_records.NotJSON, match="opens many brackets"):
            json_records._shallow(deep)
