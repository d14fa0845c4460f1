"""`neuronsweep status results/<run>`: done / running / failed / waiting per stage, read from the files
the stages write, and the time left from the stage times so far."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess

import pytest
from helpers import BIN

RUN = "results/t"


def _status(run_dir, *args):
    return subprocess.run([str(BIN / "neuronsweep"), "status", str(run_dir), *args], capture_output=True, text=True)


@pytest.mark.workflow
def test_status_counts_each_stage_and_estimates_the_time_left(finished_run, tmp_path):
    run = tmp_path / "t"
    shutil.copytree(finished_run / RUN, run)
    assert not list(run.rglob("*.running.json"))  # every stage of the real run cleared its marker
    done = json.loads(_status(run, "--json").stdout)
    assert all(c == {"done": 2, "running": 0, "failed": 0, "waiting": 0} for c in done["counts"].values())
    assert "nothing left to run" in _status(run).stdout

    wids = sorted(p.name for p in (run / "cpu" / "workloads").iterdir())
    first, second = (run / "cpu" / "workloads" / w for w in wids)
    (first / "metrics.json").unlink()  # extract of the first case is running (a live pid: ours)
    (first / "logs" / "extract.running.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    shutil.rmtree(second / "view")  # the view of the second failed; its extract waits behind it
    (second / "metrics.json").unlink()
    (second / "logs" / "view.error.json").write_text(json.dumps({"stage": "view", "reason": "x"}))
    s = json.loads(_status(run, "--json").stdout)
    assert s["counts"]["extract"] == {"done": 0, "running": 1, "failed": 0, "waiting": 1}
    assert s["counts"]["view"] == {"done": 1, "running": 0, "failed": 1, "waiting": 0}
    assert s["blocked"]["extract"] == 1
    assert s["median_s"]["view"] > 0 and s["left_unknown"] == ["extract"]  # no extract finished to time it
    text = _status(run).stdout
    assert "1 stage(s) wait behind a failed stage of the same case" in text
    assert "time left: about 0 s of stage time from the medians so far; not counted: extract" in text

    # a marker whose process is gone (a killed job) is not 'running'
    (first / "logs" / "extract.running.json").write_text(json.dumps({"pid": 2**22 + 7, "host": socket.gethostname()}))
    assert json.loads(_status(run, "--json").stdout)["counts"]["extract"]["running"] == 0


def test_status_of_a_folder_without_a_plan_is_one_sentence(tmp_path):
    proc = _status(tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().endswith(
        "no plan.json; pass a results/<run> folder of a sweep that has started."
    )
