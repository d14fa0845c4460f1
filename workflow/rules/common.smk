# Validation, planning and path helpers shared by every rule file.
import json
import os
import sys
from pathlib import Path

import yaml

from neuronsweep import backends
from neuronsweep import config as ns_config
from neuronsweep.aggregate import run as aggregate_run
from neuronsweep.errors import UserError
from neuronsweep.plan import estimate, plan_for
from neuronsweep.workloads import canonical

# Jobs call the `neuronsweep` CLI installed beside this Snakemake, even when its venv is not
# activated (a conda env from --sdm conda still comes first on PATH inside its jobs).
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

DEFAULT_PROFILE = yaml.safe_load((Path(workflow.basedir) / "workflow/profiles/default/config.yaml").read_text())


def apply_default_profile_resources():
    """Snakemake auto-loads a workflow profile only from profiles/default beside the Snakefile or the
    working directory, never from workflow/profiles/default; so apply its resource limits here
    unless the command line set them (one capture at a time is a correctness rule, not a taste)."""
    for name, limit in DEFAULT_PROFILE.get("resources", {}).items():
        if workflow.global_resources.get(name).value is None:
            workflow.register_resource(name, limit)


def apply_default_profile_keep_going():
    """keep-going from the default profile; execution settings exist only once the scheduler does."""
    scheduler = getattr(workflow, "scheduler", None)
    if DEFAULT_PROFILE.get("keep-going") and scheduler is not None and hasattr(scheduler, "keepgoing"):
        scheduler.keepgoing = True


apply_default_profile_resources()


onstart:
    apply_default_profile_keep_going()


CONFIG_SOURCE = ", ".join(map(str, workflow.configfiles)) or "config"
try:
    CONFIG = ns_config.validate(config, source=CONFIG_SOURCE)
    BACKEND, BACKEND_REASON = backends.resolve(CONFIG["backend"])
    PLAN, HOST_PROBE = plan_for(CONFIG, BACKEND)
except UserError as exc:
    raise WorkflowError(str(exc)) from None
logger.info(BACKEND_REASON)
logger.info(estimate(PLAN, CONFIG, HOST_PROBE))

PLAN_JSON = json.dumps({**PLAN.to_dict(), "backend_reason": BACKEND_REASON}, separators=(",", ":"))
CACHE_DIR = os.path.expanduser(CONFIG["cache_dir"])
CAPTURE = CONFIG["capture"]
ARTIFACT = backends.ARTIFACTS[BACKEND]

# Backend options per stage, as Snakemake params: changing one reruns that stage and what follows.
# The xla capture reads its options from build.json, so a changed option rebuilds and recaptures.
NEURON = CONFIG["neuron"]
ON_NEURON = BACKEND == "neuron"
ON_XLA = BACKEND == "xla"
STAGE_KEYS = {
    "neuron": {"build": ("target", "optlevel", "auto_cast", "lnc", "disable_dge", "extra_cc_flags", "xla_debug"),
               "capture": ("profiler", "enable_dge_notifs"),
               "view": ("profiler", "parquet", "json", "pftrace", "perfetto_flows")},
    "xla": {"build": ("pjrt_device", "xla_debug")},
}


def options(stage):
    keys = STAGE_KEYS.get(BACKEND, {}).get(stage, ())
    return canonical({k: CONFIG[BACKEND][k] for k in keys})


HAS_PFTRACE = not ON_NEURON or NEURON["pftrace"]
HAS_PROFILE_JSON = ON_NEURON and NEURON["json"]
HAS_HOST_PEAKS = BACKEND == "cpu" or (ON_XLA and CONFIG["xla"]["pjrt_device"] == "CPU")
CALIBRATION_DTYPES = ",".join(sorted({spec["dtype"] for spec in PLAN.workloads.values()}))  # only what the sweep uses
DEVICE_LOCK = CAPTURE["device_lock"]
TIMEOUTS = CONFIG["timeouts"]

RUN = f"results/{CONFIG['run']}"
SUMMARY = f"{RUN}/summary.csv"
CALIBRATION = f"{RUN}/cpu/calibration.json"
WORKLOAD = f"{RUN}/{BACKEND}/workloads/{{wid}}"  # one folder per workload: build/ capture/ view/ metrics.json logs/


wildcard_constraints:
    wid=r"[a-z0-9][a-z0-9.-]*",


def spec_json(wildcards):
    """The canonical spec of a planned workload (a Snakemake param, so a changed spec rebuilds)."""
    try:
        return canonical(PLAN.workloads[wildcards.wid])
    except KeyError:
        raise WorkflowError(
            f"workload '{wildcards.wid}' is not in the plan of {CONFIG_SOURCE}; add its shape to the "
            "config or pick an id from `neuronsweep plan`."
        ) from None


def aggregate_after_failure():
    """With --keep-going, failed cases block the aggregate rule: still write summary.csv, failures listed."""
    plan_json = f"{RUN}/plan.json"
    if os.path.exists(plan_json):
        table = aggregate_run(Path(plan_json), Path(SUMMARY))
        bad = table[table["status"] != "ok"]
        logger.error(f"neuron-sweep: {len(bad)} of {len(table)} scenarios did not finish; "
                     f"{SUMMARY} lists every scenario with its status:")
        for _, row in bad.iterrows():
            logger.error(f"  {row['status']}: {row['scenario_id']}: {row['reason']}")


onerror:
    aggregate_after_failure()
