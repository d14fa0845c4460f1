"""`neuronsweep compare RUN_A RUN_B`: versions and config differences first, then per workload whether
B is faster or slower beyond both runs' noise; --fail-on-regression PCT makes CI of model code fail."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import BIN, run_variant

from neuronsweep.analysis import verdict
from neuronsweep.store.records import Timing

RUN = "results/t"


def _compare(a, b, *args):
    """compare on the stored timings (--stored) unless told --interleaved: by default compare times
    both runs' programs again, which the variants' synthetic timings are not about."""
    stored = [] if "--interleaved" in args else ["--stored"]
    return subprocess.run(
        [str(BIN / "neuronsweep"), "compare", str(a), str(b), *args, *stored], capture_output=True, text=True
    )


def _variant(finished_run, tmp_path, name, **changes):
    return run_variant(finished_run / RUN, tmp_path / name, **changes)


@pytest.mark.workflow
def test_a_slower_workload_is_named_with_its_test_and_the_op_that_explains_it(finished_run, tmp_path):
    wid = pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"].iloc[0]
    a = _variant(finished_run, tmp_path, "a", seed=1)
    b = _variant(finished_run, tmp_path, "b", slower=wid, factor=1.3, iterations=7, seed=2)
    proc = _compare(a, b, "--out", str(tmp_path / "cmp"), "--fail-on-regression", "10")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "torch: 2." in out and "config differences:" in out and "capture.iterations: 3 vs 7" in out
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv").set_index("workload_id")
    row = table.loc[wid]
    assert row["verdict"] == "slower" and row["ratio_b_over_a"] == pytest.approx(1.3, rel=0.02)
    assert row["ratio_ci_low"] < 1.3 < row["ratio_ci_high"] and row["p_holm"] < 0.05 and row["n_b"] == 6
    assert row["tested_on"] == "processes"
    assert f"slower    {row['change_pct']:+.1f}%  {wid}" in out and "95% CI of B/A" in out
    assert out.strip().splitlines()[-1].startswith("regression: 1 workload(s) slower by more than 10.0%")
    assert set(table.drop(index=wid)["verdict"]) <= {verdict.UNCHANGED, verdict.SMALL}
    metrics = pd.read_csv(tmp_path / "cmp" / "compare_metrics.csv")
    assert {"achieved_flops_per_s"} <= set(metrics.loc[metrics["workload_id"] == wid, "metric"])  # with its time
    assert not set(metrics["metric"]) & {"noisy", "cache_hit", "captured_under_load"}  # bookkeeping, never a metric
    assert set(metrics.loc[metrics["metric"] == "achieved_flops_per_s", "workload_id"]) == {wid}  # others unchanged
    once = metrics[metrics["metric"].str.startswith("profile_")]  # one profiled execution a side
    assert set(once["kind"]) <= {"measured once a side: shown, not judged"}
    # what changed inside: aten::mm, ranked first, with the whole change of its table
    ops = pd.read_csv(tmp_path / "cmp" / "compare_ops.csv")
    top = ops[ops["dimension"].str.startswith("op")].iloc[0]
    assert top["workload_id"] == wid and top["key"] == "cpu_thread / aten::mm" and top["share_of_change"] == 1.0
    assert not top["count_changed"] and "most of it: op (aten op on cpu, opcode on neuron) cpu_thread / aten::mm" in out
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "<h1>neuron-sweep: B against A</h1>" in page and f"<h3>{wid} (slower)</h3>" in page
    assert page.index("cpu_thread / aten::mm") > page.index(f"<h3>{wid}")
    # the verdicts, then the forest plot, then the table (verdict first, times in their unit), the runs last
    assert (
        page.index("<b>1 slower, 0 faster</b>")
        < page.index("per workload (95 % interval where judged)")
        < page.index("<th>verdict</th>")
    )
    assert page.index("<th>verdict</th>") < page.index("<th>change</th>") < page.index("<th>workload</th>")
    assert "time_a_ns" not in page and "e-" not in page.split("<th>verdict</th>")[1].split("</table>")[0]
    assert page.index("<h2>The two runs</h2>") > page.index("<h2>Workloads</h2>")
    # the same comparison without the gate, and a run against itself, exit 0
    assert _compare(a, b, "--out", str(tmp_path / "cmp2")).returncode == 0
    same = _compare(a, a, "--out", str(tmp_path / "cmp3"), "--fail-on-regression", "0")
    verdicts = next(line for line in same.stdout.splitlines() if line.startswith("workloads: "))
    assert same.returncode == 0 and "config: the same" in same.stdout and "slower" not in verdicts
    # a 1.3x change is below a 40 % minimum effect
    high = _compare(a, b, "--out", str(tmp_path / "cmp4"), "--min-effect", "40", "--fail-on-regression", "10")
    assert high.returncode == 0 and "1 unchanged (within the minimum effect)" in high.stdout


@pytest.mark.workflow
def test_one_process_a_side_is_reported_not_judged_and_never_fails_the_gate(finished_run, tmp_path):
    """Two back-to-back default runs of old: one process a case, B's 8 % higher because its process
    drew another level, its 30 samples agreeing within 1 %. A test on those samples was certain
    (p 1e-9) and failed the gate; now: the ratio, `not judged`, the command that judges, exit 0."""
    wid = pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"].iloc[0]
    a = _variant(finished_run, tmp_path, "a", seed=1, processes=0)
    b = _variant(finished_run, tmp_path, "b", slower=wid, factor=1.08, seed=2, processes=0)
    proc = _compare(a, b, "--out", str(tmp_path / "cmp"), "--fail-on-regression", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv").set_index("workload_id")
    assert set(table["verdict"]) == {"not judged (one process a side: its samples test that process, not the code)"}
    assert table["p_holm"].isna().all() and table["ratio_ci_low"].isna().all()
    assert table.loc[wid, "change_pct"] == pytest.approx(8.0, abs=1.5)
    assert "Holm p" not in proc.stdout and "CI of" not in proc.stdout and "confidence" not in proc.stdout
    assert f"To judge them: neuronsweep compare {a} {b} --interleaved 8" in proc.stdout
    assert "gate: 2 workload(s) timed in one process a side were not judged, so not gated" in proc.stdout


@pytest.mark.workflow
@pytest.mark.parametrize("op_factor", [0.5, 10.0])
def test_an_op_delta_of_the_wrong_sign_or_ten_times_the_change_explains_nothing(finished_run, tmp_path, op_factor):
    """B is judged 30 % slower; its profile's aten::mm moved the other way (x0.5) or by ten times
    the change (x10 of its self time would be): no op is named as the explanation."""
    from neuronsweep.runs import compare

    wid = pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"].iloc[0]
    a = _variant(finished_run, tmp_path, "a", seed=1)
    b = _variant(finished_run, tmp_path, "b", slower=wid, factor=1.3, seed=2)
    row = pd.read_csv(tmp_path / "a" / "summary.csv").set_index("workload_id").loc[wid]
    change_ns = 0.3 * row["latency_median_s"] * 1e9
    delta = -0.5 * change_ns if op_factor < 1 else 10 * change_ns
    ops = pd.DataFrame([{"workload_id": wid, "dimension": "op", "key": "cpu_thread / aten::mm", "delta_ns": delta}])
    said = compare.explanation({"workload_id": wid, "ratio_b_over_a": 1.3, "time_a_s": row["latency_median_s"]}, ops)
    assert said.startswith("no op explains it: the largest delta (op cpu_thread / aten::mm"), said
    agrees = ops.assign(delta_ns=0.9 * change_ns)
    assert compare.explanation(
        {"workload_id": wid, "ratio_b_over_a": 1.3, "time_a_s": row["latency_median_s"]}, agrees
    ).startswith("most of it: op cpu_thread / aten::mm")
    assert a and b


@pytest.mark.workflow
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


@pytest.mark.workflow
def test_a_device_time_without_spread_is_never_judged_nor_fails_the_gate(finished_run, tmp_path):
    """Every NKI case has only its profiled device time: one execution, no spread. compare judged it on
    zero noise (any difference 'slower'), the ranking left it unjudged; the one rule (analysis/verdict.py)
    leaves it unjudged in both, and so does a case with fewer than 3 processes a side."""
    wid = pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"].iloc[0]
    a = _variant(finished_run, tmp_path, "a")
    b = _variant(finished_run, tmp_path, "b", seed=1)
    for folder, factor in ((a, 1.0), (b, 1.3)):
        summary = pd.read_csv(folder / "summary.csv")
        for other in summary["workload_id"]:
            capture = folder / "cpu" / "workloads" / other / "capture" / "capture.json"
            record = json.loads(capture.read_text())
            record["latency"]["samples_s"] = None if other == wid else record["latency"]["samples_s"][:10]
            record["latency"]["round_medians_s"] = record["latency"]["round_medians_s"][:2]
            capture.write_text(json.dumps(record))
        row = summary["workload_id"] == wid
        summary.loc[row, ["latency_median_s", "latency_spread_s"]] = None
        summary.loc[row, "profile_total_time_s"] = 1e-3 * factor
        summary.to_csv(folder / "summary.csv", index=False)
    proc = _compare(a, b, "--out", str(tmp_path / "cmp"), "--fail-on-regression", "1")
    assert proc.returncode == 0, proc.stdout
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv").set_index("workload_id")
    assert table.loc[wid, "verdict"] == "not judged (no spread: a single profiled execution)"
    assert table.loc[wid, "change_pct"] == pytest.approx(30.0)
    assert set(table.drop(index=wid)["verdict"]) == {"not judged (2 processes a side; 3 needed)"}

    from neuronsweep.analysis import ranking

    rows = pd.DataFrame(
        {
            "workload_id": ["device", "w1", "w2"],
            "suite": "matmul",
            "status": "ok",
            "m": 1,
            "k": 1,
            "n": 1,
            "flops": 1.0,
            "latency_median_s": [None, 1e-3, 1e-3],
            "profile_total_time_s": [2e-3, None, None],
        }
    )
    calm = list(1e-3 * np.exp(0.01 * np.random.default_rng(0).standard_normal(30)))
    apart = Timing(calm, calm[:6])  # six processes of their own
    samples = {"w1": apart, "w2": Timing(calm, calm[:2])}
    assert ranking.compare(rows, samples)["significant"].tolist() == [None, False, None]  # 2 processes: not judged
    rows.loc[2, "latency_median_s"] = 2e-3
    samples["w2"] = apart.scaled(2)
    assert ranking.compare(rows, samples)["significant"].tolist() == [None, False, True]
    # within one run as between two: one process's samples never make "faster than" significant
    one = {"w1": calm, "w2": [2 * t for t in calm]}
    assert ranking.compare(rows, one)["significant"].tolist() == [None, None, None]


def test_a_negative_minimum_effect_is_one_sentence_for_compare_and_history(tmp_path):
    for command in (["compare", "a", "b"], ["history"]):
        proc = subprocess.run(
            [str(BIN / "neuronsweep"), *command, "--min-effect", "-1"], capture_output=True, text=True, cwd=tmp_path
        )
        assert proc.returncode == 2 and "--min-effect is '-1'; give a percentage of 0 or more" in proc.stderr


@pytest.mark.slow
@pytest.mark.workflow
def test_interleaved_judges_both_programs_timed_again_in_turns_not_the_stored_timings(finished_run, tmp_path):
    """--interleaved N: both runs' programs timed again here, N fresh processes a side. B's stored
    timings say 3x slower, which fails the gate; its program is A's, so what is judged with
    --interleaved are the new rounds (3 processes a side of the sweep's 3 iterations each)."""
    wid = pd.read_csv(finished_run / RUN / "summary.csv")["workload_id"].iloc[0]
    a = _variant(finished_run, tmp_path, "a", seed=1)
    b = _variant(finished_run, tmp_path, "b", slower=wid, factor=3.0, seed=2)
    summary = pd.read_csv(b / "summary.csv")  # B without the other workload: 6 processes, not 12
    summary[summary["workload_id"] == wid].to_csv(b / "summary.csv", index=False)
    assert _compare(a, b, "--out", str(tmp_path / "stored"), "--fail-on-regression", "10").returncode == 1
    again = _compare(a, b, "--out", str(tmp_path / "again"), "--interleaved", "3")
    assert again.returncode == 0, again.stderr
    assert "taken again on this host for the 1 workload(s) timed in both, 3 rounds a side" in again.stdout
    assert "interleaved: round 3 of 3 done" in again.stderr
    table = pd.read_csv(tmp_path / "again" / "compare.csv").set_index("workload_id")
    assert (table["verdict"] == "only in A").sum() == 1
    table, stored = table.loc[[wid]], summary.set_index("workload_id")
    assert set(table["timed"]) == {"again, interleaved"}
    assert table.loc[wid, "time_b_s"] != pytest.approx(stored.loc[wid, "latency_median_s"], rel=1e-9)
    assert set(table["tested_on"]) == {"processes"} and set(table["n_a"]) == set(table["n_b"]) == {3}
    assert table["min_detectable_pct"].notna().all()  # every test says what it could have seen


@pytest.mark.workflow
def test_by_default_compare_times_both_cpu_runs_again_and_stored_judges_the_stored(finished_run, tmp_path, monkeypatch):
    """Two default runs (one process a case): compare times both runs' programs again in turns, 8
    rounds a side, and judges those; --stored judges the stored ones (not judged: one process a side);
    a run built with another torch cannot be timed again here: the stored timings stand, and it says so."""
    from neuronsweep.runs import compare, interleave

    a = _variant(finished_run, tmp_path, "a", seed=1, processes=0)
    b = _variant(finished_run, tmp_path, "b", seed=2, processes=0)
    asked = []

    def fake_retime(ra, rb, wids, rounds, seed=0, say=None):
        asked.append((wids, rounds))
        level = [1e-4 * (1 + 0.01 * i) for i in range(rounds)]
        return {w: (Timing(level * 3, level), Timing(level * 3, level)) for w in wids}

    monkeypatch.setattr(interleave, "retime", fake_retime)
    lines, code = compare.run(a, b, tmp_path / "cmp", fail_on_regression=5)
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv")
    assert asked == [(compare.timed_in_both(compare.Run(a), compare.Run(b)), 8)] and code == 0
    assert set(table["timed"]) == {"again, interleaved"} and set(table["verdict"]) == {"unchanged (within noise)"}
    assert any(line.startswith("timings: both runs' programs timed again here for the 2 workload(s)") for line in lines)
    lines, code = compare.run(a, b, tmp_path / "cmp2", fail_on_regression=5, stored=True)
    assert len(asked) == 1 and code == 0
    assert set(pd.read_csv(tmp_path / "cmp2" / "compare.csv")["verdict"]) == {verdict.ONE_PROCESS}
    monkeypatch.undo()
    record = next(b.glob("cpu/workloads/*/build/build.json"))
    record.write_text(json.dumps({**json.loads(record.read_text()), "toolchain": {"torch": "2.12.0+cpu"}}))
    lines, code = compare.run(a, b, tmp_path / "cmp3", fail_on_regression=5)
    assert code == 0 and any(
        line.startswith("not timed again (") and "built with torch 2.12.0+cpu" in line for line in lines
    )


@pytest.mark.workflow
def test_interleaved_rounds_take_turns_under_the_device_lock_with_as_settings(finished_run, tmp_path, monkeypatch):
    """The order of one retime: every round is one fresh process that times A's and B's program of
    every workload in alternation, which side goes first and the workloads' order drawn per round, with
    A's threads, warm-up and iterations for both sides, while the device lock is held; the rounds come
    back paired, a round twice as slow as the rest one process median of six. Refused in one
    sentence: fewer than 3 rounds, a program missing, a run built with another torch, a neuron run."""
    from neuronsweep.errors import UserError
    from neuronsweep.host import devicelock
    from neuronsweep.runs import compare, interleave

    a_dir = _variant(finished_run, tmp_path, "a")
    b_dir = _variant(finished_run, tmp_path, "b", iterations=7)
    a, b = compare.Run(a_dir), compare.Run(b_dir)
    wids = compare.timed_in_both(a, b)
    settings = json.loads((a.workloads / wids[0] / "capture" / "capture.json").read_text())["settings"]
    lock = settings["device_lock"]
    calls = []

    def fake_pairs(jobs, timeout_s, r):
        calls.append((r, [[Path(x) for x in j["builds"]] for j in jobs], jobs, devicelock.holder(lock)))
        out = []
        for job in jobs:
            sides = []
            for build in map(Path, job["builds"]):
                slow = 2.0 if (r == 2 and build.parent.name == wids[0] and build.parents[3] == b_dir) else 1.0
                sides.append([1e-5 * slow * (1 + 0.001 * i) for i in range(job["iterations"])])
            out.append(sides)
        return {"samples": out, "pid": 1}

    monkeypatch.setattr(interleave, "alternating_in_process", fake_pairs)
    got = interleave.retime(a, b, wids, 6, seed=0, say=lambda _: None)
    assert [c[0] for c in calls] == [1, 2, 3, 4, 5, 6]  # one process a round, timing both sides of every workload
    for _, pairs, _, _ in calls:
        assert sorted(p[0].parent.name for p in pairs) == sorted(wids)
        assert all({str(x.parents[3]) for x in p} == {str(a_dir), str(b_dir)} for p in pairs)
    firsts = {str(p[0].parents[3]) for c in calls for p in c[1]}
    assert firsts == {str(a_dir), str(b_dir)}  # A went first in some pairs, B in others
    assert len({tuple(p[0].parent.name for p in c[1]) for c in calls}) > 1  # the workloads took turns too
    timing = {(j["threads"], j["warmup"], j["iterations"]) for c in calls for j in c[2]}
    assert timing == {(settings["threads"], settings["warmup"], settings["iterations"])}
    assert all(c[3] != "free" for c in calls) and devicelock.holder(lock) == "free"
    ta, tb = got[wids[0]]
    assert len(ta.samples) == len(tb.samples) == 6 * settings["iterations"] and len(tb.rounds) == 6
    assert ta.paired and tb.paired
    assert sorted(tb.rounds)[-1] == pytest.approx(2 * sorted(tb.rounds)[0], rel=0.01)  # the slow round, as taken
    # what cannot be timed again is one sentence
    with pytest.raises(UserError, match="at least 3 rounds a side"):
        interleave.retime(a, b, wids, 2)
    (b.workloads / wids[1] / "build" / interleave.ARTIFACT).unlink()
    with pytest.raises(UserError, match=r"model.pt2: missing, so .* cannot be timed again; run the sweep for b again"):
        interleave.retime(a, b, wids, 3)
    other = _variant(finished_run, tmp_path, "t")  # built with another torch: that change is not timed here
    record = next(other.glob("cpu/workloads/*/build/build.json"))
    record.write_text(json.dumps({**json.loads(record.read_text()), "toolchain": {"torch": "2.12.0+cpu"}}))
    with pytest.raises(UserError, match=r"built with torch 2.12.0\+cpu, and --interleaved would run its program"):
        interleave.retime(a, compare.Run(other), wids, 3)
    neuron = compare.Run(_variant(finished_run, tmp_path, "n", backend="neuron"))
    with pytest.raises(UserError, match="this one ran on neuron, whose programs need their device"):
        interleave.retime(a, neuron, wids, 3)


def test_a_whole_run_moving_one_way_is_called_drift_not_code():
    from neuronsweep.runs import compare

    assert compare.drift(pd.DataFrame({"change_pct": [5.0, 6.0, 4.0, 7.0, -1.0]}), 2.0) == (4, 5, 5.0)
    assert compare.drift(pd.DataFrame({"change_pct": [5.0, -6.0, 0.0, 3.0]}), 2.0) is None
    assert compare.drift(pd.DataFrame({"change_pct": [5.0, 6.0]}), 2.0) is None  # two cases say nothing


@pytest.mark.workflow
def test_a_one_process_pair_is_told_what_would_judge_it(finished_run, tmp_path):
    """One process a side: on cpu compare times both again in turns; a neuron pair is captured again with
    its rounds in processes of their own (its programs need their device), and so is an xla pair."""
    from neuronsweep.runs import compare

    a = compare.Run(_variant(finished_run, tmp_path, "a", backend="neuron", processes=0))
    b = compare.Run(_variant(finished_run, tmp_path, "b", backend="neuron", processes=0))
    assert compare.judging_command(a, b).startswith("run both sweeps again with capture.rounds_in_processes: true")
    x = compare.Run(_variant(finished_run, tmp_path, "x", backend="xla", processes=0))
    assert compare.judging_command(a, x) == compare.judging_command(x, x) == compare.judging_command(a, b)
    assert compare.judging_command(compare.Run(finished_run / RUN), compare.Run(finished_run / RUN)).endswith(
        "--interleaved 8"
    )


def test_more_rounds_go_to_the_cases_that_need_them_and_never_past_the_budget(monkeypatch):
    """compare --fail-on-regression: cases whose test could not see the gate get 4 more paired rounds at a
    time, the others none, until they can or the next batch would pass --budget-s (estimated at the time
    a round took last), and it says which."""
    from neuronsweep.runs import interleave

    asked = []

    def fake_retime(a, b, wids, rounds, seed=0, say=None):
        asked.append((sorted(wids), rounds, seed))
        level = [1e-3] * rounds
        return {w: (Timing(level, level, True), Timing(level, level, True)) for w in wids}

    monkeypatch.setattr(interleave, "retime", fake_retime)
    eight = [1e-3] * 8
    timings = {w: (Timing(eight, eight, True), Timing(eight, eight, True)) for w in ("wide", "tight")}

    def blind(now):  # "wide" sees the gate after 16 rounds
        return [w for w in now if w == "wide" and len(now[w][0].rounds) < 16]

    lines = interleave.more_rounds(None, None, timings, blind, budget_s=1000, spent_s=16.0)
    assert asked == [(["wide"], 4, 1), (["wide"], 4, 2)] and len(lines) == 2
    assert len(timings["wide"][0].rounds) == len(timings["wide"][1].rounds) == 16 and timings["wide"][1].paired
    assert len(timings["tight"][0].rounds) == 8
    # 8 rounds took 16 s: 4 more would take about 8 s, past a budget 2 s away
    asked.clear()
    timings = {w: (Timing(eight, eight, True), Timing(eight, eight, True)) for w in ("wide", "tight")}
    lines = interleave.more_rounds(None, None, timings, blind, budget_s=18, spent_s=16.0)
    assert asked == [] and lines == [
        "budget: 1 workload(s) could still not see the gate after 16 s of timing; 4 more rounds (about 8 s) "
        "would pass --budget-s 18"
    ]
