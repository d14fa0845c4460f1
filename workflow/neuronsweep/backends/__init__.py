"""Backends behind one small interface.

A backend module provides
  build(spec, out_dir, cache, options) -> dict
  capture(build_record, build_dir, settings, out_dir) -> dict
  view(capture_record, capture_dir, out_dir, options) -> dict
where options is the backend's config section (`neuron:`, `xla:`; empty for cpu).
ARTIFACTS below names the files each backend's build and capture write, and DEVICE_COUNTERS_MISSING
why a backend's profiles lack Neuron engine/DMA counters, so the Snakefile and extract can use
them without importing the backend (and torch).
Stage modules (build.py, capture.py, view.py) wrap these with records, atomic writes and errors.
Backends are imported lazily so planning and extract never import torch.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from ..errors import UserError

NAMES = ("cpu", "neuron", "xla")
NEURON_TOOL_DIR = "/opt/aws/neuron/bin"
PROFILERS = ("neuron-explorer", "neuron-profile")


def find_profiler() -> str | None:
    """The Neuron profiler executable on PATH or in /opt/aws/neuron/bin (neuron-explorer preferred)."""
    for tool in PROFILERS:
        found = shutil.which(tool) or shutil.which(tool, path=NEURON_TOOL_DIR)
        if found:
            return found
    return None


def neuron_devices() -> list[str]:
    return sorted(glob.glob("/dev/neuron[0-9]*"))


def resolve(requested: str) -> tuple[str, str]:
    """Pick the backend for a run; returns (name, one-line reason)."""
    if requested == "xla" and importlib.util.find_spec("torch_xla") is None:
        raise UserError("config key 'backend' is xla, but torch-xla is not installed in this environment; "
                        "install it with pip install -e \".[xla]\" (torch 2.9.0 + torch-xla 2.9.0) or set backend: cpu.")
    if requested in NAMES:
        name, why = requested, f"backend '{requested}' set in config"
    else:
        devices, tool = neuron_devices(), find_profiler()
        if devices and tool:
            name, why = "neuron", f"backend auto -> neuron: found {devices[0]} and {tool}"
        else:
            missing = "no Neuron device (/dev/neuron* absent)" if not devices else \
                f"no neuron-explorer or neuron-profile on PATH or in {NEURON_TOOL_DIR}"
            name, why = "cpu", f"backend auto -> cpu: {missing}"
    return name, why


def load(name: str) -> ModuleType:
    if name not in NAMES:
        raise UserError(f"unknown backend '{name}'; use one of: {', '.join(NAMES)}.")
    return importlib.import_module(f"{__name__}.{name}")


ARTIFACTS = {"cpu": {"build": "model.pt2", "capture": "trace.json"},
             "neuron": {"build": "model.neff", "capture": "profile.ntff"},
             "xla": {"build": "module.hlo.txt", "capture": "trace.json"}}
DEVICE_COUNTERS_MISSING = {
    "cpu": "the cpu backend has no Neuron engines, DMA queues or HBM counters to read",
    "xla": "the xla backend runs through a PJRT device without Neuron engines, DMA queues or HBM counters",
}


DEFAULT_TIMEOUT_S = {"build": 7200, "capture": 3600, "view": 3600}  # the schema's `timeouts` defaults


def timeout(settings: dict, stage: str) -> float:
    """A stage's time limit for external programs: the CLI's --timeout, else the schema default."""
    return settings.get("timeout_s") or DEFAULT_TIMEOUT_S[stage]


def run_tool(argv: list[str], timeout_s: float, what: str, cwd: Path | None = None,
             env: dict | None = None) -> subprocess.CompletedProcess:
    """Run an external program in a process group of its own, so that on timeout the whole group
    (a profiler and the helpers it spawned, a server it left running) is killed; a timeout or a
    missing program ends in one sentence."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
                                start_new_session=True)
    except FileNotFoundError:
        raise UserError(f"{what}: {argv[0]} not found; install it or fix its path.") from None
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise UserError(f"{what}: {Path(argv[0]).name} did not finish within {timeout_s:g} s and was stopped "
                        "(its whole process group); if it needs longer, raise the `timeouts` key of its stage "
                        "in the config.") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_child(module: str, args: list[str], spec: dict, cwd: Path, env: dict, what: str,
              timeout_s: float) -> None:
    """`python -m neuronsweep.backends.<module> ARGS` in cwd: the torch-xla and NKI programs need a
    process of their own, since their environment is read when torch_xla / nki is imported. The
    output goes to cwd/<module>.log; a failure is one sentence with the case, the last line and the log."""
    from ..workloads import workload_id

    proc = run_tool([sys.executable, "-m", f"{__name__}.{module}", *args], timeout_s,
                    f"case {workload_id(spec)}: the {what}", cwd=cwd, env=env)
    log = Path(cwd) / f"{module}.log"
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise UserError(f"case {workload_id(spec)}: the {what} exited {proc.returncode}: "
                        f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]} (full log: {log}).")


EXEC_MARK = "neuronsweep.exec_"  # name of the span of execution i in the cpu and xla Chrome traces


def profiled_span(trace: dict, nth: int) -> tuple[list[dict], dict]:
    """The complete ('X') events of a Chrome trace and the span of its nth execution; a trace
    without one cannot be summarized, so that fails with what to do."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    mark = f"{EXEC_MARK}{nth}"
    span = next((e for e in events if e.get("name") == mark), None)
    if span is None:
        raise UserError(f"the trace has no '{mark}' span; recapture this case (delete its capture/ folder).")
    return events, span


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
