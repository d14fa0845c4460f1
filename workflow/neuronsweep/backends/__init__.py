"""Backends behind one small interface.

A backend module provides what BackendModule (below) types: build, capture and view (settings.py,
records.py); the dicts they return become the typed records' fields and details.
BACKENDS below describes each one (its artifacts, stage options, what it cannot measure and why,
how the report shows it), so the rules, extract and the report use them without importing the
backend (and torch).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from neuronsweep.config.schema import section_defaults
from neuronsweep.config.settings import ViewSettings
from neuronsweep.errors import UserError
from neuronsweep.host.slots import NEURON_TOOL_DIR, chips

if TYPE_CHECKING:  # the records import the backends' descriptions: types only, no cycle at run time
    from neuronsweep.config.settings import BuildSettings, CaptureSettings
    from neuronsweep.store.cache import CompileCache
    from neuronsweep.store.records import BuildRecord, CaptureRecord


class BackendModule(Protocol):
    """The contract of backends/cpu.py, xla.py and neuron.py, as the stages (stages/build, capture,
    view) call it."""

    def build(self, spec: dict, out_dir: Path, cache: CompileCache, settings: BuildSettings) -> dict:
        """Compile `spec` (through the cache) into out_dir: the artifact's name and the record's fields."""
        ...

    def capture(self, build: BuildRecord, build_dir: Path, settings: CaptureSettings, out_dir: Path) -> dict:
        """Profile and time the built program into out_dir: the capture record's fields."""
        ...

    def view(self, cap: CaptureRecord, capture_dir: Path, out_dir: Path, settings: ViewSettings) -> dict:
        """Turn the capture's profile into summary.json, trace.pftrace (and parquet): the view's fields."""
        ...


NAMES = ("cpu", "neuron", "xla")
COLLECTIVE_PLAN = "collective.json"
COLLECTIVE_WID = r"coll-[a-z0-9.-]+"  # workload ids of the collectives suite (workloads/collective.py)
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
class Backend:
    """What the workflow, extract and the report know of a backend, in one place and without importing
    it (or torch): the files its stages write, the config keys each stage takes (Snakemake params, so a
    changed key reruns that stage), why it has no Neuron counters, and how the report shows it."""

    name: str
    artifacts: dict[str, str]  # stage -> the file it must write ("build", "capture")
    stage_options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    device_counters_missing: str | None = None
    device_time: tuple[str, str] = ("profile_active_time_s", "profiled op-busy time (under torch.profiler)")
    call_steps: tuple[str, ...] = ()  # the Python-side steps of one call, as named in its trace

    compiles_collectives: bool = False  # a collective is a compiled program (neuron), not library calls (gloo)

    def build_artifact(self, spec: dict | None) -> str:
        """The file its build writes for a workload: a collective's launch plan where nothing is
        compiled for it, else the backend's artifact."""
        collective = spec and spec.get("kind") == "collective" and not self.compiles_collectives
        return COLLECTIVE_PLAN if collective else self.artifacts["build"]

    def view_outputs(self, section: dict) -> list[str]:
        """The files its view writes beside summary.json and view.json, for its config section."""
        if self.name == "neuron":
            view = ViewSettings.from_section(section)
            return [f for f, on in (("trace.pftrace", view.pftrace), ("profile.json", view.json)) if on]
        return ["trace.pftrace"] + (["parquet/Instruction.parquet"] if self.name == "xla" else [])

    def host_peaks(self, section: dict) -> bool:
        """Whether its roofline rests on the host calibration (it runs on the host CPU)."""
        return self.name == "cpu" or (self.name == "xla" and section_defaults("xla", section)["pjrt_device"] == "CPU")


BACKENDS = {
    "cpu": Backend(
        "cpu",
        {"build": "model.pt2", "capture": "trace.json"},
        device_counters_missing="the cpu backend has no Neuron engines, DMA queues or HBM counters to read",
    ),
    "neuron": Backend(
        "neuron",
        {"build": "model.neff", "capture": "profile.ntff"},
        stage_options={
            "build": (
                "route",
                "target",
                "optlevel",
                "auto_cast",
                "lnc",
                "disable_dge",
                "extra_cc_flags",
                "xla_debug",
                "memory_tracker",
            ),
            "capture": ("profiler", "enable_dge_notifs", "memory_tracker", "latency_samples"),
            "view": ("profiler", "parquet", "json", "pftrace", "perfetto_flows", "memory_tracker"),
        },
        device_time=("profile_total_time_s", "device total_time"),
        compiles_collectives=True,
    ),
    "xla": Backend(
        "xla",
        {"build": "module.hlo.txt", "capture": "trace.json"},
        stage_options={"build": ("pjrt_device", "xla_debug")},  # its capture reads them from build.json
        device_counters_missing="the xla backend runs through a PJRT device without Neuron engines, DMA queues or "
        "HBM counters",
        device_time=("execute_median_s", "XLA ExecuteTime median (torch_xla metrics)"),
        call_steps=("lazy tracing (forward)", "mark_step", "wait_device_ops"),
    ),
}
