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
here; the profile's own SchemaFields says whether it still has them, and the field test prints it). Every
field the bounds ladder, its windows, the throttling and the small-DMA insight read is listed, so a rename
shows here, by name, before any number is computed from the column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neuronsweep.formats.profile_db import ProfileDB

# table -> field -> (what needs it, the kind of value we read it as)
LADDER = "the bounds ladder"
WINDOWS = "a layer category's window bounds"
THROTTLE = "throttling while TensorE is active"
READ = {
    "Instruction": {
        "start_ts": ("engine busy time", "number"),
        "duration_ns": ("engine busy time", "number"),
        "engine": ("engine busy time", "text"),
        "opcode": ("the op mix", "text"),
        "adjusted_flops": (WINDOWS, "number"),
        "tensor_instruction_type": (WINDOWS, "text"),
    },
    "DmaPacket": {
        "start_ts": ("DMA queue busy time", "number"),
        "end_ts": (WINDOWS, "number"),
        "duration_ns": ("DMA queue busy time", "number"),
        "queue_name": ("the DMA queue table", "text"),
        "transfer_bytes": (WINDOWS, "number"),
        "queue_type": (WINDOWS, "text"),
    },
    "DmaPacketAggregated": {
        "transfer_bytes": ("the small-DMA insight (descriptor size)", "number"),
        "queue_type": ("the small-DMA insight (descriptor size)", "text"),
        "queue_name": ("the small-DMA insight (descriptor size)", "text"),
        "read_num_sbuf_partitions": ("the small-DMA insight (descriptor size)", "number"),
        "write_num_sbuf_partitions": ("the small-DMA insight (descriptor size)", "number"),
    },
    "ActiveTime": {
        "start_ts": (WINDOWS, "number"),
        "end_ts": (WINDOWS, "number"),
        "engine": (WINDOWS, "text"),
        "pcore_idx": (THROTTLE, "number"),
    },
    "CcOp": {
        "start_ts": ("the ranks' collectives on one timeline", "number"),
        "end_ts": ("the ranks' collectives on one timeline", "number"),
        "operation": ("the ranks' collectives on one timeline", "text"),
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
        "dma_ddr_bandwidth": (f"{LADDER}'s DMA peak", "number"),
        "num_physical_cores": (f"{LADDER}'s peaks at LNC 2", "number"),
    },
    "Summary": {
        field: (LADDER, "number")
        for field in (
            "total_time",
            "total_active_time",
            "dma_active_time",
            "dma_transfer_total_bytes",
            "dma_transfer_count",
            "inputs_outputs_weights_size_bytes",
            "hardware_flops",
            "transpose_flops",
            "model_flops",
            "tensor_engine_active_time",
            "vector_engine_active_time",
            "scalar_engine_active_time",
            "gpsimd_engine_active_time",
            "spill_reload_bytes",
            "hbm_read_bytes",
        )
    },
    "Throttle": {field: (THROTTLE, "number") for field in ("timestamp", "duration", "k", "n")},
    "ThrottleSummary": {
        "nc_idx": ("the throttling activities", "number"),
        "throttle_type": ("the throttling activities", "text"),
        "max_achievable_util_with_throttling_percent": ("the throttling activities", "number"),
    },
    "SbufUsage": {"avg_util_percent": ("the SBUF peak", "number")},
    "PsumUsage": {"avg_util_percent": ("the PSUM peak", "number")},
    "HbmUsageSummaryByType": {
        "usage_type": ("device memory by usage type", "text"),
        "usage_bytes": ("device memory by usage type", "number"),
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
