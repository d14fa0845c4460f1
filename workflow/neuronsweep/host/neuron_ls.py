"""What `neuron-ls` says of this machine: the instance type, the runtime's logical NeuronCore size (LNC)
and the logical NeuronCore ids of each device. One reader for the device slots, the `target: auto`
resolution and `doctor`.

The JSON form moved: runtime 2.34 announces `neuron-ls --output-format json` (top-level instance fields),
older tools have `--json-output` (a list of devices; 2.30 has no `instance_type` and no
`logical_neuroncore_config` in it, 2.34 puts both on each device). The table's header lines
(`instance-type:`, `logical-neuroncore-config:`) fill what the JSON lacks. The parsers take text, so
the real outputs in tests/data/neuron/tools/ test them directly.

A run asks once: the workflow hands what the tool said to its jobs (MACHINE_ENV, `share_with_jobs`), so
a case's stages read it instead of starting neuron-ls two or three times each, and every job of the run
sees the machine the plan was made for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

NEURON_TOOL_DIR = "/opt/aws/neuron/bin"
JSON_FORMS = (("--output-format", "json"), ("--json-output",))  # newest first
MACHINE_ENV = "NEURONSWEEP_MACHINE"  # what neuron-ls said, as the run's jobs get it (share_with_jobs)


@dataclass(frozen=True)
class Machine:
    """The machine as neuron-ls lists it; None where the listing does not say."""

    instance_type: str | None = None
    lnc: int | None = None  # the runtime's logical NeuronCore config
    chips: tuple[tuple[int, ...], ...] = ()  # logical NeuronCore ids per device
    found: str = "neuron-ls not found"
    sources: dict = field(default_factory=dict)  # which field or line gave each value


def tool() -> str | None:
    """neuron-ls on PATH or in the Neuron tools folder, or None."""
    return shutil.which("neuron-ls") or shutil.which("neuron-ls", path=NEURON_TOOL_DIR)


def _first(items: Iterable, key: str) -> Any:
    for item in items:
        if isinstance(item, dict) and item.get(key) not in (None, ""):
            return item[key]
    return None


def parse_json(text: str) -> tuple[list[dict], dict]:
    """(devices, top-level fields) of either JSON form; ValueError when it is neither."""
    data = json.loads(text)
    if isinstance(data, list):
        return [d for d in data if isinstance(d, dict)], {}
    if isinstance(data, dict):
        for value in data.values():  # the device list under whatever key the newer form uses
            if isinstance(value, list) and value and all(isinstance(d, dict) and "nc_count" in d for d in value):
                return value, {k: v for k, v in data.items() if not isinstance(v, list | dict)}
        return [], data
    raise ValueError("neither a device list nor an object")


def parse_header(text: str) -> dict[str, str]:
    """The `key: value` lines above the table (`instance-type: inf2.xlarge`)."""
    header = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z][a-z-]+):\s*(\S.*)$", line.strip())
        if m:
            header[m.group(1)] = m.group(2).strip()
    return header


def chip_ids(devices: list[dict]) -> tuple[tuple[int, ...], ...]:
    """Each device's logical NeuronCore ids: `neuroncore_ids`, else `nc_count` numbered on from the last."""
    out, next_id = [], 0
    for device in devices:
        ids = device.get("neuroncore_ids") or list(range(next_id, next_id + int(device.get("nc_count") or 0)))
        out.append(tuple(int(i) for i in ids))
        next_id = max([next_id, *[i + 1 for i in out[-1]]])
    return tuple(out)


def machine_from(devices: list[dict], top: dict, header: dict[str, str], how: str) -> Machine:
    """Combine the JSON (per device and top level) with the table's header, JSON first."""
    sources = {}
    instance = top.get("instance_type") or _first(devices, "instance_type")
    if instance:
        sources["instance_type"] = f"{how}: instance_type"
    elif header.get("instance-type"):
        instance = header["instance-type"]
        sources["instance_type"] = "neuron-ls table header: instance-type"
    lnc = top.get("logical_neuroncore_config") or _first(devices, "logical_neuroncore_config")
    if lnc:
        sources["lnc"] = f"{how}: logical_neuroncore_config"
    elif header.get("logical-neuroncore-config", "").isdigit():
        lnc = header["logical-neuroncore-config"]
        sources["lnc"] = "neuron-ls table header: logical-neuroncore-config"
    chips = chip_ids(devices)
    found = f"{how}: {len(chips)} device(s), {sum(map(len, chips))} NeuronCore(s)"
    return Machine(instance, int(lnc) if lnc else None, chips, found, sources)


def _run(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def share_with_jobs() -> None:
    """Ask neuron-ls once for the whole run (Snakemake's process, local execution): this process and every
    job it starts read the answer from MACHINE_ENV. Nothing where there is no neuron-ls."""
    if tool() and not os.environ.get(MACHINE_ENV):
        machine = discover()
        os.environ[MACHINE_ENV] = json.dumps(asdict(machine))


def discover() -> Machine:
    """Ask this machine's neuron-ls: the JSON forms newest first, then the table for its header; within a
    run, what the run asked once (MACHINE_ENV)."""
    shared = os.environ.get(MACHINE_ENV)
    if shared:
        try:
            fields = json.loads(shared)
            return Machine(**{**fields, "chips": tuple(tuple(c) for c in fields["chips"])})
        except (ValueError, TypeError, KeyError):
            pass  # not ours: ask the tool
    path = tool()
    if not path:
        return Machine()
    devices: list[dict] = []
    top: dict = {}
    how, printed = f"{path}: no JSON form answered", []
    for form in JSON_FORMS:
        command = f"{path} {' '.join(form)}"
        text = _run([path, *form])
        if text and text.strip():
            printed.append(f"{command} printed {' '.join(text.split())[:120]!r}")
        try:
            devices, top = parse_json(text) if text else ([], {})
        except ValueError:
            continue
        if devices or (text and text.strip() and not top):  # a device list, empty on a machine without one
            how = command  # machine_from adds how many devices and cores it listed
            break
    else:
        if printed:  # it answered, and no device list was found in what it said: say what
            how = f"no NeuronCore in what neuron-ls printed ({'; '.join(printed)})"
    header = {}
    if not (top.get("instance_type") or _first(devices, "instance_type")):
        header = parse_header(_run([path]) or "")
    return machine_from(devices, top, header, how)
