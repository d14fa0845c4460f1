"""A sweep killed again and again (SIGKILL to Snakemake's whole process group: a crash, a power cut,
`kill -9`) recovers with the README's command, `snakemake --unlock` then the same run again: after every
kill nothing truncated is left, and the final result equals an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import snakemake, snakemake_argv, tiny_config, workflow_env


def _start(workdir: Path, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            snakemake_argv(workdir, "--cores", "2"),
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=workflow_env(),
        )


def _kill_when(workdir: Path, seen, what: str, timeout: float = 180) -> None:
    log = workdir / f"killed-at-{what.replace(' ', '-')}.log"  # what Snakemake said, for a failure's message
    proc = _start(workdir, log)
    deadline = time.time() + timeout
    while not seen() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"the sweep ended before it reached {what}:\n" + log.read_text()[-4000:]
    assert seen(), f"never reached {what} within {timeout} s"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _whole(root: Path) -> list[str]:
    """Every stage output under root that is not whole (a JSON, CSV, Parquet, .pt2 that does not parse)."""
    broken = []
    for path in root.rglob("*"):
        if not path.is_file() or ".snakemake" in path.parts or ".tmp" in path.name or path.suffix == ".lock":
            continue
        try:
            if path.suffix == ".json":
                json.loads(path.read_text())
            elif path.suffix == ".csv":
                pd.read_csv(path)
            elif path.suffix == ".parquet":
                pq.read_table(path)
            elif path.suffix == ".pt2":
                assert zipfile.is_zipfile(path)
        except Exception as exc:  # noqa: BLE001 - any failure to parse is the finding
            broken.append(f"{path}: {type(exc).__name__}")
    return broken


@pytest.mark.slow
@pytest.mark.workflow
def test_killed_at_every_stage_then_unlock_and_rerun(tmp_path, finished_run):
    cfg = tiny_config(tmp_path)
    cfg["capture"]["iterations"] = 2000  # captures long enough to be killed inside one
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cache, work = Path(cfg["cache_dir"]), tmp_path / "results" / "t" / "cpu" / "workloads"

    def running(stage: str):
        return lambda: any(
            (log.parent.parent / stage / f"{stage}.json").exists() is False for log in work.glob(f"*/logs/{stage}.log")
        )

    kill_points = [
        ("a build storing its cache entry", lambda: any(cache.glob("cpu/*/.*.tmp"))),
        ("a capture", running("capture")),
        ("a view", running("view")),
        ("the aggregate", lambda: (tmp_path / "results" / "t" / "logs" / "aggregate.log").exists()),
    ]
    survived = []
    for what, seen in kill_points:
        _kill_when(tmp_path, seen, what)
        snakemake(tmp_path, "--unlock")
        assert not _whole(tmp_path / "results") and not _whole(cache), (what, _whole(tmp_path))
        survived.append(what)
    assert len(survived) == len(kill_points)

    run = snakemake(tmp_path)  # the README's recovery: --unlock (above), then the same command
    assert "aggregate" in run.rules
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    reference = pd.read_csv(finished_run / "results" / "t" / "summary.csv")
    assert list(table["scenario_id"]) == list(reference["scenario_id"])
    assert set(table["status"]) == {"ok"} and list(table.columns) == list(reference.columns)
    assert not _whole(tmp_path)
    # a killed writer's temp files are removed by the next writer of the same file or cache key
    leftovers = [p for p in tmp_path.rglob("*") if ".tmp" in p.name and ".snakemake" not in p.parts]
    assert not leftovers, leftovers
