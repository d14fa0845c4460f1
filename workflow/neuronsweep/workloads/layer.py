"""One decoder layer of a real model, measured whole (suites.model `layers`): what the GEMMs timed alone
cannot say, the share of the layer that is not GEMM (attention's softmax, norms, activations, RoPE,
routing) and whether a GEMM runs at the same speed inside the layer as alone.

A model has few kinds of layer (dense or mixture-of-experts, sliding or global attention: the plan's
probe groups layers whose GEMMs and attention type are the same, model_probe.layer_kinds); each kind is
one case per phase, batch, seq and dtype, and the model's `head` (embedding, final norm and LM head) is one
more. The module is the model's own: built from its config, every decoder layer but the kind's first
dropped, the rest of the model's forward kept (masks, rotary embedding), so the layer runs exactly as the
model runs it. Only that layer is ever materialized, with seeded random weights (transformers' own
initialization), in the case's dtype. Decode attends a KV cache of `seq` tokens, as the GEMM scenarios
assume; a mixture-of-experts layer's router runs, but its experts get the tokens of the suite's routing
policy (a pre-hook rewrites the router's choice: workloads/routing.py `assignment`), so the layer and the
GEMMs timed alone assume the same load.

torch.export traces the module on fake tensors (no weights, no memory: a 30B model's layer exports in
seconds) and the .pt2 keeps the program without weights; `load_program` gives it its seeded weights
again, identical to the ones `torch_module` makes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from neuronsweep.config.suites import ModelEntry
from neuronsweep.errors import UserError
from neuronsweep.store.specs import LayerSpec
from neuronsweep.workloads import custom
from neuronsweep.workloads import routing as routing_policy
from neuronsweep.workloads.descriptor import Workload
from neuronsweep.workloads.dtypes import DTYPE_BYTES, TORCH_DTYPES
from neuronsweep.workloads.model_probe import HFModule, build_model, decoder_layers, experts_modules
from neuronsweep.workloads.probed import LayerKind, ProbedPass
from neuronsweep.workloads.routing import Policy

DESCRIPTOR = Workload("layer", layer_split=True, real_inputs=True)  # what this kind can do (workloads/descriptor.py)

if TYPE_CHECKING:
    import numpy as np
    import torch


SEED = 0  # the weights' and the decode cache's seed: every process makes the same ones


def spec(
    entry: ModelEntry, source_sha256: str, one: ProbedPass, kind: LayerKind | None, dtype: str, policy: Policy
) -> LayerSpec:
    """A layer kind (`kind`, from the probe) or the head (`kind` None) of `entry`'s model at one phase,
    batch and seq (`one`, the probe's pass), in `dtype`; `policy`: the routing policy as read
    (routing.read_counts' counts in place of a file)."""
    named: Mapping[str, Any] = entry  # the entry's optional keys, read by name in this order
    s = {
        "kind": "layer",
        "model": entry["name"],
        **{k: named[k] for k in ("hf_config", "module") if k in named},
        **{k: named[k] for k in ("rank_config", "expert_ep", "layout", "top_k", "expert_tokens") if named.get(k)},
        "source_sha256": source_sha256,
        "part": "layer" if kind else "head",
        "phase": one["phase"],
        "batch": one["batch"],
        "seq": one["seq"],
        "dtype": dtype,
        "hidden": one["hidden"],
        "vocab": one["vocab"],
    }
    if kind:
        s |= {
            "index": kind["index"],
            "layer_kind": kind["kind"],
            "layers": kind["layers"],
            "params": kind["params"],
            "kv_cache": kind["kv_cache"] if one["phase"] == "decode" else None,
            "gemms": kind["gemms"],
        }
        if kind["kind"].startswith("moe"):
            s["routing"] = policy
    else:
        s |= {"params": one["head"]["params"], "gemms": one["head"]["gemms"]}
    return cast(LayerSpec, s)  # built in plan.json's key order, which a LayerSpec literal cannot keep


@dataclass(frozen=True, kw_only=True)
class Slice:
    """Some of a model's layers as a case's spec (plan.json's) names them, read once: the model and where its
    config comes from (a config.json, with the rank's shard of its fields; or a module), the phase, batch,
    seq and dtype they run, the rank's weights, and what their experts are fed (the routing policy; under
    expert parallelism the rank's share, the model's top-k if clamped, the replicas' tokens gathered). A
    layer kind or the head (Part), or a forward's first layers across ranks (forward.Forward)."""

    model: str
    part: str  # layer, head or forward
    phase: str
    batch: int
    seq: int
    dtype: str
    hidden: int
    params: int  # the rank's weights over what the slice runs
    hf_config: str | None = None
    module: str | None = None
    rank_config: Mapping[str, Any] | None = None  # the rank's shard of the config's fields
    layout: str | None = None  # tp8, tp8-ep4
    expert_ep: int = 1
    top_k: int | None = None
    expert_tokens: int = 1
    routing: Policy | None = None

    @classmethod
    def fields_of(cls, s: Mapping[str, Any]) -> dict[str, Any]:
        """What every slice's spec holds, by field name (a subclass's `of` adds its own)."""
        given = ("hf_config", "module", "rank_config", "layout", "expert_ep", "top_k", "expert_tokens", "routing")
        common = ("model", "part", "phase", "batch", "seq", "dtype", "hidden", "params")
        return {k: s[k] for k in common} | {k: s[k] for k in given if s.get(k)}

    @property
    def tokens(self) -> int:
        """The tokens it takes in one call per sequence: the prompt, or one decoded."""
        return self.seq if self.phase == "prefill" else 1

    def kept_layers(self) -> list[int]:
        """The decoder layers it runs, by index."""
        raise NotImplementedError

    def caches(self) -> list:
        """Decoding: each kept layer's KV cache shapes (keys', values'); none for a prefill."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Part(Slice):
    """A layer case's spec read once (plan.json's): a kind of decoder layer (its first layer's index, its
    label, how many layers are of it, its traced GEMMs, its KV cache decoding) or the model's head."""

    vocab: int
    layer_kind: str = "head"  # the probe's label (dense, moe, dense-sliding), head for the head
    index: int | None = None  # the kind's first layer; None for the head
    layers: int = 1
    kv_cache: tuple[tuple[int, ...], ...] | None = None  # decode: keys' and values' shapes
    gemms: tuple[Mapping[str, Any], ...] = ()  # the probe's: gemm, m, k, n, count

    @classmethod
    def of(cls, s: LayerSpec) -> Part:
        """The record of a layer's (or the head's) spec."""
        named: Mapping[str, Any] = s  # LayerSpec's keys, read by name
        own = {k: named[k] for k in ("vocab", "layer_kind", "index", "layers") if k in named}
        shapes = s.get("kv_cache")
        cache = tuple(tuple(shape) for shape in shapes) if shapes else None
        return cls(**cls.fields_of(s), **own, kv_cache=cache, gemms=tuple(s["gemms"]))

    def kept_layers(self) -> list[int]:
        """The kind's first layer (the head keeps none of them)."""
        return [self.index] if self.index is not None else []

    def caches(self) -> list:
        """Its one cache, decoding."""
        return [self.kv_cache] if self.phase == "decode" and self.kv_cache else []


RECORD = Part  # what the package's functions hand this module's (workloads/__init__.py)


def part_label(p: Part) -> str:
    """l<index>-<kind> (l3-moe) for a layer, head for the head."""
    return f"l{p.index}-{p.layer_kind}" if p.part == "layer" else "head"


def workload_id(p: Part) -> str:
    """layer-<model>-<part>-<phase>-b<batch>-s<seq>[-<layout>][-<routing>]-<dtype> (layout: tp8, tp8-ep4)."""
    policy = f"-{routing_policy.label(p.routing)}" if p.routing else ""
    layout = f"-{p.layout}" if p.layout else ""
    return f"layer-{p.model}-{part_label(p)}-{p.phase}-b{p.batch}-s{p.seq}{layout}{policy}-{p.dtype}"


def tensor_shapes(p: Part) -> dict[str, tuple[int, ...]]:
    """The hidden states in; the layer's hidden states out, or the head's logits (last position) and the
    embeddings of the tokens."""
    tokens = (p.batch, p.tokens, p.hidden)
    if p.part == "head":
        return {"hidden_states": tokens, "logits": (p.batch, 1, p.vocab), "embeds": tokens}
    return {"hidden_states": tokens, "out0": tokens}


def intermediate_shapes(p: Part) -> dict[str, tuple[int, ...]]:
    """What the part holds beside its inputs and outputs: its weights and, decoding, its KV cache."""
    out: dict[str, tuple[int, ...]] = {"weights": (p.params,)}
    for i, shape in enumerate(p.kv_cache or []):
        out[f"kv_cache{i}"] = shape
    return out


def input_names(p: Part) -> list[str]:
    """The hidden states."""
    return ["hidden_states"]


def flops(p: Part) -> int:
    """The GEMMs' FLOPs (2·m·k·n each, as traced); the elementwise ops are not counted."""
    return sum(2 * g["m"] * g["k"] * g["n"] * g["count"] for g in p.gemms)


def counted_how(p: Part) -> tuple[str, str]:
    """(where the FLOPs came from, where the bytes came from), for metrics.json's notes."""
    return (
        "the part's GEMMs as traced under fake tensors, 2·m·k·n each; elementwise ops not counted",
        "every weight read once, the hidden states read and written once, at the case's dtype",
    )


def min_bytes(p: Part, dtype_bytes: int) -> int:
    """Every weight once and the hidden states in and out (a decoding layer's cache read too)."""
    cache = sum(math.prod(shape) for shape in p.kv_cache or [])
    return (p.params + cache + sum(math.prod(x) for x in tensor_shapes(p).values())) * dtype_bytes


def gemms(p: Part) -> list[tuple[int, int, int]]:
    """Each GEMM of one call, as often as it runs (the tile model's input)."""
    return [(g["m"], g["k"], g["n"]) for g in p.gemms for _ in range(g["count"])]


NotComparable = custom.NotComparable
output_array = custom.output_array  # the part's output (the hidden states; the head's logits and embeddings) flat


def reference(p: Part, a: Mapping[str, np.ndarray]) -> np.ndarray:
    """The part with the same seeded weights in float64 on the CPU, on the case's hidden states: what every
    backend's output of the part is checked against, as a user's function is (its experts handed the same
    tokens: the routing hook does not depend on the dtype; the experts looped in eager mode, since the
    grouped GEMM has no float64 kernel)."""
    import torch

    part = build(p, materialize=True).to(torch.float64)
    use_experts(part, "eager")
    with torch.inference_mode():
        return output_array(part(torch.as_tensor(a["hidden_states"], dtype=torch.float64)))


def weight_bytes(p: Part) -> int:
    """The part's weights at its dtype: what materializing it costs."""
    return p.params * DTYPE_BYTES[p.dtype]


def _model(p: Slice) -> HFModule:
    """The whole model as its config builds it, on the current device (meta or fake: no memory)."""
    given = {"hf_config": p.hf_config, "module": p.module, "rank_config": p.rank_config}
    return build_model({k: v for k, v in given.items() if v is not None} | {"dtype": p.dtype, "where": p.model})


class _Routed:
    """A pre-hook that hands the experts the policy's tokens: the router's top-k indices replaced by
    routing.assignment's (the router still runs; its weights are kept)."""

    def __init__(
        self, policy: Policy, torch: ModuleType, ep: int = 1, top_k: int | None = None, replicas: int = 1
    ) -> None:
        self.policy, self.torch, self.ep, self.top_k = policy, torch, ep, top_k  # top_k: the model's, if clamped
        self.replicas = replicas  # expert parallelism across DP: every replica's tokens reach the experts
        self.rows = 0

    def __call__(self, module: Any, args: tuple, kwargs: dict) -> Any:
        hidden, *rest = args
        if not rest:  # (hidden, index, weights) is the experts' call transformers' MoE families make
            return None
        self.rows = int(hidden.shape[0])
        if self.replicas > 1:  # the other replicas' tokens, gathered: as many again as this one's, each
            hidden = hidden.repeat(self.replicas, 1)
            rest = [r.repeat(self.replicas, 1) if hasattr(r, "shape") and r.ndim == 2 else r for r in rest]
        index = rest[0]
        tokens, top_k = int(index.shape[0]), self.top_k or int(index.shape[-1])
        experts = int(module.down_proj.shape[0])
        load = routing_policy.rank_share(self.policy, tokens, top_k, experts, self.ep)
        if self.ep > 1:  # the rank's experts take its share of the slots: top_k' a token, the rest padded on
            top_k = max(1, -(-sum(load) // tokens))
            load = _padded(load, tokens * top_k, tokens)
        chosen = self.torch.tensor(
            routing_policy.assignment(load, tokens, top_k), dtype=index.dtype, device=index.device
        )
        weights = [r[..., :top_k] if hasattr(r, "shape") and r.shape == index.shape else r for r in rest[1:]]
        return (hidden, chosen, *weights), kwargs

    def own_rows(self, module: Any, args: tuple, output: Any) -> Any:
        """The experts' output for this replica's tokens (the reduce-scatter back to it)."""
        return output[: self.rows]


def _padded(load: list[int], slots: int, cap: int) -> list[int]:
    """`load` with the slots it lacks of `slots` given to its least loaded experts (none above `cap`): a
    rank's experts under EP must fill whole rows of top_k' slots (the padding is at most tokens - 1)."""
    out, missing = list(load), slots - sum(load)
    while missing > 0:
        i = min((i for i in range(len(out)) if out[i] < cap), key=lambda i: out[i])
        out[i] += 1
        missing -= 1
    return sorted(out, reverse=True)


def build(s: Slice, materialize: bool) -> torch.nn.Module:
    """The part as an nn.Module whose forward takes the hidden states. `materialize`: real seeded weights
    (else the current fake or meta mode's, for tracing)."""
    import torch

    if materialize:
        with torch.device("meta"):
            full = _model(s)
    else:
        full = _model(s)
    name, layers = decoder_layers(full)
    if not layers:
        raise UserError(
            f"suites.model ({s.model}): the model has no decoder layers neuron-sweep recognizes (a ModuleList "
            "named layers of num_hidden_layers entries); set layers: false for it."
        )
    inner = full.get_submodule(name.rpartition(".")[0]) if "." in name else full
    part = _head_part(s, full, inner) if s.part == "head" else _layer_part(s, full, inner, layers)
    if materialize:
        part.to_empty(device="cpu")
        torch.manual_seed(SEED)
        full.initialize_weights() if hasattr(full, "initialize_weights") else full.init_weights()
        if s.part == "head" and hasattr(full, "tie_weights"):  # to_empty untied a tied LM head: tied again,
            full.tie_weights()  # as the model (and the program traced from it) has it; a layer holds neither
        _fill_buffers(part, torch)
    if s.routing:
        for module in experts_modules(part).values():
            routed = _Routed(s.routing, torch, s.expert_ep, s.top_k, s.expert_tokens)
            module.register_forward_pre_hook(routed, with_kwargs=True)
            if routed.replicas > 1:
                module.register_forward_hook(routed.own_rows)
    return part.eval()


def _fill_buffers(part: HFModule, torch: ModuleType) -> None:
    """After to_empty: decode's cached keys and values seeded random, as the weights; the head's token ids 0."""
    for name, buffer in part.named_buffers(recurse=False):
        if name.startswith(("past_keys", "past_values")):
            buffer.normal_(generator=torch.Generator().manual_seed(SEED))
    if hasattr(part, "token_ids"):
        part.token_ids.zero_()


def _cache_names(i: int) -> tuple[str, str]:
    """The buffers of the i-th kept layer's cache (the first's names are the ones a layer's program has)."""
    return ("past_keys", "past_values") if i == 0 else (f"past_keys{i}", f"past_values{i}")


def _layer_part(s: Slice, full: HFModule, inner: HFModule, layers: list) -> torch.nn.Module:
    """The model's forward over its kept layers (kept_layers): inputs_embeds in, the last one's hidden states
    out (the final norm is the head's); their cache slots and attention types become the model's only ones."""
    import torch
    from transformers.cache_utils import DynamicCache

    kept = s.kept_layers()
    for slot, index in enumerate(kept):
        for module in layers[index].modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = slot
    config = full.config
    types = getattr(config, "layer_types", None)
    inner.layers = torch.nn.ModuleList([layers[i] for i in kept])
    for attr in ("embed_tokens", "embed_positions"):
        if hasattr(inner, attr):
            setattr(inner, attr, None)
    inner.norm = torch.nn.Identity()
    config.num_hidden_layers = len(kept)
    if types:
        config.layer_types = [types[i] for i in kept]
    caches = s.caches()

    class LayerPart(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = inner
            dtype = getattr(torch, TORCH_DTYPES[s.dtype])
            for i, shapes in enumerate(c for c in caches if c):
                for name, shape in zip(_cache_names(i), shapes):
                    self.register_buffer(name, torch.empty(shape, dtype=dtype))

        def forward(self, hidden_states: torch.Tensor) -> Any:
            # a prefill writes its KV cache, as generation's does; without a cache transformers also looks
            # for packed sequences in the positions with a data-dependent `.all()`, which splits a
            # torch-xla graph in two
            cache = DynamicCache(config=config)
            if not hasattr(self, "past_keys"):
                return self.model(inputs_embeds=hidden_states, cache=cache, use_cache=True).last_hidden_state
            for i in range(len(self.model.layers)):
                keys, values = _cache_names(i)
                cache.update(self.get_buffer(keys), self.get_buffer(values), i)
            past = self.get_buffer("past_keys").shape[-2]
            position_ids = torch.arange(past, past + hidden_states.shape[1], device=hidden_states.device)[None]
            out = self.model(inputs_embeds=hidden_states, cache=cache, position_ids=position_ids, use_cache=True)
            return out.last_hidden_state

    return LayerPart()


def _head_part(s: Slice, full: HFModule, inner: HFModule) -> torch.nn.Module:
    """The model's embedding of the phase's tokens, and its final norm and LM head on the last position
    (prefill keeps one position's logits, as generation does)."""
    import torch

    embed, norm, head = inner.embed_tokens, inner.norm, full.get_output_embeddings()

    class HeadPart(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.norm, self.lm_head = embed, norm, head
            batch, rows = s.batch, s.tokens
            self.register_buffer("token_ids", torch.zeros((batch, rows), dtype=torch.long), persistent=False)

        def forward(self, hidden_states: torch.Tensor) -> Any:
            return self.lm_head(self.norm(hidden_states[:, -1:, :])), self.embed(self.token_ids)

    return HeadPart()


def torch_module(p: Part) -> torch.nn.Module:
    """The part with its seeded weights (what xla and TorchNeuron run; cpu exports it without them)."""
    return build(p, materialize=True)


# torch-xla cannot run transformers' grouped expert GEMMs: off the CPU they count tokens per expert with an
# integer histc, which torch-xla hands to its CPU fallback, where histc has no integer kernel. transformers'
# batched_mm gathers each token's expert weights into one bmm of static shapes, as XLA compiles it.
XLA_EXPERTS = "batched_mm"


def gathered_expert_bytes(p: Part) -> int:
    """What batched_mm gathers on top of the weights: each token's copy of its experts' weights, so every
    expert GEMM of m tokens holds m copies of its k x n weight (the traced GEMMs' `.t<tokens>` entries)."""
    elements = sum(g["m"] * g["k"] * g["n"] * g["count"] for g in p.gemms if ".t" in g["gemm"])
    return elements * DTYPE_BYTES[p.dtype]


def use_experts(part: HFModule, implementation: str) -> str | None:
    """Run the part's experts with transformers' `implementation` (config._experts_implementation, read at
    every forward); returns it, or None for a part without experts."""
    configs = {id(c): c for m in experts_modules(part).values() if (c := getattr(m, "config", None)) is not None}
    for config in configs.values():
        config._experts_implementation = implementation
    return implementation if configs else None


def export_program(p: Part, example: tuple) -> torch.export.ExportedProgram:
    """torch.export of the part traced on fake tensors, its weights left out (shapes only): the program
    the cpu backend saves, whatever the model's size."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        module = build(p, materialize=False)
        example = tuple(torch.empty(x.shape, dtype=x.dtype) for x in example)
    program = torch.export.export(module, example)
    for name, value in list(program.state_dict.items()):
        empty = torch.empty(value.shape, dtype=value.dtype, device="meta")
        program._state_dict[name] = torch.nn.Parameter(empty, False) if isinstance(value, torch.nn.Parameter) else empty
    for name, value in list(program.constants.items()):
        if isinstance(value, FakeTensor):  # a non-persistent buffer (rotary inv_freq): its value comes back on load
            program._constants[name] = torch.zeros(value.shape, dtype=value.dtype)
    program._example_inputs = None
    return program


def load_program(path: str | Path, p: Part) -> torch.nn.Module:
    """The saved program with the part's seeded weights (torch_module's, by name), as a callable module."""
    import torch
    import transformers.integrations.moe  # noqa: F401 - registers the grouped-GEMM op the program calls

    program = torch.export.load(str(path))
    real = build(p, materialize=True)
    named = dict(real.named_parameters(remove_duplicate=False)) | dict(real.named_buffers(remove_duplicate=False))
    for name, value in list(program.state_dict.items()):
        program._state_dict[name] = (
            torch.nn.Parameter(named[name], False) if isinstance(value, torch.nn.Parameter) else named[name]
        )
    for name in list(program.constants):
        if name in named:
            program._constants[name] = named[name]
    return program.module()
