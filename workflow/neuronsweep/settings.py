"""Typed settings of the capture stage: one name per concept from the config (capture.*) through the
CLI to every backend. Defaults come from the schema (config.schema_default), nowhere else."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .config import check_profiled_exec


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

    def __post_init__(self):
        check_profiled_exec(self.num_exec, self.nth_exec, ("--num-exec", "--nth-exec"), "capture", kind="flag")

    def to_dict(self) -> dict:
        return asdict(self)


