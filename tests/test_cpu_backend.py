"""The cpu backend for real: torch.export build through the cache, profiled capture, view, by hand via the CLI."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest
from helpers import BIN

from neuronsweep.analysis.stats import latency_stats
from neuronsweep.backends import cpu, cpu_timing
from neuronsweep.errors import UserError
from neuronsweep.store.cache import file_sha256
from neuronsweep.store.records import timing

SPEC = {"kind": "matmul", "m": 24, "k": 40, "n": 8, "dtype": "bf16"}


def ns(*args, check=True):
    return subprocess.run([str(BIN / "neuronsweep"), *map(str, args)], capture_output=True, text=True, check=check)


@pytest.mark.slow
@pytest.mark.workflow  # runs the stages' real commands (torch builds and captures)
def test_stages_by_hand_with_cache_reuse_across_result_folders(tmp_path):
    cache = tmp_path / "cache"
    spec = json.dumps(SPEC)
    a, b = tmp_path / "runA" / "build", tmp_path / "runB" / "build"
    ns("build", "--spec", spec, "--out", a, "--cache-dir", cache)
    ns("build", "--spec", spec, "--out", b, "--cache-dir", cache)
    first, second = (json.loads((d / "build.json").read_text()) for d in (a, b))
    assert (first["cache"]["hit"], second["cache"]["hit"]) == (False, True)
    assert first["cache"]["key"] == second["cache"]["key"]
    assert second["compile_s"] == first["compile_s"] and "cache entry made" in second["compile_s_source"]
    assert first["toolchain"]["torch"] and (b / "model.pt2").stat().st_size > 0
    assert first["command"].startswith("neuronsweep build --spec ")

    cap = tmp_path / "runB" / "capture"
    ns(
        "capture",
        "--build",
        b,
        "--out",
        cap,
        "--warmup",
        1,
        "--iterations",
        5,
        "--repeats",
        1,
        "--num-exec",
        3,
        "--nth-exec",
        2,
        "--threads",
        1,
    )
    rec = json.loads((cap / "capture.json").read_text())
    assert rec["latency"]["n"] == 5 and len(rec["latency"]["samples_s"]) == 5
    assert rec["latency"]["min_s"] <= rec["latency"]["median_s"] <= max(rec["latency"]["samples_s"])
    assert rec["threads"] == 1 and rec["settings"]["nth_exec"] == 2  # one name, from config to record
    assert rec["profiler_flops"] == 2 * 24 * 40 * 8  # torch.profiler's own count agrees with 2·M·K·N
    trace = json.loads((cap / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "neuronsweep.exec_2" in names and "aten::mm" in names

    # capture.rounds_in_processes: each round in a fresh interpreter; the test then runs per process
    apart = tmp_path / "runB" / "apart"
    args = ("--warmup", 1, "--iterations", 4, "--repeats", 3, "--num-exec", 3, "--nth-exec", 2, "--threads", 1)
    ns("capture", "--build", b, "--out", apart, *args, "--rounds-in-processes")
    sep = json.loads((apart / "capture.json").read_text())
    assert len(set(sep["round_pids"])) == 3 and sep["latency"]["rounds_in_processes"] is True
    assert rec["round_pids"] is None and rec["latency"]["rounds_in_processes"] is False
    workload = tmp_path / "workloads" / "w"  # what compare reads: <workload>/capture/capture.json
    (workload / "capture").mkdir(parents=True)
    (workload / "capture" / "capture.json").write_text((apart / "capture.json").read_text())
    split = timing(workload)
    assert len(split.samples) == 12 and split.rounds == sep["latency"]["round_medians_s"]

    view = tmp_path / "runB" / "view"
    ns("view", "--capture", cap, "--out", view)
    summary = json.loads((view / "summary.json").read_text())
    assert 0 < summary["total_active_time"] <= summary["total_time"]
    assert summary["total_active_time_percent"] == pytest.approx(summary["total_active_time"] / summary["total_time"])
    assert (view / "trace.pftrace").stat().st_size > 0

    out = tmp_path / "runB" / "metrics.json"
    ns(
        "extract",
        "--summary-json",
        view / "summary.json",
        "--capture-json",
        cap / "capture.json",
        "--build-json",
        b / "build.json",
        "--out",
        out,
    )
    metrics = json.loads(out.read_text())
    assert metrics["latency_median_s"] == rec["latency"]["median_s"]
    assert metrics["profile_flops_tool"] == metrics["flops"]


def test_latency_stats_on_known_samples():
    s = latency_stats([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median_s"], s["q1_s"], s["q3_s"], s["iqr_s"], s["min_s"], s["n"]) == (3.0, 2.0, 4.0, 2.0, 1.0, 5)


def test_capture_refuses_a_case_that_cannot_fit_in_memory(monkeypatch):
    monkeypatch.setattr(cpu, "_available_bytes", lambda: 10 * 2**30)
    with pytest.raises(
        UserError,
        match=r"case matmul-m65536-k65536-n1-fp32: its tensors and intermediates need 16\.0 GiB but only "
        r"10\.0 GiB of RAM is available; shrink the shape",
    ):
        cpu._check_memory({"kind": "matmul", "m": 65536, "k": 65536, "n": 1, "dtype": "fp32"})


def test_stage_errors_name_the_case_and_the_fix(tmp_path):
    proc = ns("capture", "--build", tmp_path / "matmul-m1-k1-n1-fp32" / "build", "--out", tmp_path / "c", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"neuronsweep: error: {tmp_path / 'matmul-m1-k1-n1-fp32' / 'build' / 'build.json'}: "
        "no build record; run the build stage for this case first."
    )
    proc = ns("build", "--spec", "{nope", "--out", tmp_path / "b", check=False)
    assert proc.returncode == 2 and "--spec is not valid JSON" in proc.stderr
    for spec, said in (('{"kind": "conv", "n": 1}', "a workload of kind 'conv'"), ("[1]", "no object with a kind")):
        proc = ns("build", "--spec", spec, "--out", tmp_path / "b", check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and f"--spec: {said}" in proc.stderr


@pytest.mark.slow
@pytest.mark.workflow  # runs the stages' real commands (torch builds and captures)
def test_unexpected_failure_still_ends_in_one_sentence_naming_the_case(tmp_path):
    wdir = tmp_path / "matmul-m24-k40-n8-bf16"
    ns("build", "--spec", json.dumps(SPEC), "--out", wdir / "build", "--cache-dir", tmp_path / "cache")
    artifact = wdir / "build" / "model.pt2"
    artifact.write_bytes(b"not a zip archive")
    proc = ns("capture", "--build", wdir / "build", "--out", wdir / "capture", "--iterations", 1, check=False)
    assert proc.returncode == 2 and "is not the artifact its build recorded" in proc.stderr  # caught before loading
    record = json.loads((wdir / "build" / "build.json").read_text())  # a build that recorded a broken artifact
    record.update(artifact_sha256=file_sha256(artifact), artifact_bytes=artifact.stat().st_size)
    (wdir / "build" / "build.json").write_text(json.dumps(record))
    proc = ns("capture", "--build", wdir / "build", "--out", wdir / "capture", "--iterations", 1, check=False)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("neuronsweep: error: case matmul-m24-k40-n8-bf16: capture failed with ")
    assert "Traceback" in proc.stderr  # the details stay in the log above the sentence


@pytest.mark.slow
@pytest.mark.workflow  # runs the stages' real commands (torch builds and captures)
def test_a_corrupt_cache_entry_is_reported_discarded_and_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    spec = json.dumps(SPEC)
    ns("build", "--spec", spec, "--out", tmp_path / "a", "--cache-dir", cache)
    first = json.loads((tmp_path / "a" / "build.json").read_text())
    artifact = Path(first["cache"]["entry"]) / "model.pt2"
    artifact.write_bytes(artifact.read_bytes()[:100])  # truncated, as by a crash or a full disk
    proc = ns("build", "--spec", spec, "--out", tmp_path / "b", "--cache-dir", cache)
    second = json.loads((tmp_path / "b" / "build.json").read_text())
    assert second["cache"]["hit"] is False and "does not match the checksum" in second["cache"]["discarded"][0]
    assert "discarded" in proc.stderr
    meta = json.loads((Path(second["cache"]["entry"]) / "meta.json").read_text())
    assert meta["sha256"] == hashlib.sha256(artifact.read_bytes()).hexdigest()  # a whole entry again
    third = ns("build", "--spec", spec, "--out", tmp_path / "c", "--cache-dir", cache)
    assert json.loads((tmp_path / "c" / "build.json").read_text())["cache"]["hit"] is True and not third.stderr


@pytest.mark.workflow  # runs the stages' real commands (torch builds and captures)
def test_two_processes_storing_one_key_leave_one_good_entry(tmp_path):
    cache = tmp_path / "cache"
    spec = json.dumps({**SPEC, "m": 512, "k": 512, "n": 512})
    procs = [
        subprocess.Popen(
            [
                str(BIN / "neuronsweep"),
                "build",
                "--spec",
                spec,
                "--out",
                str(tmp_path / f"b{i}"),
                "--cache-dir",
                str(cache),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    assert [p.wait() for p in procs] == [0, 0]
    (entry,) = [p for p in (cache / "cpu").glob("*/*") if not p.name.startswith(".")]
    assert not [p for p in (cache / "cpu").glob("*/.*")]  # no temporary folder left behind
    meta = json.loads((entry / "meta.json").read_text())
    assert hashlib.sha256((entry / "model.pt2").read_bytes()).hexdigest() == meta["sha256"]
    for i in range(2):  # each build got the published artifact
        assert (tmp_path / f"b{i}" / "model.pt2").read_bytes() == (entry / "model.pt2").read_bytes()


def test_a_timed_round_in_its_own_process_imports_none_of_the_trace_readers():
    """Each round of capture.rounds_in_processes pays its imports: the readers (DuckDB, pyarrow,
    pandas) cost it about a third of a second and measure nothing."""
    code = (
        "import sys; import neuronsweep.backends.programs.cpu_round; "
        "print(sorted(m for m in ('duckdb', 'pyarrow', 'pandas', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([str(BIN / "python"), "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_warm_up_runs_the_timing_loop_for_its_minimum_time_and_the_lead_is_not_timed():
    import gc

    calls = []

    def timed(n: int) -> list[float]:  # a loop whose runs take 1 ms, numbered by when they ran
        calls.append((n, gc.isenabled(), time.perf_counter()))
        time.sleep(n * 1e-3)
        done = sum(c[0] for c in calls)
        return [float(i) for i in range(done - n, done)]

    t0 = time.perf_counter()
    samples = cpu_timing.warm_then_time(timed, 2, 7)
    *warm, (n, gc_on, started) = calls
    assert started - t0 >= cpu_timing.WARMUP_MIN_S and all(w[0] == 2 and w[1] for w in warm)
    lead = n - 7  # 10 ms of 1 ms runs lead the timing call, untimed
    assert lead >= 1 and samples == [float(i) for i in range(sum(w[0] for w in warm) + lead, sum(c[0] for c in calls))]
    assert not gc_on and gc.isenabled()  # the collector is off while timing, and on again after
