"""The forward across ranks (suites.model at tp > 1): what the sum of parts cannot show. The layers measured
whole (workloads/layer.py) and the collectives (workloads/collective.py) are each timed alone; here the rank's
shard of the model's first `layers_run` decoder layers runs on all tp ranks at once, and every collective
the stack issues inside a layer runs where it issues it, so a slow rank makes the others wait at the next
one and the forward's measured time stands beside the sum of its parts (analysis/model_rollup.py).

Where the collectives go: a row-parallel output (attention's o projection, the MLP's or the experts' output)
holds each rank's partial sums, and the stack reduces them there: an all-reduce, or under sequence
parallelism (prefill) a reduce-scatter and an all-gather (the all-gather run at once after it, so the
norm and the residual run on the whole sequence, where the stack runs them on the rank's shard). A layer's
collectives are the stack's own (deployment.collectives for one layer of the kind, less none): the two
reductions at those two places, anything else of the layer (the router's affinities) after the second, on a
buffer of its size. Collectives outside the TP group (DP's) are left out and said; the embedding's, the
head's and sampling's are outside the layers run.

Every rank builds the same shard with the same seeded weights, so the reduced output is `world` times one
rank's partial sums: the output check runs the layers on one rank with that product in place of each
reduction and compares (a reduction at the wrong place, or a scatter without its gather, fails it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from neuronsweep.config.suites import ModelEntry
from neuronsweep.store.specs import ForwardSpec
from neuronsweep.workloads import collective, deployment, layer, routing
from neuronsweep.workloads.descriptor import Workload
from neuronsweep.workloads.dtypes import DTYPE_BYTES
from neuronsweep.workloads.probed import LayerCount, ProbedPass
from neuronsweep.workloads.routing import Policy
from neuronsweep.workloads.sharding import Collective, Sharding

if TYPE_CHECKING:
    import torch

DESCRIPTOR = Workload("forward", ranks=True, real_inputs=True)  # what this kind can do (workloads/descriptor.py)
ROOFLINE = False  # its GEMMs are the layers' (each measured whole and alone): the forward is a time, not a place
REDUCTIONS = (["all_reduce"], ["reduce_scatter", "all_gather"])  # what sums a row-parallel output's partials
SITES = ("attention", "mlp")  # where a layer reduces: attention's output projection, the MLP's (or experts') output
TP_GROUPS = ("tp", "world")  # the groups whose ranks are the TP group's (NxD's experts under EP: the world)


def no_roofline_why(f: Forward) -> str:
    """Why metrics.json places no forward across ranks on a roofline."""
    return (
        "a forward across ranks is a measured time beside the sum of its parts; its layers' FLOPs and places "
        "are the layer cases' (the same layers measured whole)"
    )


@dataclass(frozen=True)
class Sites:
    """One kind of layer's collectives where the forward issues them: the reduction after attention and
    after the MLP (`REDUCTIONS`), the rest after the MLP's, and what is not issued, with why."""

    attention: tuple[str, ...]
    mlp: tuple[str, ...]
    extra: tuple[tuple[str, int], ...]  # (op, bytes) on a buffer of its size
    left_out: tuple[str, ...]


def layer_collectives(
    config: dict, s: Sharding, phase: str, batch: int, seq: int, dtype: str, moe: bool
) -> list[Collective]:
    """The collectives one layer of a kind issues under the stack's rules: the step's with that layer less
    the step's with no layer (so the embedding's, the head's and sampling's drop out)."""
    base = {(c.op, c.nbytes, c.world): c for c in deployment.collectives(config, s, phase, batch, seq, dtype, [])}
    one = deployment.collectives(config, s, phase, batch, seq, dtype, [LayerCount(layers=1, moe=moe)])
    out = []
    for c in one:
        count = c.count - (base[(c.op, c.nbytes, c.world)].count if (c.op, c.nbytes, c.world) in base else 0)
        if count > 0:
            out.append(Collective(c.op, c.nbytes, c.world, c.group, count, c.what))
    return out


def sites(found: list[Collective], hidden_bytes: int, world: int, dtype: str) -> Sites:
    """`found` (one layer's collectives) placed: a reduction of the hidden states (`hidden_bytes`) after
    attention, another after the MLP, the TP group's others after that; another group's are left out."""
    pool: list[tuple[str, int]] = []
    left_out = []
    for c in found:
        if c.group not in TP_GROUPS or c.world != world:
            left_out.append(f"{c.op} of {c.nbytes:,} B over the {c.group} group ({c.what}): not the TP group's ranks")
            continue
        pool += [(c.op, collective.spec(c.op, c.nbytes, world, dtype)["bytes"])] * c.count
    size = collective.spec("all_reduce", hidden_bytes, world, dtype)["bytes"]
    placed = []
    for _ in SITES:
        ops = next((r for r in REDUCTIONS if all(pool.count((op, size)) >= r.count(op) for op in r)), [])
        for op in ops:
            pool.remove((op, size))
        placed.append(tuple(ops))
    return Sites(placed[0], placed[1], tuple(pool), tuple(left_out))


def spec(
    entry: ModelEntry,
    digest: str,
    one: ProbedPass,
    dtype: str,
    policy: Policy,
    layers_run: int,
    world: int,
    kind_sites: dict[str, Sites],
) -> ForwardSpec:
    """The first `layers_run` decoder layers of `entry`'s model (ranked as layer.spec has it: rank_config,
    expert_ep, layout) at one phase, batch and seq, run on `world` ranks; `kind_sites`: each layer kind's
    collectives as placed (sites)."""
    kinds = {i: k for k in one["layers"] for i in k.get("members", [k["index"]])}
    run = [kinds[i] for i in range(layers_run)]
    named: Mapping[str, Any] = entry  # the entry's optional keys, read by name in this order
    s = {
        "kind": "forward",
        "model": entry["name"],
        **{k: named[k] for k in ("hf_config", "module") if k in named},
        **{k: named[k] for k in ("rank_config", "expert_ep", "layout", "top_k", "expert_tokens") if named.get(k)},
        "source_sha256": digest,
        "part": "forward",
        "phase": one["phase"],
        "batch": one["batch"],
        "seq": one["seq"],
        "dtype": dtype,
        "hidden": one["hidden"],
        "world": world,
        "layers_run": layers_run,
        "layer_kinds": [k["kind"] for k in run],
        "params": sum(k["params"] for k in run),
        "sites": {
            label: {
                "attention": list(x.attention),
                "mlp": list(x.mlp),
                "extra": [list(e) for e in x.extra],
                "left_out": list(x.left_out),
            }
            for label, x in kind_sites.items()
        },
    }
    if one["phase"] == "decode":
        s["kv_caches"] = [k["kv_cache"] for k in run]
    if any(k["kind"].startswith("moe") for k in run):
        s["routing"] = policy
    return cast(ForwardSpec, s)  # built in plan.json's key order, which a ForwardSpec literal cannot keep


@dataclass(frozen=True, kw_only=True)
class Forward(layer.Slice):
    """A forward across ranks as its spec (plan.json's) holds it, read once: what the rank program, the
    capture and the roll-up ask of it."""

    world: int
    layers_run: int
    layer_kinds: tuple[str, ...]  # each layer run's kind, in order
    sites: dict[str, Sites]  # per layer kind
    kv_caches: tuple[tuple[tuple[int, ...], ...], ...] = ()  # decode: each layer's keys' and values' shapes

    @classmethod
    def of(cls, s: ForwardSpec) -> Forward:
        """The record of a forward's spec."""
        return cls(
            **cls.fields_of(s),
            world=s["world"],
            layers_run=s["layers_run"],
            layer_kinds=tuple(s["layer_kinds"]),
            sites={
                kind: Sites(
                    tuple(x["attention"]), tuple(x["mlp"]), tuple((op, n) for op, n in x["extra"]), tuple(x["left_out"])
                )
                for kind, x in s["sites"].items()
            },
            kv_caches=tuple(tuple(tuple(shape) for shape in c) for c in s.get("kv_caches") or []),
        )

    def kept_layers(self) -> list[int]:
        """The model's first `layers_run` layers."""
        return list(range(self.layers_run))

    def caches(self) -> list:
        """Each layer's cache, decoding."""
        return list(self.kv_caches) if self.phase == "decode" else []

    @property
    def hidden_shape(self) -> tuple[int, int, int]:
        """The hidden states a rank's layers take and give: batch x tokens x hidden."""
        return (self.batch, self.tokens, self.hidden)

    @property
    def hidden_bytes(self) -> int:
        """The hidden states of every token at the case's dtype: what a reduction moves."""
        return self.batch * self.tokens * self.hidden * DTYPE_BYTES[self.dtype]

    def issued(self) -> list[tuple[str, int, int]]:
        """(op, bytes, calls) of every collective one forward issues, in the order of their first call."""
        size = collective.spec("all_reduce", self.hidden_bytes, self.world, self.dtype)["bytes"]
        calls: dict[tuple[str, int], int] = {}
        for kind in self.layer_kinds:
            at = self.sites[kind]
            for key in [(op, size) for op in (*at.attention, *at.mlp)] + list(at.extra):
                calls[key] = calls.get(key, 0) + 1
        return [(op, nbytes, n) for (op, nbytes), n in calls.items()]


def workload_id(f: Forward) -> str:
    """fwd-<model>-<phase>-b<batch>-s<seq>-<layout>-l<layers run>[-<routing>]-<dtype>."""
    policy = f"-{routing.label(f.routing)}" if f.routing else ""
    return f"fwd-{f.model}-{f.phase}-b{f.batch}-s{f.seq}-{f.layout}-l{f.layers_run}{policy}-{f.dtype}"


def tensor_shapes(f: Forward) -> dict[str, tuple[int, ...]]:
    """One rank's hidden states in and out."""
    shape = f.hidden_shape
    return {"hidden_states": shape, "out0": shape}


def input_names(f: Forward) -> list[str]:
    """The hidden states."""
    return ["hidden_states"]


def rank_buffer_bytes(f: Forward) -> int:
    """What one rank holds beside its process: its layers' weights and KV cache, and the hidden states (in,
    out and two reductions' buffers)."""
    cache = sum(math.prod(shape) for shapes in f.kv_caches for shape in shapes)
    return (f.params + cache) * DTYPE_BYTES[f.dtype] + 4 * f.hidden_bytes


def build(f: Forward) -> torch.nn.Module:
    """The rank's layers with their seeded weights (layer.build over the kept layers), without collectives:
    the program (backends/programs/gloo_forward.py) hooks them where `sites` says."""
    return layer.build(f, materialize=True)


RECORD = Forward  # what the package's functions hand this module's (workloads/__init__.py)
