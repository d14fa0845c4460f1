"""Typed settings of the build, capture and view stages: one name per concept from the config through
the CLI to every backend. Defaults come from the schema (config.schema_default, section_defaults),
nowhere else."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from .config import check_profiled_exec, schema_default, section_defaults


@dataclass(frozen=True)
class BuildSettings:
    options: dict  # the backend's config section, schema defaults filled in (neuron: target, cc flags)
    device_lock: str = field(default_factory=lambda: schema_default("capture.device_lock"))
    timeout_s: float = field(default_factory=lambda: schema_default("timeouts.build"))
    slots: str | int = field(default_factory=lambda: schema_default("capture.slots"))  # a neuron build runs on a slot
    isolation: str = field(default_factory=lambda: schema_default("capture.isolation"))
    visible_cores: str | None = None  # the held slot's NeuronCores (slots.held sets it)

    def for_backend(self, backend: str) -> "BuildSettings":
        return replace(self, options=section_defaults(backend, self.options))


@dataclass(frozen=True)
class CaptureSettings:
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
    options: dict = field(default_factory=dict)  # the backend's config section (neuron: profiler, enable_dge_notifs)
    slots: str | int = field(default_factory=lambda: schema_default("capture.slots"))
    isolation: str = field(default_factory=lambda: schema_default("capture.isolation"))
    visible_cores: str | None = None  # the held slot's NeuronCores (slots.held sets it)

    def __post_init__(self):
        check_profiled_exec(self.num_exec, self.nth_exec, ("--num-exec", "--nth-exec"), "capture", kind="flag")

    def for_backend(self, backend: str) -> "CaptureSettings":
        return replace(self, options=section_defaults(backend, self.options))

    def to_dict(self) -> dict:
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

    @classmethod
    def from_section(cls, section: dict, timeout_s: float | None = None) -> "ViewSettings":
        full = section_defaults("neuron", section)
        return cls(profiler=full["profiler"], parquet=full["parquet"], json=full["json"], pftrace=full["pftrace"],
                   perfetto_flows=full["perfetto_flows"],
                   timeout_s=timeout_s if timeout_s is not None else schema_default("timeouts.view"))
