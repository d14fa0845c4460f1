"""The records a model's deployment is described by, whichever stack serves it: its parallel layout
(`Sharding`), the graphs each phase compiles (`Grid`), one rank's shard of the model (`RankConfig`) and the
collectives a forward issues (`Collective`). The rules that fill them are the stack's own:
workloads/nxd_inference.py (trn1/inf2) and workloads/vllm_neuron.py (trn2/trn3 since SDK 2.34);
workloads/deployment.py picks between them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from neuronsweep.config.suites import ModelEntry
from neuronsweep.errors import UserError
from neuronsweep.workloads.dtypes import DTYPE_BYTES

NXD_INFERENCE, VLLM_NEURON = "NxD Inference", "vLLM Neuron"
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")  # Qwen-MoE, Mixtral, DeepSeek
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class Sharding:
    """One parallel layout of a model entry: the stack that runs it, its TP degree, sequence parallelism,
    the MoE degrees per phase (moe_tp, moe_ep), how sampling runs and the embedding's split.

    sampling_on_device: no rank gathers the LM head's logits; `sampling_topk` is then the candidates a rank
    sends for the distributed top-k (None: greedy, one candidate; NxD Inference's argmax)."""

    tp: int
    sequence_parallel: bool = False
    moe: dict[str, tuple[int, int]] = field(default_factory=dict)  # phase -> (moe_tp, moe_ep)
    sampling_on_device: bool = False
    stack: str = NXD_INFERENCE
    dp: int = 1  # independent replicas of the TP group (vLLM Neuron's --data-parallel-size)
    vocab_parallel: bool = False  # NxD Inference: the embedding split over the vocabulary, not the hidden size
    sampling_topk: int | None = None

    def moe_degrees(self, phase: str) -> tuple[int, int]:
        """(moe_tp, moe_ep) in this phase: the phase's own, else all of tp to the experts' TP."""
        return self.moe.get(phase, (self.tp, 1))

    def label(self, phase: str, moe: bool) -> str:
        """tp8, tp8-ep4 for an MoE model at moe_ep 4, tp8-dp2 with two replicas: what scenario ids carry."""
        ep = self.moe_degrees(phase)[1]
        return f"tp{self.tp}" + (f"-ep{ep}" if moe and ep > 1 else "") + (f"-dp{self.dp}" if self.dp > 1 else "")


@dataclass(frozen=True)
class Grid:
    """The graphs one phase compiles: its batch sizes and sequence lengths (prefill's tokens, decode's
    context), every pair a graph."""

    batches: tuple[int, ...]
    seqs: tuple[int, ...]


@dataclass(frozen=True)
class Deployed:
    """One deployment of a model entry: its parallel layout and the graphs each phase compiles."""

    sharding: Sharding
    grids: dict[str, Grid]


@dataclass(frozen=True)
class Layout:
    """A model entry as deployed: the entry (batch and seq as its deployment gives them), its deployments (one
    per point of a grid of them), and what was assumed where the deployment said nothing."""

    entry: ModelEntry
    deployments: list[Deployed]
    assumed: tuple[str, ...] = ()
    dtype_from_file: bool = False  # the deployment file names the dtype the model was compiled in

    @property
    def shardings(self) -> list[Sharding]:
        """The distinct layouts, in order: deployments that differ only in their graphs share one."""
        out: list[Sharding] = []
        for d in self.deployments:
            if d.sharding not in out:
                out.append(d.sharding)
        return out

    @property
    def grids(self) -> dict[str, Grid]:
        """The first deployment's graphs (an entry's only one, unless it gives a grid of deployments)."""
        return self.deployments[0].grids

    @property
    def stack(self) -> str | None:
        """The stack every layout names, None for an entry without a deployment."""
        return self.shardings[0].stack if self.shardings != [Sharding(1)] else None

    def graphs(self, sharding: Sharding, phase: str) -> list[Grid]:
        """Every graph of `phase` some deployment at `sharding` compiles, each once: as products of batches
        and sequence lengths (the seqs that share their batches)."""
        pairs = {
            (b, s)
            for d in self.deployments
            if d.sharding == sharding
            for b in d.grids[phase].batches
            for s in d.grids[phase].seqs
        }
        by_batches: dict[tuple[int, ...], list[int]] = {}
        for seq in sorted({s for _, s in pairs}):
            by_batches.setdefault(tuple(sorted(b for b, s in pairs if s == seq)), []).append(seq)
        return [Grid(batches, tuple(seqs)) for batches, seqs in by_batches.items()]


def plain_grids(entry: ModelEntry) -> dict[str, Grid]:
    """Every phase over the entry's own batch x seq: an entry without a deployment."""
    grid = Grid(tuple(entry.get("batch", [1])), tuple(entry.get("seq", [128])))
    return {phase: grid for phase in PHASES}


@dataclass
class RankConfig:
    """One rank's shard as config fields (the model's config.json with these replaced) and what each says."""

    fields: dict[str, Any]
    labels: dict[str, Any]
    expert_ep: int = 1  # experts are this many times more than the rank holds (its load is theirs, sliced)
    top_k: int | None = None  # the model's experts a token, where a rank holds fewer (its router is clamped)
    expert_tokens: int = 1  # the replicas whose tokens a rank's experts get (expert parallelism across DP)


@dataclass(frozen=True)
class Collective:
    """One collective a forward issues: its op, size (bytes, nccl-tests' convention), group and count."""

    op: str
    nbytes: int
    world: int
    group: str  # tp, ep, dp or world, as the stack uses them
    count: int
    what: str  # where in the forward it runs


def merged(found: list[Collective]) -> list[Collective]:
    """One op, size and group counted once, its places joined."""
    out: dict[tuple, Collective] = {}
    for c in found:
        key = (c.op, c.nbytes, c.world)
        prior = out.get(key)
        out[key] = (
            c
            if prior is None
            else Collective(c.op, c.nbytes, c.world, prior.group, prior.count + c.count, f"{prior.what}; {c.what}")
        )
    return list(out.values())


def model_dims(config: dict, where: str) -> tuple[int, int, int, int]:
    """(Q heads, KV heads, head_dim, hidden) of a model's config.json, or one sentence."""
    heads = config.get("num_attention_heads")
    hidden = config.get("hidden_size")
    if not isinstance(heads, int) or not isinstance(hidden, int):
        raise UserError(f"{where}: a deployment needs num_attention_heads and hidden_size in the model's config.json.")
    return heads, config.get("num_key_value_heads") or heads, config.get("head_dim") or hidden // heads, hidden


def experts_key(config: dict) -> str | None:
    """The config key holding the model's expert count, None for a dense model."""
    return next((k for k in EXPERT_COUNT_KEYS if isinstance(config.get(k), int)), None)


def vocabulary(config: dict, tp: int, fields: dict, labels: dict) -> None:
    """The vocabulary a rank's embedding and LM head hold (padded to tp's multiple), and a pad token that
    lies on another rank's shard dropped (its embedding cannot name a row past its own)."""
    if not isinstance(config.get("vocab_size"), int):
        return
    fields["vocab_size"] = math.ceil(config["vocab_size"] / tp)
    pad = config.get("pad_token_id")
    if isinstance(pad, int) and not 0 <= pad < fields["vocab_size"]:
        fields["pad_token_id"] = None
        labels["pad_token_id"] = f"{pad}: on rank {pad // fields['vocab_size']}'s shard of the vocabulary"


def experts(
    config: dict, moe_tp: int, moe_ep: int, phase: str, fields: dict, labels: dict, where: str, stack: str
) -> RankConfig:
    """A rank's experts (experts / moe_ep of them, each intermediate / moe_tp) beside `fields`; a router
    that would pick more experts than the rank holds picks among its own."""
    key = experts_key(config)
    assert key is not None
    total = config[key]
    if total % moe_ep:
        raise UserError(
            f"{where}: {total} experts do not split over an expert-parallel degree of {moe_ep} in {phase}; "
            f"{stack} gives every rank of the EP group experts / EP of them."
        )
    fields[key] = total // moe_ep
    top_k = config.get("num_experts_per_tok")
    clamped = isinstance(top_k, int) and top_k > total // moe_ep
    if clamped:  # a router cannot pick more experts than its rank holds ("k not in range for dimension")
        fields["num_experts_per_tok"] = total // moe_ep
        labels["top_k_per_rank"] = f"{top_k} -> {total // moe_ep}: the rank's router over its own experts"
    inter = "moe_intermediate_size" if isinstance(config.get("moe_intermediate_size"), int) else "intermediate_size"
    fields[inter] = split(config[inter], moe_tp, inter, where, stack)
    labels |= {"moe_tp": moe_tp, "moe_ep": moe_ep, "experts_per_rank": total // moe_ep}
    return RankConfig(fields, labels, expert_ep=moe_ep, top_k=top_k if clamped else None)


def split(size: int, parts: int, key: str, where: str, stack: str) -> int:
    """size / parts where `stack` shards it evenly, else one sentence."""
    if size % parts:
        raise UserError(f"{where}: {key} {size} does not split over {parts} ranks; {stack} shards it evenly.")
    return size // parts


def hidden_bytes(config: dict, batch: int, tokens: int, dtype: str) -> int:
    """batch x tokens x hidden in `dtype`: the activations most collectives move."""
    return batch * tokens * config["hidden_size"] * DTYPE_BYTES[dtype]


def rank_bytes(config: dict, rank: RankConfig, dtype: str, batch: int, seq: int, kv_bytes: int | None = None) -> int:
    """A rank's weights and KV cache at its shard (approximate: the decoder's projections, experts, embedding
    and head), for the check that they fit its core's HBM; `kv_bytes`: the cache's bytes an element where it
    is not the weights' dtype (an fp8 KV cache: 1)."""
    f = {**config, **rank.fields}
    hidden, layers, q = f.get("hidden_size"), f.get("num_hidden_layers", 1), f.get("num_attention_heads")
    if not isinstance(hidden, int) or not isinstance(q, int):
        return 0  # a config without them: rank_config has said so where it matters
    kv = f.get("num_key_value_heads") or q
    hd = f.get("head_dim") or hidden // q
    attention = hidden * (q + 2 * kv) * hd + q * hd * hidden
    n_experts = next((f[k] for k in EXPERT_COUNT_KEYS if isinstance(f.get(k), int)), 0)
    inter = (f.get("moe_intermediate_size") if n_experts else None) or f.get("intermediate_size") or 0
    mlp = 3 * hidden * inter * max(1, n_experts)
    embed = 2 * hidden * f.get("vocab_size", 0)
    kv_cache = 2 * layers * batch * seq * kv * hd * (kv_bytes or DTYPE_BYTES[dtype])
    return int((layers * (attention + mlp) + embed) * DTYPE_BYTES[dtype] + kv_cache)
