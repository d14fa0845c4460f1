# Validation, planning and path helpers shared by every rule file.
import json
import os
import shlex
import sys
from pathlib import Path

import yaml

from neuronsweep import backends
from neuronsweep import config as ns_config
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


def apply_default_profile_rerun_incomplete():
    """rerun-incomplete from the default profile: after a crash or a kill, the jobs that were running
    are redone instead of the next run stopping with IncompleteFilesException."""
    settings = getattr(workflow, "dag_settings", None)
    if DEFAULT_PROFILE.get("rerun-incomplete") and settings is not None:
        settings.force_incomplete = True


apply_default_profile_resources()
apply_default_profile_rerun_incomplete()


onstart:
    apply_default_profile_keep_going()


CONFIG_SOURCE = ", ".join(map(str, workflow.configfiles)) or "config"
try:
    for path in workflow.configfiles:  # Snakemake's YAML reader silently keeps the last of duplicate keys
        ns_config.read_yaml(path)
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
DESCRIPTION = backends.BACKENDS[BACKEND]  # artifacts, stage options, view outputs
ARTIFACT = DESCRIPTION.artifacts

# Backend options per stage, as Snakemake params: changing one reruns that stage and what follows.
ON_NEURON = BACKEND == "neuron"
ON_XLA = BACKEND == "xla"
SECTION = CONFIG.get(BACKEND, {})  # the backend's config section (none for cpu)


def options(stage):
    return canonical({k: SECTION[k] for k in DESCRIPTION.stage_options.get(stage, ())})


VIEW_OUTPUTS = DESCRIPTION.view_outputs(SECTION)
HAS_PROFILE_JSON = "profile.json" in VIEW_OUTPUTS
HAS_HOST_PEAKS = DESCRIPTION.host_peaks(SECTION)
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
    """With --keep-going, failed cases block the aggregate and report rules: still write summary.csv,
    roofline_targets.csv and report.html for what finished, the failures listed (the next run redoes
    them through their rules once the failed cases are fixed)."""
    plan_json = f"{RUN}/plan.json"
    if os.path.exists(plan_json):
        from neuronsweep.aggregate import run as aggregate_run  # pandas: only when a sweep failed
        from neuronsweep.report import run as report_run  # `report` is a Snakemake keyword

        table = aggregate_run(Path(plan_json), Path(SUMMARY), Path(f"{RUN}/roofline_targets.csv"))
        report_run(Path(SUMMARY), Path(plan_json), Path(f"{RUN}/report.html"), Path(f"{RUN}/report"))
        bad = table[table["status"] != "ok"]
        logger.error(f"neuron-sweep: {len(bad)} of {len(table)} scenarios did not finish; "
                     f"{SUMMARY} lists every scenario with its status:")
        for _, row in bad.iterrows():
            logger.error(f"  {row['status']}: {row['scenario_id']}: {row['reason']}")


onerror:
    aggregate_after_failure()
