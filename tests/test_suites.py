"""Workload suites (matmul, tiling, llm, mlp, loops, recompile), dedupe, tile model and roofline; every suite end
to end."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pandas as pd
import pytest
from helpers import neuron_config, snakemake, standin_env, tiny_config, torchneuron_env

from neuronsweep.analysis import roofline
from neuronsweep.backends.cores import cores_at_lnc
from neuronsweep.config import schema as config
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.host.targets import TARGETS
from neuronsweep.stages.plan import make_plan


def plan_of(suites, backend="cpu", slow_dtypes=None):
    return make_plan(RunConfig.of(config.validate({"suites": suites})), backend, slow_dtypes)


def test_representative_plan_counts_match_hand_computed_dedupe():
    p = plan_of(
        {
            "tiling": {},
            "loops": {},
            "llm": {"models": [{"name": "llama-8b", "hidden": 4096, "intermediate": 14336}]},
            "mlp": {"configs": [{"b": 1, "s": 128, "h": 1024, "i": 512}], "impl": ["compiler", "nki"]},
        }
    )
    by_suite = Counter(s.suite for s in p.scenarios)
    # tiling: 3 dims x 2 boundaries x 2 multiples x 3 offsets
    # llm: prefill 9 batches x 5 seqs x 3 projections + decode 9 x 3
    assert by_suite == {"tiling": 36, "llm": 135 + 27, "loops": 9, "mlp": 2}
    # tiling: 12 distinct values per dim, and "512" in each dim is the same 512^3 workload: 36 - 2
    # llm: up and gate are one GEMM; prefill M = 2^7..2^19 (13 values), decode M = 1..256 of which
    #      128 and 256 are prefill Ms too: 13 + 7 = 20 per (K, N) pair, 2 pairs
    # loops 9, mlp 1 (+ nki unsupported on cpu)
    assert len(p.workloads) == 34 + 40 + 9 + 1 and list(p.unsupported) == ["mlp-b1-s128-h1024-i512-fp32-nki"]
    on_neuron = plan_of({"mlp": {"configs": [{"b": 1, "s": 128, "h": 1024, "i": 512}], "impl": ["nki"]}}, "neuron")
    assert list(on_neuron.workloads) == [
        "mlp-b1-s128-h1024-i512-fp32-nki"
    ]  # the smallest MLP config: the NKI kernel fits


def test_llm_gemms_and_bucket_mapping():
    p = plan_of(
        {
            "llm": {
                "models": [{"name": "m", "hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8}],
                "batch": [8],
                "seq": [256],
                "projections": ["ffn_up", "ffn_down", "qkv", "o"],
            }
        }
    )
    sc = {s.id: s for s in p.scenarios}
    assert sc["llm-m-prefill-b8-s256-ffn_up-fp32"].workload_id == "matmul-m2048-k4096-n14336-fp32"
    assert sc["llm-m-decode-b8-ffn_down-fp32"].workload_id == "matmul-m8-k14336-n4096-fp32"
    assert sc["llm-m-decode-b8-qkv-fp32"].workload_id == "matmul-m8-k4096-n6144-fp32"  # 4096 + 2*8*128
    assert sc["llm-m-prefill-b8-s256-o-fp32"].labels["phase"] == "prefill"
    with pytest.raises(UserError, match="projection qkv needs 'heads' and 'kv_heads'"):
        plan_of({"llm": {"models": [{"name": "m", "hidden": 8, "intermediate": 16}], "projections": ["qkv"]}})


def test_tiling_values_straddle_the_boundaries():
    p = plan_of(
        {
            "tiling": {
                "base": {"m": 64, "k": 64, "n": 64},
                "boundaries": [128],
                "multiples": [1, 2],
                "offsets": [-1, 0, 1],
                "vary": ["n"],
            }
        }
    )
    assert sorted(s.labels["n"] for s in p.scenarios) == [127, 128, 129, 255, 256, 257]


def test_slow_dtypes_and_nki_are_unsupported_on_cpu_with_reasons():
    p = plan_of(
        {"matmul": {"shapes": [{"m": 8, "k": 8, "n": 8}], "dtype": ["fp16", "bf16"], "impl": ["compiler", "nki"]}},
        slow_dtypes={"fp16": "no fast fp16 GEMM here"},
    )
    assert set(p.workloads) == {"matmul-m8-k8-n8-bf16"}
    assert "fp16" in p.unsupported["matmul-m8-k8-n8-fp16"] and "NKI" in p.unsupported["matmul-m8-k8-n8-bf16-nki"]
    on_neuron = plan_of(
        {"matmul": {"shapes": [{"m": 128, "k": 128, "n": 100}], "dtype": ["fp16"], "impl": ["nki"]}}, "neuron"
    )
    assert "N=100" not in json.dumps(on_neuron.unsupported)  # below one tile: the kernel handles it
    assert set(on_neuron.workloads) == {"matmul-m128-k128-n100-fp16-nki"}


@pytest.mark.parametrize(
    "mkn, counts, util",
    [
        ((128, 128, 512), (1, 1, 1), 100.0),
        ((127, 128, 512), (1, 1, 1), 100 * 127 / 128),
        ((129, 128, 512), (2, 1, 1), 100 * 129 / 256),
        ((128, 129, 512), (1, 2, 1), 100 * 129 / 256),
        ((128, 128, 513), (1, 1, 2), 100 * 513 / 1024),
        ((256, 256, 1024), (2, 2, 2), 100.0),
        ((1, 1, 1), (1, 1, 1), 100 / (128 * 128 * 512)),
    ],
)
def test_tile_counts_at_and_around_boundaries(mkn, counts, util):
    t = roofline.tiles([mkn])
    assert (t["tiles_m"], t["tiles_k"], t["tiles_n"]) == counts
    assert t["tiles_total"] == counts[0] * counts[1] * counts[2]
    assert t["tile_utilization_pct"] == pytest.approx(util)


def test_multi_gemm_tiles_and_roofline_bound():
    t = roofline.tiles([(128, 1024, 512), (128, 512, 1024)])
    assert t["tiles_m"] is None and t["tiles_total"] == 8 + 8 and t["tile_utilization_pct"] == 100.0
    trn1 = TARGETS["trn1"]
    assert trn1.peak_flops("bf16") == pytest.approx(91.7504e12) and trn1.peak_flops("fp32") == pytest.approx(22.9376e12)
    # a decode GEMM (M=8) is memory bound, a big square one compute bound, on every target
    for target in ("trn1", "inf2", "trn2", "trn3"):
        t = TARGETS[target]
        dec = roofline.roofline(
            2 * 8 * 4096 * 14336,
            2 * (8 * 4096 + 4096 * 14336 + 8 * 14336),
            t.peak_flops("bf16"),
            t.hbm_bytes_per_s,
            None,
        )
        big = roofline.roofline(2 * 4096**3, 2 * 3 * 4096**2, t.peak_flops("bf16"), t.hbm_bytes_per_s, 1.0)
        assert dec["roofline_bound"] == "memory" and big["roofline_bound"] == "compute"
        assert big["roofline_efficiency_pct"] == pytest.approx(100 * big["ideal_compute_s"])


TINY_SUITES = {
    "tiling": {
        "base": {"m": 16, "k": 16, "n": 16},
        "boundaries": [128],
        "multiples": [1],
        "offsets": [0],
        "vary": ["m", "k"],
    },
    "llm": {
        "models": [{"name": "tiny", "hidden": 32, "intermediate": 64}],
        "batch": [1],
        "seq": [16],
        "projections": ["ffn_up", "ffn_gate"],
    },
    "mlp": {"configs": [{"b": 1, "s": 16, "h": 32, "i": 64}], "impl": ["compiler", "nki"]},
    "loops": {"steps": 2, "batch": 4, "features": 16, "sizes": {"small": 1}},
}


@pytest.mark.workflow
def test_every_suite_end_to_end_on_cpu(tmp_path):
    cfg = tiny_config(tmp_path, suites=TINY_SUITES)
    snakemake(tmp_path, config=cfg)
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("scenario_id")
    assert Counter(table["suite"]) == {"tiling": 2, "llm": 4, "mlp": 2, "loops": 3}
    assert table.loc["mlp-b1-s16-h32-i64-fp32-nki", "status"] == "unsupported"
    ok = table[table["status"] != "unsupported"]
    assert set(ok["status"]) == {"ok"}, ok[["status", "reason"]]
    # dedupe: prefill up and gate share one workload, and so do decode up and gate
    assert (
        table.loc["llm-tiny-prefill-b1-s16-ffn_up-fp32", "workload_id"]
        == table.loc["llm-tiny-prefill-b1-s16-ffn_gate-fp32", "workload_id"]
        == "matmul-m16-k32-n64-fp32"
    )
    assert len(list((tmp_path / "results" / "t" / "cpu" / "workloads").iterdir())) == 2 + 2 + 1 + 3
    # the cpu roofline rests on the host's measured peaks
    cal = json.loads((tmp_path / "results" / "t" / "cpu" / "calibration.json").read_text())
    assert cal["peak_flops_per_s"]["fp32"] > 0 and cal["peak_bytes_per_s"] > 0
    assert ok["peak_flops_per_s"].eq(cal["peak_flops_per_s"]["fp32"]).all()
    assert set(ok["roofline_bound"]) <= {"compute", "memory"} and ok["roofline_efficiency_pct"].gt(0).all()
    loops = table[table["suite"] == "loops"]
    assert loops["flops"].nunique() == 1  # the three patterns compute the same thing
    targets = pd.read_csv(tmp_path / "results" / "t" / "roofline_targets.csv")
    assert set(targets["target"]) == {"trn1", "inf2", "trn2", "trn3"} and len(targets) == 4 * 8


@pytest.mark.slow
@pytest.mark.workflow
def test_every_suite_builds_on_neuron_against_the_standin(tmp_path):
    """Every suite on the torch-xla route of an inf2 (the stand-in's default machine), target and route
    left to `auto` as the default config leaves them (test_torchneuron sweeps the TorchNeuron route)."""
    cfg = neuron_config(tmp_path, suites=copy.deepcopy(TINY_SUITES))  # one case of each kind below
    cfg["suites"]["mlp"]["impl"] = ["compiler"]
    cfg["suites"]["tiling"]["vary"] = ["m"]
    cfg["suites"]["llm"]["phases"] = ["decode"]
    cfg["neuron"].update(target="auto", route="auto")
    run = snakemake(tmp_path, config=cfg, env=standin_env(tmp_path))
    assert "neuron.route auto -> xla" in run.output and "neuron.target auto -> inf2" in run.output
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert set(table["status"]) == {"ok"}, table[["scenario_id", "status", "reason"]]
    assert table["profile_total_time_s"].gt(0).all() and table["latency_median_s"].gt(0).all()
    m = table.set_index("scenario_id").loc["tiling-m128-fp32"]
    assert m["peak_flops_per_s"] == pytest.approx(TARGETS["inf2"].peak_flops("fp32"))
    builds = [
        json.loads(p.read_text()) for p in (tmp_path / "results" / "t").glob("neuron/workloads/*/build/build.json")
    ]
    assert {b["route"] for b in builds} == {"xla"} and {b["target"] for b in builds} == {"inf2"}


@pytest.mark.workflow
def test_nki_mlp_kernel_route_on_neuron_against_the_standin(tmp_path):
    """On a trn2 (LNC 2) the NKI kernel runs at LNC 1 end to end: compiled and launched at LNC 1 (the
    stand-in, as the runtime, refuses a launch whose LNC is not NEURON_LOGICAL_NC_CONFIG), captured at
    LNC 1 on the slot's physical cores, judged against one physical core's peaks."""
    cfg = neuron_config(
        tmp_path,
        suites={
            "mlp": {
                "configs": [{"b": 1, "s": 128, "h": 128, "i": 256}, {"b": 1, "s": 128, "h": 100, "i": 256}],
                "impl": ["nki"],
            }
        },
    )
    cfg["neuron"]["route"] = "auto"  # a sweep of NKI kernels needs no framework route
    snakemake(tmp_path, config=cfg, env=torchneuron_env(tmp_path))
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("scenario_id")
    assert table.loc["mlp-b1-s128-h128-i256-fp32-nki", "status"] == "ok"
    bad = table.loc["mlp-b1-s128-h100-i256-fp32-nki"]
    assert bad["status"] == "unsupported" and "h=100 is not a multiple of 128" in bad["reason"]
    case = tmp_path / "results" / "t" / "neuron" / "workloads" / "mlp-b1-s128-h128-i256-fp32-nki"
    build = json.loads((case / "build" / "build.json").read_text())
    assert [name for name, _ in build["capture_inputs"]] == ["xT", "w_gate", "w_up", "w_down"]
    assert build["target"] == "trn2" and build["lnc"] == 1 and build["slot_lnc"] == 2
    assert "--logical-nc-config 1" in build["cc_flags"] and build["env"]["NEURON_LOGICAL_NC_CONFIG"] == "1"
    assert build["visible_cores"] == cores_at_lnc(build["device_span"]["cores"], 2, 1)  # physical cores
    capture = json.loads((case / "capture" / "capture.json").read_text())
    assert capture["runtime_lnc"] == 1
    metrics = json.loads((case / "metrics.json").read_text())
    assert metrics["lnc"] == 1 and metrics["neuron_target"] == "trn2"
    # the kernel's output against the float64 NumPy gated MLP, on the inputs it ran on
    assert metrics["correct"] is True and metrics["max_rel_error"] < 1e-5 and metrics["tolerance_rel"] == 1e-4


@pytest.mark.torch  # the cpu plan probe or a torch child
def test_nki_mlp_reference_is_the_gated_mlp_the_compiler_route_runs():
    import numpy as np
    import torch

    from neuronsweep.kernels import nki_mlp
    from neuronsweep.workloads import mlp

    spec = mlp.spec(b=2, s=8, h=32, i=48, dtype="fp32")
    a = nki_mlp.inputs(mlp.GatedMlp.of(spec), np.random.default_rng(1))
    x = torch.from_numpy(a["xT"].T.copy())
    want = mlp.torch_module(mlp.GatedMlp.of(spec))(x, *(torch.from_numpy(a[k]) for k in ("w_gate", "w_up", "w_down")))
    np.testing.assert_allclose(nki_mlp.reference(a), want.numpy().T, rtol=1e-4, atol=1e-4)
