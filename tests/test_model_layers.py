"""A model measured whole (suites.model `layers`): each kind of decoder layer and the head built from the
model's own forward with seeded weights, saved as a program without them and given them back identical,
the experts fed the routing policy's tokens; on cpu, the layer's time split by category (adding up to the
profiled span) and each GEMM's time inside the layer beside alone, rolled up per forward."""

from __future__ import annotations

import functools
import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from helpers import DATA, needs, snakemake, tiny_config

from neuronsweep import workloads
from neuronsweep.analysis.layer_categories import CATEGORIES, categorize
from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.stages.plan import _layer_scenarios, make_plan
from neuronsweep.stages.plan_fits import layers_that_fit
from neuronsweep.workloads import layer, working_set_bytes

pytestmark = needs("transformers", 'the model suite needs transformers: pip install -e ".[models]"')
# Qwen3-MoE's published fields, shrunk: hidden 128, 8 experts of 64, top 2, 2 layers of which the first
# dense (mlp_only_layers [0]): one model with both kinds of layer
MOE = DATA / "models" / "tiny-qwen3-moe.json"
ZIPF = {"zipf": 1.2}


@functools.cache
def probe_passes() -> dict[str, dict]:
    """The tiny MoE's prefill and decode at batch 2, seq 16, probed in one call (a model build each, 2-3 s)."""
    from neuronsweep.workloads.model_probe import probe

    phases = ["prefill", "decode"]
    entry = {"where": "t", "hf_config": str(MOE), "batch": [2], "seq": [16], "phases": phases, "routing": ZIPF}
    [passes] = probe({"entries": [entry]})["entries"]
    return {one["phase"]: one for one in passes}


@pytest.mark.torch
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_a_layer_saved_without_weights_gets_them_back_and_its_experts_the_policys_tokens(tmp_path, phase):
    import torch

    from neuronsweep.workloads import layer, routing

    one = probe_passes()[phase]
    assert [(k["index"], k["kind"], k["layers"]) for k in one["layers"]] == [(0, "dense", 1), (1, "moe", 1)]
    # prefill saves every part (the dense layer, the MoE layer, the head); decode, whose experts see other
    # tokens, its MoE layer (the other parts' export is the same code at another seq, 1 s each)
    parts = [*one["layers"], None] if phase == "prefill" else [k for k in one["layers"] if k["kind"] == "moe"]
    for kind in parts:
        spec = layer.spec({"name": "tiny", "hf_config": str(MOE)}, "sha", one, kind, "fp32", ZIPF)
        x = torch.randn(workloads.tensor_shapes(spec)["hidden_states"], generator=torch.Generator().manual_seed(1))
        torch.export.save(workloads.export_program(spec, (x,)), tmp_path / "p.pt2")
        # the program alone: smaller than the weights it runs with
        assert (tmp_path / "p.pt2").stat().st_size < layer.weight_bytes(layer.Part.of(spec)) or spec["part"] == "head"
        eager, seen = workloads.torch_module(spec), []
        for name, module in eager.named_modules():
            if name.endswith("experts"):
                module.register_forward_pre_hook(lambda m, args, seen=seen: seen.append(args[1]))
        with torch.no_grad():
            saved, own = workloads.load_program(tmp_path / "p.pt2", spec)(x), eager(x)
        for a, b in zip(saved if isinstance(saved, tuple) else [saved], own if isinstance(own, tuple) else [own]):
            assert torch.equal(a, b) and a.abs().sum() > 0  # the same seeded weights, the same program
        if kind and kind["kind"] == "moe":  # the hook ran after ours: what the experts were handed
            [index] = seen
            tokens = index.shape[0]
            load = sorted(Counter(index.flatten().tolist()).values(), reverse=True)
            assert load == [t for t in routing.tokens_per_expert(ZIPF, tokens, 2, 8) if t]


@pytest.mark.torch
def test_a_tied_lm_head_stays_tied_in_the_saved_program_and_its_float64_check(tmp_path):
    """A model whose LM head shares the embedding (Llama 3.2 1B, Qwen2.5 0.5B): the head's saved program, the
    module and the float64 reference give the same logits (materializing untied them once: 4 % apart)."""
    import numpy as np
    import torch

    from neuronsweep.workloads.model_probe import probe

    tied = tmp_path / "tied.json"
    tied.write_text(
        json.dumps(json.loads((DATA / "models" / "tiny-llama-gqa.json").read_text()) | {"tie_word_embeddings": True})
    )
    entry = {
        "where": "t",
        "hf_config": str(tied),
        "batch": [1],
        "seq": [8],
        "phases": ["decode"],
        "routing": "balanced",
    }
    [[one]] = probe({"entries": [entry]})["entries"]
    for kind in [None, *one["layers"]]:  # the head, and a layer of the same model (which holds neither weight)
        spec = layer.spec({"name": "tied", "hf_config": str(tied)}, "sha", one, kind, "fp32", "balanced")
        x = torch.randn(workloads.tensor_shapes(spec)["hidden_states"], generator=torch.Generator().manual_seed(1))
        torch.export.save(workloads.export_program(spec, (x,)), tmp_path / "p.pt2")
        with torch.no_grad():
            saved = layer.output_array(workloads.load_program(tmp_path / "p.pt2", spec)(x))
            own = layer.output_array(workloads.torch_module(spec)(x))
        assert np.array_equal(saved, own), spec["part"]
        ref = workloads.reference(spec, {"hidden_states": x.numpy()})
        assert np.abs(saved - ref).max() <= 1e-5 * np.abs(ref).max(), spec["part"]


def test_every_op_of_a_layer_falls_in_one_category_by_its_module_and_name():
    cases = {
        ("linear", "self_attn.q_proj", "Linear", ""): "gemm",
        ("matmul", "self_attn", "Qwen3MoeAttention", "attn_weights = torch.matmul(query, key_states)"): "attention",
        ("softmax", "self_attn", "Qwen3MoeAttention", ""): "attention",
        ("mul", "self_attn", "Qwen3MoeAttention", "q_embed = apply_rotary_pos_emb(q, k, cos, sin)"): "rope",
        ("cat", "rotary_emb", "Qwen3MoeRotaryEmbedding", ""): "rope",
        ("rsqrt", "input_layernorm", "Qwen3MoeRMSNorm", ""): "norm",
        ("linear", "mlp.gate", "Qwen3MoeTopKRouter", ""): "moe_routing",
        ("topk", "mlp.gate", "Qwen3MoeTopKRouter", ""): "moe_routing",
        ("transformers::grouped_mm_fallback", "mlp.experts", "Qwen3MoeExperts", ""): "gemm",
        ("sort", "mlp.experts", "Qwen3MoeExperts", ""): "moe_routing",
        ("index", "mlp", "DeepseekV3MoE", ""): "moe_routing",
        ("mul", "mlp", "Qwen3MoeMLP", "down_proj(act_fn(gate_proj(x)) * up_proj(x))"): "elementwise",  # a dense MLP
        ("view", "mlp", "Qwen3MoeMLP", ""): "other",
        ("silu", "mlp.experts.act_fn", "SiLUActivation", ""): "elementwise",
        ("add", "", "Qwen3MoeDecoderLayer", "hidden_states = residual + hidden_states"): "elementwise",
        ("_c10d_functional::all_reduce", "mlp", "RowParallel", ""): "collectives",
        ("arange", "", "", ""): "other",
    }
    assert {args: categorize(*args) for args in cases} == cases
    assert set(cases.values()) == set(CATEGORIES)


@pytest.mark.torch  # the plan traces the model in a child with torch
@pytest.mark.workflow  # that child, and three plans' memory checks (3-4 s): the README's tier
def test_a_layer_too_big_for_the_machine_is_unsupported_with_its_bytes_and_the_gemms_still_run(tmp_path, monkeypatch):
    cfg = tiny_config(
        tmp_path,
        calibrated=False,
        suites={"model": [{"name": "moe", "hf_config": str(MOE), "seq": [16], "phases": ["prefill"]}]},
    )
    plan = make_plan(RunConfig.of(schema.validate(cfg)), "cpu")
    gemms = {w for w in plan.workloads if w.startswith("matmul-")}
    layers_that_fit(plan, 2**20, "a 1 MiB machine")  # the MoE layer's fp32 weights are about 1 MiB
    moe = "layer-moe-l1-moe-prefill-b1-s16-balanced-fp32"
    assert plan.unsupported[moe].startswith("one l1-moe of moe needs 0.0 GiB (its 0.0 GiB of fp32 weights")
    assert "more than 80% of a 1 MiB machine (0.0 GiB); measure it on a larger machine" in plan.unsupported[moe]
    assert gemms <= set(plan.workloads)  # the model's GEMMs are not touched
    # on torch-xla the experts run as batched_mm: each of the 32 token-expert pairs (16 tokens, top 2; 4 a
    # expert under balanced) holds a copy of its expert's gate_up (128 x 128) and down (64 x 128) weights
    spec = next(
        s
        for s in make_plan(RunConfig.of(schema.validate(cfg)), "xla").workloads.values()
        if s.get("layer_kind") == "moe"
    )
    assert layer.gathered_expert_bytes(layer.Part.of(spec)) == 32 * (128 * 128 + 64 * 128) * 4
    for gathers, fits in ((False, True), (True, False)):
        plan = make_plan(RunConfig.of(schema.validate(cfg)), "xla")
        layers_that_fit(plan, 4 * 2**20, "a 4 MiB machine", gathers_experts=gathers)
        assert (moe in plan.workloads) is fits
    assert "0.0 GiB of expert weights gathered per token (batched_mm)" in plan.unsupported[moe]
    # where the output check runs in the same memory, its float64 copy of the weights counts too: a machine
    # the layer fits in without it, and not with it
    spec = make_plan(RunConfig.of(schema.validate(cfg)), "cpu").workloads[moe]
    memory = (working_set_bytes(spec) + 4 * spec["params"]) / 0.8  # half the float64 copy to spare
    for checks, fits in ((False, True), (True, False)):
        plan = make_plan(RunConfig.of(schema.validate(cfg)), "cpu")
        layers_that_fit(plan, memory, "this machine", checks_here=checks)
        assert (moe in plan.workloads) is fits
    assert "of their float64 copy for the output check" in plan.unsupported[moe]
    # on neuron with route auto the route is settled after the plan: settled to torch-xla, the layers are
    # checked again with the gathered copies (made too big for a trn2 core here); TorchNeuron's are not
    from neuronsweep import backends
    from neuronsweep.backends import neuron_setup
    from neuronsweep.stages.run_setup import settle_run

    monkeypatch.setattr(backends, "resolve", lambda choice, local=True: ("neuron", "backend neuron: a device"))
    monkeypatch.setattr(neuron_setup, "settle", lambda section, need_route: ({**section, "target": "trn2"}, {}))
    monkeypatch.setattr(layer, "gathered_expert_bytes", lambda part: 2**40 if part.layer_kind == "moe" else 0)
    for route, fits in (("torchneuron", True), ("xla", False)):
        monkeypatch.setattr(neuron_setup, "settle_route", lambda section, r=route: ({**section, "route": r}, {}))
        setup = settle_run(RunConfig.of(schema.validate({**cfg, "backend": "neuron"})))
        assert setup.config.section("neuron")["route"] == route and (moe in setup.plan.workloads) is fits
    assert "logical NeuronCore's HBM" in setup.plan.unsupported[moe]
    with pytest.raises(
        UserError, match=r"^suites.model \(m\): the model has no decoder layers neuron-sweep recognizes"
    ):
        _layer_scenarios({"name": "m"}, "sha", "balanced", {"layers": []}, "fp32")


@pytest.mark.slow
@pytest.mark.workflow
@pytest.mark.torch
def test_a_tiny_moe_model_is_measured_whole_on_cpu_and_rolled_up_per_forward(tmp_path):
    """A model with a dense and a MoE layer (prefill; decode's cache is the test above's): each layer's
    categories add up to its profiled span, the forward's estimate is its layers' and head's measured
    latency, and every GEMM of each layer has its time inside beside alone."""
    # balanced: every expert 4 tokens, so the experts' GEMMs are two cases (zipf: the test above)
    entry = {"name": "moe", "hf_config": str(MOE), "seq": [16], "phases": ["prefill"]}
    cfg = tiny_config(tmp_path, suites={"model": [entry]})
    snakemake(tmp_path, config=cfg)
    results = tmp_path / "results" / "t"
    table = pd.read_csv(results / "summary.csv")
    assert (table["status"] == "ok").all(), table.loc[table["status"] != "ok", ["scenario_id", "reason"]]
    parts = table[table["part"].notna()].set_index("scenario_id")
    assert sorted(parts.index) == [
        f"model-moe-prefill-b1-s16-{part}-fp32" for part in ("head", "l0-dense", "l1-moe-balanced")
    ]
    # each part checked against itself in float64 on the CPU (same seeded weights, same routed tokens)
    assert parts["correct"].astype(str).eq("True").all(), parts[["correct", "max_rel_error"]]
    for _, row in parts.iterrows():
        split = {c: row[f"split_{c}_s"] for c in CATEGORIES}
        assert all(v >= 0 for v in split.values()), split  # other is what no range covers: never negative
        assert sum(split.values()) == pytest.approx(row["split_span_s"], rel=0.02)
        assert split["gemm"] > 0 and (split["moe_routing"] > 0) == ("l1-moe" in row.name)
    metrics = json.loads(
        (results / "cpu/workloads/layer-moe-l1-moe-prefill-b1-s16-balanced-fp32/metrics.json").read_text()
    )
    assert set(metrics["gemms_inside_s"]) == {
        "mlp.experts",  # every expert's GEMMs: two grouped GEMMs in the layer
        "mlp.gate",
        "self_attn",  # attention's scores and weighted sum
        "self_attn.k_proj",
        "self_attn.o_proj",
        "self_attn.q_proj",
        "self_attn.v_proj",
    }
    forward = pd.read_csv(results / "suites/model-moe-forward.csv").set_index("phase")
    assert forward.loc["prefill", "forward_time_s"] == pytest.approx(
        (parts["layers"] * parts["latency_median_s"]).sum()
    )
    assert sum(forward.loc["prefill", f"{c}_pct"] for c in CATEGORIES) == pytest.approx(100)
    assert 0 < forward.loc["prefill", "gemm_pct"] < 100 and forward.loc["prefill", "gemms_alone_time_s"] > 0
    gap = pd.read_csv(results / "suites/model-moe-isolation.csv")
    assert set(gap["part"]) == {"dense", "moe", "head"} and gap["isolation_gap"].notna().all()
    assert (gap["inside_s"] > 0).all() and (gap["alone_s"] > 0).all()
    experts = gap[gap["module"] == "mlp.experts"].iloc[0]
    assert experts["gemms"] == 2 * 8  # gate_up and down of each of the 8 experts, each timed alone
    page = (results / "report.html").read_text()
    assert "model moe: the whole forward" in page and "isolation gap" in page


@pytest.mark.slow  # a whole model's sweep with gloo ranks: 181 s of a README `pytest` on CI (2026-12-02)
@pytest.mark.workflow
@pytest.mark.torch
def test_a_tp_2_forward_on_cpu_is_one_ranks_layers_plus_its_measured_collectives(tmp_path):
    """The tiny MoE model decoding at tp 2 with its experts split over the two ranks (moe_ep 2): its layers
    are one rank's shard (half the heads, 4 of the 8 experts), checked in float64, and its collectives run
    on 2 gloo ranks; the forward is the layers' time plus each collective's count x latency."""
    parallel = {"tp_degree": 2, "moe_tp_degree": 1, "moe_ep_degree": 2}
    entry = {"name": "moe", "hf_config": str(MOE), "seq": [16], "phases": ["decode"], "parallel": parallel}
    cfg = tiny_config(tmp_path, suites={"model": [entry]})
    snakemake(tmp_path, config=cfg)
    results = tmp_path / "results" / "t"
    table = pd.read_csv(results / "summary.csv")
    assert (table["status"] == "ok").all(), table.loc[table["status"] != "ok", ["scenario_id", "reason"]]
    parts = table[table["part"].isin(["layer", "head"])].set_index("scenario_id")
    assert sorted(parts.index) == [
        f"model-moe-decode-b1-s16-tp2-ep2-{part}-fp32" for part in ("head", "l0-dense", "l1-moe-balanced")
    ]
    assert parts["correct"].astype(str).eq("True").all(), parts[["correct", "max_rel_error"]]
    colls = table[table["part"] == "collective"].set_index("scenario_id")
    assert set(colls["op"]) == {"all_reduce", "all_gather"} and (colls["world"] == 2).all()
    assert (colls["latency_median_s"] > 0).all()
    q = table[table["scenario_id"] == "model-moe-decode-b1-s16-tp2-ep2-self_attn.q_proj-fp32"].iloc[0]
    assert (q["k"], q["n"]) == (128, 2 * 32)  # 2 of the 4 Q heads of 32: column-parallel
    forward = pd.read_csv(results / "suites/model-moe-forward.csv").iloc[0]
    measured = (parts["layers"] * parts["latency_median_s"]).sum() + (colls["count"] * colls["latency_median_s"]).sum()
    assert forward["tp"] == 2 and forward["forward_time_s"] == pytest.approx(measured)
    assert forward["collectives_time_s"] == pytest.approx((colls["count"] * colls["latency_median_s"]).sum())
    assert 0 < forward["collectives_pct"] < 100
    assert sum(forward[f"{c}_pct"] for c in CATEGORIES) == pytest.approx(100)
    # the same two layers run on both ranks at once (issue 82), beside their parts: each layer's latency and
    # four all-reduces (after o and after the MLP of each) of its hidden states
    ranked = table[table["part"] == "forward"].iloc[0]
    assert str(ranked["correct"]) == "True" and ranked["layers_run"] == 2
    alone = colls[colls["op"] == "all_reduce"].iloc[0]
    assert alone["bytes"] == 128 * 4 and forward["forward_measured_s"] == ranked["latency_median_s"]
    layer_s = parts.loc[parts["part"] == "layer", "latency_median_s"].sum()
    assert forward["forward_parts_s"] == pytest.approx(layer_s + 4 * alone["latency_median_s"])
    assert forward["forward_parts_gap_pct"] == pytest.approx(
        100 * (ranked["latency_median_s"] / forward["forward_parts_s"] - 1)
    )
    assert forward["forward_gap_in"].split(":")[0] in ("the collectives", "the layers' compute")
    assert ranked["straggler_rank"] in (0, 1) and pd.isna(ranked["collective_overlap_pct"])
    assert 0 <= ranked["collective_wait_pct"] < 100 and ranked["forward_collective_calls"] == 4
    waits = pd.read_csv(results / "cpu/workloads" / ranked["workload_id"] / "tables/rank_waits.csv")
    assert len(waits) == 2 * 4 * 3 and (waits.groupby("instance")["wait_s"].min() == 0).all()
    assert "forward_measured_s" in (results / "report.html").read_text()


@pytest.mark.slow
@pytest.mark.workflow
def test_the_torchneuron_standin_builds_captures_and_extracts_the_layers_and_the_head(tmp_path):
    """Both kinds of layer and the head through TorchNeuron (the trn2 stand-in of SDK 2.33), at decode with
    its KV cache: each part moved to the neuron device whole and compiled in one graph, captured, viewed
    and extracted like any case. transformers' mask, positions and cache make tensors on the device
    (torch.arange(device=...), torch.tensor([], device=...)) and index them, and its grouped experts count
    tokens with an integer histc off the CPU: all of it runs on the device as on any PyTorch device. Each
    part is compiled with the HLO debug variables, so its profile's framework ops split it by category."""
    from helpers import neuron_config, torchneuron_env

    entry = {"name": "moe", "hf_config": str(MOE), "seq": [16], "phases": ["decode"]}
    cfg = neuron_config(tmp_path, suites={"model": [entry]})
    cfg["neuron"]["route"] = "auto"
    ids = ["layer-moe-head-decode-b1-s16-fp32", "layer-moe-l0-dense-decode-b1-s16-fp32"]
    ids.append("layer-moe-l1-moe-decode-b1-s16-balanced-fp32")
    targets = [f"results/t/neuron/workloads/{w}/metrics.json" for w in ids]
    snakemake(tmp_path, *targets, config=cfg, env=torchneuron_env(tmp_path))
    workloads = tmp_path / "results" / "t" / "neuron" / "workloads"
    for wid in ids:
        build = json.loads((workloads / wid / "build" / "build.json").read_text())
        assert build["route"] == "torchneuron" and build["target"] == "trn2", wid
        assert build["correctness"]["correct"] is True, (wid, build["correctness"])  # against itself in float64
        metrics = json.loads((workloads / wid / "metrics.json").read_text())
        assert metrics["latency_median_s"] > 0 and metrics["profile_total_time_s"] > 0, wid
        # compiled with XLA_IR_DEBUG/XLA_HLO_DEBUG, as the docs recommend for every capture method: the
        # profile's FrameworkInstruction table splits the layer, adding up to its total_time
        split = {c: metrics[f"split_{c}_s"] for c in CATEGORIES}
        assert build["env"]["XLA_HLO_DEBUG"] == "1" and split["gemm"] > 0, (wid, split)
        assert sum(split.values()) == pytest.approx(metrics["profile_total_time_s"], rel=1e-6), wid
    moe = json.loads((workloads / ids[2] / "metrics.json").read_text())
    assert moe["split_moe_routing_s"] > 0


@pytest.mark.slow
@pytest.mark.workflow
@pytest.mark.torch
def test_a_layer_on_the_neuron_xla_route_is_split_by_category_from_its_profiles_framework_ops(tmp_path):
    """The torch-xla route (SDK <= 2.31, the inf2/trn1 stand-in) compiles a layer with XLA_IR_DEBUG=1 and
    XLA_HLO_DEBUG=1, so Neuron Explorer's parquet has a FrameworkInstruction table, one row per framework op
    named by the modules it ran in: the split reads it, each category from the op and its innermost module,
    and the categories add up to the profile's total_time. The dense layer has GEMMs, attention and norms; the
    MoE layer's router and top-k are moe_routing."""
    from helpers import neuron_config, standin_env

    entry = {"name": "moe", "hf_config": str(MOE), "seq": [16], "phases": ["decode"]}
    cfg = neuron_config(tmp_path, suites={"model": [entry]})
    ids = ["layer-moe-l0-dense-decode-b1-s16-fp32", "layer-moe-l1-moe-decode-b1-s16-balanced-fp32"]
    targets = [f"results/t/neuron/workloads/{w}/metrics.json" for w in ids]
    snakemake(tmp_path, *targets, config=cfg, env=standin_env(tmp_path))
    workloads = tmp_path / "results" / "t" / "neuron" / "workloads"
    for wid in ids:
        build = json.loads((workloads / wid / "build" / "build.json").read_text())
        assert build["route"] == "xla" and build["env"]["XLA_HLO_DEBUG"] == "1", wid
        metrics = json.loads((workloads / wid / "metrics.json").read_text())
        split = {c: metrics[f"split_{c}_s"] for c in CATEGORIES}
        assert sum(split.values()) == pytest.approx(metrics["profile_total_time_s"], rel=0.02), wid
        assert split["gemm"] > 0 and split["attention"] > 0 and split["norm"] > 0 and split["other"] > 0, (wid, split)
        assert "FrameworkInstruction" in metrics["notes"]["split_span_s"], wid
        assert metrics["gemms_inside_s"] is None and "module classes" in metrics["notes"]["gemms_inside_s"]
        # each category's window bounded from the parquet tables (the stand-in's GEMMs keep TensorE busy, its
        # other ops the DMA: tests/standin/README.md), and the bottlenecks in one summary.csv line
        bounds = metrics["split_bounds"]
        assert bounds["gemm"]["bottleneck_engine"] == "tensor" and bounds["norm"]["bottleneck_engine"] == "dma", wid
        assert bounds["gemm"]["bound_reference_s"] > 0 and bounds["gemm"]["bound_compute_ideal_s"] > 0, wid
        assert "gemm: tensor" in metrics["split_bottlenecks"] and "norm: dma" in metrics["split_bottlenecks"], wid
    moe = json.loads((workloads / ids[1] / "metrics.json").read_text())
    assert moe["split_moe_routing_s"] > 0


@pytest.mark.torch
@pytest.mark.workflow  # the plan's probe child and a layer's torch.export (11 s): the README's tier
def test_an_ep_rank_with_fewer_experts_than_top_k_plans_builds_and_takes_its_share_of_the_slots(tmp_path):
    """Issue 81: the tiny MoE model (8 experts, 2 a token) at tp 8 with moe_ep 8 holds one expert a rank, fewer
    than top_k: its router failed ("k not in range for dimension"). The rank's router now picks among its own
    experts (the rank's labels say so), and its one expert gets the rank's share of the model's 2 slots a token
    (balanced: 16 tokens x 2 / 8 experts = 4), padded to whole rows of one slot a token as every EP rank's are;
    the plan's GEMMs count the 4."""
    import torch

    entry = {"name": "moe", "hf_config": str(MOE), "seq": [16], "phases": ["prefill"]}
    entry["parallel"] = {"tp_degree": 8, "moe_tp_degree": 1, "moe_ep_degree": 8}
    plan = make_plan(RunConfig.of(schema.validate(tiny_config(tmp_path, suites={"model": [entry]}))), "cpu")
    spec = next(s for s in plan.workloads.values() if s.get("layer_kind") == "moe")
    assert spec["rank_config"]["num_experts"] == 1 and spec["rank_config"]["num_experts_per_tok"] == 1
    assert spec["top_k"] == 2 and spec["expert_ep"] == 8
    [labels] = [s.labels for s in plan.scenarios if s.workload_id == workloads.workload_id(spec)]
    assert labels["top_k_per_rank"] == "2 -> 1: the rank's router over its own experts"
    module, seen = workloads.torch_module(spec), []
    for name, part in module.named_modules():
        if name.endswith("experts"):
            part.register_forward_pre_hook(lambda m, args, seen=seen: seen.append(args[1]))
    x = torch.randn(workloads.tensor_shapes(spec)["hidden_states"], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = layer.output_array(module(x))
    [index] = seen
    assert Counter(index.flatten().tolist()) == {0: 16} and np.isfinite(out).all()
    gemms = [s.labels for s in plan.scenarios if ".experts." in s.id]
    assert len(gemms) == 2 and {(g["m"], g["top_k"], g["expert_load"]) for g in gemms} == {(4, 2, "4")}
