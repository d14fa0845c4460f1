"""How `neuronsweep query` prints a result: integers as integers (DuckDB's sum of a BIGINT is a
HUGEINT, which pandas would turn into 2.642582e+11), "no rows" for none. A table on the terminal shows
its first rows and then how many more; --csv is data for another program, so it holds every row unless
--max-rows is given, and any note goes to stderr, never into the CSV."""

from __future__ import annotations

import csv
import sys
from typing import TextIO

import pandas as pd

TABLE_ROWS = 60  # a table on the terminal without --max-rows


def limit_for(max_rows: int | None, as_csv: bool) -> int | None:
    """How many rows to fetch: --max-rows N (0: all), else every row for --csv, TABLE_ROWS for a table."""
    if max_rows is None:
        return None if as_csv else TABLE_ROWS
    return None if max_rows <= 0 else max_rows


def write(columns: list[str], rows: list[tuple], total: int, as_csv: bool, out: TextIO | None = None) -> None:
    """Print a result fetched by ProfileDB.fetch: the rows given, then how many more there were (on
    stderr for --csv). Values are kept as Python gives them (dtype object), so ints stay exact."""
    out = out or sys.stdout
    table = pd.DataFrame(rows, columns=columns, dtype=object)
    more = total - len(table)
    if as_csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(table.columns)
        writer.writerows([["" if v is None else v for v in row] for row in table.itertuples(index=False)])
        if more:
            print(f"({more} more rows not written; --max-rows 0 writes all)", file=sys.stderr)
        return
    if not len(table):
        print("no rows", file=out)
        return
    shown = table.map(lambda v: "NULL" if v is None else f"{v:.6g}" if isinstance(v, float) else v)
    print(shown.to_string(index=False), file=out)
    if more:
        print(f"({more} more rows; --max-rows 0 prints all)", file=out)
