"""build stage: compile one workload with its backend, through the content-addressed cache."""

from __future__ import annotations

import time
from pathlib import Path

from neuronsweep import backends
from neuronsweep.config.settings import BuildSettings
from neuronsweep.store.cache import CompileCache
from neuronsweep.store.records import BuildRecord
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import described, workload_id


def run(spec: Spec, backend: str, out_dir: Path, cache_dir: str, settings: BuildSettings) -> BuildRecord:
    """Build one workload: the backend compiles it through the compile cache into out_dir.

    Args:
        spec: the workload spec (workloads/: kind, shape, dtype, ...), as plan.json lists it.
        backend: cpu, xla or neuron.
        out_dir: the case's build/ folder; build.json and the artifact go there.
        cache_dir: the compile cache shared by every run (store/cache.py).
        settings: the build's timeout, device lock and slot, and the backend's config section.

    Returns:
        The BuildRecord written as out_dir/build.json: artifact, digest, toolchain, compile time,
        cache hit, the backend's own fields.
    """
    started = time.time()
    impl = backends.load(backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = impl.build(spec, out_dir, CompileCache(cache_dir, backend), settings.for_backend(backend))
    record = BuildRecord.create(
        started,
        workload_id=workload_id(spec),
        backend=backend,
        spec=spec,
        artifact=backends.BACKENDS[backend].build_artifact(described(spec).ranks),
        **result,
    )
    record.write(out_dir)
    return record
