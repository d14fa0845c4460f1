"""The validated config as the run's setup reads it (stages/run_setup.py, the plan, the device slots): one
record made once from the schema-checked document, each section a field, so a value is read by name where
it is used and the document itself travels only to what keeps it whole (plan.json, the search driver's file).
The workload suites stay the blocks the user wrote: the plan expands them into each kind's record."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from neuronsweep.config.backends import BACKENDS
from neuronsweep.config.suites import ConfigDocument, Suites


@dataclass(frozen=True)
class CaptureConfig:
    """The `capture:` block: how many executions, the profiled one, and where a capture runs."""

    warmup: int
    iterations: int
    repeats: int
    rounds_in_processes: bool
    num_exec: int
    nth_exec: int
    device_lock: str
    slots: str | int
    isolation: str


@dataclass(frozen=True)
class Timeouts:
    """The `timeouts:` block, in seconds per stage."""

    build: float
    capture: float
    view: float


@dataclass(frozen=True)
class RunConfig:
    """A validated config (config/schema.validate's document): the run's name, the backend asked for, the
    compile cache, the capture and time limits, each backend's section, the suites and the track patterns."""

    run: str
    backend: str  # as asked: auto or a backend's name (backends.resolve settles it)
    cache_dir: str
    capture: CaptureConfig
    timeouts: Timeouts
    suites: Suites
    sections: Mapping[str, Mapping[str, Any]]  # each backend's section (neuron, xla), schema defaults filled in
    track_patterns: Mapping[str, str]
    document: ConfigDocument = field(repr=False)  # the validated document whole, as plan.json keeps it

    @classmethod
    def of(cls, document: ConfigDocument) -> RunConfig:
        """The record of a validated document (schema defaults filled in), which it keeps a copy of."""
        kept = copy.deepcopy(document)
        named: Mapping[str, Any] = kept  # each backend's section, by the backend's name
        return cls(
            run=kept["run"],
            backend=kept["backend"],
            cache_dir=kept["cache_dir"],
            capture=CaptureConfig(**kept["capture"]),
            timeouts=Timeouts(**kept["timeouts"]),
            suites=kept["suites"],
            sections={name: named[name] for name in BACKENDS if name in named},
            track_patterns=kept.get("track_patterns") or {},
            document=kept,
        )

    def section(self, backend: str) -> Mapping[str, Any]:
        """The backend's section (none for cpu)."""
        return self.sections.get(backend, {})

    def settled(self, backend: str, section: Mapping[str, Any]) -> RunConfig:
        """This config with the backend's section as the run settled it on this machine (target, route)."""
        document = cast(ConfigDocument, {**self.document, backend: dict(section)})  # that section replaced
        return replace(self, sections={**self.sections, backend: dict(section)}, document=document)
