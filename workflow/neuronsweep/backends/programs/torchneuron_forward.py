"""One rank of a model's forward across its ranks on NeuronCores through TorchNeuron (workloads/forward.py), under
torchrun as torchneuron_collective.py runs a collective: the rank's own core, NEFF cache folder and inspect
folder; `neuron` process group ("How to use torch.distributed on Neuron", SDK 2.33).

The rank builds its shard of the model's first layers with their seeded weights (as gloo_forward.py does) and
hooks each layer's collectives where the stack issues them, as functional collectives
(torch.distributed._functional_collectives): the module with its hooks is compiled by
torch.compile(backend="neuron", fullgraph=True), so the collectives are in the rank's NEFF between the layers'
compute, as vLLM Neuron's graphs hold them. A collective with no part in the output (the router's affinities)
is returned beside the hidden states, so no compiler drops it as unused.

The phases are torchneuron_collective.py's: inputs on `neuron` and synced / first compiled call / second call
(a new NEFF is a recompile) / with --check, every rank's output against the same layers run on the CPU on
this rank alone, each reduction the output times world (every rank holds the same seeded shard) /
--inspect-nth calls / warmup + timed executions, each after a barrier of a host-side gloo group. Inside a
compiled forward the host sees no collective: a rank records each execution's entry and exit on its own
clock, and the collectives' own times are in its device profile.
    torchrun --standalone --nproc_per_node W -m neuronsweep.backends.programs.torchneuron_forward --spec JSON ...
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from neuronsweep.analysis.correctness import compare
from neuronsweep.atomic import write_json
from neuronsweep.backends.processes import child_args, run_ranks
from neuronsweep.backends.programs.gloo_forward import hook
from neuronsweep.backends.programs.torchneuron_collective import own_folders, rank_arguments
from neuronsweep.backends.programs.torchneuron_program import first_two_calls, neffs
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import TORCH_DTYPES, collective, collective_of, forward, forward_of
from neuronsweep.workloads.forward import Forward


def run(spec: Spec, out_dir: Path, env: dict[str, str], neff_cache: Path, timeout_s: float, **settings: object) -> dict:
    """Run the ranks in out_dir; settings: check, warmup, iterations, repeats, inspect_nth."""
    out_dir = out_dir.resolve()
    args = child_args(spec, out_dir, neff_cache=neff_cache, **settings)
    return run_ranks(__name__.rpartition(".")[2], args, spec, out_dir, env, "TorchNeuron forward", timeout_s)


class Reductions:
    """The hooks' collectives as traced functions; `local`: the CPU reference on one rank (a reduction of
    `world` identical shards is the output times world); `extras`: this call's outputs of collectives that
    have no part in the hidden states."""

    def __init__(self, funcol: ModuleType, torch: ModuleType, f: Forward, group: object) -> None:
        self.funcol, self.torch, self.f, self.group = funcol, torch, f, group
        self.local = False
        self.extras: list[Any] = []

    def reduce(self, x: Any, ops: tuple[str, ...]) -> Any:
        """The rank's partial sums reduced by `ops`: an all-reduce, or (sequence parallel) a reduce-scatter
        and an all-gather over the flattened states, as gloo_forward.py reduces them."""
        if not ops:
            return x
        if self.local:
            return x * self.f.world
        flat = x.reshape(-1)
        n = flat.numel() // self.f.world * self.f.world
        whole, rest = flat[:n], flat[n:]
        for op in ops:
            if op == "all_reduce":
                whole = self.funcol.all_reduce(whole, "sum", self.group)
            elif op == "reduce_scatter":
                whole = self.funcol.reduce_scatter_tensor(whole, "sum", 0, self.group)
            else:  # all_gather
                whole = self.funcol.all_gather_tensor(whole, 0, self.group)
        return self.torch.cat([whole, rest]).reshape(x.shape)

    def extra(self, op: str, nbytes: int, like: Any) -> None:
        """A collective of the layer on a buffer of its own size (on the hidden states' device)."""
        if self.local:
            return
        s = collective.spec(op, nbytes, self.f.world, self.f.dtype)
        buf = self.torch.ones(collective_of(s).counts[0], dtype=like.dtype, device=like.device)
        self.extras.append(
            {
                "all_reduce": lambda: self.funcol.all_reduce(buf, "sum", self.group),
                "all_gather": lambda: self.funcol.all_gather_tensor(buf, 0, self.group),
                "reduce_scatter": lambda: self.funcol.reduce_scatter_tensor(buf, "sum", 0, self.group),
                "all_to_all": lambda: self.funcol.all_to_all_single(buf, None, None, self.group),
            }[op]()
        )


def hooked(module: Any, f: Forward, calls: Reductions) -> Any:
    """`module` with its collectives where gloo_forward.hook places them, as one module returning the hidden
    states and the extras."""
    import torch

    hook(module, f, calls)

    class RankForward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = module

        def forward(self, x: Any) -> tuple[Any, ...]:
            calls.extras = []
            out = self.layers(x)
            return (out, *calls.extras)

    return RankForward()


def call_names(f: Forward) -> list[str]:
    """The collectives one forward issues, in order: every rank's calls, named as gloo_forward.py records them."""
    names: list[str] = []
    for kind in f.layer_kinds:
        at = f.sites[kind]
        names += [*at.attention, *at.mlp, *(op for op, _ in at.extra)]
    return names


def _inputs(module: Any, f: Forward, calls: Reductions, check: bool) -> tuple[Any, Any]:
    """The rank's seeded hidden states, and (check) the output of the same layers on the CPU on this rank
    alone, each reduction its partial sums times world, before they move to the device."""
    import torch

    dtype = getattr(torch, TORCH_DTYPES[f.dtype])
    x = torch.randn(f.hidden_shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    if not check:
        return x, None
    calls.local = True
    reference = module(x)[0].double().numpy()
    calls.local = False
    return x, reference


def main(argv: list[str] | None = None) -> int:
    """One rank's TorchNeuron forward under torchrun: compile, check and time it on its own core; rank 0 writes
    the result, every rank its times and its check."""
    args = rank_arguments(argv, "run the forward")
    rank_name, own_cache = own_folders(args.neff_cache)

    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import torch_neuronx  # registers the neuron device, torch.compile backend and process group

    torch.set_grad_enabled(False)
    spec = json.loads(args.spec)
    f = forward_of(spec)
    dist.init_process_group(backend="neuron", init_method="env://")
    rank = dist.get_rank()
    host_group = dist.new_group(backend="gloo")

    def rendezvous() -> None:
        """Every rank here, off the device (torchneuron_collective.py's)."""
        dist.all_reduce(torch.zeros(1), group=host_group)

    calls = Reductions(funcol, torch, f, dist.group.WORLD)
    module = hooked(forward.build(f), f, calls)
    x, reference = _inputs(module, f, calls, bool(args.check))
    module = module.to("neuron")
    x = x.to("neuron")
    synchronize = getattr(torch, "neuron").synchronize  # noqa: B009 - torch_neuronx registers torch.neuron
    synchronize()
    compiled = torch.compile(module, backend="neuron", fullgraph=True)
    spans: list[tuple[float, float]] = []

    def call() -> tuple[Any, float]:
        rendezvous()
        synchronize()
        t0 = time.perf_counter_ns()
        out = compiled(x)
        synchronize()
        t1 = time.perf_counter_ns()
        spans.append((t0 * 1e-9, t1 * 1e-9))
        return out, (t1 - t0) * 1e-9

    out, listing = first_two_calls(call, str(own_cache))
    if reference is not None:
        verdict = compare(f.dtype, reference, out[0].cpu())
        write_json(Path(args.out) / f"check_{rank_name}.json", {"rank": rank, **verdict})
    for _ in range(max(0, (args.inspect_nth or 0) - 2)):
        call()
    for _ in range(args.warmup):
        call()
    spans.clear()
    samples = [call()[1] for _ in range(args.repeats * (args.iterations or 0))]
    if args.iterations:
        write_json(
            Path(args.out) / f"{rank_name}.json",
            {
                "rank": rank,
                "samples_s": samples,
                "exec_spans_s": spans,
                "calls": call_names(f),
                "core": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                "recompiles_during_timing": len(set(neffs(str(own_cache))) - set(listing["digests"])),
            },
        )
    if rank == 0:
        write_json(
            Path(args.out) / "result.json",
            {
                **listing,
                "torch": torch.__version__,
                "torch_neuronx": getattr(torch_neuronx, "__version__", None),
                "device": str(x.device),
                "world": f.world,
            },
        )
    rendezvous()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
