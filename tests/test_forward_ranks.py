"""The forward across ranks (issue 82): a layer's collectives placed where the stack issues them (the stacks'
own rules for one layer), the ranks run together on gloo with their output checked and their collective calls
on one timeline, and the measured forward beside the sum of its parts."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
from helpers import DATA, tiny_config

from neuronsweep.analysis import model_rollup, rank_timeline
from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.workloads import forward
from neuronsweep.workloads.forward import Forward
from neuronsweep.workloads.sharding import NXD_INFERENCE, VLLM_NEURON, Sharding

MOE = json.loads((DATA / "models" / "tiny-qwen3-moe.json").read_text())  # hidden 128, 8 experts, top 2
HIDDEN_16 = 16 * 128 * 4  # 16 tokens of hidden 128 in fp32


def placed(s: Sharding, phase: str, moe: bool, seq: int = 16) -> forward.Sites:
    found = forward.layer_collectives(MOE, s, phase, 1, seq, "fp32", moe)
    return forward.sites(found, HIDDEN_16 if phase == "prefill" else 128 * 4, s.tp, "fp32")


def test_a_layers_collectives_are_the_stacks_own_placed_at_its_two_reductions():
    """vLLM Neuron's prefill (SP): a reduce-scatter and an all-gather after o and after the MLP, an MoE layer's
    router affinities (tokens x experts) beside; decode and NxD Inference without SP: one all-reduce each."""
    vllm = Sharding(2, sequence_parallel=True, stack=VLLM_NEURON)
    moe = placed(vllm, "prefill", True)
    assert moe.attention == moe.mlp == ("reduce_scatter", "all_gather")
    assert moe.extra == (("all_gather", 16 * 8 * 4),) and moe.left_out == ()
    assert placed(vllm, "prefill", False).extra == ()
    decode = placed(vllm, "decode", True)
    assert decode.attention == decode.mlp == ("all_reduce",) and decode.extra == ()
    nxd = placed(Sharding(2, moe={"decode": (1, 2)}, stack=NXD_INFERENCE), "decode", True)
    assert nxd.attention == nxd.mlp == ("all_reduce",)  # the experts' all-reduce runs over the world: the TP ranks


def test_the_dp_groups_collectives_are_left_out_and_said():
    """Expert parallelism across two replicas: each MoE layer's DP all-gather and reduce-scatter run over ranks
    the forward's TP group does not have."""
    s = Sharding(2, sequence_parallel=True, stack=VLLM_NEURON, dp=2, moe={"prefill": (1, 4), "decode": (1, 4)})
    moe = placed(s, "prefill", True)
    assert moe.attention == moe.mlp == ("reduce_scatter", "all_gather")
    assert [why.split(" (")[0] for why in moe.left_out] == [
        f"all_gather of {2 * HIDDEN_16:,} B over the dp group",
        f"reduce_scatter of {2 * HIDDEN_16:,} B over the dp group",
    ]


def test_the_measured_forward_stands_beside_the_same_layers_and_collective_calls_alone():
    """Two dense layers and their four all-reduces: the parts are 2 x the layer plus 4 x the all-reduce, and
    the gap sits where the time inside the forward differs most from alone."""
    sites = {"dense": {"attention": ["all_reduce"], "mlp": ["all_reduce"], "extra": [], "left_out": []}}
    spec = {"layer_kinds": ["dense", "dense"], "sites": sites, "world": 2, "dtype": "fp32"}
    spec |= {"batch": 1, "seq": 16, "phase": "decode", "hidden": 128, "model": "m", "layers_run": 2, "params": 1}
    spec |= {"layout": "tp2", "part": "forward"}
    layers = pd.DataFrame(
        [{"part": "layer", "layer_kind": "dense", "latency_median_s": 0.010, "status": "ok", "threads": 2}]
        + [{"part": "head", "layer_kind": "head", "latency_median_s": 0.5, "status": "ok", "threads": 2}]
    )
    colls = pd.DataFrame([{"op": "all_reduce", "bytes": 512, "latency_median_s": 0.001, "status": "ok"}])
    measured = pd.Series(
        {"latency_median_s": 0.030, "status": "ok", "layers_run": 2, "forward_collectives_s": 0.008}
        | {"forward_wait_s": 0.003, "threads": 1, "rank_wait_max_s": 0.002, "straggler_rank": 1}
    )
    out = model_rollup.measured_beside_parts(measured, layers, colls, Forward.of(spec))
    assert out["forward_parts_s"] == pytest.approx(2 * 0.010 + 4 * 0.001)
    assert out["forward_parts_gap_pct"] == pytest.approx(100 * (0.030 - 0.024) / 0.024)
    # collectives: 8 ms inside against 4 ms alone; compute: 22 ms against 20 ms
    assert out["forward_gap_in"].startswith("the collectives: collectives +4 ms inside the forward against alone, 3 ms")
    assert "each rank computed on 1 thread(s), the layers alone on 2" in out["forward_gap_in"]
    assert out["straggler_rank"] == 1
    missing = model_rollup.measured_beside_parts(measured, layers, colls.iloc[:0], Forward.of(spec))
    assert "forward_parts_s" not in missing and "not measured alone" in missing["forward_gap_in"]


def test_each_ranks_forward_and_collectives_are_tracks_of_their_own_process():
    """ranks.pftrace's events: thread ids unique across ranks (Perfetto's are), an execution's slice holding
    its collective calls on the rank's clock shifted onto rank 0's."""
    spans = [[(1.0, 1.1), (1.2, 1.3)], [(5.05, 5.1), (5.25, 5.3)]]  # rank 1's clock 4 s ahead
    timeline = rank_timeline.align(spans)
    events = rank_timeline.chrome_trace(spans, timeline, "fwd", ["all_reduce"] * 2, [[(0.9, 1.4)], [(4.95, 5.4)]])
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {(0, 0): "forward", (0, 1): "collectives", (1, 2): "forward", (1, 3): "collectives"}
    rank1 = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert [e["name"] for e in rank1] == ["fwd", "all_reduce", "all_reduce"]
    assert rank1[0]["ts"] == pytest.approx(0.95e6) and rank1[1]["args"]["wait_us"] == 0.0


@pytest.fixture(scope="module")
def moe_tp2(tmp_path_factory):
    """The plan of the tiny MoE model decoding at tp 2 with its experts over the two ranks, made once for the
    tests that read it (its model probe is a child tracing the model)."""
    from neuronsweep.stages.plan import make_plan

    pytest.importorskip("transformers")
    parallel = {"tp_degree": 2, "moe_tp_degree": 1, "moe_ep_degree": 2}
    entry = {"name": "moe", "hf_config": str(DATA / "models" / "tiny-qwen3-moe.json"), "seq": [16]}
    entry |= {"phases": ["decode"], "parallel": parallel}
    tmp = tmp_path_factory.mktemp("moe_tp2")
    return make_plan(RunConfig.of(schema.validate(tiny_config(tmp, suites={"model": [entry]}))), "cpu")


@pytest.mark.workflow  # two gloo rank processes with torch and transformers
@pytest.mark.torch
def test_a_forward_across_two_gloo_ranks_is_checked_timed_and_put_on_one_timeline(tmp_path, moe_tp2):
    """The tiny MoE model's two layers decoding at tp 2 (experts over the two ranks): planned as a user writes
    it, its ranks run together with an all-reduce after o and after the MLP, the output equal to one rank's
    with each reduction its partial sums times 2, every call on one timeline with each rank's wait."""
    from neuronsweep.backends.programs import gloo
    from neuronsweep.config.settings import CaptureSettings
    from neuronsweep.formats import pftrace_reader
    from neuronsweep.store.records import BuildRecord

    plan = moe_tp2
    [(wid, spec)] = [(w, s) for w, s in plan.workloads.items() if s["kind"] == "forward"]
    assert wid == "fwd-moe-decode-b1-s16-tp2-ep2-l2-balanced-fp32" and spec["layer_kinds"] == ["dense", "moe"]
    [row] = [s for s in plan.scenarios if s.workload_id == wid]
    assert row.labels["forward_layers_how"] == "auto: all 2 decoder layers"
    build_dir, capture_dir = tmp_path / "build", tmp_path / "capture"
    build_dir.mkdir(), capture_dir.mkdir()
    record = BuildRecord.create(0.0, backend="cpu", workload_id=wid, spec=spec, **gloo.build(spec, build_dir))
    settings = CaptureSettings(
        warmup=1, iterations=3, repeats=2, num_exec=2, nth_exec=2, threads=2, device_lock="", timeout_s=120
    )
    got = gloo.capture(record, build_dir, settings, capture_dir)
    assert got["correctness"]["correct"] is True and got["correctness"]["max_rel_error"] == 0.0
    inside = got["forward_across_ranks"]
    assert inside["collective_calls"] == 4 and inside["ops"] == {"all_reduce": 4}  # 2 layers x (o, MLP)
    assert got["rank_timeline"]["instances"] == 4 * 6 and len(got["rank_waits"]) == 2 * 4 * 6
    assert 0 < inside["collectives_s"] < got["latency"]["median_s"] and inside["wait_s"] <= inside["collectives_s"]
    trace = pftrace_reader.read(capture_dir / "ranks.pftrace")
    tracks = {(t.pid, t.name) for t in trace.tracks.values() if t.tid is not None}
    assert tracks == {(0, "forward"), (0, "collectives"), (1, "forward"), (1, "collectives")}
    per_track = pd.Series(list(trace.slices.name)).groupby(list(trace.slices.track_uuid)).size()
    assert sorted(per_track) == [6, 6, 24, 24]  # each rank: 6 forwards, 4 calls in each


@pytest.mark.slow
@pytest.mark.workflow
def test_a_forward_across_two_neuroncores_runs_under_torchrun_through_torchneuron(tmp_path):
    """The tiny MoE model decoding as vLLM Neuron serves it at tp 2 on the trn2 stand-in of TorchNeuron: both
    layers with their collectives compiled into each rank's NEFF (torch.compile, functional collectives), run
    under torchrun on a NeuronCore per rank, every rank's output checked, every rank profiled; the measured
    forward beside its sum of parts, and what the host cannot split inside the NEFF null with why."""
    from helpers import neuron_config, snakemake, torchneuron_env

    serve = "vllm serve m --max-model-len 32 --max-num-seqs 1 -tp 2 --block-size 32 --max-num-batched-tokens 32"
    entry = {"name": "moe", "hf_config": str(DATA / "models" / "tiny-qwen3-moe.json"), "vllm": serve}
    cfg = neuron_config(tmp_path, suites={"model": [entry]})
    cfg["neuron"]["route"] = "auto"
    env = torchneuron_env(tmp_path)
    dry = snakemake(tmp_path, "-n", config=cfg, env=env)
    wids = sorted({w for _, w in dry.jobs if w and w.startswith("fwd-")})
    assert wids, dry.output[-2000:]
    targets = [f"results/t/neuron/workloads/{w}/metrics.json" for w in wids]
    snakemake(tmp_path, *targets, env=env)
    for wid in wids:
        d = tmp_path / "results" / "t" / "neuron" / "workloads" / wid
        build = json.loads((d / "build" / "build.json").read_text())
        assert build["route"] == "torchneuron" and build["correctness"]["correct"] is True, build["correctness"]
        neff = json.loads((d / "build" / "model.neff").read_bytes()[5:])  # the stand-in's NEFF names its ops
        ops = [o for o, _ in neff["ops"]]
        assert any("all_reduce" in o or "reduce_scatter" in o for o in ops), ops
        cap = json.loads((d / "capture" / "capture.json").read_text())
        assert [r["rank"] for r in cap["rank_latency"]] == [0, 1] and "nccom_test" not in cap
        assert len(cap["ranks"]) == 2  # every rank's device profile
        m = json.loads((d / "metrics.json").read_text())
        assert m["correct"] is True and m["latency_median_s"] > 0 and m["forward_layers_run"] == 2
        # the host times each forward whole; each rank's profile of one forward says its time in collectives,
        # and its CcOp rows each call's arrival (the stand-in: rank 1 triggers 20 us after rank 0, every rank
        # leaves together, compute over the first half of each call)
        calls = [o for o in ops if any(k in o for k in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"))]
        assert m["rank_wait_max_s"] == pytest.approx(20e-6) and m["straggler_rank"] == 1
        assert m["collective_overlap_pct"] == pytest.approx(50.0) and "CcOp" in m["notes"]["rank_wait_max_s"]
        assert len(pd.read_csv(d / "tables" / "rank_waits.csv")) == 2 * len(calls)
        assert (d / "view" / "ranks.pftrace").is_file()
        ranks = pd.read_csv(d / "tables" / "ranks.csv")
        assert m["forward_collectives_s"] == pytest.approx(ranks["cc_op_time_s"].mean())
        assert m["forward_compute_s"] == pytest.approx((ranks["total_time_s"] - ranks["cc_op_time_s"]).mean())
        assert "cc_op_time" in m["notes"]["forward_collectives_s"]
        assert m["forward_wait_s"] == pytest.approx(len(calls) * 20e-6 / 2)  # rank 0 waits at each, rank 1 never


@pytest.mark.torch
@pytest.mark.workflow  # the plan's child tracing the model (4 s): the README's tier
def test_on_neuron_a_rank_must_fit_its_core_and_the_torch_xla_route_refuses_the_forward(tmp_path, moe_tp2):
    """On neuron each rank's weights, cache and hidden states sit in its own NeuronCore's HBM (not a process of
    this host each); the torch-xla route (trn1, inf2) has no forward across ranks and says so in one sentence."""
    from neuronsweep.backends import neuron
    from neuronsweep.errors import UserError
    from neuronsweep.stages.plan_fits import ranks_that_fit

    plan = copy.deepcopy(moe_tp2)  # the checks below take cases out of it
    wid = "fwd-moe-decode-b1-s16-tp2-ep2-l2-balanced-fp32"
    spec = plan.workloads[wid]
    held = forward.rank_buffer_bytes(forward.Forward.of(spec))
    ranks_that_fit(plan, held / 0.8 + 1, "a core's HBM", processes_here=False)  # one rank's fits: both run
    assert wid in plan.workloads
    ranks_that_fit(plan, held / 0.8 - 1, "a core's HBM", processes_here=False)
    assert plan.unsupported[wid].startswith(f"each of the 2 ranks of {wid} holds ")
    assert "(forward_layers)" in plan.unsupported[wid]
    with pytest.raises(UserError, match="runs on the TorchNeuron route only"):
        neuron._compile_xla(spec, tmp_path, None, tmp_path)  # refused before anything runs


def test_the_reports_forward_table_shows_the_overlap_only_where_a_backend_measured_it():
    """The overlap with compute is measured on neuron (each rank's CcOp and ActiveTime) and null on cpu, where a
    gloo call blocks its rank: the report's table of the forward across its ranks has the column only when a
    forward has a value in it."""
    from neuronsweep.stages.report import _across_ranks

    row = {"phase": "decode", "batch": 1, "seq": 32, "tp": 2, "layout": "tp2", "forward_measured_layers": 2}
    row |= {"forward_measured_s": 2e-3, "forward_parts_s": 1.5e-3, "forward_parts_gap_pct": 33.3}
    row |= {"forward_gap_in": "the collectives", "straggler_rank": 1, "rank_wait_max_s": 2e-5}
    row |= {"collective_wait_pct": 50.0}
    cpu = _across_ranks(pd.DataFrame([row | {"collective_overlap_pct": None}]))
    neuron = _across_ranks(pd.DataFrame([row | {"collective_overlap_pct": 50.0}]))
    assert "collective_overlap_pct" not in cpu and "collective_overlap_pct" in neuron
    assert "view/ranks.pftrace" in neuron and "took" in neuron
