"""Device memory by usage type and the on-chip peaks. HBM by usage type from the parquet
`HbmUsageSummaryByType` table (usage_type, usage_bytes: profile-schema-reference.rst), which SDK 2.34
maintains, else from the legacy full-profile JSON's `nc_mem_usage` (bytes per usage type), whose end of
support is announced for 2.35; the SBUF and PSUM peaks from the highest `avg_util_percent` of the parquet
`SbufUsage` and `PsumUsage` series (read as fractions, as the summary's percent fields are), else the legacy
`instruction_usage` (fractions).
The Memory Tracker's per-tensor view has no exported field, so largest_tensor_bytes is always null with
that reason."""

from __future__ import annotations

import json
from dataclasses import dataclass

from neuronsweep.analysis.metrics.parts import Part
from neuronsweep.analysis.profile_tables import ProfileTables, columns, find_table
from neuronsweep.config.backends import BACKENDS
from neuronsweep.json_numbers import finite_number


@dataclass(kw_only=True)
class Memory(Part):
    """Device memory by usage type and the on-chip SBUF/PSUM peaks (neuron's legacy profile only)."""

    hbm_tensors_bytes: float | None = None
    hbm_scratchpad_bytes: float | None = None
    hbm_dram_spill_bytes: float | None = None
    sbuf_peak_usage_pct: float | None = None
    psum_peak_usage_pct: float | None = None
    largest_tensor_bytes: float | None = None


HBM_USAGE = {  # key -> the nc_mem_usage usage types it sums
    "hbm_tensors_bytes": ("Tensors",),
    "hbm_scratchpad_bytes": ("Scratchpad", "Shared Scratchpad"),
    "hbm_dram_spill_bytes": ("DRAM Spill",),
}
ON_CHIP_USAGE = {"sbuf_peak_usage_pct": "sb", "psum_peak_usage_pct": "psum"}  # key -> instruction_usage type
NO_USAGE = (
    "read from the parquet HbmUsageSummaryByType table, or the legacy full profile (neuron.json: true; "
    "nc_mem_usage); the view has neither"
)
NO_ON_CHIP = (
    "read from the parquet SbufUsage / PsumUsage series, or the legacy full profile (neuron.json: true; "
    "instruction_usage); the view has neither"
)
ON_CHIP_SOURCES = {
    "instruction_usage": "the legacy profile's instruction_usage",
    "buffer_usage": "the SbufUsage / PsumUsage tables' avg_util_percent",
}
SOURCES = {"nc_mem_usage": "the legacy profile's nc_mem_usage", "hbm_usage_by_type": "the HbmUsageSummaryByType table"}
NO_TRACKER = (
    "the Memory Tracker (neuron.memory_tracker) draws its per-tensor breakdown in "
    "the profiler's UI; no exported field holds it, so it is not read"
)


def memory(usage: dict | None, backend: str, no_device_why: str | None) -> Memory:
    """`usage`: the legacy profile's arrays by name (neuron only)."""
    part = Memory(notes={"largest_tensor_bytes": NO_TRACKER})
    if not BACKENDS[backend].neuron_device:
        part.notes.update(
            dict.fromkeys(Memory.keys()[:-1], no_device_why or f"the {backend} backend has no device memory")
        )
        return part
    source = next((k for k in SOURCES if (usage or {}).get(k)), "nc_mem_usage")
    rows = [r for r in (usage or {}).get(source) or () if isinstance(r, dict)]
    for key, types in HBM_USAGE.items():
        found = [r.get("amount_bytes") for r in rows if r.get("usage_type") in types]
        amounts = [finite_number(a) for a in found]
        if found and any(a is None or a < 0 for a in amounts):
            part.notes[key] = f"{SOURCES[source]} amounts {json.dumps(found)[:80]} are not all bytes >= 0"
            continue
        setattr(part, key, sum(a for a in amounts if a is not None) if found else None)
        if not found:
            part.notes[key] = f"{SOURCES[source]} has no {' / '.join(types)} row" if rows else NO_USAGE
    on_chip = next((k for k in ON_CHIP_SOURCES if (usage or {}).get(k)), "instruction_usage")
    series = [r for r in (usage or {}).get(on_chip) or () if isinstance(r, dict)]
    for key, kind in ON_CHIP_USAGE.items():
        raw = [r.get("usage_avg") for r in series if r.get("type") == kind and r.get("usage_avg") is not None]
        values = [finite_number(v) for v in raw]
        if any(v is None or not 0 <= v <= 1 for v in values):
            part.notes[key] = f"{ON_CHIP_SOURCES[on_chip]} {kind} values are not all fractions 0..1"
            continue
        setattr(part, key, 100.0 * max(v for v in values if v is not None) if values else None)
        if not values:
            part.notes[key] = f"{ON_CHIP_SOURCES[on_chip]} has no {kind} series" if series else NO_ON_CHIP
    return part


def parquet_usage(db: ProfileTables | None) -> dict[str, list | None]:
    """The parquet view's device memory in the legacy arrays' shapes: `hbm_usage_by_type` from
    HbmUsageSummaryByType ({usage_type, amount_bytes}), `buffer_usage` from the SbufUsage and PsumUsage series'
    avg_util_percent ({type: sb | psum, usage_avg}; profile-schema-reference: "Average utilization across all
    State Buffer partitions", "Average fullness across all PSUM memory banks"); None where the view lacks them."""
    out: dict[str, list | None] = {"hbm_usage_by_type": None, "buffer_usage": None}
    if db is None:
        return out
    hbm = find_table(db, "HbmUsageSummaryByType")
    if hbm is not None and {"usage_type", "usage_bytes"} <= columns(db, hbm):
        out["hbm_usage_by_type"] = db.df(f'SELECT usage_type, usage_bytes AS amount_bytes FROM "{hbm}"').to_dict(
            "records"
        )
    series = []
    for name, kind in (("SbufUsage", "sb"), ("PsumUsage", "psum")):
        table = find_table(db, name)
        if table is not None and "avg_util_percent" in columns(db, table):
            found = db.df(f'SELECT avg_util_percent FROM "{table}" WHERE avg_util_percent IS NOT NULL')
            series += [{"type": kind, "usage_avg": v} for v in found["avg_util_percent"]]
    out["buffer_usage"] = series or None
    return out
