"""A collective on NeuronCores through torch-xla: one process per rank under torchrun, each on one
NeuronCore, as distributed training runs (the neuron backend's collectives suite).

Every rank narrows NEURON_RT_VISIBLE_CORES to its own core of the slot the parent holds (its
LOCAL_RANK-th), joins the "xla" process group (torch_xla.distributed.xla_backend, init xla://), and
runs the collective with torch_xla.core.xla_model (all_reduce, all_gather, reduce_scatter,
all_to_all) in the phases of xla_program.py, so the NEFF of the collective is attributed the same
way: inputs (moved to the device) / workload / second, with a rendezvous between phases so that no
rank's compile lands in another rank's earlier phase. Each rank works in a folder of its own
(rank_<r>/), so the graphs NEURON_FRAMEWORK_DEBUG dumps there stay apart; rank 0's are attributed.
With --iterations each rank then times
warmup + repeats x iterations executions, each after a rendezvous (all ranks start together), as
the gloo ranks do; the parent takes an execution's time as the slowest rank's.

Rank 0 writes the phases and compile counts (result.json); every rank its times (rank_<r>.json).
The parent side (`run`) does not import torch.
    torchrun --standalone --nproc_per_node W -m neuronsweep.backends.programs.xla_collective --spec JSON --out DIR ...
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, cast

from neuronsweep.analysis.correctness import check_rank
from neuronsweep.atomic import write_json
from neuronsweep.backends.cores import own_core
from neuronsweep.backends.processes import run_ranks
from neuronsweep.backends.programs.xla_program import PHASES, XlaResult, artifacts, child_args, metric
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import TORCH_DTYPES, collective_of


def run(
    spec: Spec, out_dir: Path, env: dict[str, str], globs: list[str], timeout_s: float, **settings: object
) -> XlaResult:
    """Run the ranks in out_dir with `env` (NEURON_RT_VISIBLE_CORES: `world` cores) and return rank
    0's result, with every rank's times under "ranks" when timed; settings: warmup, iterations, repeats."""
    out_dir = out_dir.resolve()
    args = child_args(spec, out_dir, globs, settings)
    result = run_ranks(__name__.rpartition(".")[2], args, spec, out_dir, env, "torch-xla collective", timeout_s)
    return cast(XlaResult, result)  # rank 0's, as xla_program's child writes it, with every rank's times


if TYPE_CHECKING:
    import torch


def _collective(xm: ModuleType, spec: Spec, tensor: torch.Tensor) -> Callable[[], torch.Tensor]:
    """The collective as a call on the rank's input; its result is a lazy tensor until the sync."""
    c = collective_of(spec)
    n = c.world
    return {
        "all_reduce": lambda: xm.all_reduce(xm.REDUCE_SUM, tensor),
        "all_gather": lambda: xm.all_gather(tensor, dim=0),
        "reduce_scatter": lambda: xm.reduce_scatter(xm.REDUCE_SUM, tensor, scale=1.0, scatter_dim=0, shard_count=n),
        "all_to_all": lambda: xm.all_to_all(tensor, split_dimension=0, concat_dimension=0, split_count=n),
    }[c.op]


def main(argv: list[str] | None = None) -> int:
    """One rank's torch-xla collective under torchrun, in xla_program's phases; rank 0 writes the result, every rank its
    times."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--artifact-glob", action="append", default=[])
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--iterations", type=int, help="absent: no timing")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--check", type=int, default=0, help="1: check the result once against NumPy (the build)")
    args = ap.parse_args(argv)
    own_core()
    own = Path(args.out) / f"rank_{os.environ['LOCAL_RANK']}"  # the rank's working directory: its debug dumps
    own.mkdir(exist_ok=True)
    os.chdir(own)

    import torch
    import torch.distributed as dist
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" process group)

    spec = json.loads(args.spec)
    dist.init_process_group("xla", init_method="xla://")
    rank = dist.get_rank()
    device = xm.xla_device()
    out = Path(args.out)

    def sync() -> None:
        xm.mark_step()
        xm.wait_device_ops()

    def listed(phase: str) -> dict:
        xm.rendezvous(f"{phase} done")  # every rank's graph of this phase is compiled
        found = artifacts(args.artifact_glob) if rank == 0 else {}
        xm.rendezvous(f"{phase} listed")
        return found

    phases = {"start": listed("start")}
    dtype = getattr(torch, TORCH_DTYPES[collective_of(spec).dtype])
    tensor = torch.ones(collective_of(spec).counts[0], dtype=dtype).to(device)
    sync()
    phases["inputs"] = listed("inputs")
    compiles = {"inputs": metric(met, "CompileTime")}
    call = _collective(xm, spec, tensor)
    for phase in PHASES[2:]:
        result = call()
        sync()
        del result
        phases[phase] = listed(phase)
        compiles[phase] = metric(met, "CompileTime")
    for _ in range(args.warmup):
        result = call()
        sync()
        del result
    samples = []
    for _ in range(args.repeats * (args.iterations or 0)):
        xm.rendezvous("timed execution")
        t0 = time.perf_counter_ns()
        result = call()
        sync()
        samples.append((time.perf_counter_ns() - t0) * 1e-9)
        del result
    if args.check:  # last, on inputs whose every sum is exact: check_rank_<r>.json, combined by the build
        values = torch.tensor(collective_of(spec).rank_input(rank), dtype=dtype)
        result = _collective(xm, spec, values.to(device))()
        sync()
        write_json(out / f"check_rank_{rank}.json", check_rank(spec, rank, result.cpu()))
    if args.iterations:
        write_json(
            out / f"rank_{rank}.json",
            {"rank": rank, "samples_s": samples, "core": os.environ.get("NEURON_RT_VISIBLE_CORES")},
        )
    if rank == 0:
        write_json(
            out / "result.json",
            {
                "phases": {name: sorted(files) for name, files in phases.items()},
                "digests": {path: digest for files in phases.values() for path, digest in files.items()},
                "compile": {
                    "count": compiles["workload"][0] - compiles["inputs"][0],
                    "seconds": compiles["workload"][1] - compiles["inputs"][1],
                    "second_call_count": compiles["second"][0] - compiles["workload"][0],
                },
                "torch": torch.__version__,
                "device": str(device),
                "world": dist.get_world_size(),
            },
        )
    xm.rendezvous("written")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
