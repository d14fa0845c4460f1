"""Backends behind one small interface.

A backend module provides what BackendModule (below) types: build, capture and view (settings.py,
records.py); the dicts they return become the typed records' fields and details.
BACKENDS (config/backends.py, re-exported here) describes each one (its artifacts, stage options, what it
can measure, where its programs run, how the report shows it), so every layer asks it, never the
backend's name, without importing the backend (and torch).
Stage modules (build.py, capture.py, view.py) wrap these with records, atomic writes and errors.
Backends are imported lazily so planning and extract never import torch; what several backends
share is in a module per job (processes.py: programs under a time limit, torchrun ranks; cores.py;
build_facts.py: versions; trace_spans.py), so no backend imports another, and the programs they start
in a child process are in programs/.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from neuronsweep.config.backends import BACKENDS, COLLECTIVE_PLAN, NAMES, Backend
from neuronsweep.config.run_config import RunConfig
from neuronsweep.config.settings import ViewSettings
from neuronsweep.errors import UserError
from neuronsweep.host.slots import NEURON_TOOL_DIR, chips
from neuronsweep.host.targets import TARGETS
from neuronsweep.store.specs import Spec

__all__ = ["BACKENDS", "COLLECTIVE_PLAN", "NAMES", "Backend", "BackendModule", "MemoryBudget", "load", "resolve"]

if TYPE_CHECKING:  # types only: the stages' settings and records
    from neuronsweep.config.settings import BuildSettings, CaptureSettings
    from neuronsweep.store.cache import CompileCache
    from neuronsweep.store.records import BuildRecord, CaptureFields, CaptureRecord, ViewFields


class BackendModule(Protocol):
    """The contract of backends/cpu.py, xla.py and neuron.py, as the stages (stages/build, capture,
    view) call it."""

    def build(self, spec: Spec, out_dir: Path, cache: CompileCache, settings: BuildSettings) -> dict:
        """Compile `spec` (through the cache) into out_dir: the artifact's name and the record's fields."""
        ...

    def capture(self, build: BuildRecord, build_dir: Path, settings: CaptureSettings, out_dir: Path) -> CaptureFields:
        """Profile and time the built program into out_dir: the capture record's fields."""
        ...

    def view(self, cap: CaptureRecord, capture_dir: Path, out_dir: Path, settings: ViewSettings) -> ViewFields:
        """Turn the capture's profile into summary.json, trace.pftrace (and parquet): the view's fields."""
        ...


RANK_PROCESS_BYTES = 256 * 2**20  # one gloo rank: a Python process with torch and its process group (227 MiB measured)
# workload ids run on ranks (their build is a launch plan where nothing compiles them): the collectives suite's
# (workloads/collective.py) and a model's forward across its ranks (workloads/forward.py)
COLLECTIVE_WID = r"(?:coll-[a-z0-9.-]+|fwd-[a-z0-9._-]+)"
PROFILERS = ("neuron-explorer", "neuron-profile")


def find_profiler() -> str | None:
    """The Neuron profiler executable on PATH or in /opt/aws/neuron/bin (neuron-explorer preferred)."""
    for tool in PROFILERS:
        found = shutil.which(tool) or shutil.which(tool, path=NEURON_TOOL_DIR)
        if found:
            return found
    return None


def neuron_devices() -> list[str]:
    """The Neuron device files of this machine (/dev/neuron0, ...); none on a host without the driver."""
    return sorted(glob.glob("/dev/neuron[0-9]*"))


def neuron_inventory() -> tuple[int, str]:
    """How many Neuron devices this machine has, and how that was found (slots.chips: the driver
    tool's `neuron-ls --json-output`, else /dev/neuron*); (0, why) when neither shows one."""
    found, how = chips(cores_per_chip=1)
    return len(found), how


def resolve(requested: str, local: bool = True) -> tuple[str, str]:
    """Pick the backend for a run; returns (name, one-line reason). A backend that cannot run here is
    refused now, before any job, rather than in every build. Not local (a cluster executor): the
    devices and tools are on the nodes, so backend neuron is taken as set and each job checks."""
    if requested == "xla" and importlib.util.find_spec("torch_xla") is None:
        raise UserError(
            "config key 'backend' is xla, but torch-xla is not installed in this environment; "
            'install it with pip install -e ".[xla,workflow]" (torch 2.9.0 + torch-xla 2.9.0) or set backend: cpu.'
        )
    if requested in ("cpu", "xla"):
        return requested, f"backend '{requested}' set in config"
    if requested == "neuron" and not local:
        return "neuron", "backend 'neuron' set in config; its devices and tools are checked on the cluster's nodes"
    tool = find_profiler()
    count, found = neuron_inventory() if tool or requested == "neuron" else (0, "")
    if requested == "neuron":
        if not tool:
            raise UserError(
                f"config key 'backend' is neuron, but neither {' nor '.join(PROFILERS)} is on PATH or in "
                f"{NEURON_TOOL_DIR}; install the Neuron tools (aws-neuronx-tools) or set backend: auto."
            )
        if not count:
            raise UserError(
                f"config key 'backend' is neuron, but this machine has no Neuron device ({found}); run on "
                "a trn1, trn2 or inf2 instance or set backend: auto."
            )
        return "neuron", f"backend 'neuron' set in config: {found}, {tool}"
    if tool and count:
        return "neuron", f"backend auto -> neuron: found {found} and {tool}"
    if tool:
        return "cpu", f"backend auto -> cpu: no Neuron device ({found})"
    if not neuron_devices():
        return "cpu", "backend auto -> cpu: no Neuron device (/dev/neuron* absent)"
    return "cpu", f"backend auto -> cpu: no neuron-explorer or neuron-profile on PATH or in {NEURON_TOOL_DIR}"


def load(name: str) -> BackendModule:
    """The backend module `name`, imported now (it may import torch)."""
    if name not in NAMES:
        raise UserError(f"unknown backend '{name}'; use one of: {', '.join(NAMES)}.")
    return cast("BackendModule", importlib.import_module(f"{__name__}.{name}"))


@dataclass(frozen=True)
class MemoryBudget:
    """The memory one case runs in, as the plan's checks name it: `what` (e.g. "this machine's RAM"), `hint`
    the remedy a refusal ends with, `gathers_experts` whether an MoE layer's experts run as torch-xla's
    batched_mm, which holds a copy of an expert's weights per token it gets; `checks_here` whether a layer's
    output check (its float64 copy on the CPU: layer.reference) runs in this memory too."""

    bytes: float
    what: str
    hint: str = ""
    gathers_experts: bool = False
    checks_here: bool = False


def memory_budget(name: str, config: RunConfig, host_bytes: float) -> MemoryBudget | None:
    """The memory one case of a validated, settled `config` runs in on backend `name`: one logical
    NeuronCore's HBM of the configured target, else this host's RAM (`host_bytes`); None where the target
    is settled by each job on its node (neuron.target auto under a cluster executor)."""
    backend = BACKENDS[name]
    if not backend.neuron_device:
        return MemoryBudget(host_bytes, "this machine's RAM", gathers_experts=backend.pjrt, checks_here=True)
    section = config.section(name)
    if section["target"] not in TARGETS:
        return None
    target = TARGETS[section["target"]]
    return MemoryBudget(
        target.hbm_bytes(section["lnc"]),
        f"one {target.name} logical NeuronCore's HBM",
        " (or set neuron.lnc: 2 where the target allows it)",
        gathers_experts=section["route"] == "xla",  # torch-xla's route runs the experts as batched_mm
    )
