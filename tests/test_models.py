"""A real model's GEMMs as a suite (suites.model): a tiny Llama-class config with grouped-query attention
traced under fake tensors, its GEMM shapes and counts against hand-computed ones for prefill and decode,
shared builds with the matmul suite, and the roll-up; mixture-of-experts models of three families from
their published configs, each expert's GEMMs under a stated routing policy against hand-computed ones."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import DATA, needs, tiny_config

from neuronsweep.analysis import model_rollup
from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.stages.plan import make_plan

pytestmark = needs("transformers", 'the model suite needs transformers: pip install -e ".[models]"')
TINY = DATA / "models" / "tiny-llama-gqa.json"  # hidden 256, intermediate 512, 8 heads, 2 kv heads, 2 layers


def gemms(phase: str, batch: int, seq: int, config=TINY, **entry) -> dict:
    from neuronsweep.workloads.model_probe import probe

    entry = {"where": "t", "hf_config": str(config), "batch": [batch], "seq": [seq], "phases": [phase], **entry}
    [[one]] = probe({"entries": [entry]})["entries"]
    return {(g["module"], g["gemm"]): (g["m"], g["k"], g["n"], g["count"]) for g in one["gemms"]}


@pytest.mark.torch
def test_a_tiny_gqa_models_gemms_are_the_hand_computed_ones():
    h, i, heads, kv, d, layers, vocab, b, s = 256, 512, 8, 2, 32, 2, 1000, 2, 16
    L = "model.layers.*."
    prefill = gemms("prefill", b, s)
    assert prefill == {
        (L + "self_attn.q_proj", "linear1"): (b * s, h, heads * d, layers),
        (L + "self_attn.k_proj", "linear1"): (b * s, h, kv * d, layers),  # grouped-query: 2 kv heads
        (L + "self_attn.v_proj", "linear1"): (b * s, h, kv * d, layers),
        (L + "self_attn", "bmm1"): (s, d, s, b * heads * layers),  # scores q @ k^T, per head
        (L + "self_attn", "bmm2"): (s, s, d, b * heads * layers),  # weights @ v
        (L + "self_attn.o_proj", "linear1"): (b * s, heads * d, h, layers),
        (L + "mlp.gate_proj", "linear1"): (b * s, h, i, layers),
        (L + "mlp.up_proj", "linear1"): (b * s, h, i, layers),
        (L + "mlp.down_proj", "linear1"): (b * s, i, h, layers),
        ("lm_head", "linear1"): (b, h, vocab, 1),  # the last position only, as generation runs it
    }
    decode = gemms("decode", b, s)  # one new token against a KV cache of s tokens
    assert decode[L + "self_attn.q_proj", "linear1"] == (b, h, heads * d, layers)
    assert decode[L + "self_attn", "bmm1"] == (1, d, s + 1, b * heads * layers)
    assert decode[L + "self_attn", "bmm2"] == (1, s + 1, d, b * heads * layers)
    assert decode["lm_head", "linear1"] == (b, h, vocab, 1)


@pytest.mark.slow
@pytest.mark.torch
def test_model_gemms_share_builds_with_the_matmul_suite_and_a_bad_config_is_one_sentence(tmp_path):
    cfg = tiny_config(
        tmp_path,
        calibrated=False,  # it only plans
        suites={
            "matmul": {"grid": {"m": [32], "k": [256], "n": [512]}},
            "model": [{"name": "tiny", "hf_config": str(TINY), "batch": [2], "seq": [16], "phases": ["prefill"]}],
        },
    )
    plan = make_plan(RunConfig.of(schema.validate(cfg)), "cpu")
    shared = [s for s in plan.scenarios if s.workload_id == "matmul-m32-k256-n512-fp32"]
    assert {s.suite for s in shared} == {"matmul", "model-tiny"} and len(shared) == 3  # the suite, gate and up
    gemm_cases = [w for w in plan.workloads if w.startswith("matmul-")]
    assert len(gemm_cases) == 7  # 10 GEMMs + 1 matmul: q=o, k=v, gate=up=the matmul share shapes
    # and the model whole: its one kind of layer (both dense, full attention) and its head
    assert sorted(set(plan.workloads) - set(gemm_cases)) == [
        "layer-tiny-head-prefill-b2-s16-fp32",
        "layer-tiny-l0-dense-prefill-b2-s16-fp32",
    ]
    assert plan.workloads["layer-tiny-l0-dense-prefill-b2-s16-fp32"]["layers"] == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "no-such-model"}')
    cfg["suites"]["model"][0]["hf_config"] = str(bad)
    with pytest.raises(UserError, match=r"suites.model\[0\] \(tiny\): .*bad.json is not a transformers config"):
        make_plan(RunConfig.of(schema.validate(cfg)), "cpu")


def test_the_rollup_sums_count_times_latency_and_never_a_partial_total():
    rows = pd.DataFrame(
        {
            "model": "m",
            "phase": ["prefill"] * 3 + ["decode"] * 2,
            "batch": 1,
            "seq": 8,
            "dtype": "fp32",
            "gemm": ["q", "down", "lm_head", "q", "down"],
            "count": [2, 2, 1, 2, 2],
            "latency_median_s": [1e-3, 3e-3, 2e-3, 1e-4, None],  # decode's down failed
        }
    )
    out = model_rollup.rollup(rows)
    assert list(out["gemm_time_s"][:3]) == pytest.approx([2e-3, 6e-3, 2e-3])
    assert out["model_gemm_time_s"][0] == pytest.approx(10e-3) and out["share_pct"][1] == pytest.approx(60)
    assert out["model_gemm_time_s"][3:].isna().all()  # not every GEMM measured: no total, not a partial one
    lines = model_rollup.headlines(rows)
    assert lines[1].startswith("m prefill at batch 1, seq 8 (fp32): 60 % of its GEMM time in down")
    assert "not every GEMM was measured" in lines[0] and len(lines) == 2  # a dense model: no expert line
    moe = rows.assign(routing="zipf1", expert_load=["12/6/4/3/2/2/2/1"] * 3 + ["1/1/0/0/0/0/0/0"] * 2)
    assert model_rollup.headlines(moe)[2:] == [
        "m prefill at batch 1, seq 8: routing zipf1 (assumed), 8 of 8 experts get tokens, the busiest 12, the least "
        "busy of them 1",
        "m decode at batch 1, seq 8: routing zipf1 (assumed), 2 of 8 experts get tokens, the busiest 1, the least "
        "busy of them 1",
    ]


def published(name: str, tmp_path, layers: int):
    """A published MoE config.json (tests/data/models) with fewer layers: every other field as published."""
    import json

    fields = json.loads((DATA / "models" / f"{name}.json").read_text())
    (tmp_path / f"{name}.json").write_text(json.dumps({**fields, "num_hidden_layers": layers}))
    return tmp_path / f"{name}.json"


def test_routing_policies_give_the_hand_computed_tokens_per_expert():
    from neuronsweep.workloads.routing import tokens_per_expert

    assert tokens_per_expert("balanced", 16, 2, 8) == [4] * 8
    assert tokens_per_expert("balanced", 5, 2, 4) == [3, 3, 2, 2]  # 10 slots: the remainder one each
    assert tokens_per_expert("balanced", 1, 8, 128) == [1] * 8 + [0] * 120  # decode: top_k experts, a token each
    # zipf 1, 4 experts, 20 slots: 9.6, 4.8, 3.2, 2.4 -> by the largest remainder 10, 5, 3, 2
    assert tokens_per_expert({"zipf": 1}, 10, 2, 4) == [10, 5, 3, 2]
    # no expert takes more than every token: zipf 3 wants 6.8 of 8 slots for the first of 4 tokens' experts
    assert tokens_per_expert({"zipf": 3}, 4, 2, 4) == [4, 2, 1, 1]
    # a measured load's shares, scaled to this forward: 600, 300, 100 of 1000 -> 6, 3, 1 of 10
    assert tokens_per_expert({"counts": [100, 600, 300]}, 10, 1, 3) == [6, 3, 1]
    # 5 tokens, top 2: the busiest can take 5 of its 6, the one left goes to the next by its share
    assert tokens_per_expert({"counts": [100, 600, 300]}, 5, 2, 3) == [5, 4, 1]
    with pytest.raises(UserError, match=r"routing.counts: c.json holds 3 counts, and the model has 4 experts"):
        tokens_per_expert({"counts": [1, 2, 3], "file": "c.json"}, 5, 2, 4, "suites.model[0] (m)")


@pytest.mark.torch
def test_moe_models_of_three_families_plan_each_experts_gemms_under_the_policy(tmp_path):
    """Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3 from their published configs (fewer layers), in bf16,
    the dtype whose grouped expert GEMM failed under the trace before: each expert's gate_up and down GEMM
    with the tokens the policy gives it, the router, shared experts and DeepSeek's dense first layers as
    ordinary Linears; counts are experts with that load x MoE layers."""
    L = "model.layers.*."
    b, s, bf16 = 1, 16, {"dtype": "bf16"}
    # Mixtral: hidden 4096, 8 experts of intermediate 14336 (gate and up fused), top 2; balanced: 16 x 2 / 8
    mixtral = gemms("prefill", b, s, published("mixtral-8x7b", tmp_path, 2), **bf16)
    assert mixtral[L + "mlp.experts", "gate_up.t4"] == (4, 4096, 2 * 14336, 8 * 2)
    assert mixtral[L + "mlp.experts", "down.t4"] == (4, 14336, 4096, 8 * 2)
    assert mixtral[L + "mlp.gate", "linear1"] == (b * s, 4096, 8, 2)  # the router
    # zipf 1 over 8 experts, 32 slots: 11.77, 5.89, 3.92, 2.94, 2.35, 1.96, 1.68, 1.47 -> 12, 6, 4, 3, 2, 2, 2, 1
    skewed = gemms("prefill", b, s, published("mixtral-8x7b", tmp_path, 2), routing={"zipf": 1}, **bf16)
    tokens = {which: shape[3] for (module, which), shape in skewed.items() if which.startswith("down.")}
    assert tokens == {"down.t12": 2, "down.t6": 2, "down.t4": 2, "down.t3": 2, "down.t2": 6, "down.t1": 2}
    # Qwen3-30B-A3B: 128 experts of intermediate 768, top 8; decode: one token, 8 experts of a token each
    qwen = gemms("decode", 2, s, published("qwen3-30b-a3b", tmp_path, 2), **bf16)
    assert qwen[L + "mlp.experts", "gate_up.t1"] == (1, 2048, 2 * 768, 16 * 2)  # 2 tokens x 8 experts each
    assert qwen[L + "mlp.gate", "linear1"] == (2, 2048, 128, 2)
    # DeepSeek-V3: the first 3 layers dense (first_k_dense_replace), then MoE: 256 experts of 2048, top 8,
    # one shared expert; balanced: 16 x 8 / 256 = 0.5, so 128 experts get a token and 128 none
    deepseek = gemms("prefill", b, s, published("deepseek-v3", tmp_path, 4), **bf16)
    assert deepseek[L + "mlp.gate_proj", "linear1"] == (b * s, 7168, 18432, 3)  # the dense layers
    assert deepseek[L + "mlp.experts", "gate_up.t1"] == (1, 7168, 2 * 2048, 128)
    assert deepseek[L + "mlp.shared_experts.down_proj", "linear1"] == (b * s, 2048, 7168, 1)
    assert not any(which.startswith("gate_up.t0") for _, which in deepseek)  # an expert with no token: no GEMM


@pytest.mark.slow
@pytest.mark.torch
def test_a_routing_policy_the_model_cannot_have_is_one_sentence_before_any_job(tmp_path):
    counts = tmp_path / "counts.json"
    counts.write_text("[5, 3, 1]")
    entry = {"name": "mixtral", "hf_config": str(published("mixtral-8x7b", tmp_path, 1)), "seq": [16]}
    cfg = tiny_config(tmp_path, calibrated=False, suites={"model": [{**entry, "routing": {"counts": str(counts)}}]})
    with pytest.raises(UserError, match=r"suites.model\[0\] \(mixtral\): routing.counts: .*counts.json holds 3 counts"):
        make_plan(RunConfig.of(schema.validate(cfg)), "cpu")
    counts.write_text("[5, 2.5, 1, 0, 0, 0, 0, 0]")
    with pytest.raises(UserError, match=r"counts.json holds 2.5, not a whole number of tokens of 0 or more"):
        make_plan(RunConfig.of(schema.validate(cfg)), "cpu")
    cfg["suites"]["model"][0]["routing"] = {"zipf": 0}
    with pytest.raises(UserError, match=r"key 'suites.model.0.routing' must be balanced, \{zipf: s\} with s above 0"):
        schema.validate(cfg)
    cfg["suites"]["model"][0]["routing"] = {"zipf": 1.5}  # the policy is in the ids and the labels of plan.json
    plan = make_plan(RunConfig.of(schema.validate(cfg)), "cpu")
    experts = [sc for sc in plan.scenarios if sc.labels.get("routing") and "experts" in sc.labels]
    assert experts and all("-zipf1.5-" in sc.id for sc in experts)
    assert {sc.labels["experts"] for sc in experts} == {8}
    prefill = next(sc for sc in experts if sc.labels["phase"] == "prefill")
    assert sum(map(int, prefill.labels["expert_load"].split("/"))) == 16 * 2  # every token's top 2
