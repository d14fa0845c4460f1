"""A model as NxD Inference runs it on an instance: tensor and expert parallel, each rank its own shard.

The rules come from NxD Inference (aws-neuron/neuronx-distributed-inference: `models/config.py` for the
keys and defaults, `modules/attention/gqa.py` for the heads, `modules/moe_v2.py` for the experts) and the
Neuron SDK docs (the parallelism app note for the layers' collectives, the MoE architecture deep dive, the
NxD Inference API guide for the TP degrees per instance). In short, at tensor-parallel degree tp:
- q, k, v, gate and up are column-parallel (N / tp), o and down row-parallel (K / tp), the LM head
  vocab-parallel (N = vocab / tp); attention runs heads / tp per rank. Q heads are padded up to a multiple
  of tp; KV heads are split where tp divides them, else replicated up to tp where tp is a multiple of them
  (REPLICATE_TO_TP_DEGREE, one KV head a rank), else converted to MHA (CONVERT_TO_MHA: as many KV heads as
  padded Q heads).
- A rank's shard of a decoder layer is a layer of the same family whose config has the rank's heads, its
  intermediate size and its experts: `rank_config` writes those fields, so the GEMMs traced and the layers
  measured whole are one rank's, on every backend, with nothing but transformers building them.
- Experts under expert parallelism (moe_ep): a rank holds experts / moe_ep of them, each expert's
  intermediate split by moe_tp; every token is gathered onto every rank, so a rank's experts get their
  share of all the tokens, the busiest rank's (the one the layer waits for) under the routing policy.
- Each layer issues collectives in its TP group (`collectives`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronsweep.errors import UserError
from neuronsweep.workloads.dtypes import DTYPE_BYTES

# NxD Inference's tp_degree values per instance family (SDK nxd-inference api-guide.rst) and each logical
# core's HBM (the same page; trn2 at LNC 2)
SUPPORTED_TP = {"trn2": (1, 2, 4, 8, 16, 32, 64), "trn1": (1, 2, 8, 16, 32), "inf2": (1, 2, 4, 8, 24)}
HBM_PER_CORE = {"trn2": 24e9, "trn1": 16e9, "inf2": 16e9}
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")  # Qwen-MoE, Mixtral, DeepSeek
MOE_PHASE_KEYS = {
    "prefill": ("moe_cte_tp_degree", "moe_cte_ep_degree"),
    "decode": ("moe_tkg_tp_degree", "moe_tkg_ep_degree"),
}
VLLM_FIRST_BUCKET = 128  # vllm-neuron: bucketing on, powers of two from 128 when no buckets are given


@dataclass(frozen=True)
class Sharding:
    """One parallel layout of a model entry: its TP degree, sequence parallelism, the MoE degrees per phase
    (tp, ep) and whether sampling runs on the device (then the logits are not gathered)."""

    tp: int
    sequence_parallel: bool = False
    moe: dict[str, tuple[int, int]] = field(default_factory=dict)  # phase -> (moe_tp, moe_ep)
    sampling_on_device: bool = False

    def moe_degrees(self, phase: str) -> tuple[int, int]:
        """(moe_tp, moe_ep) in this phase: the phase's own, else all of tp to the experts' TP."""
        return self.moe.get(phase, (self.tp, 1))

    def label(self, phase: str, moe: bool) -> str:
        """tp8, or tp8-ep4 for an MoE model at moe_ep 4: what scenario ids carry."""
        ep = self.moe_degrees(phase)[1]
        return f"tp{self.tp}" + (f"-ep{ep}" if moe and ep > 1 else "")


def entry_layout(entry: dict, where: str) -> tuple[dict, list[Sharding]]:
    """The entry with batch and seq from its neuron_config or vllm form where it has one, and its layouts
    (one per tp_degree of a list: a grid like any other); [Sharding(1)] for an entry without parallelism."""
    if sum(k in entry for k in ("parallel", "neuron_config", "vllm")) > 1:
        raise UserError(f"{where}: give one of parallel, neuron_config and vllm; each says the whole layout.")
    parallel: dict | None
    if "neuron_config" in entry:
        entry, parallel = _from_neuron_config(entry, where)
    elif "vllm" in entry:
        entry, parallel = _from_vllm(entry, where)
    else:
        parallel = entry.get("parallel")
    if not parallel:
        return entry, [Sharding(1)]
    degrees = parallel.get("tp_degree", 1)
    return entry, [_sharding(parallel, tp, where) for tp in (degrees if isinstance(degrees, list) else [degrees])]


def _sharding(parallel: dict, tp: int, where: str) -> Sharding:
    moe = {}
    hybrid = parallel.get("hybrid_sharding_config") or {}
    for phase, (tp_key, ep_key) in MOE_PHASE_KEYS.items():
        moe_tp = hybrid.get(tp_key, parallel.get("moe_tp_degree"))
        moe_ep = hybrid.get(ep_key, parallel.get("moe_ep_degree"))
        if moe_tp is None and moe_ep is None:
            continue
        if not hybrid and (moe_ep or 1) == 1:
            # NxD Inference (modules/moe_v2.py, initialize_moe_process_group): without hybrid sharding, an
            # moe_ep_degree of 1 runs the experts over the whole TP group, whatever moe_tp_degree says;
            # MoENeuronConfig saves both as 1, so every MoE checkpoint's neuron_config.json has them
            if moe_tp not in (None, 1, tp):
                raise UserError(
                    f"{where}: parallel: moe_tp_degree {moe_tp} without an moe_ep_degree above 1 has no effect in "
                    f"NxD Inference (the experts then run over the whole TP group of {tp}); set moe_ep_degree "
                    f"{tp // moe_tp if tp % moe_tp == 0 else '(tp_degree / moe_tp_degree)'} beside it, or leave "
                    "both out."
                )
            continue
        moe_tp, moe_ep = moe_tp or tp // (moe_ep or 1), moe_ep or tp // (moe_tp or 1)
        if moe_tp * moe_ep != tp:
            raise UserError(
                f"{where}: parallel: moe_tp_degree x moe_ep_degree ({moe_tp} x {moe_ep}) must equal tp_degree "
                f"({tp}) in {phase} (NxD Inference's MoE tutorials: the experts are split over every rank)."
            )
        moe[phase] = (moe_tp, moe_ep)
    return Sharding(
        tp=tp,
        sequence_parallel=bool(parallel.get("sequence_parallel_enabled", False)),
        moe=moe,
        sampling_on_device=parallel.get("on_device_sampling_config") is not None,
    )


def _from_neuron_config(entry: dict, where: str) -> tuple[dict, dict]:
    """A compiled NxD Inference checkpoint's neuron_config.json (its InferenceConfig: the `neuron_config`
    object, or that object alone): tp, the MoE degrees, sequence parallelism, batch, seq and buckets."""
    path = Path(entry["neuron_config"])
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{where}: neuron_config {path} is not readable JSON ({exc}).") from None
    nc = data.get("neuron_config", data) if isinstance(data, dict) else None
    if not isinstance(nc, dict) or not isinstance(nc.get("tp_degree"), int):
        raise UserError(
            f"{where}: neuron_config {path} has no tp_degree: it is not the neuron_config.json an NxD Inference "
            "checkpoint writes (an object with tp_degree, batch_size, seq_len, or one holding it as neuron_config)."
        )
    keys = (
        "tp_degree",
        "sequence_parallel_enabled",
        "moe_tp_degree",
        "moe_ep_degree",
        "hybrid_sharding_config",
        "on_device_sampling_config",
    )
    parallel = {k: nc[k] for k in keys if nc.get(k) is not None}
    batch = nc.get("max_batch_size") or nc.get("batch_size") or 1
    seq = nc.get("seq_len") or 128
    prefill = nc.get("context_encoding_buckets") if nc.get("enable_bucketing") else None
    decode = nc.get("token_generation_buckets") if nc.get("enable_bucketing") else None
    if nc.get("enable_bucketing") and not (prefill or decode):
        prefill = decode = buckets(seq)
    seqs = sorted(set(prefill or decode or [seq]) | set(decode or []))
    return {**entry, "batch": [int(batch)], "seq": [int(s) for s in seqs]}, parallel


def _from_vllm(entry: dict, where: str) -> tuple[dict, dict]:
    """vLLM's settings as vllm-neuron hands them to NxD Inference: tp = tensor_parallel_size, batch =
    max_num_seqs, seq = max_model_len with buckets in powers of two from 128, sampling on the device."""
    v = entry["vllm"]
    tp, seqs, longest = v.get("tensor_parallel_size", 1), v.get("max_num_seqs", 1), v.get("max_model_len")
    if not isinstance(longest, int) or longest < 1:
        raise UserError(f"{where}: vllm needs max_model_len, the longest sequence (vLLM's own key).")
    parallel = {"tp_degree": tp, "on_device_sampling_config": {}}
    return {**entry, "batch": [seqs], "seq": v.get("buckets") or buckets(longest)}, parallel


def buckets(longest: int) -> list[int]:
    """NxD Inference's automatic buckets: powers of two from 128 up to the longest, the longest last."""
    out, size = [], VLLM_FIRST_BUCKET
    while size < longest:
        out.append(size)
        size *= 2
    return [*out, longest]


def check_tp(shardings: list[Sharding], family: str | None, where: str) -> None:
    """A TP degree the instance family does not run is one sentence (NxD Inference's supported degrees)."""
    allowed = SUPPORTED_TP.get(family or "")
    for s in shardings:
        if allowed and s.tp not in allowed:
            raise UserError(
                f"{where}: parallel.tp_degree {s.tp} is not one NxD Inference supports on {family} "
                f"({', '.join(map(str, allowed))}; nxd-inference api-guide); pick one of those, or another target."
            )


@dataclass
class RankConfig:
    """One rank's shard as config fields (the model's config.json with these replaced) and what each says."""

    fields: dict[str, Any]
    labels: dict[str, Any]
    expert_ep: int = 1  # experts are this many times more than the rank holds (its load is theirs, sliced)
    top_k: int | None = None  # the model's experts a token, where a rank holds fewer (its router is clamped)


def rank_config(config: dict, s: Sharding, phase: str, where: str) -> RankConfig:
    """The rank's config fields at `s` in `phase`, or one sentence where NxD Inference could not split the
    model so. Heads: gqa.py's get_shardable_head_counts; the intermediate sizes and the vocabulary split
    evenly; experts: experts / moe_ep of them, their intermediate / moe_tp."""
    tp = s.tp
    if tp == 1 and not s.moe:
        return RankConfig({}, {"tp": 1})
    heads = config.get("num_attention_heads")
    hidden = config.get("hidden_size")
    if not isinstance(heads, int) or not isinstance(hidden, int):
        raise UserError(f"{where}: parallel needs num_attention_heads and hidden_size in the model's config.json.")
    kv = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    q_total = math.ceil(heads / tp) * tp  # padded up to a multiple of tp
    if kv == heads:
        kv_total, kv_rule = q_total, "MHA: KV heads padded as the Q heads"
    elif kv >= tp and kv % tp == 0:
        kv_total, kv_rule = kv, f"KV heads split, {kv // tp} a rank"
    elif tp % kv == 0:
        kv_total, kv_rule = tp, f"REPLICATE_TO_TP_DEGREE: each of the {kv} KV heads on {tp // kv} ranks"
    else:
        kv_total, kv_rule = q_total, f"CONVERT_TO_MHA: tp {tp} is not a multiple of the {kv} KV heads"
    fields: dict[str, Any] = {
        "num_attention_heads": q_total // tp,
        "num_key_value_heads": kv_total // tp,
        "head_dim": head_dim,
    }
    labels: dict[str, Any] = {
        "tp": tp,
        "q_heads_per_rank": q_total // tp,
        "kv_heads_per_rank": kv_total // tp,
        "kv_sharding": kv_rule,
        "column_parallel": "q, k, v, gate, up (N / tp)",
        "row_parallel": "o, down (K / tp)",
        "lm_head": f"vocab-parallel (N = vocab / {tp})",
    }
    if q_total != heads:
        labels["q_heads_padded"] = f"{heads} -> {q_total}"
    for key in ("intermediate_size", "shared_expert_intermediate_size"):
        if isinstance(config.get(key), int):
            fields[key] = _split(config[key], tp, key, where)
    if isinstance(config.get("vocab_size"), int):
        fields["vocab_size"] = math.ceil(config["vocab_size"] / tp)  # NxD pads the vocabulary to tp's multiple
        pad = config.get("pad_token_id")
        if isinstance(pad, int) and not 0 <= pad < fields["vocab_size"]:
            # the padding row lives on the rank whose shard holds it; the rank measured here (the first) has none,
            # and its embedding cannot name a row past its own ("Padding_idx must be within num_embeddings")
            fields["pad_token_id"] = None
            labels["pad_token_id"] = f"{pad}: on rank {pad // fields['vocab_size']}'s shard of the vocabulary"
    experts_key = next((k for k in EXPERT_COUNT_KEYS if isinstance(config.get(k), int)), None)
    moe_tp, moe_ep = s.moe_degrees(phase)
    if experts_key is None:
        if s.moe:
            raise UserError(
                f"{where}: parallel sets MoE degrees, but the model has no experts ({', '.join(EXPERT_COUNT_KEYS)})."
            )
        return RankConfig(fields, labels)
    experts = config[experts_key]
    if experts % moe_ep:
        raise UserError(
            f"{where}: {experts} experts do not split over moe_ep_degree {moe_ep} in {phase}; NxD Inference gives "
            "every rank of the EP group experts / moe_ep_degree of them."
        )
    fields[experts_key] = experts // moe_ep
    top_k = config.get("num_experts_per_tok")
    clamped = isinstance(top_k, int) and top_k > experts // moe_ep
    if clamped:  # a router cannot pick more experts than its rank holds ("k not in range for dimension"):
        # it picks among its own, and the rank's experts still get its share of the model's top_k slots
        fields["num_experts_per_tok"] = experts // moe_ep
        labels["top_k_per_rank"] = f"{top_k} -> {experts // moe_ep}: the rank's router over its own experts"
    expert_key = (
        "moe_intermediate_size" if isinstance(config.get("moe_intermediate_size"), int) else "intermediate_size"
    )
    fields[expert_key] = _split(config[expert_key], moe_tp, expert_key, where)
    labels |= {"moe_tp": moe_tp, "moe_ep": moe_ep, "experts_per_rank": experts // moe_ep}
    return RankConfig(fields, labels, expert_ep=moe_ep, top_k=top_k if clamped else None)


def _split(size: int, parts: int, key: str, where: str) -> int:
    if size % parts:
        raise UserError(f"{where}: {key} {size} does not split over {parts} ranks; NxD Inference shards it evenly.")
    return size // parts


@dataclass(frozen=True)
class Collective:
    """One collective a forward issues: its op, size (bytes, nccl-tests' convention), group and count."""

    op: str
    nbytes: int
    world: int
    group: str  # tp, ep or world, as NxD Inference uses them
    count: int
    what: str  # where in the forward it runs


def collectives(
    config: dict, s: Sharding, phase: str, batch: int, seq: int, dtype: str, layer_kinds: list[dict]
) -> list[Collective]:
    """Every collective a forward issues per rank, by the parallelism app note and the MoE deep dive:
    a dense layer's two all-reduces (after o and after down) of batch x tokens x hidden; in prefill with
    sequence parallelism an all-gather before attention and before the MLP and a reduce-scatter after o and
    after down instead, and the embedding's reduce-scatter once; an MoE layer's experts gather every token
    and reduce-scatter after them in prefill, one all-reduce over the world in decode; the LM head's gather
    of the last position's logits where sampling is not on the device. `layer_kinds`: the probe's kinds,
    each with its `layers` count and whether it is `moe`."""
    if s.tp == 1:
        return []
    tokens = seq if phase == "prefill" else 1
    size = batch * tokens * config["hidden_size"] * DTYPE_BYTES[dtype]
    dense = sum(k["layers"] for k in layer_kinds if not k.get("moe"))
    moe = sum(k["layers"] for k in layer_kinds if k.get("moe"))
    sp = s.sequence_parallel and phase == "prefill"  # the decode graph turns it off (model_base.py)
    out = []
    if sp:
        out += [
            Collective("all_gather", size, s.tp, "tp", 2 * dense + moe, "before attention and the MLP (SP)"),
            Collective("reduce_scatter", size, s.tp, "tp", 2 * dense + moe, "after o and down (SP)"),
            Collective("reduce_scatter", size, s.tp, "tp", 1, "the embedding's output (SP)"),
        ]
    else:
        out.append(Collective("all_reduce", size, s.tp, "tp", 2 * dense + moe, "after o and after down"))
    if moe:
        if phase == "prefill":
            out += [
                Collective("all_gather", size, s.tp, "world", moe, "every token onto every rank, before the experts"),
                Collective("reduce_scatter", size, s.tp, "world", moe, "after the experts"),
            ]
        else:
            out.append(Collective("all_reduce", size, s.tp, "world", moe, "after the experts (decode)"))
    if not s.sampling_on_device:
        vocab = math.ceil(config.get("vocab_size", 0) / s.tp) * s.tp
        out.append(Collective("all_gather", batch * vocab * DTYPE_BYTES[dtype], s.tp, "tp", 1, "the LM head's logits"))
    merged: dict[tuple, Collective] = {}
    for c in out:  # one op, size and group counted once, its places joined
        key = (c.op, c.nbytes, c.world)
        prior = merged.get(key)
        merged[key] = (
            c
            if prior is None
            else Collective(c.op, c.nbytes, c.world, prior.group, prior.count + c.count, f"{prior.what}; {c.what}")
        )
    return list(merged.values())


def rank_bytes(config: dict, rank: RankConfig, dtype: str, batch: int, seq: int) -> int:
    """A rank's weights and KV cache at its shard (approximate: the decoder's projections, experts, embedding
    and head), for the check that they fit its core's HBM."""
    f = {**config, **rank.fields}
    hidden, layers, q = f.get("hidden_size"), f.get("num_hidden_layers", 1), f.get("num_attention_heads")
    if not isinstance(hidden, int) or not isinstance(q, int):
        return 0  # a config without them: rank_config has said so where it matters
    kv = f.get("num_key_value_heads") or q
    hd = f.get("head_dim") or hidden // q
    attention = hidden * (q + 2 * kv) * hd + q * hd * hidden
    experts = next((f[k] for k in EXPERT_COUNT_KEYS if isinstance(f.get(k), int)), 0)
    inter = (f.get("moe_intermediate_size") if experts else None) or f.get("intermediate_size") or 0
    mlp = 3 * hidden * inter * max(1, experts)
    embed = 2 * hidden * f.get("vocab_size", 0)
    kv_cache = 2 * layers * batch * seq * kv * hd
    return int((layers * (attention + mlp) + embed + kv_cache) * DTYPE_BYTES[dtype])
