"""A vLLM Neuron server's profile session (issue 82, item 5), read from the documented layout its profiler
writes (tests/standin/vllm_neuron_session.py) through the Neuron Explorer stand-in's `view -d`: each rank's
steps with their graph, device time and gap, the ranks' skew at their collectives, one merged timeline; and
a damaged or partial session as one sentence per missing part, the rest read."""

from __future__ import annotations

import os
import shutil
import subprocess

import pandas as pd
import pytest
from helpers import BIN, STANDIN
from standin import vllm_neuron_session as server

from neuronsweep.errors import UserError
from neuronsweep.formats import pftrace_reader, vllm_session
from neuronsweep.formats.profile_db import ProfileDB
from neuronsweep.stages import session

STEPS = [("prefill", 400e-6), ("decode", 80e-6), ("decode", 80e-6), ("decode", 80e-6)]


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """The stand-in neuron-explorer first on PATH, as on an instance, then this Python's bin: the stand-in's
    `#!/usr/bin/env python3` must find the interpreter that has its imports (perfetto), not the system's."""
    monkeypatch.setenv("PATH", f"{STANDIN / 'bin'}:{BIN}:{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_every_ranks_steps_their_skew_and_one_timeline(tools):
    wrote = server.write(tools / "profiles", STEPS)
    out = tools / "read"
    summary = session.run(tools / "profiles", out)
    steps = pd.read_csv(out / "steps.csv")
    assert len(steps) == 2 * 4 and set(steps["rank"]) == {0, 1}
    prefill, decode = (wrote["graphs"][g]["file"].removesuffix(".neff") for g in ("prefill", "decode"))
    assert list(steps.loc[steps["rank"] == 0, "graph"]) == [prefill, decode, decode, decode]
    # each step: its device time (nc_exec_running) inside its host call (nrt_execute), the gap after it
    # (the stand-in's: 30 us from one device execution's end to the next call, the call ending 1 us after it)
    assert (steps["device_s"] < steps["host_s"]).all() and steps["gap_s"].dropna().round(9).eq(29e-6).all()
    graphs = pd.read_csv(out / "graphs.csv").set_index("graph")
    assert graphs.loc[decode, "steps"] == 6 and graphs.loc[prefill, "ranks"] == 2
    assert graphs["device_share_pct"].sum() == pytest.approx(100)
    # rank 1 arrives 40 us late at every collective; its clock runs 2.5 ms ahead of rank 0's
    assert summary["straggler_rank"] == 1 and summary["rank_wait_max_s"] == pytest.approx(40e-6, abs=1e-8)
    assert summary["clock_residual_s"] == pytest.approx(0, abs=1e-8)
    waits = pd.read_csv(out / "rank_waits.csv")
    assert len(waits) == 2 * 4 * 2 and waits.groupby("rank")["wait_s"].max()[0] == pytest.approx(40e-6, abs=1e-8)
    # each kind of step's ladder over both workers' executions of it (ExecutionInfo's ranges of each worker's
    # device profile): per execution, the stand-in's one m x 256 x 256 fp32 matmul against trn1's peaks from the
    # profile's metadata (DMA 435 GB/s, TensorE 128 x 128 at 2.8 GHz)
    assert summary["headroom_why"] is None and set(summary["instructions_in_executions_pct"].values()) == {100.0}
    for graph, m in ((decode, 8), (prefill, 128)):
        h = summary["headroom"][graph]
        assert h["executions"] == graphs.loc[graph, "steps"] and h["bottleneck_engine"] == "dma"
        assert h["bound_memory_ideal_s"] == pytest.approx(4 * (2 * m * 256 + 256 * 256) / 435e9)
        assert h["bound_compute_ideal_s"] == pytest.approx(2 * m * 256 * 256 / (128 * 128 * 2.8e9 * 2))
        assert h["execution_s"] == pytest.approx(graphs.loc[graph, "device_median_s"], rel=1e-3)  # the same span
        speedup = h["speedup_if_memory_ideal"]
        assert graphs.loc[graph, "speedup_if_memory_ideal"] == pytest.approx(speedup) and speedup > 1
    assert any("worker_gid" in n for n in summary["notes"]) and summary["missing"] == []
    assert len(summary["view"]["devices"]) == 2  # a device profile per NEFF
    trace = pftrace_reader.read(out / "ranks.pftrace")
    assert {(t.pid, t.name) for t in trace.tracks.values() if t.tid is not None} == {
        (r, name) for r in (0, 1) for name in ("steps", "collectives")
    }
    db = ProfileDB().load(out / "ranks.pftrace")  # what `neuronsweep query` reads
    per_rank = db.sql(
        "SELECT p.pid, count(*) AS n FROM thread_slice s JOIN thread t USING (utid) "
        "JOIN process p ON t.upid = p.upid WHERE s.name = 'cc_running' GROUP BY ALL ORDER BY 1"
    ).fetchall()
    assert per_rank == [(0, 8), (1, 8)]


def test_a_worker_without_its_system_trace_is_a_sentence_and_the_others_are_read(tools):
    server.write(tools / "profiles", STEPS)
    [gone] = sorted((tools / "profiles").glob("i-*_pid_4101/*/ntrace.pb"))
    gone.unlink()
    summary = session.run(tools / "profiles", tools / "read")
    assert [r["worker_gid"] for r in summary["ranks"]] == [0] and summary["steps"] == 4
    [said] = [m for m in summary["missing"] if "pid_4101" in m]
    assert "no ntrace.pb" in said and "its steps are left out" in said
    assert any(n.startswith("no skew: 1 rank") for n in summary["notes"]) and summary["straggler_rank"] is None


def test_without_the_neffs_the_steps_come_from_the_system_profile_alone(tools):
    server.write(tools / "profiles", STEPS)
    shutil.rmtree(tools / "profiles" / "neffs")
    summary = session.run(tools / "profiles", tools / "read")
    assert summary["steps"] == 8 and summary["view"]["devices"] == []
    assert "--ignore-device-profile" in summary["view"]["argv"]
    assert any(m.endswith("profile again, how-to-profile-workloads)") for m in summary["missing"])
    assert "8 of 8 steps' model_name names no NEFF" in " ".join(summary["notes"])  # graphs named by their files
    assert summary["straggler_rank"] == 1
    assert summary["headroom"] is None and "no NEFFs in the session" in summary["headroom_why"]


def test_a_missing_neff_of_one_graph_falls_back_to_the_system_profile_and_says_why(tools):
    wrote = server.write(tools / "profiles", STEPS)
    (tools / "profiles" / "neffs" / wrote["graphs"]["decode"]["file"]).unlink()
    summary = session.run(tools / "profiles", tools / "read")
    [said] = [m for m in summary["missing"] if m.startswith("the device profiles failed")]
    assert "NEFF/NTFF UUID mismatch" in said and said.endswith("the system profile alone was viewed")
    assert summary["steps"] == 8
    assert summary["headroom"] is None and summary["headroom_why"].count("NEFF/NTFF UUID mismatch") == 2


def test_a_worker_without_its_device_trace_keeps_its_steps(tools):
    server.write(tools / "profiles", STEPS)
    next((tools / "profiles").glob("i-*_pid_4101/*/profile_nc_0_session_0.ntff")).unlink()
    summary = session.run(tools / "profiles", tools / "read")
    [said] = summary["missing"]
    assert "pid_4101" in said and said.endswith("its steps come from the system trace alone")
    assert summary["steps"] == 8 and summary["straggler_rank"] == 1
    # the other worker's executions still give each kind of step's headroom; this one's absence is said
    assert summary["headroom_why"].endswith("pid_4101: 0 device traces") and len(summary["headroom"]) == 2
    assert sum(h["executions"] for h in summary["headroom"].values()) == 4


def test_what_is_not_a_session_is_one_sentence(tmp_path):
    with pytest.raises(UserError, match="not a vLLM Neuron profile: no i-<instance>_pid_<pid> folder"):
        vllm_session.read(tmp_path)
    with pytest.raises(UserError, match="no such folder"):
        vllm_session.read(tmp_path / "nope")


def test_the_layout_says_each_missing_part_and_reads_the_newest_session(tmp_path):
    server.write(tmp_path, STEPS)
    worker = next(tmp_path.glob("i-*_pid_4100"))
    newer = worker / "20261205_020000"
    shutil.copytree(next(worker.iterdir()), newer)
    (newer / "profile_nc_0_session_0.ntff").unlink()
    found = vllm_session.read(tmp_path)
    first = next(w for w in found.workers if w.pid == 4100)
    assert first.folder == newer and first.device_traces == () and first.system_trace
    assert [m.split(":")[0] for m in found.missing] == [worker.name, f"{worker.name}/{newer.name}"]
    assert "2 sessions" in found.missing[0] and "its steps come from the system trace alone" in found.missing[1]
    assert len(found.viewable) == 2 and set(found.neffs) == {p.name for p in (tmp_path / "neffs").iterdir()}


def test_the_standin_refuses_a_worker_without_its_system_trace_metadata(tools):
    """Neuron Explorer's troubleshooting page: a directory that is not a whole system profile is "No metadata
    found for system profile"."""
    server.write(tools / "profiles", STEPS)
    next((tools / "profiles").glob("i-*_pid_4100/*/trace_info.pb")).unlink()
    proc = subprocess.run(
        ["neuron-explorer", "view", "-d", str(tools / "profiles"), "--output-format", "perfetto"],
        capture_output=True,
        text=True,
        cwd=tools,
    )
    assert proc.returncode == 1 and "No metadata found for system profile" in proc.stderr


def test_the_field_test_prints_what_the_session_reader_assumed_on_a_real_profile(tools):
    """`doctor --field-test --session DIR`: the layout, which rank each worker is, which graph each step ran
    and how the clocks relate, as found; a session whose steps name no NEFF of neffs/ fails its graph line."""
    from neuronsweep.fieldtest import session_lines

    assert [(x.verdict, x.contract) for x in session_lines(None, tools)] == [("SKIP", "server session")]
    server.write(tools / "profiles", STEPS)
    found = {x.contract: x for x in session_lines(tools / "profiles", tools / "ft")}
    assert [x.verdict for x in found.values()] == ["PASS", "SKIP", "PASS", "SKIP", "PASS"]
    assert "100.0 % of the instructions inside an execution" in found["session executions' clock"].detail
    assert "rank 1 = worker_gid 1" in found["session rank of a worker"].detail
    assert "offsets +0.000 ms, -2.500 ms" in found["session ranks' clocks"].detail
    shutil.rmtree(tools / "profiles" / "neffs")
    found = {x.contract: x for x in session_lines(tools / "profiles", tools / "ft2")}
    assert found["session layout"].verdict == found["session graph of a step"].verdict == "FAIL"
    assert found["session executions' clock"].verdict == "SKIP"
    assert session_lines(tools / "nothing", tools / "ft3")[0].verdict == "FAIL"


@pytest.mark.workflow  # the `neuronsweep session` command in a child, as a user runs it
def test_the_session_command_prints_each_kind_of_step_and_the_straggler(tools):
    server.write(tools / "profiles", STEPS)
    env = dict(os.environ)  # the fixture's PATH
    proc = subprocess.run(
        ["neuronsweep", "session", "profiles"], capture_output=True, text=True, cwd=tools, env=env, timeout=120
    )
    said = proc.stderr + proc.stdout
    assert proc.returncode == 0, said
    assert "2 rank(s), 8 step(s)" in said and "rank 1 arrives last most often; the longest wait 40.0 us" in said
    assert (tools / "results" / "sessions" / "profiles" / "ranks.pftrace").is_file()
    bad = subprocess.run(["neuronsweep", "session", "nope"], capture_output=True, text=True, cwd=tools, env=env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such folder" in bad.stderr


def test_a_device_profile_without_execution_ranges_gives_no_headroom_and_says_why(tmp_path):
    """ExecutionInfo's ranges are optional ("Nil for pre-v6 NTFF profiles"): without the table, or with no
    range, a worker's profile has no windows, and that is its sentence."""
    from neuronsweep.analysis import session_headroom

    parquet = tmp_path / "view" / "parquet"
    parquet.mkdir(parents=True)
    tables = {
        "DmaPacket": {"start_ts": [0], "end_ts": [10], "transfer_bytes": [64], "queue_type": ["data"]},
        "ActiveTime": {"start_ts": [0], "end_ts": [10], "engine": ["tensor"]},
        "Instruction": {
            "start_ts": [0],
            "opcode": ["MATMUL"],
            "adjusted_flops": [8],
            "tensor_instruction_type": ["REGULAR"],
        },
    }
    for name, columns in tables.items():
        pd.DataFrame(columns).to_parquet(parquet / f"{name}.parquet")

    def why() -> str | None:
        db = ProfileDB()
        db.load_view(tmp_path / "view", "w")
        db.finish()
        return session_headroom.windows(db)[1]

    assert "no ExecutionInfo table" in why()
    pd.DataFrame(
        {
            "execution_index": [0],
            "neff_name": ["graph_a.neff"],
            "execution_start_ts": [None],
            "execution_end_ts": [None],
        }
    ).to_parquet(parquet / "ExecutionInfo.parquet")
    assert "pre-v6 NTFF" in why()


def test_the_standin_views_one_workers_device_profile_alone_as_parquet(tools):
    """Several device profiles into one --output-file is not documented: the stand-in refuses it."""
    server.write(tools / "profiles", STEPS)
    folder = tools / "both"
    for i, ntff in enumerate(sorted((tools / "profiles").glob("i-*/*/profile_nc_0_session_0.ntff"))):
        (folder / str(i)).mkdir(parents=True)
        shutil.copy(ntff, folder / str(i) / ntff.name)
    shutil.copytree(tools / "profiles" / "neffs", folder / "neffs")
    argv = [str(STANDIN / "bin" / "neuron-explorer"), "view", "-d", str(folder), "--output-format", "parquet"]
    proc = subprocess.run([*argv, "--output-file", str(tools / "out")], capture_output=True, text=True)
    assert proc.returncode == 2 and "2 device profiles" in proc.stderr


def test_a_workers_damaged_device_tables_are_its_sentence_and_the_others_give_the_headroom(tools, monkeypatch):
    from neuronsweep.backends import server_session

    server.write(tools / "profiles", STEPS)
    profiles = vllm_session.read(tools / "profiles")
    viewed = server_session.view_devices(profiles, tools / "read")
    assert [d.why for d in viewed] == [None, None]
    (viewed[1].view / "parquet" / "Instruction.parquet").write_bytes(b"PAR1 damaged")
    monkeypatch.setattr(server_session, "view_devices", lambda *a, **k: viewed)
    headroom, why, clocks = session.step_headroom(profiles, tools / "read", "auto", 60)
    assert why.startswith(f"{viewed[1].worker}: ") and "Instruction" in why and list(clocks) == [viewed[0].worker]
    assert sum(h.executions for h in headroom.values()) == 4  # the other worker's executions
