"""build stage: compile one workload with its backend, through the content-addressed cache."""

from __future__ import annotations

import time
from pathlib import Path

from neuronsweep import backends
from neuronsweep.config.settings import BuildSettings
from neuronsweep.store.cache import CompileCache
from neuronsweep.store.records import BuildRecord
from neuronsweep.workloads import workload_id


def run(spec: dict, backend: str, out_dir: Path, cache_dir: str, settings: BuildSettings) -> BuildRecord:
    started = time.time()
    impl = backends.load(backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = impl.build(spec, out_dir, CompileCache(cache_dir, backend), settings.for_backend(backend))
    record = BuildRecord.create(
        started,
        workload_id=workload_id(spec),
        backend=backend,
        spec=spec,
        artifact=backends.BACKENDS[backend].build_artifact(spec),
        **result,
    )
    record.write(out_dir)
    return record
