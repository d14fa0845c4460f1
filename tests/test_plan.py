"""Planning: suites -> scenarios -> unique workloads, with readable stable ids."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
import yaml
from helpers import BIN, private_cache

from neuronsweep.config import schema as config
from neuronsweep.config.run_config import RunConfig
from neuronsweep.stages.plan import make_plan


def plan_of(suites):
    return make_plan(RunConfig.of(config.validate({"suites": suites})), "cpu")


def test_grid_times_dtypes_plus_shapes():
    p = plan_of(
        {
            "matmul": {
                "grid": {"m": [128, 512], "k": [1024], "n": [256, 2048]},
                "shapes": [{"m": 8, "k": 4096, "n": 14336}],
                "dtype": ["fp32", "bf16"],
            }
        }
    )
    assert len(p.scenarios) == (2 * 1 * 2 + 1) * 2 == 10
    assert len(p.workloads) == 10
    assert "matmul-m512-k1024-n2048-fp32" in p.workloads
    assert p.workloads["matmul-m8-k4096-n14336-bf16"] == {
        "kind": "matmul",
        "m": 8,
        "k": 4096,
        "n": 14336,
        "dtype": "bf16",
    }


def test_a_shape_in_grid_and_shapes_is_one_scenario():
    p = plan_of({"matmul": {"grid": {"m": [16], "k": [16], "n": [16, 32]}, "shapes": [{"m": 16, "k": 16, "n": 32}]}})
    assert [s.id for s in p.scenarios] == ["matmul-m16-k16-n16-fp32", "matmul-m16-k16-n32-fp32"]


def test_plan_is_stable_across_orderings():
    a = plan_of({"matmul": {"grid": {"m": [1, 2], "k": [3], "n": [4]}}})
    b = plan_of({"matmul": {"grid": {"m": [2, 1], "k": [3], "n": [4]}}})
    assert a.to_dict() == b.to_dict()


@pytest.mark.torch  # the cpu plan probe or a torch child
def test_cli_plan_json(tmp_path):
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            {
                "backend": "auto",
                "cache_dir": str(private_cache(tmp_path, calibrated=False)),
                "suites": {"matmul": {"grid": {"m": [1, 2], "k": [3], "n": [4]}}},
            }
        )
    )
    proc = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "c.yaml"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(proc.stdout)
    assert out["counts"] == {"scenarios": 2, "workloads": 2, "unsupported": 0}
    assert out["backend"] == "cpu"  # no Neuron device on CI
    reason, estimate, captures = proc.stderr.strip().splitlines()
    assert reason == "backend auto -> cpu: no Neuron device (/dev/neuron* absent)"
    assert estimate.startswith("estimate: at least ")
    assert captures == "captures: 1 device slot, the device lock (cpu: a capture takes every core of the host)"
    assert [s["id"] for s in out["scenarios"]] == ["matmul-m1-k3-n4-fp32", "matmul-m2-k3-n4-fp32"]


def test_recompile_suite_runs_on_lazy_tensor_backends_only():
    suites = {
        "recompile": {"shapes": [{"m": 64, "k": 64, "n": 64}]},
        "matmul": {"shapes": [{"m": 64, "k": 64, "n": 64}]},
    }
    on_cpu = plan_of(suites)
    assert [s.id for s in on_cpu.scenarios] == [
        "matmul-m64-k64-n64-fp32",
        "recompile-pythonfloat-m64-k64-n64-fp32",
        "recompile-pythonint-m64-k64-n64-fp32",
        "recompile-static-m64-k64-n64-fp32",
    ]
    # static is the plain matmul: one workload; the two traps are unsupported on cpu, with the reason
    assert list(on_cpu.workloads) == ["matmul-m64-k64-n64-fp32"]
    assert set(on_cpu.unsupported) == {
        "matmul-m64-k64-n64-fp32-varies-pythonfloat",
        "matmul-m64-k64-n64-fp32-varies-pythonint",
    }
    assert all("freezes Python values" in why for why in on_cpu.unsupported.values())
    on_xla = make_plan(RunConfig.of(config.validate({"suites": suites})), "xla")
    assert len(on_xla.workloads) == 3 and not on_xla.unsupported
    assert on_xla.workloads["matmul-m64-k64-n64-fp32-varies-pythonint"]["varies"] == "python_int"


def test_scenarios_sort_their_numbers_as_numbers():
    cfg = config.validate({"suites": {"matmul": {"grid": {"m": [1, 128, 16, 2], "k": [8], "n": [8]}}}})
    ids = [s.id for s in make_plan(RunConfig.of(cfg), "cpu").scenarios]
    assert ids == [f"matmul-m{m}-k8-n8-fp32" for m in (1, 2, 16, 128)]


def test_a_missing_config_names_the_folder_it_looked_in(tmp_path):
    proc = subprocess.run([str(BIN / "neuronsweep"), "plan"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"config/config.yaml: no such config file in {tmp_path}; run from the repository's folder" in proc.stderr


def test_a_folder_given_to_history_as_a_run_name_points_to_store_or_add(tmp_path):
    (tmp_path / "hist" / "entries").mkdir(parents=True)
    (tmp_path / "run").mkdir()
    for folder, hint in (("hist", "--store"), ("run", "--add")):
        proc = subprocess.run(
            [str(BIN / "neuronsweep"), "history", str(tmp_path / folder)], capture_output=True, text=True, cwd=tmp_path
        )
        assert proc.returncode == 2 and f"neuronsweep history {hint} {tmp_path / folder}." in proc.stderr, proc.stderr


def test_a_run_is_settled_once_on_its_machine_and_not_under_a_cluster(monkeypatch):
    """stages/run_setup.settle_run, as common.smk and `neuronsweep plan` call it, without Snakemake: the
    target and route are read from the machine once; under a cluster executor each job settles on its
    node; off Neuron nothing is settled."""
    from neuronsweep import backends
    from neuronsweep.backends import neuron_setup
    from neuronsweep.stages.run_setup import settle_run

    reads = []
    monkeypatch.setattr(backends, "resolve", lambda choice, local=True: ("neuron", "backend neuron: a device"))
    monkeypatch.setattr(
        neuron_setup,
        "settle",
        lambda section, need_route: (reads.append("target") or {**section, "target": "trn2"}, {"target": "trn2 here"}),
    )
    monkeypatch.setattr(neuron_setup, "needs_route", lambda workloads: True)
    monkeypatch.setattr(
        neuron_setup,
        "settle_route",
        lambda section: (reads.append("route") or {**section, "route": "torchneuron"}, {"route": "torchneuron here"}),
    )
    cfg = {"backend": "auto", "suites": {"matmul": {"shapes": [{"m": 128, "k": 128, "n": 128}]}}}
    first = settle_run(RunConfig.of(config.validate(copy.deepcopy(cfg))))
    assert reads == ["target", "route"] and first.config.section("neuron")["target"] == "trn2"
    assert first.config.section("neuron")["route"] == "torchneuron" and first.log_lines()[1:] == [
        "trn2 here",
        "torchneuron here",
    ]
    cluster = settle_run(RunConfig.of(config.validate(copy.deepcopy(cfg))), local=False)  # each job settles on its node
    assert reads == ["target", "route"] and cluster.neuron_setup == {}
    monkeypatch.setattr(backends, "resolve", lambda choice, local=True: ("xla", "backend xla"))  # no torch probe
    off_neuron = settle_run(RunConfig.of(config.validate(copy.deepcopy(cfg))))
    assert off_neuron.neuron_setup == {} and reads == ["target", "route"]


def test_the_plan_is_staged_once_by_its_content_and_old_plans_are_pruned(tmp_path):
    """The plan job copies what the workflow staged when it was read (no `run:` rule, no second Snakemake):
    the same plan gives the same file, another plan another one, a plan not run for a day goes."""
    import os
    import time

    from neuronsweep.stages.run_setup import stage_plan

    text = json.dumps({"run": "t", "workloads": {}}, separators=(",", ":"))
    staged = stage_plan(text, tmp_path / "stage")
    assert json.loads(staged.read_text()) == json.loads(text) and staged.parent == tmp_path / "stage"
    other = stage_plan(text.replace('"t"', '"u"'), tmp_path / "stage")
    assert other != staged and stage_plan(text, tmp_path / "stage") == staged
    day_ago = time.time() - 86400 - 60
    os.utime(other, (day_ago, day_ago))
    assert stage_plan(text, tmp_path / "stage") == staged and not other.exists() and staged.exists()
    (tmp_path / "file").write_text("")  # a folder that cannot be made (also for root): a dry run still plans
    assert stage_plan(text, tmp_path / "file" / "stage").name == staged.name
