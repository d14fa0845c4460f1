"""A case of the tests' sweep through Snakemake's Slurm executor on a real one-node Slurm cluster
(tests/slurm/cluster.sh: munged, slurmctld, slurmd, count-only GRES neuron:2) gives the same scenario and
status as the same case run locally (the session's finished run), every one of its jobs having gone
through sbatch (the run-level plan, aggregate, history and report are local rules), its capture with its
GRES."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import REPO, snakemake_argv, tiny_config, workflow_env

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
MISSING = [t for t in ("munged", "slurmctld", "slurmd", "sbatch", "squeue") if not shutil.which(t)]
if MISSING and os.environ.get("NEURONSWEEP_REQUIRE_SLURM"):  # .ci/run installs Slurm: a skip would hide that
    raise RuntimeError(f"Slurm is required here: {', '.join(MISSING)} not found (tests/slurm/cluster.sh install)")
pytestmark = pytest.mark.skipif(
    bool(MISSING),
    reason=f"Slurm is not installed here ({', '.join(MISSING)} not found): run tests/slurm/cluster.sh install (root)",
)


@pytest.fixture
def cluster(tmp_path):
    state = tmp_path / "slurm"
    proc = subprocess.run(["bash", str(CLUSTER), "start", str(state)], capture_output=True, text=True, timeout=120)
    try:
        assert proc.returncode == 0, proc.stderr
        yield {"SLURM_CONF": str(state / "slurm.conf")}, state
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], capture_output=True, timeout=60)


def _rows(work: Path, m: int) -> list[tuple]:
    with open(work / "results" / "t" / "summary.csv") as f:
        return sorted(
            (r["scenario_id"], r["status"]) for r in csv.DictReader(f) if r["scenario_id"].startswith(f"matmul-m{m}-")
        )


@pytest.mark.slow
@pytest.mark.workflow
def test_the_sweep_through_slurm_matches_a_local_run(tmp_path, cluster, finished_run):
    slurm_env, state = cluster
    remote = tmp_path / "remote"
    remote.mkdir()
    cfg = tiny_config(remote)
    cfg["suites"]["matmul"]["grid"]["m"] = [16]  # one case: each job is a Snakemake start-up on the node
    (remote / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = workflow_env(**slurm_env)
    proc = subprocess.run(
        snakemake_argv(
            remote,
            "--workflow-profile",
            str(REPO / "workflow" / "profiles" / "slurm"),
            "--slurm-no-account",
            "--slurm-init-seconds-before-status-checks",
            "1",
            "--seconds-between-status-checks",  # a one-node test cluster answers at once (default: 10 s)
            "1",
            "--jobs",
            "4",
            "--default-resources",
            "mem_mb=500",
            "runtime=10",
        ),
        cwd=remote,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert _rows(remote, 16) == _rows(finished_run, 16) and [s for _, s in _rows(remote, 16)] == ["ok"]
    submitted = set(re.findall(r"submitted with SLURM jobid (\d+)", out, re.IGNORECASE)) or set(
        re.findall(r"SLURM run ID: \S+.*?jobid (\d+)", out)
    )
    log = (state / "slurmctld.log").read_text()
    accepted = set(re.findall(r"_slurm_rpc_submit_batch_job: JobId=(\d+)", log))
    assert accepted and len(accepted) >= 5, log[-2000:]  # calibrate, build, capture, view, extract
    assert not submitted or submitted <= accepted
    # the finished jobs stay known for MinJobAge: captures asked for one neuron chip
    jobs = subprocess.run(["scontrol", "show", "job", "-o"], env=env, capture_output=True, text=True).stdout
    captures = [line for line in jobs.splitlines() if re.search(r"Comment=rule_capture_wildcards", line)]
    queued = set(re.findall(r"Comment=rule_([a-z]+)", jobs))  # the run-level rules are local: never queued
    assert {"build", "capture", "view", "extract"} <= queued and not queued & {"plan", "aggregate", "history", "report"}
    assert len(captures) == 1 and all(re.search(r"TresPerNode=gres:neuron:1\b", line) for line in captures), jobs[
        -3000:
    ]
