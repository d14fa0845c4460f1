"""extract stage: one normalized metrics.json per workload, same keys on every backend (docs/metrics.md).

Never imports torch. The stage reads the records and the view, has analysis/metrics compose the
values (a value a backend cannot measure is null, with the reason in `notes`), and writes metrics.json
and the case's tables.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuronsweep.analysis import derived, device_collectives, framework_split
from neuronsweep.analysis.device_collectives import DeviceRanks
from neuronsweep.analysis.metrics import bounds, memory
from neuronsweep.analysis.metrics.case import compose
from neuronsweep.analysis.metrics.collectives import rank_latency
from neuronsweep.analysis.metrics.memory import Memory
from neuronsweep.analysis.profile_tables import find_table
from neuronsweep.analysis.window_inputs import WindowInputs, window_inputs
from neuronsweep.atomic import read_json, replacing
from neuronsweep.backends import BACKENDS
from neuronsweep.errors import UserError
from neuronsweep.formats import legacy_json, neuron_summary, profile_schema
from neuronsweep.formats.profile_db import ProfileDB, patterns_from
from neuronsweep.store.layer_split import LayerSplitRecord
from neuronsweep.store.records import BuildRecord, CaptureRecord, MetricsRecord, provenance
from neuronsweep.workloads import described


def compute(summary: dict, *records: Any, **known: Any) -> dict:
    """metrics.json's values (with "spec" and "notes"): analysis/metrics/case.py `compose` with the same
    arguments (summary, capture, build, calibration, metadata, usage, ranks, dma_packets), told what the
    summary reader left out and what each backend cannot count."""
    return compose(
        summary,
        *records,
        **known,
        invalid=summary.get(neuron_summary.INVALID, {}),
        no_device_why={name: b.device_counters_missing for name, b in BACKENDS.items()},
    )


def view_db(view_dir: Path, track_patterns: Mapping[str, str] | None = None) -> ProfileDB | None:
    """The view's profile tables, read once for the metadata and every derived table (a legacy json is
    a gigabyte-sized stream); None when the folder holds none."""
    db = ProfileDB(patterns_from(track_patterns))
    db.load_view(view_dir, view_dir.parent.name)
    if not db.tables:
        return None
    db.finish()
    return db


def write_tables(db: ProfileDB | None, out_dir: Path) -> dict:
    """Per-workload tables from the view (derived.TABLES) as CSV; returns name -> rows written."""
    if db is None:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, fn in derived.TABLES.items():
        table = fn(db)
        if table is not None:
            with replacing(out_dir / f"{name}.csv") as tmp:
                table.to_csv(tmp, index=False)
            written[name] = len(table)
    return written


def profile_metadata(db: ProfileDB | None, summary_json: Path) -> dict | None:
    """The device metadata (peaks, clocks, bandwidth): the view's parquet `Metadata` or legacy json
    `metadata` table; else, when the summary file given is itself a legacy full profile, its
    `metadata[0]`; None otherwise (summary-json carries none)."""
    if db is not None and "metadata" in {t.lower() for t in db.tables}:
        cursor = db.sql("SELECT * FROM metadata LIMIT 1")
        names = [d[0] for d in cursor.description]
        row = cursor.fetchone()
        return neuron_summary.metadata({k: v for k, v in zip(names, row) if k != "workload_id"}) if row else None
    with open(summary_json, "rb") as handle:
        if not handle.read(64).lstrip().startswith(b"{"):  # raw summary-json starts with log lines
            return None
    return neuron_summary.metadata(legacy_json.first_record(summary_json, "metadata"))  # damaged: one sentence


def is_full_profile(path: Path) -> bool:
    """Whether the file is a legacy full-profile JSON (a raw summary-json or summary-text starts with log lines)."""
    with open(path, "rb") as handle:
        return handle.read(64).lstrip().startswith(b"{")


def profile_warnings(path: Path) -> list | None:
    """The profile's own warnings (a legacy JSON's top-level `warnings`: what the tool could not measure);
    None where the file is not a legacy JSON (summary-json and summary-text carry none)."""
    if not is_full_profile(path):
        return None
    found = legacy_json.small_array(path, "warnings")
    return found if isinstance(found, list) else None


def device_reads(
    summary: dict, db: ProfileDB | None, legacy: Path
) -> tuple[dict[str, list | None], list | None, bounds.Evidence]:
    """What only a NeuronCore's profile has: its device memory by usage type, its own warnings, and the
    headroom's evidence from its tables (`legacy`: the summary file given, or the full profile beside it,
    which may be a legacy full-profile JSON whose `ham` and `active_time` the tables do not load)."""
    usage = {key: legacy_json.small_array(legacy, key) for key in ("nc_mem_usage", "instruction_usage")}
    usage |= memory.parquet_usage(db)
    # throttling while TensorE is active: from the view's Throttle table, else the legacy JSON's ham and
    # active_time where they sit in its first or last MiB (never a pass over the whole file for them)
    parquet = db is not None and find_table(db, "Throttle") is not None
    full = not parquet and is_full_profile(legacy)
    arrays = (
        {key: legacy_json.small_array(legacy, key, stream=False) for key in ("ham", "active_time")} if full else None
    )
    return usage, profile_warnings(legacy), bounds.evidence(summary, db, arrays)


RANK_TIMES = ("median_s", "iqr_s", "min_s", "spread_s", "n")


def profile_split(db: ProfileDB | None, summary: dict) -> tuple[LayerSplitRecord | None, str | None] | None:
    """A layer's split from the view's FrameworkInstruction table: framework_split.split's (split, why), or
    None where the view has no such table."""
    rows, why = derived.framework_ops(db)
    if rows is None:
        return (None, why) if why else None
    return framework_split.split(rows, summary.get("total_time"))


def profile_windows(db: ProfileDB | None) -> tuple[dict[str, WindowInputs] | None, str | None] | None:
    """Each category's window inputs from the view's parquet tables (window_inputs.window_inputs), or None
    where the view has no FrameworkInstruction rows to make windows of."""
    rows, _ = derived.framework_ops(db)
    return None if db is None or not rows else window_inputs(db, rows)


def gloo_rank_rows(capture: CaptureRecord | None) -> list[dict]:
    """One row per rank of a gloo collective: its own times (capture.json `ranks`)."""
    return [{k: r.get(k) for k in ("rank", *RANK_TIMES)} for r in rank_latency(capture)]


def neuron_rank_rows(view_dir: Path) -> list[dict]:
    """One row per worker of a multi-worker neuron capture (the view's ranks/rank_<r>/summary.json):
    where it ran and its device time."""
    rows = []
    for path in sorted((view_dir / "ranks").glob("rank_*/summary.json"), key=lambda p: int(p.parent.name[5:])):
        s = neuron_summary.load(path)
        rows.append(
            {
                "rank": int(path.parent.name[5:]),
                "nc_idx": s.get("nc_idx"),
                "nd_idx": s.get("nd_idx"),
                "total_time_s": s.get("total_time"),
                "active_time_s": s.get("total_active_time"),
                "cc_op_time_s": s.get("cc_op_time"),
                "cc_op_count": s.get("cc_op_count"),
            }
        )
    return rows


def _rank_tables(
    ranks: list[dict], capture: CaptureRecord | None, folder: Path, device: DeviceRanks | None = None
) -> dict[str, int]:
    """tables/ranks.csv (one row per rank) and, where the capture (gloo) or the ranks' device profiles
    (neuron) put the ranks on one timeline, tables/rank_waits.csv (each collective instance's arrival and
    wait per rank): their row counts."""
    waits = capture.details.get("rank_waits") if capture is not None else None
    if not waits and device is not None and device.timeline is not None:
        waits = device.timeline.rows()
    found = {"ranks": ranks, "rank_waits": waits or []}
    return {name: write_ranks(rows, folder / f"{name}.csv") for name, rows in found.items() if rows}


def write_ranks(rows: list[dict], path: Path) -> int:
    """tables/ranks.csv (one row per rank) or tables/rank_waits.csv (one per execution and rank)."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_text(buf.getvalue())
    return len(rows)


def run(
    summary_json: Path,
    out: Path,
    capture_json: Path | None = None,
    build_json: Path | None = None,
    profile_json: Path | None = None,
    calibration_json: Path | None = None,
    track_patterns: Mapping[str, str] | None = None,
) -> MetricsRecord:
    """Extract one case's metrics: latency, FLOPs and bytes, roofline, engine activity, memory,
    collectives; every number the records do not hold is null with its reason in notes.

    Args:
        summary_json: the view's summary.json (or a profiler's raw summary-json output).
        out: the metrics.json to write; the case's tables/ go beside it.
        capture_json: the capture record (timing, settings, correctness), where there is one.
        build_json: the build record (spec, toolchain, compile time), where there is one.
        profile_json: a legacy full-profile JSON for fields summary.json lacks.
        calibration_json: cpu: the host's measured peaks (neuronsweep calibrate).
        track_patterns: {class: regex} to classify the profile's tracks.

    Returns:
        The MetricsRecord written to out.
    """
    started = time.time()
    summary = neuron_summary.load(summary_json)
    json_skipped = legacy_json.skipped(profile_json) if profile_json else None
    if json_skipped:  # the view could not write it (a tool after SDK 2.33): its fields are null with this reason
        profile_json = None
    if profile_json:  # fields summary-json lacks, from the full profile's own summary (early in the file)
        summary = {**(legacy_json.first_record(profile_json, "summary") or {}), **summary}
    capture = CaptureRecord.read(capture_json) if capture_json else None
    build = BuildRecord.read(build_json) if build_json else None
    calibration = read_json(calibration_json) if calibration_json else None
    db = view_db(summary_json.parent, track_patterns)
    if db is not None and (wrong := derived.type_problems(db, summary_json.parent)):  # before any SQL binds it
        raise UserError(f"{wrong[0]}.")  # a damaged parquet column: one sentence
    metadata = profile_metadata(db, summary_json)
    usage, warnings, found = None, None, None
    if capture is None or BACKENDS[capture.backend].neuron_device:  # only Neuron profiles have device memory
        usage, warnings, found = device_reads(summary, db, profile_json or summary_json)
    workers = neuron_rank_rows(summary_json.parent)
    device = device_collectives.read(summary_json.parent)  # a neuron case's ranks viewed as parquet
    packets = derived.dma_packet_count(db)
    layer = any(r is not None and described(r.spec).layer_split for r in (build, capture))
    from_profile = capture is None or BACKENDS[capture.backend].layer_split == "profile"  # else the capture's
    split, windows = (profile_split(db, summary), profile_windows(db)) if layer and from_profile else (None, None)
    known = (capture, build, calibration, metadata, usage, workers, packets, split, warnings, windows)
    values = compute(summary, *known, evidence=found, device=device)
    if capture is not None and capture.details.get("profile_scope"):  # an inspect session: several executions
        values["notes"]["profile_total_time_s"] = capture.details["profile_scope"]
    missing = profile_schema.problems(db, values["profile_schema_version"]) if db is not None else []
    if missing:  # a column the schema lacks: named, and the tables that need it are not written
        values["notes"]["profile_schema"] = " ".join(f"{m}." for m in missing)
        print("\n".join(missing), file=sys.stderr)
    for key in Memory.keys()[:-1] if json_skipped else ():
        if values[key] is None:  # HBM by usage type may come from the parquet table instead
            values["notes"][key] = json_skipped
    timed = {r["rank"]: r for r in rank_latency(capture)}
    if workers and timed:  # a neuron collective: each worker's profile and its framework times
        workers = [{**row, **{k: timed.get(row["rank"], {}).get(k) for k in RANK_TIMES}} for row in workers]
    ranks = workers or gloo_rank_rows(capture)
    sources = [str(p) for p in (summary_json, profile_json, capture_json, build_json, calibration_json) if p]
    tables = write_tables(db, out.parent / "tables")
    tables |= _rank_tables(ranks, capture, out.parent / "tables", device)
    record = MetricsRecord(
        values={k: v for k, v in values.items() if k not in ("spec", "notes")},
        notes=values["notes"],
        spec=values["spec"],
        provenance={
            **provenance("extract", started),
            "sources": sources,
            "tables": tables,
            "metadata_peaks": metadata is not None,
        },
    )
    record.write(out)
    return record
