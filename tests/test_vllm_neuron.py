"""A model as vLLM Neuron serves it (issue 81): the `vllm serve` line read as vLLM Neuron reads it, its graphs,
one rank's shard and each step's collectives, checked against the numbers the plugin's design docs print
(vllm-neuron/docs/design/parallelism/tensor_parallelism.md and expert_parallelism.md: GPT-OSS-20B at t = 8;
../shared/reference/vllm-neuron.md sections 2-4), then planned from a config as a user writes it."""

from __future__ import annotations

import pytest
from helpers import DATA

from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.workloads import vllm_neuron
from neuronsweep.workloads.deployment import entry_layout
from neuronsweep.workloads.sharding import Grid

# GPT-OSS-20B as the TP and EP pages size it: hidden 3072, 64 Q and 8 KV heads, 32 experts (top 4) of an
# intermediate 3072 (their gate_up [32, 3072, 768] at t = 8 is 2 x 3072 / 8), vocabulary 201,088
GPT_OSS = {"hidden_size": 3072, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64}
GPT_OSS |= {"num_local_experts": 32, "num_experts_per_tok": 4, "intermediate_size": 3072, "vocab_size": 201088}
GPT_OSS |= {"num_hidden_layers": 24}
L70B = (  # the Llama 3.3 70B tutorial's serve line (tutorial-llama3-70b.md)
    "vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 16 --enable-prefix-caching "
    "--max-model-len 16384 --max-num-batched-tokens 8192 --max-num-seqs 8 --block-size 128 --optimization-level 2 "
    '--additional-config \'{"neuron_config":{"kv_segment_size_buckets":[8192],'
    '"num_batched_tokens_buckets":[8192],"num_seqs_buckets":[8],"fp8_packed_kv":true}}\''
)


def layout(vllm: str | dict):
    return entry_layout({"vllm": vllm}, "m")


def test_a_serve_line_and_its_flags_as_keys_give_the_same_graphs():
    line = layout(L70B)
    assert line.grids == {"prefill": Grid((1,), (8192,)), "decode": Grid((8,), (16384,))}
    assert line.shardings[0].tp == 16 and line.shardings[0].sequence_parallel
    keys = layout(
        {
            "tensor_parallel_size": 16,
            "max_model_len": 16384,
            "max_num_batched_tokens": 8192,
            "max_num_seqs": 8,
            "block_size": 128,
            "additional_config": {"neuron_config": {"num_batched_tokens_buckets": [8192], "num_seqs_buckets": [8]}},
        }
    )
    assert keys.grids == line.grids and keys.shardings == line.shardings
    assert schema.validate({"run": "t", "suites": {"model": [{"name": "l", "hf_config": "c.json", "vllm": L70B}]}})


def test_the_default_buckets_are_the_schedulers():
    """neuron-scheduler.md: prefill buckets are powers of two from 128 up to min(max_num_batched_tokens,
    max_model_len); decode batches powers of two from 1 up to max_num_seqs; each decode graph attends over
    the whole block table, ceil(max_model_len / block_size) blocks (decode-context-length-bucketing.md)."""
    served = layout("vllm serve m --max-model-len 1000 --max-num-seqs 5")
    assert served.grids["prefill"] == Grid((1,), (128, 256, 512, 1000))  # 2048 by default, then max_model_len
    assert served.grids["decode"] == Grid((1, 2, 4, 5), (1024,))  # 32 blocks of 32
    assert [a.split(" (")[0] for a in served.assumed] == ["max_num_batched_tokens 2048", "sampling on the device"]
    with_contexts = layout(
        {
            "max_model_len": 4096,
            "max_num_seqs": 4,
            "additional_config": {"neuron_config": {"decode_context_length_buckets": [1024, 2048]}},
        }
    )
    assert with_contexts.grids["decode"].seqs == (1024, 2048, 4096)


@pytest.mark.parametrize(
    ("vllm", "says"),
    [
        ("vllm serve m --max-model-len 1000 --tensor-paralel-size 2", "did you mean --tensor-parallel-size"),
        ("vllm serve m --max-num-seqs 4", "needs max_model_len"),
        ("python serve.py --max-model-len 10", "must be a `vllm serve MODEL"),
        ("vllm serve m --max-model-len 1000 --max-num-seqs x", "--max-num-seqs 'x' is not a positive whole number"),
        (
            {
                "max_model_len": 1024,
                "max_num_seqs": 8,
                "additional_config": {"neuron_config": {"num_seqs_buckets": [1, 4]}},
            },
            r"num_seqs_buckets's last entry 4 must equal max_num_seqs \(8\)",
        ),
        (
            {
                "max_model_len": 1024,
                "additional_config": {"neuron_config": {"num_batched_tokens_buckets": [512, 256, 1024]}},
            },
            "must be positive and strictly ascending",
        ),
        (
            {
                "max_model_len": 2048,
                "tensor_parallel_size": 16,
                "additional_config": {"neuron_config": {"num_batched_tokens_buckets": [200, 2048]}},
            },
            "prefill bucket 200 must be above and a multiple of tensor_parallel_size 16",
        ),
        (
            {"max_model_len": 1024, "additional_config": {"neuron_config": {"ep_degree": 2}}},
            "ep_degree 2 needs --enable-expert-parallel",
        ),
        (
            {"max_model_len": 1024, "additional_config": {"neuron_config": {"decode_context_length_buckets": [100]}}},
            "strictly ascending multiples of 128",
        ),
        (
            {"max_model_len": 1024, "additional_config": {"neuron_config": {"attention_dp_size": 2}}},
            "attention DP",
        ),
        (
            "vllm serve m --max-model-len 1024 -tp 4 -dp 2 --enable-expert-parallel --additional-config "
            '\'{"neuron_config": {"ep_degree": 4}}\'',
            r"ep_degree must be tensor_parallel_size x data_parallel_size \(8\), not 4",
        ),
        ('vllm serve m --max-model-len 1024 --speculative-config \'{"method": "eagle3"}\'', "speculative decoding"),
    ],
)
def test_a_deployment_vllm_neuron_would_refuse_is_one_sentence_before_any_job(vllm, says):
    with pytest.raises(UserError, match=says) as info:
        layout(vllm)
    assert "\n" not in str(info.value) and str(info.value).startswith("m: ")


def test_a_ranks_shard_at_t8_is_the_tp_pages():
    """tensor_parallelism.md at t = 8: embedding and LM head [25136, 3072] of [201088, 3072]; 8 Q heads and
    1 KV head a rank; every expert, its intermediate / 8 (gate_up [32, 3072, 768]); the router replicated."""
    [s] = layout("vllm serve openai/gpt-oss-20b --tensor-parallel-size 8 --max-model-len 2048").shardings
    rank = vllm_neuron.rank_config(GPT_OSS, s, "prefill", "m")
    assert rank.fields["vocab_size"] == 25136
    assert (rank.fields["num_attention_heads"], rank.fields["num_key_value_heads"]) == (8, 1)
    assert rank.fields["num_local_experts"] == 32 and 2 * rank.fields["intermediate_size"] == 768
    assert rank.expert_ep == 1 and rank.labels["router"].startswith("replicated")


@pytest.mark.parametrize(
    ("extra", "experts", "gate_up"),
    [
        ("--enable-expert-parallel", 4, 6144),  # full EP = 8: 4 experts a rank, whole (gate_up [4, 3072, 6144])
        ('--enable-expert-parallel --additional-config \'{"neuron_config": {"ep_degree": 2}}\'', 16, 1536),
    ],
)
def test_experts_are_placed_as_the_ep_page_places_them(extra, experts, gate_up):
    """expert_parallelism.md at 8 ranks: full EP places 4 whole experts a rank; EP 2 x TP 4 holds 16 experts
    a rank, each intermediate / 4 (gate_up [16, 3072, 1536])."""
    [s] = layout(f"vllm serve openai/gpt-oss-20b -tp 8 --max-model-len 2048 {extra}").shardings
    rank = vllm_neuron.rank_config(GPT_OSS, s, "decode", "m")
    assert rank.fields["num_local_experts"] == experts and 2 * rank.fields["intermediate_size"] == gate_up
    assert rank.expert_ep == 32 // experts


def test_expert_parallelism_across_replicas_gathers_every_replicas_tokens():
    """expert_parallelism.md and data_parallelism.md: with --data-parallel-size 2 the EP degree is tp x dp =
    8, a rank holds 32 / 8 experts whole, its experts get both replicas' tokens, and each MoE layer adds an
    all-gather over the DP group ([B, H] -> [B x DP, H]) and a reduce-scatter back, beside the TP group's."""
    [s] = layout("vllm serve openai/gpt-oss-20b -tp 4 -dp 2 --enable-expert-parallel --max-model-len 2048").shardings
    rank = vllm_neuron.rank_config(GPT_OSS, s, "decode", "m")
    assert (rank.fields["num_local_experts"], rank.fields["intermediate_size"]) == (4, 3072)
    assert (rank.expert_ep, rank.expert_tokens) == (8, 2) and s.label("decode", True) == "tp4-ep8-dp2"
    kinds = [{"layers": 24, "moe": True}]
    found = {
        (c.op, c.world, c.nbytes): c.count
        for c in vllm_neuron.collectives(GPT_OSS, s, "decode", 4, 2048, "bf16", kinds)
    }
    assert found[("all_gather", 2, 4 * 2 * 3072 * 2)] == 24 and found[("reduce_scatter", 2, 4 * 2 * 3072 * 2)] == 24
    assert found[("all_reduce", 4, 4 * 3072 * 2)] == 1 + 2 * 24
    dense = layout("vllm serve m -tp 4 -dp 2 --max-model-len 2048").shardings[0]
    assert {c.world for c in vllm_neuron.collectives(GPT_OSS, dense, "decode", 4, 2048, "bf16", kinds)} == {4}


def test_each_steps_collectives_are_the_tp_pages():
    """tensor_parallelism.md: prefill (T = 2048, bf16, t = 8) moves [T, H] = 12 MiB per all-gather output and
    reduce-scatter input: the embedding's reduce-scatter, an all-gather and a reduce-scatter around attention
    and the MLP in each layer, the final norm's all-gather, and an MoE layer's affinities [T, E]; decode
    (B = 4) all-reduces [B, H] = 24 KiB after the embedding and twice a layer. With sampling on the device
    no logits are gathered; on the host the LM head gathers [B, V]."""
    [s] = layout("vllm serve openai/gpt-oss-20b -tp 8 --max-model-len 2048").shardings
    kinds = [{"layers": 24, "moe": True}]
    prefill = {
        (c.op, c.nbytes): c.count for c in vllm_neuron.collectives(GPT_OSS, s, "prefill", 1, 2048, "bf16", kinds)
    }
    assert prefill == {
        ("reduce_scatter", 12 * 2**20): 1 + 2 * 24,
        ("all_gather", 12 * 2**20): 2 * 24 + 1,
        ("all_gather", 2048 * 32 * 2): 24,
    }
    decode = vllm_neuron.collectives(GPT_OSS, s, "decode", 4, 2048, "bf16", kinds)
    assert [(c.op, c.nbytes, c.count) for c in decode] == [("all_reduce", 24 * 2**10, 1 + 2 * 24)]
    on_host = layout(
        {
            "tensor_parallel_size": 8,
            "max_model_len": 2048,
            "additional_config": {"neuron_config": {"on_device_sampling_config": None}},
        }
    ).shardings[0]
    logits = vllm_neuron.collectives(GPT_OSS, on_host, "decode", 4, 2048, "bf16", kinds)[-1]
    assert (logits.op, logits.nbytes) == ("all_gather", 4 * 201088 * 2)


def test_decode_gemms_are_labelled_with_the_fused_kernel_they_run_in():
    assert vllm_neuron.fused("decode", "model.layers.*.self_attn.q_proj", False).startswith("the attention-block")
    assert vllm_neuron.fused("prefill", "model.layers.*.self_attn.o_proj", False) is None
    assert vllm_neuron.fused("prefill", "model.layers.*.self_attn.k_proj", False).startswith("the QKV kernel")
    assert vllm_neuron.fused("decode", "model.layers.*.mlp.experts", True).startswith("the MoE TKG kernel")
    assert vllm_neuron.fused("prefill", "model.layers.*.self_attn", False) == "the flash-attention kernel"
    assert vllm_neuron.fused("decode", "lm_head", False) is None


@pytest.mark.torch
@pytest.mark.workflow  # the model probe in a child, two layouts (4 s): the README's tier
def test_a_serve_line_plans_each_graph_as_one_ranks_gemms_and_collectives(tmp_path):
    """A tiny GQA model (8 Q heads, 2 KV heads of 32, hidden 256, vocabulary 1000) from a serve line at tp 2:
    prefill at batch 1 for each token bucket, decode at each batch bucket over the block table, each GEMM one
    rank's, decode's labelled with its fused kernel, the collectives beside them, and what was assumed said."""
    pytest.importorskip("transformers")
    from neuronsweep.stages.plan import make_plan

    serve = "vllm serve tiny --tensor-parallel-size 2 --max-model-len 256 --max-num-seqs 4 --max-num-batched-tokens 256"
    entry = {"name": "t", "hf_config": str(DATA / "models" / "tiny-llama-gqa.json"), "vllm": serve, "layers": False}
    plan = make_plan(
        RunConfig.of(schema.validate({"run": "t", "cache_dir": str(tmp_path / "c"), "suites": {"model": [entry]}})),
        "cpu",
    )
    graphs = {(s.labels["phase"], s.labels["batch"], s.labels["seq"]) for s in plan.scenarios}
    assert graphs == {
        ("prefill", 1, 128),
        ("prefill", 1, 256),
        ("decode", 1, 256),
        ("decode", 2, 256),
        ("decode", 4, 256),
    }
    q = {
        s.labels["phase"]: s.labels
        for s in plan.scenarios
        if s.labels.get("gemm") == "self_attn.q_proj" and s.labels["batch"] == 1
    }
    assert (q["prefill"]["m"], q["prefill"]["n"]) == (256, 4 * 32) and q["decode"]["n"] == 4 * 32  # 8 / 2 Q heads
    assert (
        q["decode"]["fused_on_device"].startswith("the attention-block kernel")
        and q["decode"]["stack"] == "vLLM Neuron"
    )
    assert "sampling on the device" in q["decode"]["assumed"]
    colls = {(s.labels["phase"], s.labels["op"]) for s in plan.scenarios if s.labels.get("part") == "collective"}
    assert colls == {("prefill", "reduce_scatter"), ("prefill", "all_gather"), ("decode", "all_reduce")}
    # the rules do not depend on the backend: the trn2 stand-in's plan (neuron, target trn2) is the same cases
    on_trn2 = {"run": "t", "cache_dir": str(tmp_path / "c"), "neuron": {"target": "trn2"}, "suites": {"model": [entry]}}
    neuron = make_plan(RunConfig.of(schema.validate(on_trn2)), "neuron")
    assert [(s.id, s.workload_id) for s in neuron.scenarios] == [(s.id, s.workload_id) for s in plan.scenarios]


@pytest.mark.slow  # a model's two graphs with gloo ranks
@pytest.mark.workflow
@pytest.mark.torch
def test_a_serve_line_runs_on_cpu_each_graph_one_ranks_layers_plus_its_measured_collectives(tmp_path):
    """The tiny MoE model (4 Q heads, 2 KV heads, 8 experts, top 2) served at tp 2 on 2 replicas with expert
    parallelism (ep 4): its prefill graph (32 tokens, batch 1) and decode graph (batch 1 over the 32-token
    block table) run as one rank's shard (2 Q heads, one KV head, 2 whole experts fed both replicas' tokens),
    checked in float64; each step's collectives run on 2 gloo ranks (the TP group's and the DP group's), and
    each graph's forward is its layers plus its collectives' count x latency."""
    import pandas as pd
    from helpers import snakemake, tiny_config

    serve = (
        "vllm serve tiny-moe -tp 2 -dp 2 --enable-expert-parallel --max-model-len 32 --max-num-seqs 1 --block-size 16"
    )
    entry = {"name": "moe", "hf_config": str(DATA / "models" / "tiny-qwen3-moe.json"), "vllm": serve}
    snakemake(tmp_path, config=tiny_config(tmp_path, suites={"model": [entry]}))
    results = tmp_path / "results" / "t"
    table = pd.read_csv(results / "summary.csv")
    assert (table["status"] == "ok").all(), table.loc[table["status"] != "ok", ["scenario_id", "reason"]]
    layers = table[table["part"].isin(["layer", "head"])]
    assert layers["correct"].astype(str).eq("True").all(), layers[["scenario_id", "max_rel_error"]]
    colls = table[table["part"] == "collective"]
    assert set(zip(colls["phase"], colls["op"], colls["process_group"])) == {
        ("prefill", "reduce_scatter", "tp"),
        ("prefill", "all_gather", "tp"),
        ("decode", "all_reduce", "tp"),
        *((phase, op, "dp") for phase in ("prefill", "decode") for op in ("all_gather", "reduce_scatter")),
    }
    experts = table[table["gemm"].astype(str).str.startswith("mlp.experts.gate_up")]
    assert set(experts["experts"]) == {2} and set(experts["fused_on_device"].str[:11]) == {"the MoE CTE", "the MoE TKG"}
    forward = pd.read_csv(results / "suites/model-moe-forward.csv").set_index("phase")
    assert list(forward.loc[["prefill", "decode"], "seq"]) == [32, 32] and (forward["tp"] == 2).all()
    for phase, part in table.groupby("phase"):
        whole = part[part["part"].isin(["layer", "head"])]
        measured = (whole["layers"] * whole["latency_median_s"]).sum()
        measured += (part.loc[part["part"] == "collective", "count"] * part["latency_median_s"]).sum()
        assert forward.loc[phase, "forward_time_s"] == pytest.approx(measured), phase
