"""What the analyses read a profile through: the tables of formats/profile_db.ProfileDB.

formats/ and analysis/ are one layer and must not import each other, so the analyses name the few
members they use here and ProfileDB has them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import duckdb
    import pandas as pd


class ProfileTables(Protocol):
    """A profile's tables in DuckDB, queried by SQL."""

    tables: dict[str, list[str]]  # table -> the relations behind it

    def sql(self, text: str) -> duckdb.DuckDBPyConnection:
        """Run a query."""

    def df(self, text: str) -> pd.DataFrame:
        """A query's whole result."""

    def describe(self, table: str) -> list[tuple[str, str]]:
        """(column, type) of a table or view."""


def find_table(db: ProfileTables, *names: str) -> str | None:
    """The first of `names` the profile has, as the profile spells it (parquet's `ActiveTime`, the legacy
    JSON's `active_time`: names compare without case); None where it has none of them."""
    have = {t.lower(): t for t in db.tables}
    return next((have[n.lower()] for n in names if n.lower() in have), None)


def columns(db: ProfileTables, table: str) -> set[str]:
    """The columns a table of the profile has."""
    return {c for c, _ in db.describe(table)}
