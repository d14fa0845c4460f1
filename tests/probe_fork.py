"""The plan-time probes (custom_probe, model_probe) forked from one process per test worker that has
imported torch and transformers: multiprocessing's forkserver with those modules preloaded. Each probe
is still a process of its own, as `plan.run_probe` makes it (its user modules, its failures and its
exit code stay in it), but does not pay the imports again: 2 to 7 s a probe, several of them in most
plan tests. conftest.py installs it for the session; `real_probe` gives a test the real child back."""

from __future__ import annotations

import io
import multiprocessing
import runpy
import subprocess
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection

PRELOAD = ["torch", "transformers", "neuronsweep.workloads.custom_probe", "neuronsweep.workloads.model_probe"]
_context: list = []
real: Callable[[str, str], subprocess.CompletedProcess[str]]  # plan.run_probe itself, set by conftest


def _server() -> multiprocessing.context.ForkServerContext:
    if not _context:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context.append(context)
    return _context[0]


def _run(module: str, request: str, answer: Connection) -> None:
    """In the forked child: `python -m neuronsweep.workloads.<module>` with `request` as its stdin,
    what it writes and its exit status sent back."""
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(request), io.StringIO(), io.StringIO()
    code = 0
    try:
        runpy.run_module(f"neuronsweep.workloads.{module}", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback on stderr, status 1
        traceback.print_exc()
        code = 1
    answer.send((code, sys.stdout.getvalue(), sys.stderr.getvalue()))


def run_probe(module: str, request: str) -> subprocess.CompletedProcess[str]:
    """plan.run_probe's result, from a child forked off the worker's forkserver."""
    context = _server()
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_run, args=(module, request, send))
    child.start()
    send.close()
    try:
        code, out, err = receive.recv()
    except EOFError:  # died without answering (a crash, a kill): what the real child's caller would see
        code, out, err = 1, "", f"the probe child died (exit status {child.exitcode})"
    child.join()
    return subprocess.CompletedProcess([sys.executable, "-m", f"neuronsweep.workloads.{module}"], code, out, err)
