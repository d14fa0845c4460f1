"""What a job and the warm server say to each other (warmstart.py, warm/server.py): the commands the server
takes, the environment a job must share with it, the request a job sends and the replies it reads, and the
socket's folder both ends remove."""

from __future__ import annotations

import json
import os
import struct
import sys
from dataclasses import dataclass

from neuronsweep.store.failures import STAGES

# The commands the server takes, and the module each one runs in: the per-case stages, and the run's own
# jobs (the host calibration, and at its end aggregate, history and report: pandas and plotly, about 2 s
# of imports between them, on the path from the last case to the report). The server imports them all.
COMMAND_MODULES = {
    **{stage: f"neuronsweep.stages.{stage}" for stage in STAGES},
    "calibrate": "neuronsweep.cli",  # the host calibration is the CLI's own (over backends/cpu, imported with torch)
    "aggregate": "neuronsweep.stages.aggregate",
    "history": "neuronsweep.runs.history",
    "report": "neuronsweep.stages.report",
}
COMMANDS = tuple(COMMAND_MODULES)

# Read by PyTorch, OpenMP, the BLAS or Python when a module is imported: a job whose values differ
# from the server's would not get what a fresh interpreter gives it, so it runs on its own.
IMPORT_TIME_PREFIXES = (
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "TORCH",
    "PYTORCH",
    "LD_",
    "PYTHON",
    "XLA",
    "PJRT_",
    "NEURON_",
    "CUDA",
)
# Except the thread counts Snakemake sets for every job (its shell.py): the child applies
# OMP_NUM_THREADS with torch.set_num_threads, which is what a fresh interpreter's default would be.
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

HEADER = struct.Struct("!I")  # the request's length, before its JSON


@dataclass(frozen=True)
class Request:
    """What a job hands the server (as JSON after a length header, beside its three standard streams): the
    command line, the folder and environment to run it in, the interpreter it would have run in, its pid."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    python: list[str]
    pid: int

    @classmethod
    def parse(cls, body: bytes) -> Request:
        """The request of a job; ValueError for anything that is not one (a stray connection)."""
        try:
            fields = json.loads(body)
            request = cls(**{name: fields[name] for name in cls.__dataclass_fields__})
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a request: {exc}") from None
        if not (request.argv and isinstance(request.env, dict) and isinstance(request.pid, int)):
            raise ValueError("not a request: no command, environment or pid")
        return request


PID, EXIT = "pid", "exit"  # the kinds of Reply


@dataclass(frozen=True)
class Reply:
    """What the server tells a job, a line each: `pid` (the child it forked for the command: signals go to
    its group), then `exit` (the command's exit status, which the job exits with)."""

    kind: str  # PID or EXIT
    value: int

    def line(self) -> bytes:
        """The reply as the line the server sends."""
        return f"{self.kind} {self.value}\n".encode()

    @classmethod
    def read(cls, line: str, kind: str) -> Reply | None:
        """The reply of `kind` a line holds; None for anything else (the server refused, or went away)."""
        parts = line.split()
        if len(parts) != 2 or parts[0] != kind or not parts[1].lstrip("-").isdigit():
            return None
        return cls(kind, int(parts[1]))


def interpreter() -> list[str]:
    """The same Python and environment, whichever of the venv's links started it."""
    return [os.path.realpath(sys.executable), sys.prefix]


def remove_socket(path: str) -> None:
    """The server's socket, its pid file and their folder: gone (whichever are left)."""
    for leftover in (path, path + ".pid"):
        try:
            os.unlink(leftover)
        except OSError:
            pass
    try:
        os.rmdir(os.path.dirname(path))
    except OSError:
        pass
