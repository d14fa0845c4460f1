"""Device slots (slots.py): a trn1.32xlarge-like stand-in runs captures side by side, one per slot,
each pinned to its slot's NeuronCores, and no two captures ever share a core, also across two
Snakemake processes."""

from __future__ import annotations

import json
import os
import subprocess
from itertools import combinations
from pathlib import Path

import pytest
import yaml
from helpers import BIN, made_once, neuron_config, private_cache, shared_dir, snakemake, snakemake_argv, standin_env

from neuronsweep.errors import UserError
from neuronsweep.host import slots


def _env(monkeypatch, tmp_path, **knobs):
    for key, value in standin_env(tmp_path, **knobs).items():
        monkeypatch.setenv(key, value)


def test_slots_come_from_neuron_ls_one_chip_or_one_core_each(tmp_path, monkeypatch):
    _env(monkeypatch, tmp_path, STANDIN_DEVICES="16")
    chip = slots.pool("neuron", "auto", "chip")
    assert len(chip) == 16 and [s.visible for s in chip.slots[:3]] == ["0-1", "2-3", "4-5"]
    assert "16 device(s), 32 NeuronCore(s)" in chip.describe()
    core = slots.pool("neuron", "auto", "core")
    assert len(core) == 32 and core.slots[31].visible == "31"
    assert [s.visible for s in slots.pool("neuron", 3, "chip").slots] == ["0-1", "2-3", "4-5"]
    assert chip.slots[1].locks("/x/dev.lock") == [Path("/x/dev.lock.nc2"), Path("/x/dev.lock.nc3")]
    with pytest.raises(
        UserError,
        match=r"'capture.slots' is 17, but this machine has 16 chip slot\(s\) .*"
        r"set it to at most 16, or auto\.",
    ):
        slots.pool("neuron", 17, "chip")
    host = slots.pool("cpu", 8, "core")  # cpu keeps its one slot, whatever the neuron keys say
    assert len(host) == 1 and host.slots[0].locks("/x/dev.lock") == [Path("/x/dev.lock")]


def test_without_neuron_ls_the_devices_and_the_targets_cores_per_chip_are_used(tmp_path, monkeypatch):
    monkeypatch.setattr(slots.neuron_ls, "tool", lambda: None)
    monkeypatch.setattr(slots.glob, "glob", lambda pattern: [f"/dev/neuron{i}" for i in range(4)])
    trn2 = slots.pool("neuron", "auto", "chip", "trn2")  # 8 physical cores per chip, LNC 2: 4 logical
    assert [s.visible for s in trn2.slots] == ["0-3", "4-7", "8-11", "12-15"]
    assert len(slots.pool("neuron", "auto", "core", "trn2", lnc=1)) == 32
    assert "4 /dev/neuron* device(s) x 4 NeuronCore(s)" in trn2.found


def _spans(root: Path) -> list[dict]:
    out = []
    for path in root.glob("results/*/neuron/workloads/*/capture/capture.json"):
        record = json.loads(path.read_text())
        out.append({**record["device_span"], "visible": record["settings"]["visible_cores"], "path": str(path)})
    return out


def _cores(span: dict) -> set[int]:
    lo, _, hi = span["cores"].partition("-")
    return set(range(int(lo), int(hi or lo) + 1))


def _no_core_overlap(spans: list[dict]) -> None:
    for a, b in combinations(spans, 2):
        if _cores(a) & _cores(b):
            assert a["released_unix"] <= b["acquired_unix"] or b["released_unix"] <= a["acquired_unix"], (a, b)


def _max_concurrent(spans: list[dict]) -> int:
    events = sorted([(s["acquired_unix"], 1) for s in spans] + [(s["released_unix"], -1) for s in spans])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.fixture(scope="module")
def neff_cache(tmp_path_factory) -> Path:
    """One compile cache for this module's sweeps, shared by the test run's workers: these tests are about
    captures and device slots, so the second to build a workload takes its NEFF from the cache."""
    root = shared_dir(tmp_path_factory) / "slots-neffs"
    with made_once(root):  # one worker copies the host measurements in, under the lock
        return private_cache(root)


def _four_cases(tmp_path: Path, run: str, slots_setting, neff_cache: Path) -> dict:
    """The same four workloads in every sweep of this module: the first to build one leaves its NEFF."""
    cfg = neuron_config(tmp_path, run=run)
    cfg["cache_dir"] = str(neff_cache)
    cfg["capture"].update({"warmup": 0, "iterations": 1, "slots": slots_setting})
    cfg["suites"] = {"matmul": {"grid": {"m": [16], "k": [16, 32], "n": [16, 32]}, "dtype": ["fp32"]}}
    return cfg


@pytest.mark.slow
@pytest.mark.workflow
def test_four_captures_on_two_slots_run_side_by_side_each_pinned_to_its_chip(tmp_path, neff_cache):
    env = standin_env(tmp_path, STANDIN_DEVICES="2", STANDIN_EXEC_SECONDS="3")
    run = snakemake(tmp_path, "--cores", "4", config=_four_cases(tmp_path, "t", "auto", neff_cache), env=env)
    assert "captures: 2 device slot(s), chip isolation, 2 NeuronCore(s) each" in run.output
    spans = _spans(tmp_path)
    assert len(spans) == 4 and all(s["visible"] == s["cores"] for s in spans)
    _no_core_overlap(spans)
    # side by side: the pool was used in full, never beyond (one slot would run them one after another;
    # how many rounds the four take depends on when Snakemake starts each on a loaded machine)
    assert _max_concurrent(spans) == 2
    # the profiler saw only its slot's cores: every stand-in capture claimed them, none failed
    text = "".join(p.read_text() for p in (tmp_path / "results").rglob("capture.log"))
    assert "Available:0" not in text and "Invalid NEURON_RT_VISIBLE_CORES" not in text


@pytest.mark.slow
@pytest.mark.workflow
def test_two_snakemake_processes_never_share_a_core(tmp_path, neff_cache):
    """Each process thinks it has 4 slots (neuron_device 4); they share the machine's 4 chips through
    the per-core locks, one in core isolation, so a chip slot and a core slot must exclude each other."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **standin_env(tmp_path, STANDIN_DEVICES="4", STANDIN_EXEC_SECONDS="1"),
    }
    procs = []
    for run, isolation in (("r1", "chip"), ("r2", "core")):
        work = tmp_path / run
        work.mkdir()
        cfg = _four_cases(work, run, 4, neff_cache)
        cfg["capture"].update({"device_lock": str(tmp_path / "device.lock"), "isolation": isolation})
        cfg["suites"]["matmul"]["grid"]["n"] = [16]  # two cases each, both asking for the lowest slots first
        (work / "config.yaml").write_text(yaml.safe_dump(cfg))
        procs.append(
            subprocess.Popen(
                snakemake_argv(work, "--cores", "4"),
                cwd=work,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs[0][-3000:] + outputs[1][-3000:]
    spans = _spans(tmp_path / "r1") + _spans(tmp_path / "r2")
    assert len(spans) == 4
    _no_core_overlap(spans)
    assert {len(_cores(s)) for s in _spans(tmp_path / "r2")} == {1}


@pytest.mark.workflow
def test_more_slots_than_the_machine_has_is_refused_before_any_job_and_doctor_shows_the_pool(tmp_path):
    cfg = neuron_config(tmp_path)
    cfg["capture"]["slots"] = 3
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, **standin_env(tmp_path, STANDIN_DEVICES="2")}
    sentence = "config key 'capture.slots' is 3, but this machine has 2 chip slot(s) ("
    plan = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert plan.returncode == 2 and sentence in plan.stderr and plan.stderr.strip().endswith("or auto.")
    dry = snakemake(tmp_path, "-n", env=standin_env(tmp_path, STANDIN_DEVICES="2"), check=False)
    assert dry.proc.returncode != 0 and sentence in dry.output and "rule build" not in dry.output
    cfg["capture"].update({"slots": "auto", "isolation": "core"})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    doctor = subprocess.run(
        [str(BIN / "neuronsweep"), "doctor", "--config", str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    assert "capture slots: 4 device slot(s), core isolation, 1 NeuronCore(s) each (cores 0 .. 3;" in doctor
    assert "slot 0 (cores 0): free" in doctor
