# Validation, planning and path helpers shared by every rule file.
import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path

import yaml

from neuronsweep import backends, warmstart
from neuronsweep.config import schema as ns_config
from neuronsweep.config.run_config import RunConfig
from neuronsweep.host import neuron_ls, slots
from neuronsweep.errors import UserError
from neuronsweep.search import KINDS, searches
from neuronsweep.stages.plan import estimate
from neuronsweep.stages.run_setup import settle_run, stage_plan
from neuronsweep.store import layout
from neuronsweep.config.settings import HOST_ENV
from neuronsweep.workloads import canonical, described, user_code

# Jobs call the `neuronsweep` CLI installed beside this Snakemake, even when its venv is not
# activated (a conda env from --sdm conda still comes first on PATH inside its jobs).
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

DEFAULT_PROFILE = yaml.safe_load((Path(workflow.basedir) / "workflow/profiles/default/config.yaml").read_text())


# Snakemake 9 gives a Snakefile no public way to set an execution setting, and does not load
# workflow/profiles/default on its own (see its header): these two reach the only handles there are,
# the scheduler's keepgoing and the DAG's force_incomplete, and do nothing where a version lacks them.


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


apply_default_profile_rerun_incomplete()


def start_warm_server():
    """Local execution: the case stages fork from one process that has imported what they need (torch on
    cpu; on neuron and xla only our stages, their device programs stay fresh interpreters:
    neuronsweep/warmstart.py), when at least two builds or captures will run (the server's own imports
    cost what one of them saves); on a cluster each job imports what it needs itself."""
    if not workflow.is_main_process or on_cluster():
        return
    try:  # Snakemake's DAG of this run: no public interface lists the jobs it is about to run
        case_jobs = sum(job.rule.name in ("build", "capture") for job in workflow.dag.needrun_jobs())
    except Exception:  # noqa: BLE001 - unknown: start it, as it only saves time
        case_jobs = 2
    if case_jobs >= 2 and not os.environ.get(warmstart.ENV):  # unless it took the host probe (below)
        os.environ[warmstart.ENV] = warmstart.start(os.getpid(), BACKEND) or ""


def probe_in_warm_server(config):
    """A host probe not yet measured (a cold cache) is taken by the warm server, started now: the probe
    alone is a child that imports torch only to time a GEMM, and the server imports torch for the builds
    anyway; it goes on with its other imports while Snakemake plans. Local runs of a backend that probes
    its host only; the probe record says where it was measured."""
    if not workflow.is_main_process or CLUSTER or os.environ.get(warmstart.ENV):
        return
    from neuronsweep.backends.cores import default_threads
    from neuronsweep.host import caps

    backend, _ = backends.resolve(config["backend"], local=True)
    threads = default_threads()
    if not backends.BACKENDS[backend].probes_host or caps.probe_entry(config["cache_dir"], threads).is_file():
        return

    def measure(threads):
        value, measured = warmstart.start_probing(os.getpid(), backend, threads)
        if measured is None:  # the probe is measured in a child after all, and onstart starts a server anew
            warmstart.stop(value)
            value = None
        os.environ[warmstart.ENV] = value or ""
        return measured

    caps.probe(config["cache_dir"], threads, measure)


onstart:
    apply_default_profile_keep_going()
    start_warm_server()


onsuccess:
    warmstart.stop(os.environ.get(warmstart.ENV))


def on_cluster():
    """True on the submitting host of a cluster run and inside its jobs (--mode remote): the devices
    are on the nodes, and a job's threads must be what the head node asked Slurm for. Snakemake reads
    this file before it picks the executor, so workflow.local_exec is still True on the head node;
    there a cluster executor is the run where --jobs is a job count (`nodes`: locally --jobs is an
    alias of --cores)."""
    return (
        not workflow.local_exec
        or workflow.remote_exec
        or (workflow.resource_settings.nodes is not None and workflow._cores is None)
    )


CLUSTER = on_cluster()
CONFIG_SOURCE = ", ".join(map(str, workflow.configfiles)) or "config"
try:
    # Snakemake's YAML reader silently keeps the last of duplicate keys: the files are read again strictly;
    # the validated config is kept in .snakemake/ for the next start while nothing it depends on changes
    CONFIG = ns_config.validate_files(config, workflow.configfiles, CONFIG_SOURCE, Path(".snakemake/neuronsweep"))
    if not CLUSTER:  # neuron-ls asked once; this process and every job read the answer (neuron_ls.MACHINE_ENV)
        neuron_ls.share_with_jobs()
    probe_in_warm_server(CONFIG)
    if searches(CONFIG):  # each search and tune built as its driver will: a bad block is one sentence before
        from neuronsweep.search import checks  # the plan's probes (the host's, a model's trace) and any job

        checks.check(CONFIG, CONFIG_SOURCE)
    # under a cluster executor the devices are on the nodes, not here: each job settles on its own
    SETUP = settle_run(RunConfig.of(CONFIG), local=not CLUSTER)
    RUN_CONFIG = SETUP.config  # the settled config, read by name below
    CONFIG = RUN_CONFIG.document  # the document whole, its neuron section settled: the search driver's file
    BACKEND, BACKEND_REASON, NEURON_SETUP = SETUP.backend, SETUP.backend_reason, SETUP.neuron_setup
    PLAN, HOST_PROBE = SETUP.plan, SETUP.host_probe
    SLOTS = None if CLUSTER else slots.for_config(RUN_CONFIG, BACKEND)
except UserError as exc:
    raise WorkflowError(str(exc)) from None
for line in SETUP.log_lines():
    logger.info(line)
logger.info(estimate(PLAN, RUN_CONFIG, HOST_PROBE))
if SLOTS is not None:
    logger.info(f"captures: {SLOTS.describe()}")
    if workflow.global_resources.get("neuron_device").value is None:  # so Snakemake runs one job per slot
        workflow.register_resource("neuron_device", len(SLOTS))

PLAN_JSON = SETUP.plan_json()
PLAN_STAGED = stage_plan(PLAN_JSON, Path(".snakemake/neuronsweep"))
CACHE_DIR = os.path.expanduser(RUN_CONFIG.cache_dir)
CAPTURE = RUN_CONFIG.capture
DESCRIPTION = backends.BACKENDS[BACKEND]  # artifacts, stage options, view outputs
ARTIFACT = DESCRIPTION.artifacts
COLLECTIVE_WID = backends.COLLECTIVE_WID
COLLECTIVE_ARTIFACT = DESCRIPTION.build_artifact(ranks=True)  # a launch plan, or a NEFF on neuron

# Backend options per stage, as Snakemake params: changing one reruns that stage and what follows.
ON_DEVICE = DESCRIPTION.neuron_device  # its builds and captures hold a NeuronCore
SECTION = RUN_CONFIG.section(BACKEND)  # the backend's config section (none for cpu)


def options(stage):
    return canonical({k: SECTION[k] for k in DESCRIPTION.stage_options.get(stage, ())})


VIEW_OUTPUTS = DESCRIPTION.view_outputs(SECTION)
HAS_PROFILE_JSON = "profile.json" in VIEW_OUTPUTS
HAS_HOST_PEAKS = DESCRIPTION.host_peaks(SECTION)
CALIBRATION_DTYPES = ",".join(sorted({spec["dtype"] for spec in PLAN.workloads.values()}))  # only what the sweep uses


def host_threads():
    """A cpu measurement takes every core Snakemake has here. Under a cluster executor there is no
    'here': 1, unless --set-threads capture=N (the slurm profile sets it to the node's cores)."""
    return 1 if CLUSTER else workflow.cores


CAPTURE_THREADS = 1 if ON_DEVICE else host_threads()  # a device capture waits on its NeuronCores
# Where and how long, not what is measured: to every job through the environment (settings.HOST_ENV),
# not as params, so that moving the cache or changing a timeout or the slot pool reruns no case
# (only plan.json, which keeps the config, and what follows it).
os.environ[HOST_ENV] = json.dumps(
    {
        "cache_dir": CACHE_DIR,
        "device_lock": CAPTURE.device_lock,
        "slots": CAPTURE.slots,
        "isolation": CAPTURE.isolation,
        "timeouts": dataclasses.asdict(RUN_CONFIG.timeouts),
    },
    sort_keys=True,
)


envvars:
    "PATH",
    HOST_ENV,


RUN = f"results/{RUN_CONFIG.run}"
SUMMARY = f"{RUN}/summary.csv"
CALIBRATION = f"{RUN}/cpu/calibration.json"
# one folder per workload: build/ capture/ view/ metrics.json logs/
WORKLOAD = str(layout.workload_dir(RUN, BACKEND, "{wid}"))


wildcard_constraints:
    wid=r"[a-z0-9][a-z0-9._-]*",


def build_artifact(wid):
    """The file a workload's build writes: a collective's launch plan, else the backend's artifact."""
    return f"{WORKLOAD.format(wid=wid)}/build/{DESCRIPTION.build_artifact(described(PLAN.workloads.get(wid)).ranks)}"


def spec_json(wildcards):
    """The canonical spec of a planned workload (a Snakemake param, so a changed spec rebuilds)."""
    try:
        return canonical(PLAN.workloads[wildcards.wid])
    except KeyError:
        raise WorkflowError(
            f"workload '{wildcards.wid}' is not in the plan of {CONFIG_SOURCE}; add its shape to the "
            "config or pick an id from `neuronsweep plan`."
        ) from None


def search_sources(name):
    """The searched entry's user code (its function and NKI kernel files); none for run-level settings."""
    entry = next((e for e in RUN_CONFIG.suites.get("custom", []) if e["name"] == name and e.get("search")), None)
    if entry is None:
        return []
    refs = [entry["function"], *([entry["nki_kernel"]] if entry.get("nki_kernel") else [])]
    return [str(user_code.source_file(ref)) for ref in refs]


SEARCHES_BY_NAME = searches(CONFIG)  # (kind, entry) by name: custom params, config settings, tune
# each search's result file (search.KINDS; a search's best.json, a tune's dispatch.json)
SEARCH_TARGETS = [f"{RUN}/{KINDS[k].folder}/{name}/{KINDS[k].result}" for name, (k, _) in SEARCHES_BY_NAME.items()]
TUNES = [name for name, (kind, _) in SEARCHES_BY_NAME.items() if KINDS[kind].after_sweep]  # the report links them


def tune_sources(model):
    """A tuned model's sources: its config.json (or module file) and its custom candidates' code."""
    entry = next(e for e in RUN_CONFIG.suites["model"] if e["name"] == model)
    refs = [
        c["function"] for c in RUN_CONFIG.suites.get("custom", []) if c["name"] in entry["tune"].get("candidates", [])
    ]
    refs += [
        c["nki_kernel"]
        for c in RUN_CONFIG.suites.get("custom", [])
        if c["name"] in entry["tune"].get("candidates", []) and c.get("nki_kernel")
    ]
    files = [str(user_code.source_file(ref)) for ref in refs]
    return files + [entry["hf_config"] if "hf_config" in entry else str(user_code.source_file(entry["module"]))]


def search_config(name):
    """The validated config as one file for the search driver (several --configfile and --config
    overrides merged, user code paths absolute), rewritten only when it changes."""
    path = Path(".snakemake/neuronsweep") / f"search-{RUN_CONFIG.run}-{name}.yaml"
    text = yaml.safe_dump(CONFIG, sort_keys=False)
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(path)


def user_sources(wildcards):
    """The source files of a user's function and NKI kernel (suites.custom): an input of the case's build,
    so an edit rebuilds that suite's cases and what follows, and nothing else."""
    spec = PLAN.workloads.get(wildcards.wid) or {}
    if not described(spec).user_code:
        return []
    refs = [spec["function"], *([spec["nki_kernel"]] if spec.get("nki_kernel") else [])]
    return [str(user_code.source_file(ref)) for ref in refs]


def aggregate_after_failure():
    """With --keep-going, failed cases block the aggregate and report rules: still write summary.csv,
    roofline_targets.csv and report.html for what finished, the failures listed (the next run redoes
    them through their rules once the failed cases are fixed)."""
    plan_json = f"{RUN}/plan.json"
    if os.path.exists(plan_json):
        from neuronsweep.stages.aggregate import run as aggregate_run  # pandas: only when a sweep failed
        from neuronsweep.stages.report import run as report_run  # `report` is a Snakemake keyword

        table = aggregate_run(Path(plan_json), Path(SUMMARY), Path(f"{RUN}/roofline_targets.csv"))
        report_run(
            Path(SUMMARY), Path(plan_json), Path(f"{RUN}/report.html"), Path(f"{RUN}/roofline_targets.csv"), TUNES
        )
        bad = table[table["status"] != "ok"]
        logger.error(
            f"neuron-sweep: {len(bad)} of {len(table)} scenarios did not finish; "
            f"{SUMMARY} lists every scenario with its status:"
        )
        for _, row in bad.iterrows():
            logger.error(f"  {row['status']}: {row['scenario_id']}: {row['reason']}")


onerror:
    warmstart.stop(os.environ.get(warmstart.ENV))
    aggregate_after_failure()
