"""NKI kernels on the neuron backend against the stand-ins: inputs saved and fed by argument name, a
kernel recompiling on every call, the legacy neuronxcc route, and the kernels' numbers on the stand-in ISA."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import BIN, neuron_config, neuron_wdir, snakemake, standin_env


def nki_config(tmp: Path) -> dict:
    cfg = neuron_config(tmp)
    cfg["suites"] = {"matmul": {"shapes": [{"m": 128, "k": 256, "n": 512}], "impl": ["compiler", "nki"]}}
    return cfg


@pytest.mark.slow
@pytest.mark.workflow
def test_nki_kernel_build_saves_inputs_by_argument_name_and_capture_feeds_them(tmp_path):
    """Also: a kernel whose output is wrong (the stand-in's matmuls 10 % off, a miscompile) is measured,
    but its case is `wrong` with the numbers, ranked nowhere and shown apart in the report."""
    snakemake(tmp_path, config=nki_config(tmp_path), env=standin_env(tmp_path, STANDIN_NKI_WRONG="1"))
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv").set_index("scenario_id")
    assert list(table["status"]) == ["ok", "wrong"]
    wrong = table.iloc[1]
    assert wrong["correct"] == False and wrong["max_rel_error"] == pytest.approx(0.1, rel=1e-3)  # noqa: E712
    assert "max relative error 0.1 > tolerance 0.0001" in wrong["reason"]
    assert table.iloc[0]["correct"] == True and table.iloc[0]["max_rel_error"] < 1e-5  # noqa: E712 (torch-xla)
    report = (tmp_path / "results" / "t" / "report.html").read_text()
    assert "Wrong output (not ranked)" in report and f"{wrong.name} is wrong: output differs" in report
    d = neuron_wdir(tmp_path, "matmul-m128-k256-n512-fp32-nki")
    build = json.loads((d / "build" / "build.json").read_text())
    assert build["compiler"] == "NKI kernel (nki.jit)" and build["recompiled_on_second_call"] is False
    assert [name for name, _ in build["capture_inputs"]] == ["lhsT", "rhs"]
    assert all(Path(path).suffix == ".npy" and Path(path).is_file() for _, path in build["capture_inputs"])
    cap = json.loads((d / "capture" / "capture.json").read_text())
    assert cap["argv"][-4:] == [x for pair in build["capture_inputs"] for x in pair]
    assert "--ignore-exec-errors" not in cap["argv"]
    m = json.loads((d / "metrics.json").read_text())
    assert m["flops"] == m["profile_flops_tool"] == 2 * 128 * 256 * 512
    # no framework times an NKI kernel: every execution after the warm-up is profiled, and each one's device
    # time is a sample (capture.num_exec = warmup + iterations, --profile-nth-exec 1)
    assert m["latency_n"] == cap["settings"]["iterations"] and m["latency_median_s"] > 0
    assert "device time per execution" in m["notes"]["latency_median_s"] and m["framework_overhead_s"] is None
    assert cap["argv"][cap["argv"].index("--profile-nth-exec") + 1] == "1"
    assert build["nki_api"] == "nki" and build["correctness"]["max_rel_error"] == pytest.approx(0.1, rel=1e-3)


@pytest.mark.slow
@pytest.mark.workflow
def test_rounds_in_processes_on_neuron_make_its_timings_judgeable(tmp_path):
    """capture.rounds_in_processes on neuron: the TorchNeuron build's rounds each a run of the timing
    program of its own, the NKI kernel's each a profiler capture of its own (every execution viewed), so
    compare, history and a tune's stored timings test processes there as on cpu (one process a case is
    not judged)."""
    from helpers import torchneuron_env

    from neuronsweep.analysis import verdict
    from neuronsweep.analysis.stats import DEVICE_TIMES
    from neuronsweep.store.records import timing

    cfg = nki_config(tmp_path)
    cfg["capture"] |= {"rounds_in_processes": True, "repeats": 3, "iterations": 2}
    snakemake(tmp_path, config=cfg, env=torchneuron_env(tmp_path))
    for wid, per_round in (
        ("matmul-m128-k256-n512-fp32", "torchneuron_program"),
        ("matmul-m128-k256-n512-fp32-nki", ""),
    ):
        d = neuron_wdir(tmp_path, wid)
        cap = json.loads((d / "capture" / "capture.json").read_text())
        latency = cap["latency"]
        assert latency["rounds_in_processes"] and len(latency["round_medians_s"]) == 3 and latency["n"] == 6, wid
        [v] = verdict.judge([(timing(d), timing(d))])
        assert v.judged and v.unit == "processes" and v.n_a == 3, (wid, v)
        if per_round:  # three runs of the program, three processes
            assert len(set(cap["round_pids"])) == 3 and all(
                (d / "capture" / "framework" / f"round_{r}").is_dir() for r in (1, 2, 3)
            )
        else:  # the case's capture, then two of their own
            assert "in one capture process, each of 3 such processes a round" in latency["basis"]
            assert [p.name for p in sorted((d / "capture" / "rounds").iterdir())] == ["round_2", "round_3"]
    # TorchNeuron's wall clock against the kernel's device times: not judged, the bases differ
    compiler, kernel = (neuron_wdir(tmp_path, f"matmul-m128-k256-n512-fp32{nki}") for nki in ("", "-nki"))
    [v] = verdict.judge([(timing(compiler), timing(kernel))])
    assert not v.judged and "different bases" in v.said, v
    # neuron.latency_samples device: the compiler's build timed by device time too (its captures rerun, not its
    # build), every execution profiled in each of its 3 processes, and the kernel against it is judged
    cfg["neuron"]["latency_samples"] = "device"
    run = snakemake(tmp_path, "--quiet", "rules", config=cfg, env=torchneuron_env(tmp_path))
    jobs = dict(re.findall(r"^(\w+) +(\d+)$", run.output, re.M))  # Snakemake's job stats: rule count
    assert jobs["capture"] == "2" and "build" not in jobs, run.output
    latency = json.loads((compiler / "capture" / "capture.json").read_text())["latency"]
    assert latency["samples_are"] == DEVICE_TIMES and len(latency["round_medians_s"]) == 3, latency
    assert [p.name for p in sorted((compiler / "capture" / "rounds").iterdir())] == ["round_2", "round_3"]
    [v] = verdict.judge([(timing(compiler), timing(kernel))])
    assert v.judged and v.unit == "processes", v
    # one process a case is not judged, and says how it could be
    one = json.loads((d / "capture" / "capture.json").read_text())
    one["latency"]["rounds_in_processes"] = False
    (d / "capture" / "capture.json").write_text(json.dumps(one))
    [v] = verdict.judge([(timing(d), timing(d))])
    assert v.said == verdict.ONE_PROCESS


@pytest.mark.workflow
def test_nki_recompiling_on_every_call_is_flagged(tmp_path):
    cfg = nki_config(tmp_path)
    cfg["suites"]["matmul"]["impl"] = ["nki"]
    snakemake(tmp_path, config=cfg, env=standin_env(tmp_path, STANDIN_NKI_RECOMPILE="1"))
    d = neuron_wdir(tmp_path, "matmul-m128-k256-n512-fp32-nki")
    build = json.loads((d / "build" / "build.json").read_text())
    assert build["recompiled_on_second_call"] is True and "@nki.jit trap" in build["recompilation_flag"]
    assert build["compile_s"] is None  # compile and run cannot be separated: not guessed
    assert json.loads((d / "metrics.json").read_text())["recompilation_detected"] is True
    table = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert table["recompilation_detected"].tolist() == [True]


@pytest.mark.workflow
def test_nki_on_cpu_is_unsupported_with_a_reason(tmp_path):
    """Planned, not run: no NKI job reaches the DAG, and the plan keeps the row with its reason (aggregate
    writes such rows into summary.csv: test_bad_configs' all-unsupported sweep runs that end to end)."""
    from helpers import tiny_config

    cfg = tiny_config(tmp_path)
    cfg["suites"]["matmul"]["impl"] = ["compiler", "nki"]
    run = snakemake(tmp_path, "-n", config=cfg)
    assert {w for _, w in run.jobs if w} == {"matmul-m16-k16-n16-fp32", "matmul-m32-k16-n16-fp32"}
    proc = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    plan = json.loads(proc.stdout)
    assert plan["counts"] == {"scenarios": 4, "workloads": 2, "unsupported": 2}
    assert "NKI kernels need a Neuron device" in plan["unsupported"]["matmul-m16-k16-n16-fp32-nki"]


@pytest.mark.workflow
def test_legacy_neuronxcc_nki_benchmark_route(tmp_path):
    from helpers import STANDIN

    cfg = nki_config(tmp_path)
    cfg["suites"]["matmul"]["impl"] = ["nki"]
    env = {**standin_env(tmp_path), "PYTHONPATH": str(STANDIN / "python-legacy")}  # no standalone `nki`
    snakemake(tmp_path, config=cfg, env=env)
    build = json.loads((neuron_wdir(tmp_path, "matmul-m128-k256-n512-fp32-nki") / "build" / "build.json").read_text())
    assert build["nki_api"] == "neuronxcc.nki"
    assert build["neff_source"].endswith("/nki/artifacts/kernel.neff")
    assert build["benchmark_us"]["p50"] > 0 and build["compile_s"] is None
    # nki.benchmark runs the kernel on inputs of its own: no error against numpy is claimed
    assert build["correctness"]["correct"] is None and "undefined" in build["correctness"]["correct_why"]


KERNEL_CHECK = """
import json, os, sys
import numpy as np
from neuronsweep.kernels import nki_matmul, nki_mlp
from neuronsweep.workloads import matmul, mlp, record
out = {}
import nki.isa as nisa, nki.language as nl
loops, peaks = [], []
for module, spec in [(nki_matmul, matmul.spec(m=384, k=384, n=1024, dtype="fp32")),
                     (nki_matmul, matmul.spec(m=64, k=96, n=200, dtype="fp32")),
                     (nki_mlp, mlp.spec(b=2, s=512, h=256, i=384, dtype="fp32"))]:
    arrays = module.inputs(record(spec), np.random.default_rng(0))
    for f in os.listdir(os.environ["NKI_ARTIFACTS_DIR"]):  # each compile wants an empty folder
        os.remove(os.path.join(os.environ["NKI_ARTIFACTS_DIR"], f))
    got = module.make_kernel()(*(arrays[n] for n in module.ARG_NAMES))
    out[json.dumps(spec, sort_keys=True)] = float(np.max(np.abs(got - module.reference(arrays))))
    loops.append(list(nl.DEVICE_LOOPS))
    peaks.append([list(nl.DEVICE_LOOP_BYTES), module.body_bytes(record(spec))])
def memset_then_accumulate(a, b):  # the pattern the nc_matmul reference calls undefined on v2/v3
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=acc, value=0.0)
    sa, sb = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf), nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sa, src=a)
    nisa.dma_copy(dst=sb, src=b)
    nisa.nc_matmul(dst=acc, stationary=sa, moving=sb)
try:
    memset_then_accumulate(np.ones((4, 4), np.float32), np.ones((4, 8), np.float32))
    out["memset"] = "accepted"
except ValueError as e:
    out["memset"] = str(e)
out["loops"] = loops
out["peaks"] = peaks
print(json.dumps(out))
"""


@pytest.mark.workflow  # four child interpreters, one per nki version and target (13 s): the README's tier
def test_the_nki_kernels_compute_the_right_numbers_on_the_standin_isa(tmp_path):
    """The stand-in's nki.isa / nki.language execute kernel bodies on numpy with the real signatures
    and memory rules (PSUM destinations, SBUF operands, tile limits), so this checks the kernels."""
    import sys

    from helpers import STANDIN

    env = {**os.environ, "PYTHONPATH": str(STANDIN / "python")}
    nki_0_7 = os.pathsep.join([str(STANDIN / "python-torchneuron"), str(STANDIN / "python")])  # SDK 2.33's nki
    nki_0_6 = os.pathsep.join([str(STANDIN / "python-nki-0.6"), str(STANDIN / "python")])  # SDK 2.32's nki
    for target, memset, path in (
        ("inf2", "undefined behaviour on NeuronCore-v2/v3 (inf2)", env["PYTHONPATH"]),
        ("trn3", "accepted", env["PYTHONPATH"]),
        ("trn2", "undefined behaviour on NeuronCore-v2/v3 (trn2)", nki_0_7),
        ("trn2", "undefined behaviour on NeuronCore-v2/v3 (trn2)", nki_0_6),
    ):
        (tmp_path / target).mkdir(exist_ok=True)
        env.update(NEURON_PLATFORM_TARGET_OVERRIDE=target, NKI_ARTIFACTS_DIR=str(tmp_path / target), PYTHONPATH=path)
        proc = subprocess.run([sys.executable, "-c", KERNEL_CHECK], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        errors = json.loads(proc.stdout)
        # the kernels obey the PSUM rule: their first matmul into a tile overwrites, no memset before
        assert memset in errors.pop("memset")
        # NKI 0.6+ (SDK 2.32's release notes: fori_loop "now available"): the outer tile loop is nl.fori_loop (3 M
        # tiles; 2 token tiles), the tiles it moves addressed through scalar_offset, which the stand-in resolves as
        # AWS's kernels state it: the numbers prove it
        loops = errors.pop("loops")
        on_device = path in (nki_0_7, nki_0_6)
        assert loops == ([[[0, 3, 1]], [[0, 1, 1]], [[0, 2, 1]]] if on_device else [[], [], []]), loops
        # what one body keeps live per partition, as the stand-in counts it, within what our kernels bound
        # it by (kernels/__init__.py refuses a body past the target's partition on that figure)
        peaks = errors.pop("peaks")
        for measured, bound in peaks if on_device else []:
            assert len(measured) == 1 and all(0 < measured[0][b] <= bound[b] for b in ("sbuf", "psum")), (
                measured,
                bound,
            )
        assert len(errors) == 3 and max(errors.values()) < 1e-3, errors
    env["PYTHONPATH"] = nki_0_7  # a kernel that slices with the loop's value would not trace on the device
    sliced = "import nki.language as nl; t = nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)\n"
    sliced += "nl.fori_loop(0, 2, lambda i: t[i : i + 1])"
    bad = subprocess.run([sys.executable, "-c", sliced], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "it has no Python value while the kernel is traced" in bad.stderr
    # a body keeps its live tiles on chip for the whole loop (NKI Dynamic Loops): 230 tiles of 1 KiB a
    # partition kept at once pass trn3's 256 KiB and not trn2's 224 KiB; the same tiles one at a time pass
    tiles = "import nki.language as nl\ndef body(i):\n    {}\nnl.fori_loop(0, 2, body)"
    kept = "kept = [nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf) for _ in range(230)]"
    one_at_a_time = "for _ in range(230):\n        t = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)"
    for body, target, refused in ((kept, "trn2", True), (kept, "trn3", False), (one_at_a_time, "trn2", False)):
        env["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
        got = subprocess.run([sys.executable, "-c", tiles.format(body)], capture_output=True, text=True, env=env)
        assert (got.returncode != 0) == refused, got.stderr
    assert "keeps 235520 bytes of SBUF live per partition at once, over the 229376 a partition holds on trn2" in (
        subprocess.run(
            [sys.executable, "-c", tiles.format(kept)],
            capture_output=True,
            text=True,
            env={**env, "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"},
        ).stderr
    )
    # today's language has no return-style load/store: the legacy kernel spelling would not trace there
    bad = subprocess.run(
        [sys.executable, "-c", "import nki.language as nl; nl.load"], capture_output=True, text=True, env=env
    )
    assert bad.returncode != 0 and "has no attribute 'load'" in bad.stderr


LNC_PROBE = """
import json, os, warnings
import numpy as np
import nki

@nki.jit
def k(a):
    return a

warnings.simplefilter("error")
out = {}
try:
    k(np.ones((2, 2), np.float32))
    with open(os.path.join(os.environ["NKI_ARTIFACTS_DIR"], "kernel.neff"), "rb") as f:
        out["plain"] = json.loads(f.read()[5:])["lnc"]
except Exception as e:
    out["plain"] = type(e).__name__
try:
    k[2](np.ones((2, 3), np.float32))
    out["grid"] = "launched"
except Exception as e:
    out["grid"] = type(e).__name__
print(json.dumps(out))
"""


def test_from_nki_0_7_a_plain_call_launches_at_the_lnc_variable_and_the_grid_form_is_deprecated(tmp_path):
    """The 2.33.1 nki.jit page: the LNC is NEURON_LOGICAL_NC_CONFIG's (default 1); error page NCC_EVRF066: the
    kernel[lnc](...) form "is being deprecated". Before 0.7 a plain call is LNC 1, which an LNC 2 runtime
    refuses. Our kernels are called plainly, with the variable set for the build (neuron.NKI_LNC)."""
    import sys

    from helpers import STANDIN

    launched = {}
    for name, path in (("0.5", [STANDIN / "python"]), ("0.7", [STANDIN / "python-torchneuron", STANDIN / "python"])):
        (tmp_path / name).mkdir()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(map(str, path)),
            "STANDIN_MACHINE": "trn2",
            "NEURON_LOGICAL_NC_CONFIG": "2",
            "NKI_ARTIFACTS_DIR": str(tmp_path / name),
        }
        proc = subprocess.run([sys.executable, "-c", LNC_PROBE], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        launched[name] = json.loads(proc.stdout)
    assert launched == {
        "0.5": {"plain": "RuntimeError", "grid": "launched"},  # LNC 1 against the runtime's 2: refused
        "0.7": {"plain": 2, "grid": "DeprecationWarning"},
    }


def test_an_nki_scalar_wraps_at_32_bits_and_its_comparison_cannot_steer_python(tmp_path):
    """nki.isa.NkiScalar's page: a 32-bit value computed on the device; "NKI Loops": a comparison of it is
    traced, and its result cannot be used in Python control flow. A kernel that branches on one is refused
    by the stand-in, as it would not trace on a device."""
    import sys

    from helpers import STANDIN

    probe = (
        "import nki.language as nl\nout = []\n"
        "def body(i):\n"
        "    out.append(nl.offset_value(i + 2**31 - 1))\n"
        "    try:\n        bool(i < 1)\n        out.append('branched')\n"
        "    except TypeError as e:\n        out.append('cannot be used in Python control flow' in str(e))\n"
        "nl.fori_loop(0, 2, body)\nprint(out)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [STANDIN / "python-torchneuron", STANDIN / "python"]))}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([2**31 - 1, True, -(2**31), True])  # 2^31 - 1 + 1 wraps to -2^31


def test_nki_jit_takes_the_keyword_kinds_the_language_guide_shows(tmp_path):
    """Scalars, enums and instances of the author's classes as keywords (the NKI language guide); a tensor or
    a container by keyword is refused, since no page shows one."""
    import sys

    from helpers import STANDIN

    probe = """
import enum, json, os
import numpy as np
import nki

class Mode(enum.Enum):
    FAST = 1

class Tiles:
    m = 128

@nki.jit
def k(a, mode=None, tiles=None, scale=1.0):
    return a

said = {}
for name, kw in (("enum", {"mode": Mode.FAST}), ("instance", {"tiles": Tiles()}), ("scalar", {"scale": 2.0}),
                 ("list", {"tiles": [128]}), ("tensor", {"mode": np.ones(2)})):
    try:
        k(np.ones((2, 2), np.float32), **kw)
        said[name] = "taken"
    except TypeError:
        said[name] = "refused"
    for f in os.listdir(os.environ["NKI_ARTIFACTS_DIR"]):
        os.remove(os.path.join(os.environ["NKI_ARTIFACTS_DIR"], f))
print(json.dumps(said))
"""
    env = {**os.environ, "PYTHONPATH": str(STANDIN / "python"), "NKI_ARTIFACTS_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "enum": "taken",
        "instance": "taken",
        "scalar": "taken",
        "list": "refused",
        "tensor": "refused",
    }
