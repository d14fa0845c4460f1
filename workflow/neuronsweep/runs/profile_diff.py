"""What changed inside a workload that got slower or faster: its profile tables of run A against run B,
per opcode, engine, DMA queue and source line (aten op and thread on cpu), ranked by how much of the
change each explains.

Each table the extract stage wrote (`<workload>/tables/*.csv`) is matched row by row on its key
columns. A row's share of the change is its time delta over the sum of the deltas of its table, so the
shares of one table add up to 1 (for self times, the sum of the deltas is the change of the profiled
time). A count that differs (instructions per opcode, calls per aten op) is called out: the same
workload compiled to other instructions (other tiling, another compiler) is a different program, not
the same one run slower. Both sides are one profiled execution each, so a small delta is within that
execution's noise: the ranking says where to look, the verdict on the processes says whether to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Spec:
    """What one table of a profile diff compares: its rows' keys and their time and count columns."""

    dimension: str  # what a row of the table is, as the report names it
    keys: tuple[str, ...]  # the columns that name a row (those present are used)
    time: str  # its time column (ns)
    count: str  # its count column


SPECS = {  # table file -> how to diff it; the tables are analysis/derived.py's
    "opcodes.csv": Spec("op (aten op on cpu, opcode on neuron)", ("class", "name"), "self_ns", "count"),
    "op_mix.csv": Spec(
        "opcode per engine", ("opcode", "computation_kind", "engine", "label"), "total_time", "instructions"
    ),
    "engine_busy.csv": Spec("engine", ("class", "pcore_idx"), "busy_ns", "instructions"),
    "dma_queues.csv": Spec("DMA queue", ("queue",), "busy_ns", "packets"),
    "top_sources.csv": Spec("source line", ("source_kind", "source"), "total_time", "instructions"),
}
PROFILER_SPAN = "PyTorch Profiler ("  # torch.profiler's own span around the capture: not work
COLUMNS = [
    "workload_id",
    "verdict",
    "dimension",
    "key",
    "time_a_ns",
    "time_b_ns",
    "delta_ns",
    "share_of_change",
    "count_a",
    "count_b",
    "count_changed",
]


def _read(path: Path, spec: Spec) -> pd.DataFrame | None:
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError):  # missing, empty (no rows) or damaged: nothing to diff on this side
        return None
    keys = [k for k in spec.keys if k in df.columns]
    if not keys or spec.time not in df.columns:
        return None
    count = df[spec.count] if spec.count in df.columns else (df["slices"] if "slices" in df.columns else None)
    out = pd.DataFrame(
        {
            "key": df[keys].astype(str).where(df[keys].notna(), "").agg(" / ".join, axis=1).str.strip(" /"),
            "time": pd.to_numeric(df[spec.time], errors="coerce"),
            "count": pd.to_numeric(count, errors="coerce") if count is not None else float("nan"),
        }
    )
    out = out[~out["key"].str.contains(PROFILER_SPAN, regex=False)]
    return out.groupby("key", as_index=False).sum(min_count=1)


def diff(wid: str, said: str, dir_a: Path, dir_b: Path) -> pd.DataFrame:
    """The ranked rows of every table both runs have for this workload."""
    parts = []
    for name, spec in SPECS.items():
        a, b = _read(Path(dir_a) / "tables" / name, spec), _read(Path(dir_b) / "tables" / name, spec)
        if a is None or b is None:
            continue
        both = a.merge(b, on="key", how="outer", suffixes=("_a", "_b"))
        delta = both["time_b"].fillna(0) - both["time_a"].fillna(0)
        total = delta.sum()
        part = pd.DataFrame(
            {
                "workload_id": wid,
                "verdict": said,
                "dimension": spec.dimension,
                "key": both["key"],
                "time_a_ns": both["time_a"],
                "time_b_ns": both["time_b"],
                "delta_ns": delta,
                "share_of_change": delta / total if total else None,
                "count_a": both["count_a"],
                "count_b": both["count_b"],
                "count_changed": both["count_a"].fillna(-1) != both["count_b"].fillna(-1),
            }
        )
        parts.append(part.reindex(part["delta_ns"].abs().sort_values(ascending=False).index))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
