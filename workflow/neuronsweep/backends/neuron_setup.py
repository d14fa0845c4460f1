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

from neuronsweep.errors import UserError
from neuronsweep.host import neuron_ls
from neuronsweep.host.targets import TARGETS, same_chip, target_family

ROUTES = ("torchneuron", "xla")
SETTLED_ENV = "NEURONSWEEP_NEURON_SETTLED"  # what the planner settled, for the jobs that read the Snakefile again
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


def probe_packages() -> dict:
    """The installed Neuron framework packages, and what importing them did, from a child Python."""
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE, *PACKAGES], capture_output=True, text=True, timeout=300)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {"versions": {}, "imports": {"torch": "the package probe did not finish"}}


def _found(probe: dict) -> str:
    versions = {k: v for k, v in probe.get("versions", {}).items() if v}
    listed = ", ".join(f"{k} {v}" for k, v in versions.items()) or "no Neuron framework package"
    failed = probe.get("imports", {}).get("torch_neuronx")
    return listed + (f"; import torch_neuronx failed ({failed})" if failed else "")


def choose_route(requested: str, probe: dict) -> tuple[str, str]:
    """(route, why): auto takes TorchNeuron where torch_neuronx registers the `neuron` device, else the XLA
    route where torch-xla and the XLA torch-neuronx import; a route that cannot run here is refused."""
    torchneuron = bool(probe.get("neuron_device"))
    xla = probe.get("imports", {}).get("torch_neuronx", "absent") is None and probe.get("torch_xla") and not torchneuron
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
    """(target, lnc, why) for this machine: `auto` is the instance family neuron-ls names; a configured
    target or LNC the machine is not is refused, as is an LNC the target's compiler rejects."""
    configured, lnc = options["target"], options["lnc"]
    family = target_family(machine.instance_type)
    where = f"neuron-ls says {machine.instance_type}" if machine.instance_type else machine.found
    if configured == "auto":
        if not family:
            raise UserError(
                f"neuron.target is auto, but neuron-ls does not name a known instance type here ({where}); "
                f"set neuron.target to one of {', '.join(t for t in TARGETS if t != 'trn1n')}."
            )
        target, why = family, f"neuron.target auto -> {family} ({where})"
    else:
        if family and not same_chip(configured, family):
            raise UserError(
                f"config key 'neuron.target' is {configured}, but this machine is a {machine.instance_type} "
                f"({machine.sources.get('instance_type', 'neuron-ls')}); set neuron.target: auto or {family}."
            )
        target, why = configured, f"neuron.target {configured} set in config" + (f" ({where})" if family else "")
    row = TARGETS[target]
    if lnc and machine.lnc and lnc != machine.lnc:
        raise UserError(
            f"config key 'neuron.lnc' is {lnc}, but this machine's runtime runs LNC {machine.lnc} "
            f"({machine.sources.get('lnc')}); the compiler's LNC must equal the runtime's: set neuron.lnc: null "
            f"or {machine.lnc}."
        )
    lnc = lnc or machine.lnc or row.default_lnc
    if lnc not in row.lnc_choices:
        raise UserError(
            f"config key 'neuron.lnc' is {lnc}, but neuronx-cc accepts only LNC {'/'.join(map(str, row.lnc_choices))} "
            f"for {target} (NCC_EARG001); set neuron.lnc: null."
        )
    source = machine.sources.get("lnc") or ("neuron.lnc in config" if options["lnc"] else f"the {target} default")
    return target, lnc, f"{why}, LNC {lnc} ({source})"


def settle(
    options: dict,
    machine: neuron_ls.Machine | None = None,
    probe: dict | None = None,
    check_route: bool = True,
    need_route: bool = True,
) -> tuple[dict, dict]:
    """The neuron section with target, lnc and route settled on this machine, and why each value was taken
    (plan.json, build.json). The target is always checked against neuron-ls (cheap); the packages are
    probed (a child importing torch: seconds) when a route is needed (not for a sweep of NKI kernels only)
    and is auto or `check_route` asks for it."""
    options, why = dict(options), {}
    machine = machine if machine is not None else neuron_ls.discover()
    options["target"], options["lnc"], why["target"] = settle_target(options, machine)
    if need_route and (options["route"] == "auto" or check_route):
        options, route_why = settle_route(options, probe)
        why.update(route_why)
    return options, why


def settle_route(options: dict, probe: dict | None = None) -> tuple[dict, dict]:
    """The section with its route settled from the installed packages, and why (with their versions)."""
    probe = probe if probe is not None else probe_packages()
    route, why = choose_route(options["route"], probe)
    return {**options, "route": route}, {
        "route": why,
        "versions": {k: v for k, v in probe.get("versions", {}).items() if v},
    }


def needs_route(workloads) -> bool:
    """Whether any planned workload is built by a framework (every one but an NKI kernel)."""
    return any(spec.get("impl") != "nki" for spec in workloads)
