"""A collective on NeuronCores through TorchNeuron, one process per rank under torchrun (SDK 2.33, "How to
use torch.distributed on Neuron"): `import torch_neuronx` registers the `neuron` process group,
`dist.init_process_group(backend="neuron", init_method="env://")` joins it.

Each rank, before the runtime starts:
- narrows NEURON_RT_VISIBLE_CORES to its own core of the slot the parent holds (cores.own_core):
  TorchNeuron would otherwise take core LOCAL_RANK of the machine, which another slot may hold;
- compiles into a NEFF cache folder of its own (<cache>/rank_<r>): the ranks compile the same graph at
  the same time, and rank 0's listing must hold rank 0's NEFF only;
- profiles into a folder of its own under the runtime's inspect mode (<inspect dir>/rank_<r>), so the
  parent knows whose NTFF is whose.

The collective is a functional collective (torch.distributed._functional_collectives) in a function
compiled by torch.compile(backend="neuron", fullgraph=True): Dynamo traces it into the graph, so the
collective is in the NEFF, and it is out of place, so every execution reads the same input (an in-place
all_reduce would grow it each call) and the NEFF holds no extra copy. The phases are those of
torchneuron_program.py: inputs on `neuron` and synced / first compiled call / second call (a new NEFF
is a recompile) / warmup + timed executions, each after a barrier of a host-side gloo group (so the
device queue holds only the collective) / --inspect-nth calls. Rank 0 writes result.json (its NEFF
listing), every timed rank rank_<r>.json; the parent takes an execution's time as the slowest rank's.
    torchrun --standalone --nproc_per_node W -m neuronsweep.backends.programs.torchneuron_collective --spec JSON ...
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from neuronsweep.analysis.correctness import check_rank
from neuronsweep.atomic import write_json
from neuronsweep.backends.cores import own_core
from neuronsweep.backends.processes import child_args, run_ranks
from neuronsweep.backends.programs.torchneuron_program import first_two_calls, neffs
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import TORCH_DTYPES, collective_of


def run(spec: Spec, out_dir: Path, env: dict[str, str], neff_cache: Path, timeout_s: float, **settings: object) -> dict:
    """Run the ranks in out_dir; settings: warmup, iterations, repeats, inspect_nth."""
    out_dir = out_dir.resolve()
    args = child_args(spec, out_dir, neff_cache=neff_cache, **settings)
    return run_ranks(__name__.rpartition(".")[2], args, spec, out_dir, env, "TorchNeuron collective", timeout_s)


def _collective(funcol: ModuleType, group: object, spec: Spec) -> Callable:
    """The collective as an out-of-place function of the rank's input."""
    return {
        "all_reduce": lambda x: funcol.all_reduce(x, "sum", group),
        "all_gather": lambda x: funcol.all_gather_tensor(x, 0, group),
        "reduce_scatter": lambda x: funcol.reduce_scatter_tensor(x, "sum", 0, group),
        "all_to_all": lambda x: funcol.all_to_all_single(x, None, None, group),
    }[collective_of(spec).op]


def rank_arguments(argv: list[str] | None, calls: str) -> argparse.Namespace:
    """A TorchNeuron rank program's command line (this one's and torchneuron_forward.py's); `calls`: what
    --inspect-nth calls that many times."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--neff-cache", required=True, help="the build's NEFF cache; each rank uses rank_<r>/ in it")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--iterations", type=int, help="absent: no timing")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--inspect-nth", type=int, help=f"{calls} this many times in all (inspect capture)")
    ap.add_argument("--check", type=int, default=0, help="1: check the result once (the build)")
    return ap.parse_args(argv)


def own_folders(neff_cache: str) -> tuple[str, Path]:
    """The rank's own core, NEFF cache folder and inspect folder, set before torch_neuronx loads: its name
    (rank_<r>) and its NEFF cache."""
    own_core()
    rank_name = f"rank_{os.environ['RANK']}"
    own_cache = Path(neff_cache) / rank_name
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(own_cache)
    if os.environ.get("NEURON_RT_INSPECT_OUTPUT_DIR"):
        os.environ["NEURON_RT_INSPECT_OUTPUT_DIR"] = str(Path(os.environ["NEURON_RT_INSPECT_OUTPUT_DIR"]) / rank_name)
    return rank_name, own_cache


def main(argv: list[str] | None = None) -> int:
    """One rank's TorchNeuron collective under torchrun: compile, check and time it on its own core; rank 0 writes the
    result, every rank its times."""
    args = rank_arguments(argv, "call the collective")
    rank_name, own_cache = own_folders(args.neff_cache)

    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import torch_neuronx  # registers the neuron device, torch.compile backend and process group

    torch.set_grad_enabled(False)
    spec = json.loads(args.spec)
    dist.init_process_group(backend="neuron", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    host_group = dist.new_group(backend="gloo")

    def rendezvous() -> None:
        """Every rank here, off the device: a gloo all_reduce of a host tensor (dist.barrier would pick the
        accelerator and put its own collective in the device queue)."""
        dist.all_reduce(torch.zeros(1), group=host_group)

    dtype = getattr(torch, TORCH_DTYPES[collective_of(spec).dtype])
    tensor = torch.ones(collective_of(spec).counts[0], dtype=dtype).to("neuron")
    synchronize = torch.neuron.synchronize  # type: ignore[attr-defined]  # torch_neuronx registers it
    synchronize()
    compiled = torch.compile(_collective(funcol, dist.group.WORLD, spec), backend="neuron", fullgraph=True)

    def call() -> tuple[None, float]:
        rendezvous()
        synchronize()
        t0 = time.perf_counter_ns()
        out = compiled(tensor)
        synchronize()
        seconds = (time.perf_counter_ns() - t0) * 1e-9
        del out
        return None, seconds

    _, calls = first_two_calls(call, str(own_cache))
    if args.check:  # after the listed calls, on inputs whose every sum is exact: check_rank_<r>.json
        rendezvous()
        result = compiled(torch.tensor(collective_of(spec).rank_input(rank), dtype=dtype).to("neuron"))
        synchronize()
        write_json(Path(args.out) / f"check_{rank_name}.json", check_rank(spec, rank, result.cpu()))
    for _ in range(max(0, (args.inspect_nth or 0) - 2)):
        call()
    for _ in range(args.warmup):
        call()
    samples = [call()[1] for _ in range(args.repeats * (args.iterations or 0))]
    out = Path(args.out)
    if args.iterations:
        write_json(
            out / f"{rank_name}.json",
            {
                "rank": rank,
                "samples_s": samples,
                "core": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                "recompiles_during_timing": len(set(neffs(str(own_cache))) - set(calls["digests"])),
            },
        )
    if rank == 0:
        write_json(
            out / "result.json",
            {
                **calls,
                "torch": torch.__version__,
                "torch_neuronx": getattr(torch_neuronx, "__version__", None),
                "device": str(tensor.device),
                "world": world,
            },
        )
    rendezvous()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
