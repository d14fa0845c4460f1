"""Tune a model (search/tune.py): a winner per shape where the best param follows M, the table's saving
against count x latency by hand, a tie where the difference is noise, resume after a kill, the trial
budget per shape, bad tune blocks in one sentence, the dispatch table read back; and one real tune of a
tiny model on cpu through the CLI."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import BIN, DATA, private_cache, snakemake_argv, tiny_config, workflow_env

from neuronsweep.analysis import verdict
from neuronsweep.errors import UserError
from neuronsweep.search import dispatch, tune_shapes
from neuronsweep.search import tune as tune_mod
from neuronsweep.stages import report as report_stage

BLOCKS = [16, 64, 256]
SHAPES = [(1, 256, 256, 2), (64, 256, 256, 6), (512, 256, 1024, 3)]  # m, k, n, count in the one forward
DEFAULT_S = {1: 40e-6, 64: 200e-6, 512: 2e-3}


OPTLEVEL = {1: {1: 0.7, 64: 1.0, 512: 1.1}, 3: {1: 1.2, 64: 0.995, 512: 0.85}}  # x the default (-O2) per M


def best_block(m: int) -> int:
    return {1: 16, 64: 64, 512: 256}[m]


def latency(m: int, block: int) -> float:
    """A landscape whose best block follows M: 0.8x the compiler at the best block, 1.3x per step off it;
    at M = 64 the best is only 1 % faster (noise: a tie)."""
    steps = abs(BLOCKS.index(block) - BLOCKS.index(best_block(m)))
    best = 0.99 if m == 64 else 0.8
    return DEFAULT_S[m] * best * 1.3**steps


class Landscape:
    """The tune's workflow as a Snakemake call answers it: a summary.csv row per case of the config it is
    given, its latency from the landscape above, so that everything else the tune does (its threads, the
    merged calls, result_of, the record) is what production runs. `calls`: (m, blocks) per shape of each
    call of the searches; `who`: the candidates in each; `stop_after` calls, a KeyboardInterrupt (a kill);
    `levels`: the -O levels of the compiler's builds it measured other than the default."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.calls: list[tuple[int, list[int]]] = []
        self.who: list[str] = []
        self.levels: list[int] = []
        self.stop_after = stop_after

    def __call__(self, cfg: dict, name: str) -> tuple[pd.DataFrame, Path]:
        if "model" in cfg["suites"]:  # a compiler's build of every shape: the default, or a setting's
            level = cfg.get("neuron", {}).get("optlevel")
            if level is not None:
                self.levels.append(level)
            factor = {m: OPTLEVEL[level][m] for m in DEFAULT_S} if level in OPTLEVEL else dict.fromkeys(DEFAULT_S, 1)
            rows = [
                {"workload_id": f"matmul-m{m}-k{k}-n{n}-fp32", "status": "ok", "reason": ""}
                | {"latency_median_s": DEFAULT_S[m] * factor[m]}
                for m, k, n, _ in SHAPES
            ]
            return pd.DataFrame(rows), Path(name)
        if self.stop_after is not None and len(self.calls) >= self.stop_after:
            raise KeyboardInterrupt
        rows, shapes = [], {}
        for e in cfg["suites"]["custom"]:
            (m,), (k,), (n,), (block,) = e["grid"]["m"], e["grid"]["k"], e["grid"]["n"], e["params"]["block"]
            shapes.setdefault(m, []).append(block)
            rows.append(
                {"workload_id": f"custom-{e['name']}-m{m}-block{block}-fp32", "status": "ok", "reason": ""}
                | {"latency_median_s": latency(m, block), "m": m, "k": k, "n": n, "dtype": "fp32", "block": block}
            )
        self.calls += list(shapes.items())
        self.who += sorted({e["name"] for e in cfg["suites"]["custom"]})
        return pd.DataFrame(rows), Path(name)


@pytest.fixture(scope="module")
def code(tmp_path_factory) -> Path:
    """The candidates' files, one folder for the module's tests: the plan's look at them (a child that
    imports torch) is cached by their path and content, so it runs once, not once a test."""
    return write_code(tmp_path_factory.mktemp("code"))


def write_code(folder: Path) -> Path:
    """k.py (blocked) and k2.py (other), two candidates that multiply as the compiler's build does."""
    for name, function in (("k.py", "blocked"), ("k2.py", "other")):
        (folder / name).write_text(f"def {function}(a, b, block=16):\n    return a @ b\n")
    return folder


def make(
    tmp: Path, monkeypatch, code: Path, candidates=("compiler", "blocked"), workflow=None, decide=None, **tune
) -> tune_mod.Tune:
    monkeypatch.chdir(tmp)
    custom = {
        "name": "blocked",
        "function": str(code / "k.py") + ":blocked",
        "inputs": {"a": ["m", "k"], "b": ["k", "n"]},
        "grid": {"m": [8], "k": [8], "n": [8]},
        "params": {"block": BLOCKS},
    }
    other = {**custom, "name": "other", "function": str(code / "k2.py") + ":other"}
    model = {
        "name": "toy",
        "hf_config": "toy.json",
        "tune": {"candidates": list(candidates), "strategy": "grid", "budget": {"trials_per_shape": 3}, **tune},
    }
    cache = str(private_cache(code, calibrated=False))  # beside the candidates: their probe answers kept
    cfg = {"run": "t", "backend": "cpu", "cache_dir": cache, "suites": {"custom": [custom, other], "model": [model]}}
    t = tune_mod.Tune(cfg, model, "test", workflow=workflow or Landscape(), judge=decide)
    gemms = pd.DataFrame(
        [
            {"gemm": f"g{m}", "m": m, "k": k, "n": n, "count": c, "phase": "decode", "batch": 1, "seq": 16}
            | {"dtype": "fp32", "workload_id": f"matmul-m{m}-k{k}-n{n}-fp32", "unsupported": ""}
            for m, k, n, c in SHAPES
        ]
    )
    gemms["shape"] = [tune_shapes.shape_id(m, k, n, "fp32") for m, k, n, _ in SHAPES]
    monkeypatch.setattr(t, "gemms", lambda: gemms)
    return t


def judge(rows: pd.DataFrame) -> list:
    """As the finalists' test would on processes: a winner over 5 % faster is faster, the rest a tie."""
    out = []
    for r in rows.itertuples():
        ratio = r.winner_median_s / r.default_median_s
        said = verdict.FASTER if ratio < 0.95 else verdict.UNCHANGED
        out.append(verdict.Verdict(said, ratio=ratio, ci_low=ratio * 0.97, ci_high=ratio * 1.03))
    return out


@pytest.mark.torch  # its candidates' searches plan them first: a child that imports torch
def test_each_shape_gets_its_own_winner_and_the_saving_is_count_times_latency(tmp_path, monkeypatch, code):
    monkeypatch.setattr(tune_mod, "SHAPES_TOGETHER", 1)  # a shape a chunk: the order they are searched in shows
    measured = Landscape()
    got = make(tmp_path, monkeypatch, code, workflow=measured, decide=judge).tune_all(say=lambda _: None)
    table = got["dispatch"].set_index("m")
    # the winner's param follows M; at M = 64 the winner is 1 % faster, a tie: the compiler ships
    for m in (1, 512):
        assert json.loads(table.loc[m, "params"]) == {"block": best_block(m)}
        assert table.loc[m, "ships"] == "blocked" and not table.loc[m, "tie"]
        assert table.loc[m, "speedup"] == pytest.approx(1 / 0.8)
    assert json.loads(table.loc[64, "params"]) == {"block": 64}
    assert table.loc[64, "tie"] and table.loc[64, "ships"] == "compiler"
    assert table.loc[64, "verdict"] == verdict.UNCHANGED
    # the shapes were searched most model time first: 512 (3 x 2 ms), 64 (6 x 0.2 ms), 1 (2 x 40 us)
    assert list(dict.fromkeys(m for m, _ in measured.calls)) == [512, 64, 1]
    # the saving by hand: count x latency, the tie saving nothing
    before = sum(c * DEFAULT_S[m] for m, _, _, c in SHAPES)
    after = 2 * latency(1, 16) + 6 * DEFAULT_S[64] + 3 * latency(512, 256)
    [gain] = got["gain"].to_dict("records")
    assert gain["gemm_default_s"] == pytest.approx(before)
    assert gain["gemm_tuned_s"] == pytest.approx(after)
    assert gain["saving_s"] == pytest.approx(before - after)
    assert "not measured whole" in gain["projection"]
    # what it writes: the table a runtime reads back, the page
    folder = tmp_path / "results" / "t" / "tune" / "toy"
    table = dispatch.load(folder / "dispatch.json")
    assert table.lookup(1, 256, 256, "fp32") == dispatch.Choice(
        "blocked", str(code / "k.py") + ":blocked", {"block": 16}, 1
    )
    assert table.lookup(1, 256, 256, "fp32").speedup == pytest.approx(1 / 0.8)
    assert table.lookup(32, 256, 256, "fp32").candidate == "compiler"  # M = 32 takes the bucket of 64: a tie
    assert table.lookup(2048, 256, 1024, "fp32").params == {"block": 256}  # past every M: the largest
    assert table.lookup(1, 99, 99, "fp32") == dispatch.Choice("compiler")  # a shape the tune never saw
    assert table.lookup(1, 256, 256, "fp32").load().__name__ == "blocked"  # the function itself, imported
    assert dispatch.Table.from_json(table.to_json()).to_json() == json.loads((folder / "dispatch.json").read_text())
    page = (folder / "tune.html").read_text()
    assert "dispatch table" in page and "m512-k256-n1024-fp32" in page
    assert (
        "3 shapes: 2 ship a candidate judged faster than the compiler&#x27;s build; 1 had a candidate faster on its "
        "stored timing that the test did not confirm (a tie, slower, or not judged)." in page
    )


@pytest.mark.torch  # its candidates' searches plan them first: a child that imports torch
def test_the_shapes_searches_run_together_a_round_of_all_of_them_one_call(tmp_path, monkeypatch, code):
    """The production path: every shape's search in a thread of its own, a round of all of them one call of
    the workflow (two rounds of 2 and 1 trials: two calls for three shapes), each trial's result read from
    that call's summary by its shape's labels and its params."""
    measured = Landscape()
    t = make(tmp_path, monkeypatch, code, workflow=measured, decide=judge)
    table = t.tune_all(say=lambda _: None)["dispatch"].set_index("m")
    assert t.calls == 2 and sorted(len(b) for _, b in measured.calls) == [1, 1, 1, 2, 2, 2]
    assert {json.loads(p)["block"] for p in table["params"]} == {16, 64, 256}
    state = json.loads((tmp_path / "results" / "t" / "tune" / "toy" / "state.json").read_text())
    assert [(c["kind"], c["searches"], c["trials"]) for c in state["calls"]] == [("measure", 3, 6), ("measure", 3, 3)]


@pytest.mark.torch  # its plan probes the host (tune.make: private_cache)
def test_the_compilers_flags_are_chosen_per_shape(tmp_path, monkeypatch, code):
    """tune.settings: the compiler's build under each other -O level is a candidate at every shape, measured
    once for all shapes (a run each); -O1 wins small M, -O3 large M, neither at M = 64 (-O3 0.5 % faster: a
    tie), and the table says which flags to build each shape with."""
    measured = Landscape()
    t = make(tmp_path, monkeypatch, code, ("compiler",), measured, judge, settings={"neuron.optlevel": [1, 2, 3]})
    assert list(t.block.variants) == ["compiler[neuron.optlevel=1]", "compiler[neuron.optlevel=3]"]  # -O2: default
    got = t.tune_all(say=lambda _: None)
    assert sorted(measured.levels) == [1, 3]  # once each, for every shape
    table = got["dispatch"].set_index("m")
    o1 = t.block.compiler_config({"neuron.optlevel": 1})["run"]
    assert table.loc[1, "ships"] == "compiler[neuron.optlevel=1]" and table.loc[1, "winner_run"] == o1
    assert table.loc[512, "ships"] == "compiler[neuron.optlevel=3]"
    assert table.loc[64, "tie"] and table.loc[64, "ships"] == "compiler"
    assert table.loc[1, "trials"] == 3  # the default and the two other levels
    after = 2 * DEFAULT_S[1] * 0.7 + 6 * DEFAULT_S[64] + 3 * DEFAULT_S[512] * 0.85
    assert got["gain"].iloc[0]["gemm_tuned_s"] == pytest.approx(after)
    read = dispatch.load(tmp_path / "results" / "t" / "tune" / "toy" / "dispatch.json")
    assert read.lookup(1, 256, 256, "fp32") == dispatch.Choice("compiler", None, {}, 1, {"neuron.optlevel": 1})
    assert read.lookup(64, 256, 256, "fp32").settings == {}  # a tie ships the config's own flags
    assert read.lookup(512, 256, 1024, "fp32").settings == {"neuron.optlevel": 3}
    # with a custom candidate too, the settings' trials come out of each shape's budget
    both = make(tmp_path, monkeypatch, code, settings={"neuron.optlevel": [1, 2, 3]}, budget={"trials_per_shape": 5})
    assert both.block.trials_per_shape - len(both.block.variants) == 3
    assert both.block.compiler_config(both.block.variants["compiler[neuron.optlevel=1]"])["neuron"] == {"optlevel": 1}
    assert both.block.compiler_config()["run"] == "t-tune-toy" != o1
    # a key whose value is null (auto_cast's default) is a key: null is the default, the other value a candidate
    nulls = make(
        tmp_path, monkeypatch, code, candidates=("compiler",), settings={"neuron.auto_cast": [None, "matmult"]}
    )
    assert list(nulls.block.variants) == ["compiler[neuron.auto_cast=matmult]"]


@pytest.mark.torch  # its candidates' searches plan them first: a child that imports torch
def test_the_projection_uses_the_forwards_measured_gemm_share(tmp_path, monkeypatch, code):
    t = make(tmp_path, monkeypatch, code, decide=judge)
    suites = tmp_path / "results" / "t" / "suites"
    suites.mkdir(parents=True)
    pd.DataFrame(
        [{"phase": "decode", "batch": 1, "seq": 16, "dtype": "fp32", "forward_time_s": 0.1, "gemm_pct": 60.0}]
    ).to_csv(suites / "model-toy-forward.csv", index=False)
    [gain] = t.tune_all(say=lambda _: None)["gain"].to_dict("records")
    fraction = gain["saving_s"] / gain["gemm_default_s"]
    assert gain["gemm_share_pct"] == pytest.approx(60.0)
    assert gain["forward_tuned_s"] == pytest.approx(0.1 * (1 - 0.6 * fraction))


@pytest.mark.torch  # its candidates' searches plan them first: a child that imports torch
def test_a_killed_tune_resumes_without_measuring_again_and_keeps_the_trial_budget(tmp_path, monkeypatch, code):
    monkeypatch.setattr(tune_mod, "SHAPES_TOGETHER", 1)  # the budget and the record between every shape
    killed = Landscape(stop_after=3)
    with pytest.raises(KeyboardInterrupt):  # killed in shape 64's second round (2 trials a round)
        make(tmp_path, monkeypatch, code, workflow=killed, decide=judge).tune_all(say=lambda _: None)
    assert [m for m, _ in killed.calls] == [512, 512, 64]
    state = json.loads((tmp_path / "results" / "t" / "tune" / "toy" / "state.json").read_text())
    assert list(state["shapes"]) == ["m512-k256-n1024-fp32"]
    more = Landscape()
    got = make(tmp_path, monkeypatch, code, workflow=more, decide=judge).tune_all(say=lambda _: None)
    assert [(m, len(b)) for m, b in more.calls] == [(64, 1), (1, 2), (1, 1)]  # 64's first round: recorded
    assert len(got["dispatch"]) == 3 and got["dispatch"]["winner"].notna().all()
    # the budget: 3 trials a shape with one custom candidate, each point once
    per_shape: dict = {}
    for m, blocks in killed.calls + more.calls:
        per_shape.setdefault(m, []).extend(blocks)
    assert {m: sorted(b) for m, b in per_shape.items()} == {m: BLOCKS for m in (512, 64, 1)}
    # a smaller budget is kept: one trial a shape
    (tmp_path / "b").mkdir()
    few = Landscape()
    make(tmp_path / "b", monkeypatch, code, workflow=few, decide=judge, budget={"trials_per_shape": 1}).tune_all(
        say=lambda _: None
    )
    assert [len(blocks) for _, blocks in few.calls] == [1, 1, 1]


@pytest.mark.torch  # its candidates' searches plan them first: a child that imports torch
@pytest.mark.workflow  # two tunes, each planning in a probe child (7 s): the README's tier
def test_an_edited_candidate_is_searched_again_and_the_other_is_not(tmp_path, monkeypatch):
    code = write_code(tmp_path)  # its own: one is edited below
    both = {"candidates": ["compiler", "blocked", "other"], "budget": {"trials_per_shape": 6}}
    first = Landscape()
    make(tmp_path, monkeypatch, code, workflow=first, decide=judge, **both).tune_all(say=lambda _: None)
    assert sorted(set(first.who)) == ["blocked", "other"]
    again = Landscape()
    make(tmp_path, monkeypatch, code, workflow=again, decide=judge, **both).tune_all(say=lambda _: None)
    assert again.who == []  # nothing changed: every search is recorded
    edited = Landscape()
    (tmp_path / "k2.py").write_text("def other(a, b, block=16):\n    return (a @ b) * 1\n")  # edited
    make(tmp_path, monkeypatch, code, workflow=edited, decide=judge, **both).tune_all(say=lambda _: None)
    assert set(edited.who) == {"other"} and len(edited.who) == first.who.count("other")


@pytest.mark.torch  # its candidates' searches plan them first: a child that imports torch
def test_off_cpu_the_winners_are_judged_on_their_stored_timings_by_the_same_rule(tmp_path, monkeypatch, code):
    """Where the programs need the device, the stored timings go through compare's rule: rounds in processes
    of their own are judged; one process's samples, or a device time alone, say why they are not."""
    t = make(tmp_path, monkeypatch, code)
    t.backend = "neuron"  # what gemms() settles (replaced here)
    cases = tmp_path / "results" / "t-tune-toy" / "neuron" / "workloads"

    def stored(wid: str, median: float, rounds: bool) -> None:
        spread = [0.98, 0.99, 1.0, 1.01, 1.02]
        latency = {"samples_s": [median * f for f in spread for _ in range(3)]}
        if rounds:
            latency |= {"round_medians_s": [median * f for f in spread], "rounds_in_processes": True}
        (cases / wid / "capture").mkdir(parents=True, exist_ok=True)
        (cases / wid / "capture" / "capture.json").write_text(json.dumps({"latency": latency}))

    stored("matmul-m512-k256-n1024-fp32", 2e-3, rounds=True)
    stored("custom-blocked-m512-block256-fp32", 1.6e-3, rounds=True)
    stored("matmul-m1-k256-n256-fp32", 40e-6, rounds=False)
    stored("custom-blocked-m1-block16-fp32", 32e-6, rounds=False)
    table = t.tune_all(say=lambda _: None)["dispatch"].set_index("m")
    assert table.loc[512, "verdict"] == verdict.FASTER and table.loc[512, "ships"] == "blocked"
    assert table.loc[512, "speedup_low"] > 1.2
    assert table.loc[1, "verdict"] == verdict.ONE_PROCESS and table.loc[1, "ships"] == "compiler"
    assert table.loc[1, "speedup"] == pytest.approx(40 / 32)  # the ratio of medians, shown, not claimed
    assert table.loc[64, "verdict"] == verdict.NO_SPREAD and table.loc[64, "ships"] == "compiler"
    # captured again (a capture setting changed): judged again, not the verdict judged.json kept
    stored("custom-blocked-m1-block16-fp32", 32e-6, rounds=True)
    stored("matmul-m1-k256-n256-fp32", 40e-6, rounds=True)
    table = t.tune_all(say=lambda _: None)["dispatch"].set_index("m")
    assert table.loc[1, "verdict"] == verdict.FASTER and table.loc[1, "ships"] == "blocked"


@pytest.mark.parametrize(
    "change, said",
    [
        (
            {"candidates": ["compiler", "nki_mm"]},
            "candidates names nki_mm, which is neither compiler nor a suites.custom",
        ),
        ({"budget": {"trials_per_shape": 1}, "candidates": ["blocked", "other"]}, "fewer than its 2 custom candidates"),
        ({"candidates": ["scaled"]}, "not two matrices over grid names that share the contraction"),
        ({"settings": {"neuron.no_such_flag": [1, 2]}}, "settings names neuron.no_such_flag, which is no key"),
        ({"settings": {"neuron.optlevel": [1, 7]}}, "settings (compiler[neuron.optlevel=7])"),
        (
            {"settings": {"neuron.optlevel": [1, 3]}, "candidates": ["blocked"], "budget": {"trials_per_shape": 2}},
            "its settings take 2 trials at each shape, which leaves 0 for its 1 custom candidates",
        ),
    ],
)
def test_a_bad_tune_block_is_one_sentence_before_any_trial(tmp_path, monkeypatch, change, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text("def f(a, b):\n    return a @ b\n")
    custom = [
        {"name": n, "function": "k.py:f", "inputs": {"a": ["m", "k"], "b": ["k", "n"]}} for n in ("blocked", "other")
    ] + [{"name": "scaled", "function": "k.py:f", "inputs": {"x": ["m", "k"], "s": [1]}}]
    model = {"name": "toy", "hf_config": "toy.json", "tune": change}
    with pytest.raises(UserError) as err:
        tune_mod.Tune({"run": "t", "suites": {"custom": custom, "model": [model]}}, model, "c.yaml")
    assert said in str(err.value) and str(err.value).startswith("c.yaml: suites.model (toy) tune")
    assert str(err.value).count(". ") <= 1


def test_a_dispatch_table_of_another_format_is_refused_in_one_sentence(tmp_path):
    (tmp_path / "d.json").write_text(json.dumps({"format": 99, "shapes": {}}))
    with pytest.raises(UserError, match="format 99, this neuron-sweep reads format 1"):
        dispatch.load(tmp_path / "d.json")
    with pytest.raises(UserError, match="not a dispatch table"):
        dispatch.load(tmp_path / "missing.json")


@pytest.mark.slow
@pytest.mark.workflow  # the tune's rounds are Snakemake calls of its own
@pytest.mark.torch
def test_a_real_tune_of_a_tiny_model_on_cpu(tmp_path, monkeypatch):
    """The CLI, end to end: every decode GEMM of a 2-layer model measured with the compiler's build,
    searched with a blocked matmul, judged on fresh processes; the table, the gain and status. A model whose
    projections and head share one shape (hidden = intermediate = vocab, as many kv heads as heads), so
    that the tune has three shapes, not seven: every step of the tune is still taken, at about two thirds of
    the cost (65 CPU-s alone, against 103 with seven; the landscape logic is the tests above)."""
    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text(
        "import torch\n\ndef blocked(a, b, block=64):\n"
        "    out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)\n"
        "    for i in range(0, a.shape[1], block):\n"
        "        out = out + a[:, i : i + block] @ b[i : i + block, :]\n"
        "    return out\n"
    )
    custom = {
        "name": "blocked",
        "function": "k.py:blocked",
        "inputs": {"a": ["m", "k"], "b": ["k", "n"]},
        "grid": {"m": [4], "k": [64], "n": [64]},
        "params": {"block": [32, 512]},
    }
    model = {
        "name": "tiny",
        "hf_config": str(DATA / "models" / "tiny-llama-square.json"),
        "batch": [1],
        "seq": [16],
        "phases": ["decode"],
        "dtype": ["fp32"],
        "tune": {
            "candidates": ["compiler", "blocked"],
            "strategy": "halving",
            "budget": {"trials_per_shape": 3},
            # the wiring of a setting's own run (no key changes cpu's build: a capture key takes the builds from
            # the cache; on neuron it is the compiler's flags)
            "settings": {"capture.warmup": [1, 2]},
        },
    }
    cfg = tiny_config(tmp_path, suites={"custom": [custom], "model": [model]})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    run = subprocess.run(
        [str(BIN / "neuronsweep"), "search", "run", "config.yaml", "--name", "tiny", "--finalist-rounds", "3"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    folder = tmp_path / "results" / "t" / "tune" / "tiny"
    table = pd.read_csv(folder / "dispatch.csv")
    assert len(table) == 3 and (table["default_median_s"] > 0).all()  # 7 projections and the head, 2 bmm
    assert table.set_index("n").loc[256, "count"] == 2 * 7 + 1
    variant = "compiler[capture.warmup=2]"
    assert set(table["ships"]) <= {"compiler", "blocked", variant}
    assert (table["trials"] >= 3).all()  # the default, the setting's build, blocked's trials
    [setting_run] = [p.name for p in (tmp_path / "results").glob("t-tune-tiny-*")]
    assert len(list((tmp_path / "results" / setting_run / "cpu" / "workloads").glob("matmul-*/metrics.json"))) == 3
    won = table[table["winner"] == variant]
    assert (won["winner_run"] == setting_run).all() and won["verdict"].notna().all()
    contenders = table[table["winner"] == "blocked"]
    assert contenders["verdict"].notna().all() and contenders["speedup_low"].notna().all()
    assert (table.loc[table["ships"] == "blocked", "tie"] == False).all()  # noqa: E712 - a column of bools
    gain = pd.read_csv(folder / "gain.csv").iloc[0]
    assert gain["gemm_tuned_s"] <= gain["gemm_default_s"]
    status = subprocess.run(
        [str(BIN / "neuronsweep"), "search", "status", "config.yaml", "--name", "tiny"], capture_output=True, text=True
    )
    assert "shapes: 3 of 3 searched, 0 left" in status.stdout, status.stdout + status.stderr
    assert "settings: compiler[capture.warmup=2], each measured at every shape" in status.stdout
    assert dispatch.load(folder / "dispatch.json").model == "tiny"
    # under Snakemake the report does not wait for the tune: one that fails as a whole (its dispatch.json
    # gone, as Snakemake removes a failed job's output) leaves the sweep's report to be written
    (folder / "dispatch.json").unlink()
    plan = subprocess.run(
        snakemake_argv(tmp_path, "-n", "results/t/report.html", "--cores", "1", "--quiet", "rules"),
        capture_output=True,
        text=True,
        env=workflow_env(),
    )
    jobs = dict(re.findall(r"^(\w+) +(\d+)$", plan.stdout, re.M))  # Snakemake's job stats: rule count
    assert plan.returncode == 0 and jobs["report"] == "1" and "tune" not in jobs, plan.stdout + plan.stderr


def test_the_report_links_a_tune_it_did_not_wait_for(tmp_path):
    """A tune runs beside the report: its page is linked whether written yet or not, the latter with the
    command that says where the tune stands."""
    waiting = report_stage._across_runs(tmp_path, ["tiny"])
    assert '<a href="tune/tiny/tune.html">tune of tiny</a> (not written when this page was' in waiting
    assert "neuronsweep search status CONFIG --name tiny" in waiting
    (tmp_path / "tune" / "tiny").mkdir(parents=True)
    (tmp_path / "tune" / "tiny" / "tune.html").write_text("<p>tune</p>")
    done = report_stage._across_runs(tmp_path, ["tiny"])
    assert '<a href="tune/tiny/tune.html">tune of tiny</a>' in done and "not written" not in done


def test_a_candidate_may_take_the_left_operand_transposed_as_tensore_does():
    """The shipped NKI pair (config/examples/kernels/matmul_t*.py) takes lhsT [K, M] and rhs [K, N]."""
    mm = {"name": "mm", "inputs": {"a": ["m", "k"], "b": ["k", "n"]}}
    assert tune_mod.matrix_dims(mm, "x") == ("m", "k", "n")
    assert tune_mod.matrix_dims({"name": "t", "inputs": {"lhsT": ["k", "m"], "rhs": ["k", "n"]}}, "x") == (
        "m",
        "k",
        "n",
    )
    for inputs in ({"a": ["m", "k"]}, {"a": ["m", "k"], "b": ["m", "k"]}, {"a": ["m", "k"], "b": ["j", "n"]}):
        with pytest.raises(UserError, match="share the contraction"):
            tune_mod.matrix_dims({"name": "bad", "inputs": inputs}, "x")


def test_a_state_json_written_before_its_records_reads_back_and_writes_the_same(tmp_path):
    """state.json as the tune wrote it when its records were dicts: read into TuneState, written again, the
    same JSON (a tune started before resumes where it stopped)."""
    from neuronsweep.search.tune_records import Candidate, TuneState

    old = {
        "shapes": {
            "s0": {
                "candidates": {
                    "blocked": {"status": "ok", "params": {"bm": 64}, "median_s": 0.002, "workload_id": "w1"}
                    | {"trials": 3, "folder": "f"},
                    "other": {"status": "failed", "reason": "wrong output", "trials": 2},
                    "nki": {"status": "skipped", "reason": "not searched (budget)"},
                },
                "code": {"blocked": "abc", "other": "def"},
            }
        },
        "defaults_s": 12.5,
        "chunks_s": [30.0],
        "calls": [{"kind": "measure", "searches": 2, "trials": 4, "wall_s": 29.0}],
    }
    (tmp_path / "state.json").write_text(json.dumps(old))
    state = TuneState.read(tmp_path / "state.json")
    assert state.shapes["s0"].candidates["blocked"] == Candidate(
        "ok", params={"bm": 64}, median_s=0.002, workload_id="w1", trials=3, folder="f"
    )
    assert not state.shapes["s0"].candidates["other"].ok and state.defaults_s == 12.5
    state.write(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == old
    assert TuneState.read(tmp_path / "none.json") == TuneState()  # a tune not started yet
