"""Typed settings of the build, capture and view stages: one name per concept from the config through
the CLI to every backend. Defaults come from the schema (config.schema_default, section_defaults),
nowhere else."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypedDict

from neuronsweep.config.schema import check_profiled_exec, schema_default, section_defaults
from neuronsweep.errors import UserError

# Where and how long, not what is measured: the workflow hands cache_dir, the device lock, the slot
# pool and the timeouts to every job in this variable (declared with `envvars:`), not as rule params,
# so that changing them reruns no case. A command-line flag still wins; records' `command` shows it.
HOST_ENV = "NEURONSWEEP_HOST"


def host_setting(key: str, fallback: Any) -> Any:
    """A host setting (slots, device lock, cache root) the Snakemake run passed in NEURONSWEEP_HOST, else `fallback`; a
    damaged value is one sentence."""
    raw = os.environ.get(HOST_ENV)
    if not raw:
        return fallback
    try:
        return json.loads(raw).get(key, fallback)
    except (json.JSONDecodeError, AttributeError):
        raise UserError(
            f"{HOST_ENV} is not a JSON object ({raw[:80]!r}); unset it, or run through Snakemake, "
            "which sets it from the config."
        ) from None


@dataclass(frozen=True)
class BuildSettings:
    """What a build needs from the config and the host: the backend's section, the device lock, time limit, threads and
    the slot's cores."""

    options: dict  # the backend's config section, schema defaults filled in (neuron: target, cc flags)
    device_lock: str = field(default_factory=lambda: schema_default("capture.device_lock"))
    timeout_s: float = field(default_factory=lambda: schema_default("timeouts.build"))
    slots: str | int = field(default_factory=lambda: schema_default("capture.slots"))  # a neuron build runs on a slot
    isolation: str = field(default_factory=lambda: schema_default("capture.isolation"))
    visible_cores: str | None = None  # the held slot's NeuronCores (slots.held sets it)

    def for_backend(self, backend: str) -> BuildSettings:
        """These settings with `backend`'s section defaults filled in."""
        return replace(self, options=section_defaults(backend, self.options))


class Collectives(TypedDict, total=False):
    """The profiler's --collectives-* options: a worker count or workers per node turns collectives on."""

    workers_per_node: int | None
    worker_count: int | None
    worker_start_id: int | None
    profile_id: str | None  # a worker's id, or all


@dataclass(frozen=True)
class CaptureSettings:
    """What a capture needs from the config and the host: executions, the profiled one, threads, the slot's cores and
    LNC, the backend's section and time limit."""

    warmup: int
    iterations: int
    repeats: int
    num_exec: int
    nth_exec: int
    threads: int
    device_lock: str
    timeout_s: float
    attempt: int = 1  # Snakemake's attempt: after a device OOM the retry captures with --single-io
    single_io: bool = False
    rounds_in_processes: bool = False  # cpu, neuron: each timed round in a fresh process (cpu_round.py; a program run)
    options: dict = field(default_factory=dict)  # the backend's config section (neuron: profiler, enable_dge_notifs)
    slots: str | int = field(default_factory=lambda: schema_default("capture.slots"))
    isolation: str = field(default_factory=lambda: schema_default("capture.isolation"))
    visible_cores: str | None = None  # the held slot's NeuronCores (slots.held sets it)
    # neuron, a collectives-enabled NEFF: the profiler's --collectives-* options, as the neuron-profile guide
    # gives them
    collectives: Collectives | None = None
    runtime_lnc: int | None = None  # neuron: NEURON_LOGICAL_NC_CONFIG of every device process, the NEFF's LNC

    def __post_init__(self) -> None:
        check_profiled_exec(self.num_exec, self.nth_exec, ("--num-exec", "--nth-exec"), "capture", kind="flag")

    def for_backend(self, backend: str) -> CaptureSettings:
        """These settings with `backend`'s section defaults filled in."""
        return replace(self, options=section_defaults(backend, self.options))

    def to_dict(self) -> dict:
        """The settings as capture.json records them."""
        return asdict(self)


@dataclass(frozen=True)
class ViewSettings:
    """What a neuron view writes (the neuron section's view keys); cpu and xla views write fixed files."""

    profiler: str
    parquet: bool
    json: bool
    pftrace: bool
    perfetto_flows: bool
    timeout_s: float
    memory_tracker: bool = False
    runtime_lnc: int | None = None  # neuron: NEURON_LOGICAL_NC_CONFIG, as the capture ran

    @classmethod
    def from_section(cls, section: dict, timeout_s: float | None = None) -> ViewSettings:
        """View settings from the config's neuron section (its defaults filled in) and the view's time limit."""
        full = section_defaults("neuron", section)
        return cls(
            profiler=full["profiler"],
            parquet=full["parquet"],
            json=full["json"],
            pftrace=full["pftrace"],
            perfetto_flows=full["perfetto_flows"],
            memory_tracker=full["memory_tracker"],
            timeout_s=timeout_s if timeout_s is not None else schema_default("timeouts.view"),
        )
