"""The warm server (warmstart.py has the why): started by `warmstart.start` for one Snakemake run, it imports
what the run's stage commands need once, then forks a child per job that connects, runs the job's command
line in it with the job's folder, environment and standard streams, and sends the job the child's pid and
then its exit status. It runs no stage itself; a job it cannot take runs on its own. Beyond the protocol and
the host probe, it imports the package by name (preload) or inside functions: the probe it may measure first
times the imports a fresh interpreter makes."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import struct
import sys
import tempfile

from neuronsweep.environment import WARM_JOB as JOB
from neuronsweep.warm import probe as probe_host
from neuronsweep.warm.protocol import (
    COMMAND_MODULES,
    COMMANDS,
    EXIT,
    HEADER,
    IMPORT_TIME_PREFIXES,
    PID,
    THREAD_VARS,
    Reply,
    Request,
    interpreter,
    remove_socket,
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


class Server:
    """One run's warm server: imports once, then forks each job's command and reports its exit status."""

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
        """Take no new command (the running ones finish): the socket and its folder go, as `stop` removes them."""
        if self.accepting:
            self.accepting = False
            remove_socket(self.path)

    def serve(self) -> None:
        """Take jobs, reap their commands and import what is pending, until closed and every command ended."""
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
        """A job connecting: its request read and checked, the imports it waits for done, its command forked
        and registered; a job refused (another environment, not a request, the server closing) runs alone."""
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            request, fds = self._receive(conn)
            self._ready_for(request)
            pid = os.fork()
        except (OSError, ValueError) as exc:
            for fd in fds:
                os.close(fd)
            conn.close()
            if isinstance(exc, ValueError):
                print(f"neuronsweep warm server: {exc}", file=sys.stderr, flush=True)
            return
        if pid == 0:
            self._child(conn, fds, request)  # never returns
        self._register(events, conn, fds, pid)

    def _receive(self, conn: socket.socket) -> tuple[Request, list[int]]:
        """The job's request (after its length header) and its three standard streams; OSError for one this
        server does not take, ValueError for what is no request."""
        conn.settimeout(10)
        head, fds, _flags, _addr = socket.recv_fds(conn, HEADER.size, 3)
        try:
            size = HEADER.unpack(head)[0]
            body = b""
            while len(body) < size:
                chunk = conn.recv(size - len(body))
                if not chunk:
                    raise OSError("short request")
                body += chunk
            request = Request.parse(body)
            if len(fds) != 3 or not self._same_imports(request):
                raise OSError("refused")
        except (OSError, ValueError, struct.error):
            for fd in fds:
                os.close(fd)
            raise
        return request, fds

    def _ready_for(self, request: Request) -> None:
        """Every pending import done before a command other than a build (a capture times with nothing
        importing beside it); OSError where the server began closing meanwhile."""
        while self.pending and request.argv[0] != "build":
            self._import_next()
        if not self.accepting:
            raise OSError("the server is closing")

    def _register(self, events: selectors.BaseSelector, conn: socket.socket, fds: list[int], pid: int) -> None:
        """The forked command in its own process group, its job told its pid and watched until it exits."""
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
            kill(pid)
            return
        events.register(conn, selectors.EVENT_READ)

    def _same_imports(self, request: Request) -> bool:
        """Whether the job would import what the server imported: the same interpreter, a command it takes,
        and the same import-time environment."""
        if request.python != interpreter() or request.argv[0] not in COMMANDS:
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
                kill(pid)

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


def kill(pid: int) -> None:
    """The command's process group: it and the programs it started."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def run(path: str, parent_pid: int, backend: str, listener: int, probe: tuple[int, int] | None = None) -> int:
    """The server's life: the host probe first where asked (warmstart.start_probing), the imports, then serving;
    its exit status is 1 where it could serve nothing (the jobs then run on their own)."""
    server = Server(path, parent_pid, backend, listener)
    try:
        if probe:
            probe_host.measure(*probe)
        server.preload()
        server.serve()
    except Exception:  # noqa: BLE001 - without the imports there is nothing to save: jobs run alone
        server.close()
        return 1
    return 0


if __name__ == "__main__":
    probe_args = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else None
    sys.exit(run(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), probe_args))
