"""The package as users install it: every import declared, and a built wheel that validates configs
without the source tree (the schema is package data)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from helpers import REPO, private_cache

PACKAGE = REPO / "workflow" / "neuronsweep"
# imports only the Neuron SDK's own environment provides (the DLAMI venv), never pip-installed by us
NEURON_ENVIRONMENT = {"nki", "neuronxcc", "torch_xla", "torch_neuronx", "ml_dtypes"}
# imported only by what an extra installs it for: suites.model, neuronsweep search
OPTIONAL = {"transformers": "models", "optuna": "tune"}


def third_party_imports() -> set[str]:
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("neuronsweep", "__future__")}


@pytest.mark.workflow
def test_every_import_of_the_package_is_a_declared_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in project["dependencies"]}
    dists = metadata.packages_distributions()
    missing = {}
    for name in sorted(third_party_imports() - NEURON_ENVIRONMENT):
        provided_by = {d.lower() for d in dists.get(name, [name])}
        extra = project["optional-dependencies"].get(OPTIONAL.get(name, ""), [])
        if not provided_by & (declared | {d.split(">")[0].strip().lower() for d in extra}):
            missing[name] = sorted(provided_by)
    assert not missing, f"imported but not in pyproject dependencies: {missing}"
    assert "snakemake" not in declared  # the workflow needs it, the package never imports it
    assert "snakemake" not in third_party_imports()


@pytest.mark.slow
@pytest.mark.workflow  # builds a wheel and installs it in a venv
def test_a_built_wheel_plans_a_config_outside_the_source_tree(tmp_path):
    src = tmp_path / "src"  # build from a copy: setuptools leaves build/ in the tree it builds
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(".git", ".venv*", "results", ".snakemake", "build", "*.egg-info", "__pycache__"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = (tmp_path / "dist").glob("neuron_sweep-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # the dependencies come from this environment (no download); the package only from the wheel
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "deps-from-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True)
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(
        json.dumps(
            {
                "cache_dir": str(private_cache(tmp_path, calibrated=False)),
                "backend": "cpu",
                "suites": {"matmul": {"grid": {"m": [64], "k": [64], "n": [64]}}},
            }
        )
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run(
        [str(py), "-c", "import neuronsweep; print(neuronsweep.__file__)"],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert where.startswith(str(venv))  # the wheel's copy, not the source tree
    plan = subprocess.run(
        [str(venv / "bin" / "neuronsweep"), "plan", "--config", str(cfg), "--json"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["counts"] == {"scenarios": 1, "workloads": 1, "unsupported": 0}
