"""Running the programs a backend needs, so that no backend imports another: an external tool under a
time limit (its whole process group killed on timeout, a server stopped once its output is written),
one of our child programs (`backends/programs/`), or one per rank under torchrun."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from neuronsweep.config.schema import schema_default
from neuronsweep.errors import UserError
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import ranks_of, workload_id

PROGRAMS = "neuronsweep.backends.programs"  # where run_child and run_ranks find a program by its name

DEFAULT_TIMEOUT_S = {stage: schema_default(f"timeouts.{stage}") for stage in ("build", "capture", "view")}


def run_tool(
    argv: list[str],
    timeout_s: float,
    what: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    written: list[Path] | None = None,
) -> subprocess.CompletedProcess:
    """Run an external program in a process group of its own, so that on timeout the whole group
    (a profiler and the helpers it spawned, a server it left running) is killed; a timeout or a
    missing program ends in one sentence. With `written` (the paths its output may take), a program
    that stays up after writing it (neuron-explorer's view may serve its UI afterwards) is stopped once
    the output has stopped growing and the program listens on a port (or, without that sign, after
    3 s of no growth), and counts as exited 0."""
    if written is not None:
        return _run_until_written(argv, timeout_s, what, cwd, env, written)
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env, start_new_session=True
        )
    except FileNotFoundError:
        raise UserError(f"{what}: {argv[0]} not found; install it or fix its path.") from None
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise _timed_out(what, argv, timeout_s) from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _timed_out(what: str, argv: list[str], timeout_s: float) -> UserError:
    return UserError(
        f"{what}: {Path(argv[0]).name} did not finish within {timeout_s:g} s and was stopped "
        "(its whole process group); if it needs longer, raise the `timeouts` key of its stage "
        "in the config."
    )


POLL_S = 0.2
# polls an output's size must hold before a still-running writer counts as done: 2 once it listens on a
# port (the Explorer writes before it serves: its UI and API ports), else 15 (3 s) without that sign
SETTLED_POLLS, SETTLED_POLLS_SILENT = 2, 15


def _serving(pid: int) -> bool:
    """Whether the process or one of its children listens on a TCP port (a server, done writing)."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        return any(
            c.status == psutil.CONN_LISTEN
            for p in procs
            for c in getattr(p, "net_connections", p.connections)(kind="inet")
        )
    except (psutil.Error, OSError):
        return False


def _size(paths: list[Path]) -> int | None:
    """The size of the first of `paths` that exists (a folder's total: parquet exports are folders);
    None while none does."""
    for path in paths:
        if path.is_dir():
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) or None
        if path.is_file():
            return path.stat().st_size
    return None


def _run_until_written(
    argv: list[str], timeout_s: float, what: str, cwd: Path | None, env: dict[str, str] | None, written: list[Path]
) -> subprocess.CompletedProcess:
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=cwd, env=env, start_new_session=True)
        except FileNotFoundError:
            raise UserError(f"{what}: {argv[0]} not found; install it or fix its path.") from None
        deadline = time.monotonic() + timeout_s
        sizes: list[int | None] = []
        while proc.poll() is None:
            sizes = [*sizes[-(SETTLED_POLLS_SILENT - 1) :], _size(written)]
            held = next((i for i, v in enumerate(reversed(sizes)) if v != sizes[-1]), len(sizes))  # polls unchanged
            if sizes[-1] is not None and held >= (SETTLED_POLLS if _serving(proc.pid) else SETTLED_POLLS_SILENT):
                os.killpg(proc.pid, signal.SIGKILL)  # written and settled: the tool is only serving now
                proc.wait()
                return _completed(argv, 0, out, err)
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise _timed_out(what, argv, timeout_s)
            time.sleep(POLL_S)
        return _completed(argv, proc.returncode, out, err)


def _completed(argv: list[str], code: int, out: IO[str], err: IO[str]) -> subprocess.CompletedProcess:
    out.seek(0)
    err.seek(0)
    return subprocess.CompletedProcess(argv, code, out.read(), err.read())


def fresh(folder: Path) -> Path:
    """An empty folder, whatever an earlier attempt left there (attribution must see only this compile;
    neuronx-cc refuses a used NKI artifacts folder)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def child_args(spec: Spec, out: Path, **settings: object) -> list[str]:
    """A child program's command line: the spec, where to write, then each setting given as
    `--key-name value` (None left out)."""
    args = ["--spec", json.dumps(spec), "--out", str(out)]
    for key, value in settings.items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def run_child(
    module: str, args: list[str], spec: Spec, cwd: Path, env: dict[str, str], what: str, timeout_s: float
) -> None:
    """`python -m neuronsweep.backends.programs.<module> ARGS` in cwd: the torch-xla and NKI programs need a
    process of their own, since their environment is read when torch_xla / nki is imported. The
    output goes to cwd/<module>.log; a failure is one sentence with the case, the last line and the log."""
    proc = run_tool(
        [sys.executable, "-m", f"{PROGRAMS}.{module}", *args],
        timeout_s,
        f"case {workload_id(spec)}: the {what}",
        cwd=cwd,
        env=env,
    )
    log = Path(cwd) / f"{module}.log"
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise UserError(
            f"case {workload_id(spec)}: the {what} exited {proc.returncode}: "
            f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]} (full log: {log})."
        )


RANK_ERROR = re.compile(r"^\[rank\d+\]: \w*(Error|Exception)\b")  # a rank's exception, as torchrun prefixes it


def run_ranks(
    module: str, args: list[str], spec: Spec, out_dir: Path, env: dict[str, str], what: str, timeout_s: float
) -> dict:
    """`torchrun --standalone --nproc_per_node <world> -m neuronsweep.backends.programs.<module> ARGS` in out_dir:
    one process per rank, as distributed training runs. Returns rank 0's result.json, with every rank's
    rank_<r>.json under "ranks" when the ranks were timed; a failure is one sentence with the first
    rank's exception and the log."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("rank_*.json"):
        stale.unlink()
    world = ranks_of(spec)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"]
    proc = run_tool(
        [*argv, "-m", f"{PROGRAMS}.{module}", *args],
        timeout_s,
        f"case {workload_id(spec)}: the {what} ({world} ranks)",
        cwd=out_dir,
        env=env,
    )
    log = out_dir / "torchrun.log"
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        text = (proc.stderr + proc.stdout).strip().splitlines()
        errors = [ln for ln in text if RANK_ERROR.match(ln)]
        raise UserError(
            f"case {workload_id(spec)}: the {what}'s {world} ranks exited "
            f"{proc.returncode}: {(errors or text or ['no output'])[0].strip()} (full log: {log})."
        )
    result = json.loads((out_dir / "result.json").read_text())
    if any(out_dir.glob("rank_*.json")):  # the ranks were timed
        result["ranks"] = [json.loads((out_dir / f"rank_{r}.json").read_text()) for r in range(world)]
    return result
