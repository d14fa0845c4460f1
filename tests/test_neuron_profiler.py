"""The neuron profiler against the stand-in toolchain: the NTFF names it writes, the capture and view
commands and exports as documented, what it refuses, the memory tracker, and the profile schema."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
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

from neuronsweep.backends import neuron_profiler
from neuronsweep.backends.processes import run_tool
from neuronsweep.config.settings import ViewSettings
from neuronsweep.errors import UserError


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
    rec = neuron_profiler.capture_neff(
        neff, tmp_path / "cap", neuron_settings(num_exec, nth, tmp_path, "neuron-profile")
    )
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


@pytest.mark.workflow
def test_exports_as_documented_and_a_tool_without_the_json_export(neuron_run, tmp_path):
    """No --ingest-only with -n/-s (documented only as `view -d DIR --ingest-only`; the stand-in refuses it):
    the stand-in's explorer keeps serving after every export, so each is stopped once written; a tool after
    SDK 2.33 has no json export: the
    case stands, view.json says why, and device memory comes from the parquet tables instead."""
    d = neuron_wdir(neuron_run, NEURON_WIDS[0])
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
    summary = json.loads((tmp_path / "view" / "summary.json").read_text())
    # without the JSON: device memory from the parquet tables SDK 2.34 maintains (HbmUsageSummaryByType,
    # SbufUsage), each the same as the JSON's
    assert m["hbm_tensors_bytes"] == summary["hbm_read_bytes"] + summary["hbm_write_bytes"]
    assert "hbm_tensors_bytes" not in m["notes"]
    legacy = json.loads((d / "view" / "profile.json").read_text())
    assert m["sbuf_peak_usage_pct"] == pytest.approx(
        100 * max(r["usage_avg"] for r in legacy["instruction_usage"] if r["type"] == "sb")
    )
    assert m["profile_total_time_s"] > 0 and m["mfu_recomputed_pct"] is not None


@pytest.mark.workflow
def test_memory_tracker_sets_the_build_env_capture_and_view_flags(tmp_path):
    cfg = neuron_config(tmp_path, suites={"matmul": {"shapes": [{"m": 16, "k": 16, "n": 16}]}})
    cfg["neuron"]["memory_tracker"] = True
    snakemake(tmp_path, config=cfg, env=standin_env(tmp_path))
    d = neuron_wdir(tmp_path, NEURON_WIDS[0])
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


def test_explorer_view_would_serve_forever_so_exports_are_stopped_once_written(tmp_path, monkeypatch):
    for key, value in standin_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    neff = standin_neff(tmp_path)
    cap = neuron_profiler.capture_neff(neff, tmp_path / "cap", neuron_settings(2, 2, tmp_path, "neuron-explorer"))
    ntff = tmp_path / "cap" / "profile.ntff"
    # the stand-in, like the real Explorer, keeps serving after an export unless told not to
    with pytest.raises(UserError, match=r"did not finish within 1 s and was stopped \(its whole process group\)"):
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
            1,  # it serves forever: any timeout ends it
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
            neuron_wdir(neuron_run, NEURON_WIDS[0]) / "capture",
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


@pytest.mark.workflow
def test_the_profile_schema_version_and_a_column_it_lacks_are_named(neuron_run, tmp_path):
    """view.json records the schema version (12.0.1 from the stand-in, as SDK 2.33), the tool's version
    and its schema dump; a profile whose SchemaFields declares no Instruction.duration_ns gets one sentence
    naming the field and the version, and no engine table built on a guess."""
    d = neuron_wdir(neuron_run, NEURON_WIDS[0])
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
        "profile schema 12.0.1: the Instruction table's SchemaFields declares no duration_ns field" in note
        and note == proc.stderr.strip() + "."
    )
    assert not (tmp_path / "w" / "tables" / "engine_busy.csv").exists()


def test_the_fields_we_read_are_checked_against_the_profiles_own_schema_fields(tmp_path):
    """SYNTHETIC, not schema 12: a profile whose SchemaFields renames Instruction.duration_ns (to duration)
    and retypes Instruction.engine (to integer) is told field by field, with the version, from what the
    profile declares, whatever columns the table holds; without a SchemaFields the table's own columns
    are checked, as for any profile that does not describe itself."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neuronsweep.formats import profile_schema
    from neuronsweep.formats.profile_db import ProfileDB

    view = tmp_path / "view"
    (view / "parquet").mkdir(parents=True)
    row = {"start_ts": 0, "duration_ns": 650, "engine": "Tensor", "opcode": "MATMUL", "adjusted_flops": 2}
    row["tensor_instruction_type"] = "REGULAR"  # the window bounds read these two
    pq.write_table(pa.Table.from_pylist([row]), view / "parquet" / "Instruction.parquet")
    declared = {"start_ts": "integer", "duration": "integer", "engine": "integer", "opcode": "string"}
    declared |= {"adjusted_flops": "integer", "tensor_instruction_type": "string"}
    fields = [
        {"table_name": "Instruction", "field_name": f, "field_type": t, "field_unit": "ns" if f != "engine" else ""}
        for f, t in declared.items()
    ]
    pq.write_table(pa.Table.from_pylist(fields), view / "parquet" / "SchemaFields.parquet")
    db = ProfileDB().load(view)
    assert profile_schema.declared(db)["Instruction"]["duration"] == {"type": "integer", "unit": "ns"}
    said = profile_schema.problems(db, "99.0.0")
    assert said == [
        "profile schema 99.0.0: the Instruction table's SchemaFields declares no duration_ns field, so engine busy "
        "time is not read from it; send view/profile-schema.txt with a bug report",
        "profile schema 99.0.0: the Instruction table's SchemaFields declares engine as integer, where engine busy "
        "time reads it as a text; send view/profile-schema.txt with a bug report",
    ]
    (view / "parquet" / "SchemaFields.parquet").unlink()  # a profile that does not describe itself: its columns
    assert profile_schema.problems(ProfileDB().load(view), "99.0.0") == []
