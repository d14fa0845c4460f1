"""Regression tests on real neuron-profile output (tests/data/neuron/inf2-profiles/: three legacy
full-profile JSON files from an inf2.xlarge, profiler 2.27.33, published by a third party)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import BIN, DATA, cli_here

from neuronsweep.analysis import derived
from neuronsweep.formats import legacy_json
from neuronsweep.formats.profile_db import ProfileDB

REAL = DATA / "neuron" / "inf2-profiles"
FILES = sorted(REAL.glob("profile_*.json"))
assert FILES, f"the real Neuron profiles are missing from {REAL}"


def ns(*args):
    """The command in this process (tests/helpers.cli_here); it must succeed."""
    assert cli_here(*args) == 0, args


def raw(path):
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_query_keeps_64_bit_ids_exact(path, capsys):
    data = raw(path)
    sql = (
        "SELECT (SELECT count(*) FROM instruction) AS n, (SELECT max(id) FROM instruction) AS top, "
        "(SELECT typeof(any_value(id)) FROM instruction) AS t, (SELECT count(*) FROM dma) AS dma, "
        "(SELECT count(DISTINCT packet_aggregation_id) FROM dma) AS ids"
    )
    capsys.readouterr()
    ns("query", path, sql, "--csv")
    row = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out), dtype=str).iloc[0]
    assert int(row["n"]) == len(data["instruction"]) and row["t"] == "BIGINT"
    assert int(row["top"]) == max(r["id"] for r in data["instruction"])  # above 2^53: exact, not a float
    ids = {r["packet_aggregation_id"] for r in data["dma"] if r.get("packet_aggregation_id") is not None}
    assert any("packet_aggregation_id" not in r for r in data["dma"])  # a record without the key: null
    assert (int(row["dma"]), int(row["ids"])) == (len(data["dma"]), len(ids))


def test_columns_mixing_types_and_ids_beyond_int64_become_text():
    col = legacy_json.column
    assert str(col([1, 2**63 - 1, None]).type) == "int64"
    assert col([1, 2**64 - 59]).to_pylist() == ["1", "18446744073709551557"]  # overflows int64: exact text
    assert col([1, 2.5, None]).to_pylist() == [1.0, 2.5, None]
    assert col([1, "x", [1, [2]]]).to_pylist() == ["1", "x", "[1,[2]]"]  # compact JSON text
    assert col([None, None]) is None and str(col([True, False]).type) == "bool"


@pytest.fixture(scope="module", params=FILES, ids=lambda p: p.stem)
def extracted(request, tmp_path_factory) -> tuple[Path, dict]:
    """A legacy profile and what `neuronsweep extract` made of it: once per file for the tests that read it."""
    out = tmp_path_factory.mktemp(request.param.stem) / "m.json"
    ns("extract", "--summary-json", request.param, "--out", out)
    return request.param, json.loads(out.read_text())


def test_extract_from_the_legacy_file_recomputes_the_tools_mfu_and_mbu(extracted):
    path, m = extracted
    summary = raw(path)["summary"][0]
    assert m["profile_total_time_s"] == summary["total_time"]
    assert m["mfu_tool_pct"] == pytest.approx(100 * summary["mfu_estimated_percent"], rel=1e-12)
    assert m["mfu_recomputed_pct"] == pytest.approx(m["mfu_tool_pct"], rel=1e-6)  # metadata: 128x128 at 2.8 GHz
    assert m["mbu_recomputed_pct"] == pytest.approx(m["mbu_tool_pct"], rel=1e-6)  # hbm_ddr_bandwidth 410e9
    # no build record: the target is the profile's own instance, so no note that they differ
    assert m["instance_type"] == "inf2.xlarge" and m["neuron_target"] == "inf2" and "neuron_target" not in m["notes"]
    assert m["provenance"]["metadata_peaks"] is True


def test_device_memory_comes_from_the_fields_the_tool_writes(extracted):
    path, m = extracted
    data = raw(path)
    by_type = {r["usage_type"]: r["amount_bytes"] for r in data["nc_mem_usage"]}
    assert m["hbm_tensors_bytes"] == by_type["Tensors"] > 0
    assert m["hbm_scratchpad_bytes"] == by_type["Scratchpad"] + by_type["Shared Scratchpad"]
    assert m["hbm_dram_spill_bytes"] == by_type["DRAM Spill"]
    sb = [r["usage_avg"] for r in data["instruction_usage"] if r["type"] == "sb"]
    psum = [r["usage_avg"] for r in data["instruction_usage"] if r["type"] == "psum"]
    assert m["sbuf_peak_usage_pct"] == pytest.approx(100 * max(sb)) and m["psum_peak_usage_pct"] == pytest.approx(
        100 * max(psum)
    )
    assert m["largest_tensor_bytes"] is None and "Memory Tracker" in m["notes"]["largest_tensor_bytes"]


def test_a_small_array_far_from_both_ends_of_a_big_profile_is_streamed(tmp_path):
    big = {
        "instruction": [{"id": i, "pad": "x" * 64} for i in range(30_000)],
        "nc_mem_usage": [{"usage_type": "Tensors", "amount_bytes": 5}],
        "dma": [{"id": i, "pad": "y" * 64} for i in range(30_000)],
    }
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    assert path.stat().st_size > 2 * legacy_json.EDGE
    assert legacy_json.small_array(path, "nc_mem_usage") == big["nc_mem_usage"]
    assert legacy_json.small_array(path, "instruction_usage") is None


def test_extract_through_a_view_folder_with_raw_summary_json_and_the_legacy_profile(tmp_path):
    path = FILES[0]
    data = raw(path)
    view = tmp_path / "matmul-real" / "view"
    view.mkdir(parents=True)
    shutil.copy(path, view / "profile.json")
    # what `view --output-format summary-json > summary.json` leaves: log lines, then {"n_<hash>": {...}}
    (view / "summary.json").write_text(
        "2026-01-01T00:00:00Z INFO [klog] reading NTFF version 5\n" + json.dumps({"n_0123abcd": data["summary"][0]})
    )
    out = tmp_path / "matmul-real" / "metrics.json"
    ns("extract", "--summary-json", view / "summary.json", "--profile-json", view / "profile.json", "--out", out)
    m = json.loads(out.read_text())
    assert m["mfu_recomputed_pct"] == pytest.approx(m["mfu_tool_pct"], rel=1e-6)
    tables = tmp_path / "matmul-real" / "tables"
    busy = pd.read_csv(tables / "engine_busy.csv").set_index("class")
    total_ns = data["summary"][0]["total_time"] * 1e9
    assert (busy["busy_ns"] <= total_ns).all() and set(busy.index) == {
        "tensor",
        "vector",
        "scalar",
        "gpsimd",
        "sync",
        "dma",
    }
    op_mix = pd.read_csv(tables / "op_mix.csv")
    assert not op_mix["opcode"].str.contains("SEMAPHORE").any() and "MATMUL" in set(op_mix["opcode"])
    queues = pd.read_csv(tables / "dma_queues.csv")
    assert "qSyncSpillReload0-Q1-E0" in set(queues["queue"])  # named by subgroup, not the numeric dma_queue
    assert queues["packets"].sum() == len(data["dma"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_busy_time_and_op_mix_on_real_data(path):
    db = ProfileDB().load(path)
    busy = derived.engine_busy(db).set_index("class")
    total_ns = raw(path)["summary"][0]["total_time"] * 1e9
    # semaphore waits span the whole profile and are not busy time; unions never pass total_time
    assert (busy["busy_ns"] <= total_ns).all() and busy["busy_ns"].max() < 0.01 * total_ns
    assert busy.loc["tensor", "busy_ns"] <= busy.loc["tensor", "summed_ns"]
    mix = derived.op_mix(db)
    assert not mix["opcode"].str.contains("SEMAPHORE").any() and not mix["opcode"].isin(["DRAIN", "NOTIFY"]).any()
    top = derived.top_sources(db)
    assert (top["source"] != "").all() and top["source"].str.contains("dot").any()


def test_extract_refuses_a_file_without_a_summary_and_reads_raw_summary_json_under_any_name(tmp_path):
    bad = tmp_path / "not-a-summary.json"
    bad.write_text(json.dumps({"instruction": [], "metadata": [{}]}))
    argv = ["extract", "--summary-json", bad, "--out", tmp_path / "m.json"]  # the command as a user runs it
    proc = subprocess.run([str(BIN / "neuronsweep"), *map(str, argv)], capture_output=True, text=True)
    assert proc.returncode == 2 and not (tmp_path / "m.json").exists()
    assert proc.stderr.strip().endswith(
        f"{bad}: holds no profile summary (total_time absent); pass a view's "
        "summary.json, the output of `view --output-format summary-json`, or a "
        "legacy `--output-format json` profile."
    )
    odd = tmp_path / "view" / "whatever.txt"
    odd.parent.mkdir()
    odd.write_text("INFO [klog] post-processing\n" + json.dumps({"n_ff": raw(FILES[1])["summary"][0]}))
    shutil.copy(odd, odd.parent / "summary.json")  # a raw file saved as summary.json beside: no crash
    ns("extract", "--summary-json", odd, "--out", tmp_path / "m2.json")
    assert json.loads((tmp_path / "m2.json").read_text())["profile_total_time_s"] > 0


def test_ntff_files_are_named_as_a_first_execution_capture_writes_them():
    from neuronsweep.backends import neuron_profiler

    for path in FILES:
        ntff = path.with_suffix(".ntff")
        assert ntff.is_file() and ntff.stat().st_size > 0
        # captured with -s profile_<MxKxN>.ntff and no --num-exec: one execution, the stem as given
        assert neuron_profiler.expected_ntff(1, 1, stem=path.stem) == ntff.name


def test_trn2_peaks_are_per_logical_core_and_a_wrong_target_is_named():
    from neuronsweep.stages.extract import compute
    from neuronsweep.store.records import BuildRecord

    spec = {"kind": "matmul", "m": 4096, "k": 4096, "n": 4096, "dtype": "bf16"}
    build = BuildRecord.from_json(
        {"workload_id": "w", "backend": "neuron", "spec": spec, "target": "trn2", "cache": {"hit": False}}
    )
    summary = {
        "total_time": 1e-3,
        "total_active_time": 1e-3,
        "model_flops": 2 * 4096**3,
        "hbm_read_bytes": 5e8,
        "hbm_write_bytes": 2.5e8,
        "instance_type": "trn2.48xlarge",
    }
    m = compute(summary, None, build)
    assert m["lnc"] == 2 and m["peak_flops_per_s"] == pytest.approx(2 * 128 * 128 * 2 * 2.4e9)  # LNC 2 default
    assert m["mfu_recomputed_pct"] == pytest.approx(100 * 2 * 4096**3 / (2 * 78.6432e12 * 1e-3), rel=1e-4)
    assert m["mbu_recomputed_pct"] == pytest.approx(100 * 7.5e8 / 1e-3 / 725e9)  # one HBM stack
    assert "neuron_target" not in m["notes"]
    one = compute(summary, None, dataclasses.replace(build, lnc=1))
    assert one["peak_flops_per_s"] == pytest.approx(m["peak_flops_per_s"] / 2)
    wrong = compute({**summary, "instance_type": "inf2.xlarge"}, None, build)
    assert wrong["notes"]["neuron_target"] == (
        "neuron.target is trn2 but the profile was captured on inf2.xlarge; set neuron.target: inf2"
    )


def test_an_empty_dma_table_makes_the_dma_figures_null_with_the_reason_never_zero(tmp_path):
    """A capture without DGE notifications may leave no DMA packets and zero DMA figures in the summary:
    extract says so instead of reporting 0 bytes moved."""
    data = raw(FILES[0])
    data["dma"] = []
    zeros = ("dma_active_time", "dma_active_time_percent", "dma_transfer_total_bytes", "dma_transfer_count")
    summary = {**data["summary"][0], **dict.fromkeys(zeros, 0)}
    data["summary"] = [summary]
    view = tmp_path / "matmul-real" / "view"
    view.mkdir(parents=True)
    (view / "profile.json").write_text(json.dumps(data))
    (view / "summary.json").write_text(json.dumps(summary))
    spec = {"kind": "matmul", "m": 128, "k": 128, "n": 1000, "dtype": "fp16"}
    capture = {"workload_id": "w", "backend": "neuron", "spec": spec, "dge_notifications": False}
    (tmp_path / "capture.json").write_text(json.dumps(capture))
    out = tmp_path / "matmul-real" / "metrics.json"
    ns(
        "extract",
        "--summary-json",
        view / "summary.json",
        "--profile-json",
        view / "profile.json",
        "--capture-json",
        tmp_path / "capture.json",
        "--out",
        out,
    )
    m = json.loads(out.read_text())
    for key in ("dma_active_time_s", "dma_active_pct", "dma_transfer_bytes"):
        assert m[key] is None and "DMA table is empty" in m["notes"][key]
        assert "without DGE notifications" in m["notes"][key]
    assert m["bound_class"] is not None and "dma" not in m["bound_evidence"]


def test_an_array_past_the_files_edges_is_streamed_only_when_asked(tmp_path):
    """The throttle events of a legacy JSON are read where its writer keeps them, in the first or last MiB;
    one in the middle of a large file is not worth a pass over all of it (stream=False: None)."""
    filler = [0] * 400_000  # about 1.2 MB of JSON each side
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"a": filler, "ham": [{"k": 7, "n": 8}], "b": filler}))
    assert legacy_json.small_array(path, "ham", stream=False) is None
    assert legacy_json.small_array(path, "ham") == [{"k": 7, "n": 8}]
    assert legacy_json.small_array(path, "a", stream=False) is None  # starts in the first MiB, runs past it
