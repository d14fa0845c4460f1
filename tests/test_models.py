"""A real model's GEMMs as a suite (suites.model): a tiny Llama-class config with grouped-query attention
traced under fake tensors, its GEMM shapes and counts against hand-computed ones for prefill and decode,
shared builds with the matmul suite, and the roll-up."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import DATA, tiny_config

from neuronsweep.analysis import model_rollup
from neuronsweep.config import schema
from neuronsweep.errors import UserError
from neuronsweep.stages.plan import make_plan

pytest.importorskip("transformers", reason='the model suite needs transformers: pip install -e ".[models]"')
TINY = DATA / "models" / "tiny-llama-gqa.json"  # hidden 256, intermediate 512, 8 heads, 2 kv heads, 2 layers


def gemms(phase: str, batch: int, seq: int) -> dict:
    from neuronsweep.workloads.model_probe import probe

    entry = {"where": "t", "hf_config": str(TINY), "batch": [batch], "seq": [seq], "phases": [phase]}
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
    plan = make_plan(schema.validate(cfg), "cpu")
    shared = [s for s in plan.scenarios if s.workload_id == "matmul-m32-k256-n512-fp32"]
    assert {s.suite for s in shared} == {"matmul", "model-tiny"} and len(shared) == 3  # the suite, gate and up
    assert len(plan.workloads) == 7  # 10 GEMMs + 1 matmul: q=o, k=v, gate=up=the matmul share shapes
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "no-such-model"}')
    cfg["suites"]["model"][0]["hf_config"] = str(bad)
    with pytest.raises(UserError, match=r"suites.model\[0\] \(tiny\): .*bad.json is not a transformers config"):
        make_plan(schema.validate(cfg), "cpu")


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
    assert "not every GEMM was measured" in lines[0]
