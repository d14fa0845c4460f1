"""capture stage: run a built workload and record a profile of its nth execution plus framework timing."""

from __future__ import annotations

import time
from pathlib import Path

from . import backends
from .atomic import read_json, write_json
from .errors import UserError
from .records import stage_record


def run(build_dir: Path, out_dir: Path, settings: dict) -> dict:
    started = time.time()
    build_json = build_dir / "build.json"
    if not build_json.is_file():
        raise UserError(f"{build_json}: no build record; run the build stage for this case first.")
    build = read_json(build_json)
    if settings["nth_exec"] > settings["num_exec"]:
        raise UserError(f"--nth-exec {settings['nth_exec']} exceeds --num-exec {settings['num_exec']}; "
                        "lower nth or raise num.")
    impl = backends.load(build["backend"])
    out_dir.mkdir(parents=True, exist_ok=True)
    result = impl.capture(build, build_dir, settings, out_dir)
    record = stage_record("capture", started, workload_id=build["workload_id"], backend=build["backend"],
                          spec=build["spec"], settings=settings, **result)
    write_json(out_dir / "capture.json", record)
    return record
