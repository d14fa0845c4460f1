"""A model as NxD Inference runs it (trn1 and inf2; since SDK 2.34 not on trn2/trn3): tensor and expert
parallel, each rank its own shard.

The rules come from NxD Inference's source (aws-neuron/neuronx-distributed-inference @ 4bcdc54:
`models/config.py` for the keys and defaults, `modules/attention/gqa.py` for the heads, `modules/moe_v2.py`
for the experts, `modules/autobucketing.py` for the buckets, `modules/generation/sampling.py` for sampling)
and NxD's (aws-neuron/neuronx-distributed @ fbac349: `parallel_layers/layers.py` for the embedding and the
padded Linears, `modules/moe/model.py` for an MoE layer's collectives, `operators/{argmax,topk}.py` for
sampling on the device). In short, at tensor-parallel degree tp:
- q, k, v, gate and up are column-parallel (N / tp), o and down row-parallel (K / tp), the LM head
  vocab-parallel (N = vocab / tp); a dense MLP's intermediate is padded up to tp's multiple (`pad=True`);
  Q heads are padded up to a multiple of tp; KV heads are split where tp divides them, else replicated up
  to tp where tp is a multiple of them (REPLICATE_TO_TP_DEGREE), else converted to MHA (CONVERT_TO_MHA).
- Experts under expert parallelism (moe_ep): a rank holds experts / moe_ep of them, each expert's
  intermediate split by moe_tp; every token is gathered onto every rank.
- Prefill runs `ctx_batch_size` sequences to `max_context_length`, decode `tkg_batch_size` to
  `max_length`, each over its own buckets.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from neuronsweep.config.suites import ModelEntry
from neuronsweep.errors import UserError
from neuronsweep.workloads.dtypes import DTYPE_BYTES
from neuronsweep.workloads.probed import LayerCount
from neuronsweep.workloads.sharding import (
    NXD_INFERENCE,
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
    plain_grids,
    split,
    vocabulary,
)

# NxD Inference's tp_degree values on the families it still serves (SDK nxd-inference api-guide.rst; trn2 and
# trn3 refuse it since SDK 2.34: deployment.check)
SUPPORTED_TP = {"trn1": (1, 2, 8, 16, 32), "inf2": (1, 2, 4, 8, 24)}
MOE_PHASE_KEYS = {
    "prefill": ("moe_cte_tp_degree", "moe_cte_ep_degree"),
    "decode": ("moe_tkg_tp_degree", "moe_tkg_ep_degree"),
}
FIRST_BUCKET = 128  # autobucketing.py: generate_buckets(128, max) when bucketing is on without lists
DEFAULT_SEQ, DEFAULT_DTYPE, DEFAULT_TOPK = 128, "bf16", 256  # config.py: seq_len, torch_dtype, global_topk
INDEX_BYTES = 8  # torch.max / torch.topk return int64 indices (operators/argmax.py, topk.py gather them)
TORCH_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def from_parallel(entry: ModelEntry, where: str) -> Layout:
    """A `parallel:` block with NxD Inference's key names; tp_degree may be a list (a grid like any other)."""
    parallel = entry["parallel"]
    degrees = parallel.get("tp_degree", 1)
    grids = plain_grids(entry)
    tps = degrees if isinstance(degrees, list) else [degrees]
    return Layout(entry, [Deployed(sharding(parallel, tp, where), grids) for tp in tps])


def sharding(parallel: dict, tp: int, where: str) -> Sharding:
    """One layout at `tp` from NxD Inference's keys (a parallel: block, or a neuron_config.json's)."""
    moe = {}
    hybrid = parallel.get("hybrid_sharding_config") or {}
    for phase, (tp_key, ep_key) in MOE_PHASE_KEYS.items():
        moe_tp = hybrid.get(tp_key, parallel.get("moe_tp_degree"))
        moe_ep = hybrid.get(ep_key, parallel.get("moe_ep_degree"))
        if moe_tp is None and moe_ep is None:
            continue
        if not hybrid and (moe_ep or 1) == 1:
            # modules/moe_v2.py, initialize_moe_process_group: without hybrid sharding, an moe_ep_degree of 1
            # runs the experts over the whole TP group, whatever moe_tp_degree says; MoENeuronConfig saves both
            # as 1, so every MoE checkpoint's neuron_config.json has them
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
    sampling = parallel.get("on_device_sampling_config")
    topk = None
    if isinstance(sampling, dict) and (sampling.get("do_sample") or sampling.get("dynamic")):
        topk = int(sampling.get("global_topk", DEFAULT_TOPK))  # sampling.py: a top-k, else the argmax
    return Sharding(
        tp=tp,
        sequence_parallel=bool(parallel.get("sequence_parallel_enabled", False)),
        moe=moe,
        sampling_on_device=sampling is not None,
        vocab_parallel=bool(parallel.get("vocab_parallel", False)),
        sampling_topk=topk,
    )


def from_neuron_config(entry: ModelEntry, where: str) -> Layout:
    """A compiled checkpoint's neuron_config.json, as NxD Inference writes it (its InferenceConfig: the
    `neuron_config` object, or that object alone) or as optimum-neuron does (`sequence_length`,
    `continuous_batching`, `on_device_sampling`, `max_topk`, `ep_degree`): the layout, each phase's batch and
    buckets, and the dtype it was compiled in; what the file leaves out is NxD Inference's default, said."""
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
    if (nc.get("ep_degree") or 1) > 1:
        raise UserError(
            f"{where}: neuron_config {path} sets ep_degree {nc['ep_degree']}, a world of tp_degree x ep_degree "
            "ranks, which neuron-sweep does not model; give the experts' degrees as moe_tp_degree and "
            "moe_ep_degree (parallel: in the config) instead."
        )
    assumed = []
    seq = nc.get("seq_len") or nc.get("sequence_length")
    if not isinstance(seq, int):
        seq = DEFAULT_SEQ
        assumed.append(f"seq_len {DEFAULT_SEQ} (NxD Inference's default: {path.name} has no seq_len)")
    dtype = _dtype(nc.get("torch_dtype"), path, where)
    if dtype is None:
        dtype = DEFAULT_DTYPE
        assumed.append(f"dtype {DEFAULT_DTYPE} (NxD Inference's default: {path.name} has no torch_dtype)")
    batch = nc.get("batch_size") or 1
    prefill_batch = nc.get("ctx_batch_size") or (1 if nc.get("continuous_batching") else batch)
    decode_batch = nc.get("tkg_batch_size") or batch
    context, longest = nc.get("max_context_length") or seq, nc.get("max_length") or seq
    prefill, decode = [context], [longest]
    if nc.get("enable_bucketing"):
        prefill = nc.get("context_encoding_buckets") or buckets(FIRST_BUCKET, context)
        decode = nc.get("token_generation_buckets") or buckets(FIRST_BUCKET, longest)
    keys = ("sequence_parallel_enabled", "moe_tp_degree", "moe_ep_degree", "hybrid_sharding_config", "vocab_parallel")
    parallel: dict[str, Any] = {k: nc[k] for k in keys if nc.get(k) is not None}
    if nc.get("on_device_sampling_config") is not None:
        parallel["on_device_sampling_config"] = nc["on_device_sampling_config"]
    elif nc.get("on_device_sampling"):  # optimum-neuron: a top-k of max_topk candidates on the device
        parallel["on_device_sampling_config"] = {"do_sample": True, "global_topk": nc.get("max_topk", DEFAULT_TOPK)}
    grids = {
        "prefill": Grid((int(prefill_batch),), tuple(sorted(int(s) for s in prefill))),
        "decode": Grid((int(decode_batch),), tuple(sorted(int(s) for s in decode))),
    }
    seqs = sorted({*grids["prefill"].seqs, *grids["decode"].seqs})
    entry = {**entry, "batch": sorted({prefill_batch, decode_batch}), "seq": seqs, "dtype": [str(dtype)]}
    deployed = Deployed(sharding(parallel, nc["tp_degree"], where), grids)
    return Layout(entry, [deployed], tuple(assumed), dtype_from_file=True)


def _dtype(value: object, path: Path, where: str) -> str | None:
    """A torch_dtype as the file writes it ("bfloat16", "torch.bfloat16") as a sweep dtype."""
    if value is None:
        return None
    name = str(value).removeprefix("torch.")
    if name not in TORCH_DTYPE_NAMES:
        raise UserError(
            f"{where}: neuron_config {path} has torch_dtype {value!r}; neuron-sweep measures "
            f"{', '.join(TORCH_DTYPE_NAMES)}."
        )
    return TORCH_DTYPE_NAMES[name]


def buckets(smallest: int, longest: int) -> list[int]:
    """autobucketing.py's generate_buckets: powers of two from `smallest` below 2^round(log2(longest)), then
    the longest (1400 gives 128, 256, 512, 1400)."""
    if smallest >= longest:
        return [longest]
    return [2**i for i in range(int(math.log2(smallest)), round(math.log2(longest)))] + [longest]


def check_tp(shardings: list[Sharding], family: str | None, where: str) -> None:
    """A TP degree the instance family does not run is one sentence (NxD Inference's supported degrees)."""
    allowed = SUPPORTED_TP.get(family or "")
    for s in shardings:
        if allowed and s.tp not in allowed:
            raise UserError(
                f"{where}: parallel.tp_degree {s.tp} is not one NxD Inference supports on {family} "
                f"({', '.join(map(str, allowed))}; nxd-inference api-guide); pick one of those, or another target."
            )


def rank_config(config: dict, s: Sharding, phase: str, where: str) -> RankConfig:
    """The rank's config fields at `s` in `phase`, or one sentence where NxD Inference could not split the
    model so. Heads: gqa.py's get_shardable_head_counts; a dense intermediate padded to tp's multiple, the
    vocabulary too; experts: experts / moe_ep of them, their intermediate / moe_tp."""
    tp = s.tp
    if tp == 1 and not s.moe:
        return RankConfig({}, {"tp": 1, "stack": NXD_INFERENCE})
    heads, kv, head_dim, _ = model_dims(config, where)
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
        "stack": NXD_INFERENCE,
        "q_heads_per_rank": q_total // tp,
        "kv_heads_per_rank": kv_total // tp,
        "kv_sharding": kv_rule,
        "column_parallel": "q, k, v, gate, up (N / tp)",
        "row_parallel": "o, down (K / tp)",
        "lm_head": f"vocab-parallel (N = vocab / {tp})",
    }
    if q_total != heads:
        labels["q_heads_padded"] = f"{heads} -> {q_total}"
    key = experts_key(config)
    if isinstance(config.get("intermediate_size"), int):  # ColumnParallelLinear(pad=True) in every dense MLP
        inter = config["intermediate_size"]
        fields["intermediate_size"] = math.ceil(inter / tp)
        if inter % tp:
            labels["intermediate_padded"] = f"{inter} -> {fields['intermediate_size'] * tp}"
    if isinstance(config.get("shared_expert_intermediate_size"), int):
        fields["shared_expert_intermediate_size"] = split(
            config["shared_expert_intermediate_size"], tp, "shared_expert_intermediate_size", where, NXD_INFERENCE
        )
    vocabulary(config, tp, fields, labels)
    if key is None:
        if s.moe:
            raise UserError(
                f"{where}: parallel sets MoE degrees, but the model has no experts (num_experts, "
                "num_local_experts or n_routed_experts)."
            )
        return RankConfig(fields, labels)
    if "moe_intermediate_size" not in config:  # the experts' intermediate is intermediate_size: split, not padded
        fields.pop("intermediate_size", None)
        labels.pop("intermediate_padded", None)
    moe_tp, moe_ep = s.moe_degrees(phase)
    return experts(config, moe_tp, moe_ep, phase, fields, labels, where, "NxD Inference")


def collectives(
    config: dict, s: Sharding, phase: str, batch: int, seq: int, dtype: str, layer_kinds: list[LayerCount]
) -> list[Collective]:
    """Every collective a forward issues per rank:
    - the embedding: split over the hidden size by default (vocab_parallel off), it all-gathers its output
      (layers.py `_forward_shard_across_embed`), then reduce-scatters into the sequence-parallel layout in
      prefill with SP (model_base.py); vocab-parallel, it all-reduces (or reduce-scatters with SP);
    - a dense layer's two all-reduces (after o and after down); with SP in prefill an all-gather before
      attention and the MLP and a reduce-scatter after o and down instead (the decode graph turns SP off);
    - an MoE layer's experts: with SP an all-gather before them and a reduce-scatter after, else one
      all-reduce after them (NxD modules/moe/model.py; over the world under EP, which is the TP group's ranks);
    - sampling: the LM head's logits gathered where it runs on the host; on the device each rank's
      candidates, values and indices (operators/argmax.py: one a row; topk.py: global_topk a row).
    `layer_kinds`: the probe's kinds, each with its `layers` count and whether it is `moe`."""
    if s.tp == 1:
        return []
    size = hidden_bytes(config, batch, seq if phase == "prefill" else 1, dtype)
    dense = sum(k["layers"] for k in layer_kinds if not k.get("moe"))
    moe = sum(k["layers"] for k in layer_kinds if k.get("moe"))
    sp = s.sequence_parallel and phase == "prefill"
    experts_group = "world" if s.moe_degrees(phase)[1] > 1 else "tp"
    out = []
    if s.vocab_parallel:
        op = "reduce_scatter" if sp else "all_reduce"
        out.append(Collective(op, size, s.tp, "tp", 1, "the vocabulary-parallel embedding's output"))
    else:
        out.append(Collective("all_gather", size, s.tp, "tp", 1, "the embedding's output (split over hidden)"))
        if sp:
            out.append(Collective("reduce_scatter", size, s.tp, "tp", 1, "the embedding into the SP layout"))
    if sp:
        out += [
            Collective("all_gather", size, s.tp, "tp", 2 * dense + moe, "before attention and the MLP (SP)"),
            Collective("reduce_scatter", size, s.tp, "tp", 2 * dense + moe, "after o and down (SP)"),
        ]
        if moe:
            out += [
                Collective("all_gather", size, s.tp, "tp", moe, "every token onto every rank, before the experts"),
                Collective("reduce_scatter", size, s.tp, "tp", moe, "after the experts"),
            ]
    else:
        out.append(Collective("all_reduce", size, s.tp, "tp", 2 * dense + moe, "after o and after down"))
        if moe:
            out.append(Collective("all_reduce", size, s.tp, experts_group, moe, "after the experts"))
    out += _sampling(config, s, batch, dtype)
    return merged(out)


def _sampling(config: dict, s: Sharding, batch: int, dtype: str) -> list[Collective]:
    """What sampling gathers: the whole vocabulary's logits on the host, each rank's candidates on the device."""
    vocab = math.ceil(config.get("vocab_size", 0) / s.tp)
    if not s.sampling_on_device:
        return [
            Collective("all_gather", batch * vocab * s.tp * DTYPE_BYTES[dtype], s.tp, "tp", 1, "the LM head's logits")
        ]
    per_rank = min(s.sampling_topk, vocab) if s.sampling_topk else 1
    how = f"top-{s.sampling_topk}" if s.sampling_topk else "argmax"
    rows = batch * per_rank * s.tp
    return [
        Collective("all_gather", rows * DTYPE_BYTES[dtype], s.tp, "tp", 1, f"each rank's {how} candidates' logits"),
        Collective("all_gather", rows * INDEX_BYTES, s.tp, "tp", 1, f"each rank's {how} candidates' int64 indices"),
    ]
