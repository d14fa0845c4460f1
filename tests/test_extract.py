"""Summary parsing and metrics on real Neuron values (tests/data/neuron/, sources in tests/data/README.md)."""

from __future__ import annotations

import json

import pytest
from helpers import DATA

from neuronsweep.errors import UserError
from neuronsweep.formats import neuron_summary
from neuronsweep.stages.extract import compute
from neuronsweep.store.records import BuildRecord, CaptureRecord

FIXTURE = DATA / "neuron" / "trn1-summary-excerpt.json"


@pytest.fixture
def trn1_summary():
    return json.loads(FIXTURE.read_text())


def neuron_records(spec):
    build = {"workload_id": "w", "backend": "neuron", "spec": spec, "compile_s": 12.5, "cache": {"hit": False}}
    return BuildRecord.from_json(build), None


def test_summary_json_with_log_lines_and_hash_wrapper(trn1_summary):
    text = "2026-09-10 12:00:01 INFO loading ntff\n[klog] parsed 5063 events\n" + json.dumps(
        {"n_7cf2c3ef0a": trn1_summary}
    )
    assert neuron_summary.parse(text) == trn1_summary
    assert neuron_summary.unwrap({"Summary": [trn1_summary]}) == trn1_summary
    assert neuron_summary.unwrap(trn1_summary) == trn1_summary


def test_summary_errors_are_clear():
    with pytest.raises(UserError, match="no JSON object found"):
        neuron_summary.parse("ERROR: HOME is not defined\n", "s.json")
    with pytest.raises(UserError, match="holds 2 profiles"):
        neuron_summary.unwrap({"n_a": {"total_time": 1}, "n_b": {"total_time": 2}}, "s.json")


def test_fractions_become_percent_once_and_agree_with_raw_times(trn1_summary):
    build, capture = neuron_records({"kind": "matmul", "m": 128, "k": 128, "n": 128, "dtype": "bf16"})
    m = compute(trn1_summary, capture, build)
    assert m["vector_engine_active_pct"] == pytest.approx(96.45396092701302)
    assert m["profile_active_pct"] == pytest.approx(97.40211517776104)
    # the tool's fraction is total_active_time / total_time: recomputed from the raw fields it agrees
    assert m["profile_active_time_s"] / m["profile_total_time_s"] * 100 == pytest.approx(m["profile_active_pct"])
    assert m["tensor_engine_active_time_s"] == pytest.approx(4.83557e-07)
    assert m["hbm_read_bytes"] == 6582249472 and m["dma_transfer_bytes"] == 3288352768
    # fields the excerpt lacks are null with a reason naming the summary field
    assert m["dma_active_time_s"] is None
    assert m["notes"]["dma_active_time_s"] == "the neuron profile summary has no 'dma_active_time' field"
    assert m["dma_active_pct"] == pytest.approx(26.416618715491547)
    assert m["latency_median_s"] is None and "no framework timing" in m["notes"]["latency_median_s"]


def test_cpu_metrics_null_device_counters_with_reason():
    build = {
        "workload_id": "matmul-m4-k8-n2-fp32",
        "backend": "cpu",
        "compile_s": 1.0,
        "cache": {"hit": True},
        "spec": {"kind": "matmul", "m": 4, "k": 8, "n": 2, "dtype": "fp32"},
    }
    capture = {**build, "latency": {"median_s": 2e-6, "iqr_s": 1e-7, "min_s": 1.5e-6, "n": 9}, "threads": 2}
    summary = {"total_time": 4e-6, "total_active_time": 3e-6, "total_active_time_percent": 0.75, "model_flops": 128}
    m = compute(summary, CaptureRecord.from_json(capture), BuildRecord.from_json(build))
    assert m["flops"] == 2 * 4 * 8 * 2 == 128
    assert m["achieved_flops_per_s"] == pytest.approx(128 / 2e-6)
    assert m["profile_flops_per_s"] == pytest.approx(128 / 4e-6)
    assert m["min_bytes"] == (4 * 8 + 8 * 2 + 4 * 2) * 4
    assert m["profile_active_pct"] == pytest.approx(75.0)
    assert m["profile_flops_tool"] == 128
    assert m["tensor_engine_active_time_s"] is None
    assert "no Neuron engines" in m["notes"]["tensor_engine_active_time_s"]
    assert m["cache_hit"] is True and m["latency_n"] == 9 and m["threads"] == 2


def test_a_summary_without_total_active_time_takes_the_busiest_engine_for_the_roofline(trn1_summary):
    """Tools before 2.27 write no total_active_time: the roofline is measured against the busiest
    engine's active time (vector here: 96.45 % of total_time), said so, not left null."""
    old = {k: v for k, v in trn1_summary.items() if not k.startswith("total_active_time")}
    build, capture = neuron_records({"kind": "matmul", "m": 128, "k": 128, "n": 128, "dtype": "bf16"})
    m = compute(old, capture, build)
    assert m["profile_active_time_s"] is None and "total_active_time" in m["notes"]["profile_active_time_s"]
    assert m["roofline_time_s"] == pytest.approx(0.9645396092701302 * trn1_summary["total_time"])
    assert m["roofline_efficiency_pct"] is not None
    assert "vector_engine_active_time" in m["notes"]["roofline_time_s"]


def test_fp32_peak_is_the_target_generations_ratio_not_a_quarter():
    """trn3's fp32 peak is 183/671 of bf16 (trainium3.rst), not NeuronCore-v2's quarter."""
    from neuronsweep.host.targets import TARGETS

    spec = {"kind": "matmul", "m": 128, "k": 128, "n": 128, "dtype": "fp32"}
    build = BuildRecord.from_json(
        {"workload_id": "w", "backend": "neuron", "spec": spec, "target": "trn3", "lnc": 2, "cache": {"hit": False}}
    )
    m = compute({"total_time": 1e-3, "total_active_time": 5e-4}, None, build)
    assert m["peak_flops_per_s"] == pytest.approx(TARGETS["trn3"].bf16_flops(2) * 183 / 671)
