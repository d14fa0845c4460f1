"""Where a run keeps its files: results/<run>/ with its summary.csv, suites/, search/ and tune/ folders, and its
cases in <backend>/workloads/<workload id>/ (build/, capture/, view/, metrics.json, logs/). The one place that
spells it, for the workflow's rules, the searches and every reader of a run."""

from __future__ import annotations

from pathlib import Path


def workloads_dir(run_dir: str | Path, backend: str) -> Path:
    """The folder holding one folder per case of a run's backend."""
    return Path(run_dir) / backend / "workloads"


def workload_dir(run_dir: str | Path, backend: str, wid: str) -> Path:
    """One case's folder (`wid` may be a Snakemake wildcard such as "{wid}")."""
    return workloads_dir(run_dir, backend) / wid


RESULTS = Path("results")  # where every run is kept, relative to the workflow's folder


def run_dir(run: str) -> Path:
    """A run's folder: results/<run>."""
    return RESULTS / run


def summary_csv(run: str) -> Path:
    """A run's summary.csv, one row per scenario."""
    return run_dir(run) / "summary.csv"


def suite_csv(run: str, name: str) -> Path:
    """A run's per-suite table (suites/<name>.csv: a suite's rows, a model's forward)."""
    return run_dir(run) / "suites" / f"{name}.csv"


def search_dir(run: str, kind: str, name: str) -> Path:
    """A search's or a tune's own folder in the run that started it: results/<run>/<kind>/<name>
    (kind "search" or "tune")."""
    return run_dir(run) / kind / name


def any_workloads_dir(run: str) -> Path | None:
    """A run's cases folder, whichever backend ran it (results/<run>/<backend>/workloads); None before any."""
    found = sorted(run_dir(run).glob("*/workloads"))
    return found[0] if found else None
