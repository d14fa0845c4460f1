"""Collectives on the neuron backend against the stand-ins: a rank per worker captured, viewed and
extracted, nccom-test beside them, and a failing rank in one sentence."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import BIN, DATA, STANDIN, neuron_config, neuron_wdir, snakemake, standin_env

from neuronsweep.errors import UserError


def _neuronsweep(env: dict, *args: object) -> subprocess.CompletedProcess:
    """The real command, which must succeed."""
    proc = subprocess.run([str(BIN / "neuronsweep"), *map(str, args)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def _extract(env: dict, tmp: Path, out: Path) -> dict:
    """`neuronsweep extract` of tmp/view and tmp/cap into `out`: its metrics.json."""
    summary, capture = tmp / "view" / "summary.json", tmp / "cap" / "capture.json"
    _neuronsweep(env, "extract", "--summary-json", summary, "--capture-json", capture, "--out", out)
    return json.loads(out.read_text())


@pytest.mark.workflow  # runs the stages' real commands (capture, view and extract of four ranks)
def test_multi_worker_capture_view_and_extract_per_rank(tmp_path):
    """A collectives NEFF across 4 workers (guide: --collectives-workers-per-node): profile_rank_<r>_exec_2
    files, a view per rank with where it ran (nc_idx, nd_idx), ranks.csv, the straggler figure, and the
    CC-core track classified as collectives with its overlap with compute."""
    env = {**os.environ, **standin_env(tmp_path, STANDIN_DEVICES="2")}
    neff = tmp_path / "cc.neff"
    neff.write_bytes(b"NEFF\0" + json.dumps({"graph": "cc", "ops": [["mm", [[128, 128], [128, 128]]]]}).encode())

    ns = functools.partial(_neuronsweep, env)

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
    # the other documented forms of `view -d`: ingest only (Explorer's get-started), and the summaries printed
    explorer = [str(STANDIN / "bin" / "neuron-explorer"), "view", "-d", str(tmp_path / "cap" / "raw")]
    ingest = subprocess.run([*explorer, "--ingest-only"], env=env, capture_output=True, text=True)
    assert ingest.returncode == 0 and "ingested 4 profile(s)" in ingest.stdout, ingest.stderr
    printed = subprocess.run([*explorer, "--output-format", "summary-json"], env=env, capture_output=True, text=True)
    assert printed.returncode == 0 and len(json.loads(printed.stdout)) == 4, printed.stderr
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
    m = _extract(env, tmp_path, tmp_path / "m" / "metrics.json")
    ranks = pd.read_csv(tmp_path / "m" / "tables" / "ranks.csv")
    assert list(ranks["rank"]) == [0, 1, 2, 3] and (ranks["cc_op_time_s"] > 0).all()
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
    spec = {"kind": "collective", "op": "all_to_all", "world": 4, "bytes": 4096, "dtype": "bf16"}
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


@pytest.mark.slow
@pytest.mark.workflow
def test_collectives_suite_on_neuron_builds_captures_every_rank_and_sits_beside_nccom_test(tmp_path):
    """torch-xla collectives under torchrun, a NeuronCore per rank: the NEFF of the collective attributed
    as any workload's, a multi-worker capture, each rank's times (an execution is the slowest rank's),
    busbw by nccl-tests' factors, and nccom-test's figures for the same case beside them. Eight ranks on
    a machine of four NeuronCores fail in one sentence; the other cases are kept."""
    cfg = neuron_config(
        tmp_path,
        suites={
            # 4 ranks span both chips of the stand-in (2 ranks on one chip: _link_per_rank's unit test)
            "collectives": {"operations": ["all_reduce", "reduce_scatter"], "sizes": [4096], "world_sizes": [4, 8]}
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
        d = neuron_wdir(tmp_path, wid)
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
        # trn1 (the stand-in's target) has no sourced NeuronLink figure
        assert m["link_bytes_per_s"] is None and "NeuronLink-v2" in m["notes"]["link_bytes_per_s"]
        ranks = pd.read_csv(d / "tables" / "ranks.csv")
        assert list(ranks["rank"]) == list(range(world)) and (ranks["median_s"] > 0).all()
        # each rank's CcOp rows on one timeline (the stand-in: rank r triggers the call 20 us x r after rank 0)
        assert m["straggler_rank"] == world - 1 and m["rank_wait_max_s"] == pytest.approx((world - 1) * 20e-6)
    page = (tmp_path / "results" / "t" / "report.html").read_text()
    assert "nccom-test busbw" in page and "nccom_test_busbw_bytes_per_s" in page  # dashed beside ours, and in the table
    assert "fewer, larger messages" in page  # a small collective's overhead, in its own words


@pytest.mark.workflow  # runs the stages' real commands (capture, view and extract of two ranks)
def test_each_ranks_cc_op_table_puts_a_neffs_collectives_on_one_timeline(tmp_path):
    """A NEFF with two collective calls captured on 2 workers and viewed with Neuron Explorer as parquet: each
    rank's CcOp rows (the stand-in: rank 1 triggers each 20 us after rank 0, both leave together, rank 1's clock
    1.5 ms ahead, compute over the first half of each) give every call's arrivals and waits, the straggler,
    the overlap with compute, tables/rank_waits.csv and view/ranks.pftrace with a process per rank."""
    env = {**os.environ, **standin_env(tmp_path)}
    neff = tmp_path / "fwd.neff"
    ops = [["mm", [[128, 128], [128, 128]]], ["all_reduce", [[8, 128]]], ["all_gather", [[8, 64]]]]
    neff.write_bytes(b"NEFF\0" + json.dumps({"graph": "fwd", "ops": ops}).encode())
    explorer = ["--options", '{"profiler": "neuron-explorer"}']

    ns = functools.partial(_neuronsweep, env)

    capture = ["--num-exec", "2", "--nth-exec", "2", "--collectives-workers-per-node", "2"]
    ns("capture", "--neff", neff, "--out", tmp_path / "cap", *capture, *explorer, "--device-lock", tmp_path / "lock")
    ns("view", "--capture", tmp_path / "cap", "--out", tmp_path / "view", *explorer)
    view = json.loads((tmp_path / "view" / "view.json").read_text())
    timeline = view["rank_timeline"]
    assert timeline["operations"] == ["AllReduce", "AllGather"] and view["ranks_pftrace"] == "ranks.pftrace"
    assert timeline["offsets_s"] == pytest.approx([0.0, -0.0015])
    m = _extract(env, tmp_path, tmp_path / "m" / "metrics.json")
    assert m["straggler_rank"] == 1 and m["rank_wait_max_s"] == pytest.approx(20e-6)
    assert m["clock_residual_s"] == pytest.approx(0.0, abs=1e-12)
    assert m["collective_wait_pct"] == pytest.approx(100 * 20 / (30 + 10))  # rank 0 inside 30 us, rank 1 10 us
    assert m["collective_overlap_pct"] == pytest.approx(50.0)
    assert "CcOp" in m["notes"]["rank_wait_max_s"]
    waits = pd.read_csv(tmp_path / "m" / "tables" / "rank_waits.csv")
    assert list(waits["wait_s"].round(9)) == [20e-6, 0.0, 20e-6, 0.0]
    tracks = ns(
        "query",
        tmp_path / "view" / "ranks.pftrace",
        "SELECT p.name AS rank, count(*) AS n FROM slice s JOIN track t ON s.track_id = t.id "
        "JOIN track p ON t.parent_id = p.id GROUP BY 1 ORDER BY 1",
        "--csv",
    ).stdout.splitlines()
    assert tracks == ["rank,n", "rank 0,2", "rank 1,2"]


@pytest.mark.torch  # the cpu plan probe or a torch child
@pytest.mark.workflow  # torchrun's rank processes (5 s): the README's tier
def test_a_failing_collective_rank_is_one_sentence_with_its_exception(tmp_path):
    from neuronsweep.backends.programs import xla_collective

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
