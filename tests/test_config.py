"""Config validation: defaults filled, and every mistake a user can make ends in one sentence naming the key."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from helpers import BIN, REPO, snakemake_argv

from neuronsweep.config import schema as config
from neuronsweep.errors import UserError

MINIMAL = {"suites": {"matmul": {"shapes": [{"m": 1, "k": 2, "n": 3}]}}}


def test_defaults_are_filled():
    cfg = config.validate(MINIMAL)
    assert cfg["run"] == "default" and cfg["backend"] == "auto"
    assert cfg["capture"] == {
        "warmup": 5,
        "iterations": 30,
        "repeats": 3,
        "rounds_in_processes": False,
        "num_exec": 2,
        "nth_exec": 2,
        "device_lock": "/tmp/neuron-sweep-device.lock",
        "slots": "auto",
        "isolation": "chip",
    }
    assert (
        cfg["neuron"]["profiler"] == "auto" and cfg["neuron"]["target"] == "auto" and cfg["neuron"]["route"] == "auto"
    )
    assert cfg["suites"]["matmul"]["dtype"] == ["fp32"]
    assert "capture" not in MINIMAL  # the caller's dict is not modified


@pytest.mark.parametrize(
    "patch, expected",
    [
        ({"capture": {"warmup": "five"}}, "key 'capture.warmup' must be of type integer, not 'five'"),
        ({"capture": {"iterations": 0}}, "key 'capture.iterations' must be at least 1, not 0"),
        (
            {"capture": {"warmp": 3}},
            "unknown key 'capture.warmp'; allowed keys here are device_lock, isolation, iterations, nth_exec, "
            "num_exec, repeats, rounds_in_processes, slots, warmup",
        ),
        ({"bakend": "cpu"}, "unknown key 'bakend'"),
        ({"backend": "gpu"}, "key 'backend' must be one of auto, cpu, neuron, xla, not 'gpu'"),
        (
            {"neuron": {"target": "trn4"}},
            "key 'neuron.target' must be one of auto, trn1, trn1n, trn2, trn3, inf2, not 'trn4'",
        ),
        ({"run": "a b"}, "key 'run' = 'a b' must be a plain name"),
        ({"capture": {"slots": 0}}, "key 'capture.slots'"),
        ({"capture": {"isolation": "rack"}}, "key 'capture.isolation' must be one of chip, core, not 'rack'"),
        ({"capture": {"num_exec": 2, "nth_exec": 3}}, "'capture.nth_exec' (3) must not exceed 'capture.num_exec' (2)"),
        ({"suites": {"matmul": {"dtype": ["fp32"]}}}, "suite 'suites.matmul' needs a 'grid' or a 'shapes' list"),
        (
            {"suites": {"matmul": {"grid": {"m": [1], "k": [1]}}}},
            "key 'suites.matmul.grid' is missing the required entry 'n'",
        ),
        (
            {"suites": {"matmul": {"shapes": [{"m": 0, "k": 1, "n": 1}]}}},
            "key 'suites.matmul.shapes.0.m' must be at least 1",
        ),
        (
            {"suites": {"matmul": {"shapes": [{"m": 1, "k": 1, "n": 1}], "dtype": ["int8"]}}},
            "key 'suites.matmul.dtype.0' must be one of fp32, bf16, fp16",
        ),
        ({"suites": {}}, "key 'suites' must not be empty"),
    ],
)
def test_bad_config_is_one_sentence_naming_the_key(patch, expected):
    with pytest.raises(UserError) as err:
        config.validate({**MINIMAL, **patch}, source="my.yaml")
    message = str(err.value)
    assert message.startswith("my.yaml: ")
    assert expected in message
    assert "\n" not in message


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(UserError, match="no such config file"):
        config.load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("suites: [\n")
    with pytest.raises(UserError, match="not valid YAML at line"):
        config.load(bad)


def test_shipped_configs_are_valid():
    for path in [REPO / "config/config.yaml", *sorted((REPO / "config/examples").glob("*.yaml"))]:
        config.load(path)


@pytest.mark.workflow
def test_snakemake_rejects_a_bad_config_before_any_job(tmp_path):
    cfg = {**MINIMAL, "capture": {"iterations": -1}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        snakemake_argv(tmp_path, "--cores", "1"),
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "key 'capture.iterations' must be at least 1, not -1" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


def test_cli_plan_error_is_one_line_with_exit_2(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({**MINIMAL, "capture": {"num_exec": 1}}))
    proc = subprocess.run(
        [str(BIN / "neuronsweep"), "plan", "--config", str(tmp_path / "c.yaml")], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"neuronsweep: error: {tmp_path / 'c.yaml'}: key 'capture.nth_exec' (2) must not exceed "
        "'capture.num_exec' (1); raise num_exec or lower nth_exec."
    ]


@pytest.mark.workflow
def test_backend_xla_without_torch_xla_stops_with_the_install_command(tmp_path):
    import importlib.util

    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch-xla is installed here")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**MINIMAL, "backend": "xla"}))
    proc = subprocess.run(
        snakemake_argv(tmp_path, "--cores", "1"),
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "config key 'backend' is xla, but torch-xla is not installed" in proc.stdout + proc.stderr
    assert 'pip install -e ".[xla,workflow]"' in proc.stdout + proc.stderr


def test_cli_defaults_are_the_schema_defaults_and_the_exec_check_is_one_rule(tmp_path):
    from neuronsweep import cli
    from neuronsweep.backends.processes import DEFAULT_TIMEOUT_S
    from neuronsweep.host.devicelock import DEFAULT_LOCK

    schema_cfg = config.validate(MINIMAL)
    args = cli.parser().parse_args(["capture", "--build", "b", "--out", "o"])
    for key in ("warmup", "iterations", "repeats", "num_exec", "nth_exec", "device_lock", "slots", "isolation"):
        assert getattr(args, key) == schema_cfg["capture"][key], key
    assert args.timeout == schema_cfg["timeouts"]["capture"] == DEFAULT_TIMEOUT_S["capture"]
    assert DEFAULT_LOCK == schema_cfg["capture"]["device_lock"]
    assert cli.parser().parse_args(["build", "--spec", "{}", "--out", "o"]).cache_dir == schema_cfg["cache_dir"]
    proc = subprocess.run(
        [
            str(BIN / "neuronsweep"),
            "capture",
            "--build",
            str(tmp_path),
            "--out",
            str(tmp_path / "c"),
            "--num-exec",
            "2",
            "--nth-exec",
            "3",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "neuronsweep: error: capture: flag '--nth-exec' (3) must not exceed '--num-exec' (2); "
        "raise --num-exec or lower --nth-exec."
    )
