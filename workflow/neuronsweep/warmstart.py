"""Warm start: a case's stage commands (and the run's calibration, aggregate, history and report) forked
from one process that has already imported what they need.

Each stage of each case is its own Snakemake job, and on cpu most of a small case's time went to
starting Python and importing torch and torch.export again in every job (2 to 3 s of a 3 s build,
docs/benchmarks.md); pandas, DuckDB and plotly cost every backend's extract, aggregate and report
about a second more. The workflow starts one server per Snakemake run (common.smk `onstart`, local
execution only; on a cold cache already while Snakemake plans, to measure the host probe) that imports
them once and then only forks: the `neuronsweep` command a job runs
connects to it, hands over its argv, working folder, environment and standard streams, and waits
for the forked child's exit status, which it exits with. A forked child is a new process (its own
pid, process group, file descriptors and device slot); it starts from the server's imported modules
and nothing else, since the server itself runs no stage. On neuron and xla the server imports no
framework: the programs that touch the device (backends/programs/) are started by the stage as fresh
interpreters, as before.

This module is the front door and stays light (every stage command starts here): the client, and starting
and stopping the server; the server, the host probe it measures first and what both ends say are in warm/.

Whenever the server cannot take a command (not running, another host, other import-time environment,
another Python), the command runs in this process as before: warm start only saves time. Set
NEURONSWEEP_WARM_START=0 to turn it off.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from types import FrameType

from neuronsweep.environment import WARM_SOCKET as ENV
from neuronsweep.environment import WARM_START as OFF
from neuronsweep.warm.protocol import COMMANDS, EXIT, HEADER, PID, Reply, Request, interpreter, remove_socket

__all__ = ["ENV", "EXIT", "OFF", "PID", "Reply", "Request", "main", "start", "start_probing", "stop"]


def main() -> int:
    """The `neuronsweep` command: a stage through the run's warm server when one takes it, else here."""
    argv = sys.argv[1:]
    if argv[:1] and argv[0] in COMMANDS:
        code = _through_server(argv)
        if code is not None:
            return code
    from neuronsweep.cli import main as cli_main

    return cli_main(argv)


def _through_server(argv: list[str]) -> int | None:
    """The command's exit status, run by the warm server; None when no server took it (nothing ran)."""
    where = os.environ.get(ENV, "")
    host, _, path = where.partition(":")
    if os.environ.get(OFF) == "0" or not path or host != socket.gethostname():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = json.dumps(asdict(Request(argv, os.getcwd(), dict(os.environ), interpreter(), os.getpid()))).encode()
        socket.send_fds(sock, [HEADER.pack(len(request))], [0, 1, 2])
        sock.sendall(request)
        reader = sock.makefile("r")
        forked = Reply.read(reader.readline(), PID)
    except OSError:
        return None
    if forked is None:  # refused (other environment) or the server went away: nothing ran
        return None
    child = forked.value

    def forward(
        signum: int, _frame: FrameType | None
    ) -> None:  # Snakemake stops a job with a signal to its process group
        try:
            os.killpg(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            ended = Reply.read(reader.readline(), EXIT)
            break
        except InterruptedError:
            continue
    if ended is None:
        print(f"neuronsweep: the warm server ended before {argv[0]} (pid {child}) did; rerun the job", file=sys.stderr)
        return 1
    return ended.value


# ---------------------------------------------------------------------------------------- the server's life


def start(parent_pid: int, backend: str = "cpu", probe: tuple[int, int] | None = None) -> str | None:
    """Start a server for the Snakemake process parent_pid of a `backend` run; returns the value of ENV
    for its jobs. probe = (threads, fd): the server first measures the host probe and writes it to fd
    (start_probing)."""
    if os.environ.get(OFF) == "0":
        return None
    # in a folder only this user can enter: whoever can connect runs commands as this user
    path = os.path.join(tempfile.mkdtemp(prefix=f"neuronsweep-warm-{parent_pid}-"), "socket")
    # Bound and listening here, before any job starts, and handed to the server: a job that connects
    # while the server is still starting or importing waits in the backlog instead of running alone.
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen(64)
            args = [path, str(parent_pid), backend, str(listener.fileno()), *(str(n) for n in probe or ())]
            server = subprocess.Popen(
                [sys.executable, "-m", "neuronsweep.warm.server", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(listener.fileno(), *([probe[1]] if probe else [])),
            )
        Path(path + ".pid").write_text(str(server.pid))
    except OSError:  # a socket path too long for AF_UNIX (a long TMPDIR), no room: the jobs run on their own
        stop(f":{path}")
        return None
    return f"{socket.gethostname()}:{path}"


def start_probing(
    parent_pid: int, backend: str, threads: int, timeout_s: float = 300.0
) -> tuple[str | None, dict | None]:
    """`start`, the server measuring the host probe (host/caps.py) before anything else: a cold probe is a
    child that imports torch (about 3 s) only to time a GEMM, and the server imports torch for the builds
    anyway. Returns ENV's value and the probe's measurements (None when the server gave none: the caller
    measures them itself, as before)."""
    read_end, write_end = os.pipe()
    try:
        value = start(parent_pid, backend, (threads, write_end))
    finally:
        os.close(write_end)  # the server holds its own copy: end of file when it has written, or died
    with os.fdopen(read_end, "rb") as answer:
        if value is None or not select.select([answer], [], [], timeout_s)[0]:
            return value, None
        try:
            measured = json.loads(answer.read() or b"null")
        except ValueError:
            measured = None
    return value, measured if isinstance(measured, dict) else None


def stop(value: str | None) -> None:
    """Ask the server behind ENV's value to finish: it takes no new command and ends after its last."""
    path = (value or "").partition(":")[2]
    try:
        pid = int(Path(path + ".pid").read_text())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):  # it ended already: its folder, if left, goes
        remove_socket(path)
