"""The legacy full-profile JSON (`view --output-format json`), streamed into Parquet.

Such files reach gigabytes (about 1 GB per 250k instructions), so one array at a time is read with
ijson and written a batch at a time. What the real files hold (../shared/fixtures/neuron/real/):
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
from pathlib import Path

import orjson
import pyarrow as pa

BATCH = 20_000
INT64 = (-(2**63), 2**63 - 1)
EXACT_FLOAT_INT = 2**53


def _text(v) -> str:
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
        if typed is not None and (pa.types.is_boolean(typed.type) or pa.types.is_int64(typed.type)
                                  or pa.types.is_string(typed.type)):
            arrays[name] = typed
        elif typed is not None and pa.types.is_null(typed.type):
            continue
        else:
            arrays[name] = column([r.get(name) for r in records])
    return pa.table({name: arr for name, arr in arrays.items() if arr is not None})


def array_to_parquet(path: Path, key: str, out_dir: Path) -> list[Path]:
    """Stream the top-level array `key` of a legacy profile JSON into Parquet files in out_dir;
    returns the files written (none when the array is absent or empty)."""
    import ijson
    import pyarrow.parquet as pq

    files: list[Path] = []
    writer = None

    def flush(batch):
        nonlocal writer
        table = batch_table(batch)
        if writer is None or not writer.schema.equals(table.schema):
            if writer is not None:
                writer.close()
            files.append(out_dir / f"{key}-{len(files):04d}.parquet")
            writer = pq.ParquetWriter(files[-1], table.schema)
        writer.write_table(table)

    batch: list[dict] = []
    with open(path, "rb") as handle:
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

    with open(path, "rb") as handle:
        for record in ijson.items(handle, f"{key}.item", use_float=True):
            return record
    return None


EDGE = 1 << 20  # bytes at each end of a legacy profile searched for a small array before streaming it all


def small_array(path: Path, key: str) -> list | None:
    """The top-level array `key` of a legacy profile JSON when it is small (nc_mem_usage,
    instruction_usage): found in the file's first or last MiB (where real files keep them) and decoded
    there, else streamed from the whole file. None when the file has no such array."""
    import ijson

    size = Path(path).stat().st_size
    needle = f'"{key}":'.encode()
    with open(path, "rb") as handle:
        for start in (0, max(0, size - EDGE)):
            handle.seek(start)
            chunk = handle.read(EDGE)
            at = chunk.find(needle)
            while at >= 0:  # unescaped `"key":` can only be a key; decode the value after it
                text = chunk[at + len(needle):].decode("utf-8", errors="replace").lstrip()
                if text.startswith("["):
                    try:
                        value, _ = json.JSONDecoder().raw_decode(text)
                        return value
                    except json.JSONDecodeError:  # runs past this window: stream it
                        break
                at = chunk.find(needle, at + 1)
        handle.seek(0)
        try:
            items = list(ijson.items(handle, f"{key}.item", use_float=True))
        except ijson.JSONError:  # not a JSON document (summary-json's output starts with log lines)
            return None
    return items or None
