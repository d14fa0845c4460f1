"""The GEMMs a real model runs, found when the run is planned (suites.model), in a child process (torch and
transformers stay out of the planner). The model is built from a Hugging Face `transformers` config read
from a local file (nothing is downloaded) or from a user's function returning the module, under PyTorch's
fake tensors (no weights, no memory: an 8B model traces in seconds), and run once per (phase, batch, seq):

  prefill  input_ids [batch, seq], the cache filled; the LM head on the last position only
           (`logits_to_keep=1`, as generation runs it)
  decode   one new token per sequence against a KV cache of `seq` tokens (the prefill's cache)

Every aten mm / addmm (a Linear) and bmm / baddbmm (attention in eager mode: its two batched GEMMs,
scores and values) is recorded with the innermost module that ran it; a bmm of batch B counts as B GEMMs of
its (M, K, N). Layer numbers are folded (`model.layers.*.mlp.down_proj`) and identical GEMMs counted.

A mixture-of-experts layer's experts (transformers' fused experts modules: a `down_proj` weight of shape
[experts, ., .] beside `gate_up_proj` or `gate_proj` and `up_proj`) pick their tokens from the router's
output, which fake tensors do not have: their forward is replaced while tracing by one that records each
expert's GEMMs with the tokens a stated routing policy gives it (workloads/routing.py) and returns zeros
of the right shape. The router, shared experts and dense layers are ordinary Linears, traced as they run.
The model is built in the case's dtype.

    python -m neuronsweep.workloads.model_probe < request.json > answer.json
"""

from __future__ import annotations

import inspect
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronsweep.errors import UserError
from neuronsweep.workloads import routing as routing_policy
from neuronsweep.workloads.dtypes import TORCH_DTYPES
from neuronsweep.workloads.probed import LayerKind, ProbedGemm, Traced
from neuronsweep.workloads.user_code import answer_stdin, load

HFModule = Any  # a transformers model or one of its modules: its attributes are its family's (mypy skips transformers)


GEMM_OPS = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2)}
LAYER = re.compile(r"\.(\d+)(?=\.|$)")


def build_model(entry: dict) -> HFModule:
    """The model under fake tensors, in the entry's first dtype, attention in eager mode (its GEMMs visible
    as bmm)."""
    import torch

    dtype = getattr(torch, TORCH_DTYPES[entry.get("dtype", "fp32")])

    if entry.get("hf_config"):
        try:
            from transformers import AutoConfig, AutoModelForCausalLM
        except ImportError:
            raise UserError(
                f"{entry['where']}: hf_config needs the transformers package; "
                'install it with pip install -e ".[models]".'
            ) from None
        path = Path(entry["hf_config"])
        if not path.is_file():
            raise UserError(f"{entry['where']}: no such file {path}; give a config.json relative to the config file.")
        try:
            fields = json.loads(path.read_text()) | (entry.get("rank_config") or {})  # one rank's shard
            config = AutoConfig.for_model(**fields)
        except (ValueError, KeyError) as exc:
            raise UserError(
                f"{entry['where']}: {path} is not a transformers config ({exc}); check model_type."
            ) from None
        config._attn_implementation = "eager"
        return AutoModelForCausalLM.from_config(config, dtype=dtype)
    return load(entry["module"])().to(dtype)


def _gemm(func: Any, args: tuple) -> tuple[int, tuple[int, int, int]] | None:
    """(how many, (M, K, N)) of an aten GEMM call, or None for any other op."""
    name = func.overloadpacket.__name__
    if name not in GEMM_OPS:
        return None
    a, b = (args[i] for i in GEMM_OPS[name])
    if name in ("bmm", "baddbmm"):
        return int(a.shape[0]), (int(a.shape[1]), int(a.shape[2]), int(b.shape[2]))
    return 1, (int(a.shape[0]), int(a.shape[1]), int(b.shape[1]))


def experts_modules(model: HFModule) -> dict:
    """name -> module of every fused experts module (a 3-D `down_proj` weight: [experts, ., .])."""
    return {
        name: module
        for name, module in model.named_modules()
        if getattr(getattr(module, "down_proj", None), "ndim", 0) == 3
    }


def _expert_gemms(module: HFModule, hidden: int, load: list[int]) -> list[tuple[str, tuple[int, int, int], int]]:
    """(which, (M, K, N), how many) of one call of an experts module whose experts get `load` tokens: each
    3-D weight's [experts, a, b] read as the GEMM from `hidden` (gate_up, gate, up: K is the hidden size)
    or back to it (down: N is), whichever way round the family stores it."""
    out = []
    for name, weight in module.named_parameters(recurse=False):
        if weight.ndim != 3 or not name.endswith("_proj"):
            continue
        a, b = int(weight.shape[1]), int(weight.shape[2])
        other = a if b == hidden else b
        k, n = (other, hidden) if name == "down_proj" else (hidden, other)
        for tokens, experts in sorted(Counter(load).items(), reverse=True):
            if tokens:
                out.append((f"{name.removesuffix('_proj')}.t{tokens}", (tokens, k, n), experts))
    return out


@dataclass(frozen=True)
class RankRouting:
    """How a rank's experts get their tokens: the routing policy, the EP degree (the rank's share of the
    experts), the model's top_k where the rank's router picks fewer, and the replicas whose tokens reach
    them (expert parallelism across data-parallel replicas)."""

    policy: routing_policy.Policy = "balanced"  # balanced, {zipf: s} or the counts read
    expert_ep: int = 1
    model_top_k: int | None = None
    replicas: int = 1

    @classmethod
    def of(cls, entry: dict) -> RankRouting:
        """From a probe request's entry (the planner's keys)."""
        policy, ep = entry.get("routing", "balanced"), entry.get("expert_ep", 1)
        return cls(policy, ep, entry.get("top_k"), entry.get("expert_tokens", 1))


def trace(
    model: HFModule, batch: int, seq: int, phase: str, routed: RankRouting, where: str = "suites.model"
) -> Traced:
    """One forward of `phase`: its GEMMs by module and shape, and each MoE layer kind's load as `routed`
    says (the rank's share of every token its experts get)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    stack: list[str] = []
    seen: Counter = Counter()
    layers_at = decoder_layers(model)[0] + "."
    per_layer: dict[int, Counter] = {}  # each decoder layer's own GEMMs, by module relative to the layer
    head, loads = Counter[tuple](), dict[str, dict]()  # the head's GEMMs; each MoE layer kind's load
    calls: Counter = Counter()  # GEMMs of each kind so far in the innermost module's current call

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
            found = _gemm(func, args)
            if found is not None and recording[0]:
                module = LAYER.sub(".*", stack[-1]) if stack else "(top level)"
                op = "linear" if func.overloadpacket.__name__ in ("mm", "addmm") else "bmm"
                calls[len(stack), module, op] += 1
                seen[module, f"{op}{calls[len(stack), module, op]}", found[1]] += found[0]
                _in_layer(stack[-1] if stack else "", f"{op}{calls[len(stack), module, op]}", found)
            return func(*args, **(kwargs or {}))

    def _in_layer(name: str, which: str, found: tuple) -> None:
        if not recording[0]:
            return
        if name.startswith(layers_at):
            index, _, inside = name.removeprefix(layers_at).partition(".")
            per_layer.setdefault(int(index), Counter())[inside or "(layer)", which, found[1]] += found[0]
        else:  # outside the decoder layers: the head's (the LM head)
            head[name or "(top level)", which, found[1]] += found[0]

    def experts_forward(name: str, module: HFModule) -> Callable[..., Any]:
        def forward(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
            index = args[0] if args else next((v for k, v in kwargs.items() if "ind" in k), None)
            hidden, experts = int(hidden_states.shape[-1]), int(module.down_proj.shape[0])
            if index is not None:  # (tokens, hidden), the router's top-k (tokens, k): the model's k if it clamped
                tokens, top_k = hidden_states.numel() // hidden, routed.model_top_k or int(index.shape[-1])
            else:  # every expert's copy of the tokens, routed by scores (Llama 4): (experts x tokens, hidden)
                tokens, top_k = hidden_states.numel() // hidden // experts, int(model.config.num_experts_per_tok)
            tokens *= routed.replicas  # expert parallelism across DP: every replica's tokens reach the experts
            load = routing_policy.rank_share(routed.policy, tokens, top_k, experts, routed.expert_ep, where)
            if recording[0]:
                folded = LAYER.sub(".*", name)
                for which, shape, count in _expert_gemms(module, hidden, load):
                    seen[folded, which, shape] += count
                    _in_layer(name, which, (count, shape))
                loads[folded] = {"experts": experts, "top_k": top_k, "tokens": tokens, "load": load}
            return torch.zeros_like(hidden_states)

        return forward

    handles, replaced = _module_hooks(model, stack, calls), experts_modules(model)
    for name, module in replaced.items():
        module.forward = experts_forward(name, module)
    recording = [phase == "prefill"]
    try:
        cache_shapes = _forward(model, batch, seq, phase, recording, Recorder(), stack, where)
    finally:
        for h in handles:
            h.remove()
        for module in replaced.values():
            del module.forward  # the class's own again
    return {
        "gemms": _listed(seen),
        "experts": loads,
        "layers": layer_kinds(model, per_layer, cache_shapes),
        "head": {"params": head_params(model), "gemms": _listed(head)},
        "hidden": int(model.config.hidden_size),
        "vocab": int(model.config.vocab_size),
    }


def _module_hooks(model: Any, stack: list[str], calls: Counter) -> list:
    """Hooks on every module that keep `stack` the path of modules the forward is in, and number each call's
    GEMMs from 1 again (`calls`); their handles, to remove."""

    def enter(name: str) -> Any:
        def hook(module: Any, inputs: Any) -> None:
            stack.append(name)
            for op in ("linear", "bmm"):
                calls[len(stack), LAYER.sub(".*", name), op] = 0

        return hook

    def leave(module: Any, inputs: Any, output: Any) -> None:
        stack.pop()

    handles = []
    for name, module in model.named_modules():
        handles += [module.register_forward_pre_hook(enter(name)), module.register_forward_hook(leave)]
    return handles


def _forward(
    model: Any, batch: int, seq: int, phase: str, recording: list[bool], mode: Any, stack: list[str], where: str
) -> dict[int, list]:
    """One forward of `phase` under the dispatch `mode` that records GEMMs: a prefill of `seq` tokens, or a
    decode of one token after it (recording turned on for the decode alone); the KV cache shapes each layer of
    a decode attends to. A failure inside the model is one sentence naming the module it was in (`stack`)."""
    import torch

    params = inspect.signature(model.forward).parameters
    extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    cache_key = "cache" if "cache" in params else "past_key_values"
    cache_shapes: dict[int, list] = {}
    try:
        with torch.no_grad(), mode:
            out = model(input_ids=torch.zeros((batch, seq), dtype=torch.long), use_cache=True, **extra)
            if phase == "decode":
                cache = getattr(out, "cache", None) or out.past_key_values
                recording[0] = True
                cache_shapes = _cache_shapes(cache)  # the KV cache of `seq` tokens each layer attends to
                model(
                    input_ids=torch.zeros((batch, 1), dtype=torch.long), use_cache=True, **{cache_key: cache}, **extra
                )
    except UserError:
        raise
    except Exception as exc:
        inside = LAYER.sub(".*", stack[-1]) if stack else "the model's forward"
        raise UserError(
            f"{where}: tracing the model failed in {inside} with {type(exc).__name__}: {str(exc)[:200]}; if that "
            "is mixture-of-experts code neuron-sweep does not recognize (a fused experts module has a 3-D "
            "down_proj), give a module: function of yours returning the model with experts it can trace "
            "(docs/your-code.md)."
        ) from None
    return cache_shapes


def _listed(found: Counter) -> list[ProbedGemm]:
    return [
        {"module": module, "gemm": which, "m": m, "k": k, "n": n, "count": count}
        for (module, which, (m, k, n)), count in sorted(found.items())
    ]


def head_params(model: HFModule) -> int:
    """Parameters of the embedding, the final norm and the LM head (a tied weight once)."""
    name, _ = decoder_layers(model)
    inner = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    parts = [getattr(inner, "embed_tokens", None), getattr(inner, "norm", None), model.get_output_embeddings()]
    unique = {id(p): p for part in parts if part is not None for p in part.parameters()}
    return sum(int(p.numel()) for p in unique.values())


def decoder_layers(model: HFModule) -> tuple[str, list]:
    """(name, modules) of the model's decoder layers: the ModuleList of config.num_hidden_layers
    entries (model.layers in every family transformers ships), or ("", []) when it has none."""
    import torch

    wanted = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.endswith("layers") and len(module) == wanted:
            return name, list(module)
    return "", []


def _cache_shapes(cache: object) -> dict[int, list]:
    """Each layer's cached keys' and values' shapes (transformers' Cache.layers), before the decode step."""
    return {
        i: [list(layer.keys.shape), list(layer.values.shape)]
        for i, layer in enumerate(getattr(cache, "layers", []))
        if getattr(layer, "keys", None) is not None and layer.keys.numel()
    }


def layer_kinds(model: HFModule, per_layer: dict[int, Counter], cache_shapes: dict[int, list]) -> list[LayerKind]:
    """The distinct kinds of decoder layer (dense or MoE, sliding or global attention): layers whose GEMMs
    and attention type are the same are one kind. Each: its first layer's index, how many layers are of
    it and which (`members`), its label, its parameters and its GEMMs in one call (module relative to the layer)."""
    prefix, modules = decoder_layers(model)
    experts = set(experts_modules(model))
    types = getattr(model.config, "layer_types", None) or []
    kinds: dict[tuple, LayerKind] = {}
    for index, found in sorted(per_layer.items()):
        attention = types[index] if index < len(types) else "full_attention"
        signature = (attention, tuple(sorted(found.items())))
        if signature in kinds:
            kinds[signature]["layers"] += 1
            kinds[signature]["members"].append(index)
            continue
        moe = any(f"{prefix}.{index}.{module}" in experts for (module, _, _) in found)
        label = ("moe" if moe else "dense") + ("-sliding" if attention == "sliding_attention" else "")
        kinds[signature] = {
            "index": index,
            "layers": 1,
            "members": [index],  # every layer of this kind, by index
            "kind": label,
            "attention": attention,
            "params": sum(int(p.numel()) for p in modules[index].parameters()),
            "kv_cache": cache_shapes.get(index),  # decode: [keys' shape, values' shape]
            "gemms": _listed(found),
        }
    return list(kinds.values())


def probe(request: dict) -> dict:
    """In a child process with torch and transformers: build each model on fake tensors, run it once and return the
    GEMMs (shape, count, where) it ran, or one sentence of what failed."""
    import warnings

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    warnings.filterwarnings("ignore")  # transformers' deprecation notes are not the user's business here
    answers = []
    for entry in request["entries"]:
        try:
            with FakeTensorMode(allow_non_fake_inputs=True):
                model = build_model(entry).eval()
                answers.append(
                    [
                        {
                            "phase": phase,
                            "batch": b,
                            "seq": s,
                            **trace(model, b, s, phase, RankRouting.of(entry), entry["where"]),
                        }
                        for phase in entry["phases"]
                        for b in entry["batch"]
                        for s in entry["seq"]
                    ]
                )
        except UserError as exc:
            return {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the model's code: one sentence for the planner
            return {"error": f"{entry['where']}: tracing the model failed with {type(exc).__name__}: {exc}"[:500]}
    return {"entries": answers, "torch": torch.__version__}


if __name__ == "__main__":
    raise SystemExit(answer_stdin(probe))
