"""Where the headroom is (analysis/metrics/bounds.py): the performance-bounds ladder, the summary's insights and
the profile's warnings, on real Neuron output (inf2 legacy JSON profiles, trn2 summary-text), checked against
a hand computation from each file's own summary and metadata; and summary-text read as summary-json is."""

from __future__ import annotations

import json

import pytest
from helpers import DATA

from neuronsweep.errors import UserError
from neuronsweep.formats import neuron_summary
from neuronsweep.host.targets import TARGETS
from neuronsweep.stages import extract

TEXT = DATA / "neuron" / "trn2-summary-text"
INF2 = DATA / "neuron" / "inf2-profiles"
DGE = "Missing additional dynamic DMA metadata"


def metrics(source, tmp_path) -> dict:
    out = tmp_path / f"{source.stem}.metrics.json"
    extract.run(source, out)
    values = json.loads(out.read_text())
    return values


def test_summary_text_is_read_as_the_tool_printed_it():
    """A prompt and the command (wrapped onto a second line in transpose_1024), a WARN line, the n_<hash> line,
    then one field a line in no fixed order; versions with spaces stay text; the trailing prompt is no field."""
    stream = neuron_summary.load(TEXT / "stream_256k_fd1k.summary-text.txt")
    transpose = neuron_summary.load(TEXT / "transpose_1024.summary-text.txt")
    assert len(stream) == 77 and len(transpose) == 91
    assert transpose["total_time"] == pytest.approx(4.6470761e-05) and transpose["hardware_flops"] == 268435456
    assert transpose["runtime_version"] == "2.27.23 (8deec)" and transpose["instance_type"] == "trn2.3xlarge"
    assert stream["total_active_time"] == pytest.approx(1.4e-05, rel=0.05) and "hardware_flops" not in stream
    assert not any(k.startswith(("(aws", "ubuntu", "WARN", "-s")) for k in transpose)
    twice = (TEXT / "stream_256k_fd1k.summary-text.txt").read_text() * 2
    with pytest.raises(UserError, match="holds 2 profiles"):
        neuron_summary.parse(twice, "two.txt")


def test_the_trn2_transpose_kernel_fires_the_transpose_insight_and_reports_its_throttling_without_firing(tmp_path):
    m = metrics(TEXT / "transpose_1024.summary-text.txt", tmp_path)
    fired = {i["rule"]: i for i in m["insights"]}
    assert fired["transposes over 10 % of hardware FLOPs"]["value"] == 1.0  # every TensorE FLOP a transpose
    # throttled for 27 % of the whole execution at a limit of 0.5, as the summary's older fields say; whether
    # that fell while TensorE was active, the summary cannot say (no throttle events), so Explorer's "active
    # FLOPs throttled" insight does not fire on it
    assert m["throttle_util_limit_pct"] == 50.0 and m["throttled_time_pct"] == pytest.approx(27.06, abs=0.01)
    assert "older output" in m["notes"]["throttling"]
    assert "active FLOPs throttled" not in fired
    assert m["throttled_active_flops_pct"] is None and "idled" in m["notes"]["throttled_active_flops_pct"]
    # no metadata in summary-text: both peaks are the target's documented figures at trn2's default LNC 2
    peak = TARGETS["trn2"].bf16_flops(2)
    assert m["bound_compute_ideal_s"] == pytest.approx(268435456 / peak)
    assert "the view had no profile metadata" in m["notes"]["bound_compute_ideal_s"]
    s = neuron_summary.load(TEXT / "transpose_1024.summary-text.txt")
    assert m["bound_memory_ideal_s"] == pytest.approx(s["dma_transfer_total_bytes"] / (2 * 435e9))
    assert "x 2 physical core(s)" in m["notes"]["bound_memory_ideal_s"]
    assert m["bound_compute_useful_s"] == 0.0 and m["bound_compute_s"] == pytest.approx(1.613914e-05)
    assert m["bound_reference_s"] == pytest.approx(4.6470761e-05)  # trn2: total_time is mostly active
    assert m["bound_memory_no_reloads_s"] is None  # this summary has inputs_and_weights_size_bytes only
    assert "inputs_outputs_weights_size_bytes" in m["notes"]["bound_memory_no_reloads_s"]
    # descriptor sizes need the parquet DmaPacketAggregated table: the average bytes per transfer fires nothing
    assert (
        m["dma_small_descriptor_bytes_pct"] is None
        and "DmaPacketAggregated" in m["notes"]["dma_small_descriptor_bytes_pct"]
    )


def test_the_trn2_stream_kernel_has_no_flop_bounds_but_its_compute_bound_stands(tmp_path):
    m = metrics(TEXT / "stream_256k_fd1k.summary-text.txt", tmp_path)
    for key in ("bound_compute_ideal_s", "bound_compute_useful_s", "speedup_if_compute_ideal"):
        assert m[key] is None and "hardware_flops" in m["notes"][key], key
    assert m["bound_compute_s"] > 0 and m["bottleneck_engine"] == "dma"
    assert m["bound_pipeline_s"] == m["bound_memory_s"] == m["dma_active_time_s"]
    assert m["insights"] == [] and m["throttling"] is None


@pytest.mark.parametrize("name", ["profile_128x128x136", "profile_128x128x1000", "profile_128x128x1024"])
def test_the_ladder_on_real_inf2_profiles_equals_a_hand_computation(name, tmp_path):
    whole = json.loads((INF2 / f"{name}.json").read_text())
    s, meta = whole["summary"][0], whole["metadata"][0]
    m = metrics(INF2 / f"{name}.json", tmp_path)
    te_peak = meta["pe_num_rows"] * meta["pe_num_cols"] * 2 * meta["pe_clock_freq"] * 1e9 * meta["num_physical_cores"]
    # total_time is the execution's idle start: the kernel's own time is its active time
    assert s["total_active_time"] < 0.01 * s["total_time"]
    assert m["bound_reference_s"] == pytest.approx(s["total_active_time"])
    assert m["bound_memory_s"] == pytest.approx(s["dma_active_time"])
    assert m["bound_memory_no_reloads_s"] == pytest.approx(
        s["inputs_outputs_weights_size_bytes"] / meta["dma_ddr_bandwidth"]
    )
    assert m["bound_compute_s"] == pytest.approx(s["tensor_engine_active_time"])
    assert m["bound_compute_ideal_s"] == pytest.approx(s["hardware_flops"] / te_peak)
    assert m["bound_compute_useful_s"] == pytest.approx((s["hardware_flops"] - s["transpose_flops"]) / te_peak)
    engines = {e: s[f"{e}_engine_active_time"] for e in ("tensor", "vector", "scalar", "gpsimd")}
    engines["dma"] = s["dma_active_time"]
    assert m["bottleneck_engine"] == max(engines, key=engines.get)
    assert m["bound_pipeline_s"] == pytest.approx(max(engines.values()))
    assert m["speedup_if_pipelined"] == pytest.approx(s["total_active_time"] / max(engines.values()))
    others = max(v for e, v in engines.items() if e != "tensor")
    compute = max(s["hardware_flops"] / te_peak, others)
    assert m["speedup_if_compute_ideal"] == pytest.approx(s["total_active_time"] / compute)
    # the profile's own warning: carried, and the bound resting on its DMA bytes is null with it
    assert any(DGE in w for w in m["profile_warnings"])
    assert m["bound_memory_ideal_s"] is None and DGE in m["notes"]["bound_memory_ideal_s"]
    assert m["speedup_if_memory_ideal"] is None and DGE in m["notes"]["speedup_if_memory_ideal"]
    assert m["dma_excess_ratio"] < 1 and "incomplete" in m["notes"]["dma_excess_ratio"]
    # throttling while TensorE was active: the HAM notifications (k/n over [timestamp, +duration)) against
    # TensorE's active intervals, by hand, nanosecond by nanosecond
    busy = {t for a in whole["active_time"] if a["engine"] == "tensor" for t in range(a["start_ts"], a["end_ts"])}
    limited = {t: h["k"] / h["n"] for h in whole["ham"] for t in range(h["timestamp"], h["timestamp"] + h["duration"])}
    under = [limited[t] for t in busy if limited.get(t, 1) < 1]
    assert m["throttled_active_time_pct"] == pytest.approx(100 * len(under) / len(busy))
    assert m["throttled_active_flops_pct"] == pytest.approx(100 * sum(1 - x for x in under) / len(busy))
    fired = {i["rule"]: i for i in m["insights"]}
    assert fired["active FLOPs throttled"]["value"] == pytest.approx(m["throttled_active_flops_pct"] / 100, abs=1e-5)
    assert "throttle events" in fired["active FLOPs throttled"]["source"]


def test_a_damaged_summary_leaves_bounds_null_with_the_field_named_and_the_rest_unaffected(tmp_path):
    whole = json.loads((INF2 / "profile_128x128x136.json").read_text())
    del whole["summary"][0]["hardware_flops"]
    whole["summary"][0]["tensor_engine_active_time"] = -1  # cannot be true: the reader leaves it out
    whole["metadata"][0]["dma_ddr_bandwidth"] = 0  # no peak: no division
    whole["warnings"].append("a warning of another shape")
    (tmp_path / "p.json").write_text(json.dumps(whole))
    m = metrics(tmp_path / "p.json", tmp_path)
    assert m["bound_compute_ideal_s"] is None and "hardware_flops" in m["notes"]["bound_compute_ideal_s"]
    assert m["bound_compute_s"] is None and m["bound_pipeline_s"] is None
    assert "tensor" in m["notes"]["bound_pipeline_s"]
    assert "a warning of another shape" in m["profile_warnings"]
    # no DMA peak in the metadata: inf2's documented one (never the HBM stack's, which every core shares)
    necessary = whole["summary"][0]["inputs_outputs_weights_size_bytes"]
    assert m["bound_memory_no_reloads_s"] == pytest.approx(necessary / TARGETS["inf2"].dma_bytes_per_core_per_s)
    assert "no dma_ddr_bandwidth" in m["notes"]["bound_memory_no_reloads_s"]
    assert m["profile_total_time_s"] == pytest.approx(whole["summary"][0]["total_time"])  # the rest: as before


def test_a_cases_time_splits_into_its_gaps_and_the_cases_rank_by_what_the_largest_recovers():
    """Engines waiting, then the bottleneck's own ladder; a null rung (a profile whose DMA figures are
    incomplete) leaves the time below the last known rung as one part; a model's GEMM weighs by its count."""
    import pandas as pd

    from neuronsweep.analysis import headroom

    base = {"suite": "model-x", "bound_reference_s": 10.0, "bound_pipeline_s": 8.0}
    rows = pd.DataFrame(
        [
            base
            | {"scenario_id": "dma", "bottleneck_engine": "dma", "bound_memory_ideal_s": 5.0}
            | {"bound_memory_no_reloads_s": 4.5, "count": 1},
            base
            | {"scenario_id": "te", "bottleneck_engine": "tensor", "bound_compute_ideal_s": 2.0}
            | {"bound_compute_useful_s": 1.0, "count": 4},
            base
            | {"scenario_id": "dge", "bottleneck_engine": "dma", "bound_memory_ideal_s": None}
            | {"bound_memory_no_reloads_s": 4.5, "count": 1},
            {"scenario_id": "cpu", "suite": "matmul", "bound_reference_s": None},
        ]
    )
    gaps = {r["scenario_id"]: headroom.split(r) for _, r in rows.iterrows()}
    assert gaps["dma"] == {"waiting": 2.0, "dma_inefficiency": 3.0, "excess_traffic": 0.5} | {
        "te_underuse": 0.0,
        "transposes": 0.0,
        "work": 4.5,
    }
    assert gaps["te"]["te_underuse"] == 6.0 and gaps["te"]["transposes"] == 1.0 and gaps["te"]["work"] == 1.0
    assert gaps["dge"]["dma_inefficiency"] == 0.0 and gaps["dge"]["work"] == 8.0  # nothing below the unknown rung
    assert gaps["cpu"] is None and all(sum(g.values()) == 10.0 for g in gaps.values() if g)
    ranked = headroom.ranked(rows)
    assert list(ranked["scenario_id"]) == ["te", "dma", "dge"]  # 4 x 6 s of TensorE under-use first
    assert ranked.iloc[0]["largest_gap"] == "TensorE under-used" and ranked.iloc[0]["recoverable_s"] == 24.0


def test_cases_that_share_a_cause_are_one_recommendation_with_the_range_of_their_figures():
    import pandas as pd

    from neuronsweep.stages import report

    rows = pd.DataFrame(
        [
            {"scenario_id": f"model-x-decode-{g}", "workload_id": f"w{g}", "status": "ok", "backend": "neuron"}
            | {"roofline_bound": "memory", "arithmetic_intensity_flops_per_byte": ai, "ridge_flops_per_byte": 200.0}
            for g, ai in (("q", 0.5), ("k", 0.5), ("up", 1.0))
        ]
    )
    recs = report._memory_bound(rows)
    assert len(recs) == 1 and recs[0].startswith("3 cases are memory-bound (model-x-decode-q, model-x-decode-k")
    assert "arithmetic intensity 0.5-1.0 FLOP/B, below the ridge 200.0" in recs[0]


def test_compare_names_the_bounds_a_judged_change_moved():
    """A kernel edit judged faster says which gap it closed: its bounds' changes beside the time's."""
    import pandas as pd

    from neuronsweep.runs.compare_page import bounds_moved, workloads

    changes = pd.DataFrame(
        [
            {"workload_id": "w", "metric": "bound_memory_s", "change_pct": -40.0},
            {"workload_id": "w", "metric": "bound_compute_s", "change_pct": 1.5},
            {"workload_id": "w", "metric": "hbm_read_bytes", "change_pct": -40.0},
            {"workload_id": "v", "metric": "bound_memory_s", "change_pct": 9.0},
        ]
    )
    assert bounds_moved(changes, "w") == (
        "bounds (one profiled execution a side): bound_memory_s -40.0%, bound_compute_s +1.5%"
    )
    assert bounds_moved(changes, "x") == "" and bounds_moved(pd.DataFrame(), "w") == ""
    # compare.html's workloads table: the bounds that moved beside each case's time
    table = pd.DataFrame([{"workload_id": "w", "verdict": "faster"}, {"workload_id": "x", "verdict": "same"}])
    shown = workloads(table, changes).set_index("workload")["bounds moved (one profile a side)"]
    assert shown.to_dict() == {"w": "bound_memory_s -40.0%, bound_compute_s +1.5%", "x": ""}
    assert "bounds moved (one profile a side)" not in workloads(table, pd.DataFrame())


def test_a_recommendation_over_many_cases_names_the_few_that_recover_most_and_links_the_rest():
    """The tp 2 example's first recommendation carried 21 case ids in one sentence: now the three with the
    most time recoverable (time above the roofline's efficiency, x their count), a count, and a link to the
    table of all of them."""
    import pandas as pd

    from neuronsweep.stages import report

    rows = pd.DataFrame(
        [
            {"scenario_id": f"model-x-{g}", "workload_id": f"w{g}", "status": "ok", "backend": "neuron"}
            | {"roofline_bound": "memory", "arithmetic_intensity_flops_per_byte": 1.0, "ridge_flops_per_byte": 200.0}
            | {"time_s": t, "roofline_efficiency_pct": e, "count": c}
            for g, t, e, c in (
                ("a", 1e-3, 50.0, 1),  # 0.5 ms recoverable
                ("b", 1e-3, 90.0, 1),  # 0.1 ms
                ("c", 1e-4, 0.0, 32),  # 3.2 ms: a small GEMM run 32 times a forward
                ("d", 2e-3, 10.0, 1),  # 1.8 ms
                ("e", 1e-3, None, 1),  # efficiency unknown: all of it, 1 ms
            )
        ]
    )
    (rec,) = report._memory_bound(rows)
    assert rec.startswith(
        "5 cases are memory-bound (most time recoverable: model-x-c (3.2 ms recoverable), model-x-d (1.8 ms "
        "recoverable), model-x-e (1 ms recoverable); and 2 more, [all 5](#memory-bound))"
    )
    assert '<a href="#memory-bound">all 5</a>' in report._linked(rec)
    listed = report.grouped_cases(rows)["memory-bound"]
    assert list(listed["case"]) == ["model-x-c", "model-x-d", "model-x-e", "model-x-a", "model-x-b"]
    assert report.grouped_cases(rows.head(3)) == {}  # three are named whole: no table


def test_a_straggling_collective_shared_by_two_models_is_one_recommendation():
    """One collective workload measured once and listed under two models' forwards is one line, not two."""
    import pandas as pd

    from neuronsweep.stages import report

    row = {"status": "ok", "backend": "cpu", "workload_id": "coll-allgather-w2", "coll_op": "all_gather"}
    row |= {"coll_world": 2, "dtype": "fp32", "coll_bytes": 1024, "busbw_bytes_per_s": 1e9, "time_s": 1e-3}
    row |= {"rank_straggler_ratio": 1.5, "rank_time_max_s": 3e-4, "rank_time_min_s": 2e-4, "coll_oversubscribed": False}
    rows = pd.DataFrame([{**row, "scenario_id": "model-a-coll"}, {**row, "scenario_id": "model-b-coll"}])
    lines = [r for r in report._collective_recommendations(rows) if "slowest rank" in r]
    assert lines == [
        "model-a-coll and model-b-coll (one workload): the slowest rank's median is 1.50x the fastest's (300.0 us "
        "against 200.0 us; tables/ranks.csv): a straggler sets every collective's time."
    ]


def test_many_noisy_cases_are_named_by_their_spread_and_the_rest_linked():
    import pandas as pd

    from neuronsweep.stages import report

    rows = pd.DataFrame(
        [
            {"scenario_id": f"c{i}", "workload_id": f"w{i}", "status": "ok", "backend": "cpu", "noisy": True}
            | {"latency_spread_s": spread, "roofline_bound": None, "significant": False, "x_of_best": 1.0}
            | {"recompilation_detected": False}
            for i, spread in enumerate((1e-3, 4e-3, 2e-3, 3e-3, 5e-4))
        ]
    )
    (rec,) = [r for r in report.recommendations(rows) if r.startswith("Not compared")]
    assert (
        "(noisy): widest spread: c1 (4 ms spread), c3 (3 ms spread), c2 (2 ms spread); and 2 more, [all 5](#noisy);"
        in rec
    )
    assert list(report.grouped_cases(rows)["noisy"]["case"]) == ["c1", "c3", "c2", "c0", "c4"]
