"""The parquet profile schema moves between SDKs (7.4.0 in 2.31, 12.0.1 in 2.33), and every parquet
profile describes its own: a `SchemaFields` table, one row per table and field (`table_name`,
`field_name`, `field_type`, `field_unit`, ...: profile-schema-reference.rst, "The output Parquet is also
self-describing"; how-to-analyze-profile-output.rst: "so you can query the schema alongside the data").
So the fields extract reads are checked against what the profile declares, for every schema version,
not against a column table per version written by hand: a field it does not declare, or declares with
a type that cannot be what we read it as, is one sentence naming the table, the field and the version,
and the tables built on it are not written. A profile without SchemaFields (the legacy json, a damaged
folder) is checked against the columns its tables really have.

The names we read are the profile schema reference's of 7.4.0 (the 12.0.1 tables could not be read
here; the profile's own SchemaFields says whether it still has them, and the field test prints it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neuronsweep.formats.profile_db import ProfileDB

# table -> field -> (what needs it, the kind of value we read it as)
READ = {
    "Instruction": {
        "start_ts": ("engine busy time", "number"),
        "duration_ns": ("engine busy time", "number"),
        "engine": ("engine busy time", "text"),
        "opcode": ("the op mix", "text"),
    },
    "DmaPacket": {
        "start_ts": ("DMA queue busy time", "number"),
        "duration_ns": ("DMA queue busy time", "number"),
        "queue_name": ("the DMA queue table", "text"),
    },
    "FrameworkInstruction": {
        "framework_name": ("a layer's split by category", "text"),
        "time_intervals": ("a layer's split by category", "text"),
    },
    "Metadata": {
        "tensor_engine_num_rows": ("the device's own peaks", "number"),
        "tensor_engine_num_cols": ("the device's own peaks", "number"),
        "tensor_engine_clock_freq": ("the device's own peaks", "number"),
        "hbm_ddr_bandwidth": ("the device's own peaks", "number"),
    },
}
FIELDS_TABLE = "SchemaFields"
KINDS = {"integer": "number", "number": "number", "string": "text"}  # OpenAPI types as SchemaFields gives them


def declared(db: ProfileDB) -> dict[str, dict[str, dict]] | None:
    """table -> field -> {"type", "unit"} as the profile's SchemaFields declares them; None without one."""
    if FIELDS_TABLE not in db.tables:
        return None
    have = {column for column, _ in db.describe(FIELDS_TABLE)}
    cols = [c for c in ("table_name", "field_name", "field_type", "field_unit") if c in have]
    if not {"table_name", "field_name"} <= set(cols):
        return None
    out: dict[str, dict[str, dict]] = {}
    for row in db.df(f'SELECT DISTINCT {", ".join(cols)} FROM "{FIELDS_TABLE}"').to_dict("records"):
        fields = out.setdefault(str(row["table_name"]), {})
        fields[str(row["field_name"])] = {"type": row.get("field_type"), "unit": row.get("field_unit")}
    return out


def problems(db: ProfileDB, version: str | None) -> list[str]:
    """One sentence per field we read that a parquet table of this profile lacks, by its SchemaFields where
    it has one (or declares with a type we cannot read as what we need), else by the table's columns.
    Tables the profile does not have are not asked: a table is written only when that activity happened."""
    tables = {t.lower(): t for t in db.tables}
    schema = declared(db)
    at = f"profile schema {version or '(version not recorded)'}"
    out = []
    for table, fields in READ.items():
        name = tables.get(table.lower())
        if name != table:  # absent, or the legacy json's lower-case table: not the parquet schema
            continue
        if schema is not None and table in schema:
            for field, (use, kind) in fields.items():
                found = schema[table].get(field)
                if found is None:
                    out.append(
                        f"{at}: the {table} table's SchemaFields declares no {field} field, so {use} is not read "
                        "from it; send view/profile-schema.txt with a bug report"
                    )
                elif KINDS.get(str(found["type"]).lower(), kind) != kind:
                    out.append(
                        f"{at}: the {table} table's SchemaFields declares {field} as {found['type']}, where {use} "
                        f"reads it as a {kind}; send view/profile-schema.txt with a bug report"
                    )
            continue
        have = {column for column, _ in db.describe(name)}
        out += [
            f"{at}: the {table} table has no {field} column, so {use} is not read from it; send "
            "view/profile-schema.txt with a bug report"
            for field, (use, _) in fields.items()
            if field not in have
        ]
    return out
