"""capture stage: run a built workload, record a profile of its nth execution plus framework timing.

Every capture holds a device slot (slots.py) while it runs, on every backend: on cpu the one slot,
since a second measurement beside it would disturb the numbers just as on a NeuronCore; on neuron one
chip or core of the pool, its cores the only ones the profiler and runtime see.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from neuronsweep import backends
from neuronsweep.backends import neuron_profiler
from neuronsweep.config.settings import CaptureSettings
from neuronsweep.errors import UserError
from neuronsweep.host import caps, slots
from neuronsweep.store.records import BuildRecord, CaptureRecord
from neuronsweep.workloads import ranks_of


def run(build_dir: Path, out_dir: Path, settings: CaptureSettings) -> CaptureRecord:
    """Capture the workload built in build_dir (its build.json says which backend): the profiled
    execution and the timed rounds.

    Args:
        build_dir: the case's build/ folder (build.json and the artifact).
        out_dir: the case's capture/ folder; capture.json and the profile go there.
        settings: warm-up, iterations, rounds, the profiled execution, threads, the device lock and
            slot, and the backend's config section.

    Returns:
        The CaptureRecord written as out_dir/capture.json: latency samples and statistics, the
        profile's artifacts, correctness, the host's state.
    """
    started = time.time()
    build = BuildRecord.read(build_dir)
    build.verify_artifact(build_dir)
    impl = backends.load(build.backend)
    settings = settings.for_backend(build.backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    with slots.held(
        settings,
        build.backend,
        f"capture {build.workload_id} -> {out_dir}",
        build.target,
        build.details.get("slot_lnc", build.details.get("lnc")),
        cores=ranks_of(build.spec),
    ) as (settings, span):
        watch = caps.LoadWatch()
        result = impl.capture(build, build_dir, settings, out_dir)
        before, after = watch.start, watch.stop()
    profile = out_dir / backends.BACKENDS[build.backend].artifacts["capture"]
    if not profile.is_file() or profile.stat().st_size == 0:
        raise UserError(
            f"case {build.workload_id}: the capture exited without writing {profile} (or left it empty); see its log."
        )
    load = {"start": before, "end": after, "under_load": caps.under_load(before, after)}
    if load["under_load"]:
        logging.getLogger("neuronsweep").warning(
            f"warning: case {build.workload_id} was captured under load: {load['under_load']}"
        )
    record = CaptureRecord.create(
        started,
        workload_id=build.workload_id,
        backend=build.backend,
        spec=build.spec,
        settings=settings,
        device_span=span,
        host_load=load,
        **result,
    )
    record.write(out_dir)
    return record


def run_neff(neff: Path, out_dir: Path, settings: CaptureSettings) -> CaptureRecord:
    """Capture a NEFF made anywhere (neuron only): no framework timing, since no workload spec is known."""
    started = time.time()
    if not neff.is_file():
        raise UserError(f"{neff}: no such NEFF; pass the .neff file the compiler wrote.")
    settings = settings.for_backend("neuron")
    out_dir.mkdir(parents=True, exist_ok=True)
    given = settings.collectives or {}
    workers = given.get("workers_per_node") or given.get("worker_count")
    with slots.held(
        settings, "neuron", f"capture {neff} -> {out_dir}", settings.options.get("target"), cores=workers or 1
    ) as (settings, span):
        result = neuron_profiler.capture_neff(neff, out_dir, settings)
    record = CaptureRecord.create(
        started,
        workload_id=neff.stem,
        backend="neuron",
        spec=None,
        settings=settings,
        device_span=span,
        latency_note="a NEFF captured on its own has no framework timing",
        **result,
    )
    record.write(out_dir)
    return record
