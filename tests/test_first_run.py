"""A first run on an ordinary laptop: dtypes without a fast path, bounded calibration, honest numbers
on cpu, nested --config overrides, and a report that reads right."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pandas as pd
import pytest
from helpers import BIN, snakemake, tiny_config

from neuronsweep.analysis import roofline
from neuronsweep.config import schema as config
from neuronsweep.config.run_config import RunConfig
from neuronsweep.host import caps
from neuronsweep.report import figures as report_figures
from neuronsweep.report.page import table
from neuronsweep.stages import aggregate, extract, plan, report
from neuronsweep.store.records import BuildRecord, CaptureRecord

# what a 2-core AVX2 laptop without native bf16 measured (issue: first run on an ordinary laptop)
LAPTOP = caps.HostProbe.of(
    {
        "gemm_flops_per_s": {"fp32": 74e9, "bf16": 0.34e9, "fp16": 0.3e9},
        "flags": ["avx2", "fma"],
        "torch_import_s": 1.5,
        "stack_import_s": 0.5,
    }
)
NATIVE = dataclasses.replace(
    LAPTOP, gemm_flops_per_s={"fp32": 180e9, "bf16": 370e9, "fp16": 3e9}, flags=("avx512f", "avx512_bf16")
)


def test_dtypes_without_a_fast_path_are_unsupported_with_the_measured_reason():
    cfg = config.validate(
        {"suites": {"matmul": {"shapes": [{"m": 512, "k": 8192, "n": 2048}], "dtype": ["fp32", "bf16", "fp16"]}}}
    )
    laptop = plan.make_plan(RunConfig.of(cfg), "cpu", caps.slow_dtypes(LAPTOP))
    assert list(laptop.workloads) == ["matmul-m512-k8192-n2048-fp32"]
    why = laptop.unsupported["matmul-m512-k8192-n2048-bf16"]
    assert "no fast bf16 GEMM" in why and "0.34 GFLOP/s against 74.0 for fp32" in why and "avx2, fma" in why
    native = plan.make_plan(RunConfig.of(cfg), "cpu", caps.slow_dtypes(NATIVE))
    assert sorted(native.workloads) == ["matmul-m512-k8192-n2048-bf16", "matmul-m512-k8192-n2048-fp32"]
    assert "no fast fp16 GEMM" in native.unsupported["matmul-m512-k8192-n2048-fp16"]
    # only the cpu backend runs on the host's GEMMs
    assert len(plan.make_plan(RunConfig.of(cfg), "neuron", caps.slow_dtypes(LAPTOP)).workloads) == 3


@pytest.mark.torch  # the cpu plan probe or a torch child
@pytest.mark.workflow  # the real probe, a child measuring a GEMM per dtype: the README's tier
def test_the_real_probe_measures_every_dtype_once_and_is_cached(tmp_path):
    """Without a warm server (`measure`), or one that gives no answer, the probe is a child of its own."""
    first = caps.probe(tmp_path, 1, measure=lambda threads: None)
    (entry,) = (tmp_path / "host").glob("probe-*.json")
    record = json.loads(entry.read_text())  # the cached file: what it was measured on, where
    assert record["measured_in"] == "a child of its own"
    assert set(first.gemm_flops_per_s) == set(caps.DTYPES) and min(first.gemm_flops_per_s.values()) > 0
    assert first.torch_import_s > 0 and first.stack_import_s > 0 and record["cores"] and record["torch"]
    assert caps.probe(tmp_path, 1) == first  # read back, not measured again
    assert set(caps.cpu_flags()) <= set(caps.RELEVANT_FLAGS)


@pytest.mark.torch  # the cpu plan probe or a torch child
def test_plan_prints_an_estimate_and_doctor_the_rates(tmp_path):
    cfg = tiny_config(tmp_path, calibrated=False)
    (tmp_path / "c.yaml").write_text(json.dumps(cfg))
    out = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "estimate: at least " in out.stderr and "for 2 workloads on this host" in out.stderr
    doc = subprocess.run(
        [str(BIN / "neuronsweep"), "doctor", "--config", str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "relevant flags:" in doc and "fp32: " in doc and "GFLOP/s (runs on cpu)" in doc


def test_estimate_rests_on_the_probe():
    cfg = config.validate(
        {
            "capture": {"warmup": 1, "iterations": 10, "repeats": 1, "num_exec": 2},
            "suites": {"matmul": {"shapes": [{"m": 1000, "k": 1000, "n": 1000}]}},
        }
    )
    p = plan.make_plan(RunConfig.of(cfg), "cpu")
    probe = dataclasses.replace(LAPTOP, gemm_flops_per_s={"fp32": 2e9})
    line = plan.estimate(p, RunConfig.of(cfg), probe, warm_start=False)
    # 2e9 FLOP x 13 executions at 2 GFLOP/s = 13 s; 2 x (1.5 + 0.5) s of imports; calibration bound 2 x 3 s
    assert "at least 23 s" in line and "13 s of workload time" in line and "4 s of measured imports over 4 jobs" in line
    warm = plan.estimate(p, RunConfig.of(cfg), probe, warm_start=True)  # the stages fork from one process: imports once
    assert "at least 21 s" in warm and "2 s of measured imports once (warm start)" in warm
    assert "no run-time estimate on neuron" in plan.estimate(
        plan.make_plan(RunConfig.of(cfg), "neuron"), RunConfig.of(cfg), None
    )


@pytest.mark.workflow  # real calibration: seconds of GEMMs
def test_calibration_measures_only_the_dtypes_asked_and_records_the_flags(tmp_path):
    out = tmp_path / "calibration.json"
    subprocess.run(
        [
            str(BIN / "neuronsweep"),
            "calibrate",
            "--threads",
            "1",
            "--dtypes",
            "fp32",
            "--cache-dir",
            tmp_path / "cache",
            "--device-lock",
            tmp_path / "lock",
            "--out",
            out,
        ],
        check=True,
        capture_output=True,
    )
    cal = json.loads(out.read_text())
    assert list(cal["peak_flops_per_s"]) == ["fp32"] and cal["gemm"]["fp32"]["n"] >= caps.PROBE_N
    assert cal["gemm"]["fp32"]["runs"] >= 1 and cal["peak_bytes_per_s"] > 0 and cal["cache_hit"] is False
    assert cal["flags"] == caps.cpu_flags() and "not derived" in cal["theoretical_peak_note"]
    bad = subprocess.run(
        [str(BIN / "neuronsweep"), "calibrate", "--dtypes", "int8", "--out", out], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--dtypes 'int8': give a comma-separated list of fp32, bf16, fp16" in bad.stderr


def _cpu_metrics(latency: dict, calibration_flops: float) -> dict:
    spec = {"kind": "matmul", "m": 512, "k": 512, "n": 512, "dtype": "fp32"}
    build = BuildRecord.from_json(
        {"backend": "cpu", "spec": spec, "workload_id": "matmul-m512-k512-n512-fp32", "cache": {"hit": False}}
    )
    capture = CaptureRecord.from_json(
        {
            "backend": "cpu",
            "spec": spec,
            "workload_id": build.workload_id,
            "latency": latency,
            "host_load": {"start": {}, "end": {}, "under_load": None},
        }
    )
    cal = {"peak_flops_per_s": {"fp32": calibration_flops}, "peak_bytes_per_s": 50e9, "method": "m", "measured_at": "t"}
    return extract.compute({"total_time": 1e-3}, capture, build, cal)


def test_a_workload_above_the_measured_peak_raises_it_and_noise_is_marked():
    flops = 2 * 512**3
    fast = _cpu_metrics({"median_s": flops / 200e9, "spread_s": 0.1 * flops / 200e9, "n": 10}, 100e9)
    assert fast["roofline_efficiency_pct"] == pytest.approx(100.0)
    assert (
        fast["peak_flops_per_s"] == pytest.approx(200e9) and "raised to this workload's own rate" in fast["peak_source"]
    )
    assert fast["noisy"] is False and fast["captured_under_load"] is False
    noisy = _cpu_metrics({"median_s": 11.0, "spread_s": 6.3, "n": 10}, 100e9)
    assert noisy["noisy"] is True and "57% of the median" in noisy["notes"]["noisy"]
    # Trainium's tile model stays off cpu rows
    assert fast["tiles_total"] is None and "roofline_targets.csv" in fast["notes"]["tiles_total"]


def test_aggregate_puts_every_host_row_against_the_sweeps_best_rate():
    plan_ = {"workloads": {w: {"dtype": "fp32"} for w in ("a", "b")}}
    table = pd.DataFrame(
        [
            {
                "workload_id": "a",
                "status": "ok",
                "backend": "cpu",
                "flops": 2e9,
                "min_bytes": 1e6,
                "roofline_time_s": 0.01,
                "peak_flops_per_s": 200e9,
                "peak_bytes_per_s": 50e9,
                "peak_source": "raised",
                "roofline_efficiency_pct": 100.0,
            },
            {
                "workload_id": "b",
                "status": "ok",
                "backend": "cpu",
                "flops": 2e9,
                "min_bytes": 1e6,
                "roofline_time_s": 0.03,
                "peak_flops_per_s": 100e9,
                "peak_bytes_per_s": 50e9,
                "peak_source": "calibration",
                "roofline_efficiency_pct": 100.0,
            },
        ]
    )
    # as aggregate builds it: convert_dtypes makes a column of whole numbers (100.0, 100.0) Int64, which
    # refused the 33.3 written into it (a sweep of two cases failed there)
    out = aggregate.best_host_peaks(table.convert_dtypes(), plan_)
    assert out["peak_flops_per_s"].tolist() == [200e9, 200e9]
    assert out["roofline_efficiency_pct"].tolist() == pytest.approx([100.0, 100 / 3])
    assert "a at 200.0 GFLOP/s" in out.loc[1, "peak_source"]


def test_raised_roofs_never_exceed_100_percent():
    for flops, nbytes, t in [(1e9, 1e9, 1e-3), (1e12, 1e3, 1e-3), (1e3, 1e12, 1.0)]:
        out = roofline.raised_to_achieved(flops, nbytes, 1e9, 1e9, t, "s")
        assert out["roofline_efficiency_pct"] <= 100.0 + 1e-9


def test_whiskers_stop_at_the_fastest_sample_and_wide_axes_go_log():
    rows = pd.DataFrame({"time_s": [1.0, 11.0], "latency_spread_s": [0.2, 30.0], "latency_min_s": [0.95, 2.9]})
    lower, upper = report_figures.whiskers(rows)
    assert lower.tolist() == pytest.approx([50.0, 8100.0]) and upper.tolist() == pytest.approx([100.0, 15000.0])
    assert report_figures.axis_type([0.1, 50.0]) == "log" and report_figures.axis_type([1.0, 5.0]) == "linear"
    html = table(pd.DataFrame({"a": [1], "tiles_total": [None]}))
    assert 'class="scroll"' in html and "tiles_total" not in html and 'class="filter"' in html


@pytest.mark.workflow
def test_nested_config_override_from_the_command_line(tmp_path):
    """Snakemake hands nested --config values over as strings; they are coerced once, by the schema."""
    run = snakemake(
        tmp_path, "-n", "--config", "capture={iterations: 4, repeats: 2}", "-p", config=tiny_config(tmp_path)
    )
    assert "--iterations 4 --repeats 2" in run.output
    cfg = config.validate(
        {
            "capture": {"iterations": "3", "warmup": 2.0},
            "neuron": {"lnc": "2"},
            "suites": {"matmul": {"grid": {"m": ["128"], "k": [1], "n": [1]}}},
        }
    )
    assert (cfg["capture"]["iterations"], cfg["capture"]["warmup"], cfg["neuron"]["lnc"]) == (3, 2, 2)
    assert cfg["suites"]["matmul"]["grid"]["m"] == [128]
    with pytest.raises(config.UserError, match="'capture.iterations' must be of type integer, not 3.5"):
        config.validate({"capture": {"iterations": 3.5}, "suites": {"matmul": {"shapes": [{"m": 1, "k": 1, "n": 1}]}}})


def test_noise_keeps_a_case_out_of_comparisons_but_not_out_of_its_diagnosis():
    base = {
        "status": "ok",
        "backend": "cpu",
        "suite": "matmul",
        "group": "g",
        "flops": 1.0,
        "roofline_bound": "compute",
        "bound_class": "compute",
        "recompilation_detected": False,
        "latency_n": 10,
    }
    table = pd.DataFrame(
        [
            {
                **base,
                "scenario_id": "fast",
                "rank_in_group": 1,
                "x_of_best": 1.0,
                "significant": False,
                "noisy": False,
                "time_s": 1e-3,
                "latency_spread_s": 1e-5,
            },
            {
                **base,
                "scenario_id": "slow-noisy",
                "rank_in_group": 2,
                "x_of_best": 3.0,
                "significant": True,
                "noisy": True,
                "time_s": 3e-3,
                "latency_spread_s": 2e-3,
                "recompilation_detected": True,
                "recompiles_during_timing": 10,
            },
        ]
    )
    recs = report.recommendations(table)
    assert not any("takes 3.00x" in r for r in recs)  # no comparison built on a noisy time
    assert any(r.startswith("slow-noisy: recompilation detected (10 compiles in 10 timed calls)") for r in recs)
    assert any("(noisy): slow-noisy" in r for r in recs)


def test_a_dtype_has_one_colour_in_every_figure_and_bars_reach_100_percent(tmp_path):
    """bf16 was blue on the host roofline and orange on the targets'; cpu's "where the time goes"
    bars stopped at 67-76 % (the top 5 ops only); the tiling chart started its y-axis at 740."""
    rows = pd.DataFrame(
        {
            "workload_id": ["a", "b"],
            "scenario_id": ["a", "b"],
            "dtype": ["bf16", "fp32"],
            "backend": "cpu",
            "flops": [2e9, 2e9],
            "min_bytes": [1e6, 1e6],
            "arithmetic_intensity_flops_per_byte": [2e3, 2e3],
            "roofline_time_s": [1e-3, 2e-3],
            "peak_flops_per_s": [1e12, 5e11],
            "peak_bytes_per_s": [1e11, 1e11],
            "roofline_efficiency_pct": [50.0, 50.0],
            "roofline_bound": ["compute", "compute"],
        }
    )
    host = report_figures.roofline(rows, "cpu")
    targets = rows.assign(ideal_compute_s=1e-3, ideal_memory_s=1e-4, target="trn2").iloc[::-1]  # fp32 first
    modelled = report_figures.target_rooflines(targets)
    colour = {
        fig: {t.name: (t.marker.color if t.mode == "markers" else t.line.color) for t in f.data}
        for fig, f in (("host", host), ("targets", modelled))
    }
    assert colour["host"]["bf16 workloads"] == colour["targets"]["bf16 workloads"] != colour["host"]["fp32 workloads"]

    ops = tmp_path / "a" / "tables"
    ops.mkdir(parents=True)
    names = [f"aten::op{i}" for i in range(7)]
    pd.DataFrame({"class": "cpu_thread", "name": names, "self_ns": [30, 20, 15, 10, 10, 8, 7]}).to_csv(
        ops / "opcodes.csv", index=False
    )
    for col in report_figures.ENGINE_COLS:
        rows[col] = None
    bars = report_figures.breakdown(rows.iloc[:1], tmp_path)
    assert [t.name for t in bars.data][-1] == "other"
    assert sum(t.x[0] for t in bars.data) == pytest.approx(100.0) and bars.data[-1].x[0] == pytest.approx(15.0)

    tiling = pd.DataFrame(
        {
            "value": [511, 512, 513],
            "dim": "k",
            "boundary": 512,
            "multiple": 1,
            "scenario_id": ["t1", "t2", "t3"],
            "achieved_flops_per_s": [850e9, 760e9, 740e9],
            "time_s": [1e-3, 1e-3, 1e-3],
        }
    )
    chart = report_figures.suite("tiling", tiling)
    assert chart.layout.yaxis.rangemode == "tozero"
    assert chart.layout.xaxis.type == "linear" and chart.layout.xaxis.tickformat == "d"


def test_scenarios_sharing_a_workload_get_one_recommendation_naming_both():
    row = {
        "status": "ok",
        "backend": "cpu",
        "suite": "llm",
        "workload_id": "matmul-m512-k2048-n8192-bf16",
        "roofline_bound": "memory",
        "arithmetic_intensity_flops_per_byte": 10.0,
        "ridge_flops_per_byte": 40.0,
        "significant": False,
        "x_of_best": 1.0,
        "noisy": False,
        "recompilation_detected": False,
        "bound_class": "memory",
    }
    table = pd.DataFrame([{**row, "scenario_id": "llm-ffn_up"}, {**row, "scenario_id": "llm-ffn_gate"}])
    recs = [r for r in report.recommendations(table) if "memory-bound" in r]
    assert len(recs) == 1 and recs[0].startswith("llm-ffn_up and llm-ffn_gate (one workload) is memory-bound")
