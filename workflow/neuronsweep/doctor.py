"""`neuronsweep doctor`: what this machine has for profiling, and which backend a run would use and why."""

from __future__ import annotations

import platform
import shutil

from neuronsweep import backends
from neuronsweep.backends import nccom_test, neuron, neuron_profiler, neuron_setup
from neuronsweep.backends.build_facts import package_versions
from neuronsweep.backends.cores import default_threads
from neuronsweep.backends.processes import run_tool
from neuronsweep.config import schema as config
from neuronsweep.config.run_config import RunConfig
from neuronsweep.errors import UserError
from neuronsweep.host import caps, devicelock, neuron_ls, slots


def _first_line(argv: list[str]) -> str:
    try:
        proc = run_tool(argv, 60, argv[0], env=neuron_profiler.tool_env())
    except UserError as exc:
        return f"failed to run ({exc})"
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0] if lines else f"no output (exit {proc.returncode})"


def report(config_path: str) -> str:
    """`neuronsweep doctor`'s text: the host, Neuron devices, tools and packages, and what a run of the config
    would use (backend, device lock, instance, slots)."""
    lines = [f"host: {platform.node()} {platform.machine()}, python {platform.python_version()}"]
    count, found = backends.neuron_inventory()
    lines.append(f"neuron devices: {count} ({found})")
    lister = shutil.which("neuron-ls") or shutil.which("neuron-ls", path=backends.NEURON_TOOL_DIR)
    lines.append(f"neuron-ls: {_first_line([lister]) if lister else 'not found'}")
    for tool in backends.PROFILERS:
        path = shutil.which(tool) or shutil.which(tool, path=backends.NEURON_TOOL_DIR)
        lines.append(f"{tool}: {path + ' (' + _first_line([path, '--version']) + ')' if path else 'not found'}")
    nccom = nccom_test.find()
    lines.append(
        f"nccom-test: {nccom or 'not found'} (Neuron's own collectives benchmark: the neuron collectives "
        f"suite {'runs it beside every case' if nccom else 'has no anchor to compare with'})"
    )
    for pkg, version in package_versions(neuron.NEURON_PACKAGES).items():
        lines.append(f"python package {pkg}: {version or 'not installed'}")
    lines.append(f"cpu: {caps.cpu_model()}; relevant flags: {', '.join(caps.cpu_flags()) or 'none'}")
    try:
        cfg = RunConfig.of(config.load(config_path))
        name, why = backends.resolve(cfg.backend)
        lines.append(f"a run of {config_path} would use: {name} ({why})")
        lock = cfg.capture.device_lock
        lines.append(f"device lock {lock}: {devicelock.holder(lock)}")
        lines.append(instance_line(dict(cfg.section("neuron")), neuron_ls.discover()))
        lines.append(_slot_pool(cfg, name))
        lines += _host_rates(cfg)
    except UserError as exc:
        lines.append(f"config: {exc}")
    return "\n".join(lines)


def instance_line(section: dict, machine: neuron_ls.Machine) -> str:
    """What a neuron run would settle here: "target trn2 (neuron-ls: trn2.48xlarge), runtime LNC 2: 4
    logical NeuronCores = 8 physical" (and the processes' LNC where the config sets another)."""
    if not (machine.instance_type or machine.chips):
        return f"neuron target: not settled ({machine.found})"
    try:
        target, lnc, _ = neuron_setup.settle_target(section, machine)
    except UserError as exc:
        return f"neuron target: {exc}"
    runtime = neuron_setup.machine_lnc({**section, "target": target}, machine)
    logical = sum(map(len, machine.chips))
    line = (
        f"target {target} (neuron-ls: {machine.instance_type or 'no instance type'}), runtime LNC {runtime}: "
        f"{logical} logical NeuronCores = {logical * runtime} physical"
    )
    return line + (f"; processes run at LNC {lnc} (neuron.lnc)" if lnc != runtime else "")


def _slot_pool(cfg: RunConfig, backend: str) -> str:
    """How many captures would run at once here, and which NeuronCores each would hold (slots.py)."""
    try:
        found = slots.for_config(cfg, backend)
    except UserError as exc:
        return f"capture slots: {exc}"
    held = [
        f"slot {s.index} (cores {s.visible}): {devicelock.holder(s.locks(cfg.capture.device_lock)[0])}"
        for s in found.slots
        if s.cores
    ][:4]
    return "\n".join([f"capture slots: {found.describe()}", *(f"  {line}" for line in held)])


def _host_rates(cfg: RunConfig) -> list[str]:
    """The cpu backend's probe: each dtype's measured GEMM rate and whether the cpu backend runs it."""
    probe = caps.probe(cfg.cache_dir, default_threads())
    slow = caps.slow_dtypes(probe)
    lines = [f"host GEMM probe ({probe.method}, {probe.threads} threads, measured {probe.measured_at}):"]
    for dtype, rate in probe.gemm_flops_per_s.items():
        verdict = "unsupported on cpu: no fast path" if dtype in slow else "runs on cpu"
        lines.append(f"  {dtype}: {rate / 1e9:.1f} GFLOP/s ({verdict})")
    return lines
