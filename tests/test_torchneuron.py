"""Neuron as SDK 2.33 ships it: the instance read from neuron-ls (the real outputs in tests/data/neuron/tools/),
the route picked from the installed packages, and the TorchNeuron route end to end on the stand-in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import BIN, DATA, REPO, neuron_config, snakemake, snakemake_argv, standin_env, torchneuron_env

from neuronsweep.backends import neuron_setup
from neuronsweep.config.schema import section_defaults
from neuronsweep.config.settings import HOST_ENV
from neuronsweep.errors import UserError
from neuronsweep.host import neuron_ls
from neuronsweep.host.targets import TARGETS, target_family

TOOLS = DATA / "neuron" / "tools"


def real_machine(name: str) -> neuron_ls.Machine:
    devices, top = neuron_ls.parse_json((TOOLS / f"{name}.json").read_text())
    header = neuron_ls.parse_header((TOOLS / f"{name}.txt").read_text())
    return neuron_ls.machine_from(devices, top, header, "neuron-ls --json-output")


def test_the_real_inf2_listing_names_its_instance_in_the_header_only():
    m = real_machine("neuron-ls-inf2.xlarge")
    assert (m.instance_type, m.lnc, m.chips) == ("inf2.xlarge", None, ((0, 1),))
    assert m.sources == {"instance_type": "neuron-ls table header: instance-type"}


def test_the_real_trn2_listing_gives_the_instance_and_lnc_2_in_its_json():
    m = real_machine("neuron-ls-trn2.48xlarge-one-device")
    assert (m.instance_type, m.lnc, len(m.chips[0])) == ("trn2.48xlarge", 2, 4)  # nc_count: logical cores
    assert m.sources["lnc"].endswith("logical_neuroncore_config")


def test_the_newer_json_form_with_top_level_instance_fields_is_read_too():
    """Runtime 2.34's `--output-format json` has top-level instance fields whose names the docs do not
    give and no real output of it is at hand: the reader takes a device list under any key, and the
    fields by the names the device objects already use. Replace this shape with a real file when one exists."""
    devices = json.loads((TOOLS / "neuron-ls-trn2.48xlarge-one-device.json").read_text())
    wrapped = json.dumps({"instance_type": "trn2.48xlarge", "logical_neuroncore_config": 2, "devices": devices})
    m = neuron_ls.machine_from(*neuron_ls.parse_json(wrapped), {}, "neuron-ls --output-format json")
    assert (m.instance_type, m.lnc, m.chips) == ("trn2.48xlarge", 2, ((0, 1, 2, 3),))


@pytest.mark.parametrize(
    "knobs, family, lnc, cores",
    [({}, "inf2", None, 2), ({"STANDIN_MACHINE": "trn2", "STANDIN_DEVICES": "2"}, "trn2", 2, 4)],
)
def test_discovery_asks_the_tool_newest_form_first(tmp_path, monkeypatch, knobs, family, lnc, cores):
    for key, value in standin_env(tmp_path, **knobs).items():
        monkeypatch.setenv(key, value)
    m = neuron_ls.discover()
    assert (target_family(m.instance_type), m.lnc, len(m.chips[0])) == (family, lnc, cores)
    # runtime 2.30 has no --output-format: the older --json-output answered
    assert ("--output-format json" in m.found) == (family == "trn2"), m.found


def test_neuron_ls_2_34s_object_form_is_read_and_an_answer_without_devices_is_named(tmp_path, monkeypatch):
    """Runtime 2.34 (announcement): no -j, and --output-format json an object with top-level fields (the
    stand-in's shape is a guess the field test settles). A neuron-ls that answers with no device list the
    reader recognizes is never "no device" in silence: the pool's sentence names the command and what it
    printed."""
    from neuronsweep.errors import UserError
    from neuronsweep.host import slots

    for key, value in standin_env(tmp_path, STANDIN_MACHINE="trn2", STANDIN_NEURON_LS_OBJECT="1").items():
        monkeypatch.setenv(key, value)
    m = neuron_ls.discover()
    assert (m.instance_type, m.lnc, m.chips) == ("trn2.48xlarge", 2, ((0, 1, 2, 3),)), m.found
    assert m.found.endswith("--output-format json: 1 device(s), 4 NeuronCore(s)")
    odd = tmp_path / "odd-bin"
    odd.mkdir()
    (odd / "neuron-ls").write_text('#!/bin/sh\necho \'{"instance_type": "trn2.48xlarge", "cores": "four"}\'\n')
    (odd / "neuron-ls").chmod(0o755)
    monkeypatch.setenv("PATH", f"{odd}:/usr/bin:/bin")
    monkeypatch.setattr(slots.glob, "glob", lambda pattern: [])  # no /dev/neuron* either
    with pytest.raises(UserError) as said:
        slots.pool("neuron", "auto", "chip", "trn2")
    assert "no NeuronCore in what neuron-ls printed" in str(said.value)
    assert '--output-format json printed \'{"instance_type": "trn2.48xlarge", "cores": "four"}\'' in str(said.value)


def test_a_run_asks_neuron_ls_once_and_its_jobs_read_that_answer(tmp_path, monkeypatch):
    """share_with_jobs (common.smk, local runs) puts what the tool said in the environment; discover in this
    process or a job then starts no neuron-ls and sees the same machine."""
    for key, value in standin_env(tmp_path, STANDIN_MACHINE="trn2", STANDIN_DEVICES="2").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(neuron_ls.MACHINE_ENV, "")  # none shared yet (and what share_with_jobs sets is undone)
    asked = neuron_ls.discover()
    neuron_ls.share_with_jobs()
    monkeypatch.setattr(neuron_ls, "_run", lambda argv: pytest.fail(f"neuron-ls started again: {argv}"))
    assert neuron_ls.discover() == asked and asked.chips == ((0, 1, 2, 3), (4, 5, 6, 7))
    job = subprocess.run(
        [str(BIN / "python"), "-c", "from neuronsweep.host import neuron_ls; print(neuron_ls.discover().found)"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": "/nonexistent"},  # no neuron-ls to ask: only the shared answer
    )
    assert job.stdout.strip() == asked.found, job.stderr


def options(**over) -> dict:
    return section_defaults("neuron", over)


def test_target_auto_is_the_machine_and_a_wrong_target_or_lnc_is_one_sentence():
    trn2, inf2 = real_machine("neuron-ls-trn2.48xlarge-one-device"), real_machine("neuron-ls-inf2.xlarge")
    assert neuron_setup.settle_target(options(), trn2)[:2] == ("trn2", 2)
    assert neuron_setup.settle_target(options(), inf2)[:2] == ("inf2", 1)
    with pytest.raises(UserError, match=r"^config key 'neuron.target' is trn1, but this machine is a trn2.48xlarge "):
        neuron_setup.settle_target(options(target="trn1"), trn2)
    with pytest.raises(UserError, match=r"neuronx-cc accepts only LNC 1 for inf2"):
        neuron_setup.settle_target(options(lnc=2), inf2)
    with pytest.raises(UserError, match=r"neuron.target is auto, but neuron-ls does not name a Trainium or Infer"):
        neuron_setup.settle_target(options(), neuron_ls.Machine(chips=((0, 1),)))
    trn1n = neuron_ls.Machine(instance_type="trn1n.32xlarge")
    assert neuron_setup.settle_target(options(target="trn1"), trn1n)[0] == "trn1"  # one chip, more network


def test_lnc_1_on_a_trn2_listed_at_lnc_2_runs_per_process_on_the_physical_cores():
    """Logical NeuronCore configuration: NEURON_LOGICAL_NC_CONFIG is a per-process runtime setting."""
    trn2 = real_machine("neuron-ls-trn2.48xlarge-one-device")
    target, lnc, why = neuron_setup.settle_target(options(lnc=1), trn2)
    assert (target, lnc) == ("trn2", 1) and "per process on the runtime's LNC 2 cores" in why
    _, why = neuron_setup.settle(options(lnc=1), machine=trn2, need_route=False)
    assert why["machine_lnc"] == 2  # the slots keep numbering the cores as neuron-ls does
    at_lnc_1 = neuron_ls.Machine(instance_type="trn2.48xlarge", lnc=1, chips=(tuple(range(8)),))
    with pytest.raises(UserError, match=r"'neuron.lnc' is 2, coarser than the LNC 1 this machine's runtime"):
        neuron_setup.settle_target(options(lnc=2), at_lnc_1)


@pytest.mark.parametrize(
    "instance, family",
    [
        ("trn2n.48xlarge", "trn2"),  # the instance the neuron-ls docs print in every example
        ("trn2u.48xlarge", "trn2"),  # the Trn2 UltraServer's
        ("trn3pds.48xlarge", "trn3"),  # the Trn3 UltraServer (EKS UltraServer Operator page; nrt.h TRN3PDS98)
        ("trn3.48xlarge", "trn3"),
        ("trn1n.32xlarge", "trn1n"),
        ("trn1.2xlarge", "trn1"),
        ("inf2.48xlarge", "inf2"),
        ("inf1.xlarge", None),
        ("m7i.xlarge", None),
    ],
)
def test_instance_types_map_to_their_chip_by_the_ec2_naming_rule(instance, family):
    assert target_family(instance) == family


def test_an_instance_family_without_a_target_is_named_with_the_key_to_set():
    with pytest.raises(UserError, match=r"inf1.xlarge is a inf1 instance, which neuron-sweep has no target for; set"):
        neuron_setup.settle_target(options(), neuron_ls.Machine(instance_type="inf1.xlarge"))
    assert neuron_setup.settle_target(options(), neuron_ls.Machine(instance_type="trn2n.48xlarge"))[:2] == ("trn2", 2)


@pytest.mark.parametrize("listing", ["neuron-ls-trn2.48xlarge-one-device", "neuron-ls-inf2.xlarge"])
def test_the_default_config_and_every_example_plan_on_real_trn2_and_inf2_listings(listing):
    from neuronsweep.config import schema

    machine = real_machine(listing)
    for path in [REPO / "config" / "config.yaml", *sorted((REPO / "config" / "examples").glob("*.yaml"))]:
        cfg = schema.load(str(path))
        if path.name in ("model-vllm-trn2.yaml", "model-slo-trn2.yaml"):  # pinned to trn2, planned anywhere
            assert cfg["neuron"]["target"] == "trn2"
            continue
        assert cfg["neuron"]["target"] == "auto", path
        settled, why = neuron_setup.settle(cfg["neuron"], machine=machine, need_route=False)
        assert settled["target"] == target_family(machine.instance_type), (path, why)


def test_trn3_is_a_target_with_its_sourced_figures():
    t = TARGETS["trn3"]
    assert t.peak_flops("bf16") == pytest.approx(671e12 / 8 * 2)  # LNC 2 by default
    assert t.peak_flops("fp32", 1) == pytest.approx(183e12 / 8)
    assert (t.hbm_bytes(1), t.nki_platform) == (144 * 2**30 / 8, "trn3")
    assert "trainium3.rst" in t.source and "2.56 TB/sec" in t.chip_link_source
    assert {TARGETS[n].nki_platform for n in ("trn1", "trn1n")} == {"trn1"}
    # the two AWS pages disagree on HBM (4.9 vs 4.7 TB/s): the newer one, and both named in the peak's source
    assert t.hbm_bytes_per_s == pytest.approx(4.7e12 / 4)
    assert "2026-03-09" in t.peak_source and "4.9 TB/s" in t.peak_source


# what the probe child reports, as on real environments
TORCHNEURON = {
    "versions": {"torch": "2.13.0", "torch-neuronx": "2.13.3"},
    "imports": {"torch_neuronx": None},
    "neuron_device": True,
    "torch_xla": False,
}
XLA = {
    "versions": {"torch": "2.9.0", "torch-xla": "2.9.0", "torch-neuronx": "2.9.0.2.15.32035"},
    "imports": {"torch_neuronx": None},
    "neuron_device": False,
    "torch_xla": True,
}
# the real trn2 environment of October 2026 (tests/data/neuron/tools/README.md): torch_neuronx failed to import
BROKEN = {
    "versions": {"torch": "2.11.0", "torch-xla": "2.11.0", "neuronx-cc": "2.27.5334.0", "nki": "0.6.0"},
    "imports": {"torch_neuronx": "ModuleNotFoundError: No module named 'torch_neuronx'"},
    "neuron_device": False,
    "torch_xla": True,
}


def test_route_auto_prefers_torchneuron_then_xla_then_refuses_saying_what_it_found():
    assert neuron_setup.choose_route("auto", TORCHNEURON)[0] == "torchneuron"
    assert neuron_setup.choose_route("auto", XLA)[0] == "xla"
    with pytest.raises(UserError) as refused:
        neuron_setup.choose_route("auto", BROKEN)
    said = str(refused.value)
    assert "torch 2.11.0, torch-xla 2.11.0, neuronx-cc 2.27.5334.0, nki 0.6.0" in said
    assert "No module named 'torch_neuronx'" in said and "/opt/aws_neuronx_venv_torch_neuronx_2_14_0" in said
    with pytest.raises(UserError, match="'neuron.route' is xla, but torch-xla with the XLA torch-neuronx"):
        neuron_setup.choose_route("xla", TORCHNEURON)


def test_since_sdk_2_34_trn2_and_trn3_never_take_the_xla_route():
    """PyTorch/XLA inference ended on trn2 and trn3 with Neuron SDK 2.34: an explicit `route: xla` there is one
    sentence naming the change, and auto does not fall back to torch-xla; trn1 and inf2 keep the route."""
    for target in ("trn2", "trn3"):
        with pytest.raises(UserError, match=rf"'neuron.route' is xla, but the target is {target}: Neuron SDK 2.34"):
            neuron_setup.choose_route("xla", XLA, target)
        with pytest.raises(UserError, match="auto does not fall back to torch-xla"):
            neuron_setup.choose_route("auto", XLA, target)
        assert neuron_setup.choose_route("auto", TORCHNEURON, target)[0] == "torchneuron"
    for target in ("trn1", "inf2", None):
        assert neuron_setup.choose_route("auto", XLA, target)[0] == "xla"
        assert neuron_setup.choose_route("xla", XLA, target)[0] == "xla"


@pytest.mark.workflow  # a child importing torch per case
@pytest.mark.parametrize("which, route", [("torchneuron", "torchneuron"), ("xla", "xla"), ("none", None)])
def test_the_package_probe_on_the_standin_environments(tmp_path, monkeypatch, which, route):
    env = {"torchneuron": torchneuron_env(tmp_path), "xla": standin_env(tmp_path)}.get(which)
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"] if env else str(tmp_path))
    probe = neuron_setup.probe_packages()
    if route:
        assert neuron_setup.choose_route("auto", probe)[0] == route
    else:
        with pytest.raises(UserError, match="no route to build a NEFF"):
            neuron_setup.choose_route("auto", probe)


def build(tmp: Path, spec: dict, out: str, env_extra: dict | None = None, **opts) -> dict:
    env = {**os.environ, **torchneuron_env(tmp), **(env_extra or {})}
    argv = [str(BIN / "neuronsweep"), "build", "--backend", "neuron", "--spec", json.dumps(spec)]
    argv += ["--options", json.dumps(opts), "--out", str(tmp / out)]
    host = json.dumps({"cache_dir": str(tmp / "cache"), "device_lock": str(tmp / "device.lock")})
    proc = subprocess.run(argv, capture_output=True, text=True, env={**env, HOST_ENV: host})
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp / out / "build.json").read_text())


def neff_header(path) -> dict:
    return json.loads(Path(path).read_bytes()[5:])


SPEC = {"kind": "matmul", "m": 32, "k": 64, "n": 16, "dtype": "fp32"}


@pytest.mark.slow
@pytest.mark.workflow  # runs the stages' real commands (TorchNeuron builds and captures)
def test_each_build_compiles_in_a_neff_cache_of_its_own_since_torchneurons_key_ignores_the_flags(tmp_path):
    o2 = build(tmp_path, SPEC, "o2")
    o1 = build(tmp_path, SPEC, "o1", optlevel=1)
    assert o2["route"] == o1["route"] == "torchneuron" and o2["target"] == "trn2" and o2["lnc"] == 2
    assert o2["env"]["NEURON_LOGICAL_NC_CONFIG"] == "2" and o2["env"]["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] == "1"
    # TorchNeuron passes the target, the LNC, -O2, --model-type and --auto-cast itself: NEURON_CC_FLAGS carries
    # only what the config changes, and build.json the compiler's whole command line
    own = "--target trn2 --logical-nc-config 2 -O2 --model-type transformer --auto-cast=none"
    assert neff_header(tmp_path / "o2" / "model.neff")["cc_flags"] == own == o2["compiler_flags"]
    assert o2["cc_flags"] == "" and o1["cc_flags"] == "-O1" and o1["compiler_flags"] == f"{own} -O1"
    assert neff_header(tmp_path / "o1" / "model.neff")["cc_flags"] == f"{own} -O1"
    assert o1["neff_cache"] != o2["neff_cache"] and not o2["recompiled_on_second_call"]
    assert o2["correctness"]["correct"] and o2["correctness"]["max_rel_error"] < 1e-6
    assert o2["capture_inputs"] is None  # the NEFF's input names are its own, not the PyTorch arguments
    # the same graph with other flags in one shared folder: the real cache hands back the first NEFF
    shared = tmp_path / "shared"
    shutil.copytree(o2["neff_cache"], shared)
    env = {**os.environ, **torchneuron_env(tmp_path), **{k: v for k, v in o1["env"].items()}}
    env["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(shared)
    child = ["-m", "neuronsweep.backends.programs.torchneuron_program", "--spec", json.dumps(SPEC)]
    child += ["--out", str(tmp_path / "r.json"), "--neff-cache", str(shared)]
    subprocess.run([str(BIN / "python"), *child], check=True, env=env, capture_output=True)
    assert json.loads((tmp_path / "r.json").read_text())["first_call"] == []  # nothing compiled: a stale -O2 NEFF


@pytest.mark.workflow  # runs the stages' real commands (TorchNeuron builds and captures)
def test_an_inherited_neff_cache_switch_does_not_hide_the_neff_and_lnc_1_runs_per_process(tmp_path):
    record = build(tmp_path, SPEC, "b", env_extra={"TORCH_NEURONX_NEFF_DISABLE_CACHE": "1"}, lnc=1)
    assert record["lnc"] == 1 and record["slot_lnc"] == 2 and record["env"]["NEURON_LOGICAL_NC_CONFIG"] == "1"
    assert (
        neff_header(tmp_path / "b" / "model.neff")["lnc"] == 1 and record["visible_cores"] == "0-7"
    )  # 4 logical = 8 physical
    # a capture that names an input the NEFF does not declare is refused, as the runtime would
    env = {**os.environ, **torchneuron_env(tmp_path), "NEURON_LOGICAL_NC_CONFIG": "1"}
    (tmp_path / "a.npy").write_bytes(b"")
    argv = ["neuron-explorer", "capture", "-n", str(tmp_path / "b" / "model.neff"), "-s", str(tmp_path / "p.ntff")]
    proc = subprocess.run([*argv, "a", str(tmp_path / "a.npy")], capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and "input 'a' is not an input of model.neff (its inputs: input0, input1" in proc.stderr


@pytest.mark.workflow  # runs the stages' real commands (TorchNeuron builds and captures)
def test_a_graph_that_compiles_again_on_the_second_call_is_flagged(tmp_path):
    record = build(tmp_path, {**SPEC, "varies": "python_int"}, "varies")
    assert record["recompiled_on_second_call"] and "recompiled on a repeated call" in record["recompilation_flag"]


@pytest.mark.slow
@pytest.mark.workflow  # runs the stages' real commands (TorchNeuron builds and captures)
@pytest.mark.parametrize("model_trace", ["0", "1"])
def test_a_neff_the_profiler_refuses_is_profiled_by_the_runtimes_inspect_mode(tmp_path, model_trace):
    """The pages disagree on which inspect mode a PyTorch-native process needs: model mode first (the
    get-started page's reading, STANDIN_INSPECT_MODEL_TRACE=1), session mode where model wrote no device
    trace (the distributed how-to's reading for PJRT runtimes, the stand-in's default)."""
    build(tmp_path, SPEC, "build")
    knobs = {"STANDIN_REFUSE_TORCH_COMPILE": "1", "STANDIN_INSPECT_MODEL_TRACE": model_trace}
    env = {**os.environ, **torchneuron_env(tmp_path, **knobs)}
    env[HOST_ENV] = json.dumps({"cache_dir": str(tmp_path / "cache"), "device_lock": str(tmp_path / "device.lock")})
    opts = json.dumps({"profiler": "neuron-explorer"})
    capture = [str(BIN / "neuronsweep"), "capture", "--build", str(tmp_path / "build"), "--out", str(tmp_path / "cap")]
    capture += ["--warmup", "1", "--iterations", "3", "--repeats", "1", "--num-exec", "3", "--nth-exec", "3"]
    subprocess.run([*capture, "--options", opts], check=True, env=env, capture_output=True)
    record = json.loads((tmp_path / "cap" / "capture.json").read_text())
    assert "NEFF load error" in record["capture_refused"] and record["profiler"].startswith("Neuron Runtime inspect")
    if model_trace == "1":
        assert record["inspect_mode"] == "model" and record["ntff_written_as"].endswith("_instid_0_vnc_0.ntff")
        assert record["inspect_env"]["NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP"] == "2"
    else:
        assert record["inspect_mode"] == "session" and record["ntff_written_as"] == "profile_nc_0_session_0.ntff"
        assert record["inspect_modes_tried"]["model"].startswith("no device trace")
        assert "NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP" not in record["inspect_env"]  # model-only
        assert "every execution" in record["profile_scope"]
    assert record["latency"]["n"] == 3
    view = [str(BIN / "neuronsweep"), "view", "--capture", str(tmp_path / "cap"), "--out", str(tmp_path / "view")]
    subprocess.run([*view, "--options", opts], check=True, env=env, capture_output=True)
    assert json.loads((tmp_path / "view" / "summary.json").read_text())["model_flops"] == 2 * 32 * 64 * 16
    extract = [str(BIN / "neuronsweep"), "extract", "--summary-json", str(tmp_path / "view" / "summary.json")]
    extract += ["--capture-json", str(tmp_path / "cap" / "capture.json"), "--out", str(tmp_path / "m.json")]
    subprocess.run(extract, check=True, env=env, capture_output=True)
    note = json.loads((tmp_path / "m.json").read_text())["notes"].get("profile_total_time_s", "")
    assert ("every execution" in note) == (model_trace == "0")  # a session profile holds several executions
    # DGE notifications by default, in inspect mode by the runtime's variable: the Memory Tracker's view
    # takes this capture (no --enable-dge-notifs in an argv it never had)
    assert record["dge_notifications"] and record["inspect_env"]["NEURON_RT_ENABLE_DGE_NOTIFICATIONS"] == "1"
    tracker = json.dumps({"profiler": "neuron-explorer", "memory_tracker": True})
    subprocess.run([*view[:-1], str(tmp_path / "view-tracker"), "--options", tracker], check=True, env=env)


def neff_file(path: Path, **header) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"NEFF\0" + json.dumps(header).encode())
    return path


def test_inspect_outputs_pair_as_each_modes_layout_shows_them(tmp_path):
    """model: neff_<h>.neff beside <h>_instid_0_vnc_<c>.ntff (get-started); session: neff_<h>_vnc_<c>.neff
    beside profile_nc_<c>_session_0.ntff under <instance>_pid_<pid>/<timestamp>/ (the capture how-to)."""
    from neuronsweep.backends.neuron_profiler import pair_inspect_outputs

    ours = neff_file(tmp_path / "build.neff", uuid="a")
    model = tmp_path / "model" / "i-0_pid_7"
    neff_file(model / "neff_123.neff", uuid="a")
    (model / "123_instid_0_vnc_0.ntff").write_bytes(b"NTFF")
    neff_file(model / "neff_456.neff", uuid="b")  # another NEFF of the process, with its own profile
    (model / "456_instid_0_vnc_0.ntff").write_bytes(b"NTFF")
    assert pair_inspect_outputs(tmp_path / "model", ours, "model").name == "123_instid_0_vnc_0.ntff"
    session = tmp_path / "session" / "i-0_pid_7" / "20261125_101010"
    neff_file(session / "neff_123_vnc_2.neff", uuid="a")
    (session / "profile_nc_2_session_0.ntff").write_bytes(b"NTFF")
    (session / "profile_nc_3_session_0.ntff").write_bytes(b"NTFF")  # another core's
    assert pair_inspect_outputs(tmp_path / "session", ours, "session").name == "profile_nc_2_session_0.ntff"
    assert pair_inspect_outputs(tmp_path / "session", ours, "model") is None  # no model layout there
    other = neff_file(tmp_path / "other.neff", uuid="c")  # another compilation of the same graph
    with pytest.raises(UserError, match="belong to NEFFs of another compilation"):
        pair_inspect_outputs(tmp_path / "session", other, "session")


def sweep_config(tmp: Path, route: str) -> dict:
    """The smoke sweep and the llm-buckets sweep in one run: the up and gate projections at decode, batch 1,
    which share one GEMM (the full bucket grid is 10.6 h of CPU time on the stand-in), of the example's
    llama-8b shrunk 8x (its 4096 x 14336 bf16 GEMM took 20 s a capture on the stand-in's CPU)."""
    smoke = yaml.safe_load((REPO / "config/examples/smoke.yaml").read_text())
    llm = yaml.safe_load((REPO / "config/examples/llm-buckets.yaml").read_text())["suites"]["llm"]
    llm.update(batch=[1], seq=[128], phases=["decode"], projections=["ffn_up", "ffn_gate"])
    [model] = llm["models"]
    model.update(hidden=model["hidden"] // 8, intermediate=model["intermediate"] // 8)
    cfg = neuron_config(tmp, capture=smoke["capture"] | {"device_lock": str(tmp / "device.lock"), "repeats": 1})
    cfg["suites"] = {**smoke["suites"], "llm": llm}
    cfg["neuron"]["route"] = route
    return cfg


@pytest.mark.slow
@pytest.mark.workflow
@pytest.mark.parametrize("route, knobs", [("torchneuron", "trn2")])  # xla on inf2: test_suites' every-suite sweep
def test_smoke_and_llm_buckets_sweeps_on_each_route(tmp_path, route, knobs):
    env = torchneuron_env(tmp_path) if route == "torchneuron" else standin_env(tmp_path)
    run = snakemake(tmp_path, config=sweep_config(tmp_path, "auto"), env=env)
    assert f"neuron.route auto -> {route}" in run.output and f"neuron.target auto -> {knobs}" in run.output
    summary = pd.read_csv(tmp_path / "results" / "t" / "summary.csv")
    assert set(summary["status"]) == {"ok"} and len(summary) == 4, summary[["scenario_id", "status"]]
    assert summary["workload_id"].nunique() == 3  # up and gate: one build, one capture
    assert summary["profile_total_time_s"].gt(0).all() and summary["latency_median_s"].gt(0).all()
    builds = [
        json.loads(p.read_text()) for p in (tmp_path / "results" / "t").glob("neuron/workloads/*/build/build.json")
    ]
    assert {b["route"] for b in builds} == {route} and {b["target"] for b in builds} == {knobs}
    plan = json.loads((tmp_path / "results" / "t" / "plan.json").read_text())
    assert plan["neuron_setup"]["route"].startswith(f"neuron.route auto -> {route}")


@pytest.mark.slow
@pytest.mark.workflow
def test_collectives_on_torchneuron_run_a_rank_per_core_of_the_slot_and_are_profiled_both_ways(tmp_path, field_test):
    """torch.distributed backend `neuron` under torchrun: every rank on its own core of the slot (the
    stand-in, as TorchNeuron, would put rank r on core r and every rank would claim the whole slot
    otherwise), the collective compiled into rank 0's NEFF, captured by the profiler (all_gather, swept
    here) or, where it refuses the NEFF, by the runtime's inspect mode on every rank (all_reduce: the field
    test's sweep, the same case on the same stand-in), viewed per rank and combined, timed per rank."""
    cfg = neuron_config(
        tmp_path, suites={"collectives": {"operations": ["all_gather"], "sizes": [4096], "world_sizes": [2]}}
    )
    cfg["neuron"]["route"] = "auto"
    snakemake(tmp_path, config=cfg, env=torchneuron_env(tmp_path, STANDIN_FAIL_MATCH="allreduce"))
    field = field_test["out"] / "work" / "results" / "field-test"
    for run, op, funcol, how, iterations in [
        (field, "all_reduce", "all_reduce", "inspect/session", 10),
        (tmp_path / "results" / "t", "all_gather", "all_gather_into_tensor", "raw", 3),
    ]:
        summary = pd.read_csv(run / "summary.csv").set_index("scenario_id")
        row = summary[summary["op"] == op].iloc[0]
        assert row["status"] == "ok" and row["busbw_bytes_per_s"] > 0, (op, row["reason"])
        case = run / "neuron" / "workloads" / row["workload_id"]
        build = json.loads((case / "build" / "build.json").read_text())
        assert build["route"] == "torchneuron" and Path(build["neff_cache"]).name == "rank_0"
        assert [p["phase"] for p in build["candidates"]] == ["first call"]
        assert [o for o, _ in neff_header(case / "build" / "model.neff")["ops"]] == [funcol, "wait_tensor"]
        cap = json.loads((case / "capture" / "capture.json").read_text())
        lo = int(cap["device_span"]["cores"].split("-")[0])  # the first core of the slot the capture held
        assert sorted(int(r["core"]) for r in cap["rank_latency"]) == [lo, lo + 1]
        assert cap["latency"]["n"] == iterations and cap["latency"]["recompiles_during_timing"] == 0
        assert [r["ntff"] for r in cap["ranks"]] == ["profile_rank_0.ntff", "profile_rank_1.ntff"]
        assert cap.get("session_dir", "raw") == how
        if how.startswith("inspect"):
            assert "NEFF load error" in cap["capture_refused"] and cap["inspect_mode"] == "session"
            assert [r["written_as"] for r in cap["ranks"]] == ["inspect/session/rank_0", "inspect/session/rank_1"]
            # every rank compiled its own NEFF (a uuid per compilation): each rank's profile pairs with its own
            neffs = [neff_header(r["neff"]) for r in cap["ranks"]]
            assert neffs[0]["uuid"] != neffs[1]["uuid"] and build["rank_neffs"] == [r["neff"] for r in cap["ranks"]]
        else:
            assert cap["argv"][cap["argv"].index("--collectives-workers-per-node") + 1] == "2"
        view = json.loads((case / "view" / "view.json").read_text())
        assert len({r["nc_idx"] for r in view["ranks"]}) == 2 and view["session"]["device_pftraces"]
        assert json.loads((case / "metrics.json").read_text())["correct"] is True  # every rank, against NumPy


@pytest.mark.workflow
def test_a_configured_target_the_machine_is_not_is_refused_before_any_job(tmp_path):
    cfg = neuron_config(tmp_path, calibrated=False)
    cfg["neuron"]["target"] = "trn1"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        snakemake_argv(tmp_path, "-n"), capture_output=True, text=True, env={**os.environ, **torchneuron_env(tmp_path)}
    )
    assert proc.returncode != 0 and not (tmp_path / "results").exists()
    assert "config key 'neuron.target' is trn1, but this machine is a trn2.48xlarge" in proc.stdout + proc.stderr


def test_doctor_says_which_target_and_lnc_it_resolved_from_neuron_ls():
    from neuronsweep.doctor import instance_line

    trn2 = real_machine("neuron-ls-trn2.48xlarge-one-device")
    line = instance_line(options(), trn2)
    assert line == "target trn2 (neuron-ls: trn2.48xlarge), runtime LNC 2: 4 logical NeuronCores = 8 physical"
    assert instance_line(options(lnc=1), trn2).endswith("; processes run at LNC 1 (neuron.lnc)")
    assert instance_line(options(), real_machine("neuron-ls-inf2.xlarge")).startswith("target inf2 (neuron-ls: inf2")
    assert "config key 'neuron.target' is trn1" in instance_line(options(target="trn1"), trn2)


NKI_SPEC = {"kind": "matmul", "m": 256, "k": 256, "n": 1024, "dtype": "bf16", "impl": "nki"}


def test_nki_0_7_cases_on_trn1_or_inf2_and_grid_points_that_unroll_too_far_are_unsupported():
    from neuronsweep import kernels, workloads
    from neuronsweep.host.targets import onchip

    assert kernels.unsupported(NKI_SPEC, "trn2", (0, 7, 0)) is None
    assert kernels.unsupported(NKI_SPEC, "inf2", (0, 5, 0)) is None  # SDK 2.31's nki still compiles for inf2
    why = kernels.unsupported(NKI_SPEC, "inf2", (0, 7, 0))
    assert why.startswith("NKI 0.7.0 (SDK 2.33+) is documented for Trn2 and Trn3 only (the NKI FAQ: since SDK 2.29")
    assert "the 2.33.1 nki.jit page still lists trn1 and inf2" in why and "this run's target is inf2" in why
    huge = {**NKI_SPEC, "m": 16384, "k": 16384, "n": 16384}  # 128 x 128 x 32 tiles
    assert "would unroll 524288 matmul instructions over all its tiles" in kernels.unsupported(huge, "trn2", (0, 5, 0))
    assert kernels.unsupported(huge, "trn2", (0, 7, 0), chip=onchip("trn2")) is None  # 0.7: M on the device
    # a device loop's body is bounded by what it keeps on chip (NKI Dynamic Loops), not by a count of its
    # instructions: a body of 512 x 32 tiles, refused before as 16384 matmuls, holds a few tiles at a time
    deep = {**huge, "k": 65536}
    assert kernels.unsupported(deep, "trn2", (0, 7, 0), chip=onchip("trn2")) is None
    mlp = {"kind": "mlp", "b": 1, "s": 512, "h": 1024, "i": 512, "dtype": "bf16", "impl": "nki"}
    assert (
        kernels.for_spec(mlp).unrolled(workloads.record(mlp)) == 3 * 8 * 4
        and kernels.unsupported(mlp, "trn2", (0, 7, 0)) is None
    )
    # the MLP's intermediate (I/128 tiles of 512 tokens) is part of its body: 200 KiB of it fits a trn2
    # partition (224 KiB, trainium2_arch.rst) and not a NeuronCore-v2's (192 KiB) nor, unrolled, half of one
    wide = {**mlp, "i": 128 * 200}
    assert kernels.unsupported(wide, "trn2", (0, 7, 0), chip=onchip("trn2")) is None
    why = kernels.unsupported(wide, "trn2", (0, 7, 0), chip=onchip(None))  # no target known: the smallest
    assert why.startswith("one body of the NKI mlp kernel's device loop keeps 210 KiB of SBUF live per partition, ")
    assert "over the 192 KiB a partition holds on trn1" in why and "trainium_inferentia2_arch.rst" in why
    assert "over half of its 196608" in kernels.unsupported(wide, "trn2", (0, 5, 0))  # no device loop: as before
    too_wide = {**mlp, "i": 128 * 224}
    assert "over the 224 KiB a partition holds on trn2" in kernels.unsupported(
        too_wide, "trn2", (0, 7, 0), chip=onchip("trn2")
    )
    assert kernels.unsupported(too_wide, "trn3", (0, 7, 0), chip=onchip("trn3")) is None  # 256 KiB on v4


@pytest.mark.workflow  # runs the stages' real commands (an NKI build on the stand-in)
def test_nki_0_7_kernels_loop_on_the_device_with_fori_loop_not_the_deprecated_iterators(tmp_path):
    """NKI 0.7 deprecates nl.affine_range/sequential_range/static_range (plain Python range, unrolled when
    traced) and names nl.fori_loop its compiled loop: our kernel's M loop runs there (two tiles of 128 here),
    build.json says so, and the output is right. The stand-in of SDK 2.33 warns and records any deprecated
    call in the NEFF, and every fori_loop, as a check on our kernels. An inherited NKI_COMPILER_FRONTEND=custom
    (deprecated in 2.33; its NkiScalar-less frontend refuses the loop) is not passed on to the build."""
    record = build(tmp_path, NKI_SPEC, "nki", env_extra={"NKI_COMPILER_FRONTEND": "custom"})
    assert record["route"] == "nki" and record["correctness"]["correct"]
    assert record["nki_loops"].startswith("nl.fori_loop over the outer tiles")
    header = neff_header(tmp_path / "nki" / "model.neff")
    assert "deprecated_calls" not in header and header["device_loops"] == [[0, 2, 1]]
    env = {**os.environ, **torchneuron_env(tmp_path)}
    probe = "import nki.language as nl; list(nl.affine_range(2)); print(nl.DEPRECATED_CALLS)"
    out = subprocess.run([str(BIN / "python"), "-W", "ignore", "-c", probe], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "['nl.affine_range']", out.stderr  # the stand-in does catch the old iterator
