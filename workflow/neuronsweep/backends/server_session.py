"""Neuron Explorer over a vLLM Neuron server's profile session (formats/vllm_session.py): `view -d` of the
session folder with perfetto output, as vLLM Neuron's how-to-profile-workloads and Neuron Explorer's
view-perfetto page give it, which writes system_profile.pftrace (every worker's runtime and hardware events)
and a device_profile_model_<id>.pftrace per NEFF into its working directory.

The tool views a folder whole, so a worker it cannot read (no system trace) would fail every other one: the
view runs over a staged folder of links to the workers it can read and the NEFFs. Without the NEFFs, or when
the device profiles fail, it views the system profile alone (--ignore-device-profile, the vLLM profiling
tutorial's form) and says why.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from neuronsweep.backends.neuron_profiler import is_explorer, resolve_profiler, tool_env
from neuronsweep.backends.processes import run_tool
from neuronsweep.errors import UserError
from neuronsweep.formats.vllm_session import Session

SYSTEM = "system_profile.pftrace"
DEVICE = "device_profile_model_*.pftrace"


@dataclass(frozen=True)
class SessionView:
    """What the view wrote (under the output folder), its command, and why device profiles are missing."""

    system: Path
    devices: tuple[Path, ...]
    argv: tuple[str, ...]
    devices_missing: str | None


def stage(session: Session, folder: Path) -> Path:
    """The session's viewable workers and its NEFFs in the session's own layout under `folder`, each file a
    hard link (a copy across file systems): no tool's way with symbolic links is assumed."""
    if folder.exists():
        shutil.rmtree(folder)
    for w in session.viewable:
        for f in w.folder.iterdir():
            if f.is_file():
                _link(f, folder / w.name / w.folder.name / f.name)
    for name, neff in session.neffs.items():
        _link(neff, folder / "neffs" / name)
    return folder


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def view(session: Session, out_dir: Path, profiler: str = "auto", timeout_s: float = 1800) -> SessionView:
    """The session viewed by Neuron Explorer into out_dir/view; one sentence when nothing can be viewed."""
    if not session.viewable:
        raise UserError(f"{session.root}: no worker has a whole system trace (ntrace.pb and trace_info.pb) to view.")
    tool = resolve_profiler(profiler)
    if not is_explorer(tool):
        raise UserError(
            f"{tool}: a server's profile session is viewed with neuron-explorer (view -d, SDK 2.31+); install "
            "aws-neuronx-tools 2.31 or later."
        )
    raw = stage(session, out_dir / "raw")
    folder = out_dir / "view"
    why = None if session.neffs else "the session has no NEFFs (neffs/)"
    while True:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        argv = [tool, "view", "-d", str(raw.resolve()), "--output-format", "perfetto"]
        argv += ["--ignore-device-profile"] if why else []
        proc = run_tool(
            argv, timeout_s, f"{session.root}: neuron-explorer view -d", cwd=folder, env=tool_env(), written=[folder]
        )
        if proc.returncode == 0 and (folder / SYSTEM).is_file():
            break
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        if why:
            raise UserError(f"{session.root}: neuron-explorer view -d exited {proc.returncode}: {last}")
        why = f"the device profiles failed ({last})"
    devices = () if why else tuple(sorted(folder.glob(DEVICE)))
    return SessionView(
        folder / SYSTEM, devices, tuple(argv), f"{why}: the system profile alone was viewed" if why else None
    )


@dataclass(frozen=True)
class DeviceView:
    """One worker's device profile as Parquet (`view` holds parquet/, as a case's view folder does), or why not."""

    worker: str
    view: Path | None
    why: str | None


def view_devices(session: Session, out_dir: Path, profiler: str = "auto", timeout_s: float = 1800) -> list[DeviceView]:
    """Each worker's session NTFF with the session's NEFFs, viewed alone as Parquet into
    out_dir/devices/<worker>/view/parquet: `view -d` of a folder holding one device profile ("Device: the .ntff
    files and every .neff they executed", profile-artifacts) with --output-format parquet --output-file (the
    files go in the directory named: how-to-analyze-profile-output); a worker that cannot be is its sentence."""
    tool = resolve_profiler(profiler)
    found = []
    for w in session.workers:
        if len(w.device_traces) != 1 or not session.neffs:
            why = "no NEFFs in the session" if not session.neffs else f"{len(w.device_traces)} device traces"
            found.append(DeviceView(w.name, None, why))
            continue
        folder = out_dir / "devices" / w.name
        raw = folder / "raw"
        if raw.exists():
            shutil.rmtree(raw)
        _link(w.device_traces[0], raw / w.device_traces[0].name)
        for name, neff in session.neffs.items():
            _link(neff, raw / "neffs" / name)
        target = folder / "view" / "parquet"
        if target.exists():
            shutil.rmtree(target)
        argv = [
            tool,
            "view",
            "-d",
            str(raw.resolve()),
            "--output-format",
            "parquet",
            "--output-file",
            str(target.resolve()),
        ]
        proc = run_tool(
            argv, timeout_s, f"{w.name}: neuron-explorer view -d", cwd=folder, env=tool_env(), written=[target]
        )
        if proc.returncode != 0 or not target.is_dir():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            found.append(DeviceView(w.name, None, f"neuron-explorer view -d exited {proc.returncode}: {last}"))
            continue
        found.append(DeviceView(w.name, folder / "view", None))
    return found
