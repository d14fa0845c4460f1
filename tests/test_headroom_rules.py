"""Each headroom rule against the numbers AWS's own sources give (issue 80): the ladder on AWS's worked trn2
example (neuron-agentic-development, neuron-nki-profile-querying/references/example-bounds-analysis.md: a 4096^3
bf16 matmul, dma_ddr_bandwidth 435 GB/s, TensorE 78.6 TFLOPS), the same cores on both sides at LNC 2, the
small-DMA insight by descriptor size (investigations/dma_efficiency.md), throttling while TensorE is active
(profile-schema-reference.rst's Throttle and ThrottleSummary; the summary page's "active FLOPS throttling"),
device memory from HbmUsageSummaryByType, and every field the ladder reads in the schema check. Each profile
is a parquet view the test writes, read by extract as a captured one is."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from neuronsweep.formats import profile_schema
from neuronsweep.stages import extract
from neuronsweep.stages.extract import view_db

US = 1e-6
# AWS's V0 kernel: the bounds table, the engine active times and the appendix's byte counts
AWS_V0 = {
    "total_time": 8602 * US,
    "total_active_time": 8602 * US,
    "dma_active_time": 7906 * US,
    "dma_transfer_total_bytes": 1_207_697_408,
    "inputs_outputs_weights_size_bytes": 100_663_296,
    "tensor_engine_active_time": 4806 * US,
    "vector_engine_active_time": 176 * US,
    "scalar_engine_active_time": 0.0,
    "gpsimd_engine_active_time": 0.0,
    "hardware_flops": 2 * 4096**3,
    "transpose_flops": 0,
    "model_flops": 2 * 4096**3,
    "instance_type": "trn2.48xlarge",
}
TRN2_CORE = {  # one physical NeuronCore-v3, as Metadata gives it
    "tensor_engine_num_rows": 128,
    "tensor_engine_num_cols": 128,
    "tensor_engine_clock_freq": 2.4,
    "hbm_ddr_bandwidth": 2.9e12 / 4,
    "dma_ddr_bandwidth": 435e9,
    "profile_schema_version": "7.4.0",
}


def profile(folder, summary: dict, cores: int = 1, **tables: list[dict]) -> dict:
    """A view folder (summary.json and parquet tables) read by extract; its metrics.json values."""
    view = folder / "view"
    (view / "parquet").mkdir(parents=True)
    (view / "summary.json").write_text(json.dumps(summary))
    tables = {"Metadata": [TRN2_CORE | {"num_physical_cores": cores}], **tables}
    for name, rows in tables.items():
        pq.write_table(pa.Table.from_pylist(rows), view / "parquet" / f"{name}.parquet")
    extract.run(view / "summary.json", folder / "metrics.json")
    return json.loads((folder / "metrics.json").read_text())


def test_the_ladder_of_aws_worked_trn2_example_at_lnc_1(tmp_path):
    m = profile(tmp_path, AWS_V0)
    assert m["bound_memory_s"] == pytest.approx(7906 * US)
    assert m["bound_memory_ideal_s"] == pytest.approx(2776 * US, abs=0.5 * US)
    assert m["bound_memory_no_reloads_s"] == pytest.approx(231 * US, abs=0.5 * US)
    assert m["bound_compute_s"] == pytest.approx(4806 * US)
    assert m["bound_compute_ideal_s"] == pytest.approx(1748 * US, abs=0.5 * US)
    assert m["bound_compute_useful_s"] == pytest.approx(1748 * US, abs=0.5 * US)
    assert m["bottleneck_engine"] == "dma" and m["bound_pipeline_s"] == pytest.approx(7906 * US)
    # "Eliminating this would lead to the next unaffected engine (TE) to become the bottleneck ... (1.79x)"
    assert m["speedup_if_memory_ideal"] == pytest.approx(1.79, abs=0.005)
    # AWS's gaps: DMA idle 696 us, DMA inefficiency 5,130 us, excess traffic 2,545 us
    assert AWS_V0["total_time"] - m["bound_memory_s"] == pytest.approx(696 * US)
    assert m["bound_memory_s"] - m["bound_memory_ideal_s"] == pytest.approx(5130 * US, abs=1 * US)
    assert m["bound_memory_ideal_s"] - m["bound_memory_no_reloads_s"] == pytest.approx(2545 * US, abs=1 * US)
    assert m["lnc"] == 1 and "x 1 physical core(s)" in m["notes"]["bound_memory_ideal_s"]


def test_at_lnc_2_the_compute_and_the_memory_rungs_scale_by_the_same_cores(tmp_path):
    """The same summary from a logical core of two physical ones: both peaks double, so every ideal rung halves
    on both sides, and the bottleneck and the family speed-ups do not lean towards memory."""
    one = profile(tmp_path / "lnc1", AWS_V0)
    two = profile(tmp_path / "lnc2", AWS_V0, cores=2)
    assert two["lnc"] == 2
    for rung in ("bound_memory_ideal_s", "bound_memory_no_reloads_s", "bound_compute_ideal_s"):
        assert two[rung] == pytest.approx(one[rung] / 2), rung
    assert two["bound_memory_ideal_s"] / two["bound_compute_ideal_s"] == pytest.approx(
        one["bound_memory_ideal_s"] / one["bound_compute_ideal_s"]
    )
    assert "x 2 physical core(s)" in two["notes"]["bound_memory_ideal_s"]
    assert "x 2 physical core(s)" in two["notes"]["bound_compute_ideal_s"]


def test_without_a_documented_dma_peak_the_memory_rungs_are_null_never_the_hbm_stack(tmp_path):
    """trn1 has no documented dma_ddr_bandwidth and this view's metadata none: the memory rungs say so."""
    summary = AWS_V0 | {"instance_type": "trn1.2xlarge"}
    m = profile(tmp_path, summary, **{"Metadata": [{k: v for k, v in TRN2_CORE.items() if k != "dma_ddr_bandwidth"}]})
    for key in ("bound_memory_ideal_s", "bound_memory_no_reloads_s", "speedup_if_memory_ideal"):
        assert m[key] is None, key
    assert "no peak rate" in m["notes"]["bound_memory_ideal_s"]
    assert m["bound_compute_ideal_s"] is not None and m["dma_achieved_pct_of_peak"] is None


def aggregated(bytes_, partitions, queue, queue_type="data", transpose=False, store=False):
    side = ("read" if store else "write") + "_num_sbuf_partitions"
    other = ("write" if store else "read") + "_num_sbuf_partitions"
    row = {"transfer_bytes": bytes_, side: partitions, other: 0, "queue_name": queue, "queue_type": queue_type}
    return row | {"is_transpose_mode": transpose}


def test_small_dma_descriptors_by_their_size_not_the_average_transfer(tmp_path):
    """128 partitions x 1 KiB: a 128 KiB transfer whose descriptors are 1 KiB (AWS's 128x1024B example): small,
    though the average bytes per transfer is far above 4 KiB. 16 x 8 KiB is not; the instruction queue and a DMA
    transpose are not counted; a store reads its partitions from the read side."""
    rows = [
        aggregated(128 * 1024, 128, "qSyncIO0"),  # 1 KiB descriptors: small
        aggregated(128 * 512, 128, "qPoolIO1", store=True),  # a store, 512 B a partition: small
        aggregated(16 * 8192, 16, "qActIO2"),  # 8 KiB descriptors
        aggregated(2 * 128 * 1024, 16, "qActIO2"),  # 16 KiB
        aggregated(64, 1, "qSyncInst", queue_type="instruction"),  # not the kernel's
        aggregated(128 * 512, 128, "qTranspose", transpose=True),  # DMA transposes: left out, as AWS does
    ]
    m = profile(tmp_path, AWS_V0 | {"dma_transfer_count": 4}, DmaPacketAggregated=rows)
    assert m["dma_avg_transfer_bytes"] > 4096  # the old rule never fired here
    moved = 131072 + 65536 + 131072 + 262144
    assert m["dma_small_descriptor_bytes_pct"] == pytest.approx(100 * (131072 + 65536) / moved)
    assert m["dma_small_descriptor_queues"] == "qSyncIO0, qPoolIO1"
    fired = {i["rule"]: i for i in m["insights"]}["small DMA descriptors (under 4 KiB)"]
    assert fired["value"] == pytest.approx((131072 + 65536) / moved, abs=1e-6) and "qSyncIO0" in fired["try"]
    assert "DmaPacketAggregated" in fired["source"]


def test_large_descriptors_fire_nothing(tmp_path):
    m = profile(tmp_path, AWS_V0, DmaPacketAggregated=[aggregated(128 * 8192, 128, "qSyncIO0")])
    assert m["dma_small_descriptor_bytes_pct"] == 0.0 and m["dma_small_descriptor_queues"] is None
    assert not [i for i in m["insights"] if i["rule"].startswith("small DMA")]


def active(engine, start, end, core=0):
    return {"start_ts": start, "end_ts": end, "duration_ns": end - start, "engine": engine, "pcore_idx": core}


def throttle(start, duration, k, n, core=0, kind="activity_0"):
    return {"timestamp": start, "duration": duration, "k": k, "n": n, "type": kind, "pcore_idx": core}


def test_throttling_counts_only_while_tensore_is_active_per_physical_core(tmp_path):
    """TensorE busy [0, 100) on core 0 and [0, 100) on core 1; a limit of 1/2 over [50, 150) on core 0 (half
    of it while TensorE works: 50 ns), 1/4 over [200, 400) on core 0 (TensorE idle: costs nothing), 3/4 over
    [0, 20) on core 1. By hand: 70 of 200 ns throttled, 50 x 0.5 + 20 x 0.25 = 30 ns of capacity lost."""
    tables = {
        "ActiveTime": [active("tensor", 0, 100), active("tensor", 0, 100, core=1), active("vector", 0, 400)],
        "Throttle": [throttle(50, 100, 1, 2), throttle(200, 200, 1, 4), throttle(0, 20, 3, 4, core=1)],
        "ThrottleSummary": [
            {"nc_idx": 0, "throttle_type": "activity_0", "throttle_active_time_ns": 300}
            | {"throttle_active_time_percent": 0.9, "max_achievable_util_with_throttling_percent": 0.3333},
            {"nc_idx": 0, "throttle_type": "all", "throttle_active_time_ns": 300}
            | {"throttle_active_time_percent": 0.9, "max_achievable_util_with_throttling_percent": 0.3333},
        ],
    }
    m = profile(tmp_path, AWS_V0 | {"total_time": 1e-6}, cores=2, **tables)
    assert m["throttled_active_time_pct"] == pytest.approx(100 * 70 / 200)
    assert m["throttled_active_flops_pct"] == pytest.approx(100 * 30 / 200)
    fired = {i["rule"]: i for i in m["insights"]}["active FLOPs throttled"]
    assert fired["value"] == pytest.approx(0.15) and "lowest 50 %" in fired["try"]
    # the whole-execution figures come from ThrottleSummary ("all" aggregates the types: left out), the time
    # share from throttle_active_time_ns over total_time
    assert m["throttling"] == [
        {"activity": "activity_0", "nc": 0, "util_limit_pct": 33.33, "time_pct": pytest.approx(30.0)}
    ]
    assert m["throttle_util_limit_pct"] == pytest.approx(33.33) and "ThrottleSummary" in m["notes"]["throttling"]


def test_throttling_only_while_tensore_idles_fires_nothing(tmp_path):
    tables = {"ActiveTime": [active("tensor", 0, 100)], "Throttle": [throttle(100, 500, 1, 2)]}
    m = profile(tmp_path, AWS_V0, **tables)
    assert m["throttled_active_time_pct"] == 0.0 and m["throttled_active_flops_pct"] == 0.0
    assert not [i for i in m["insights"] if "throttled" in i["rule"]]


def test_device_memory_by_usage_type_from_the_parquet_table(tmp_path):
    rows = [
        {"neuron_device_idx": 0, "neuroncore_idx": 0, "usage_type": t, "usage_bytes": b}
        for t, b in (("Tensors", 4096), ("Scratchpad", 100), ("Shared Scratchpad", 28), ("DRAM Spill", 0))
    ]
    sbuf = [{"timestamp": t, "avg_util_percent": u} for t, u in ((0, 0.25), (10, 0.5), (20, None))]
    m = profile(tmp_path / "parquet", AWS_V0, HbmUsageSummaryByType=rows, SbufUsage=sbuf)
    assert (m["hbm_tensors_bytes"], m["hbm_scratchpad_bytes"], m["hbm_dram_spill_bytes"]) == (4096, 128, 0)
    assert m["sbuf_peak_usage_pct"] == 50.0 and "sbuf_peak_usage_pct" not in m["notes"]
    assert m["psum_peak_usage_pct"] is None and "no psum series" in m["notes"]["psum_peak_usage_pct"]
    bare = profile(tmp_path / "bare", AWS_V0)  # neither the tables nor the JSON: null, and where to get them
    assert bare["hbm_tensors_bytes"] is None and "HbmUsageSummaryByType" in bare["notes"]["hbm_tensors_bytes"]
    assert "SbufUsage" in bare["notes"]["sbuf_peak_usage_pct"]


@pytest.mark.parametrize(
    "table, field",
    [
        ("Metadata", "dma_ddr_bandwidth"),
        ("Metadata", "num_physical_cores"),
        ("DmaPacketAggregated", "write_num_sbuf_partitions"),
        ("Throttle", "k"),
        ("ThrottleSummary", "max_achievable_util_with_throttling_percent"),
    ],
)
def test_every_field_the_headroom_reads_is_checked_against_the_profile_and_named_when_missing(tmp_path, table, field):
    full = {
        "Metadata": [TRN2_CORE | {"num_physical_cores": 1}],
        "DmaPacketAggregated": [aggregated(4096, 1, "q")],
        "Throttle": [throttle(0, 10, 1, 2)],
        "ThrottleSummary": [
            {"nc_idx": 0, "throttle_type": "activity_0", "max_achievable_util_with_throttling_percent": 1.0}
        ],
    }
    full[table] = [{k: v for k, v in r.items() if k != field} for r in full[table]]
    parquet = tmp_path / "view" / "parquet"
    parquet.mkdir(parents=True)
    for name, rows in full.items():
        pq.write_table(pa.Table.from_pylist(rows), parquet / f"{name}.parquet")
    found = profile_schema.problems(view_db(tmp_path / "view"), "12.0.1")
    assert found == [
        f"profile schema 12.0.1: the {table} table has no {field} column, so "
        f"{profile_schema.READ[table][field][0]} is not read from it; send view/profile-schema.txt with a bug report"
    ]
