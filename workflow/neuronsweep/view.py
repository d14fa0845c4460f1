"""view stage: convert a raw profile into summary.json (Neuron summary fields and units), a .pftrace,
and on neuron parquet / legacy json as configured."""

from __future__ import annotations

import time
from pathlib import Path

from . import backends
from .atomic import read_json, write_json
from .errors import UserError
from .records import stage_record


def _finish(out_dir: Path, started: float, result: dict, **fields) -> dict:
    write_json(out_dir / "summary.json", result.pop("summary"))
    record = stage_record("view", started, **fields, **result)
    write_json(out_dir / "view.json", record)
    return record


def run(capture_dir: Path, out_dir: Path, options: dict | None = None) -> dict:
    started = time.time()
    capture_json = capture_dir / "capture.json"
    if not capture_json.is_file():
        raise UserError(f"{capture_json}: no capture record; run the capture stage for this case first.")
    cap = read_json(capture_json)
    impl = backends.load(cap["backend"])
    out_dir.mkdir(parents=True, exist_ok=True)
    result = impl.view(cap, capture_dir, out_dir, options or {})
    return _finish(out_dir, started, result, workload_id=cap["workload_id"], backend=cap["backend"])


def run_ntff(neff: Path, ntff: Path, out_dir: Path, options: dict | None = None) -> dict:
    """View an NTFF captured anywhere against its NEFF (neuron only)."""
    from .backends import neuron_profiler

    started = time.time()
    for path, what in ((neff, "NEFF"), (ntff, "NTFF")):
        if not path.is_file():
            raise UserError(f"{path}: no such {what} file.")
    out_dir.mkdir(parents=True, exist_ok=True)
    result = neuron_profiler.view_profile(neff, ntff, out_dir, options or {})
    return _finish(out_dir, started, result, workload_id=neff.stem, backend="neuron")
