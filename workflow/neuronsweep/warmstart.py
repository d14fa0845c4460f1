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

Whenever the server cannot take a command (not running, another host, other import-time environment,
another Python), the command runs in this process as before: warm start only saves time. Set
NEURONSWEEP_WARM_START=0 to turn it off.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType

from neuronsweep.environment import WARM_JOB as JOB
from neuronsweep.environment import WARM_SOCKET as ENV
from neuronsweep.environment import WARM_START as OFF
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
STAGE_MODULES = tuple(dict.fromkeys(("neuronsweep.cli", *COMMAND_MODULES.values())))
BUILD_FIRST = ("neuronsweep.cli",)  # with the framework, the build stage and the backend: what a build imports
# torch's private modules that torch.export imports on first use: they move between releases, and a
# missing one only costs each job its import
PRIVATE = {"torch.export._trace", "torch._export.serde.serialize"}


def preload(backend: str) -> tuple[str, ...]:
    """What the server imports for a backend: the framework its stages run workloads with in their own
    process (Backend.preload: cpu's torch), our stages and the readers behind them, and the backend.
    neuron and xla run theirs in child programs (backends/programs/), fresh interpreters that read the
    device's environment when they import their framework: their server imports no framework."""
    from neuronsweep.config.backends import BACKENDS

    return (*BACKENDS[backend].preload, *STAGE_MODULES, f"neuronsweep.backends.{backend}")


_HEADER = struct.Struct("!I")


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


def main() -> int:
    """The `neuronsweep` command: a stage through the run's warm server when one takes it, else here."""
    argv = sys.argv[1:]
    if argv[:1] and argv[0] in COMMANDS:
        code = _through_server(argv)
        if code is not None:
            return code
    from neuronsweep.cli import main as cli_main

    return cli_main(argv)


# ---------------------------------------------------------------------------------------- client


def _through_server(argv: list[str]) -> int | None:
    """The command's exit status, run by the warm server; None when no server took it (nothing ran)."""
    where = os.environ.get(ENV, "")
    host, _, path = where.partition(":")
    if os.environ.get(OFF) == "0" or not path or host != socket.gethostname():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = json.dumps(asdict(Request(argv, os.getcwd(), dict(os.environ), _interpreter(), os.getpid()))).encode()
        socket.send_fds(sock, [_HEADER.pack(len(request))], [0, 1, 2])
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


def _interpreter() -> list[str]:
    """The same Python and environment, whichever of the venv's links started it."""
    return [os.path.realpath(sys.executable), sys.prefix]


# ---------------------------------------------------------------------------------------- server


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
                [sys.executable, "-m", "neuronsweep.warmstart", *args],
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
        for leftover in (path, path + ".pid"):
            try:
                os.unlink(leftover)
            except OSError:
                pass
        try:
            os.rmdir(os.path.dirname(path))
        except OSError:
            pass


class _Server:
    def __init__(self, path: str, parent_pid: int, backend: str, listener: int) -> None:
        self.path, self.parent_pid, self.backend = path, parent_pid, backend
        self.children: dict[int, socket.socket] = {}  # pid -> the client waiting for it
        self.accepting = True
        self.listener = socket.socket(fileno=listener)  # bound by start(): early jobs wait in its backlog
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: self.close())
        self.env = dict(os.environ)
        self.pending: list[str] = []  # modules still to import (preload)

    def preload(self) -> None:
        """What a build needs (the framework, the CLI, the build stage, the backend): the server takes jobs
        once these are in. The rest (the other stages' readers and report: 3 to 4 s on cpu) comes in
        while the first builds run (`_import_next`), and all of it before any other command is forked."""
        self.pending = list(preload(self.backend))
        first = {*BUILD_FIRST, "neuronsweep.stages.build", f"neuronsweep.backends.{self.backend}"}
        for name in [n for n in self.pending if n.split(".")[0] != "neuronsweep" or n in first]:
            self._import(name)
        self._settle()

    def _import(self, name: str) -> None:
        import importlib

        self.pending.remove(name)
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            if name not in PRIVATE:
                raise

    def _import_next(self) -> None:
        """One more of the pending imports, between requests (a job that connects meanwhile waits in the
        backlog for a moment). One that fails ends the serving: the commands running finish, later jobs
        run on their own."""
        if not self.pending:
            return
        try:
            self._import(self.pending[0])
            self._settle()
        except Exception:  # noqa: BLE001 - nothing is lost but the time warm start saves
            self.pending.clear()
            self.close()

    def _settle(self) -> None:
        import gc
        import threading

        if threading.active_count() > 1:  # forking a threaded process is unsafe: serve nothing
            raise RuntimeError("an import started a thread")
        sys.stdout.flush()
        gc.freeze()  # the children's collector then leaves the shared pages alone

    def close(self) -> None:
        if self.accepting:
            self.accepting = False
            for leftover in (self.path, self.path + ".pid"):
                try:
                    os.unlink(leftover)
                except OSError:
                    pass
            try:
                os.rmdir(os.path.dirname(self.path))
            except OSError:
                pass

    def serve(self) -> None:
        events = selectors.DefaultSelector()
        events.register(self.listener, selectors.EVENT_READ)
        events.register(self.wake_r, selectors.EVENT_READ)
        while self.accepting or self.children:
            if self.accepting and os.getppid() != self.parent_pid:
                self.close()  # Snakemake is gone: finish the running commands, take no new one
            if not self.accepting and self.listener.fileno() >= 0:
                events.unregister(self.listener)
                self.listener.close()
            ready = events.select(timeout=0.0 if self.pending else 1.0)
            for key, _ in ready:
                if key.fileobj is self.listener and self.accepting:
                    self._take(events)
                elif key.fileobj == self.wake_r:
                    os.read(self.wake_r, 512)
                elif isinstance(key.fileobj, socket.socket):
                    self._client_gone(events, key.fileobj)
            self._reap(events)
            if not ready:
                self._import_next()

    def _take(self, events: selectors.BaseSelector) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(10)
            head, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
            size = _HEADER.unpack(head)[0]
            body = b""
            while len(body) < size:
                chunk = conn.recv(size - len(body))
                if not chunk:
                    raise OSError("short request")
                body += chunk
            request = Request.parse(body)
            if len(fds) != 3 or not self._same_imports(request):
                raise OSError("refused")
            while self.pending and request.argv[0] != "build":  # a capture times with nothing importing beside it
                self._import_next()
            if not self.accepting:
                raise OSError("the server is closing")
            pid = os.fork()
        except (OSError, ValueError) as exc:  # refused (another environment), or not a request: the job runs alone
            for fd in fds:
                os.close(fd)
            conn.close()
            if isinstance(exc, ValueError):
                print(f"neuronsweep warm server: {exc}", file=sys.stderr, flush=True)
            return
        if pid == 0:
            self._child(conn, fds, request)  # never returns
        try:
            os.setpgid(pid, pid)  # as the child does: whichever runs first, a signal finds its group
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        try:
            conn.settimeout(None)
            conn.sendall(Reply(PID, pid).line())
        except OSError:  # the job is already gone: so is its command
            _kill(pid)
            return
        events.register(conn, selectors.EVENT_READ)

    def _same_imports(self, request: Request) -> bool:
        """Whether the job would import what the server imported: the same interpreter, a command it takes,
        and the same import-time environment."""
        if request.python != _interpreter() or request.argv[0] not in COMMANDS:
            return False
        env = request.env
        keys = {k for k in (*env, *self.env) if k.startswith(IMPORT_TIME_PREFIXES) and k not in THREAD_VARS}
        return all(env.get(k) == self.env.get(k) for k in keys)

    def _child(self, conn: socket.socket, fds: list[int], request: Request) -> None:
        code = 1
        try:
            os.setpgid(0, 0)  # its own group: a signal to it reaches its subprocesses, as for a shell job
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.listener.close()
            conn.close()
            for other in self.children.values():
                other.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request.cwd)
            os.environ.clear()
            os.environ.update(request.env)
            os.environ[JOB] = str(request.pid)
            tempfile.tempdir = None  # TMPDIR is the job's (Snakemake's tmpdir resource)
            threads = os.environ.get("OMP_NUM_THREADS", "")
            if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:  # cpu: what a fresh one does
                import torch

                torch.set_num_threads(int(threads))
            sys.argv = ["neuronsweep", *request.argv]
            from neuronsweep.cli import main as cli_main

            code = cli_main(request.argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback, then status 1
            import traceback

            traceback.print_exc()
        finally:
            import atexit

            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)

    def _client_gone(self, events: selectors.BaseSelector, conn: socket.socket) -> None:
        try:
            if conn.recv(64):
                return  # a client sends nothing after its request; only the end of the stream counts
        except OSError:
            pass
        events.unregister(conn)
        for pid, waiting in self.children.items():
            if waiting is conn:  # its job was killed (kill -9 of the job): so is the command
                _kill(pid)

    def _reap(self, events: selectors.BaseSelector) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(Reply(EXIT, code if code >= 0 else 128 - code).line())
            except OSError:
                pass
            if conn.fileno() >= 0:
                try:
                    events.unregister(conn)
                except (KeyError, ValueError):
                    pass
                conn.close()


def _kill(pid: int) -> None:
    """The command's process group: it and the programs it started."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _probe(threads: int, fd: int) -> None:
    """The host probe, written to fd as JSON: its imports timed here (the first this process makes), its
    GEMMs in a forked child (torch's thread pool must not start in a process that forks every job)."""
    from neuronsweep.host import caps

    with os.fdopen(fd, "w") as out:
        imports = caps.timed_imports()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(read_end)
                with os.fdopen(write_end, "w") as rates:
                    json.dump(caps.gemm_rates(threads), rates)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end) as rates:
            text = rates.read()
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0:
            json.dump({**imports, **json.loads(text)}, out)


def _serve(path: str, parent_pid: int, backend: str, listener: int, probe: tuple[int, int] | None = None) -> int:
    server = _Server(path, parent_pid, backend, listener)
    try:
        if probe:
            _probe(*probe)
        server.preload()
        server.serve()
    except Exception:  # noqa: BLE001 - without the imports there is nothing to save: jobs run alone
        server.close()
        return 1
    return 0


if __name__ == "__main__":
    probe_args = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else None
    sys.exit(_serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), probe_args))
