"""The legacy full-profile JSON (`view --output-format json`), streamed into Parquet.

Such files reach gigabytes (about 1 GB per 250k instructions). One pass finds the records of the
wanted arrays in byte blocks (json_records) and a C++ parser (pyarrow.json) makes each block's
records a table; a batch whose types that parser cannot give exactly (see below) is decoded with
orjson instead, and an array json_records cannot split (items that are not objects) is streamed
with ijson, value by value. Every path gives the same tables.
What the real files hold (tests/data/neuron/inf2-profiles/):
64-bit ids above 2^53 (`id`, `packet_aggregation_id`), numbers written as strings (`dma_queue`),
nested lists (`source`), and columns whose JSON type may change between records. Each batch's
columns get the narrowest Arrow type that holds every value exactly:
  bool; int64 (a Python int beyond int64 makes the column text); float64 for ints mixed with
  floats (text where an int would lose precision); text for anything mixed; JSON text for lists
  and objects; an all-null column is left out of the batch.
A new Parquet file starts whenever a batch's schema differs from the open one, and DuckDB reads the
files with union_by_name, which widens int64 + float64 to DOUBLE and anything + text to VARCHAR.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa

from neuronsweep.errors import UserError
from neuronsweep.formats import gzip_files, json_records
from neuronsweep.formats.table_cache import dictionary_columns

if TYPE_CHECKING:
    import duckdb

BATCH = 20_000
INT64 = (-(2**63), 2**63 - 1)
EXACT_FLOAT_INT = 2**53
SCALAR_LEAVES = ("int64", "string", "bool", "null")  # list leaf types whose JSON text Arrow keeps exact


def _text(v: object) -> str:
    """A value as text: strings as they are, anything else as compact JSON (orjson; json for ints
    beyond 64 bits, which orjson refuses)."""
    if isinstance(v, str):
        return v
    try:
        return orjson.dumps(v).decode()
    except TypeError:
        return json.dumps(v, separators=(",", ":"))


def column(values: list) -> pa.Array | None:
    """The Arrow array for one column of a batch (see the module docstring), or None when all null."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return None
    if kinds == {bool}:
        return pa.array(values, pa.bool_())
    if kinds == {int}:
        if all(INT64[0] <= v <= INT64[1] for v in values if v is not None):
            return pa.array(values, pa.int64())
    elif kinds == {int, float}:
        if all(abs(v) <= EXACT_FLOAT_INT for v in values if type(v) is int):
            return pa.array([None if v is None else float(v) for v in values], pa.float64())
    elif kinds == {float}:
        return pa.array(values, pa.float64())
    return pa.array([None if v is None else _text(v) for v in values], pa.string())


def batch_table(records: list[dict]) -> pa.Table:
    """One batch as an Arrow table. Arrow's own converter (C++) takes the batch where its inference
    already gives the rules above (a column of one scalar JSON type: bool, int64, float64, text); the
    columns it would type otherwise (lists, objects, floats that may hide exact ints) and any batch it
    refuses (mixed types, ints beyond int64) go through `column`, value by value."""
    try:
        inferred = pa.Table.from_struct_array(pa.array(records))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        inferred = None
    if inferred is not None:
        names = inferred.column_names  # Arrow's inference already took the union of the keys
    else:
        names = list({k: None for r in records for k in r})
    arrays = {}
    for name in names:
        typed = inferred.column(name).combine_chunks() if inferred is not None else None
        if typed is not None and (
            pa.types.is_boolean(typed.type) or pa.types.is_int64(typed.type) or pa.types.is_string(typed.type)
        ):
            arrays[name] = typed
        elif typed is not None and pa.types.is_null(typed.type):
            continue
        else:
            arrays[name] = column([r.get(name) for r in records])
    return pa.table({name: arr for name, arr in arrays.items() if arr is not None})


def ndjson_table(data: bytes | bytearray, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """One batch of newline-delimited records as the same table `batch_table` makes of them. pyarrow's
    JSON reader parses it; a batch it cannot type exactly is decoded with orjson and typed by us:
    a column changing type (Arrow refuses it), a double at or beyond 2^53 (Arrow reads an int beyond
    int64 as a double, silently), text it took for a timestamp, objects, lists of floats."""
    import pyarrow.json as pj

    try:
        table = pj.read_json(
            pa.BufferReader(data), read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1)
        )
    except pa.ArrowInvalid:
        table = None
    try:
        exact = _exact(table, con) if table is not None else None
    except (UnicodeDecodeError, ValueError):  # a key that is not UTF-8; keys equal but for case (SQL)
        exact = None
    if exact is not None:
        return exact
    return batch_table(json_records.batch_records(bytes(data)))


def _exact(table: pa.Table, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table | None:
    """`table` typed as `batch_table` would type it, or None where pyarrow's types may not be exact."""
    import pyarrow.compute as pc

    keep, as_text = [], []
    if len({n.lower() for n in table.column_names}) < table.num_columns:
        return None  # SQL names are not case-sensitive: the loop's table keeps both as they are
    for name, col in zip(table.column_names, table.columns):
        kind = col.type
        if pa.types.is_null(kind):
            continue
        if pa.types.is_floating(kind):
            top = pc.max(pc.abs(col)).as_py()
            if top is not None and top >= EXACT_FLOAT_INT:
                return None
        elif pa.types.is_list(kind):
            leaf = kind
            while pa.types.is_list(leaf):
                leaf = leaf.value_type
            if str(leaf) not in SCALAR_LEAVES:
                return None
            as_text.append(name)
        elif not (pa.types.is_boolean(kind) or pa.types.is_int64(kind) or pa.types.is_string(kind)):
            return None
        keep.append(name)
    table = table.select(keep)
    if as_text:  # compact JSON text, as _text writes it; only these columns go through DuckDB and back
        import duckdb

        con = con or duckdb.connect(config={"threads": 1})
        con.register("batch", table.select(as_text))
        cols = ", ".join(f'to_json("{n}")::VARCHAR AS "{n}"' for n in as_text)
        rel = con.sql(f"SELECT {cols} FROM batch")
        texts = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()  # DuckDB 2 / 1
        con.unregister("batch")
        for name in as_text:
            table = table.set_column(table.schema.get_field_index(name), name, texts.column(name))
    return table


class _Files:
    """Parquet files of one array: a new file whenever a batch's schema differs from the open one."""

    def __init__(self, out_dir: Path, key: str) -> None:
        self.out_dir, self.key = out_dir, key
        self.files: list[Path] = []
        self.writer = None

    def write(self, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        writer = self.writer
        if writer is None or not writer.schema.equals(table.schema):
            self.close()
            self.files.append(self.out_dir / f"{self.key}-{len(self.files):04d}.parquet")
            self.writer = writer = pq.ParquetWriter(
                self.files[-1], table.schema, use_dictionary=dictionary_columns(table.schema)
            )
        writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def write_tables(
    path: Path,
    out_dir: Path,
    arrays: tuple[str, ...] = ("instruction", "dma"),
    firsts: tuple[str, ...] = ("summary", "metadata"),
) -> None:
    """The profile's `arrays` as `<key>-NNNN.parquet` files and the first record of each of `firsts`
    as `<key>.parquet`, in one pass over the file (see the module docstring). A damaged file is one
    sentence naming it, whichever decoder found the damage."""
    try:
        _write_tables(path, out_dir, arrays, firsts)
    except (ValueError, UnicodeDecodeError, RecursionError, pa.ArrowException) as e:
        raise UserError(
            f"{path} is not a readable legacy profile ({type(e).__name__}: {str(e).splitlines()[0][:100]}); "
            "view the profile again."
        ) from None


def _write_tables(path: Path, out_dir: Path, arrays: tuple[str, ...], firsts: tuple[str, ...]) -> None:
    import duckdb
    import pyarrow.parquet as pq

    files = {key: _Files(out_dir, key) for key in arrays}
    found = json_records.split(path, set(arrays), set(firsts))
    try:
        with duckdb.connect(config={"threads": 1}) as con:
            for key, data, _ in found:
                if key not in found.irregular:
                    files[key].write(ndjson_table(data, con))
    except (json_records.NotJSON, json.JSONDecodeError, orjson.JSONDecodeError) as e:  # or a batch no parser reads
        raise UserError(
            f"{path} is not a readable legacy profile ({e}); if a view was cut short "
            "(a full disk, a killed job), run the view again"
        ) from None
    for out in files.values():
        out.close()
    if found.repeated:
        raise UserError(
            f"{path}: the key {sorted(found.repeated)[0]} appears twice (a JSON reader keeps only the last); "
            "view the profile again."
        )
    for key, out in files.items():
        if key in found.irregular:  # items that are not all objects: value by value instead
            for f in out.files:
                f.unlink()
            array_to_parquet(path, key, out_dir)
    for key in firsts:
        if key in found.irregular:
            record = first_record(path, key)
        elif key in found.first:
            record = json_records.loads(found.first[key])
        else:
            record = None
        if record is not None and not isinstance(record, dict):  # summary, metadata: one object each
            raise UserError(
                f"{path}: its {key} holds a {type(record).__name__} where an object of fields belongs; the "
                "profile is damaged: view the capture again."
            )
        if record:
            pq.write_table(batch_table([record]), out_dir / f"{key}.parquet")


@contextmanager
def _readable(path: Path, what: str) -> Iterator[None]:
    """What the streaming JSON decoders (ijson, json) raise on a damaged file, as one sentence."""
    import ijson

    try:
        yield
    except (ijson.JSONError, UnicodeDecodeError, RecursionError, ValueError) as e:
        said = str(e).splitlines()[0][:80] if str(e) else ""
        raise UserError(
            f"{path}: its {what} is not readable JSON ({type(e).__name__}: {said}); view the profile again."
        ) from None


def array_to_parquet(path: Path, key: str, out_dir: Path) -> list[Path]:
    """Stream the top-level array `key` of a legacy profile JSON into Parquet files in out_dir;
    returns the files written (none when the array is absent or empty)."""
    import ijson
    import pyarrow.parquet as pq

    files: list[Path] = []
    writer = None

    def flush(batch: list) -> None:
        nonlocal writer
        table = batch_table(batch)
        if writer is None or not writer.schema.equals(table.schema):
            if writer is not None:
                writer.close()
            files.append(out_dir / f"{key}-{len(files):04d}.parquet")
            writer = pq.ParquetWriter(files[-1], table.schema, use_dictionary=dictionary_columns(table.schema))
        writer.write_table(table)

    batch: list[dict] = []
    with _readable(path, key), open(path, "rb") as handle:
        for record in ijson.items(handle, f"{key}.item", use_float=True):
            batch.append(record if isinstance(record, dict) else {"value": record})
            if len(batch) >= BATCH:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
    if writer is not None:
        writer.close()
    return files


def first_record(path: Path, key: str) -> dict | None:
    """`key[0]` of a legacy profile JSON (summary, metadata), streamed: the file may be huge."""
    import ijson

    with _readable(path, key), gzip_files.open_bytes(path) as handle:
        for record in ijson.items(handle, f"{key}.item", use_float=True):
            return record
    return None


EDGE = 1 << 20  # bytes at each end of a legacy profile searched for a small array before streaming it all


def small_array(path: Path, key: str, stream: bool = True) -> list | None:
    """The top-level array `key` of a legacy profile JSON when it is small (nc_mem_usage,
    instruction_usage): found in the file's first or last MiB (where real files keep them) and decoded
    there, else streamed from the whole file (`stream`; without it, None: an array that may grow with the
    profile, such as active_time, is not worth a pass over gigabytes). None when the file has no such array."""
    import ijson

    size = Path(path).stat().st_size
    needle = f'"{key}":'.encode()
    with open(path, "rb") as handle:
        for start in (0, max(0, size - EDGE)):
            handle.seek(start)
            chunk = handle.read(EDGE)
            at = chunk.find(needle)
            while at >= 0:  # unescaped `"key":` can only be a key; decode the value after it
                text = chunk[at + len(needle) :].decode("utf-8", errors="replace").lstrip()
                if text.startswith("["):
                    try:
                        value, _ = json.JSONDecoder().raw_decode(text)
                        return value
                    except (json.JSONDecodeError, RecursionError):  # runs past this window: stream it
                        break
                at = chunk.find(needle, at + 1)
        if not stream:
            return None
        handle.seek(0)
        try:
            items = list(ijson.items(handle, f"{key}.item", use_float=True))
        except (ijson.JSONError, UnicodeDecodeError, RecursionError):  # not a JSON document (summary-json's
            return None  # output starts with log lines), or damaged: the array is absent
    return items or None


SKIPPED = "neuronsweep_skipped"  # the one key of the profile.json a view writes when the tool had no json export


def skipped(path: Path) -> str | None:
    """The reason a view left in place of a legacy profile it could not have, else None."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if SKIPPED.encode() not in head:
        return None
    try:
        why = json.loads(Path(path).read_text()).get(SKIPPED)
    except (ValueError, AttributeError, RecursionError):
        return None
    return why if isinstance(why, str) else None
