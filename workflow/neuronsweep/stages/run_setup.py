"""A run's setup, settled once for the workflow (workflow/rules/common.smk) and for `neuronsweep plan`:
the backend this machine gives the config, the Neuron target, LNC and route read from it, and the
plan with its host probe. One function, so that the plan a user previews is the plan Snakemake runs.

Settling reads neuron-ls (asked once a run: host/neuron_ls.share_with_jobs) and the installed packages.
The workflow has no `run:` rule, the one kind of job Snakemake starts as a second Snakemake that would
read the workflow, and settle, again: every job is a shell command handed the settled params.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from neuronsweep import backends
from neuronsweep.atomic import write_json
from neuronsweep.backends import neuron_setup
from neuronsweep.backends.cores import default_threads
from neuronsweep.config.backends import BACKENDS
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.host import caps, devicelock
from neuronsweep.stages.plan import Plan, make_plan
from neuronsweep.stages.plan_fits import check_memory
from neuronsweep.store.plan_document import PlanDocument


@dataclass
class RunSetup:
    """What a run settles before any job, once for Snakemake and `neuronsweep plan` alike: the config, the backend and
    why, the neuron target and route, the slots and the plan."""

    config: RunConfig  # the validated config, its neuron section settled on this machine
    backend: str
    backend_reason: str  # one line: why this backend
    neuron_setup: dict  # what was settled and why (target, route), for plan.json and the log
    plan: Plan
    host_probe: caps.HostProbe | None  # cpu: the dtype probe the plan rests on

    def plan_json(self) -> str:
        """plan.json: the plan, with the config (so `compare` can say what differs) and the setup."""
        record: PlanDocument = {
            **self.plan.to_dict(),
            "backend_reason": self.backend_reason,
            "neuron_setup": self.neuron_setup,
            "config": self.config.document,
        }
        return json.dumps(record, separators=(",", ":"))

    def log_lines(self) -> list[str]:
        """The lines the run prints at its start: the backend, the neuron target and the route, each with why."""
        return [
            line
            for line in (self.backend_reason, self.neuron_setup.get("target"), self.neuron_setup.get("route"))
            if line
        ]


def settle_run(config: RunConfig, local: bool = True) -> RunSetup:
    """The setup of a validated `config`, whose neuron section the returned setup's config has settled.
    `local`: the jobs run on this machine (False under a cluster executor: each job settles on its node)."""
    backend, why = backends.resolve(config.backend, local=local)
    setup: dict = {}
    settle_here = backends.BACKENDS[backend].neuron_device and local
    if settle_here:
        section, setup = neuron_setup.settle(dict(config.section(backend)), need_route=False)
        config = config.settled(backend, section)
    check_paths(config)
    probe = host_probe(config, backend)
    plan = make_plan(config, backend, caps.slow_dtypes(probe) if probe else None)
    if settle_here and neuron_setup.needs_route(plan.workloads.values()):  # the plan says whether one is needed
        section, route = neuron_setup.settle_route(dict(config.section(backend)))
        config = config.settled(backend, section)
        setup.update(route)
    check_memory(plan, config)  # once settled: the route says whether an MoE layer's experts are gathered
    return RunSetup(config, backend, why, setup, plan, probe)


def host_probe(config: RunConfig, backend: str) -> caps.HostProbe | None:
    """The host's probe (caps.probe, cached beside the compile cache) where the backend probes its host
    (cpu), else None."""
    if not BACKENDS[backend].probes_host:
        return None

    return caps.probe(config.cache_dir, default_threads())


def check_paths(config: RunConfig) -> None:
    """The places every job writes, probed before any job: cache_dir a writable folder, the device lock
    a file that can be created and locked."""
    cache = Path(config.cache_dir).expanduser()
    if cache.exists() and not cache.is_dir():
        raise UserError(f"config key 'cache_dir' = {config.cache_dir!r} is a file, not a folder; point it at a folder.")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=cache).close()
    except OSError as exc:
        raise UserError(
            f"config key 'cache_dir' = {config.cache_dir!r} is not a writable folder ({exc.strerror}); point it at one."
        ) from None
    devicelock.check_usable(config.capture.device_lock)


def stage_plan(text: str, folder: Path) -> Path:
    """plan.json (`text`, RunSetup.plan_json) as the plan job will copy it, written once under `folder`
    (relative to the run's working folder, where the job runs) and named by its content, so a dry run of
    another config beside a running sweep leaves this one's alone. A copy, not a `run:` rule: Snakemake
    runs those in a second Snakemake that reads the whole workflow again (about 0.9 s of CPU before the
    first build), and a large sweep's plan is longer than a shell command line may be."""
    staged = Path(folder) / f"plan-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    try:
        if staged.exists():
            staged.touch()  # in use: not one of the stale ones below
        else:
            write_json(staged, json.loads(text))
        for old in staged.parent.glob("plan-*.json"):  # the plans of configs not run for a day
            if old != staged and old.stat().st_mtime < time.time() - 86400:
                old.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only working directory: a dry run still plans; a real run stops at Snakemake's lock
    return staged
