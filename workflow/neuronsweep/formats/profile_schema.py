"""The parquet profile schema moves between SDKs (7.4.0 in 2.31, 12.0.1 in 2.33): the columns we read,
per schema major, and one sentence for each one a profile lacks.

The names are the profile schema reference's (tools/neuron-explorer/profile-schema-reference.rst,
schema 7.4.0). The v2.33.0 docs have the same generated page for 12.0.1, but its tables could not be
read here (the stored copies give its introduction only), so 12.x is not mapped column by column yet:
for any other major the view saves the tool's own dump (`neuron-explorer view --show-profile-schema`,
2.33; top-level `--show-profile-schema`, 2.31) beside the profile, the check below runs on the tables
the profile really has (a column we need and the schema lacks is named with the version, never a
KeyError or a silent null), and the field test's "parquet columns we read" line settles it on a device.
"""

from __future__ import annotations

SCHEMA_7 = {
    "Instruction": {
        "start_ts": "engine busy time",
        "duration_ns": "engine busy time",
        "engine": "engine busy time",
        "opcode": "the op mix",
    },
    "DmaPacket": {
        "start_ts": "DMA queue busy time",
        "duration_ns": "DMA queue busy time",
        "queue_name": "the DMA queue table",
    },
    "Metadata": {
        "tensor_engine_num_rows": "the device's own peaks",
        "tensor_engine_num_cols": "the device's own peaks",
        "tensor_engine_clock_freq": "the device's own peaks",
        "hbm_ddr_bandwidth": "the device's own peaks",
    },
}
NEEDED = {7: SCHEMA_7}  # a major we have not seen is checked against the 7.x names on the profile itself


def major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except (TypeError, ValueError):
        return None


def needed(version: str | None) -> dict[str, dict[str, str]]:
    return NEEDED.get(major(version), SCHEMA_7)


def problems(db, version: str | None) -> list[str]:
    """One sentence per needed column a parquet table of this profile lacks (tables it does not have
    are not asked: a table is written only when that activity happened)."""
    tables = {t.lower(): t for t in db.tables}
    out = []
    for table, columns in needed(version).items():
        name = tables.get(table.lower())
        if name != table:  # absent, or the legacy json's lower-case table: not the parquet schema
            continue
        have = {column for column, _ in db.describe(name)}
        for column, use in columns.items():
            if column not in have:
                out.append(
                    f"profile schema {version or '(version not recorded)'}: the {table} table has no "
                    f"{column} column, so {use} is not read from it; send view/profile-schema.txt with a bug report"
                )
    return out
