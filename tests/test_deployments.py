"""The deployment that meets a latency target (issue 83): each candidate's TTFT, ITL and tokens per second per
instance from a hand-made set of graph times, checked by hand; what fits (cores, HBM, max_model_len) before any
figure; the choice; and the sentence when nothing meets the target."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import DATA, REPO

from neuronsweep.analysis import deployments
from neuronsweep.errors import UserError

TINY = json.loads((DATA / "models" / "tiny-llama-gqa.json").read_text())
L70B = json.loads((REPO / "config/examples/models/llama-3.3-70b.json").read_text())


def forward(times: dict[tuple[str, int, int, str], float], why: dict | None = None) -> pd.DataFrame:
    """suites/<model>-forward.csv as the aggregate writes it: one row per graph and layout."""
    rows = [
        {
            "model": "m",
            "phase": p,
            "batch": b,
            "seq": s,
            "dtype": "bf16",
            "tp": int(t[2:] or 1) if t else 1,
            "layout": t,
        }
        | {"forward_time_s": v, "forward_why": (why or {}).get((p, b, s, t))}
        for (p, b, s, t), v in times.items()
    ]
    return pd.DataFrame(rows)


GRAPHS = {  # seconds: tp 1 (no layout tag) and tp 2
    ("prefill", 1, 128, ""): 0.100,
    ("decode", 1, 256, ""): 0.020,
    ("decode", 2, 256, ""): 0.025,
    ("decode", 4, 256, ""): 0.040,
    ("prefill", 1, 128, "tp2"): 0.060,
    ("decode", 1, 256, "tp2"): 0.012,
    ("decode", 2, 256, "tp2"): 0.015,
    ("decode", 4, 256, "tp2"): 0.022,
}
VLLM = {"tensor_parallel_size": [1, 2], "max_num_seqs": [1, 4], "max_model_len": 256, "max_num_batched_tokens": 128}
SLO = {"ttft_ms": 400, "itl_ms": 30, "prompt_tokens": 200, "output_tokens": 10, "instance": "trn2.48xlarge"}


def entry(vllm: dict | str | list | None = None, **slo) -> dict:
    return {"name": "m", "vllm": vllm or VLLM, "slo": SLO | slo, "dtype": ["bf16"], "phases": ["prefill", "decode"]}


def test_each_candidates_figures_are_the_graphs_sums_and_the_best_that_meets_the_target_is_chosen():
    """A 200-token prompt in chunks of 128 is two prefill graphs of 128; TTFT adds the decode step in flight;
    ITL is the decode graph at max_num_seqs over the whole 256-token table; a trn2.48xlarge has 64 logical
    cores at LNC 2: 64 replicas at tp 1, 32 at tp 2."""
    rows = deployments.table(entry(), TINY, forward(GRAPHS), "m").set_index("candidate")
    expected = {  # (TTFT, ITL, tokens per second per instance, meets)
        "tp1-seqs1": (0.020 + 2 * 0.100, 0.020, 64 * 1 / 0.020, True),
        "tp1-seqs4": (0.040 + 2 * 0.100, 0.040, 64 * 4 / 0.040, False),  # ITL 40 ms > 30
        "tp2-seqs1": (0.012 + 2 * 0.060, 0.012, 32 * 1 / 0.012, True),
        "tp2-seqs4": (0.022 + 2 * 0.060, 0.022, 32 * 4 / 0.022, True),
    }
    for name, (ttft, itl, tps, meets) in expected.items():
        r = rows.loc[name]
        assert (r["ttft_s"], r["itl_s"], r["tokens_per_s_per_instance"]) == pytest.approx((ttft, itl, tps)), name
        assert r["meets_slo"] == meets, name
    assert rows.loc["tp1-seqs4", "binding"] == "ITL" and rows.loc["tp1-seqs4", "slo_ratio"] == pytest.approx(4 / 3)
    assert list(rows.index[rows["chosen"]]) == ["tp2-seqs4"]  # 5818 tokens/s beats 3200 and 2667
    assert "2 x prefill b1 s128" in rows.loc["tp2-seqs4", "made_of"]
    assert deployments.verdict(rows.reset_index()).startswith("tp2-seqs4 meets TTFT 400 ms and ITL 30 ms")


def test_a_deployment_that_cannot_fit_is_never_chosen_and_says_why():
    """Llama 3.3 70B in bf16: at tp 4 a rank's weights alone are 35 GB, over a trn2 core's 24 GB; at tp 8 they
    fit with the KV cache of 8 sequences of 4,000 tokens; tp 64 x dp 2 wants 128 of the instance's 64 cores;
    a request longer than max_model_len cannot be served at all."""
    vllm = {"tensor_parallel_size": [4, 8], "max_num_seqs": 8, "max_model_len": 8192, "max_num_batched_tokens": 4096}
    graphs = {("prefill", 1, 4096, "tp8"): 0.05, ("decode", 8, 8192, "tp8"): 0.01}
    rows = deployments.table(entry(vllm, prompt_tokens=4000, output_tokens=4000), L70B, forward(graphs), "m")
    rows = rows.set_index("candidate")
    assert rows.loc["tp4-seqs8", "binding"] == "HBM" and not rows.loc["tp4-seqs8", "chosen"]
    assert "GiB > 24 GiB of a core's HBM" in rows.loc["tp4-seqs8", "caveat"]
    assert rows.loc["tp8-seqs8", "chosen"] and rows.loc["tp8-seqs8", "ttft_s"] == pytest.approx(0.01 + 0.05)
    wide = {"tensor_parallel_size": 64, "data_parallel_size": 2, "max_model_len": 8192, "max_num_seqs": 8}
    assert deployments.table(entry(wide), L70B, forward({}), "m")["binding"].tolist() == ["cores"]
    too_long = deployments.table(entry(prompt_tokens=250, output_tokens=10), TINY, forward(GRAPHS), "m")
    assert set(too_long["binding"]) == {"max_model_len"} and not too_long["chosen"].any()


def test_an_fp8_kv_cache_halves_the_cache_that_must_fit():
    """Llama 3.3 70B at tp 8 with 32 sequences of 8,192 tokens: 17.6 GB of bf16 weights a rank and 10.7 GB of bf16
    KV cache (2 x 80 layers x 1 KV head x 128 x 2 bytes a token) pass a trn2 core's 24 GiB (25.8 GB); with
    --kv-cache-dtype fp8 the cache is 5.4 GB and fits."""
    graphs = {("prefill", 1, 2048, "tp8"): 0.1, ("decode", 32, 8192, "tp8"): 0.01}
    bound = {}
    for kv in ("auto", "fp8"):
        serve = f"vllm serve m -tp 8 --max-model-len 8192 --max-num-seqs 32 --kv-cache-dtype {kv}"
        rows = deployments.table(entry(serve, prompt_tokens=4096, output_tokens=4096), L70B, forward(graphs), "m")
        bound[kv] = rows["binding"].iloc[0]
    assert bound == {"auto": "HBM", "fp8": "TTFT"}  # fits with fp8: TTFT (10 + 2 x 100 ms of 400) binds


def test_no_candidate_meeting_the_target_names_the_closest_and_what_binds_it():
    rows = deployments.table(entry(itl_ms=5), TINY, forward(GRAPHS), "m")
    assert not rows["chosen"].any()
    assert deployments.verdict(rows) == (
        "No candidate meets the target; the closest is tp2-seqs1, whose ITL is 2.40x its target "
        "(TTFT 132 ms, ITL 12 ms)."
    )


def test_an_unmeasured_or_noisy_graph_is_said():
    noisy = {("decode", 4, 256, "tp2"): "noisy (spread over 25 % of its median): x"}
    graphs = {k: v for k, v in GRAPHS.items() if k != ("decode", 1, 256, "")}
    rows = deployments.table(entry(), TINY, forward(graphs, noisy), "m").set_index("candidate")
    assert rows.loc["tp1-seqs1", "binding"] == "unmeasured" and pd.isna(rows.loc["tp1-seqs1", "itl_s"])
    assert "decode b1 s256: not in the run" in rows.loc["tp1-seqs1", "caveat"]
    assert rows.loc["tp2-seqs4", "caveat"] == "built from noisy graphs: decode b4 s256"


def test_a_serve_lines_dtype_is_the_one_its_graphs_are_looked_up_in():
    """The config entry keeps its own dtype (fp32 by default) where the serve line says --dtype bfloat16:
    the graphs ran in bf16, and that is where the candidate's figures come from."""
    lines = [
        f"vllm serve m -tp {tp} --max-model-len 256 --max-num-batched-tokens 128 --dtype bfloat16" for tp in (1, 2)
    ]
    rows = deployments.table(entry(lines) | {"dtype": ["fp32"]}, TINY, forward(GRAPHS), "m").set_index("candidate")
    assert rows.loc["tp2-seqs1", "itl_s"] == pytest.approx(0.012) and rows["chosen"].sum() == 1


def test_a_mix_takes_the_worst_request():
    rows = deployments.table(entry(prompt_tokens=[100, 200], output_tokens=[10, 10]), TINY, forward(GRAPHS), "m")
    assert rows.set_index("candidate").loc["tp1-seqs1", "ttft_s"] == pytest.approx(0.020 + 2 * 0.100)


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"vllm": None}, "slo needs vllm"),
        ({"slo": SLO | {"instance": "trn9.huge"}}, "slo.instance trn9.huge is not an instance size"),
        ({"slo": SLO | {"prompt_tokens": [1, 2], "output_tokens": [1, 2, 3]}}, "lists of 2 and 3"),
    ],
)
def test_an_slo_the_arithmetic_cannot_take_is_one_sentence(bad, says):
    e = {k: v for k, v in (entry() | bad).items() if v is not None}
    with pytest.raises(UserError, match=says):
        deployments.check(e, "m")


@pytest.mark.slow  # two deployments' graphs measured: 70 s on 2 cores
@pytest.mark.workflow
@pytest.mark.torch
def test_a_grid_of_deployments_with_a_target_gives_the_table_the_frontier_and_one_choice(tmp_path):
    """The tiny GQA model as two deployments (tp 1 and tp 2, one sequence a batch) against a target: every
    graph measured once on cpu, suites/model-t-deployments.csv with a row per candidate whose figures are the
    forward table's graphs, exactly one chosen (the target is generous), and the report's section with the
    frontier."""
    from helpers import snakemake, tiny_config

    vllm = {"tensor_parallel_size": [1, 2], "max_num_seqs": 1, "max_model_len": 64, "max_num_batched_tokens": 32}
    slo = {"ttft_ms": 60_000, "itl_ms": 60_000, "prompt_tokens": 40, "output_tokens": 8, "instance": "trn2.48xlarge"}
    entry = {"name": "t", "hf_config": str(DATA / "models" / "tiny-llama-gqa.json"), "vllm": vllm, "slo": slo}
    snakemake(tmp_path, config=tiny_config(tmp_path, suites={"model": [entry | {"layers": True}]}))
    results = tmp_path / "results" / "t"
    rows = pd.read_csv(results / "suites/model-t-deployments.csv").set_index("candidate")
    assert list(rows.index) == ["tp1-seqs1", "tp2-seqs1"] and rows["chosen"].sum() == 1
    fwd = pd.read_csv(results / "suites/model-t-forward.csv")
    fwd["layout"] = fwd["layout"].fillna("")
    time = fwd.set_index(["phase", "batch", "seq", "layout"])["forward_time_s"]
    decode, prefill = time[("decode", 1, 64, "tp2")], time[("prefill", 1, 32, "tp2")]
    assert rows.loc["tp2-seqs1", "ttft_s"] == pytest.approx(decode + 2 * prefill)  # 40 tokens: chunks of 32
    assert rows.loc["tp2-seqs1", "tokens_per_s_per_instance"] == pytest.approx(32 / decode)  # 64 cores / tp 2
    page = (results / "report.html").read_text()
    assert "the deployment that meets your latency" in page and "frontier_model-t" in page


def test_the_plan_names_the_candidates_and_what_they_are_judged_on():
    assert deployments.announce(entry(), "m") == (
        "model m: against TTFT 400 ms and ITL 30 ms on a trn2.48xlarge (64 NeuronCores), the deployments "
        "tp1-seqs1, tp1-seqs4, tp2-seqs1, tp2-seqs4 (suites/model-m-deployments.csv)"
    )
