"""The Neuron profiler's command line (neuron-explorer, or neuron-profile: the same capture flags),
driven exactly as documented (the Neuron Explorer and neuron-profile guides, SDK 2.27-2.32) and as
the real tools behave: its environment, `capture` with the documented NTFF names and device
out-of-memory detection, and `view` under a time limit in its output folder. The neuron backend's
capture and view stages (neuron.py) and the by-hand `--neff` / `--ntff` commands use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from neuronsweep.analysis.stats import DEVICE_TIMES, latency_stats
from neuronsweep.atomic import write_json
from neuronsweep.backends import BACKENDS, NEURON_TOOL_DIR, PROFILERS
from neuronsweep.backends.processes import run_tool
from neuronsweep.config.settings import CaptureSettings, Collectives, ViewSettings
from neuronsweep.errors import UserError
from neuronsweep.formats import legacy_json, neuron_summary
from neuronsweep.store.records import CaptureFields, RankView, SchemaFacts, SessionView, ViewFields

NTFF = BACKENDS["neuron"].artifacts["capture"]
STDERR_TAIL = 4000
# device out of memory, as real runs word it ("Failed to allocate ... on ND 0", NRT_RESOURCE, "Allocation Failure")
OOM = re.compile(
    r"out of memory|\bOOM\b|failed to allocate|allocation failure|NRT_RESOURCE|RESOURCE_EXHAUSTED", re.IGNORECASE
)
OOM_MARKER = ".oom"  # left in the capture dir by an attempt that ran out of device memory


def tool_env(visible_cores: str | None = None, lnc: int | None = None) -> dict[str, str]:
    """The tools call each other through /opt/aws/neuron/bin and `view` exits when HOME is unset. A
    process that executes on the device is pinned to its slot's cores (slots.py): a torch-xla process
    otherwise claims every visible core ("Requested:2 Available:0" for the next one); and it runs at the
    LNC its NEFF was compiled for (NEURON_LOGICAL_NC_CONFIG: the runtime refuses a mismatch)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([env.get("PATH", ""), NEURON_TOOL_DIR])
    env.setdefault("HOME", tempfile.gettempdir())
    if visible_cores is not None:
        env["NEURON_RT_VISIBLE_CORES"] = visible_cores
    if lnc is not None:
        env["NEURON_LOGICAL_NC_CONFIG"] = str(lnc)
    return env


def resolve_profiler(name: str = "auto") -> str:
    """The profiler executable to run: `name`, or with "auto" the first of neuron-explorer and neuron-profile found; one
    sentence when none is."""
    candidates = PROFILERS if name == "auto" else (name,)
    for tool in candidates:
        found = shutil.which(tool) or shutil.which(tool, path=NEURON_TOOL_DIR)
        if found:
            return found
    raise UserError(
        f"config key 'neuron.profiler': {' or '.join(candidates)} not found on PATH or in "
        f"{NEURON_TOOL_DIR}; install aws-neuronx-tools or set the key to the tool's path."
    )


def is_explorer(profiler: str) -> bool:
    """Whether the profiler is neuron-explorer (SDK 2.31+), whose flags differ from neuron-profile's."""
    return "explorer" in Path(profiler).name


def _tail(text: str) -> str:
    return text[-STDERR_TAIL:]


def expected_ntff(num_exec: int, nth: int, stem: str = "profile", rank: int | None = None) -> str:
    """The NTFF of the first profiled execution, for -s <stem>.ntff. `--profile-nth-exec M` profiles every
    Mth execution (the CLI reference), named as AWS nki-library profiler_utils._generate_expected_ntff_files
    names them: execution 1 is <stem>.ntff, execution k > 1 <stem>_exec_k.ntff, so nth 2 of 4 writes
    _exec_2 and _exec_4, and the first after the warm-up, _exec_M, is the one used (the others are kept
    in raw/); collectives put _rank_<r> after the stem."""
    base = stem if rank is None else f"{stem}_rank_{rank}"
    return f"{base}.ntff" if num_exec == 1 or nth == 1 else f"{base}_exec_{nth}.ntff"


COLLECTIVE_FLAGS = {
    "workers_per_node": "--collectives-workers-per-node",
    "worker_count": "--collectives-worker-count",
    "worker_start_id": "--collectives-worker-start-id",
    "profile_id": "--collectives-profile-id",
}


def collectives_argv(collectives: Collectives | None) -> list[str]:
    """The documented --collectives-* flags; a worker count or workers per node turns collectives on."""
    argv = []
    for key, flag in COLLECTIVE_FLAGS.items():
        value = (collectives or {}).get(key)
        if value is not None:
            argv += [flag, str(value)]
    return argv


def profiled_ranks(collectives: Collectives) -> list[int]:
    """The ranks whose NTFF this node's capture writes: every worker launched here (global ids from
    worker_start_id), or the one --collectives-profile-id names when it is launched here."""
    start = int(collectives.get("worker_start_id") or 0)
    here = range(start, start + int(collectives.get("workers_per_node") or collectives.get("worker_count") or 1))
    wanted = str(collectives.get("profile_id", "all"))
    return list(here) if wanted == "all" else [r for r in here if r == int(wanted)]


class CaptureRefused(UserError):
    """The profiler's capture could not load the NEFF (a torch.compile NEFF it does not take)."""


# what the runtime prints when it cannot load a NEFF (nrt_load), as opposed to a device or input problem
NEFF_REFUSED = re.compile(r"nrt_load\b|NEFF load error|not a valid NEFF|unsupported NEFF", re.IGNORECASE)


INSPECT_MODES = ("model", "session")  # NEURON_RT_INSPECT_DEVICE_PROFILE's device modes, tried in this order


def inspect_env(out: Path, settings: CaptureSettings, mode: str = "model") -> dict[str, str]:
    """The runtime's inspect mode (Neuron Explorer environment variables, SDK 2.33). `model`: the first
    execution of each NEFF per core after NUM_WARMUP (model-only) executions, "best for compiled-graph
    workloads"; `session`: every execution on a core in one NTFF, which the distributed how-to calls
    required on PJRT runtimes (PyTorch native) for a device trace. DGE notifications as the capture asks."""
    env = {
        "NEURON_RT_INSPECT_ENABLE": "1",
        "NEURON_RT_INSPECT_OUTPUT_DIR": str(out.resolve()),
        "NEURON_RT_INSPECT_DEVICE_PROFILE": mode,
    }
    if mode == "model":
        env["NEURON_RT_INSPECT_DEVICE_PROFILE_NUM_WARMUP"] = str(settings.nth_exec - 1)
    if dge_notifications(settings):
        env["NEURON_RT_ENABLE_DGE_NOTIFICATIONS"] = "1"
    return env


def dge_notifications(settings: CaptureSettings) -> bool:
    """DGE notifications on (the default): the DmaPacket table is complete only with them, and the
    Memory Tracker needs them."""
    return bool(settings.options.get("enable_dge_notifs", True) or settings.options.get("memory_tracker"))


# Each mode's files, as the pages show them: model `neff_<h>.neff` beside `<h>_instid_<i>_vnc_<c>.ntff`
# (Neuron Explorer get-started); session `neff_<h>_vnc_<c>.neff` beside `profile_nc_<c>_session_<s>.ntff`
# under `<instance>_pid_<pid>/<timestamp>/` (the capture how-to's expected output).
INSPECT_LAYOUTS = {
    "model": (re.compile(r"^neff_(?P<key>\d+)\.neff$"), "{key}_instid_*_vnc_*.ntff"),
    "session": (re.compile(r"^neff_\d+_vnc_(?P<key>\d+)\.neff$"), "profile_nc_{key}_session_*.ntff"),
}


def pair_inspect_outputs(folder: Path, neff: Path, mode: str = "model") -> Path | None:
    """The NTFF the inspect mode wrote for this NEFF, paired as its layout pairs them (the hash in both
    names for model, the core for session), the NEFF copy's content the build's. None when the runtime
    wrote no device trace; several, or NEFFs of another compilation only, fail with what was found."""
    digest, (neff_name, ntff_glob) = _sha256(neff), INSPECT_LAYOUTS[mode]
    pairs: list[Path] = []
    others: list[Path] = []
    for copy in sorted(folder.rglob("*.neff")):
        m = neff_name.match(copy.name)
        if not m:
            continue
        ntffs = sorted(copy.parent.glob(ntff_glob.format(key=m.group("key"))))
        (pairs if _sha256(copy) == digest else others).extend(ntffs)
    found = sorted(p.name for p in folder.rglob("*") if p.suffix in (".neff", ".ntff"))
    if not pairs and not others:
        return None
    if len(pairs) != 1:
        raise UserError(
            f"{neff}: the runtime's inspect mode ({mode}) left {len(pairs)} profile(s) of this NEFF in {folder} "
            f"(found: {found}); expected one, paired as the {mode} layout pairs them"
            + (": the others belong to NEFFs of another compilation." if others and not pairs else ".")
        )
    return pairs[0]


def find_ntff(raw_dir: Path, num_exec: int, nth: int) -> Path:
    """The NTFF a capture of num_exec executions wrote for execution nth (its documented name, or the one NTFF in
    raw_dir); one sentence when there is none."""
    expected = raw_dir / expected_ntff(num_exec, nth)
    if expected.is_file():
        return expected
    found = sorted(raw_dir.glob("profile*.ntff"))
    ranked = [p for p in found if p.name.endswith(f"_exec_{nth}.ntff")] or found
    if len(ranked) == 1:
        return ranked[0]
    raise UserError(
        f"{raw_dir}: expected {expected.name} after capture, found "
        f"{[p.name for p in found] or 'no NTFF'}; check the capture log."
    )


def capture_neff(
    neff: Path,
    out_dir: Path,
    settings: CaptureSettings,
    inputs: list[tuple[str, str]] | None = None,
    kept: int | None = None,
) -> CaptureFields:
    """Run the profiler's capture on one NEFF; returns the capture record (NTFF at out_dir/profile.ntff:
    the first profiled execution, or execution `kept` where every execution is profiled)."""
    profiler = resolve_profiler(settings.options["profiler"])
    raw = out_dir / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    marker = out_dir / OOM_MARKER
    single_io = settings.single_io or (settings.attempt > 1 and marker.exists())
    argv = [
        profiler,
        "capture",
        "-n",
        str(neff.resolve()),
        "-s",
        str(raw.resolve() / "profile.ntff"),
        "--num-exec",
        str(settings.num_exec),
        "--profile-nth-exec",
        str(settings.nth_exec),
    ]
    if dge_notifications(settings):
        argv.append("--enable-dge-notifs")
    if single_io:
        argv.append("--single-io")
    argv += collectives_argv(settings.collectives)
    if inputs:
        argv += [item for pair in inputs for item in pair]
    else:
        argv.append("--ignore-exec-errors")
    started = time.time()
    proc = run_tool(
        argv,
        settings.timeout_s,
        f"{neff}: capture",
        cwd=raw,
        env=tool_env(settings.visible_cores, settings.runtime_lnc),
    )
    wall = time.time() - started
    (out_dir / "capture.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        if OOM.search(text) and not single_io:
            marker.write_text(json.dumps({"argv": argv, "stderr_tail": _tail(text)}))
            raise UserError(
                f"{neff}: device out of memory during capture; it is retried with --single-io "
                "(Snakemake retries: 1), whose timings stay representative but whose outputs are not valid."
            )
        last = (text.strip().splitlines() or ["no output"])[-1]
        raise (CaptureRefused if NEFF_REFUSED.search(text) else UserError)(
            f"{neff}: {Path(profiler).name} capture exited {proc.returncode}: {last} "
            f"(full output: {out_dir / 'capture.log'})."
        )
    ranks = _move_rank_ntffs(raw, out_dir, settings) if settings.collectives else None
    if settings.collectives and not ranks:
        raise UserError(
            f"{neff}: --collectives-profile-id {settings.collectives.get('profile_id')} is not one of the "
            "workers launched on this node (from --collectives-worker-start-id); no rank was profiled."
        )
    written = sorted(p.name for p in raw.glob("*.ntff"))  # every profiled execution's; the first one is used
    if ranks:  # the lowest rank's profile is the capture's own, as for one worker
        ntff = raw / ranks[0]["written_as"]
        shutil.copyfile(ntff, out_dir / NTFF)
    else:
        ntff = find_ntff(raw, settings.num_exec, kept or settings.nth_exec)
        if kept:  # raw/ keeps every execution: the others are samples (execution_samples)
            shutil.copyfile(ntff, out_dir / NTFF)
        else:
            os.replace(ntff, out_dir / NTFF)
    marker.unlink(missing_ok=True)
    return {
        "profiler": profiler,
        "profiler_version": tool_version(profiler),
        "argv": argv,
        "dge_notifications": dge_notifications(settings),
        "exit_status": proc.returncode,
        "stderr_tail": _tail(proc.stderr),
        "capture_wall_s": wall,
        "ntff_written_as": ntff.name,
        "ntffs_written": written,
        "neff": str(neff),
        "neff_sha256": _sha256(neff),
        **({"ranks": ranks, "collectives": settings.collectives} if ranks else {}),
        "single_io": single_io,
        "outputs_valid": not single_io,
        "inputs": inputs or "zero-filled (--ignore-exec-errors)",
        "artifacts": {"ntff": NTFF},
    }


def execution_samples(neff: Path, capture_dir: Path, settings: CaptureSettings, first: int, count: int) -> dict:
    """Every execution `first` .. `first + count - 1` of a capture that profiled each one (--profile-nth-exec 1:
    raw/profile_exec_<k>.ntff), viewed as summary-json: each execution's device time (`total_time`) is a
    sample. What an NKI kernel, which no framework times here, has instead of a framework timing."""
    view = ViewSettings(
        profiler=settings.options.get("profiler", "auto"),
        parquet=False,
        json=False,
        pftrace=False,
        perfetto_flows=False,
        timeout_s=settings.timeout_s,
        runtime_lnc=settings.runtime_lnc,
    )
    samples = []
    for k in range(first, first + count):
        folder = capture_dir / "executions" / f"exec_{k}"
        folder.mkdir(parents=True, exist_ok=True)
        ntff = capture_dir / "raw" / expected_ntff(first + count - 1, k)
        samples.append(float(view_profile(neff, ntff, folder, view)["summary"]["total_time"]))
    return {
        **latency_stats(samples),
        "samples_are": DEVICE_TIMES,
        "basis": "device time per execution: the profiler's total_time of each profiled execution, after "
        f"{first - 1} warm-up execution(s) (profiled, not counted), in one capture process",
        "executions": f"profile_exec_{first}..{first + count - 1}",
    }


def _move_rank_ntffs(raw: Path, out_dir: Path, settings: CaptureSettings) -> list[dict]:
    """Multi-worker capture: each profiled rank's NTFF (profile_rank_<r>[_exec_<n>].ntff) also as
    out_dir/profile_rank_<r>.ntff; the lowest rank's is also the capture's profile.ntff."""
    ranks: list[dict] = []
    for rank in profiled_ranks(settings.collectives or {}):
        name = expected_ntff(settings.num_exec, settings.nth_exec, rank=rank)
        if not (raw / name).is_file():
            found = sorted(p.name for p in raw.glob("*.ntff"))
            raise UserError(
                f"{raw}: expected {name} (rank {rank}) after a multi-worker capture, found "
                f"{found or 'no NTFF'}; check --collectives-* and the capture log."
            )
        ranks.append({"rank": rank, "ntff": f"profile_rank_{rank}.ntff", "written_as": name})
    for r in ranks:  # raw/ stays as the tool wrote it: the session directory of the combined view
        target = out_dir / r["ntff"]
        target.unlink(missing_ok=True)
        try:
            os.link(raw / r["written_as"], target)  # NTFFs are large: one copy on disk
        except OSError:
            shutil.copyfile(raw / r["written_as"], target)
    return ranks


def view_ranks(
    neff: Path, capture_dir: Path, ranks: list[dict], out_dir: Path, settings: ViewSettings
) -> list[RankView]:
    """A multi-worker capture viewed per rank: each rank's summary-json in out_dir/ranks/rank_<r>/, with
    the NeuronCore and device it ran on (nc_idx, nd_idx from the tool's summary), and its parquet where the
    view writes parquet (its CcOp and ActiveTime tables put the ranks' collectives on one timeline:
    analysis/device_collectives.py). Each rank's NTFF is viewed with that rank's own NEFF where the rank
    compiled its own (`neff` in the rank's entry: every compilation carries its own uuid), else with the
    capture's."""
    import dataclasses

    per_rank = dataclasses.replace(settings, json=False, pftrace=False)
    out: list[RankView] = []
    for r in ranks:
        folder = out_dir / "ranks" / f"rank_{r['rank']}"
        folder.mkdir(parents=True, exist_ok=True)
        own = Path(r["neff"]) if r.get("neff") else neff
        summary = view_profile(own, capture_dir / r["ntff"], folder, per_rank)["summary"]
        write_json(folder / "summary.json", summary)
        out.append(
            {
                "rank": r["rank"],
                "summary": str(folder.relative_to(out_dir) / "summary.json"),
                "nc_idx": summary.get("nc_idx"),
                "nd_idx": summary.get("nd_idx"),
                "total_time": summary.get("total_time"),
            }
        )
    return out


SESSION_OUTPUTS = ("system_profile.pftrace", "device_profile_model_*.pftrace")  # `view -d` with perfetto


def view_session(neffs: list[Path], session_dir: Path, out_dir: Path, settings: ViewSettings) -> SessionView:
    """The combined view of every rank: `view -d <session dir>` with perfetto output (the documented form:
    no -n, the NEFFs are read from the folder), which writes system_profile.pftrace and one
    device_profile_model_<id>.pftrace per NEFF into its working directory (the guide's names), here
    out_dir/session/: every rank on one timeline in ui.perfetto.dev, and queryable like any view. A folder
    without the ranks' NEFFs (a multi-worker capture's) gets them copied in, as the capture how-to says."""
    profiler = resolve_profiler(settings.profiler)
    folder = (out_dir / "session").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    present = {_sha256(p) for p in session_dir.rglob("*.neff")}
    for neff in neffs:
        if _sha256(neff) not in present:
            shutil.copyfile(neff, session_dir / f"neff_{_sha256(neff)[:16]}.neff")
            present.add(_sha256(neff))
    argv = [
        profiler,
        "view",
        "-d",
        str(session_dir.resolve()),
        "--output-format",
        "perfetto",
        *(["--enable-memory-tracker"] if settings.memory_tracker else []),
    ]
    name = Path(profiler).name
    proc = run_tool(
        argv,
        settings.timeout_s,
        f"{session_dir}: {name} view -d",
        cwd=folder,
        env=tool_env(lnc=settings.runtime_lnc),
        written=[folder] if is_explorer(profiler) else None,
    )
    if proc.returncode != 0:
        raise UserError(
            f"{session_dir}: {name} view -d (the combined view of every rank) exited {proc.returncode}: "
            f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}."
        )
    system, devices = folder / SESSION_OUTPUTS[0], sorted(folder.glob(SESSION_OUTPUTS[1]))
    if not system.is_file() or not devices:
        raise UserError(
            f"{session_dir}: {name} view -d exited 0 without writing {' and '.join(SESSION_OUTPUTS)} "
            f"in {folder}; check the tool version."
        )
    return {
        "argv": argv,
        "system_pftrace": str(system.relative_to(out_dir.resolve())),
        "device_pftraces": [str(d.relative_to(out_dir.resolve())) for d in devices],
    }


SCHEMA_DUMP = "profile-schema.txt"


def schema_facts(profiler: str, out_dir: Path, timeout_s: float, version: str | None = None) -> SchemaFacts:
    """The profile schema version (parquet Metadata.profile_schema_version) and the tool's version
    (the capture's record of it, else asked), for view.json, and the tool's own schema dump saved beside
    a parquet view: `view --show-profile-schema` (2.33), else the top-level flag (2.31)."""
    import pyarrow.parquet as pq

    facts: SchemaFacts = {
        "profiler_version": version or tool_version(profiler),
        "profile_schema_version": None,
        "profile_schema_dump": None,
    }
    meta = sorted((out_dir / "parquet").glob("Metadata*.parquet"))
    if not meta:
        facts["profile_schema_version_why"] = "no parquet Metadata table in this view (neuron.parquet, neuron-explorer)"
    else:
        table = pq.read_table(meta[0])
        if "profile_schema_version" in table.column_names and table.num_rows:
            facts["profile_schema_version"] = str(table.column("profile_schema_version")[0].as_py())
        else:
            facts["profile_schema_version_why"] = f"{meta[0].name} has no profile_schema_version column"
    if not (is_explorer(profiler) and meta):
        return facts
    for argv in ([profiler, "view", "--show-profile-schema"], [profiler, "--show-profile-schema"]):
        try:
            proc = run_tool(argv, timeout_s, f"{Path(profiler).name} --show-profile-schema", env=tool_env())
        except UserError:
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            (out_dir / SCHEMA_DUMP).write_text(proc.stdout)
            facts["profile_schema_dump"] = SCHEMA_DUMP
            break
    return facts


def tool_version(tool: str) -> str | None:
    """A Neuron tool's --version output, first line; None when it does not answer."""
    try:
        proc = run_tool([tool, "--version"], 60, f"{tool} --version", env=tool_env())
    except UserError:
        return None
    out = (proc.stdout or proc.stderr).strip().splitlines()
    return out[0] if proc.returncode == 0 and out else None


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# Where a tool version ignores --output-file, it writes its default name into the working directory.
DEFAULT_OUTPUT = {"perfetto": "ntff.pftrace", "json": "ntff.json"}


def view_profile(
    neff: Path, ntff: Path, out_dir: Path, settings: ViewSettings, captured_with: tuple | None = None
) -> ViewFields:
    """summary-json always; parquet (neuron-explorer), json and perfetto as the options ask. Each view
    runs in out_dir with a time limit. neuron-explorer's view may keep serving its UI and API after
    writing: every export is stopped once its output has stopped growing (--ingest-only is documented only
    as `view -d DIR --ingest-only`, not with -n/-s). A json export the tool no longer has (after SDK 2.33) is skipped
    with the reason; parquet is the source of the tables."""
    profiler = resolve_profiler(settings.profiler)
    known = captured_with[1] if captured_with and captured_with[0] == profiler else None  # the tool's version
    out_dir = out_dir.resolve()
    base = [profiler, "view", "-n", str(neff.resolve()), "-s", str(ntff.resolve())]
    limit, name = settings.timeout_s, Path(profiler).name
    commands = {}

    tracker = ["--enable-memory-tracker"] if settings.memory_tracker else []

    def run(fmt: str, extra: list[str], written: list[Path] | None = None) -> subprocess.CompletedProcess:
        argv = base + ["--output-format", fmt] + extra + tracker
        commands[fmt] = argv
        proc = run_tool(
            argv,
            limit,
            f"{ntff}: {name} view --output-format {fmt}",
            cwd=out_dir,
            env=tool_env(lnc=settings.runtime_lnc),
            written=written,
        )
        if proc.returncode != 0:
            raise UserError(
                f"{ntff}: {name} view --output-format {fmt} exited {proc.returncode}: "
                f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}."
            )
        return proc

    proc = run("summary-json", [])
    (out_dir / "summary-json.txt").write_text(proc.stdout)
    summary = neuron_summary.parse(proc.stdout, str(out_dir / "summary-json.txt"))

    outputs = {}
    wanted: list[tuple[str, Path, list[str]]] = []
    if settings.parquet and is_explorer(profiler):
        wanted.append(("parquet", out_dir / "parquet", []))
    if settings.json:
        wanted.append(("json", out_dir / "profile.json", []))
    if settings.pftrace:
        wanted.append(
            ("perfetto", out_dir / "trace.pftrace", ["--show-perfetto-flows"] if settings.perfetto_flows else [])
        )
    skipped = {}
    for fmt, target, extra in wanted:
        explorer = is_explorer(profiler)
        fallback = out_dir / DEFAULT_OUTPUT.get(fmt, "")
        try:  # neuron-explorer may keep serving after writing: stopped once its output is complete
            run(fmt, ["--output-file", str(target), *extra], written=[target, fallback] if explorer else None)
        except UserError as e:
            if fmt != "json":
                raise
            skipped["json"] = f"the legacy full-profile JSON (ends after SDK 2.33) was not written: {e}"
            write_json(target, {legacy_json.SKIPPED: skipped["json"]})  # the DAG's declared output, saying why
            continue
        if not target.exists() and fmt in DEFAULT_OUTPUT and fallback.is_file():
            os.replace(fallback, target)  # this tool version ignored --output-file
        if not target.exists():
            raise UserError(
                f"{ntff}: {name} view --output-format {fmt} exited 0 without writing {target.name} "
                f"(nor {DEFAULT_OUTPUT.get(fmt, 'its default name')} in {out_dir}); check the tool version."
            )
        outputs[fmt] = target.name
    return {
        "summary": summary,
        "profiler": profiler,
        **(schema_facts(profiler, out_dir, limit, known) if wanted else {}),  # not for a rank's summary alone
        "commands": commands,
        "outputs": outputs,
        **({"skipped": skipped} if skipped else {}),
        **({"pftrace": outputs["perfetto"]} if "perfetto" in outputs else {}),
    }
