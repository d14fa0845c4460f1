"""Snakemake semantics of the sweep, checked by real snakemake runs on a tiny cpu config."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from helpers import snakemake, snakemake_argv, workflow_env

WIDS = ["matmul-m16-k16-n16-fp32", "matmul-m32-k16-n16-fp32"]


def workload(run_dir, wid):
    return run_dir / "results" / "t" / "cpu" / "workloads" / wid


@pytest.mark.workflow
def test_full_run_writes_every_stage_and_summary(finished_run):
    for wid in WIDS:
        wdir = workload(finished_run, wid)
        for rel in (
            "build/build.json",
            "build/model.pt2",
            "capture/capture.json",
            "capture/trace.json",
            "view/summary.json",
            "view/trace.pftrace",
            "metrics.json",
        ):
            assert (wdir / rel).is_file(), rel
        metrics = json.loads((wdir / "metrics.json").read_text())
        assert metrics["workload_id"] == wid and metrics["latency_n"] == 3
        assert metrics["latency_median_s"] > 0 and metrics["achieved_flops_per_s"] > 0
        load = json.loads((wdir / "capture" / "capture.json").read_text())["host_load"]
        assert load["start"]["unix"] < load["end"]["unix"] and "loadavg_1m" in load["start"]
        assert metrics["captured_under_load"] is (load["under_load"] is not None)
        # checked once against the float64 NumPy reference on the inputs the capture used
        assert metrics["correct"] is True and 0 <= metrics["max_rel_error"] < 1e-6
    table = pd.read_csv(finished_run / "results" / "t" / "summary.csv")
    assert sorted(table["scenario_id"]) == WIDS
    assert set(table["status"]) == {"ok"}


@pytest.mark.workflow
def test_noop_rerun_runs_nothing(run_copy):
    run = snakemake(run_copy)
    assert run.rules == [], run.output[-2000:]
    assert "Nothing to be done" in run.output


@pytest.mark.workflow
def test_adding_one_shape_runs_only_that_shape(run_copy):
    cfg = yaml.safe_load((run_copy / "config.yaml").read_text())
    cfg["suites"]["matmul"]["shapes"] = [{"m": 8, "k": 16, "n": 16}]
    run = snakemake(run_copy, config=cfg)
    new = "matmul-m8-k16-n16-fp32"
    per_case = [(r, w) for r, w in run.jobs if w is not None]
    assert sorted(per_case) == sorted([(s, new) for s in ("build", "capture", "view", "extract")])
    assert run.rules == ["aggregate", "build", "capture", "extract", "history", "plan", "report", "view"]
    table = pd.read_csv(run_copy / "results" / "t" / "summary.csv")
    assert len(table) == 3 and set(table["status"]) == {"ok"}


@pytest.mark.workflow
def test_deleting_one_metrics_reruns_only_its_extract_and_aggregate(run_copy):
    (workload(run_copy, WIDS[0]) / "metrics.json").unlink()
    run = snakemake(run_copy)
    assert run.jobs and sorted(j for j in run.jobs if j[0] != "all") == [
        ["aggregate", None],
        ["extract", WIDS[0]],
        ["history", None],
        ["report", None],
    ]  # the history and the report follow the aggregate


@pytest.mark.workflow
def test_one_metrics_target_builds_one_case_alone(tmp_path):
    from helpers import tiny_config

    target = f"results/t/cpu/workloads/{WIDS[1]}/metrics.json"
    run = snakemake(tmp_path, target, config=tiny_config(tmp_path))
    # the host calibration is the cpu roofline's input: measured once per run folder (cached per machine)
    assert sorted(run.jobs) == sorted(
        [[s, WIDS[1]] for s in ("build", "capture", "view", "extract")] + [["calibrate", None]]
    )
    assert not workload(tmp_path, WIDS[0]).exists()
    assert not (tmp_path / "results" / "t" / "summary.csv").exists()


@pytest.mark.workflow
def test_changed_capture_setting_reruns_captures_not_builds(run_copy):
    cfg = yaml.safe_load((run_copy / "config.yaml").read_text())
    cfg["capture"]["iterations"] = 4
    run = snakemake(run_copy, config=cfg)
    assert "build" not in run.rules
    assert run.rules.count("capture") == 2


@pytest.mark.workflow
def test_host_settings_reach_the_jobs_and_rerun_no_case(run_copy):
    """Timeouts, the cache folder and the device lock say where and how long, not what is measured: they
    reach the jobs through NEURONSWEEP_HOST, and changing them redoes no build, capture, view or extract."""
    cfg = yaml.safe_load((run_copy / "config.yaml").read_text())
    cfg["timeouts"] = {"capture": 1234}
    cfg["capture"]["device_lock"] = str(run_copy / "other.lock")
    run = snakemake(run_copy, config=cfg)
    assert run.rules == ["aggregate", "history", "plan", "report"], run.output[-2000:]  # plan.json keeps the config
    run = snakemake(run_copy, "--forcerun", "capture", f"results/t/cpu/workloads/{WIDS[0]}/metrics.json")
    capture = json.loads((workload(run_copy, WIDS[0]) / "capture" / "capture.json").read_text())
    assert capture["settings"]["timeout_s"] == 1234 and capture["settings"]["device_lock"].endswith("other.lock")
    assert capture["command"].startswith("NEURONSWEEP_HOST=")


@pytest.mark.slow
@pytest.mark.workflow
def test_failed_capture_keeps_the_other_cases_and_the_advice_works(tmp_path):
    """A damaged artifact (Snakemake judges files by time, so it looks up to date) fails its capture with
    one sentence; the other cases finish; summary.csv, roofline_targets.csv and report.html are written
    for what finished; the sentence's advice (delete the file, run again) rebuilds only that case."""
    from helpers import tiny_config

    cfg = tiny_config(tmp_path)
    snakemake(tmp_path, "--until", "build", config=cfg)
    bad = WIDS[1]
    (workload(tmp_path, bad) / "build" / "model.pt2").write_bytes(b"not the exported program")
    run = snakemake(tmp_path, check=False)
    assert run.proc.returncode != 0
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("scenario_id")
    assert table.loc[bad, "status"] == "failed"
    assert "is not the artifact its build recorded" in table.loc[bad, "reason"]
    assert "delete it and run snakemake again" in table.loc[bad, "reason"]
    # the failure is data: what aggregate read, written by the failed stage
    record = json.loads((workload(tmp_path, bad) / "logs" / "capture.error.json").read_text())
    assert record["stage"] == "capture" and record["exception"] == "UserError" and record["case"] == f"case {bad}"
    assert table.loc[bad, "reason"] == f"capture: {record['reason']}"
    assert table.loc[WIDS[0], "status"] == "ok" and (workload(tmp_path, WIDS[0]) / "metrics.json").is_file()
    assert not list(workload(tmp_path, WIDS[0]).glob("logs/*.error.json"))
    assert f"failed: {bad}" in run.output
    assert (tmp_path / "results" / "t" / "roofline_targets.csv").is_file()
    assert f"failed {1}" in (tmp_path / "results" / "t" / "report.html").read_text()

    (workload(tmp_path, bad) / "build" / "model.pt2").unlink()
    again = snakemake(tmp_path)
    assert again.rules.count("build") == 1 and again.rules.count("capture") == 1
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert set(table["status"]) == {"ok"}
    assert not list(workload(tmp_path, bad).glob("logs/*.error.json"))


@pytest.mark.slow
@pytest.mark.workflow
def test_two_runs_at_once_share_the_cache_and_never_capture_together(tmp_path):
    """Two Snakemake processes in one folder, runs r1 and r2 of the same cases, each with a core to spare
    (--cores 2, --set-threads capture=1; 2 threads are what the session calibrated): captures never
    overlap, within a process (neuron_device=1) or across them (the device lock); each workload has one
    compile cache entry; both results are whole."""
    import subprocess
    import threading

    from helpers import tiny_config

    procs = {}
    for run in ("r1", "r2"):
        cfg = tiny_config(tmp_path, run=run)
        (tmp_path / f"{run}.yaml").write_text(yaml.safe_dump(cfg))
    env = workflow_env()

    def go(run):
        procs[run] = subprocess.run(
            snakemake_argv(tmp_path, "--cores", "2", "--set-threads", "capture=1", configfile=tmp_path / f"{run}.yaml"),
            capture_output=True,
            text=True,
            env=env,
        )

    threads = [threading.Thread(target=go, args=(run,)) for run in ("r1", "r2")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(p.returncode == 0 for p in procs.values()), {
        r: p.stdout[-1500:] + p.stderr[-1500:] for r, p in procs.items()
    }
    spans, entries = [], {}
    for run in ("r1", "r2"):
        assert set(pd.read_csv(tmp_path / "results" / run / "summary.csv")["status"]) == {"ok"}
        for cap in (tmp_path / "results" / run / "cpu" / "workloads").glob("*/capture/capture.json"):
            span = json.loads(cap.read_text())["device_span"]
            spans.append((span["acquired_unix"], span["released_unix"], run))
            build = json.loads((cap.parent.parent / "build" / "build.json").read_text())
            entries.setdefault(build["workload_id"], set()).add(build["cache"]["entry"])
    spans.sort()
    assert len(spans) == 4 and {r for *_, r in spans} == {"r1", "r2"}
    assert all(a_end <= b_start for (_, a_end, _), (b_start, _, _) in zip(spans, spans[1:])), spans
    assert len(entries) == 2 and all(len(e) == 1 for e in entries.values()), entries
    published = [p for p in (tmp_path / "cache" / "cpu").glob("*/*") if not p.name.startswith(".")]
    assert len(published) == 2


@pytest.mark.workflow
def test_dry_run_plans_every_stage_and_shows_the_device_resource(tmp_path):
    from helpers import tiny_config

    run = snakemake(tmp_path, "-n", config=tiny_config(tmp_path))
    assert run.rules == sorted(
        ["aggregate", "calibrate", "history", "plan", "report"] + ["build", "capture", "view", "extract"] * 2
    )
    captures = run.output.split("rule capture:")[1:]
    assert len(captures) == 2 and all("neuron_device=1" in block.split("\n\n")[0] for block in captures)
    assert not (tmp_path / "results").exists()


@pytest.mark.workflow
def test_snakemake_report_carries_the_figures(run_copy):
    import zipfile

    snakemake(run_copy, "--report", str(run_copy / "report.zip"))
    names = zipfile.ZipFile(run_copy / "report.zip").namelist()
    ours = [n for n in names if "/data/raw/" in n and n.endswith("/report.html")]  # ours, a result in Snakemake's
    assert len(ours) == 1 and b"Plotly.newPlot(" in zipfile.ZipFile(run_copy / "report.zip").read(ours[0])
