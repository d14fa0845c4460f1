"""Warm start (neuronsweep/warmstart.py): a stage command forked from the run's server has the outcome
it has on its own (exit status, messages, outputs); the server takes only what a fresh interpreter
would run alike and the command runs on its own otherwise; a command dies with its job."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from helpers import BIN, REPO, needs, snakemake, tiny_config

from neuronsweep import warmstart
from neuronsweep.config import schema
from neuronsweep.config.run_config import RunConfig
from neuronsweep.config.settings import HOST_ENV
from neuronsweep.stages.plan import make_plan

# every test here runs the workflow's stage commands (or a whole sweep)
pytestmark = [needs("torch"), pytest.mark.workflow]

# A user's function that says, when its module is imported, which process imported it and that
# process's parent; with SPY_SLEEP set it then waits, as a long compile would.
SPY = """import json, os, time
import psutil
import torch

me = psutil.Process()
if "SPY_FILE" in os.environ and "neuronsweep.workloads.custom_probe" not in me.cmdline():  # not the planner
    with open(os.environ["SPY_FILE"], "a") as out:
        out.write(json.dumps({"pid": me.pid, "parent_pid": me.ppid(), "parent": me.parent().cmdline()}) + "\\n")
    time.sleep(float(os.environ.get("SPY_SLEEP", "0")))


def double(x):
    return x * 2
"""


def spy_entry(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spy.py").write_text(SPY)
    return {"name": "spy", "function": f"{folder}/spy.py:double", "inputs": {"x": [8, 8]}, "flops": 64}


def spied(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.fixture
def server(tmp_path):
    """A warm server whose parent is this test, as Snakemake is a run's; finished at the end. Its socket
    listens as start() returns, so a job started at once waits for the server's imports instead of
    running alone (a sweep's first jobs did, under load)."""
    value = warmstart.start(os.getpid())
    assert Path(value.partition(":")[2]).is_socket()
    yield value
    warmstart.stop(value)


def build_argv(tmp_path: Path, out: Path) -> list[str]:
    cfg = schema.validate(tiny_config(tmp_path, suites={"custom": [spy_entry(tmp_path / "k")]}), base=tmp_path)
    [spec] = make_plan(RunConfig.of(cfg), "cpu").workloads.values()
    return [
        str(BIN / "neuronsweep"),
        "build",
        "--backend",
        "cpu",
        "--spec",
        json.dumps(spec),
        "--options",
        "{}",
        "--out",
        str(out),
    ]


def job_env(tmp_path: Path, server: str | None, cache: str = "cache", **extra: str) -> dict:
    env = {**os.environ, "SPY_FILE": str(tmp_path / "spy.jsonl"), **extra}
    env[HOST_ENV] = json.dumps({"cache_dir": str(tmp_path / cache), "device_lock": str(tmp_path / "lock")})
    env.pop(warmstart.ENV, None)
    if server:
        env[warmstart.ENV] = server
    return env


@pytest.mark.slow
def test_a_stage_runs_in_a_child_of_the_server_with_the_outcome_it_has_alone(tmp_path, server):
    argv = build_argv(tmp_path, tmp_path / "warm")
    warm = subprocess.run(argv, env=job_env(tmp_path, server), capture_output=True, text=True, timeout=120)
    [record] = spied(tmp_path / "spy.jsonl")
    assert warm.returncode == 0, warm.stderr
    assert "neuronsweep.warm.server" in " ".join(record["parent"])  # forked by the server, not this job
    assert "build custom-spy" in warm.stdout  # its progress line reached the job's own stdout

    argv[-1] = str(tmp_path / "alone")
    alone = subprocess.run(argv, env=job_env(tmp_path, None, "cache2"), capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    builds = [json.loads((tmp_path / d / "build.json").read_text()) for d in ("warm", "alone")]
    assert not builds[0]["cache"]["hit"] and not builds[1]["cache"]["hit"]  # each exported it
    import torch

    graphs = [torch.export.load(tmp_path / d / builds[0]["artifact"]).graph_module.code for d in ("warm", "alone")]
    assert graphs[0] == graphs[1]  # the same program (the archive's bytes differ between any two exports)

    bad = [*argv[:5], json.dumps({"kind": "matmul", "m": 0}), *argv[6:]]
    failed = [
        subprocess.run(bad, env=job_env(tmp_path, s), capture_output=True, text=True, timeout=120)
        for s in (server, None)
    ]
    assert failed[0].returncode == failed[1].returncode != 0
    assert failed[0].stderr.splitlines()[-1] == failed[1].stderr.splitlines()[-1]


@pytest.mark.slow
def test_a_job_with_other_import_time_settings_runs_on_its_own(tmp_path, server):
    argv = build_argv(tmp_path, tmp_path / "b")
    proc = subprocess.Popen(
        argv,
        env=job_env(tmp_path, server, OMP_SCHEDULE="static"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert [r["pid"] for r in spied(tmp_path / "spy.jsonl")] == [proc.pid]  # in the job's own process


def test_without_a_server_on_this_host_nothing_is_handed_over(tmp_path, monkeypatch):
    """None: the command then runs in the job's own process (warmstart.main)."""
    for value in (f"another-host:{tmp_path}/s.sock", f"{socket.gethostname()}:{tmp_path}/none.sock", ""):
        monkeypatch.setenv(warmstart.ENV, value)
        assert warmstart._through_server(["build", "--help"]) is None
    monkeypatch.setenv(warmstart.OFF, "0")
    assert warmstart.start(os.getpid()) is None


def test_a_socket_path_too_long_for_a_unix_socket_starts_no_server_and_leaves_nothing(tmp_path, monkeypatch):
    """A long TMPDIR: start() cannot bind (108 bytes at most on Linux), so the run's jobs run on their own."""
    long = tmp_path / ("d" * 120)
    long.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(long))
    monkeypatch.delenv(warmstart.OFF, raising=False)
    assert warmstart.start(os.getpid()) is None
    assert not any(long.iterdir())


def test_kill_9_of_a_job_ends_the_command_it_handed_over(tmp_path, server):
    argv = build_argv(tmp_path, tmp_path / "b")
    job = subprocess.Popen(
        argv, env=job_env(tmp_path, server, SPY_SLEEP="120"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(300):
        if spied(tmp_path / "spy.jsonl"):
            break
        time.sleep(0.05)
    [record] = spied(tmp_path / "spy.jsonl")
    assert record["pid"] != job.pid
    job.send_signal(signal.SIGKILL)
    job.wait()
    for _ in range(100):
        if not psutil.pid_exists(record["pid"]):
            break
        time.sleep(0.05)
    assert not psutil.pid_exists(record["pid"])


def test_a_sweep_forks_its_stages_from_its_server_and_stops_it(tmp_path):
    """A real run from a cache without the host probe: the server, started as Snakemake plans, measures
    the probe (no child imports torch for it alone) and every process that imported the user's module was
    a child of that server; when Snakemake ends, so does the server (its socket gone)."""
    cfg = tiny_config(tmp_path, suites={"custom": [spy_entry(tmp_path / "k")]})
    shutil.rmtree(Path(cfg["cache_dir"]) / "host")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(tmp_path, env={"SPY_FILE": str(tmp_path / "spy.jsonl")})
    [probe] = [json.loads(p.read_text()) for p in (Path(cfg["cache_dir"]) / "host").glob("probe-*.json")]
    assert probe["measured_in"] == "the run's warm server"
    assert probe["torch_import_s"] > 0.1 and min(probe["gemm_flops_per_s"].values()) > 0
    records = spied(tmp_path / "spy.jsonl")
    assert records and all("neuronsweep.warm.server" in " ".join(r["parent"]) for r in records)
    [server] = {r["parent_pid"] for r in records}
    for _ in range(100):
        if not psutil.pid_exists(server):
            break
        time.sleep(0.05)
    assert not psutil.pid_exists(server)


def test_a_neuron_runs_server_imports_no_framework_and_serves_its_stages(tmp_path):
    """On neuron the server preloads our stages and readers but never torch (the device programs it
    leaves to fresh interpreters); a stage handed to it runs in its child and ends as it would alone."""
    value = warmstart.start(os.getpid(), "neuron")
    path = Path(value.partition(":")[2])
    try:
        server = psutil.Process(int(Path(f"{path}.pid").read_text()))  # written by start()
        for _ in range(200):
            loaded = Path(f"/proc/{server.pid}/maps").read_text()
            if "duckdb" in loaded:  # the readers extract needs: the preload has finished
                break
            time.sleep(0.05)
        assert "duckdb" in loaded and "libtorch" not in loaded
        plan = tmp_path / "plan.json"
        os.mkfifo(plan)  # the served aggregate blocks reading it, so its process can be seen
        argv = [str(BIN / "neuronsweep"), "aggregate", "--plan", str(plan), "--out", str(tmp_path / "s.csv")]
        argv += ["--targets-out", str(tmp_path / "t.csv")]
        job = subprocess.Popen(argv, env=job_env(tmp_path, value), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(200):
            if server.children():
                break
            time.sleep(0.05)
        assert [c.ppid() for c in server.children()] == [server.pid]  # forked by the server, not this job
        with open(plan, "w") as fifo:
            fifo.write("not json")
        _, err = job.communicate(timeout=60)
    finally:
        warmstart.stop(value)
    plan.unlink()
    plan.write_text("not json")
    alone = subprocess.run(argv, env=job_env(tmp_path, None), capture_output=True, timeout=60)
    assert job.returncode == alone.returncode != 0 and err.splitlines()[-1:] == alone.stderr.splitlines()[-1:]


def test_a_request_is_typed_and_anything_else_is_refused_in_one_line(tmp_path, server):
    """The request a job hands over parses into its fields; a stray connection that sends something else is
    refused with a line in the server's log (never a silent cold start for every job of a buggy server),
    and the server goes on serving. `python -m neuronsweep` enters as the script does."""
    good = warmstart.Request(["build", "--help"], str(tmp_path), {"A": "1"}, ["python"], 7)
    assert warmstart.Request.parse(json.dumps(dataclasses.asdict(good)).encode()) == good
    for bad in (b"not json", b'{"argv": ["build"]}', b'{"argv": [], "cwd": "", "env": {}, "python": [], "pid": 1}'):
        with pytest.raises(ValueError, match="not a request"):
            warmstart.Request.parse(bad)
    # the replies: the child's pid, then its exit status, each read only as the kind the job waits for
    assert warmstart.Reply.read(warmstart.Reply(warmstart.PID, 41).line().decode(), warmstart.PID).value == 41
    assert warmstart.Reply.read("exit 137\n", warmstart.EXIT) == warmstart.Reply(warmstart.EXIT, 137)
    for line in ("", "exit 0\n", "pid\n", "pid x\n", "pid 1 2\n"):  # refused, gone, or not a reply
        assert warmstart.Reply.read(line, warmstart.PID) is None
    path = server.partition(":")[2]
    stray = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stray.connect(path)
    socket.send_fds(stray, [struct.pack("!I", 8)], [0, 1, 2])
    stray.sendall(b"not json")
    assert stray.recv(64) == b""  # closed: nothing ran
    argv = build_argv(tmp_path, tmp_path / "after")
    proc = subprocess.Popen(argv, env=job_env(tmp_path, server), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert spied(tmp_path / "spy.jsonl")[-1]["pid"] != proc.pid  # the server still took it: a child of its own
    main = subprocess.run([sys.executable, "-m", "neuronsweep", "--help"], capture_output=True, text=True)
    assert main.returncode == 0 and "neuronsweep" in main.stdout
    assert "from neuronsweep.warmstart import main" in (REPO / "workflow/neuronsweep/__main__.py").read_text()
