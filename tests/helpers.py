"""What tests share (imported by name, `from helpers import ...`): the repo paths, tiny configs, the
stand-ins' environments, a real `snakemake` run in a temp directory, and run variants for compare.
Fixtures and the collection hook live in conftest.py."""

from __future__ import annotations

import ast
import fcntl
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"  # real tool output and small inputs (tests/data/README.md says where each is from)
BIN = Path(sys.executable).parent


HOST_CACHE: dict[str, Path] = {}  # where the session's host measurements live (host_cache_root)


def needs(package: str, reason: str | None = None) -> pytest.MarkDecorator:
    """Skip a module's tests where `package` is not installed, without importing it while pytest collects:
    pytest.importorskip imports it, and torch or transformers take seconds in every xdist worker, including
    those that run none of the module's tests."""
    return pytest.mark.skipif(importlib.util.find_spec(package) is None, reason=reason or f"needs {package}")


@contextmanager
def made_once(path: Path):
    """Yield True to the one test process (of pytest-xdist's workers) that must make `path`, False once
    it exists: the others wait on a lock beside it instead of making it again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = path.with_name(path.name + ".done")
        yield not done.exists()
        done.touch()


def shared_dir(tmp_path_factory) -> Path:
    """A folder every worker of this pytest run shares (the workers' base folders' parent under xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_sweep(tmp_path_factory, name: str, config, env=None) -> Path:
    """A sweep made once per test run, in a folder every xdist worker shares (the others wait for it):
    `config(work)` and `env(work)` give its config and environment. Tests that change it copy it first."""
    work = shared_dir(tmp_path_factory) / name
    with made_once(work) as make:
        if make:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            snakemake(work, config=config(work), env=env(work) if env else None)
    return work


def host_measurements(calibrated: bool = True) -> Path:
    """The host probe (a GEMM per dtype, which a cpu plan rests on) and, for tests that run captures, the
    calibration, each measured once per test run: every test gets a fresh compile cache, and without this
    each would pay a cold probe and calibration."""
    from neuronsweep.backends.cores import default_threads
    from neuronsweep.host import caps

    root = HOST_CACHE["root"]
    with made_once(root / "host") as make:
        if make:
            caps.probe(root, default_threads())
    if calibrated:
        with made_once(root / "calibration") as make:
            if make:
                from neuronsweep.backends import cpu

                fast = [d for d in caps.DTYPES if d not in caps.slow_dtypes(caps.probe(root, default_threads()))]
                cpu.calibrate(2, root, fast, root / "device.lock")  # tests run snakemake --cores 2
    return root


def private_cache(tmp: Path, calibrated: bool = True) -> Path:
    """A fresh compile cache holding the session's host measurements (the probe; and the calibration
    unless the test only plans)."""
    cache, root = tmp / "cache", host_measurements(calibrated)
    for sub in ("host", "calibration")[: 2 if calibrated else 1]:
        if not (cache / sub).exists():
            shutil.copytree(root / sub, cache / sub)
    return cache


def tiny_config(tmp: Path, *, calibrated: bool = True, **overrides) -> dict:
    """A two-case fp32 sweep with its own compile cache and its own device lock: tests never wait on
    (or block) the machine-wide lock of a real sweep. calibrated=False: for a test that only plans."""
    cfg = {
        "run": "t",
        "backend": "cpu",
        "cache_dir": str(private_cache(tmp, calibrated)),
        "capture": {
            "warmup": 1,
            "iterations": 3,
            "repeats": 1,
            "num_exec": 2,
            "nth_exec": 2,
            "device_lock": str(tmp / "device.lock"),
        },
        "suites": {"matmul": {"grid": {"m": [16, 32], "k": [16], "n": [16]}, "dtype": ["fp32"]}},
    }
    cfg.update(overrides)
    return cfg


JOB = re.compile(r"^(?:local)?rule (\w+):$")
WILDCARD = re.compile(r"^\s+wildcards: wid=(\S+)")


class Run:
    """A finished snakemake process and the jobs it executed, parsed from its job blocks."""

    def __init__(self, proc: subprocess.CompletedProcess):
        self.proc, self.output = proc, proc.stdout + proc.stderr
        self.jobs: list[list] = []  # [rule, workload id or None]
        current = None
        for line in self.output.splitlines():
            if not line.startswith(" ") and (m := JOB.match(line.strip())):
                current = [m.group(1), None]
                self.jobs.append(current)
            elif current is not None and line.startswith("    "):
                if w := WILDCARD.match(line):
                    current[1] = w.group(1)
            else:
                current = None

    @property
    def rules(self) -> list[str]:
        return sorted(r for r, _ in self.jobs if r != "all")


STANDIN = Path(__file__).resolve().parent / "standin"


def cli_here(*argv: object) -> int:
    """`neuronsweep ARGV` in this process, its exit code (a child's start-up costs a second of imports): its
    log handlers made afresh on the streams of the moment (capsys's, within a test) and dropped after."""
    import logging

    from neuronsweep import cli

    logger = logging.getLogger("neuronsweep")
    saved, logger.handlers = logger.handlers, []
    try:
        return cli.main([*map(str, argv)])
    finally:
        logger.handlers = saved


def standin_env(tmp: Path, **knobs: str) -> dict:
    """Environment that puts the stand-in Neuron toolchain first (tests/standin/README.md)."""
    return {
        "PATH": os.pathsep.join([str(STANDIN / "bin"), str(BIN), os.environ.get("PATH", "")]),
        "PYTHONPATH": str(STANDIN / "python"),
        "STANDIN_LOG": str(tmp / "standin.log"),
        "STANDIN_CORE_DIR": str(tmp / "neuron-cores"),
        **knobs,
    }


def torchneuron_env(tmp: Path, **knobs: str) -> dict:
    """The stand-in of SDK 2.33 on a trn2.48xlarge at LNC 2: TorchNeuron's torch_neuronx first on the path."""
    path = os.pathsep.join([str(STANDIN / "python-torchneuron"), str(STANDIN / "python")])
    return standin_env(tmp, PYTHONPATH=path, STANDIN_MACHINE="trn2", **knobs)


def neuron_config(tmp: Path, **overrides) -> dict:
    return tiny_config(tmp, backend="neuron", neuron={"profiler": "neuron-explorer", "json": True}, **overrides)


NEURON_WIDS = ["matmul-m16-k16-n16-fp32", "matmul-m32-k16-n16-fp32"]


def neuron_settings(num_exec: int, nth: int, tmp: Path, profiler: str):
    """A neuron capture's settings as slots.held leaves them: one core, the stand-in's profiler."""
    from neuronsweep.config.settings import CaptureSettings

    return CaptureSettings(
        warmup=1,
        iterations=1,
        repeats=1,
        num_exec=num_exec,
        nth_exec=nth,
        threads=1,
        device_lock=str(tmp / "device.lock"),
        timeout_s=60,
        visible_cores="0",
        options={"profiler": profiler},
    ).for_backend("neuron")  # as slots.held sets it


def neuron_wdir(root: Path, wid: str) -> Path:
    """A case's folder in the tiny neuron run under root."""
    return root / "results" / "t" / "neuron" / "workloads" / wid


def standin_neff(tmp: Path) -> Path:
    """A NEFF the stand-in toolchain runs: one 64 x 64 matmul graph."""
    neff = tmp / "model.neff"
    neff.write_bytes(b"NEFF\0" + json.dumps({"graph": "g", "ops": [["matmul", [[64, 64], [64, 64]]]]}).encode())
    return neff


def standin_runs(tmp: Path) -> list[dict]:
    log = tmp / "standin.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def snakemake_argv(workdir: Path, *args: str, configfile: Path | None = None) -> list[str]:
    """The command line every test runs the workflow with: this checkout's Snakefile on `workdir`, its
    config.yaml (or `configfile`) replacing the default sweep."""
    snakefile, config = REPO / "Snakefile", configfile or workdir / "config.yaml"
    return [
        str(BIN / "snakemake"),
        "-s",
        str(snakefile),
        "--directory",
        str(workdir),
        "--configfile",
        str(config),
        *args,
    ]


def workflow_env(**extra: str) -> dict:
    """This environment with the venv's commands (snakemake, neuronsweep) first on PATH."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def snakemake(
    workdir: Path, *args: str, config: dict | None = None, check: bool = True, env: dict | None = None
) -> Run:
    """Run the real workflow on `workdir` (config written to workdir/config.yaml when given)."""
    if config is not None:
        (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    cmd = snakemake_argv(workdir, "--cores", "2", *args)
    env = workflow_env(**(env or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=workdir, timeout=900)
    run = Run(proc)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake exited {proc.returncode}:\n{run.output[-4000:]}")
    return run


def run_variant(
    run: Path, dest: Path, slower=None, factor=1.0, iterations=None, backend=None, seed=0, name=None, processes=6
):
    """A copy of the finished run's result folder, changed as a new SDK might change it: every case gets
    `processes` rounds, each a process of its own whose level is drawn 2 % around the case's median with
    5 samples 1 % around that level (`processes=0`: one process of 30 samples, which compare does not
    judge), the `slower` one `factor` times longer, its profile's aten::mm self time longer by that change (what
    a slower kernel looks like in tables/opcodes.csv); `name` renames the run (plan.json)."""
    shutil.copytree(run, dest)
    summary = pd.read_csv(dest / "summary.csv")
    for i, row in summary.iterrows():
        wid, f = row["workload_id"], factor if row["workload_id"] == slower else 1.0
        capture = dest / "cpu" / "workloads" / wid / "capture" / "capture.json"
        record = json.loads(capture.read_text())
        rng = np.random.default_rng([seed, i])
        levels = row["latency_median_s"] * f * np.exp(0.02 * rng.standard_normal(max(processes, 1)))
        if not processes:
            levels[:] = row["latency_median_s"] * f
        each = 30 // max(processes, 1)
        rounds = [level * np.exp(0.01 * rng.standard_normal(each)) for level in levels]
        times = np.concatenate(rounds)
        record["latency"].update(
            samples_s=list(times),
            round_medians_s=[float(np.median(r)) for r in rounds] if processes else None,
            rounds_in_processes=bool(processes),
        )
        capture.write_text(json.dumps(record))
        summary.loc[i, "latency_median_s"] = float(np.median(times))
        summary.loc[i, ["noisy", "latency_rel_spread", "latency_n"]] = [False, 0.02, 30]
        summary.loc[i, "achieved_flops_per_s"] = row["achieved_flops_per_s"] / f
        ops = dest / "cpu" / "workloads" / wid / "tables" / "opcodes.csv"
        table = pd.read_csv(ops)
        # the kernel takes the extra time: its self time grows by the change of the median
        table.loc[table["name"] == "aten::mm", "self_ns"] += (f - 1) * row["latency_median_s"] * 1e9
        table.to_csv(ops, index=False)
    if backend:
        summary["backend"] = backend
    summary.to_csv(dest / "summary.csv", index=False)
    plan = json.loads((dest / "plan.json").read_text())
    if iterations:
        plan["config"]["capture"]["iterations"] = iterations
    if name:
        plan["run"] = plan["config"]["run"] = name
    if backend:
        plan["backend"] = backend
    (dest / "plan.json").write_text(json.dumps(plan))
    return dest


def names_one_of(node: ast.AST, names) -> bool:
    """A literal of `names` in the code, alone or inside a tuple, list or set (the door tests' comparisons)."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(names_one_of(e, names) for e in node.elts)
    return False
