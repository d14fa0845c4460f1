"""`neuronsweep compare RUN_A RUN_B`: versions and config differences first, then per workload whether
B is faster or slower beyond both runs' noise; --fail-on-regression PCT makes CI of model code fail."""

from __future__ import annotations

import json
import shutil
import subprocess

import pandas as pd
from conftest import BIN

RUN = "results/t"


def _compare(a, b, *args):
    return subprocess.run([str(BIN / "neuronsweep"), "compare", str(a), str(b), *args], capture_output=True, text=True)


def _variant(finished_run, tmp_path, name, slower=None, factor=1.0, iterations=None, backend=None):
    """A copy of the finished run's result folder, its summary changed as a new SDK might change it.
    The changed workload is marked calm (the tiny test sweep's 3 iterations are often noisy, and a
    noisy case is listed but not judged)."""
    dest = tmp_path / name
    shutil.copytree(finished_run / RUN, dest)
    summary = pd.read_csv(dest / "summary.csv")
    if slower is not None:
        row = summary["workload_id"] == slower
        summary.loc[row, "latency_median_s"] *= factor
        summary.loc[row, "achieved_flops_per_s"] /= factor
        summary.loc[row, "noisy"] = False
        summary.loc[row, "latency_rel_spread"] = 0.05
        summary.loc[row, "latency_spread_s"] = 0.05 * summary.loc[row, "latency_median_s"] / factor
    if backend:
        summary["backend"] = backend
    summary.to_csv(dest / "summary.csv", index=False)
    plan = json.loads((dest / "plan.json").read_text())
    if iterations:
        plan["config"]["capture"]["iterations"] = iterations
    if backend:
        plan["backend"] = backend
    (dest / "plan.json").write_text(json.dumps(plan))
    return dest


def test_a_slower_workload_is_named_with_its_noise_and_fails_the_regression_gate(finished_run, tmp_path):
    wid = pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"].iloc[0]
    a = _variant(finished_run, tmp_path, "a", slower=wid, factor=1.0)
    summary = pd.read_csv(a / "summary.csv")
    spread = summary["latency_spread_s"].iloc[0]
    median = summary["latency_median_s"].iloc[0]
    factor = 1 + max(0.5, 3 * spread / median)  # well beyond the measured spread
    b = _variant(finished_run, tmp_path, "b", slower=wid, factor=factor, iterations=7)
    proc = _compare(a, b, "--out", str(tmp_path / "cmp"), "--fail-on-regression", "10")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "torch: 2." in out and "config differences:" in out and "capture.iterations: 3 vs 7" in out
    assert f"slower  {(factor - 1) * 100:+7.1f}%  {wid}" in out
    assert out.strip().splitlines()[-1].startswith("regression: 1 workload(s) slower by more than 10.0% beyond noise")
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv").set_index("workload_id")
    assert table.loc[wid, "verdict"] == "slower" and table.loc[wid, "ratio_b_over_a"] == pytest_approx(factor)
    others = table.drop(index=wid)
    assert set(others["verdict"]) <= {"unchanged (within noise)", "noisy: not judged"}
    metrics = pd.read_csv(tmp_path / "cmp" / "compare_metrics.csv")
    assert {"achieved_flops_per_s"} <= set(metrics.loc[metrics["workload_id"] == wid, "metric"])
    assert "<h1>neuron-sweep: B against A</h1>" in (tmp_path / "cmp" / "compare.html").read_text()
    # the same comparison without the gate, and a run against itself, exit 0
    assert _compare(a, b, "--out", str(tmp_path / "cmp2")).returncode == 0
    same = _compare(a, a, "--out", str(tmp_path / "cmp3"), "--fail-on-regression", "0")
    verdicts = next(line for line in same.stdout.splitlines() if line.startswith("workloads: "))
    assert same.returncode == 0 and "config: the same" in same.stdout and "slower" not in verdicts


def test_runs_of_different_backends_are_not_compared_on_time(finished_run, tmp_path):
    b = _variant(finished_run, tmp_path, "b", backend="neuron")
    proc = _compare(finished_run / RUN, b, "--out", str(tmp_path / "cmp"), "--fail-on-regression", "1")
    assert proc.returncode == 0
    assert "backends differ (cpu vs neuron): times are not compared" in proc.stdout
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv")
    assert set(table["verdict"]) == {"not comparable (cpu vs neuron)"}


def test_a_folder_that_is_not_a_run_is_one_sentence(tmp_path):
    proc = _compare(tmp_path, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        "not a finished run (needs summary.csv and plan.json); pass a results/<run> folder that snakemake has written."
    )


def pytest_approx(x):
    import pytest

    return pytest.approx(x, rel=1e-9)


def test_a_device_time_without_spread_is_never_judged_nor_fails_the_gate(finished_run, tmp_path):
    """Every NKI case has only its profiled device time: one execution, no spread. compare judged it on
    zero noise (any difference 'slower'), the ranking left it unjudged; the one rule (analysis/verdict.py)
    leaves it unjudged in both, and so does a case with fewer than 3 timed samples."""
    wid = pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"].iloc[0]
    a = _variant(finished_run, tmp_path, "a")
    b = _variant(finished_run, tmp_path, "b")
    for folder, factor in ((a, 1.0), (b, 1.3)):
        summary = pd.read_csv(folder / "summary.csv")
        row = summary["workload_id"] == wid
        summary.loc[row, ["latency_median_s", "latency_spread_s"]] = None
        summary.loc[row, "profile_total_time_s"] = 1e-3 * factor
        summary.loc[row, "noisy"] = False
        summary.loc[summary["workload_id"] != wid, "latency_n"] = 2
        summary.to_csv(folder / "summary.csv", index=False)
    proc = _compare(a, b, "--out", str(tmp_path / "cmp"), "--fail-on-regression", "1")
    assert proc.returncode == 0, proc.stdout
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv").set_index("workload_id")
    assert table.loc[wid, "verdict"] == "not judged (no spread: a single profiled execution)"
    assert table.loc[wid, "change_pct"] == pytest_approx(30.0)
    assert set(table.drop(index=wid)["verdict"]) <= {"not judged (2 samples)", "noisy: not judged"}

    from neuronsweep.analysis import ranking

    rows = pd.DataFrame(
        {
            "suite": "matmul",
            "status": "ok",
            "m": 1,
            "k": 1,
            "n": 1,
            "flops": 1.0,
            "latency_median_s": [None, 1e-3, 1e-3],
            "profile_total_time_s": [2e-3, None, None],
            "latency_spread_s": [None, 1e-5, 1e-5],
            "latency_n": [None, 10, 2],
        }
    )
    assert ranking.compare(rows)["significant"].tolist() == [None, False, None]  # 2 samples: not judged
    rows.loc[2, "latency_n"] = 10
    rows.loc[2, "latency_median_s"] = 2e-3
    assert ranking.compare(rows)["significant"].tolist() == [None, False, True]
