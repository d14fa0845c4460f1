"""What a neuron run settles before any job: the instance it runs on (target and LNC, from neuron-ls) and
the route that turns a workload into a NEFF (TorchNeuron or torch-xla, from the installed packages).

The planner settles both once on a local run, so a target or LNC the machine is not, or an environment
with no route, is refused in one sentence before any job, and the build's params carry the settled
values (a move to another instance type rebuilds). A job settles what is still `auto` itself (a cluster
node, `neuronsweep build` by hand), with the same rules.

Routes (SDK 2.29-2.33 release notes; docs/neuron.md):
  torchneuron  torch-neuronx >= 2.13 registers a `neuron` device (PrivateUse1) and the `neuron`
               torch.compile backend: SDK 2.33+, trn2 and trn3
  xla          torch-xla with the XLA-based torch-neuronx (last 2.9.0.2.15, SDK 2.31): trn1, inf2 (and
               trn2 up to SDK 2.31)
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from typing import NotRequired, TypedDict

from neuronsweep.errors import UserError
from neuronsweep.host import neuron_ls
from neuronsweep.host.targets import TARGETS, instance_chip, same_chip, target_family
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import uses_nki

ROUTES = ("torchneuron", "xla")
PACKAGES = ("torch", "torch-neuronx", "torch-xla", "libneuronxla", "neuronx-cc", "nki")

# Run in a child: importing torch (and torch_neuronx) in the planner would cost seconds and memory on
# every Snakemake start, and a broken install must not take the planner down with it.
PROBE = r"""
import importlib.metadata as md, importlib.util, json, sys
out = {"python": sys.version.split()[0], "versions": {}, "imports": {}}
for dist in sys.argv[1:]:
    try:
        out["versions"][dist] = md.version(dist)
    except md.PackageNotFoundError:
        out["versions"][dist] = None
def attempt(name):
    try:
        module = __import__(name)
    except BaseException as exc:
        out["imports"][name] = f"{type(exc).__name__}: {exc}".strip()[:300]
        return None
    out["imports"][name] = None
    version = getattr(module, "__version__", None)
    if version and not out["versions"].get(name.replace("_", "-")):
        out["versions"][name.replace("_", "-")] = str(version)
    return module
torch = attempt("torch")
if torch is not None:
    tn = attempt("torch_neuronx")
    registered = torch._C._get_privateuse1_backend_name() == "neuron" and hasattr(torch, "neuron")
    out["neuron_device"] = bool(tn) and registered
    out["torch_xla"] = "torch_xla" in sys.modules or importlib.util.find_spec("torch_xla") is not None
print(json.dumps(out))
"""


class PackageProbe(TypedDict):
    """What the package probe (PROBE, in a child) found: each package's version, what importing torch and
    torch_neuronx did (None: it imported), and whether torch_neuronx registers the neuron device."""

    python: NotRequired[str]
    versions: dict[str, str | None]
    imports: dict[str, str | None]  # module -> the exception importing it raised, or None
    neuron_device: NotRequired[bool]
    torch_xla: NotRequired[bool]


def probe_packages() -> PackageProbe:
    """The installed Neuron framework packages, and what importing them did, from a child Python."""
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE, *PACKAGES], capture_output=True, text=True, timeout=300)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {"versions": {}, "imports": {"torch": "the package probe did not finish"}}


def _found(probe: PackageProbe) -> str:
    versions = {k: v for k, v in probe.get("versions", {}).items() if v}
    listed = ", ".join(f"{k} {v}" for k, v in versions.items()) or "no Neuron framework package"
    failed = probe.get("imports", {}).get("torch_neuronx")
    return listed + (f"; import torch_neuronx failed ({failed})" if failed else "")


def choose_route(requested: str, probe: PackageProbe, target: str | None = None) -> tuple[str, str]:
    """(route, why): auto takes TorchNeuron where torch_neuronx registers the `neuron` device, else the XLA
    route where torch-xla and the XLA torch-neuronx import and the target still runs it (not trn2/trn3 since
    SDK 2.34); a route that cannot run here is refused."""
    torchneuron = bool(probe.get("neuron_device"))
    xla = probe.get("imports", {}).get("torch_neuronx", "absent") is None and probe.get("torch_xla") and not torchneuron
    ended = TARGETS[target].xla_route_ended if target in TARGETS else None
    if requested == "xla" and ended:
        raise UserError(
            f"config key 'neuron.route' is xla, but the target is {target}: {ended}; set neuron.route: torchneuron "
            "(or auto), or keep the xla route for a trn1 or inf2 target."
        )
    if requested == "auto" and ended and xla:
        raise UserError(
            f"neuron.route is auto, and this environment has torch-xla but no TorchNeuron ({_found(probe)}); "
            f"{ended}, so on {target} auto does not fall back to torch-xla: activate TorchNeuron's environment "
            "(torch-neuronx 2.14 with neuronx-cc and nki, or the DLAMI's /opt/aws_neuronx_venv_torch_neuronx_2_14_0)."
        )
    if requested == "torchneuron" and not torchneuron:
        raise UserError(
            f"config key 'neuron.route' is torchneuron, but torch_neuronx registers no neuron device here "
            f"({_found(probe)}); activate TorchNeuron's environment (SDK 2.33+: torch-neuronx 2.13 or 2.14, on "
            "trn2/trn3) or set neuron.route: auto."
        )
    if requested == "xla" and not xla:
        raise UserError(
            f"config key 'neuron.route' is xla, but torch-xla with the XLA torch-neuronx does not import here "
            f"({_found(probe)}); activate a PyTorch/XLA Neuron environment (SDK 2.31 or earlier: torch-neuronx "
            "2.9 with torch-xla 2.9) or set neuron.route: auto."
        )
    if requested != "auto":
        return requested, f"neuron.route {requested} set in config ({_found(probe)})"
    if torchneuron:
        return (
            "torchneuron",
            f"neuron.route auto -> torchneuron: torch_neuronx registers the neuron device ({_found(probe)})",
        )
    if xla:
        return "xla", f"neuron.route auto -> xla: torch-xla and the XLA torch-neuronx import ({_found(probe)})"
    raise UserError(
        f"neuron.route is auto, but this environment has no route to build a NEFF ({_found(probe)}); install "
        "TorchNeuron (SDK 2.33+, trn2/trn3: pip install torch-neuronx==2.14.* neuronx-cc nki from "
        "pip.repos.neuron.amazonaws.com, or the DLAMI's /opt/aws_neuronx_venv_torch_neuronx_2_14_0) or, on "
        "trn1/inf2, the PyTorch/XLA Neuron environment of SDK 2.31 (torch-neuronx 2.9 with torch-xla 2.9)."
    )


def settle_target(options: dict, machine: neuron_ls.Machine) -> tuple[str, int, str]:
    """(target, lnc, why) for this machine: `auto` is the instance family neuron-ls names (trn2n and trn2u
    are trn2: the letters after the generation are the network or packaging, not the chip); a configured
    target the machine is not is refused. The LNC is a per-process runtime setting (Logical NeuronCore
    configuration: NEURON_LOGICAL_NC_CONFIG with --logical-nc-config), so a configured LNC finer than the
    runtime's default runs on the physical cores under the slot's logical ones; refused are only an LNC
    the target's compiler rejects (2 on trn1/inf2, NCC_EARG001) and one coarser than the cores neuron-ls
    numbers (our slots hold the cores neuron-ls lists)."""
    configured, lnc = options["target"], options["lnc"]
    family = target_family(machine.instance_type)
    where = f"neuron-ls says {machine.instance_type}" if machine.instance_type else machine.found
    known = ", ".join(t for t in TARGETS if t != "trn1n")
    if configured == "auto":
        if not family:
            chip = instance_chip(machine.instance_type)
            what = (
                f"{machine.instance_type} is a {chip} instance, which neuron-sweep has no target for"
                if chip
                else f"neuron-ls does not name a Trainium or Inferentia instance type here ({where})"
            )
            raise UserError(f"neuron.target is auto, but {what}; set config key 'neuron.target' to one of {known}.")
        target, why = family, f"neuron.target auto -> {family} ({where})"
    else:
        if family and not same_chip(configured, family):
            raise UserError(
                f"config key 'neuron.target' is {configured}, but this machine is a {machine.instance_type} "
                f"({machine.sources.get('instance_type', 'neuron-ls')}); set neuron.target: auto or {family}."
            )
        target, why = configured, f"neuron.target {configured} set in config" + (f" ({where})" if family else "")
    row = TARGETS[target]
    machine_lnc = machine.lnc or row.default_lnc
    if lnc and lnc not in row.lnc_choices:
        raise UserError(
            f"config key 'neuron.lnc' is {lnc}, but neuronx-cc accepts only LNC {'/'.join(map(str, row.lnc_choices))} "
            f"for {target} (NCC_EARG001); set neuron.lnc: null."
        )
    if lnc and machine.lnc and lnc > machine.lnc:
        raise UserError(
            f"config key 'neuron.lnc' is {lnc}, coarser than the LNC {machine.lnc} this machine's runtime numbers "
            f"its cores at ({machine.sources.get('lnc')}), and the capture slots hold the cores neuron-ls lists; "
            f"set neuron.lnc: null or {machine.lnc}, or start the run with NEURON_LOGICAL_NC_CONFIG={lnc} set."
        )
    lnc = lnc or machine_lnc
    source = "neuron.lnc in config" if options["lnc"] else machine.sources.get("lnc") or f"the {target} default"
    per_process = f", per process on the runtime's LNC {machine_lnc} cores" if lnc != machine_lnc else ""
    return target, lnc, f"{why}, LNC {lnc} ({source}{per_process})"


def machine_lnc(options: dict, machine: neuron_ls.Machine) -> int:
    """The LNC neuron-ls numbers this machine's cores at (the slots' numbering), else the target's default."""
    return machine.lnc or TARGETS[options["target"]].default_lnc


def settle(
    options: dict,
    machine: neuron_ls.Machine | None = None,
    probe: PackageProbe | None = None,
    check_route: bool = True,
    need_route: bool = True,
) -> tuple[dict, dict]:
    """The neuron section with target, lnc and route settled on this machine, and why each value was taken
    (plan.json, build.json). The target is always checked against neuron-ls (cheap); the packages are
    probed (a child importing torch: seconds) when a route is needed (not for a sweep of NKI kernels only)
    and is auto or `check_route` asks for it."""
    options, why = dict(options), dict[str, object]()  # why: sentences, and the machine's LNC
    machine = machine if machine is not None else neuron_ls.discover()
    options["target"], options["lnc"], why["target"] = settle_target(options, machine)
    why["machine_lnc"] = machine_lnc(options, machine)
    if need_route and (options["route"] == "auto" or check_route):
        options, route_why = settle_route(options, probe)
        why.update(route_why)
    return options, why


def settle_route(options: dict, probe: PackageProbe | None = None) -> tuple[dict, dict]:
    """The section with its route settled from the installed packages, and why (with their versions)."""
    probe = probe if probe is not None else probe_packages()
    route, why = choose_route(options["route"], probe, options.get("target"))
    return {**options, "route": route}, {
        "route": why,
        "versions": {k: v for k, v in probe.get("versions", {}).items() if v},
    }


def needs_route(workloads: Iterable[Spec]) -> bool:
    """Whether any planned workload is built by a framework (every one but an NKI kernel)."""
    return any(not uses_nki(spec) for spec in workloads)
