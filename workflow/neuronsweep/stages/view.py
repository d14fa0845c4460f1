"""view stage: convert a raw profile into summary.json (Neuron summary fields and units), a .pftrace,
and on neuron parquet / legacy json as configured."""

from __future__ import annotations

import time
from pathlib import Path

from neuronsweep import backends
from neuronsweep.atomic import write_json
from neuronsweep.backends import neuron_profiler
from neuronsweep.config.settings import ViewSettings
from neuronsweep.errors import UserError
from neuronsweep.store.records import CaptureRecord, ViewFields, ViewRecord


def _finish(out_dir: Path, started: float, result: ViewFields, **fields: object) -> ViewRecord:
    write_json(out_dir / "summary.json", result.pop("summary"))
    record = ViewRecord.create(started, **fields, **result)
    record.write(out_dir)
    return record


def run(capture_dir: Path, out_dir: Path, settings: ViewSettings) -> ViewRecord:
    """View one capture: the profiler's output as summary.json, trace.pftrace and (neuron) parquet.

    Args:
        capture_dir: the case's capture/ folder (capture.json names the backend and the profile).
        out_dir: the case's view/ folder.
        settings: the timeout and the backend's config section (neuron: the output formats).

    Returns:
        The ViewRecord written as out_dir/view.json: which files were written and how long it took.
    """
    started = time.time()
    cap = CaptureRecord.read(capture_dir)
    impl = backends.load(cap.backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = impl.view(cap, capture_dir, out_dir, settings)
    return _finish(out_dir, started, result, workload_id=cap.workload_id, backend=cap.backend, spec=cap.spec)


def run_ntff(neff: Path, ntff: Path, out_dir: Path, settings: ViewSettings) -> ViewRecord:
    """View an NTFF captured anywhere against its NEFF (neuron only)."""
    started = time.time()
    for path, what in ((neff, "NEFF"), (ntff, "NTFF")):
        if not path.is_file():
            raise UserError(f"{path}: no such {what} file.")
    out_dir.mkdir(parents=True, exist_ok=True)
    result = neuron_profiler.view_profile(neff, ntff, out_dir, settings)
    return _finish(out_dir, started, result, workload_id=neff.stem, backend="neuron", spec=None)
