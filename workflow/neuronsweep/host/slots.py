"""Device slots: how many device-executing steps (captures, neuron builds) may run at once on this
machine, and which NeuronCores each one holds.

A slot is a set of NeuronCores that one step holds alone: one OS lock file per core beside
capture.device_lock (`<lock>.nc<core>`), all of a slot's taken or none, and the step's runtime sees
only those cores (NEURON_RT_VISIBLE_CORES). Locks per core, not per slot, keep a `chip` run and a
`core` run on the same machine apart. isolation `chip` makes a slot of each chip's cores, so two
captures never share a chip's HBM; `core` a slot of each NeuronCore (more at once, less faithful for
memory-bound kernels). cpu and xla have one slot, the device lock itself: a cpu capture takes every
core of the host.

Each job finds its machine's slots itself (under Slurm the node's, not the submitting host's);
Snakemake's `neuron_device` resource is set to the same count at planning time on a local run.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from neuronsweep.config.backends import BACKENDS
from neuronsweep.config.run_config import RunConfig
from neuronsweep.config.settings import BuildSettings, CaptureSettings
from neuronsweep.errors import UserError
from neuronsweep.host import devicelock, neuron_ls
from neuronsweep.host.targets import TARGETS

S = TypeVar("S", BuildSettings, CaptureSettings)  # a step's settings, handed back with its slot's cores

NEURON_TOOL_DIR = neuron_ls.NEURON_TOOL_DIR


@dataclass(frozen=True)
class Slot:
    """A group of NeuronCores one capture holds (none: the whole device lock, on cpu and xla)."""

    index: int
    cores: tuple[int, ...]  # logical NeuronCore ids; () for the cpu/xla device lock

    @property
    def visible(self) -> str | None:
        """NEURON_RT_VISIBLE_CORES for this slot: '4' or '4-5' (the runtime's range form)."""
        if not self.cores:
            return None
        lo, hi = min(self.cores), max(self.cores)
        if list(self.cores) == list(range(lo, hi + 1)):
            return str(lo) if lo == hi else f"{lo}-{hi}"
        return ",".join(map(str, self.cores))

    def locks(self, device_lock: str) -> list[Path]:
        """The lock files a capture on this slot holds: one per NeuronCore beside the device lock."""
        base = Path(device_lock).expanduser()
        return [base] if not self.cores else [base.with_name(f"{base.name}.nc{core}") for core in self.cores]


@dataclass(frozen=True)
class Pool:
    """The slots captures run on at once, how they were isolated, and how the devices were found."""

    slots: tuple[Slot, ...]
    isolation: str
    found: str  # how the devices were found, for doctor and capture.json

    def __len__(self) -> int:
        return len(self.slots)

    def describe(self) -> str:
        """One line for the run's start and doctor: how many slots, of how many cores, found how."""
        if not self.slots[0].cores:
            return f"1 device slot, the device lock ({self.found})"
        sizes = sorted({len(s.cores) for s in self.slots})
        per = "/".join(map(str, sizes))
        return (
            f"{len(self)} device slot(s), {self.isolation} isolation, {per} NeuronCore(s) each "
            f"(cores {self.slots[0].visible} .. {self.slots[-1].visible}; {self.found})"
        )


def chips(cores_per_chip: int) -> tuple[list[list[int]], str]:
    """The logical NeuronCore ids of each chip, and how they were found: neuron-ls's JSON (neuron_ls.py),
    else one chip per /dev/neuron* with the target's `cores_per_chip`."""
    machine = neuron_ls.discover()
    if machine.chips:
        return [list(c) for c in machine.chips], machine.found
    devices = sorted(glob.glob("/dev/neuron[0-9]*"))
    if devices:
        return (
            [list(range(i * cores_per_chip, (i + 1) * cores_per_chip)) for i in range(len(devices))],
            f"{len(devices)} /dev/neuron* device(s) x {cores_per_chip} NeuronCore(s) of the target",
        )
    return [], f"no /dev/neuron*, and {machine.found}"  # neuron-ls not found, or what it printed


def pool(
    backend: str, slots: str | int = "auto", isolation: str = "chip", target: str | None = None, lnc: int | None = None
) -> Pool:
    """This machine's slots for a backend. `slots` N takes the first N (refused when there are fewer)."""
    if not BACKENDS[backend].neuron_device:
        return Pool((Slot(0, ()),), "host", f"{backend}: a capture takes every core of the host")

    found_chips, found = chips(TARGETS[target if target in TARGETS else "trn1"].logical_cores_per_chip(lnc))
    if not found_chips:
        raise UserError(
            f"found no Neuron device for the capture slots ({found}); run on a trn1, trn2 or inf2 "
            "instance (under Slurm: a node of the Neuron queue)."
        )
    groups = found_chips if isolation == "chip" else [[core] for chip in found_chips for core in chip]
    if slots != "auto":
        if int(slots) > len(groups):
            raise UserError(
                f"config key 'capture.slots' is {slots}, but this machine has {len(groups)} {isolation} "
                f"slot(s) ({found}); set it to at most {len(groups)}, or auto."
            )
        groups = groups[: int(slots)]
    return Pool(tuple(Slot(i, tuple(g)) for i, g in enumerate(groups)), isolation, found)


def for_config(config: RunConfig, backend: str) -> Pool:
    """The pool a run of this (validated) config would use on this machine."""
    capture, section = config.capture, config.section(backend)  # a device backend's target and LNC
    return pool(backend, capture.slots, capture.isolation, section.get("target"), section.get("lnc"))


def widened(found: Pool, cores: int) -> Pool:
    """The pool's slots joined k consecutive at a time, so that each has at least `cores` NeuronCores (a
    multi-worker capture runs one worker per core); refused when the whole pool has fewer."""
    size = len(found.slots[0].cores)
    k = -(-cores // size)
    if k * size > sum(len(s.cores) for s in found.slots):
        raise UserError(
            f"this step needs {cores} NeuronCores (one per collectives worker or rank), but the device "
            f"slots have {sum(len(s.cores) for s in found.slots)} ({found.describe()}); use a smaller world "
            "size or fewer workers per node, or raise capture.slots."
        )
    joined = [
        Slot(found.slots[i].index, tuple(c for s in found.slots[i : i + k] for c in s.cores))
        for i in range(0, len(found.slots) - k + 1, k)
    ]
    return Pool(tuple(joined), found.isolation, found.found)


@contextmanager
def held(
    settings: S, backend: str, who: str, target: str | None = None, lnc: int | None = None, cores: int = 1
) -> Iterator[tuple[S, devicelock.Span]]:
    """Take a free slot of this machine for one step, waiting while all are held. Yields the settings
    with `visible_cores` set to the slot's cores (None on cpu/xla) and the lock span (slot, cores, when
    held) that the step's record keeps. `cores` above a slot's joins consecutive slots (widened)."""
    found = pool(backend, settings.slots, settings.isolation, target, lnc)
    if found.slots[0].cores and cores > len(found.slots[0].cores):
        found = widened(found, cores)
    groups = [slot.locks(settings.device_lock) for slot in found.slots]
    with devicelock.held_any(groups, who) as span:
        slot = found.slots[span.pop("group", 0)]
        span["slot"], span["cores"], span["pool"] = slot.index, slot.visible, found.describe()
        yield replace(settings, visible_cores=slot.visible), span
