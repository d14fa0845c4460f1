"""A user's own PyTorch function as a suite (suites.custom): a kernel file kept outside the repository,
swept on cpu end to end; an edit of it rebuilds that suite's cases only; a function that raises fails its
own cases only; every kind of bad input is one sentence before any job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import snakemake, tiny_config

from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.stages.plan import make_plan
from neuronsweep.workloads import expressions

GELU_MM = """import torch


def gelu_mm(x, w, alpha=1.0):
    return torch.nn.functional.gelu(x @ w) * alpha


def not_a_function():
    pass


NOT_CALLABLE = 3
"""
OTHERS = """import torch


def boom(x):
    raise ValueError("boom: the user's own bug")


def as_dict(x):
    return {"total": x.sum()}


def own_zeros(x):  # a tensor of its own on the default device, as blocked_mm in the examples makes
    return torch.zeros(x.shape) + x
"""


def kernels(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gelu_mm.py").write_text(GELU_MM)
    (folder / "others.py").write_text(OTHERS)
    return folder


def entry(**over) -> dict:
    return {
        "name": "gelu_mm",
        "function": "kernels/gelu_mm.py:gelu_mm",
        "inputs": {"x": ["m", "k"], "w": ["k", "n"]},
        "grid": {"m": [16, 32], "k": [16], "n": [8]},
        "params": {"alpha": [1.0, 2.0]},
        **over,
    }


def config(tmp: Path, entries: list[dict], calibrated: bool = True) -> dict:
    """A tiny cpu sweep of these custom entries (calibrated=False: for a test that only plans)."""
    cfg = tiny_config(tmp, calibrated=calibrated, suites={"custom": entries})
    return schema.validate(cfg, base=tmp)


@pytest.mark.slow
@pytest.mark.workflow
def test_a_users_function_is_swept_end_to_end_and_an_edit_reruns_only_its_builds(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    folder = kernels(tmp_path / "elsewhere")  # outside the run's folder and the repository, as a user keeps it
    entries = [
        entry(function=f"{folder}/gelu_mm.py:gelu_mm", grid={"m": [16], "k": [16], "n": [8]}),
        {"name": "boom", "function": f"{folder}/others.py:boom", "inputs": {"x": [4, 4]}},
        {"name": "as_dict", "function": f"{folder}/others.py:as_dict", "inputs": {"x": [4, 4]}, "flops": 16},
        {"name": "own_zeros", "function": f"{folder}/others.py:own_zeros", "inputs": {"x": [4, 4]}},
    ]
    cfg = tiny_config(work, suites={"custom": entries})
    (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))  # the grid's order, as a user writes it
    snakemake(work, "--keep-going", check=False)
    summary = pd.read_csv(work / "results" / "t" / "summary.csv").set_index("workload_id")
    ok = summary[summary["suite"] == "custom-gelu_mm"]
    assert list(ok.index) == ["custom-gelu_mm-m16-k16-n8-alpha1.0-fp32", "custom-gelu_mm-m16-k16-n8-alpha2.0-fp32"]
    assert set(ok["status"]) == {"ok"} and ok["correct"].all()
    # FLOPs from PyTorch's counter on fake tensors: the matmul's 2*m*k*n (gelu and the scale count none)
    assert list(ok["flops"]) == [2 * 16 * 16 * 8] * 2
    m = json.loads((work / "results/t/cpu/workloads/custom-gelu_mm-m16-k16-n8-alpha2.0-fp32/metrics.json").read_text())
    assert m["notes"]["flops"].startswith("torch.utils.flop_counter on fake tensors")
    assert m["min_bytes"] == (16 * 16 + 16 * 8 + 16 * 8) * 4 and m["latency_median_s"] > 0
    # the user's exception fails that case only, its last line the reason, its traceback in the log
    boom = summary.loc["custom-boom-fp32"]
    assert boom["status"] == "failed" and "ValueError: boom: the user's own bug" in boom["reason"]
    log = (work / "results/t/cpu/workloads/custom-boom-fp32/logs/build.log").read_text()
    assert "Traceback" in log and "others.py" in log
    # a function whose output is no tensor runs, is measured, and is not judged
    as_dict = json.loads((work / "results/t/cpu/workloads/custom-as_dict-fp32/metrics.json").read_text())
    assert as_dict["correct"] is None and "returned dict, not a tensor" in as_dict["notes"]["correct"]
    assert as_dict["flops"] == 16 and as_dict["notes"]["flops"] == "the config: 16"
    assert summary.loc["custom-own_zeros-fp32", "status"] == "ok"  # exported on cpu tensors, not meta ones
    # an edit of the user's file: only that suite's builds (and what follows) are stale, and -n says why
    before = (folder / "gelu_mm.py").stat()
    (folder / "gelu_mm.py").write_text(GELU_MM + "\n# tuned\n")
    dry = snakemake(work, "-n", "--keep-going", check=False)
    builds = sorted(w for rule, w in dry.jobs if rule == "build" and w != "custom-boom-fp32")  # failed: to do
    assert builds == list(ok.index), dry.output[-3000:]  # not as_dict's, in the same folder but another file
    assert f"Updated input files: {folder}/gelu_mm.py" in dry.output
    (folder / "gelu_mm.py").write_text(GELU_MM)
    os.utime(folder / "gelu_mm.py", ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.torch  # the plan looks at the function in a child that imports torch
@pytest.mark.parametrize(
    "change, said",
    [
        ({"function": "kernels/missing.py:gelu_mm"}, r"suites.custom\[0\] \(gelu_mm\): no such file .*missing.py"),
        ({"function": "kernels/gelu_mm.py:nope"}, r"has no nope; check the name after the colon"),
        ({"function": "kernels/gelu_mm.py:NOT_CALLABLE"}, r"NOT_CALLABLE is a int, not a function"),
        ({"function": "kernels/gelu_mm.py"}, r"is not FILE.py:NAME or package.module:NAME"),
        ({"inputs": {"x": ["m", "k"], "y": ["k", "n"]}}, r"input 'y' is not a parameter of gelu_mm\(x, w, alpha=1.0\)"),
        ({"inputs": {"x": ["m", "q"], "w": ["k", "n"]}}, r"inputs.x uses q, which grid does not define"),
        ({"params": {"beta": [1]}}, r"param 'beta' is not a keyword of gelu_mm"),
        ({"flops": "2*m*k*z"}, r"flops uses z, which grid does not define"),
        ({"flops": "__import__('os')"}, r"flops .* uses Call; only grid names, integers"),
        ({"impl": ["compiler", "nki"]}, r"impl nki needs nki_kernel"),
    ],
)
def test_each_bad_input_is_one_sentence_before_any_job(tmp_path, change, said):
    kernels(tmp_path / "kernels")
    with pytest.raises(UserError, match=said) as refused:
        make_plan(RunConfig.of(config(tmp_path, [entry(**change)], calibrated=False)), "cpu")
    assert "\n" not in str(refused.value)


def test_expressions_are_parsed_never_evaluated_as_python():
    assert expressions.evaluate("2*m*k*n + k//2 - 1", {"m": 2, "k": 4, "n": 3}) == 49
    assert expressions.names("(m + 1) ** 2") == {"m"}
    for bad in ("m.__class__", "[m]", "m if m else 1", "1e3", "'a'"):
        with pytest.raises(expressions.ExpressionError):
            expressions.names(bad)
    with pytest.raises(expressions.ExpressionError, match="divides by zero"):
        expressions.evaluate("m // (k - k)", {"m": 1, "k": 2})


@pytest.mark.slow
@pytest.mark.workflow  # runs a stage's real command (a neuron build on the TorchNeuron stand-in)
@pytest.mark.torch
def test_a_users_function_builds_on_the_torchneuron_route_checked_against_itself(tmp_path):
    """The same function through TorchNeuron (the trn2 stand-in of SDK 2.33), its output against the
    function in float64."""
    import subprocess

    from helpers import BIN, torchneuron_env

    from neuronsweep.config.settings import HOST_ENV

    kernels(tmp_path / "kernels")
    [(_, spec)] = [
        (w, s)
        for w, s in make_plan(
            RunConfig.of(config(tmp_path, [entry(grid={"m": [16], "k": [16], "n": [8]}, params={})], calibrated=False)),
            "cpu",
        ).workloads.items()
    ]
    env = {
        **os.environ,
        **torchneuron_env(tmp_path),
        HOST_ENV: json.dumps({"cache_dir": str(tmp_path / "cache"), "device_lock": str(tmp_path / "lock")}),
    }
    argv = [str(BIN / "neuronsweep"), "build", "--backend", "neuron", "--spec", json.dumps(spec)]
    proc = subprocess.run(
        [*argv, "--options", "{}", "--out", str(tmp_path / "b")], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    build = json.loads((tmp_path / "b" / "build.json").read_text())
    assert build["route"] == "torchneuron" and build["correctness"]["correct"]
    assert build["correctness"]["reference"] == "the function itself in float64 on the CPU, same inputs"


def test_a_users_function_has_no_tile_count_rather_than_zero():
    from neuronsweep import workloads
    from neuronsweep.analysis import roofline
    from neuronsweep.workloads import custom

    spec = custom.spec("f", "x.py:f", "0", {"m": 4}, {"x": [4, 4]}, {}, "fp32", [[4, 4]], 128, "the config: 128")
    assert workloads.gemms(spec) == [] and roofline.tiles(workloads.gemms(spec))["tiles_total"] is None
    assert workloads.workload_id(spec) == "custom-f-m4-fp32" and workloads.min_bytes(spec) == 2 * 16 * 4


NKI_WRONG_SCALE = """import nki.isa as nisa
import nki.language as nl


def scaled_kernel(lhsT, rhs, tile_n=512):  # a plain function: neuron-sweep puts it under nki.jit
    K, M = lhsT.shape
    result = nl.ndarray((M, rhs.shape[1]), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, rhs.shape[1]), dtype=nl.float32, buffer=nl.psum)
    a = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray(rhs.shape, dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    out = nl.ndarray((M, rhs.shape[1]), dtype=lhsT.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=out, data1=acc, data2=acc, op=nl.add)  # the user's bug: twice the product
    nisa.dma_copy(dst=result, src=out)
    return result
"""


@pytest.mark.slow
@pytest.mark.workflow
def test_a_users_nki_kernel_is_built_captured_and_checked_against_their_function(tmp_path):
    """The shipped example pair (config/examples/kernels/matmul_t*.py), copied outside the repository, on the
    trn2 stand-in of SDK 2.33 (NKI 0.7): the NKI cases build with the tile size as a keyword, are captured
    with the NEFF's own input names, and are checked against the PyTorch function; a kernel computing
    something else is `wrong`, not ok."""
    from helpers import REPO, neuron_config, torchneuron_env

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for name in ("matmul_t.py", "matmul_t_nki.py"):
        (folder / name).write_text((REPO / "config/examples/kernels" / name).read_text())
    (folder / "scaled.py").write_text(NKI_WRONG_SCALE)
    pair = {
        "function": f"{folder}/matmul_t.py:matmul_t",
        "inputs": {"lhsT": ["k", "m"], "rhs": ["k", "n"]},
        "grid": {"m": [128], "k": [128], "n": [512]},
        "impl": ["nki"],
    }
    entries = [
        {"name": "mt", "nki_kernel": f"{folder}/matmul_t_nki.py:matmul_t_kernel", "params": {"tile_n": [256, 512]}},
        {"name": "scaled", "nki_kernel": f"{folder}/scaled.py:scaled_kernel"},
    ]
    cfg = neuron_config(tmp_path, suites={"custom": [{**pair, **e} for e in entries]})
    cfg["neuron"]["route"] = "auto"
    snakemake(tmp_path, "--keep-going", config=cfg, env=torchneuron_env(tmp_path), check=False)
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("workload_id")
    ok = [f"custom-mt-k128-m128-n512-tile_n{t}-fp32-nki" for t in (256, 512)]
    assert list(table.loc[ok, "status"]) == ["ok", "ok"], table[["status", "reason"]].to_string()
    root = tmp_path / "results" / "t" / "neuron" / "workloads"
    for wid in ok:
        build = json.loads((root / wid / "build" / "build.json").read_text())
        assert build["compiler"] == "NKI kernel (nki.jit)" and build["correctness"]["correct"] is True
        assert build["correctness"]["reference"] == "the function itself in float64 on the CPU, same inputs"
        assert [name for name, _ in build["capture_inputs"]] == ["lhsT", "rhs"]
        metrics = json.loads((root / wid / "metrics.json").read_text())
        assert metrics["flops"] == 2 * 128 * 128 * 512 and metrics["latency_median_s"] > 0
    wrong = table.loc["custom-scaled-k128-m128-n512-fp32-nki"]
    assert wrong["status"] == "wrong" and "max relative error 1 > tolerance" in wrong["reason"]


@pytest.mark.torch  # the real child imports torch
@pytest.mark.workflow  # the production probe, a fresh interpreter (6 s): the README's tier
def test_the_plans_probe_in_a_fresh_interpreter_finds_what_the_forked_one_finds(tmp_path, real_probe):
    """The suite forks the plan's probes (tests/probe_fork.py); production starts `python -m` for each:
    the same entry planned through both gives the same workloads, FLOPs and output shapes."""
    kernels(tmp_path / "kernels")
    cfg = config(tmp_path, [entry()], calibrated=False)
    real = make_plan(RunConfig.of(cfg), "cpu").workloads
    real_probe.undo()  # the suite's forked probe again, its answer not the one cached beside the first
    forked = make_plan(RunConfig.of({**cfg, "cache_dir": str(tmp_path / "another-cache")}), "cpu").workloads
    assert real == forked and real and all(spec["flops"] > 0 for spec in real.values())
