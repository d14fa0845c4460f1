"""A model as NxD Inference runs it (issue 73): each rank's shard and the collectives each forward issues,
checked by hand against the rules of ../shared/reference/parallelism.md (gqa.py's head counts, the
parallelism app note's collectives, the MoE deep dive), then planned from a config as a user writes it:
each rank's GEMMs, the layers as one rank's shard, the same plan from a neuron_config.json, and bad input as
one sentence before any job."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import DATA

from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.workloads import nxd_inference
from neuronsweep.workloads.deployment import entry_layout
from neuronsweep.workloads.nxd_inference import collectives, rank_config
from neuronsweep.workloads.sharding import Collective, Grid, Sharding

# a GQA model with 16 Q heads of 64 and 4 KV heads: tp 2 is below its KV heads, 4 equal, 8 above, 6 neither
GQA = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 3072}
GQA |= {"vocab_size": 32000, "num_hidden_layers": 2, "model_type": "llama"}
MOE = {"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}
MOE |= {"intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8}
MOE |= {"vocab_size": 151936, "num_hidden_layers": 48}


@pytest.mark.parametrize(
    ("tp", "q", "kv", "rule"),
    [
        (2, 8, 2, "KV heads split, 2 a rank"),  # below: 4 KV heads over 2 ranks
        (4, 4, 1, "KV heads split, 1 a rank"),  # equal: one each
        (8, 2, 1, "REPLICATE_TO_TP_DEGREE: each of the 4 KV heads on 2 ranks"),  # above: replicated up to tp
        (6, 3, 3, "CONVERT_TO_MHA: tp 6 is not a multiple of the 4 KV heads"),  # 16 Q heads padded to 18
    ],
)
def test_a_ranks_heads_are_split_as_nxd_inference_splits_them(tp, q, kv, rule):
    rank = rank_config(GQA, Sharding(tp), "decode", "m")
    assert rank.fields["num_attention_heads"] == q and rank.fields["num_key_value_heads"] == kv
    assert rank.fields["head_dim"] == 64  # kept: 1024 / 16, whatever the rank's heads
    assert rank.labels["kv_sharding"] == rule
    assert rank.fields["intermediate_size"] == 3072 // tp and rank.fields["vocab_size"] == -(-32000 // tp)
    assert ("q_heads_padded" in rank.labels) is (tp == 6)


def test_an_moe_rank_holds_every_expert_under_tp_and_its_share_under_ep():
    tp_only = rank_config(MOE, Sharding(8), "decode", "m")
    assert tp_only.fields["num_experts"] == 128 and tp_only.fields["moe_intermediate_size"] == 768 // 8
    assert tp_only.expert_ep == 1
    ep = rank_config(MOE, Sharding(64, moe={"decode": (2, 32), "prefill": (2, 32)}), "decode", "m")
    assert ep.fields["num_experts"] == 128 // 32 and ep.fields["moe_intermediate_size"] == 768 // 2
    assert ep.expert_ep == 32 and ep.labels["experts_per_rank"] == 4
    assert ep.fields["intermediate_size"] == 6144 // 64  # a dense layer's MLP stays split over all of tp


def test_a_ranks_experts_get_the_busiest_ranks_share_of_every_token():
    from neuronsweep.workloads.routing import rank_share, tokens_per_expert

    whole = tokens_per_expert({"zipf": 1.2}, 64, 8, 128)
    assert rank_share({"zipf": 1.2}, 64, 8, 4, ep=32) == whole[:4]  # every token gathered: rank 0's 4 experts


def test_the_collectives_of_a_forward_by_phase_with_and_without_sequence_parallelism():
    """NxD's layers.py: the embedding, split over the hidden size by default (vocab_parallel false in
    config.py), all-gathers its output every forward; model_base.py reduce-scatters it into the SP layout
    in prefill. The LM head's logits are gathered where sampling runs on the host."""
    kinds = [{"layers": 2, "moe": False}]
    mb = 1 * 1024 * 2  # batch 1 x hidden 1024 x bf16, per token
    decode = collectives(GQA, Sharding(8), "decode", 1, 128, "bf16", kinds)
    assert decode == [
        Collective("all_gather", mb, 8, "tp", 1, "the embedding's output (split over hidden)"),
        Collective("all_reduce", mb, 8, "tp", 4, "after o and after down"),
        Collective("all_gather", 32000 * 2, 8, "tp", 1, "the LM head's logits"),
    ]
    prefill = collectives(GQA, Sharding(8), "prefill", 1, 128, "bf16", kinds)
    assert prefill[1] == Collective("all_reduce", 128 * mb, 8, "tp", 4, "after o and after down")
    sp = collectives(
        GQA, Sharding(8, sequence_parallel=True, sampling_on_device=True), "prefill", 1, 128, "bf16", kinds
    )
    assert [(c.op, c.nbytes, c.count) for c in sp[:2]] == [
        ("all_gather", 128 * mb, 5),  # the embedding's output, then before attention and the MLP in each layer
        ("reduce_scatter", 128 * mb, 5),  # into the SP layout once, then after o and down in each layer
    ]
    vocab_parallel = collectives(GQA, Sharding(8, vocab_parallel=True), "decode", 1, 128, "bf16", kinds)
    assert [(c.op, c.count) for c in vocab_parallel][:1] == [("all_reduce", 5)]  # the embedding's, then 4
    sp_decode = collectives(
        GQA, Sharding(8, sequence_parallel=True, sampling_on_device=True), "decode", 1, 128, "bf16", kinds
    )
    assert [(c.op, c.count) for c in sp_decode][:2] == [("all_gather", 1), ("all_reduce", 4)]  # no SP in decode
    assert collectives(GQA, Sharding(1), "decode", 1, 128, "bf16", kinds) == []


def test_sampling_on_the_device_gathers_each_ranks_candidates():
    """NxD's operators/argmax.py gathers each rank's max value and index (greedy: do_sample false, the
    default in config.py's OnDeviceSamplingConfig); topk.py gathers min(global_topk, the rank's vocabulary)
    of each (do_sample: global_topk 256 by default). Indices are torch.max's / torch.topk's int64."""
    kinds = [{"layers": 2, "moe": False}]
    greedy = nxd_inference.sharding({"on_device_sampling_config": {}}, 8, "m")
    assert (greedy.sampling_on_device, greedy.sampling_topk) == (True, None)
    gathered = [(c.nbytes, c.what) for c in collectives(GQA, greedy, "decode", 4, 128, "bf16", kinds)[2:]]
    assert gathered == [
        (4 * 8 * 2, "each rank's argmax candidates' logits"),  # batch 4 x 8 ranks x bf16
        (4 * 8 * 8, "each rank's argmax candidates' int64 indices"),
    ]
    sampled = nxd_inference.sharding({"on_device_sampling_config": {"do_sample": True}}, 8, "m")
    sizes = [c.nbytes for c in collectives(GQA, sampled, "decode", 4, 128, "bf16", kinds)[2:]]
    assert sizes == [4 * 256 * 8 * 2, 4 * 256 * 8 * 8]  # 256 candidates a rank (its 4000-token shard has them)


def test_an_moe_layer_gathers_every_token_in_prefill_and_all_reduces_in_decode():
    """NxD's modules/moe/model.py: without sequence parallelism an MoE layer ends with one all-reduce after
    its experts, in prefill as in decode (over the world under EP); with SP it all-gathers every token before
    them and reduce-scatters after."""
    kinds = [{"layers": 48, "moe": True}]
    s = Sharding(64, moe={"prefill": (2, 32), "decode": (2, 32)}, sampling_on_device=True)
    size = 4 * 2048 * 2  # batch 4, one token, hidden 2048, bf16
    decode = {c.op: c for c in collectives(MOE, s, "decode", 4, 1024, "bf16", kinds)}
    assert decode["all_reduce"].count == 48 + 48 and decode["all_reduce"].nbytes == size  # o's, then the experts'
    prefill = [(c.op, c.nbytes, c.count) for c in collectives(MOE, s, "prefill", 4, 1024, "bf16", kinds)]
    assert prefill[:2] == [
        ("all_gather", 1024 * size, 1),  # the embedding's output
        ("all_reduce", 1024 * size, 96),  # after o, and after the experts: no all-gather and reduce-scatter
    ]
    sp = replace(s, sequence_parallel=True)
    prefill_sp = [(c.op, c.count) for c in collectives(MOE, sp, "prefill", 4, 1024, "bf16", kinds)[:2]]
    assert prefill_sp == [("all_gather", 1 + 48 + 48), ("reduce_scatter", 1 + 48 + 48)]


@pytest.mark.parametrize(
    ("parallel_block", "model", "says"),
    [
        ({"tp_degree": 8, "moe_ep_degree": 4}, GQA, "parallel sets MoE degrees, but the model has no experts"),
        ({"tp_degree": 8, "moe_tp_degree": 2, "moe_ep_degree": 2}, MOE, r"must equal tp_degree \(8\) in prefill"),
        (
            {"tp_degree": 64, "moe_tp_degree": 1, "moe_ep_degree": 64},
            MOE | {"num_experts": 96},
            "96 experts do not split",
        ),
        ({"tp_degree": 5}, MOE, "moe_intermediate_size 768 does not split over 5 ranks"),  # NxD's divide()
    ],
)
def test_a_layout_nxd_inference_could_not_run_is_one_sentence(parallel_block, model, says):
    with pytest.raises(UserError, match=says):
        [layout] = entry_layout({"parallel": parallel_block}, "suites.model[0] (m)").shardings
        rank_config(model, layout, "prefill", "suites.model[0] (m)")


def test_a_dense_intermediate_tp_does_not_divide_is_padded():
    """NxD Inference's MLP builds gate, up and down with pad=True (modeling_llama.py), padding the
    intermediate to tp's multiple (NxD layers.py get_padding_length): 3072 over 5 ranks is 615 a rank."""
    rank = rank_config(GQA | {"num_attention_heads": 20, "num_key_value_heads": 5}, Sharding(5), "prefill", "m")
    assert rank.fields["intermediate_size"] == 615 and rank.labels["intermediate_padded"] == "3072 -> 3075"


def test_a_tp_degree_the_instance_family_does_not_run_is_one_sentence():
    layouts = [Sharding(4)]
    nxd_inference.check_tp(layouts, "inf2", "m")  # inf2 runs 1, 2, 4, 8 and 24
    with pytest.raises(
        UserError, match=r"^m: parallel.tp_degree 4 is not one NxD Inference supports on trn1 \(1, 2, 8"
    ):
        nxd_inference.check_tp(layouts, "trn1", "m")


def test_a_parallel_key_nxd_inference_does_not_have_is_one_sentence():
    cfg = {"run": "t", "suites": {"model": [{"name": "m", "hf_config": "x.json", "parallel": {"tp": 8}}]}}
    with pytest.raises(UserError, match="tp_degree|'tp'") as info:
        schema.validate(cfg)
    assert "\n" not in str(info.value) and "parallel" in str(info.value)


def test_a_neuron_config_gives_the_layout_batch_and_buckets(tmp_path):
    nc = {
        "neuron_config": {
            "tp_degree": 32,
            "batch_size": 4,
            "seq_len": 2048,
            "sequence_parallel_enabled": True,
            "enable_bucketing": True,
            "context_encoding_buckets": [512, 2048],
            "token_generation_buckets": [2048],
        }
    }
    path = tmp_path / "neuron_config.json"
    path.write_text(json.dumps(nc))
    deployed = entry_layout({"neuron_config": str(path), "batch": [1], "seq": [128]}, "m")
    assert (deployed.entry["batch"], deployed.entry["seq"]) == ([4], [512, 2048])
    assert deployed.shardings == [Sharding(32, sequence_parallel=True)]
    assert deployed.grids["prefill"] == Grid((4,), (512, 2048)) and deployed.grids["decode"] == Grid((4,), (2048,))
    assert deployed.entry["dtype"] == ["bf16"] and "dtype bf16 (NxD Inference's default" in deployed.assumed[0]
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))  # an HF config, not a neuron_config
    with pytest.raises(UserError, match=r"^m: neuron_config .* has no tp_degree: it is not the neuron_config.json"):
        entry_layout({"neuron_config": str(path)}, "m")


def test_nxd_inferences_buckets_round_the_top_and_each_phase_has_its_own(tmp_path):
    """autobucketing.py: generate_buckets(128, max) stops below 2^round(log2(max)), so 1400 gives 128, 256,
    512, 1400; prefill goes to max_context_length with ctx_batch_size sequences, decode to max_length with
    tkg_batch_size (config.py: both default to batch_size / seq_len)."""
    assert nxd_inference.buckets(128, 1400) == [128, 256, 512, 1400]
    assert nxd_inference.buckets(128, 1500) == [128, 256, 512, 1024, 1500]
    assert nxd_inference.buckets(128, 128) == [128]
    nc = {"tp_degree": 8, "batch_size": 4, "ctx_batch_size": 1, "seq_len": 4096, "max_context_length": 1400}
    (tmp_path / "nc.json").write_text(json.dumps(nc | {"enable_bucketing": True, "torch_dtype": "float16"}))
    deployed = entry_layout({"neuron_config": str(tmp_path / "nc.json")}, "m")
    assert deployed.grids["prefill"] == Grid((1,), (128, 256, 512, 1400))
    assert deployed.grids["decode"] == Grid((4,), (128, 256, 512, 1024, 2048, 4096))
    assert deployed.entry["dtype"] == ["fp16"] and deployed.assumed == ()


def test_optimum_neurons_neuron_config_is_read_with_its_own_keys(tmp_path):
    """optimum-neuron's NxDNeuronConfig (models/inference/backend/config.py) saves sequence_length, torch_dtype,
    continuous_batching (prefill then runs one sequence), on_device_sampling with max_topk, ep_degree."""
    nc = {"batch_size": 8, "sequence_length": 4096, "tp_degree": 2, "torch_dtype": "bfloat16", "target": "trn1"}
    nc |= {"continuous_batching": True, "on_device_sampling": True, "max_topk": 256, "ep_degree": 1}
    (tmp_path / "neuron_config.json").write_text(json.dumps(nc))
    deployed = entry_layout({"neuron_config": str(tmp_path / "neuron_config.json")}, "m")
    assert deployed.grids["prefill"] == Grid((1,), (4096,)) and deployed.grids["decode"] == Grid((8,), (4096,))
    assert deployed.entry["dtype"] == ["bf16"] and deployed.assumed == ()
    assert deployed.shardings == [Sharding(2, sampling_on_device=True, sampling_topk=256)]
    (tmp_path / "neuron_config.json").write_text(json.dumps(nc | {"ep_degree": 2}))
    with pytest.raises(UserError, match="^m: neuron_config .* sets ep_degree 2, a world of tp_degree x ep_degree"):
        entry_layout({"neuron_config": str(tmp_path / "neuron_config.json")}, "m")
    (tmp_path / "neuron_config.json").write_text(json.dumps({"tp_degree": 2}))
    assumed = entry_layout({"neuron_config": str(tmp_path / "neuron_config.json")}, "m").assumed
    assert [a.split(" (")[0] for a in assumed] == ["seq_len 128", "dtype bf16"]


@pytest.mark.torch
@pytest.mark.workflow  # the model probe in a child, twice (3.5 s): the README's tier
def test_the_plan_lists_each_ranks_gemms_and_the_same_plan_comes_from_a_neuron_config(tmp_path):
    """A GQA model planned at tp 4 (its KV heads) from YAML and from the neuron_config.json a checkpoint
    would write: the same scenarios, each GEMM one rank's, the collectives beside them."""
    pytest.importorskip("transformers")
    from helpers import DATA

    from neuronsweep.stages.plan import make_plan

    model = str(DATA / "models" / "tiny-llama-gqa.json")  # 8 Q heads, 2 KV heads of 32, hidden 256
    base = {"name": "g", "hf_config": model, "phases": ["decode"], "layers": False}
    yaml_form = {**base, "batch": [2], "seq": [64], "parallel": {"tp_degree": 4}}
    nc = {"tp_degree": 4, "batch_size": 2, "seq_len": 64, "torch_dtype": "float32"}
    (tmp_path / "nc.json").write_text(json.dumps({"neuron_config": nc}))
    file_form = {**base, "neuron_config": str(tmp_path / "nc.json")}
    plans = [
        make_plan(
            RunConfig.of(schema.validate({"run": "t", "cache_dir": str(tmp_path / "c"), "suites": {"model": [e]}})),
            "cpu",
        )
        for e in (yaml_form, file_form)
    ]
    assert [(s.id, s.labels) for s in plans[0].scenarios] == [(s.id, s.labels) for s in plans[1].scenarios]
    assert plans[0].workloads == plans[1].workloads
    shapes = {
        s.labels["gemm"]: (s.labels["m"], s.labels["k"], s.labels["n"])
        for s in plans[0].scenarios
        if "gemm" in s.labels
    }
    assert shapes["self_attn.q_proj"] == (2, 256, 2 * 32)  # 8 / 4 Q heads: column-parallel
    assert shapes["self_attn.k_proj"] == (2, 256, 32)  # tp 4 over 2 KV heads: replicated, one a rank
    assert shapes["self_attn.o_proj"] == (2, 64, 256)  # row-parallel: K / 4
    assert shapes["mlp.down_proj"] == (2, 512 // 4, 256) and shapes["lm_head"] == (2, 256, 1000 // 4)
    colls = [s for s in plans[0].scenarios if s.labels.get("part") == "collective"]
    assert {(c.labels["op"], c.labels["bytes"], c.labels["world"], c.labels["count"]) for c in colls} == {
        ("all_gather", 2 * 256 * 4, 4, 1),  # the embedding's output, split over hidden (vocab_parallel off)
        ("all_reduce", 2 * 256 * 4, 4, 4),  # 2 layers x (after o, after down) of batch 2 x hidden 256 fp32
        ("all_gather", 2 * 1000 * 4, 4, 1),  # the LM head's logits, gathered (sampling on the host)
    }


def test_the_run_targets_family_refuses_a_tp_degree_before_any_probe(tmp_path):
    """neuron.target (settled to the machine's family before the plan on neuron) decides the TP degrees:
    Llama 3.3 70B's tp 64 plans for trn2, and is one sentence for inf2, before the model is even traced."""
    from neuronsweep.stages.plan import make_plan

    entry = {"name": "l", "hf_config": str(tmp_path / "c.json"), "parallel": {"tp_degree": 64}}
    (tmp_path / "c.json").write_text(json.dumps(GQA))
    cfg = {"run": "t", "cache_dir": str(tmp_path / "c"), "neuron": {"target": "inf2"}, "suites": {"model": [entry]}}
    with pytest.raises(
        UserError, match=r"^suites.model\[0\] \(l\): parallel.tp_degree 64 is not one NxD Inference supports on inf2"
    ):
        make_plan(RunConfig.of(schema.validate(cfg)), "neuron")


def test_a_rank_whose_weights_and_cache_pass_its_cores_hbm_is_one_sentence(tmp_path):
    """Llama 3.3 70B at tp 2 on trn2: 35 B parameters a rank in bf16 are 66 GiB, over a core's 24 GiB. On trn2
    the deployment is vLLM Neuron's; NxD Inference's parallel: there is one sentence naming SDK 2.34."""
    from helpers import REPO

    from neuronsweep.stages.plan import make_plan

    model = str(REPO / "config/examples/models/llama-3.3-70b.json")
    serve = "vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 2 --max-model-len 256 --dtype bfloat16"
    entry = {"name": "l", "hf_config": model, "vllm": serve + " --max-num-seqs 1 --max-num-batched-tokens 256"}
    cfg = {"run": "t", "cache_dir": str(tmp_path / "c"), "neuron": {"target": "trn2"}, "suites": {"model": [entry]}}
    with pytest.raises(UserError, match=r"one rank's weights and KV cache at tp 2 take 6\d\.\d GiB, over the 24 GiB"):
        make_plan(RunConfig.of(schema.validate(cfg)), "neuron")
    cfg["suites"]["model"] = [{"name": "l", "hf_config": model, "parallel": {"tp_degree": 64}}]
    with pytest.raises(UserError, match=r"parallel: is NxD Inference's deployment, legacy on trn2: Neuron SDK 2.34"):
        make_plan(RunConfig.of(schema.validate(cfg)), "neuron")


@pytest.mark.torch
def test_a_model_with_a_pad_token_builds_its_ranks_shard_at_tp_2():
    """Issue 81: a config whose pad_token_id lies past a rank's share of the vocabulary failed at any tp > 1
    ("Padding_idx must be within num_embeddings"); the padding row is on another rank's shard, so the rank
    measured has none, and its embedding builds. A pad token inside the first rank's shard stays."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model = json.loads((DATA / "models" / "tiny-llama-gqa.json").read_text()) | {"pad_token_id": 999}
    rank = rank_config(model, Sharding(2), "decode", "m")
    assert rank.fields["vocab_size"] == 500 and rank.fields["pad_token_id"] is None
    assert rank.labels["pad_token_id"] == "999: on rank 1's shard of the vocabulary"
    config = AutoConfig.for_model(**(model | rank.fields))
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(config)
    assert built.model.embed_tokens.num_embeddings == 500 and built.model.embed_tokens.padding_idx is None
    assert rank_config(model | {"pad_token_id": 0}, Sharding(2), "decode", "m").fields.get("pad_token_id", 0) == 0


def test_an_moe_neuron_config_with_nxd_inferences_saved_defaults_runs_the_experts_over_the_tp_group(tmp_path):
    """Issue 81: MoENeuronConfig saves moe_tp_degree = moe_ep_degree = 1, which NxD Inference's
    initialize_moe_process_group (modules/moe_v2.py) reads as the whole TP group: every rank holds every
    expert, each expert's intermediate split over tp. Every MoE checkpoint was refused (1 x 1 != tp)."""
    config = {"neuron_config": {"tp_degree": 8, "moe_tp_degree": 1, "moe_ep_degree": 1, "batch_size": 1}}
    (tmp_path / "neuron_config.json").write_text(json.dumps(config | {"seq_len": 256}))
    [layout] = entry_layout({"neuron_config": str(tmp_path / "neuron_config.json")}, "m").shardings
    assert layout.tp == 8 and layout.moe_degrees("prefill") == layout.moe_degrees("decode") == (8, 1)
    rank = rank_config(MOE, layout, "decode", "m")
    assert rank.fields["num_experts"] == 128 and rank.fields["moe_intermediate_size"] == 768 // 8
    with pytest.raises(UserError, match="moe_tp_degree 2 without an moe_ep_degree above 1 has no effect"):
        entry_layout({"parallel": {"tp_degree": 8, "moe_tp_degree": 2}}, "m")
