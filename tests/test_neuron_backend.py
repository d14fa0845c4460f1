"""The neuron backend against the stand-in toolchain (tests/standin), which enforces the documented contracts."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest
import yaml
from helpers import (
    BIN,
    NEURON_WIDS,
    neuron_config,
    neuron_settings,
    neuron_wdir,
    snakemake,
    standin_env,
    standin_neff,
    standin_runs,
)

from neuronsweep.analysis.metrics.bounds import Bounds, Efficiency
from neuronsweep.backends import neuron, neuron_profiler
from neuronsweep.backends.programs import xla_program
from neuronsweep.config.schema import section_defaults
from neuronsweep.errors import UserError
from neuronsweep.formats.pftrace_reader import read as read_pftrace

# ------------------------------------------------------------------------------ contracts, unit


def test_cc_flags_from_config():
    section = {
        "target": "trn2",
        "optlevel": 3,
        "auto_cast": "matmult",
        "lnc": 2,
        "disable_dge": True,
        "extra_cc_flags": "--verbose",
    }
    assert (
        neuron.Compiler.of(section_defaults("neuron", section)).cc_flags()
        == "--target trn2 -O3 --auto-cast matmult --logical-nc-config 2 --disable-dge --verbose"
    )
    # --auto-cast is always explicit: the SDK's default changed (matmult -> none in 2.27)
    assert (
        neuron.Compiler.of(section_defaults("neuron", {"target": "inf2"})).cc_flags()
        == "--target inf2 -O2 --auto-cast none"
    )


def _result(phases, digests):
    return {"phases": phases, "digests": digests}


def test_attribution_keeps_input_graphs_apart_and_fails_when_ambiguous():
    spec = {"kind": "matmul", "m": 1, "k": 1, "n": 1, "dtype": "fp32"}
    ok = _result(
        {"start": [], "inputs": ["/c/in.neff"], "workload": ["/c/in.neff", "/c/wl.neff", "/d/MODULE_2.neff"]},
        {"/c/in.neff": "a", "/c/wl.neff": "b", "/d/MODULE_2.neff": "b"},
    )
    neff, candidates = xla_program.attribute(ok, spec, "NEFF")
    assert neff == "/c/wl.neff"
    assert [(c["path"], c["phase"]) for c in candidates] == [
        ("/c/in.neff", "inputs"),
        ("/c/wl.neff", "workload"),
        ("/d/MODULE_2.neff", "workload"),
    ]
    split = _result(
        {"start": [], "inputs": [], "workload": ["/c/a.neff", "/c/b.neff"]}, {"/c/a.neff": "a", "/c/b.neff": "b"}
    )
    with pytest.raises(UserError, match="compiled 2 different NEFFs"):
        xla_program.attribute(split, spec, "NEFF")
    with pytest.raises(UserError, match="no NEFF was compiled for the workload graph"):
        xla_program.attribute(
            _result({"start": [], "inputs": ["/c/a.neff"], "workload": ["/c/a.neff"]}, {"/c/a.neff": "a"}), spec, "NEFF"
        )


# ------------------------------------------------------------------------ the DAG on neuron


@pytest.mark.workflow
def test_multi_case_sweep_on_neuron(neuron_run):
    tmp_path = neuron_run
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert list(table["status"]) == ["ok", "ok"] and set(table["backend"]) == {"neuron"}
    report = (tmp_path / "results" / "t" / "report.html").read_text()
    assert "<h2>Headroom</h2>" in report and 'data-figure="headroom"' in report  # the neuron cases' ladders
    runs = standin_runs(tmp_path)
    captures = [r["argv"] for r in runs if r["argv"][0] == "capture"]
    assert len(captures) == 2
    for wid in NEURON_WIDS:
        d = neuron_wdir(tmp_path, wid)
        build = json.loads((d / "build" / "build.json").read_text())
        assert build["cc_flags"] == "--target inf2 -O2 --auto-cast none" and build["auto_cast"] == "none"
        assert (
            build["env"]["NEURON_FRAMEWORK_DEBUG"] == "1"
            and "neuron-compile-cache" in build["env"]["NEURON_COMPILE_CACHE_URL"]
        )
        assert {c["phase"] for c in build["candidates"]} == {"inputs", "workload"}
        cap = json.loads((d / "capture" / "capture.json").read_text())
        assert cap["argv"][1:] == [
            "capture",
            "-n",
            str(d / "build" / "model.neff"),
            "-s",
            str(d / "capture" / "raw" / "profile.ntff"),
            "--num-exec",
            "2",
            "--profile-nth-exec",
            "2",
            "--enable-dge-notifs",  # on by default: the DmaPacket table is complete only with it
            "--ignore-exec-errors",
        ]
        assert cap["ntff_written_as"] == "profile_exec_2.ntff" and (d / "capture" / "profile.ntff").is_file()
        assert cap["single_io"] is False and cap["outputs_valid"] is True
        assert cap["latency"]["n"] == 3 and cap["latency"]["recompiles_during_timing"] == 0
        assert (d / "view" / "parquet" / "Summary.parquet").is_file()
        op_mix = pd.read_csv(d / "tables" / "op_mix.csv")  # from the parquet Instruction table, with time
        assert "MATMUL" in set(op_mix["opcode"]) and (op_mix["total_time"] > 0).all()
        assert any(s.name == "MATMUL" for s in read_pftrace(d / "view" / "trace.pftrace").slices)
        summary = json.loads((d / "view" / "summary.json").read_text())
        m = json.loads((d / "metrics.json").read_text())
        assert m["tensor_engine_active_pct"] == pytest.approx(100 * summary["tensor_engine_active_time_percent"])
        assert m["tensor_engine_active_pct"] == pytest.approx(
            100 * m["tensor_engine_active_time_s"] / m["profile_total_time_s"]
        )
        assert m["profile_flops_tool"] == m["flops"]  # the tool's FLOPs and 2·M·K·N agree
        assert m["provenance"]["metadata_peaks"] is True  # the peaks came from the view's parquet Metadata
        # every Neuron metric is filled; the stand-in's eager "device" records no ExecuteTime
        # (the Memory Tracker's per-tensor view has no exported field); the headroom's notes say what each
        # bound rests on, and the stand-in does not throttle
        headroom = set(Bounds.keys()) | set(Efficiency.keys())
        assert m["latency_median_s"] > 0 and set(m["notes"]) - {"captured_under_load", "noisy"} - headroom == {
            "execute_median_s",
            "threads",
            "largest_tensor_bytes",
        }
        assert all(m[k] is not None for k in Bounds.keys()), {k: m["notes"].get(k) for k in Bounds.keys()}
        assert m["profile_warnings"] == [] and m["dma_excess_ratio"] == 1.0  # captured with DGE notifications
        assert {k for k in Efficiency.keys() if m[k] is None} == {
            "throttle_util_limit_pct",  # the stand-in's ThrottleSummary: a limit of 1.0, no activity below it
            "throttled_time_pct",
        }
        assert m["throttling"] == [{"activity": "unknown", "nc": 0, "util_limit_pct": 100.0, "time_pct": 0.0}]
        assert m["throttled_active_flops_pct"] == 0.0
        # the stand-in's DmaPacketAggregated: dma_transfer_count transfers sharing the bytes, over 16 partitions
        per = summary["dma_transfer_total_bytes"] // summary["dma_transfer_count"] / 16
        assert m["dma_small_descriptor_bytes_pct"] == (100.0 if per < 4096 else 0.0)
        legacy = json.loads((d / "view" / "profile.json").read_text())  # device memory, from the legacy json
        assert m["hbm_tensors_bytes"] == next(
            r["amount_bytes"] for r in legacy["nc_mem_usage"] if r["usage_type"] == "Tensors"
        )
        assert m["sbuf_peak_usage_pct"] == pytest.approx(
            100 * max(r["usage_avg"] for r in legacy["instruction_usage"] if r["type"] == "sb")
        )


@pytest.mark.slow
@pytest.mark.workflow
def test_oom_then_single_io_retry_and_a_case_failing_for_good_keeps_the_rest(tmp_path):
    """One sweep, two faults: the first case's captures always fail, the second's run out of device memory
    unless --single-io."""
    bad, oom = NEURON_WIDS
    env = standin_env(tmp_path, STANDIN_OOM_MATCH=oom, STANDIN_FAIL_MATCH=bad)
    run = snakemake(tmp_path, config=neuron_config(tmp_path), env=env, check=False)
    assert run.proc.returncode != 0
    attempts = [r["argv"] for r in standin_runs(tmp_path) if r["argv"][0] == "capture" and oom in r["argv"][2]]
    assert len(attempts) == 2 and "--single-io" not in attempts[0] and "--single-io" in attempts[1]
    cap = json.loads((neuron_wdir(tmp_path, oom) / "capture" / "capture.json").read_text())
    assert cap["single_io"] is True and cap["outputs_valid"] is False
    assert json.loads((neuron_wdir(tmp_path, oom) / "metrics.json").read_text())["single_io"] is True
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("scenario_id")
    assert table.loc[oom, "status"] == "ok"
    assert table.loc[bad, "status"] == "failed"
    assert "neuron-explorer capture exited 1: ERROR NRT: nrt_load failed" in table.loc[bad, "reason"]
    tries = [r for r in standin_runs(tmp_path) if r["argv"][0] == "capture" and bad in r["argv"][2]]
    assert len(tries) == 2  # retried once (retries: 1), then given up


# ------------------------------------------------------------------------------------- NKI


@pytest.mark.torch  # the cpu plan probe or a torch child
def test_a_failing_torch_xla_child_is_one_sentence_with_its_log(tmp_path):
    import importlib.util

    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch-xla is installed here, so the child would not fail")
    spec = {"kind": "matmul", "m": 1, "k": 1, "n": 1, "dtype": "fp32"}
    with pytest.raises(UserError) as err:
        xla_program.run(spec, tmp_path / "out.json", dict(__import__("os").environ), tmp_path, [], 300)
    assert str(err.value) == (
        f"case matmul-m1-k1-n1-fp32: the torch-xla run exited 1: ModuleNotFoundError: No module "
        f"named 'torch_xla' (full log: {tmp_path / 'xla_program.log'})."
    )
    assert "Traceback" in (tmp_path / "xla_program.log").read_text()


# ------------------------------------------------------------- a stand-in as awkward as the real tools


def test_real_oom_texts_trigger_the_single_io_retry():
    for text in (
        "ERROR NRT: Failed to allocate 268435456 bytes on ND 0 for tensor 'input0'",
        "nrt_load status=NRT_RESOURCE",
        "Allocation Failure: hbm",
        "out of memory",
    ):
        assert neuron_profiler.OOM.search(text), text
    assert not neuron_profiler.OOM.search("NRT: nrt_load failed: NEFF load error")


def test_a_capture_fails_while_another_process_holds_the_cores(tmp_path, monkeypatch):
    import sys

    env = standin_env(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import standin_cores, time; standin_cores.claim(); print('held', flush=True); time.sleep(60)",
        ],
        env={**__import__("os").environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match="Requested:1 Available:0"):
            neuron_profiler.capture_neff(
                standin_neff(tmp_path), tmp_path / "cap", neuron_settings(1, 1, tmp_path, "neuron-profile")
            )
    finally:
        holder.kill()


@pytest.mark.workflow
def test_neuron_builds_hold_the_device_and_pin_their_cores(neuron_run):
    tmp_path = neuron_run
    for wid in NEURON_WIDS:
        build = json.loads((neuron_wdir(tmp_path, wid) / "build" / "build.json").read_text())
        assert build["visible_cores"] == "0-1" and build["lnc"] == 1  # chip isolation: the one chip's cores
        span = json.loads((neuron_wdir(tmp_path, wid) / "capture" / "capture.json").read_text())["device_span"]
        assert span["slot"] == 0 and span["cores"] == "0-1" and span["acquired_unix"] < span["released_unix"]
    # every stand-in process that ran on the device (captures, torch-xla builds and timing) got its core:
    # none failed with "Available:0", though builds and captures were scheduled on 2 cores at once
    text = "".join(p.read_text() for p in (tmp_path / "results").rglob("*.log"))
    assert "Available:0" not in text


@pytest.mark.torch  # the cpu plan probe or a torch child
@pytest.mark.workflow  # `neuronsweep plan` in a child, twice: a stage's real command (11 s of the inner loop)
def test_backend_neuron_is_refused_before_any_job_on_a_machine_without_a_device(tmp_path):
    cfg = neuron_config(tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, **standin_env(tmp_path)}
    plan = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert plan.returncode == 0 and "backend 'neuron' set in config: " in plan.stderr
    assert "neuron-ls --json-output: 1 device(s), 2 NeuronCore(s)" in plan.stderr  # the driver tool's list
    none = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        env={**env, "STANDIN_NO_DEVICE": "1"},
    )
    assert none.returncode == 2 and none.stderr.strip().endswith(  # the tool's answer: an empty device list
        "--json-output: 0 device(s), 0 NeuronCore(s)); run on a trn1, trn2 or inf2 instance or set backend: auto."
    )
    assert "config key 'backend' is neuron, but this machine has no Neuron device (no /dev/neuron*" in none.stderr


@pytest.mark.workflow  # `neuronsweep plan` in a child: a stage's real command (9 s of the inner loop)
@pytest.mark.torch  # the cpu plan probe or a torch child
def test_a_case_larger_than_a_neuroncores_hbm_is_refused_in_the_plan(tmp_path):
    cfg = neuron_config(tmp_path, suites={"matmul": {"shapes": [{"m": 65536, "k": 65536, "n": 8}]}})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    plan = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        env={**os.environ, **standin_env(tmp_path)},
    )
    assert plan.returncode == 2, plan.stderr
    assert (
        "config key 'suites.matmul': case matmul-m65536-k65536-n8-fp32 needs 16.0 GiB at the least (its tensors "
        "and intermediates), more than 80% of one inf2 logical NeuronCore's HBM (16.0 GiB)"
    ) in plan.stderr


# ---------------------------------------------------------------------------- collectives suite
