"""build stage: compile one workload with its backend, through the content-addressed cache."""

from __future__ import annotations

import time
from pathlib import Path

from . import backends
from .atomic import write_json
from .cache import CompileCache
from .records import stage_record
from .workloads import workload_id


def run(spec: dict, backend: str, out_dir: Path, cache_dir: str, options: dict | None = None) -> dict:
    started = time.time()
    impl = backends.load(backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = impl.build(spec, out_dir, CompileCache(cache_dir, backend), options or {})
    record = stage_record("build", started, workload_id=workload_id(spec), backend=backend, spec=spec,
                          artifact=backends.BACKENDS[backend].artifacts["build"], **result)
    write_json(out_dir / "build.json", record)
    return record
