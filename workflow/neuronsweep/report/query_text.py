"""How `neuronsweep query` prints a result: integers as integers (DuckDB's sum of a BIGINT is a
HUGEINT, which pandas would turn into 2.642582e+11), the first N rows and then how many more, the same
in the table and in --csv, and "no rows" for none."""

from __future__ import annotations

import csv
import sys

import pandas as pd


def frame(relation, limit: int | None) -> tuple[pd.DataFrame, int]:
    """The first `limit` rows of a DuckDB result (all when None) as Python values, and how many rows
    it has in all. fetchmany keeps Python's ints exact, where .df() goes through float64."""
    columns = [d[0] for d in relation.description]
    rows = relation.fetchall() if limit is None else relation.fetchmany(limit)
    total = len(rows)
    while limit is not None and (more := len(relation.fetchmany(100_000))):  # counted, not kept
        total += more
    return pd.DataFrame(rows, columns=columns, dtype=object), total


def write(relation, max_rows: int | None, as_csv: bool, out=None) -> None:
    out = out or sys.stdout
    limit = None if max_rows is None or max_rows <= 0 else max_rows
    table, total = frame(relation, limit)
    more = total - len(table)
    if as_csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(table.columns)
        writer.writerows([["" if v is None else v for v in row] for row in table.itertuples(index=False)])
        if more:
            print(f"# ({more} more rows; --max-rows 0 prints all)", file=out)
        return
    if not len(table):
        print("no rows", file=out)
        return
    shown = table.map(lambda v: "NULL" if v is None else f"{v:.6g}" if isinstance(v, float) else v)
    print(shown.to_string(index=False), file=out)
    if more:
        print(f"({more} more rows; --max-rows 0 prints all)", file=out)
