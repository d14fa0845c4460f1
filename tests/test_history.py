"""The history of runs: every finished sweep adds itself to results/history/ (the workflow's history
rule), `neuronsweep history` prints each workload's series with its change points and draws
history.html, and `--fail-on-regression --last N` judges the newest run against the N before it."""

from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
from helpers import BIN, run_variant

from neuronsweep.runs import history

RUN = "results/t"


def _history(*args, cwd=None):
    return subprocess.run([str(BIN / "neuronsweep"), "history", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.workflow
def test_a_finished_sweep_is_in_the_history_and_its_report_links_it(finished_run):
    entries = list((finished_run / "results" / "history" / "entries").glob("t-*.parquet"))
    assert len(entries) == 1
    rows = pd.read_parquet(entries[0])
    assert set(rows["workload_id"]) == set(pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"])
    assert {"toolchain", "config_hash", "host", "git_commit", "finished_at"} <= set(rows.columns)
    assert json.loads(rows["toolchain"].iloc[0])["torch"].startswith("2.")
    assert all(len(s) == 3 for s in rows["samples_s"])  # every timed sample of the tiny sweep
    record = json.loads((finished_run / RUN / "history.json").read_text())
    assert record["entry"] == str(entries[0]) and record["added"] is True
    assert (finished_run / "results" / "history" / "history.html").is_file()
    assert '<a href="../history/history.html">history</a>' in (finished_run / RUN / "report.html").read_text()


@pytest.mark.slow
@pytest.mark.workflow
def test_four_runs_with_a_planted_step_show_that_step_and_the_gate_judges_the_newest(finished_run, tmp_path):
    wid = pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"].iloc[0]
    runs = []
    for i, factor in enumerate((1.0, 1.0, 1.3, 1.3), start=1):
        run = run_variant(finished_run / RUN, tmp_path / f"r{i}", slower=wid, factor=factor, seed=i, name=f"r{i}")
        os.utime(run / "summary.csv", (1.8e9 + 3600 * i,) * 2)  # finished an hour apart, in order
        runs.append(str(run))
    store = tmp_path / "history"
    proc = _history("--store", str(store), "--add", *runs)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum(line.startswith("added: ") for line in lines) == 4
    mine = next(line for line in lines if line.startswith(f"{wid} (cpu): "))
    assert re.search(r"\[step \+(29|30)\.\d% at r3\]$", mine) and mine.count("| ") == 1, mine
    others = [line for line in lines if " (cpu): " in line and not line.startswith(wid)]
    assert others and all(line.endswith("[no change point]") for line in others)
    page = (store / "history.html").read_text()
    assert "<h1>neuron-sweep: history</h1>" in page and "change point" in page and "r3 @ " in page
    # the same run again is not a new entry
    again = _history("--store", str(store), "--add", runs[0])
    assert again.stdout.startswith(f"already in the history: {runs[0]}")
    assert len(list((store / "entries").glob("*.parquet"))) == 4
    # the gate: r3 against r1 and r2 pooled is 30 % slower; r4 against r3 is not
    gate = _history("--store", str(store), "r1", "r2", "r3", "--fail-on-regression", "10", "--last", "2")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "against the pooled samples of the 2 run(s) before it" in gate.stdout
    assert re.search(rf"  slower \+(2[89]|30)\.\d%  {wid}", gate.stdout), gate.stdout  # trimmed means: 28.9 %
    assert _history("--store", str(store), "--fail-on-regression", "10").returncode == 0
    # an unknown run, an empty store: one sentence each
    unknown = _history("--store", str(store), "r9")
    assert (
        unknown.returncode == 2
        and "no run named r9 in" in unknown.stderr
        and "(known: r1, r2, r3, r4)" in unknown.stderr
    )
    empty = _history("--store", str(tmp_path / "none"))
    assert empty.returncode == 2 and "no history yet" in empty.stderr


def test_the_gate_tests_per_process_when_every_run_timed_its_rounds_apart():
    rng = np.random.default_rng(7)

    def entry(name: str, level: float, rounds: bool | float = True) -> dict:
        medians = list(level * np.exp(0.03 * rng.standard_normal(5)))
        return {
            "run": name,
            "entry": name,
            "finished_at": name,
            "backend": "cpu",
            "workload_id": "w",
            "status": "ok",
            "time_s": level,
            "noisy": False,
            "samples_s": [m for m in medians for _ in range(10)],
            "round_medians_s": medians if rounds is True else rounds,
        }

    apart = pd.DataFrame([entry("a", 1e-3), entry("b", 1e-3), entry("c", 1.2e-3)])
    lines, code = history.gate(apart, 10, 2, 0.02)
    assert code == 1 and "tested on processes" in lines[1], lines
    # an earlier run without rounds is one process of its own: its median joins the earlier processes
    older = pd.DataFrame([entry("a", 1e-3, float("nan")), entry("b", 1e-3), entry("c", 1.2e-3)])
    lines, code = history.gate(older, 10, 2, 0.02)
    assert code == 1 and "tested on processes" in lines[1], lines
    # the newest run timed in one process: not judged, so not gated, and said
    newest_alone = pd.DataFrame([entry("a", 1e-3), entry("b", 1e-3), entry("c", 1.5e-3, None)])
    lines, code = history.gate(newest_alone, 10, 2, 0.02)
    assert code == 0 and "0 judged" in lines[0] and lines[-1].startswith("gate: 1 workload(s) of the newest run"), lines
