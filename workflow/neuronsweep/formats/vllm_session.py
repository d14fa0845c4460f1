"""A vLLM Neuron server's profile session as its profiler leaves it (vLLM Neuron's neuron-profiling design and
how-to-profile-workloads):

    output_dir/
      i-<instance_id>_pid_<pid>/<timestamp>/   one per profiled worker
        profile_nc_<n>_session_0.ntff          its device trace (SESSION mode: every execution in one NTFF)
        ntrace.pb, trace_info.pb               the runtime's system trace and its metadata
      neffs/graph_<hash>.neff                  the NEFFs, copied from the compile cache

Read here as files only: which workers are there, which of them Neuron Explorer can view (a system profile
needs ntrace.pb and trace_info.pb, profile-artifacts), and which NEFFs came with them (a device profile needs
the NEFFs its NTFF ran). What is missing is one sentence each, and the rest is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from neuronsweep.errors import UserError

WORKER = re.compile(r"^i-(?P<instance>[0-9A-Za-z]+)_pid_(?P<pid>\d+)$")
DEVICE_TRACE = "profile_nc_*_session_*.ntff"
SYSTEM_TRACE = ("ntrace.pb", "trace_info.pb")
GRAPH = re.compile(r"^graph_(?P<hash>[0-9A-Za-z]+)\.neff$")


@dataclass(frozen=True)
class Worker:
    """One profiled worker's session folder: its instance, process and timestamp, its device traces, and
    whether its system trace is whole."""

    instance: str
    pid: int
    folder: Path  # output_dir/i-<instance>_pid_<pid>/<timestamp>
    device_traces: tuple[Path, ...]
    system_trace: bool

    @property
    def name(self) -> str:
        """Its folder's name: i-<instance>_pid_<pid>."""
        return f"i-{self.instance}_pid_{self.pid}"


@dataclass(frozen=True)
class Session:
    """The session's workers, the NEFFs beside them (by file name), and what is missing, a sentence each."""

    root: Path
    workers: tuple[Worker, ...]
    neffs: dict[str, Path]
    missing: tuple[str, ...]

    @property
    def viewable(self) -> tuple[Worker, ...]:
        """The workers whose system trace Neuron Explorer can read."""
        return tuple(w for w in self.workers if w.system_trace)


def read(root: Path) -> Session:
    """The session under `root`, or one sentence when it is none."""
    if not root.is_dir():
        raise UserError(f"{root}: no such folder; give the output_dir of vLLM Neuron's neuron_profiler.")
    workers, missing = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and WORKER.match(p.name)):
        found = WORKER.match(folder.name)
        assert found is not None
        sessions = sorted(p for p in folder.iterdir() if p.is_dir())
        if not sessions:
            missing.append(f"{folder.name}: no <timestamp> folder inside: this worker's profile was not written")
            continue
        if len(sessions) > 1:
            missing.append(
                f"{folder.name}: {len(sessions)} sessions (start/stop brackets); the newest, "
                f"{sessions[-1].name}, is read"
            )
        last = sessions[-1]
        traces = tuple(sorted(last.glob(DEVICE_TRACE)))
        system = all((last / f).is_file() for f in SYSTEM_TRACE)
        if not system:
            lacking = " and ".join(f for f in SYSTEM_TRACE if not (last / f).is_file())
            missing.append(
                f"{folder.name}/{last.name}: no {lacking}: Neuron Explorer cannot read this worker's system "
                "profile, so its steps are left out"
            )
        if not traces:
            missing.append(
                f"{folder.name}/{last.name}: no {DEVICE_TRACE} (the worker's device trace): its steps come from "
                "the system trace alone"
            )
        workers.append(Worker(found["instance"], int(found["pid"]), last, traces, system))
    if not workers:
        raise UserError(
            f"{root}: not a vLLM Neuron profile: no i-<instance>_pid_<pid> folder (its profiler writes one per "
            "profiled worker under output_dir); give the neuron_profiler output_dir."
        )
    neffs = {p.name: p for p in sorted((root / "neffs").glob("*.neff"))} if (root / "neffs").is_dir() else {}
    if not neffs:
        missing.append(
            f"{root}/neffs: no NEFFs (graph_<hash>.neff): the device profiles cannot be made, only the steps from "
            "the system trace; copy them from the compile cache (or set NEURON_COMPILED_ARTIFACTS to it and "
            "profile again, how-to-profile-workloads)"
        )
    return Session(root, tuple(workers), neffs, tuple(missing))
