"""view stage: convert a raw profile into a summary (Neuron field names and units) and a .pftrace."""

from __future__ import annotations

import time
from pathlib import Path

from . import backends
from .atomic import read_json, write_json
from .errors import UserError
from .records import stage_record


def run(capture_dir: Path, out_dir: Path) -> dict:
    started = time.time()
    capture_json = capture_dir / "capture.json"
    if not capture_json.is_file():
        raise UserError(f"{capture_json}: no capture record; run the capture stage for this case first.")
    cap = read_json(capture_json)
    impl = backends.load(cap["backend"])
    out_dir.mkdir(parents=True, exist_ok=True)
    result = impl.view(cap, capture_dir, out_dir)
    write_json(out_dir / "summary.json", result.pop("summary"))
    record = stage_record("view", started, workload_id=cap["workload_id"], backend=cap["backend"], **result)
    write_json(out_dir / "view.json", record)
    return record
