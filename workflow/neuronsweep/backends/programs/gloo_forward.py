"""One rank of a model's forward across its ranks on the cpu backend (workloads/forward.py): gloo.capture
starts one per rank. The rank builds its shard of the model's first layers with their seeded weights and
hooks each layer's collectives where the stack issues them: the reduction on the output of attention's
o projection and of the MLP (or the experts), then any other collective of the layer on a buffer of its size.
Every collective call's entry and exit is recorded on the rank's own clock, so gloo.capture puts the ranks
on one timeline.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

from neuronsweep.analysis.correctness import compare
from neuronsweep.backends.programs.gloo import BACKEND, RankArgs, collective_call, done, leave, timed
from neuronsweep.errors import UserError
from neuronsweep.workloads import TORCH_DTYPES, collective, forward, forward_of
from neuronsweep.workloads.forward import Forward

# where a decoder layer of transformers' families keeps attention's output projection and its MLP (or experts)
ATTENTION_OUT = ("self_attn.o_proj", "self_attn.dense", "self_attention.dense", "attn.o_proj", "attention.o_proj")
MLP = ("mlp", "block_sparse_moe", "feed_forward")


class Collectives:
    """The layer's collectives as the hooks call them, each call timed; `local`: the output check's run on
    one rank, where a reduction of `world` identical shards is the output times `world`."""

    def __init__(self, dist: ModuleType, torch: ModuleType, f: Forward) -> None:
        self.dist, self.torch, self.dtype, self.world = dist, torch, f.dtype, f.world
        self.local, self.recording = False, False
        self.spans: list[tuple[float, float]] = []
        self.calls: list[str] = []
        self._extras: dict[tuple[str, int], Callable[[], object]] = {}
        self._gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def _timed(self, op: str, call: Callable[[], object]) -> None:
        t0 = time.perf_counter_ns()
        call()
        t1 = time.perf_counter_ns()
        if self.recording:
            self.spans.append((t0 * 1e-9, t1 * 1e-9))
            self.calls.append(op)

    def reduce(self, x: Any, ops: tuple[str, ...]) -> Any:
        """The rank's partial sums reduced by `ops` (an all-reduce, or a reduce-scatter and an all-gather)."""
        if not ops:
            return x
        if self.local:
            return x * self.world
        y = x.contiguous()
        flat = y.view(-1)
        whole = flat[: flat.numel() // self.world * self.world]
        shard = self.torch.empty(whole.numel() // self.world, dtype=y.dtype)
        for op in ops:
            call = {
                "all_reduce": lambda: self.dist.all_reduce(whole),
                "reduce_scatter": lambda: self._scatter(shard, whole),
                "all_gather": lambda: self._gather(whole, shard),
            }[op]
            self._timed(op, call)
        return y

    def extra(self, op: str, nbytes: int, like: Any) -> None:
        """A collective of the layer with no part in its output (the router's affinities), on its own buffers
        (`like`: the reduced hidden states, whose device a compiled program's buffers take)."""
        if self.local:
            return
        if (op, nbytes) not in self._extras:
            self._extras[(op, nbytes)] = collective_call(
                self.dist, self.torch, collective.spec(op, nbytes, self.world, self.dtype)
            )[0]
        self._timed(op, self._extras[(op, nbytes)])


def find(layer: Any, names: tuple[str, ...], what: str, model: str) -> Any:
    """The decoder layer's submodule under the first of `names` it has; one sentence where it has none."""
    for name in names:
        try:
            return layer.get_submodule(name)
        except AttributeError:
            continue
    raise UserError(
        f"suites.model ({model}): its decoder layer has no {what} under a name neuron-sweep knows "
        f"({', '.join(names)}), so the forward across ranks cannot place its collectives; set forward_layers: 0."
    )


class Reducer(Protocol):
    """What the hooks call: a rank program's collectives (Collectives here, torchneuron_forward.Reductions)."""

    def reduce(self, x: Any, ops: tuple[str, ...]) -> Any:
        """The rank's partial sums `x` reduced by `ops`."""
        ...

    def extra(self, op: str, nbytes: int, like: Any) -> None:
        """A collective of `nbytes` with no part in the output."""
        ...


def hook(module: Any, f: Forward, calls: Reducer) -> None:
    """Each kept layer's reductions after attention's output projection and after its MLP, its other
    collectives after the MLP's reduction (spec `sites`, per layer kind): the placement both rank programs
    (this one, torchneuron_forward.py) share."""
    for layer, kind in zip(module.model.layers, f.layer_kinds):
        at = f.sites[kind]

        def after(ops: tuple[str, ...], extras: tuple[tuple[str, int], ...]) -> Callable[..., Any]:
            def run(_: Any, __: Any, output: Any) -> Any:
                first = output[0] if isinstance(output, tuple) else output
                reduced = calls.reduce(first, ops)
                for op, nbytes in extras:
                    calls.extra(op, nbytes, reduced)
                return (reduced, *output[1:]) if isinstance(output, tuple) else reduced

            return run

        find(layer, ATTENTION_OUT, "attention output projection", f.model).register_forward_hook(
            after(at.attention, ())
        )
        find(layer, MLP, "MLP", f.model).register_forward_hook(after(at.mlp, at.extra))


def _rank(rank: int, args: RankArgs) -> None:
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore")  # renamed collectives across torch versions; transformers' notes
    f = forward_of(args["spec"])
    torch.set_num_threads(args["threads"])
    dist.init_process_group(BACKEND, init_method=f"file://{args['store']}", rank=rank, world_size=f.world)
    module = forward.build(f)
    calls = Collectives(dist, torch, f)
    hook(module, f, calls)
    dtype = getattr(torch, TORCH_DTYPES[f.dtype])
    x = torch.randn(f.hidden_shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    correctness = None
    with torch.inference_mode():
        out = module(x).clone()  # through the collectives
        if rank == 0:  # the same layers on this rank alone, each reduction the output times world
            calls.local = True
            reference = module(x).double().numpy()
            calls.local = False
            correctness = {"rank": 0, **compare(f.dtype, reference, out)}

        def recorded() -> None:  # a timed forward: every collective call of it on the timeline
            calls.recording = True
            module(x)
            calls.recording = False

        samples, executions, profiled = timed(lambda: module(x), rank, args, dist, recorded)
    per_exec = len(calls.calls) // max(1, len(samples))
    record = {"samples_s": samples, "exec_spans_s": executions, "spans_s": calls.spans}
    done(rank, args, dist, profiled, record | {"calls": calls.calls[:per_exec], "correctness": correctness})


if __name__ == "__main__":
    _rank(int(sys.argv[1]), json.loads(sys.argv[2]))
    leave()
