"""Where a run keeps its cases: results/<run>/<backend>/workloads/<workload id>/ (build/, capture/, view/,
metrics.json, logs/). The one place that spells it, for the workflow's rules and every reader of a run."""

from __future__ import annotations

from pathlib import Path


def workloads_dir(run_dir: str | Path, backend: str) -> Path:
    """The folder holding one folder per case of a run's backend."""
    return Path(run_dir) / backend / "workloads"


def workload_dir(run_dir: str | Path, backend: str, wid: str) -> Path:
    """One case's folder (`wid` may be a Snakemake wildcard such as "{wid}")."""
    return workloads_dir(run_dir, backend) / wid
