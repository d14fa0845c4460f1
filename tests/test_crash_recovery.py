"""A sweep killed mid-capture (SIGKILL to Snakemake's whole process group) recovers with the README's
command: `snakemake --unlock`, then the same run again; the result equals an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pandas as pd

from conftest import BIN, REPO, snakemake, tiny_config


def test_killed_during_a_capture_then_unlock_and_rerun(tmp_path, finished_run):
    cfg = tiny_config(tmp_path)
    cfg["capture"]["iterations"] = 2000  # captures long enough to be killed inside one
    snakemake(tmp_path, "-n", config=cfg)  # writes config.yaml
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(tmp_path / "config.yaml"), "--cores", "2"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True,
                            env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    deadline = time.time() + 120
    while not list(tmp_path.glob("results/t/cpu/workloads/*/logs/capture.log")) and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "results" / "t" / "summary.csv").exists()
    snakemake(tmp_path, "--unlock")
    # stage outputs appear atomically, so the killed capture simply has none and reruns (a kill between
    # two outputs of one job is covered by the default profile's rerun-incomplete, which the workflow applies)
    run = snakemake(tmp_path)
    assert "capture" in run.rules
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    reference = pd.read_csv(finished_run / "results" / "t" / "summary.csv")
    assert list(table["scenario_id"]) == list(reference["scenario_id"])
    assert set(table["status"]) == {"ok"} and list(table.columns) == list(reference.columns)
    leftovers = [p for p in tmp_path.rglob("*") if ".tmp" in p.name and ".snakemake" not in p.parts]
    assert not leftovers  # nothing half-written in results/ or the compile cache
