"""The neuron backend against the stand-in toolchain (tests/standin), which enforces the documented contracts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import BIN, DATA, neuron_config, snakemake, standin_env, standin_runs

from neuronsweep.backends import neuron, neuron_profiler, xla_program
from neuronsweep.backends.common import run_tool
from neuronsweep.config.schema import section_defaults
from neuronsweep.config.settings import CaptureSettings, ViewSettings
from neuronsweep.errors import UserError
from neuronsweep.formats.pftrace_reader import read as read_pftrace

WIDS = ["matmul-m16-k16-n16-fp32", "matmul-m32-k16-n16-fp32"]


def settings(num_exec: int, nth: int, tmp: Path, profiler: str) -> CaptureSettings:
    return CaptureSettings(
        warmup=1,
        iterations=1,
        repeats=1,
        num_exec=num_exec,
        nth_exec=nth,
        threads=1,
        device_lock=str(tmp / "device.lock"),
        timeout_s=60,
        visible_cores="0",
        options={"profiler": profiler},
    ).for_backend("neuron")  # as slots.held sets it


def wdir(root: Path, wid: str) -> Path:
    return root / "results" / "t" / "neuron" / "workloads" / wid


# ------------------------------------------------------------------------------ contracts, unit


# AWS nki-library test/utils/profiler_utils.py _generate_expected_ntff_files, and an NxDI helper for ranks
@pytest.mark.parametrize(
    "num_exec, nth, rank, name",
    [
        (1, 1, None, "profile.ntff"),
        (3, 1, None, "profile.ntff"),
        (2, 2, None, "profile_exec_2.ntff"),
        (5, 3, None, "profile_exec_3.ntff"),
        (1, 1, 3, "profile_rank_3.ntff"),
        (2, 2, 0, "profile_rank_0_exec_2.ntff"),
        (4, 1, 1, "profile_rank_1.ntff"),
    ],
)
def test_expected_ntff_follows_the_documented_naming(num_exec, nth, rank, name):
    assert neuron_profiler.expected_ntff(num_exec, nth, rank=rank) == name


@pytest.mark.parametrize(
    "num_exec, nth, written",
    [
        (1, 1, ["profile.ntff"]),
        (3, 1, ["profile.ntff", "profile_exec_2.ntff", "profile_exec_3.ntff"]),
        (2, 2, ["profile_exec_2.ntff"]),
        (4, 3, ["profile_exec_3.ntff"]),
        (4, 2, ["profile_exec_2.ntff", "profile_exec_4.ntff"]),  # every 2nd execution is profiled
    ],
)
def test_capture_finds_the_profiled_ntff_for_every_documented_case(tmp_path, num_exec, nth, written, monkeypatch):
    """--profile-nth-exec N profiles every Nth execution: the first profiled one after the warm-up is
    used, every one is listed and kept (nth 1 of several used to fail after the capture had run)."""
    for key, value in standin_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    neff = tmp_path / "model.neff"
    neff.write_bytes(b"NEFF\0" + json.dumps({"graph": "g", "ops": []}).encode())
    rec = neuron_profiler.capture_neff(neff, tmp_path / "cap", settings(num_exec, nth, tmp_path, "neuron-profile"))
    assert rec["ntff_written_as"] == neuron_profiler.expected_ntff(num_exec, nth)
    assert (tmp_path / "cap" / "profile.ntff").is_file() and rec["ntffs_written"] == written
    assert sorted(p.name for p in (tmp_path / "cap" / "raw").glob("*.ntff")) == written[1:]  # the rest kept


def test_find_ntff_prefers_the_documented_name_and_fails_on_ambiguity(tmp_path):
    for name in ("profile.ntff", "profile_exec_2.ntff", "profile_exec_3.ntff"):
        (tmp_path / name).write_bytes(b"x")
    assert neuron_profiler.find_ntff(tmp_path, 3, 2).name == "profile_exec_2.ntff"
    (tmp_path / "profile_exec_2.ntff").unlink()
    with pytest.raises(UserError, match="expected profile_exec_2.ntff after capture, found"):
        neuron_profiler.find_ntff(tmp_path, 3, 2)
    rank = tmp_path / "rank"
    rank.mkdir()
    (rank / "profile_rank_0_exec_2.ntff").write_bytes(b"x")  # collectives variant
    assert neuron_profiler.find_ntff(rank, 2, 2).name == "profile_rank_0_exec_2.ntff"


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
        neuron.cc_flags(section_defaults("neuron", section))
        == "--target trn2 -O3 --auto-cast matmult --logical-nc-config 2 --disable-dge --verbose"
    )
    # --auto-cast is always explicit: the SDK's default changed (matmult -> none in 2.27)
    assert neuron.cc_flags(section_defaults("neuron", {"target": "inf2"})) == "--target inf2 -O2 --auto-cast none"


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


def test_the_standin_rejects_what_the_real_tool_rejects(tmp_path):
    env = {**standin_env(tmp_path)}

    def run(*a, **kw):
        return subprocess.run(
            ["neuron-profile", *a], capture_output=True, text=True, env={**os.environ, **env, **kw}, cwd=tmp_path
        )

    assert run("capture", "-n", "x.neff", "--profile-nth", "2").returncode == 2  # no abbreviations
    assert "does not exist" in run("capture", "-n", "missing.neff").stderr
    assert run("view", "-n", "a", "-s", "b", "--output-format", "pdf").returncode == 2
    assert "HOME is not defined" in run("view", "-n", "a", "-s", "b", HOME="").stderr


# ------------------------------------------------------------------------ the DAG on neuron


@pytest.fixture(scope="module")
def neuron_run(tmp_path_factory) -> Path:
    """The two-case sweep on the stand-in toolchain, run once for the tests that only read it; captures hold
    the device half a second, so builds and captures overlap on the chip's two cores."""
    tmp_path = tmp_path_factory.mktemp("neuron-run")
    snakemake(tmp_path, config=neuron_config(tmp_path), env=standin_env(tmp_path, STANDIN_CAPTURE_SECONDS="0.5"))
    return tmp_path


@pytest.mark.workflow
def test_multi_case_sweep_on_neuron(neuron_run):
    tmp_path = neuron_run
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert list(table["status"]) == ["ok", "ok"] and set(table["backend"]) == {"neuron"}
    runs = standin_runs(tmp_path)
    captures = [r["argv"] for r in runs if r["argv"][0] == "capture"]
    assert len(captures) == 2
    for wid in WIDS:
        d = wdir(tmp_path, wid)
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
        # (the Memory Tracker's per-tensor view has no exported field)
        assert m["latency_median_s"] > 0 and set(m["notes"]) - {"captured_under_load", "noisy"} == {
            "execute_median_s",
            "threads",
            "largest_tensor_bytes",
        }
        legacy = json.loads((d / "view" / "profile.json").read_text())  # device memory, from the legacy json
        assert m["hbm_tensors_bytes"] == next(
            r["amount_bytes"] for r in legacy["nc_mem_usage"] if r["usage_type"] == "Tensors"
        )
        assert m["sbuf_peak_usage_pct"] == pytest.approx(
            100 * max(r["usage_avg"] for r in legacy["instruction_usage"] if r["type"] == "sb")
        )


@pytest.mark.workflow
def test_exports_as_documented_and_a_tool_without_the_json_export(neuron_run, tmp_path):
    """No --ingest-only with -n/-s (documented only as `view -d DIR --ingest-only`; the stand-in refuses it):
    the stand-in's explorer keeps serving after every export, so each is stopped once written; a tool after
    SDK 2.33 has no json export: the
    case stands, view.json says why, and the memory fields read from it are null with that reason."""
    d = wdir(neuron_run, WIDS[0])
    views = json.loads((d / "view" / "view.json").read_text())["commands"]
    assert set(views) == {"summary-json", "parquet", "json", "perfetto"}
    assert not any("--ingest-only" in argv for argv in views.values())
    env = {**os.environ, **standin_env(tmp_path, STANDIN_NO_JSON="1")}
    options = json.dumps({"profiler": "neuron-explorer", "json": True, "parquet": True, "pftrace": False})
    ns = [str(BIN / "neuronsweep")]
    subprocess.run(
        [*ns, "view", "--capture", d / "capture", "--out", tmp_path / "view", "--options", options],
        check=True,
        env=env,
        capture_output=True,
        cwd=neuron_run,  # the records' paths are the run's
    )
    record = json.loads((tmp_path / "view" / "view.json").read_text())
    assert "invalid choice: 'json'" in record["skipped"]["json"] and "json" not in record["outputs"]
    out = tmp_path / "metrics.json"
    subprocess.run(
        [
            *ns,
            "extract",
            "--summary-json",
            tmp_path / "view" / "summary.json",
            "--profile-json",
            tmp_path / "view" / "profile.json",
            "--capture-json",
            d / "capture" / "capture.json",
            "--out",
            out,
        ],
        check=True,
        env=env,
        capture_output=True,
        cwd=neuron_run,
    )
    m = json.loads(out.read_text())
    assert m["hbm_tensors_bytes"] is None and "ends after SDK 2.33" in m["notes"]["hbm_tensors_bytes"]
    assert m["profile_total_time_s"] > 0 and m["mfu_recomputed_pct"] is not None


@pytest.mark.workflow
def test_memory_tracker_sets_the_build_env_capture_and_view_flags(tmp_path):
    cfg = neuron_config(tmp_path, suites={"matmul": {"shapes": [{"m": 16, "k": 16, "n": 16}]}})
    cfg["neuron"]["memory_tracker"] = True
    snakemake(tmp_path, config=cfg, env=standin_env(tmp_path))
    d = wdir(tmp_path, WIDS[0])
    build = json.loads((d / "build" / "build.json").read_text())
    assert build["env"]["XLA_IR_DEBUG"] == "1" and build["env"]["XLA_HLO_DEBUG"] == "1"
    runs = standin_runs(tmp_path)
    assert all("--enable-dge-notifs" in r["argv"] for r in runs if r["argv"][0] == "capture")
    views = [r["argv"] for r in runs if r["argv"][0] == "view" and "--show-profile-schema" not in r["argv"]]
    assert views and all("--enable-memory-tracker" in argv for argv in views)
    m = json.loads((d / "metrics.json").read_text())
    assert m["hbm_tensors_bytes"] > 0 and m["largest_tensor_bytes"] is None
    assert "no exported field" in m["notes"]["largest_tensor_bytes"]

    # a capture made without the DGE notifications: the stand-in's view refuses the tracker, as does ours
    capture = json.loads((d / "capture" / "capture.json").read_text())
    capture["argv"] = [a for a in capture["argv"] if a != "--enable-dge-notifs"]
    capture["dge_notifications"] = False
    (d / "capture" / "capture.json").write_text(json.dumps(capture))
    proc = subprocess.run(
        [
            str(BIN / "neuronsweep"),
            "view",
            "--capture",
            d / "capture",
            "--out",
            tmp_path / "v",
            "--options",
            json.dumps(cfg["neuron"]),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **standin_env(tmp_path)},
    )
    assert proc.returncode != 0 and "without DGE notifications (--enable-dge-notifs)" in proc.stderr
    env = {**os.environ, **standin_env(tmp_path)}
    raw = tmp_path / "raw"
    raw.mkdir()
    neff = d / "build" / "model.neff"
    subprocess.run(
        ["neuron-profile", "capture", "-n", neff, "-s", raw / "p.ntff"],
        env=env,
        check=True,
        capture_output=True,
        cwd=raw,
    )
    refused = subprocess.run(
        [
            "neuron-profile",
            "view",
            "-n",
            neff,
            "-s",
            raw / "p.ntff",
            "--output-format",
            "summary-json",
            "--enable-memory-tracker",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "--enable-dge-notifs" in refused.stderr


def test_multi_worker_capture_view_and_extract_per_rank(tmp_path):
    """A collectives NEFF across 4 workers (guide: --collectives-workers-per-node): profile_rank_<r>_exec_2
    files, a view per rank with where it ran (nc_idx, nd_idx), ranks.csv, the straggler figure, and the
    CC-core track classified as collectives with its overlap with compute."""
    env = {**os.environ, **standin_env(tmp_path, STANDIN_DEVICES="2")}
    neff = tmp_path / "cc.neff"
    neff.write_bytes(b"NEFF\0" + json.dumps({"graph": "cc", "ops": [["mm", [[128, 128], [128, 128]]]]}).encode())

    def ns(*args):
        proc = subprocess.run([str(BIN / "neuronsweep"), *map(str, args)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc

    lock = ["--device-lock", tmp_path / "lock"]
    ns(
        "capture",
        "--neff",
        neff,
        "--out",
        tmp_path / "cap",
        "--num-exec",
        "2",
        "--nth-exec",
        "2",
        "--collectives-workers-per-node",
        "4",
        "--options",
        '{"profiler": "neuron-profile"}',
        *lock,
    )
    cap = json.loads((tmp_path / "cap" / "capture.json").read_text())
    assert cap["argv"][-3:-1] == ["--collectives-workers-per-node", "4"]
    assert [r["written_as"] for r in cap["ranks"]] == [f"profile_rank_{r}_exec_2.ntff" for r in range(4)]
    assert cap["device_span"]["cores"] == "0-3"  # two chip slots joined: one NeuronCore per worker
    ns("view", "--capture", tmp_path / "cap", "--out", tmp_path / "view", "--options", '{"profiler": "neuron-profile"}')
    view = json.loads((tmp_path / "view" / "view.json").read_text())
    assert [(r["rank"], r["nc_idx"], r["nd_idx"]) for r in view["ranks"]] == [
        (0, 0, 0),
        (1, 1, 0),
        (2, 0, 1),
        (3, 1, 1),
    ]
    # `view -d` is documented for inspect output: where it refuses a capture folder the per-rank views
    # stand and the combined one is null with the reason
    strict = {**env, "STANDIN_VIEW_D_INSPECT_ONLY": "1"}
    subprocess.run(
        [
            str(BIN / "neuronsweep"),
            "view",
            "--capture",
            tmp_path / "cap",
            "--out",
            tmp_path / "strict",
            "--options",
            '{"profiler": "neuron-profile"}',
        ],
        check=True,
        env=strict,
        capture_output=True,
    )
    refused = json.loads((tmp_path / "strict" / "view.json").read_text())
    assert refused["session"] is None and "nor inspect output" in refused["session_why"]
    assert len(refused["ranks"]) == 4
    # the combined view (guide: `view -d output`, no -n) over the folder the capture wrote, the NEFF copied
    # in as the capture how-to says (a stand-in `view -d` given -n refuses it)
    session = view["session"]
    assert session["argv"][2:4] == ["-d", str((tmp_path / "cap" / "raw").resolve())] and "-n" not in session["argv"]
    assert list((tmp_path / "cap" / "raw").glob("neff_*.neff"))
    assert session["system_pftrace"] == "session/system_profile.pftrace"
    [device] = session["device_pftraces"]
    assert device.startswith("session/device_profile_model_") and device.endswith(".pftrace")
    combined = ns(
        "query",
        tmp_path / "view" / device,
        "SELECT p.name AS rank, count(*) AS n FROM slice s JOIN track t "
        "ON s.track_id = t.id JOIN track p ON t.parent_id = p.id WHERE s.name = 'AllReduce' GROUP BY 1 "
        "ORDER BY 1",
        "--csv",
    ).stdout.splitlines()
    assert combined == ["rank,n"] + [f"Rank {r},1" for r in range(4)]  # every rank on one timeline
    assert (tmp_path / "cap" / "profile_rank_3.ntff").stat().st_ino == (
        tmp_path / "cap" / "raw" / "profile_rank_3_exec_2.ntff"
    ).stat().st_ino  # one copy on disk
    ns(
        "extract",
        "--summary-json",
        tmp_path / "view" / "summary.json",
        "--capture-json",
        tmp_path / "cap" / "capture.json",
        "--out",
        tmp_path / "m" / "metrics.json",
    )
    ranks = pd.read_csv(tmp_path / "m" / "tables" / "ranks.csv")
    assert list(ranks["rank"]) == [0, 1, 2, 3] and (ranks["cc_op_time_s"] > 0).all()
    m = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert m["ranks_profiled"] == 4 and m["rank_straggler_ratio"] == pytest.approx(
        ranks["total_time_s"].max() / ranks["total_time_s"].min()
    )
    busy = pd.read_csv(tmp_path / "m" / "tables" / "engine_busy.csv").set_index("class")
    assert busy.loc["collectives", "busy_ns"] == 440  # the CC-core track, classified
    overlap = pd.read_csv(tmp_path / "m" / "tables" / "overlap.csv")
    pair = overlap[(overlap["class_a"] == "collectives") & (overlap["class_b"] == "tensor")]
    assert list(pair["overlap_ns"]) == [40]  # the collective overlaps the matmul for 40 ns

    # one worker only: --collectives-profile-id
    ns(
        "capture",
        "--neff",
        neff,
        "--out",
        tmp_path / "one",
        "--collectives-workers-per-node",
        "4",
        "--collectives-profile-id",
        "2",
        "--options",
        '{"profiler": "neuron-profile"}',
        *lock,
    )
    assert [r["rank"] for r in json.loads((tmp_path / "one" / "capture.json").read_text())["ranks"]] == [2]
    bad = subprocess.run(
        [
            str(BIN / "neuronsweep"),
            "capture",
            "--neff",
            neff,
            "--out",
            tmp_path / "bad",
            "--collectives-profile-id",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode != 0 and "turn collectives on" in bad.stderr
    many = subprocess.run(
        [
            str(BIN / "neuronsweep"),
            "capture",
            "--neff",
            neff,
            "--out",
            tmp_path / "many",
            "--collectives-workers-per-node",
            "8",
            "--device-lock",
            tmp_path / "lock",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert many.returncode != 0 and "needs 8 NeuronCores" in many.stderr
    # the stand-in, like the runtime, wants a NeuronCore per worker: 4 workers on one visible core fail
    raw = subprocess.run(
        ["neuron-profile", "capture", "-n", neff, "-s", tmp_path / "r.ntff", "--collectives-workers-per-node", "4"],
        capture_output=True,
        text=True,
        env={**env, "NEURON_RT_VISIBLE_CORES": "0"},
    )
    assert raw.returncode != 0 and "Requested:4 Available:1" in raw.stderr


@pytest.mark.workflow
def test_oom_then_single_io_retry_and_a_case_failing_for_good_keeps_the_rest(tmp_path):
    """One sweep, two faults: the first case's captures always fail, the second's run out of device memory
    unless --single-io."""
    bad, oom = WIDS
    env = standin_env(tmp_path, STANDIN_OOM_MATCH=oom, STANDIN_FAIL_MATCH=bad)
    run = snakemake(tmp_path, config=neuron_config(tmp_path), env=env, check=False)
    assert run.proc.returncode != 0
    attempts = [r["argv"] for r in standin_runs(tmp_path) if r["argv"][0] == "capture" and oom in r["argv"][2]]
    assert len(attempts) == 2 and "--single-io" not in attempts[0] and "--single-io" in attempts[1]
    cap = json.loads((wdir(tmp_path, oom) / "capture" / "capture.json").read_text())
    assert cap["single_io"] is True and cap["outputs_valid"] is False
    assert json.loads((wdir(tmp_path, oom) / "metrics.json").read_text())["single_io"] is True
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("scenario_id")
    assert table.loc[oom, "status"] == "ok"
    assert table.loc[bad, "status"] == "failed"
    assert "neuron-explorer capture exited 1: ERROR NRT: nrt_load failed" in table.loc[bad, "reason"]
    tries = [r for r in standin_runs(tmp_path) if r["argv"][0] == "capture" and bad in r["argv"][2]]
    assert len(tries) == 2  # retried once (retries: 1), then given up


# ------------------------------------------------------------------------------------- NKI


def nki_config(tmp: Path) -> dict:
    cfg = neuron_config(tmp)
    cfg["suites"] = {"matmul": {"shapes": [{"m": 128, "k": 256, "n": 512}], "impl": ["compiler", "nki"]}}
    return cfg


@pytest.mark.workflow
def test_nki_kernel_build_saves_inputs_by_argument_name_and_capture_feeds_them(tmp_path):
    """Also: a kernel whose output is wrong (the stand-in's matmuls 10 % off, a miscompile) is measured,
    but its case is `wrong` with the numbers, ranked nowhere and shown apart in the report."""
    snakemake(tmp_path, config=nki_config(tmp_path), env=standin_env(tmp_path, STANDIN_NKI_WRONG="1"))
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("scenario_id")
    assert list(table["status"]) == ["ok", "wrong"]
    wrong = table.iloc[1]
    assert wrong["correct"] == False and wrong["max_rel_error"] == pytest.approx(0.1, rel=1e-3)  # noqa: E712
    assert "max relative error 0.1 > tolerance 0.0001" in wrong["reason"]
    assert table.iloc[0]["correct"] == True and table.iloc[0]["max_rel_error"] < 1e-5  # noqa: E712 (torch-xla)
    report = (tmp_path / "results" / "t" / "report.html").read_text()
    assert "Wrong output (not ranked)" in report and f"{wrong.name} is wrong: output differs" in report
    d = wdir(tmp_path, "matmul-m128-k256-n512-fp32-nki")
    build = json.loads((d / "build" / "build.json").read_text())
    assert build["compiler"] == "NKI kernel (nki.jit)" and build["recompiled_on_second_call"] is False
    assert [name for name, _ in build["capture_inputs"]] == ["lhsT", "rhs"]
    assert all(Path(path).suffix == ".npy" and Path(path).is_file() for _, path in build["capture_inputs"])
    cap = json.loads((d / "capture" / "capture.json").read_text())
    assert cap["argv"][-4:] == [x for pair in build["capture_inputs"] for x in pair]
    assert "--ignore-exec-errors" not in cap["argv"]
    m = json.loads((d / "metrics.json").read_text())
    assert m["flops"] == m["profile_flops_tool"] == 2 * 128 * 256 * 512
    # no framework times an NKI kernel: every execution after the warm-up is profiled, and each one's device
    # time is a sample (capture.num_exec = warmup + iterations, --profile-nth-exec 1)
    assert m["latency_n"] == cap["settings"]["iterations"] and m["latency_median_s"] > 0
    assert "device time per execution" in m["notes"]["latency_median_s"] and m["framework_overhead_s"] is None
    assert cap["argv"][cap["argv"].index("--profile-nth-exec") + 1] == "1"
    assert build["nki_api"] == "nki" and build["correctness"]["max_rel_error"] == pytest.approx(0.1, rel=1e-3)


@pytest.mark.workflow
def test_nki_recompiling_on_every_call_is_flagged(tmp_path):
    cfg = nki_config(tmp_path)
    cfg["suites"]["matmul"]["impl"] = ["nki"]
    snakemake(tmp_path, config=cfg, env=standin_env(tmp_path, STANDIN_NKI_RECOMPILE="1"))
    d = wdir(tmp_path, "matmul-m128-k256-n512-fp32-nki")
    build = json.loads((d / "build" / "build.json").read_text())
    assert build["recompiled_on_second_call"] is True and "@nki.jit trap" in build["recompilation_flag"]
    assert build["compile_s"] is None  # compile and run cannot be separated: not guessed
    assert json.loads((d / "metrics.json").read_text())["recompilation_detected"] is True
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert table["recompilation_detected"].tolist() == [True]


@pytest.mark.workflow
def test_nki_on_cpu_is_unsupported_with_a_reason(tmp_path):
    """Planned, not run: no NKI job reaches the DAG, and the plan keeps the row with its reason (aggregate
    writes such rows into summary.csv: test_bad_configs' all-unsupported sweep runs that end to end)."""
    from helpers import tiny_config

    cfg = tiny_config(tmp_path)
    cfg["suites"]["matmul"]["impl"] = ["compiler", "nki"]
    run = snakemake(tmp_path, "-n", config=cfg)
    assert {w for _, w in run.jobs if w} == {"matmul-m16-k16-n16-fp32", "matmul-m32-k16-n16-fp32"}
    proc = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    plan = json.loads(proc.stdout)
    assert plan["counts"] == {"scenarios": 4, "workloads": 2, "unsupported": 2}
    assert "NKI kernels need a Neuron device" in plan["unsupported"]["matmul-m16-k16-n16-fp32-nki"]


@pytest.mark.workflow
def test_legacy_neuronxcc_nki_benchmark_route(tmp_path):
    from helpers import STANDIN

    cfg = nki_config(tmp_path)
    cfg["suites"]["matmul"]["impl"] = ["nki"]
    env = {**standin_env(tmp_path), "PYTHONPATH": str(STANDIN / "python-legacy")}  # no standalone `nki`
    snakemake(tmp_path, config=cfg, env=env)
    build = json.loads((wdir(tmp_path, "matmul-m128-k256-n512-fp32-nki") / "build" / "build.json").read_text())
    assert build["nki_api"] == "neuronxcc.nki"
    assert build["neff_source"].endswith("/nki/artifacts/kernel.neff")
    assert build["benchmark_us"]["p50"] > 0 and build["compile_s"] is None
    # nki.benchmark runs the kernel on inputs of its own: no error against numpy is claimed
    assert build["correctness"]["correct"] is None and "undefined" in build["correctness"]["correct_why"]


KERNEL_CHECK = """
import json, os, sys
import numpy as np
from neuronsweep.kernels import nki_matmul, nki_mlp
from neuronsweep.workloads import matmul, mlp
out = {}
for module, spec in [(nki_matmul, matmul.spec(m=256, k=384, n=1024, dtype="fp32")),
                     (nki_matmul, matmul.spec(m=64, k=96, n=200, dtype="fp32")),
                     (nki_mlp, mlp.spec(b=1, s=128, h=256, i=384, dtype="fp32"))]:
    arrays = module.inputs(spec, np.random.default_rng(0))
    for f in os.listdir(os.environ["NKI_ARTIFACTS_DIR"]):  # each compile wants an empty folder
        os.remove(os.path.join(os.environ["NKI_ARTIFACTS_DIR"], f))
    got = module.make_kernel()(*(arrays[n] for n in module.ARG_NAMES))
    out[json.dumps(spec, sort_keys=True)] = float(np.max(np.abs(got - module.reference(arrays))))
import nki.isa as nisa, nki.language as nl
def memset_then_accumulate(a, b):  # the pattern the nc_matmul reference calls undefined on v2/v3
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=acc, value=0.0)
    sa, sb = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf), nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sa, src=a)
    nisa.dma_copy(dst=sb, src=b)
    nisa.nc_matmul(dst=acc, stationary=sa, moving=sb)
try:
    memset_then_accumulate(np.ones((4, 4), np.float32), np.ones((4, 8), np.float32))
    out["memset"] = "accepted"
except ValueError as e:
    out["memset"] = str(e)
print(json.dumps(out))
"""


def test_the_nki_kernels_compute_the_right_numbers_on_the_standin_isa(tmp_path):
    """The stand-in's nki.isa / nki.language execute kernel bodies on numpy with the real signatures
    and memory rules (PSUM destinations, SBUF operands, tile limits), so this checks the kernels."""
    import os
    import sys

    from helpers import STANDIN

    env = {**os.environ, "PYTHONPATH": str(STANDIN / "python")}
    for target, memset in (("inf2", "undefined behaviour on NeuronCore-v2/v3 (inf2)"), ("trn3", "accepted")):
        (tmp_path / target).mkdir()
        env.update(NEURON_PLATFORM_TARGET_OVERRIDE=target, NKI_ARTIFACTS_DIR=str(tmp_path / target))
        proc = subprocess.run([sys.executable, "-c", KERNEL_CHECK], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        errors = json.loads(proc.stdout)
        # the kernels obey the PSUM rule: their first matmul into a tile overwrites, no memset before
        assert memset in errors.pop("memset")
        assert len(errors) == 3 and max(errors.values()) < 1e-3, errors
    # today's language has no return-style load/store: the legacy kernel spelling would not trace there
    bad = subprocess.run(
        [sys.executable, "-c", "import nki.language as nl; nl.load"], capture_output=True, text=True, env=env
    )
    assert bad.returncode != 0 and "has no attribute 'load'" in bad.stderr


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


def _neff(tmp_path: Path) -> Path:
    neff = tmp_path / "model.neff"
    neff.write_bytes(b"NEFF\0" + json.dumps({"graph": "g", "ops": [["matmul", [[64, 64], [64, 64]]]]}).encode())
    return neff


def test_real_oom_texts_trigger_the_single_io_retry():
    for text in (
        "ERROR NRT: Failed to allocate 268435456 bytes on ND 0 for tensor 'input0'",
        "nrt_load status=NRT_RESOURCE",
        "Allocation Failure: hbm",
        "out of memory",
    ):
        assert neuron_profiler.OOM.search(text), text
    assert not neuron_profiler.OOM.search("NRT: nrt_load failed: NEFF load error")


def test_explorer_view_would_serve_forever_so_exports_are_stopped_once_written(tmp_path, monkeypatch):
    for key, value in standin_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    neff = _neff(tmp_path)
    cap = neuron_profiler.capture_neff(neff, tmp_path / "cap", settings(2, 2, tmp_path, "neuron-explorer"))
    ntff = tmp_path / "cap" / "profile.ntff"
    # the stand-in, like the real Explorer, keeps serving after an export unless told not to
    with pytest.raises(UserError, match=r"did not finish within 2 s and was stopped \(its whole process group\)"):
        run_tool(
            [
                "neuron-explorer",
                "view",
                "-n",
                str(neff),
                "-s",
                str(ntff),
                "--output-format",
                "perfetto",
                "--output-file",
                str(tmp_path / "x.pftrace"),
            ],
            2,
            "view",
            env=neuron_profiler.tool_env(),
        )
    out = tmp_path / "view"
    out.mkdir()
    rec = neuron_profiler.view_profile(
        neff, ntff, out, ViewSettings.from_section({"profiler": "neuron-explorer", "json": True}, 60)
    )
    # --ingest-only is documented with -d only: every export here is stopped once written
    assert not any("--ingest-only" in argv for argv in rec["commands"].values())
    refused = subprocess.run(
        ["neuron-explorer", "view", "-n", neff, "-s", ntff, "--output-format", "parquet", "--ingest-only"],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "--ingest-only is used with -d" in refused.stderr
    assert (out / "trace.pftrace").is_file() and (out / "parquet" / "Metadata.parquet").is_file()
    assert json.loads((out / "profile.json").read_text())["summary"][0]["total_time"] > 0  # complete, not cut
    assert cap["ntff_written_as"] == "profile_exec_2.ntff"


@pytest.mark.workflow
def test_a_view_that_ignores_output_file_still_lands_in_the_view_folder(neuron_run, tmp_path):
    """Some tool versions write ntff.pftrace / ntff.json into the working directory whatever
    --output-file says; the view runs in its own folder and takes them from there."""
    env = {**os.environ, **standin_env(tmp_path, STANDIN_IGNORE_OUTPUT_FILE="1")}
    view = tmp_path / "view"
    options = json.dumps({"profiler": "neuron-explorer", "json": True, "parquet": False, "pftrace": True})
    subprocess.run(
        [
            str(BIN / "neuronsweep"),
            "view",
            "--capture",
            wdir(neuron_run, WIDS[0]) / "capture",
            "--out",
            view,
            "--options",
            options,
        ],
        check=True,
        env=env,
        capture_output=True,
        cwd=neuron_run,
    )
    assert (view / "trace.pftrace").is_file() and (view / "profile.json").is_file()
    assert not (view / "ntff.pftrace").exists() and not (neuron_run / "ntff.pftrace").exists()


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
            neuron_profiler.capture_neff(_neff(tmp_path), tmp_path / "cap", settings(1, 1, tmp_path, "neuron-profile"))
    finally:
        holder.kill()


@pytest.mark.workflow
def test_neuron_builds_hold_the_device_and_pin_their_cores(neuron_run):
    tmp_path = neuron_run
    for wid in WIDS:
        build = json.loads((wdir(tmp_path, wid) / "build" / "build.json").read_text())
        assert build["visible_cores"] == "0-1" and build["lnc"] == 1  # chip isolation: the one chip's cores
        span = json.loads((wdir(tmp_path, wid) / "capture" / "capture.json").read_text())["device_span"]
        assert span["slot"] == 0 and span["cores"] == "0-1" and span["acquired_unix"] < span["released_unix"]
    # every stand-in process that ran on the device (captures, torch-xla builds and timing) got its core:
    # none failed with "Available:0", though builds and captures were scheduled on 2 cores at once
    text = "".join(p.read_text() for p in (tmp_path / "results").rglob("*.log"))
    assert "Available:0" not in text


@pytest.mark.torch  # the cpu plan probe or a torch child
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
    assert none.returncode == 2 and none.stderr.strip().endswith(
        "listed by neuron-ls); run on a trn1, trn2 or inf2 instance or set backend: auto."
    )
    assert "config key 'backend' is neuron, but this machine has no Neuron device (no /dev/neuron*" in none.stderr


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


def test_nccom_test_table_is_read_as_documented(tmp_path, monkeypatch):
    """The guide's own example output (aws-neuron-sdk nccom-test.rst): time in us, bandwidths in GiB/s."""
    from neuronsweep.backends import nccom_test

    text = (
        "     size(B)    count(elems)     type    time(us)    algbw(GB/s)    busbw(GB/s)\n"
        "    33554432        33554432    uint8         768          40.69          40.69\n"
        "Avg bus bandwidth:      40.6901GB/s\n"
    )
    row = nccom_test.parse(text, 33554432)
    assert row["time_s"] == pytest.approx(768e-6) and row["busbw_bytes_per_s"] == pytest.approx(40.69 * 2**30)
    assert row["count"] == 33554432 and row["type"] == "uint8" and nccom_test.parse(text, 8) is None
    spec = {"op": "all_to_all", "world": 4, "bytes": 4096, "dtype": "bf16"}
    assert nccom_test.argv("nccom-test", spec, 20, 5) == [
        "nccom-test",
        "-r",
        "4",
        "alltoall",
        "-b",
        "4096",
        "-e",
        "4096",
        "-d",
        "bf16",
        "-n",
        "20",
        "-w",
        "5",
        "--non-interactive",
    ]
    real = (DATA / "neuron" / "tools" / "nccom-test-inf2-all_reduce.txt").read_text()  # as the tool printed it
    first = nccom_test.parse(real, 1048576)
    assert first["time_s"] == pytest.approx(23.5e-6) and first["busbw_bytes_per_s"] == pytest.approx(44.62 * 2**30)
    assert nccom_test.parse(real, 8388606)["algbw_bytes_per_s"] == pytest.approx(52.43 * 2**30)
    monkeypatch.setattr(nccom_test, "find", lambda: None)
    missing = nccom_test.measure(spec, {}, 20, 5, 60, tmp_path / "log")
    assert missing["result"] is None and "not installed" in missing["why"]


@pytest.mark.workflow
def test_collectives_suite_on_neuron_builds_captures_every_rank_and_sits_beside_nccom_test(tmp_path):
    """torch-xla collectives under torchrun, a NeuronCore per rank: the NEFF of the collective attributed
    as any workload's, a multi-worker capture, each rank's times (an execution is the slowest rank's),
    busbw by nccl-tests' factors, and nccom-test's figures for the same case beside them. Eight ranks on
    a machine of four NeuronCores fail in one sentence; the other cases are kept."""
    cfg = neuron_config(
        tmp_path,
        suites={
            "collectives": {"operations": ["all_reduce", "reduce_scatter"], "sizes": [4096], "world_sizes": [2, 4, 8]}
        },
    )
    run = snakemake(tmp_path, "--keep-going", config=cfg, env=standin_env(tmp_path, STANDIN_DEVICES="2"), check=False)
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("workload_id")
    assert run.proc.returncode != 0
    ok = [w for w in table.index if "-w8-" not in w]
    assert (table.loc[ok, "status"] == "ok").all(), table[["status", "reason"]]
    for wid in [w for w in table.index if "-w8-" in w]:
        assert table.loc[wid, "status"] == "failed" and "needs 8 NeuronCores" in table.loc[wid, "reason"]
    for wid in ok:
        d = wdir(tmp_path, wid)
        world = int(table.loc[wid, "world"])
        op = table.loc[wid, "op"]
        build = json.loads((d / "build" / "build.json").read_text())
        neff = json.loads((d / "build" / "model.neff").read_bytes()[5:])  # the stand-in's NEFF names its ops
        assert [o for o, _ in neff["ops"] if o.startswith("xla_collective.")] == [f"xla_collective.{op}"]
        assert build["candidates"][0]["phase"] == "inputs" and len(build["device_span"]["cores"].split("-")) == 2
        cap = json.loads((d / "capture" / "capture.json").read_text())
        assert cap["argv"][cap["argv"].index("--collectives-workers-per-node") + 1] == str(world)
        assert [r["written_as"] for r in cap["ranks"]] == [f"profile_rank_{r}_exec_2.ntff" for r in range(world)]
        timed = cap["rank_latency"]
        lo, hi = map(int, cap["device_span"]["cores"].split("-"))  # the slot the capture held (0-1 or 2-3)
        assert sorted(int(r["core"]) for r in timed) == list(range(lo, hi + 1))  # one NeuronCore of it each
        slowest = [max(r["samples_s"][i] for r in timed) for i in range(3)]
        assert cap["latency"]["median_s"] == pytest.approx(sorted(slowest)[1])
        m = json.loads((d / "metrics.json").read_text())
        assert m["correct"] is True and m["max_abs_error"] == 0  # every rank's result checked in the build
        factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
        assert m["busbw_bytes_per_s"] == pytest.approx(4096 / m["latency_median_s"] * factor)
        nccom = cap["nccom_test"]
        assert nccom["argv"][1:] == [
            "-r",
            str(world),
            op,
            "-b",
            "4096",
            "-e",
            "4096",
            "-d",
            "fp32",
            "-n",
            "3",
            "-w",
            "1",
            "--non-interactive",
        ]
        printed = next(
            line.split()
            for line in (d / "capture" / "framework" / "nccom-test.log").read_text().splitlines()
            if line.split()[:1] == ["4096"]
        )
        assert m["nccom_test_time_s"] == pytest.approx(float(printed[3]) * 1e-6)
        assert m["nccom_test_busbw_bytes_per_s"] == pytest.approx(float(printed[5]) * 2**30)
        assert m["busbw_vs_nccom_test"] == pytest.approx(m["busbw_bytes_per_s"] / m["nccom_test_busbw_bytes_per_s"])
        # trn1 (the stand-in's target) has no sourced NeuronLink figure; 2 ranks stay on one chip of 2 cores
        assert (
            m["link_bytes_per_s"] is None
            and ("on the chip" if world == 2 else "NeuronLink-v2") in m["notes"]["link_bytes_per_s"]
        )
        ranks = pd.read_csv(d / "tables" / "ranks.csv")
        assert list(ranks["rank"]) == list(range(world)) and (ranks["median_s"] > 0).all()
    page = (tmp_path / "results" / "t" / "report.html").read_text()
    assert "nccom-test busbw" in page and "nccom_test_busbw_bytes_per_s" in page  # dashed beside ours, and in the table
    assert "fewer, larger messages" in page  # a small collective's overhead, in its own words


@pytest.mark.torch  # the cpu plan probe or a torch child
def test_a_failing_collective_rank_is_one_sentence_with_its_exception(tmp_path):
    from neuronsweep.backends import xla_collective

    env = {**os.environ, **standin_env(tmp_path), "NEURON_CC_FLAGS": "--target trn1", "NEURON_RT_VISIBLE_CORES": "0-1"}
    env.pop("NEURON_COMPILE_CACHE_URL", None)  # the stand-in refuses to compile into the shared cache
    spec = {"kind": "collective", "op": "all_gather", "bytes": 64, "world": 2, "dtype": "fp32"}
    with pytest.raises(
        UserError,
        match=r"case coll-allgather-w2-64b-fp32: the torch-xla collective's 2 ranks exited 1: "
        r"\[rank\d\]: RuntimeError: stand-in: NEURON_COMPILE_CACHE_URL unset.*"
        r"\(full log: .*torchrun.log\)",
    ):
        xla_collective.run(spec, tmp_path / "run", env, [], 120)


@pytest.mark.workflow
def test_the_profile_schema_version_and_a_column_it_lacks_are_named(neuron_run, tmp_path):
    """view.json records the schema version (12.0.1 from the stand-in, as SDK 2.33), the tool's version
    and its schema dump; a profile whose Instruction table lacks duration_ns gets one sentence naming the
    column and the version, and no engine table built on a guess."""
    d = wdir(neuron_run, WIDS[0])
    record = json.loads((d / "view" / "view.json").read_text())
    assert record["profile_schema_version"] == "12.0.1" and record["profiler_version"]
    assert "duration_ns" in (d / "view" / record["profile_schema_dump"]).read_text()
    assert json.loads((d / "metrics.json").read_text())["profile_schema_version"] == "12.0.1"
    env = {**os.environ, **standin_env(tmp_path, STANDIN_SCHEMA_DROP="Instruction.duration_ns")}
    options = json.dumps({"profiler": "neuron-explorer", "parquet": True, "pftrace": False})
    ns = [str(BIN / "neuronsweep")]
    view = tmp_path / "w" / "view"
    run = dict(check=True, env=env, capture_output=True, text=True, cwd=neuron_run)
    subprocess.run([*ns, "view", "--capture", d / "capture", "--out", view, "--options", options], **run)
    out = tmp_path / "w" / "metrics.json"
    proc = subprocess.run(
        [
            *ns,
            "extract",
            "--summary-json",
            view / "summary.json",
            "--capture-json",
            d / "capture" / "capture.json",
            "--out",
            out,
        ],
        **run,
    )
    note = json.loads(out.read_text())["notes"]["profile_schema"]
    assert (
        "profile schema 12.0.1: the Instruction table has no duration_ns column" in note
        and note == proc.stderr.strip() + "."
    )
    assert not (tmp_path / "w" / "tables" / "engine_busy.csv").exists()
