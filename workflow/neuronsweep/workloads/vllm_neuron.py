"""A model as vLLM Neuron serves it (trn2 and trn3 since SDK 2.34, on TorchNeuron): the graphs it compiles,
one rank's shard of each and the collectives each step issues.

The rules are the plugin's design docs (aws-neuron/aws-neuron-sdk `vllm-neuron/docs/`, summarised with their
sources): `neuron-scheduler.md` and `additional-config.md` for the
buckets, `decode-context-length-bucketing.md` for decode's context, `tensor_parallelism.md` and
`expert_parallelism.md` for the sharding and collectives, `data_parallelism.md` for replicas. In short:
- a step is one prefill chunk of exactly one request (batch 1, padded to a `num_batched_tokens_buckets`
  size) or one decode batch (padded to a `num_seqs_buckets` size, attending over the whole block table or a
  `decode_context_length_buckets` size); never both;
- prefill runs sequence parallel: the vocabulary-sharded embedding reduce-scatters, each layer all-gathers
  before attention and before the MLP (an MoE layer also its router's affinities) and reduce-scatters after
  each, the final norm's output is all-gathered; decode all-reduces after the embedding, the attention
  block and the MLP;
- KV heads are split over tp, or replicated up to tp (one a rank) where tp exceeds them; experts are split
  by their intermediate under TP, placed whole under `--enable-expert-parallel` (ep_degree = tp), both when
  ep_degree < tp; the router is replicated; the LM head is vocabulary-parallel;
- decode fuses QKV, RoPE, attention and o into one kernel a layer, and the MLP (or the MoE's norm, router
  and experts) into another: there a GEMM's time alone is not what the device runs, the layer measured
  whole is.
- replicas (`--data-parallel-size`) run alone, except under expert parallelism, whose EP degree is then
  tp x dp: every replica's tokens reach a rank's experts, through an all-gather over the DP group and a
  reduce-scatter back in each MoE layer.
What the docs leave open is refused in one sentence rather than guessed (attention and component DP, DCP,
speculative decoding), or assumed and said (sampling on the device).
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
import shlex
from dataclasses import dataclass, field
from typing import Any

from neuronsweep.config.suites import ModelEntry
from neuronsweep.errors import UserError
from neuronsweep.workloads.dtypes import DTYPE_BYTES
from neuronsweep.workloads.probed import LayerCount
from neuronsweep.workloads.sharding import (
    VLLM_NEURON,
    Collective,
    Deployed,
    Grid,
    Layout,
    RankConfig,
    Sharding,
    experts,
    experts_key,
    hidden_bytes,
    merged,
    model_dims,
    split,
    vocabulary,
)

# the `vllm serve` flags that shape the graphs (as keys: underscores), and how each is read
FLAGS: dict[str, type] = {
    "tensor_parallel_size": int,
    "data_parallel_size": int,
    "enable_expert_parallel": bool,
    "max_num_seqs": int,
    "max_model_len": int,
    "max_num_batched_tokens": int,
    "block_size": int,
    "additional_config": dict,
    "enable_prefix_caching": bool,
    "decode_context_parallel_size": int,
    "speculative_config": dict,
    "dtype": str,
    "kv_cache_dtype": str,
}
SHORT = {"tp": "tensor_parallel_size", "dp": "data_parallel_size"}
GRID_KEYS = ("tensor_parallel_size", "data_parallel_size", "max_num_seqs", "enable_expert_parallel")  # lists: a grid
FIRST_TOKEN_BUCKET = 128  # num_batched_tokens_buckets' default: powers of two from 128 (neuron-scheduler.md)
DEFAULT_BATCHED_TOKENS = 2048  # vLLM's with chunked prefill, which prefix caching (on by default) turns on
DEFAULT_BLOCK = 32  # the plugin's block_size (reference-configuration.md)
SEGMENTS = (512, 1024, 2048, 4096, 8192)  # kv_segment_size_buckets' values (reference-configuration.md)
CONTEXT_STEP = 128  # decode context buckets are multiples of the NKI P_MAX (decode-context-length-bucketing.md)
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
NOT_MODELED = {  # additional_config.neuron_config keys whose layouts are not built, with their page
    "attention_dp_size": "attention DP (attention_dp.md)",
    "embedding_dp_size": "component DP (component_dp_sharding.md)",
    "mlp_dp_size": "component DP (component_dp_sharding.md)",
    "lm_head_dp_size": "component DP (component_dp_sharding.md)",
}


@dataclass(frozen=True)
class Serve:
    """A vLLM Neuron deployment as its `vllm serve` flags give it, its buckets resolved."""

    tp: int
    dp: int
    ep: int  # the experts' EP degree: 1 without --enable-expert-parallel
    max_num_seqs: int
    max_model_len: int
    block_size: int
    token_buckets: tuple[int, ...]  # prefill chunk sizes
    seqs_buckets: tuple[int, ...]  # decode batch sizes
    contexts: tuple[int, ...]  # decode context lengths: the context buckets, then the whole block table
    sampling_on_device: bool
    dtype: str | None = None
    kv_bytes: int | None = None  # an fp8 KV cache's byte an element (--kv-cache-dtype fp8); None: the model's dtype
    assumed: tuple[str, ...] = ()
    labels: dict[str, Any] = field(default_factory=dict)


def from_vllm(entry: ModelEntry, where: str) -> Layout:
    """The entry as vLLM Neuron serves it: `vllm:` a `vllm serve` line or its flags as keys, or a grid of
    deployments (a list of them, or keys with lists), each deployment's graphs a case once."""
    found = serves(entry["vllm"], where)
    deployments = []
    for serve in found:
        grids = {"prefill": Grid((1,), serve.token_buckets), "decode": Grid(serve.seqs_buckets, serve.contexts)}
        deployments.append(Deployed(sharding(serve), grids))
    batch = sorted({1, *(b for serve in found for b in serve.seqs_buckets)})
    seq = sorted({s for serve in found for s in (*serve.token_buckets, *serve.contexts)})
    out: ModelEntry = {**entry, "batch": batch, "seq": seq, "vllm_labels": found[0].labels}
    if found[0].dtype:
        out["dtype"] = [found[0].dtype]
    assumed = tuple(dict.fromkeys(a for serve in found for a in serve.assumed))
    return Layout(out, deployments, assumed, dtype_from_file=found[0].dtype is not None)


def sharding(serve: Serve) -> Sharding:
    """A deployment's parallel layout: prefill sequence parallel, the experts over ep_degree of the world."""
    world = serve.tp * serve.dp
    moe = {phase: (max(1, world // serve.ep), serve.ep) for phase in ("prefill", "decode")} if serve.ep > 1 else {}
    return Sharding(
        tp=serve.tp,
        sequence_parallel=serve.tp > 1,
        moe=moe,
        sampling_on_device=serve.sampling_on_device,
        stack=VLLM_NEURON,
        dp=serve.dp,
    )


def serves(raw: str | dict | list, where: str) -> list[Serve]:
    """Every deployment `vllm:` names: one serve line or set of keys, a list of them, or keys whose grid
    values (GRID_KEYS) are lists, every combination one deployment."""
    out = []
    for one in raw if isinstance(raw, list) else [raw]:
        if isinstance(one, str):
            out.append(parse(one, where))
            continue
        grid = {k: one[k] if isinstance(one.get(k), list) else [one[k]] for k in GRID_KEYS if k in one}
        for values in itertools.product(*grid.values()):
            out.append(parse({**one, **dict(zip(grid, values))}, where))
    dtypes = {serve.dtype for serve in out}
    if len(dtypes) > 1:
        raise UserError(f"{where}: vllm: the deployments name different --dtype values; give one dtype for all.")
    return out


def parse(raw: str | dict, where: str) -> Serve:
    """The settings of a `vllm serve` line or of its flags as keys, validated as vLLM Neuron validates them."""
    settings = _serve_line(raw, where) if isinstance(raw, str) else dict(raw)
    nc = (settings.get("additional_config") or {}).get("neuron_config") or {}
    if not isinstance(nc, dict):
        raise UserError(f"{where}: vllm: additional_config.neuron_config must be an object (vLLM Neuron's keys).")
    dcp = settings.get("decode_context_parallel_size") or 1
    _refuse_unbuilt(nc, dcp, bool(settings.get("speculative_config")), where)
    assumed = []
    tp, dp = settings.get("tensor_parallel_size", 1), settings.get("data_parallel_size", 1)
    longest = settings.get("max_model_len")
    if not isinstance(longest, int) or longest < 1:
        raise UserError(f"{where}: vllm needs max_model_len (--max-model-len), the longest sequence it serves.")
    seqs = settings.get("max_num_seqs")
    if seqs is None:
        seqs = 1
        assumed.append("max_num_seqs 1 (not given; vLLM's own default is larger: set --max-num-seqs as you serve)")
    block = settings.get("block_size") or DEFAULT_BLOCK
    batched = settings.get("max_num_batched_tokens")
    if batched is None:
        batched = DEFAULT_BATCHED_TOKENS
        assumed.append(f"max_num_batched_tokens {DEFAULT_BATCHED_TOKENS} (vLLM's default with chunked prefill)")
    chunk = min(batched, longest)
    tokens = nc.get("num_batched_tokens_buckets") or settings.get("buckets") or _doubling(FIRST_TOKEN_BUCKET, chunk)
    _ascending(tokens, "num_batched_tokens_buckets", chunk, "min(max_num_batched_tokens, max_model_len)", where)
    for t in tokens if tp > 1 else []:
        if t <= tp or t % tp:
            raise UserError(
                f"{where}: vllm: prefill bucket {t} must be above and a multiple of tensor_parallel_size {tp} for "
                "sequence parallelism (vLLM Neuron: 'Prompt Length (T) must be > world_size (W) for SP')."
            )
    num_seqs = nc.get("num_seqs_buckets") or _doubling(1, seqs)
    _ascending(num_seqs, "num_seqs_buckets", seqs, "max_num_seqs", where)
    _segments(nc.get("kv_segment_size_buckets"), tokens, block, where)
    contexts = [*_contexts(nc.get("decode_context_length_buckets"), longest, where), math.ceil(longest / block) * block]
    ep = _ep_degree(bool(settings.get("enable_expert_parallel")), nc.get("ep_degree"), tp, dp, where)
    sampling = "on_device_sampling_config" not in nc or nc["on_device_sampling_config"] is not None
    if "on_device_sampling_config" not in nc:
        assumed.append(
            "sampling on the device (the plugin's code and features guide; its reference page says the host: "
            "set additional_config.neuron_config.on_device_sampling_config: null for that)"
        )
    dtype = settings.get("dtype")
    if dtype is not None and dtype != "auto" and dtype not in DTYPES:
        raise UserError(f"{where}: vllm: --dtype {dtype} is not one neuron-sweep measures ({', '.join(DTYPES)}).")
    kv_dtype = str(settings.get("kv_cache_dtype") or "auto")
    if kv_dtype != "auto" and not kv_dtype.startswith("fp8"):
        raise UserError(
            f"{where}: vllm: --kv-cache-dtype {kv_dtype} is not auto or an fp8 one (reference-configuration.md)."
        )
    labels = {
        "stack": VLLM_NEURON,
        "block_size": block,
        "sampling": "on the device (token ids return)" if sampling else "on the host (full-vocabulary logits)",
    }
    return Serve(
        tp=tp,
        dp=dp,
        ep=ep,
        max_num_seqs=seqs,
        max_model_len=longest,
        block_size=block,
        token_buckets=tuple(tokens),
        seqs_buckets=tuple(num_seqs),
        contexts=tuple(sorted(set(contexts))),
        sampling_on_device=sampling,
        dtype=DTYPES.get(dtype) if dtype else None,
        kv_bytes=1 if kv_dtype.startswith("fp8") else None,
        assumed=tuple(assumed),
        labels=labels,
    )


def _serve_line(line: str, where: str) -> dict:
    """`vllm serve MODEL --flag value ...` as keys; flags that do not shape the graphs are left out, a flag
    close to one that does (a typo) is one sentence."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise UserError(f"{where}: vllm: the serve line does not split as a shell would ({exc}).") from None
    if words[:2] != ["vllm", "serve"]:
        raise UserError(f"{where}: vllm: a string must be a `vllm serve MODEL --flag value ...` line.")
    out: dict[str, Any] = {}
    rest = words[2:]
    if rest and not rest[0].startswith("-"):
        out["model"] = rest.pop(0)
    while rest:
        word = rest.pop(0)
        name, _, inline = word.lstrip("-").partition("=")
        key = SHORT.get(name, name.replace("-", "_"))
        negated = key.startswith("no_") and key[3:] in FLAGS
        if key not in FLAGS and not negated:
            close = difflib.get_close_matches(key, FLAGS, n=1, cutoff=0.85)
            if close:
                raise UserError(
                    f"{where}: vllm: {word} is not a vllm serve flag; did you mean --{close[0].replace('_', '-')}?"
                )
            if not inline and rest and not rest[0].startswith("-"):
                rest.pop(0)  # its value: a flag that does not shape the graphs
            continue
        if negated or FLAGS[key] is bool:
            out[key[3:] if negated else key] = not negated
            continue
        value = inline or (rest.pop(0) if rest else None)
        if value is None:
            raise UserError(f"{where}: vllm: {word} needs a value.")
        out[key] = _value(key, value, word, where)
    return out


def _value(key: str, value: str, word: str, where: str) -> Any:
    kind = FLAGS[key]
    try:
        if kind is int:
            number = int(value)
            if number < 1:
                raise ValueError(value)
            return number
        if kind is dict:
            parsed = json.loads(value)
            if not isinstance(parsed, dict):
                raise ValueError(value)
            return parsed
    except ValueError:
        what = "a positive whole number" if kind is int else "a JSON object"
        raise UserError(f"{where}: vllm: {word} {value!r} is not {what}.") from None
    return value


def _refuse_unbuilt(nc: dict[str, object], dcp: int, speculative: bool, where: str) -> None:
    """The layouts neuron-sweep does not build, each one sentence naming the plugin's page."""
    for key, what in NOT_MODELED.items():
        value = nc.get(key)
        if isinstance(value, int) and value > 1:
            raise UserError(f"{where}: vllm: {key} {value} is {what}, not modeled by neuron-sweep; leave it out.")
    if nc.get("apply_prefill_dcp") or dcp > 1:
        raise UserError(f"{where}: vllm: decode context parallelism (dcp.md) is not modeled; leave it out.")
    if speculative:
        raise UserError(
            f"{where}: vllm: speculative decoding (speculative_decoding_design.md) is not modeled; leave "
            "--speculative-config out to plan the target model's graphs."
        )


def _doubling(first: int, last: int) -> list[int]:
    """Powers of two from `first` below `last`, then `last`: the plugin's default buckets."""
    out, size = [], first
    while size < last:
        out.append(size)
        size *= 2
    return [*out, last]


def _ascending(values: list, name: str, last: int, last_name: str, where: str) -> None:
    if not all(isinstance(v, int) and v > 0 for v in values) or any(b <= a for a, b in zip(values, values[1:])):
        raise UserError(f"{where}: vllm: {name} {values} must be positive and strictly ascending.")
    if values[-1] != last:
        raise UserError(f"{where}: vllm: {name}'s last entry {values[-1]} must equal {last_name} ({last}).")


def _segments(segments: list | None, tokens: list, block: int, where: str) -> None:
    """kv_segment_size_buckets: one value of SEGMENTS, a multiple of block_size, equal to the prefill buckets."""
    if segments is None:
        return
    if len(segments) != 1 or segments[0] not in SEGMENTS or segments[0] % block or list(segments) != list(tokens):
        raise UserError(
            f"{where}: vllm: kv_segment_size_buckets {segments} must be one value of {', '.join(map(str, SEGMENTS))}, "
            f"a multiple of block_size {block}, equal to num_batched_tokens_buckets {list(tokens)}."
        )


def _contexts(buckets: list | None, longest: int, where: str) -> list[int]:
    """decode_context_length_buckets: strictly ascending multiples of 128 below max_model_len."""
    if buckets is None:
        return []
    if not buckets or any(b % CONTEXT_STEP or b >= longest for b in buckets) or sorted(set(buckets)) != list(buckets):
        raise UserError(
            f"{where}: vllm: decode_context_length_buckets {buckets} must be strictly ascending multiples of "
            f"{CONTEXT_STEP}, each below max_model_len {longest}."
        )
    return list(buckets)


def _ep_degree(expert_parallel: bool, ep: int | None, tp: int, dp: int, where: str) -> int:
    """The experts' EP degree: ep_degree, or tp x dp under --enable-expert-parallel (expert_parallelism.md)."""
    if not expert_parallel:
        if (ep or 1) > 1:
            raise UserError(f"{where}: vllm: ep_degree {ep} needs --enable-expert-parallel (vLLM Neuron raises).")
        return 1
    ep = ep or tp * dp
    if dp > 1 and ep != tp * dp:
        raise UserError(
            f"{where}: vllm: with --data-parallel-size {dp}, ep_degree must be tensor_parallel_size x "
            f"data_parallel_size ({tp * dp}), not {ep} (expert_parallelism.md: vLLM Neuron raises ValueError)."
        )
    if dp == 1 and tp % ep:
        raise UserError(f"{where}: vllm: ep_degree {ep} must divide the world of {tp} ranks (expert_parallelism.md).")
    return ep


def rank_config(config: dict, s: Sharding, phase: str, where: str) -> RankConfig:
    """The rank's config fields: Q heads / tp, KV heads / tp or one a rank replicated where tp exceeds them,
    the MLP's intermediate / tp, the vocabulary / tp, experts as the EP degree places them. What the docs
    do not show (heads or an intermediate tp does not divide) is one sentence."""
    tp = s.tp
    labels: dict[str, Any] = {"tp": tp, "stack": VLLM_NEURON} | ({"dp": s.dp} if s.dp > 1 else {})
    if tp == 1 and not s.moe:
        return RankConfig({}, labels)
    heads, kv, head_dim, _ = model_dims(config, where)
    if heads % tp:
        raise UserError(f"{where}: vllm: {heads} attention heads do not split over tensor_parallel_size {tp}.")
    if kv % tp == 0:
        kv_rank, rule = kv // tp, f"KV heads split, {kv // tp} a rank"
    elif tp % kv == 0:
        kv_rank, rule = 1, f"each of the {kv} KV heads replicated on {tp // kv} ranks, one a rank"
    else:
        raise UserError(
            f"{where}: vllm: {kv} KV heads neither split over nor replicate onto tensor_parallel_size {tp}; "
            "pick a tp that divides them or that they divide."
        )
    fields: dict[str, Any] = {"num_attention_heads": heads // tp, "num_key_value_heads": kv_rank, "head_dim": head_dim}
    labels |= {
        "q_heads_per_rank": heads // tp,
        "kv_heads_per_rank": kv_rank,
        "kv_sharding": rule,
        "embedding": "vocabulary-sharded (reduce-scatter in prefill, all-reduce in decode)",
        "lm_head": f"vocab-parallel (N = vocab / {tp})",
    }
    key = experts_key(config)
    for name in ("intermediate_size", "shared_expert_intermediate_size"):
        if isinstance(config.get(name), int) and not (
            key and name == "intermediate_size" and "moe_intermediate_size" not in config
        ):
            fields[name] = split(config[name], tp, name, where, VLLM_NEURON)
    vocabulary(config, tp, fields, labels)
    if key is None:
        return RankConfig(fields, labels)
    moe_tp, moe_ep = s.moe_degrees(phase)
    labels["router"] = "replicated: every rank scores every expert"
    rank = experts(config, moe_tp, moe_ep, phase, fields, labels, where, VLLM_NEURON)
    if s.dp > 1 and s.moe:  # ep = tp x dp: every replica's tokens are gathered onto the experts
        rank.expert_tokens = s.dp
        labels["expert_tokens"] = f"the tokens of all {s.dp} replicas (expert parallelism across DP)"
    return rank


def collectives(
    config: dict, s: Sharding, phase: str, batch: int, seq: int, dtype: str, layer_kinds: list[LayerCount]
) -> list[Collective]:
    """Every collective a step issues per rank in the TP group (tensor_parallelism.md's per-step tables):
    prefill (batch 1, `seq` the chunk's bucket) the embedding's reduce-scatter, per layer an all-gather
    before attention and before the MLP or experts (and the router's affinities, tokens x experts, in an MoE
    layer) and a reduce-scatter after each, the final norm's all-gather; decode the embedding's all-reduce
    and two a layer. The LM head's logits are gathered only where sampling runs on the host; on the device
    the candidates' exchange is fork code only and not counted (reference: vllm-neuron.md section 6)."""
    if s.tp == 1:
        return []
    layers = sum(k["layers"] for k in layer_kinds)
    moe = sum(k["layers"] for k in layer_kinds if k.get("moe"))
    vocab = math.ceil(config.get("vocab_size", 0) / s.tp) * s.tp
    if phase == "prefill":
        size = hidden_bytes(config, batch, seq, dtype)
        out = [
            Collective("reduce_scatter", size, s.tp, "tp", 1, "the vocabulary-sharded embedding into the SP layout"),
            Collective("all_gather", size, s.tp, "tp", 2 * layers, "before attention and before the MLP (SP)"),
            Collective("reduce_scatter", size, s.tp, "tp", 2 * layers, "after o and after the MLP (SP)"),
            Collective("all_gather", size, s.tp, "tp", 1, "the final norm's output, before the LM head"),
        ]
        n_experts = config.get(experts_key(config) or "", 0)
        if moe and n_experts:
            affinities = batch * seq * n_experts * DTYPE_BYTES[dtype]
            out.append(
                Collective("all_gather", affinities, s.tp, "tp", moe, "the router's affinities (tokens x experts)")
            )
    else:
        size = hidden_bytes(config, batch, 1, dtype)
        out = [
            Collective("all_reduce", size, s.tp, "tp", 1, "the vocabulary-sharded embedding"),
            Collective("all_reduce", size, s.tp, "tp", 2 * layers, "after the attention block and the MLP kernels"),
        ]
    if s.dp > 1 and moe and s.moe:  # expert parallelism across replicas: each MoE layer over the DP group
        tokens = seq if phase == "prefill" else 1
        gathered = hidden_bytes(config, batch * s.dp, tokens, dtype)
        out += [
            Collective("all_gather", gathered, s.dp, "dp", moe, "every replica's tokens onto the experts (DP)"),
            Collective("reduce_scatter", gathered, s.dp, "dp", moe, "the experts' output back to each replica (DP)"),
        ]
    if not s.sampling_on_device:
        out.append(Collective("all_gather", batch * vocab * DTYPE_BYTES[dtype], s.tp, "tp", 1, "the LM head's logits"))
    return merged(out)


def fused(phase: str, module: str, moe: bool) -> str | None:
    """The device kernel a traced GEMM runs inside under vLLM Neuron, None where it is a kernel of its own:
    decode fuses the attention block and the MLP (or the MoE's norm, router and experts) into one kernel
    each; prefill runs q, k and v in one QKV kernel with RoPE, attention in a flash-attention kernel, the MLP
    in one kernel and the MoE in the CTE kernel (tensor_parallelism.md, expert_parallelism.md,
    onboarding-models.md; a public fork's Llama)."""
    if module.endswith("lm_head"):
        return None
    if "attn" in module or "attention" in module:
        if phase == "decode":
            return "the attention-block kernel (QKV, RoPE, attention, o)"
        last = module.rsplit(".", 1)[-1]
        if not last.endswith("_proj"):  # attention's own GEMMs (scores, values)
            return "the flash-attention kernel"
        return "the QKV kernel (q, k, v, RoPE)" if last in ("q_proj", "k_proj", "v_proj") else None
    if moe:
        return "the MoE TKG kernel (norm, router, experts)" if phase == "decode" else "the MoE CTE kernel"
    return "the fused MLP kernel"
