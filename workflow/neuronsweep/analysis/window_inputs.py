"""What the performance-bounds ladder reads, over a window of a profile instead of the whole kernel: each
category of a layer's FrameworkInstruction ops (analysis/framework_split.py), read from the parquet tables.

As AWS's profile-analysis guidance for Neuron Explorer computes a window's bounds (performance-bounds.md,
"over a time window"; the tables' fields from profile-schema-reference.rst):
- DMA active time: the union of `DmaPacket` intervals clipped to the window (the DMA engines overlap: never
  a plain sum); bytes: `transfer_bytes` of the packets with `queue_type != 'instruction'` and more than 4
  bytes that start in the window;
- each engine's active time: `ActiveTime` (already merged per engine) clipped to the window, the union over
  the physical cores of a logical one: the time any of its cores' engine was busy, as the DMA's union spans
  both cores' DMA engines; the ladder divides by both cores' peaks (docs/metrics.md, "LNC 2");
- hardware FLOPs: `adjusted_flops` of the `MATMUL` instructions that start in the window (BF16-equivalent,
  so TensorE's BF16 peak divides them); transposes: those with `tensor_instruction_type = 'TRANSPOSE'`.
The necessary bytes (TensorInfo) are the kernel's tensors, not a window's: a window has no such bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from neuronsweep.analysis.engines import COMPUTE_ENGINES
from neuronsweep.analysis.framework_split import categorize_ops
from neuronsweep.analysis.intervals import covered_by, merge, starts_inside
from neuronsweep.analysis.profile_tables import ProfileTables, columns, find_table

TABLES = {
    "DmaPacket": ("start_ts", "end_ts", "transfer_bytes", "queue_type"),
    "ActiveTime": ("start_ts", "end_ts", "engine"),
    "Instruction": ("start_ts", "opcode", "adjusted_flops", "tensor_instruction_type"),
}


@dataclass
class WindowInputs:
    """One category's window (ns) and what the profile's tables say happened in it (seconds, bytes, FLOPs)."""

    window_s: float
    dma_active_s: float
    dma_bytes: float
    engine_active_s: dict[str, float]
    hardware_flops: float
    transpose_flops: float

    def plus(self, other: WindowInputs) -> WindowInputs:
        """Both windows' times, bytes and FLOPs together (one kind of step on two ranks): a ladder over the sum
        is the ladder of their total time."""
        engines = {e: self.engine_active_s.get(e, 0.0) + other.engine_active_s.get(e, 0.0) for e in COMPUTE_ENGINES}
        return WindowInputs(
            window_s=self.window_s + other.window_s,
            dma_active_s=self.dma_active_s + other.dma_active_s,
            dma_bytes=self.dma_bytes + other.dma_bytes,
            engine_active_s=engines,
            hardware_flops=self.hardware_flops + other.hardware_flops,
            transpose_flops=self.transpose_flops + other.transpose_flops,
        )


def window_inputs(
    db: ProfileTables, rows: list[tuple[str, object]]
) -> tuple[dict[str, WindowInputs] | None, str | None]:
    """Per category of the layer's FrameworkInstruction rows (framework_name, time_intervals), its window's
    inputs; or (None, why) where a table or column the window needs is missing."""
    missing = lacking(db)
    if missing:
        return None, f"the profile has no {missing}, which a category's window bounds read"
    windows, why = categorize_ops(rows)
    if windows is None:
        return None, why
    return inputs_over(db, windows), None


def inputs_over(db: ProfileTables, windows: dict[str, list[tuple[int, int]]]) -> dict[str, WindowInputs]:
    """Each named window's inputs (its spans in ns, on the tables' clock), the tables being there (lacking
    says where they are not): a layer's categories, or a server session's executions of one NEFF."""
    dma = _frame(db, "DmaPacket", "start_ts, end_ts, transfer_bytes, queue_type")
    counted = dma[(dma["queue_type"].astype(str) != "instruction") & (dma["transfer_bytes"] > 4)]
    active = _frame(db, "ActiveTime", "start_ts, end_ts, lower(engine) AS engine")
    matmul = _frame(
        db,
        "Instruction",
        "start_ts, adjusted_flops, upper(tensor_instruction_type) AS type",
        "opcode = 'MATMUL' AND adjusted_flops IS NOT NULL",
    )
    out = {}
    for category, spans in windows.items():
        window = merge([s for s, _ in spans], [e for _, e in spans])
        engines = {
            e: covered_by(window, *(active.loc[active["engine"] == e, c] for c in ("start_ts", "end_ts"))) * 1e-9
            for e in COMPUTE_ENGINES
        }
        flops = matmul[starts_inside(window, matmul["start_ts"])]
        out[category] = WindowInputs(
            window_s=float((window[1] - window[0]).sum()) * 1e-9,
            dma_active_s=covered_by(window, dma["start_ts"], dma["end_ts"]) * 1e-9,
            dma_bytes=float(counted["transfer_bytes"][starts_inside(window, counted["start_ts"])].sum()),
            engine_active_s=engines,
            hardware_flops=float(flops["adjusted_flops"].sum()),
            transpose_flops=float(flops.loc[flops["type"] == "TRANSPOSE", "adjusted_flops"].sum()),
        )
    return out


def lacking(db: ProfileTables) -> str | None:
    """The first table, or table.column, the windows need that the profile lacks."""
    for name, wanted in TABLES.items():
        table = find_table(db, name)
        if table is None:
            return f"{name} table"
        missing = [c for c in wanted if c not in columns(db, table)]
        if missing:
            return f"{name}.{missing[0]} column"
    return None


def _frame(db: ProfileTables, name: str, wanted: str, where: str = "TRUE") -> pd.DataFrame:
    """The table's `wanted` columns for the rows `where` keeps (the table is there: lacking said so)."""
    return db.df(f'SELECT {wanted} FROM "{find_table(db, name)}" WHERE {where}')
