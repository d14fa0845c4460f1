"""Neuron's own collectives benchmark, nccom-test, as the anchor of the neuron collectives suite: run
on the same cores, size, world and dtype as the sweep's case, so its time and bandwidths sit beside
the torch-xla ones in metrics.json.

Contract (aws-neuron-sdk, tools/neuron-sys-tools/nccom-test.rst):
    nccom-test -r <workers> <all_reduce|all_gather|reduce_scatter|alltoall> -b <bytes> -e <bytes>
               -d <fp32|bf16|fp16|...> -n <iters> -w <warmup_iters>
prints a table `size(B) count(elems) type time(us) algbw(GB/s) busbw(GB/s) [algorithm]` (the time
column headed `time:avg(us)` by the real tool on inf2), one row per size, then
`Avg bus bandwidth: ...GB/s`. time(us) is the mean of the measured operations; GB
there means GiB (1,073,741,824 bytes), so bandwidths are converted to bytes/s here. Its size and
bus-bandwidth factors are nccl-tests', as ours (workloads/collective.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import NotRequired, TypedDict

from neuronsweep.backends.processes import run_tool
from neuronsweep.errors import UserError
from neuronsweep.host.slots import NEURON_TOOL_DIR
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import collective_of

OPS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "all_to_all": "alltoall",
}
GIB = 1 << 30
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(?:\s+(\S+))?\s*$")


def find() -> str | None:
    """nccom-test on PATH or in /opt/aws/neuron/bin; None where Neuron's tools are not installed."""
    return shutil.which("nccom-test") or shutil.which("nccom-test", path=NEURON_TOOL_DIR)


def argv(tool: str, spec: Spec, iterations: int, warmup: int) -> list[str]:
    """nccom-test's command line for one collective of the sweep: its ranks, operation, size (begin = end) and data
    type, with the run's iterations and warmup."""
    c = collective_of(spec)
    return [
        tool,
        "-r",
        str(c.world),
        OPS[c.op],
        "-b",
        str(c.nbytes),
        "-e",
        str(c.nbytes),
        "-d",
        c.dtype,
        "-n",
        str(iterations),
        "-w",
        str(warmup),
        "--non-interactive",  # as the real runs are invoked (fixtures/neuron/real-tools): no prompt, plain table
    ]


class Row(TypedDict):
    """nccom-test's table row of one size, in seconds and bytes/s."""

    size_bytes: int
    count: int
    type: str
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    algorithm: str


class Anchor(TypedDict):
    """capture.json's `nccom_test`: the command, its row of the case's size, or why there is none."""

    argv: NotRequired[list[str]]
    result: Row | None
    why: str | None


def parse(text: str, nbytes: int) -> Row | None:
    """The table row of `nbytes`, in seconds and bytes/s; None when the output has none."""
    for line in text.splitlines():
        m = ROW.match(line)
        if m and int(m.group(1)) == nbytes:
            return {
                "size_bytes": nbytes,
                "count": int(m.group(2)),
                "type": m.group(3),
                "time_s": float(m.group(4)) * 1e-6,
                "algbw_bytes_per_s": float(m.group(5)) * GIB,
                "busbw_bytes_per_s": float(m.group(6)) * GIB,
                "algorithm": m.group(7),
            }
    return None


def measure(spec: Spec, env: dict[str, str], iterations: int, warmup: int, timeout_s: float, log: Path) -> Anchor:
    """nccom-test's figures for this case, or why there are none (not installed, failed, no row):
    an anchor that is missing never fails the case."""
    tool = find()
    if tool is None:
        return {"result": None, "why": f"nccom-test is not installed (PATH, {NEURON_TOOL_DIR})"}
    cmd = argv(tool, spec, iterations, warmup)
    try:
        proc = run_tool(cmd, timeout_s, "nccom-test", env=env)
    except UserError as e:  # its time limit
        return {"argv": cmd, "result": None, "why": str(e)}
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        return {"argv": cmd, "result": None, "why": f"nccom-test exited {proc.returncode}: {last} (log: {log})"}
    nbytes = collective_of(spec).nbytes
    row = parse(proc.stdout, nbytes)
    return {
        "argv": cmd,
        "result": row,
        "why": None if row else f"nccom-test printed no row of {nbytes} bytes (log: {log})",
    }
