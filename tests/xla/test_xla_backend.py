"""The xla backend for real: torch-xla 2.9 on PJRT_DEVICE=CPU, the neuron build's framework code path.

Needs torch-xla, so it runs in its own venv (`pip install -e ".[xla,test]"`; .ci/run does it);
the main test run skips this module.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip(
    "torch_xla",
    reason='the xla backend\'s tests need torch-xla: pip install -e ".[xla,test]" '
    "in a venv of their own (.ci/run does it)",
)

from helpers import BIN, REPO, shared_sweep, snakemake, tiny_config  # noqa: E402

from neuronsweep.backends.xla import ARTIFACT
from neuronsweep.formats import hlo
from neuronsweep.formats.pftrace_reader import read as read_pftrace
from neuronsweep.stages import extract
from neuronsweep.store.records import BuildRecord

pytestmark = pytest.mark.workflow  # every test here reads the module's one xla sweep

STATIC, INT, FLOAT = (f"matmul-m128-k128-n128-fp32{s}" for s in ("", "-varies-pythonint", "-varies-pythonfloat"))
MLP = "mlp-b1-s32-h64-i128-fp32"
CUSTOM = "custom-gelu_mm-k16-m16-n8-alpha2.0-fp32"  # the grid in the order the written config has it
TIMED = 2 * 3  # repeats x iterations


def xla_config(tmp: Path) -> dict:
    return tiny_config(
        tmp,
        backend="xla",
        capture={
            "warmup": 1,
            "iterations": 3,
            "repeats": 2,
            "num_exec": 2,
            "nth_exec": 2,
            "device_lock": str(tmp / "device.lock"),
        },
        suites={
            "recompile": {"shapes": [{"m": 128, "k": 128, "n": 128}]},
            "mlp": {"configs": [{"b": 1, "s": 32, "h": 64, "i": 128}]},
            "custom": [  # a user's function (docs/your-code.md), the example's file
                {
                    "name": "gelu_mm",
                    "function": f"{REPO}/config/examples/kernels/gelu_mm.py:gelu_mm",
                    "inputs": {"x": ["m", "k"], "w": ["k", "n"]},
                    "grid": {"m": [16], "k": [16], "n": [8]},
                    "params": {"alpha": [2.0]},
                }
            ],
        },
    )


@pytest.fixture(scope="session")
def xla_run(tmp_path_factory) -> Path:
    """The module's one xla sweep, made once per test run: a module-scoped fixture is made again by each
    xdist worker that runs one of its tests (three times on CI's three workers)."""
    return shared_sweep(tmp_path_factory, "xla-run", xla_config)


def wdir(work: Path, wid: str) -> Path:
    return work / "results" / "t" / "xla" / "workloads" / wid


def rows(work: Path) -> dict[str, dict]:
    with open(work / "results" / "t" / "summary.csv") as f:
        return {r["workload_id"]: r for r in csv.DictReader(f)}


def test_every_case_finishes_and_a_rerun_has_nothing_to_do(xla_run, tmp_path):
    assert {wid: r["status"] for wid, r in rows(xla_run).items()} == dict.fromkeys(
        [MLP, STATIC, INT, FLOAT, CUSTOM], "ok"
    )
    run = tmp_path / "run"  # a copy (mtimes and .snakemake included): the other workers read the shared run
    shutil.copytree(xla_run, run, symlinks=True)
    assert snakemake(run, "-n").rules == []


def test_a_users_function_runs_on_xla_checked_against_itself_in_float64(xla_run):
    """suites.custom on the xla backend: the user's function through torch-xla, its output checked
    against the same function run in float64 on the CPU, timed and profiled like the built-in kinds."""
    row = rows(xla_run)[CUSTOM]
    assert row["status"] == "ok" and row["correct"] in ("True", "true"), row
    assert float(row["latency_median_s"]) > 0 and int(float(row["flops"])) == 2 * 16 * 16 * 8
    metrics = json.loads((wdir(xla_run, CUSTOM) / "metrics.json").read_text())
    assert metrics["backend"] == "xla" and metrics["latency_n"] == TIMED


def test_build_attributes_the_dumped_module_of_the_workload_graph(xla_run):
    for wid in (STATIC, MLP):
        build = json.loads((wdir(xla_run, wid) / "build" / "build.json").read_text())
        workload = [c for c in build["candidates"] if c["phase"] == "workload"]
        assert len(workload) == 1 and build["module_source"] == workload[0]["path"]
        assert re.fullmatch(
            r"module_\d{4}\.SyncTensorsGraph\.\d+\.cpu_after_optimizations\.txt", Path(build["module_source"]).name
        )
        assert all(c["phase"] != "second" for c in build["candidates"])  # same graph: no recompile
        module = (wdir(xla_run, wid) / "build" / "module.hlo.txt").read_text()
        assert module.startswith("HloModule SyncTensorsGraph") and " dot(" in module
        assert build["compile_count"] == 1 and build["compile_s"] > 0
        assert build["compile_s_source"] == "torch_xla.debug.metrics CompileTime"
        assert build["env"]["PJRT_DEVICE"] == "CPU" and "--xla_dump_to=" in build["env"]["XLA_FLAGS"]
        assert build["recompiled_on_second_call"] is False and build["recompilation_flag"] is None


def test_capture_view_extract_measure_the_run(xla_run):
    d = wdir(xla_run, STATIC)
    cap = json.loads((d / "capture" / "capture.json").read_text())
    assert cap["module_matches_build"] is True  # the capture process compiled the build's graph
    lat = cap["latency"]
    assert lat["n"] == TIMED and lat["recompiles_during_timing"] == 0
    assert lat["execute"]["n"] == TIMED and 0 < lat["execute"]["median_s"] < lat["median_s"]

    trace = read_pftrace(d / "view" / "trace.pftrace")
    tracks = {t.uuid: t.name for t in trace.tracks.values()}
    names = {(tracks[s.track_uuid], s.name) for s in trace.slices}
    assert ("python: torch-xla tracing and sync", "neuronsweep.exec_2") in names
    assert ("XLA execute (xla:0)", "ExecuteTime") in names

    summary = json.loads((d / "view" / "summary.json").read_text())
    assert 0 < summary["total_active_time"] <= summary["total_time"]

    import pyarrow.parquet as pq

    ops = pq.read_table(d / "view" / "parquet" / "Instruction.parquet").to_pylist()
    assert [o["opcode"] for o in ops if o["computation_kind"] == "entry"].count("dot") == 1
    with open(d / "tables" / "op_mix.csv") as f:
        assert any(r["opcode"] == "dot" and r["instructions"] == "1" for r in csv.DictReader(f))

    m = json.loads((d / "metrics.json").read_text())
    cpu_keys = extract.compute(
        {}, None, BuildRecord.from_json({"workload_id": "w", "backend": "cpu", "spec": m["spec"]})
    ).keys()
    assert set(m) - {"provenance"} == set(cpu_keys)  # the same keys as every backend
    assert m["backend"] == "xla" and m["latency_n"] == TIMED
    assert m["correct"] is True and m["max_rel_error"] < 1e-5  # the build checked the XLA result against NumPy
    assert m["profile_active_time_s"] == pytest.approx(summary["total_active_time"])
    assert m["framework_overhead_s"] == pytest.approx(m["latency_median_s"] - m["execute_median_s"])
    assert m["peak_source"].startswith("measured on this host") and m["roofline_efficiency_pct"] > 0
    assert m["recompilation_detected"] is False and m["compile_count"] == 1


def test_a_python_int_baked_into_the_graph_is_flagged_and_a_python_float_is_not(xla_run):
    build = json.loads((wdir(xla_run, INT) / "build" / "build.json").read_text())
    assert build["recompiled_on_second_call"] is True and build["second_call_compile_count"] == 1
    assert "recompiled on a repeated call" in build["recompilation_flag"]
    assert [c["phase"] for c in build["candidates"]] == ["workload", "second"]  # a new module per call

    table = rows(xla_run)
    assert table[INT]["recompilation_detected"] == "True"
    assert int(table[INT]["recompiles_during_timing"]) == TIMED  # every timed call compiled
    assert int(table[INT]["compile_count"]) == 1
    assert table[INT]["bound_class"] == "overhead"  # compiling dwarfs the 128^3 GEMM
    for wid in (STATIC, FLOAT):  # torch-xla uploads a Python float as data: no recompile
        assert table[wid]["recompilation_detected"] == "False" and table[wid]["recompiles_during_timing"] == "0"

    summary = json.loads((wdir(xla_run, INT) / "view" / "summary.json").read_text())
    assert summary["compile_in_profiled_exec"] == 1  # the trace shows the compile inside the call
    report = (xla_run / "results" / "t" / "report.html").read_text()
    assert (
        f"recompile-pythonint-m128-k128-n128-fp32: recompilation detected ({TIMED} compiles in {TIMED} timed calls)"
        in report
    )


def test_a_models_layers_run_through_torch_xla_and_are_split_by_xlas_own_op_spans(tmp_path):
    """A dense and an MoE layer of a tiny Qwen3-MoE at decode with its KV cache, its head, and the dense layer's
    prefill, through torch-xla: each part is one graph, compiled once (a prefill writes its KV cache: without
    one, transformers' packed-sequence check syncs the graph in two). The MoE layer's experts run
    transformers' batched_mm (torch-xla cannot run the grouped GEMMs' integer histc). Each layer's capture
    profiles a few more executions with torch-xla's profiler: XLA's span per HLO op, in the category of the
    aten op and the Python function it came from, adds up to the execution's span, and the MoE layer's
    router and expert gathers are moe_routing."""
    from neuronsweep.analysis.layer_categories import CATEGORIES

    entry = {"name": "moe", "hf_config": str(REPO / "tests" / "data" / "models" / "tiny-qwen3-moe.json")}
    cfg = xla_config(tmp_path) | {"suites": {"model": [entry | {"seq": [16], "phases": ["prefill", "decode"]}]}}
    ids = ["layer-moe-head-decode-b1-s16-fp32", "layer-moe-l0-dense-decode-b1-s16-fp32"]
    ids += ["layer-moe-l1-moe-decode-b1-s16-balanced-fp32", "layer-moe-l0-dense-prefill-b1-s16-fp32"]
    snakemake(tmp_path, *[f"results/t/xla/workloads/{w}/metrics.json" for w in ids], config=cfg)
    for wid in ids:
        build = json.loads((wdir(tmp_path, wid) / "build" / "build.json").read_text())
        assert build["compile_count"] == 1 and build["recompiled_on_second_call"] is False, wid
        assert build["env"]["XLA_HLO_DEBUG"] == "1", wid  # each HLO op names its source line
        # inference: a layer's graph returns its output only, not what autograd would keep for a backward
        root = next(
            r
            for r in hlo.read(wdir(tmp_path, wid) / "build" / ARTIFACT)
            if r["is_root"] and r["computation_kind"] == "entry"
        )
        assert "head" in wid or root["shape"].count("[") == 1, (wid, root["shape"])
        m = json.loads((wdir(tmp_path, wid) / "metrics.json").read_text())
        split = {c: m[f"split_{c}_s"] for c in CATEGORIES}
        assert sum(split.values()) == pytest.approx(m["split_span_s"], rel=0.02), wid
        assert split["gemm"] > 0 and split["norm"] > 0, (wid, split)
        assert "per-thunk spans" in m["notes"]["split_span_s"] and m["gemms_inside_s"] is None
        if "head" not in wid:
            assert split["attention"] > 0 and split["rope"] > 0, (wid, split)
    moe = wdir(tmp_path, ids[2])
    assert json.loads((moe / "build" / "build.json").read_text())["experts_implementation"] == "batched_mm"
    assert json.loads((moe / "metrics.json").read_text())["split_moe_routing_s"] > 0


def test_rounds_in_processes_make_an_xla_run_one_compare_judges(tmp_path):
    """capture.rounds_in_processes on xla: the traced capture process times round 1 and each other round is a
    torch-xla process of its own, so compare (keeping an xla run's stored timings) tests processes."""
    cfg = xla_config(tmp_path)
    cfg["capture"] |= {"repeats": 3, "rounds_in_processes": True}
    cfg["suites"] = {"matmul": {"grid": {"m": [64], "k": [64], "n": [64]}, "dtype": ["fp32"]}}
    snakemake(tmp_path, config=cfg)
    [case] = (tmp_path / "results" / "t" / "xla" / "workloads").iterdir()
    cap = json.loads((case / "capture" / "capture.json").read_text())
    lat = cap["latency"]
    assert lat["rounds_in_processes"] is True and lat["n"] == 3 * 3 and len(lat["round_medians_s"]) == 3
    assert len(set(lat["round_pids"])) == 3 and lat["execute"]["n"] == 3 * 3
    assert cap["module_matches_build"] is True and not (case / "capture" / "xla" / "round_2" / "dump").exists()

    run = tmp_path / "results" / "t"
    proc = subprocess.run(
        [str(BIN / "neuronsweep"), "compare", str(run), str(run), "--out", str(tmp_path / "cmp")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"timings: the stored ones ({run} ran on xla; only cpu runs are timed again)" in proc.stdout
    with open(tmp_path / "cmp" / "compare.csv") as f:
        [row] = list(csv.DictReader(f))
    assert row["verdict"].startswith("unchanged"), row["verdict"]  # an A/A pair, tested on its 3 processes
