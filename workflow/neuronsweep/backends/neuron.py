"""Neuron backend: the real Neuron tools, driven exactly as documented in
../shared/reference/neuron-toolchain.md (SDK 2.27-2.32 docs, neuron-explorer and neuron-profile).

build   torch-xla runs the workload with NEURON_FRAMEWORK_DEBUG=1, NEURON_CC_FLAGS from config and a
        compile cache directory of its own (NEURON_COMPILE_CACHE_URL); the NEFF of the workload graph
        is the one that appears while the workload runs, not while inputs move (xla_program.py)
capture <profiler> capture -n NEFF -s DIR/profile.ntff --num-exec N --profile-nth-exec K
        --ignore-exec-errors; the NTFF is found by the documented naming rules; a device
        out-of-memory is retried by Snakemake with --single-io; then framework timing on the XLA
        device through the same compile cache
view    summary-json (always), parquet (neuron-explorer), legacy json (when asked), perfetto
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from .. import devicelock
from ..analysis import neuron_summary
from ..cache import CompileCache, cache_key
from ..errors import UserError
from ..workloads import workload_id
from . import BACKENDS, NEURON_TOOL_DIR, PROFILERS, xla_program
from .common import package_versions, recompilation_flag, run_child, run_tool, timeout

ARTIFACT = BACKENDS["neuron"].artifacts["build"]
NTFF = BACKENDS["neuron"].artifacts["capture"]
ARTIFACT_FORMAT = "NEFF via torch-xla or nki.jit, v2"
# device out of memory, as real runs word it ("Failed to allocate ... on ND 0", NRT_RESOURCE, "Allocation Failure")
OOM = re.compile(r"out of memory|\bOOM\b|failed to allocate|allocation failure|NRT_RESOURCE|RESOURCE_EXHAUSTED",
                 re.IGNORECASE)
OOM_MARKER = ".oom"  # left in the capture dir by an attempt that ran out of device memory
NEURON_PACKAGES = ("neuronx-cc", "torch-neuronx", "torch-xla", "libneuronxla", "nki")
STDERR_TAIL = 4000


VISIBLE_CORES = "0"  # the NeuronCore every device-executing step is pinned to (one device slot)


def tool_env(on_device: bool = False) -> dict:
    """The tools call each other through /opt/aws/neuron/bin and `view` exits when HOME is unset. A
    process that executes on the device is pinned to VISIBLE_CORES: a torch-xla process otherwise
    claims every visible core ("Requested:2 Available:0" for the next one)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([env.get("PATH", ""), NEURON_TOOL_DIR])
    env.setdefault("HOME", tempfile.gettempdir())
    if on_device:
        env["NEURON_RT_VISIBLE_CORES"] = VISIBLE_CORES
    return env


def resolve_profiler(name: str = "auto") -> str:
    candidates = PROFILERS if name == "auto" else (name,)
    for tool in candidates:
        found = shutil.which(tool) or shutil.which(tool, path=NEURON_TOOL_DIR)
        if found:
            return found
    raise UserError(f"config key 'neuron.profiler': {' or '.join(candidates)} not found on PATH or in "
                    f"{NEURON_TOOL_DIR}; install aws-neuronx-tools or set the key to the tool's path.")


def is_explorer(profiler: str) -> bool:
    return "explorer" in Path(profiler).name


def auto_cast(options: dict) -> str:
    """--auto-cast is always passed: its default changed between SDKs (matmult, then none in 2.27), and
    an fp32 workload silently run as bf16 would be measured against the fp32 peak."""
    return options.get("auto_cast") or "none"


def lnc(options: dict) -> int:
    """Logical NeuronCore size: the configured `lnc`, else the target's default (2 on trn2)."""
    from ..analysis.roofline import TARGETS

    return TARGETS[options.get("target", "trn1")].lnc(options.get("lnc"))


def cc_flags(options: dict) -> str:
    """NEURON_CC_FLAGS from the config's neuron section (neuronx-cc compile options)."""
    flags = [f"--target {options.get('target', 'trn1')}", f"-O{options.get('optlevel', 2)}",
             f"--auto-cast {auto_cast(options)}"]
    if options.get("lnc"):
        flags.append(f"--logical-nc-config {options['lnc']}")
    if options.get("disable_dge"):
        flags.append("--disable-dge")
    if options.get("extra_cc_flags"):
        flags.append(options["extra_cc_flags"])
    return " ".join(flags)


def _tail(text: str) -> str:
    return text[-STDERR_TAIL:]


# ---------------------------------------------------------------------------------------- build


def compile_env(options: dict, compile_cache: Path) -> dict:
    env = tool_env(on_device=True)
    env.update({"NEURON_FRAMEWORK_DEBUG": "1", "NEURON_CC_FLAGS": cc_flags(options),
                "NEURON_COMPILE_CACHE_URL": str(compile_cache)})
    if options.get("xla_debug"):
        env.update({"XLA_IR_DEBUG": "1", "XLA_HLO_DEBUG": "1"})
    return env


def _compile_xla(spec: dict, out_dir: Path, options: dict, entry: Path) -> dict:
    """torch-xla route: per-workload NEURON_COMPILE_CACHE_URL, wiped so attribution sees the compile."""
    compile_cache = entry / "neuron-compile-cache"
    shutil.rmtree(compile_cache, ignore_errors=True)
    compile_cache.mkdir(parents=True)
    workdir = out_dir.resolve() / "xla"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    globs = [str(compile_cache / "**" / "*.neff"), str(workdir / "MODULE_*.neff")]
    result = xla_program.run(spec, workdir / "xla_result.json", compile_env(options, compile_cache), workdir, globs,
                             timeout(options, "build"))
    neff, candidates = xla_program.attribute(result, spec, "NEFF")
    return {"neff_source": neff, "candidates": candidates, "compile_s": result["compile"]["seconds"],
            "compile_count": result["compile"]["count"],
            "second_call_compile_count": result["compile"]["second_call_count"],
            "recompiled_on_second_call": result["compile"]["second_call_count"] > 0,
            "compile_s_source": "torch_xla.debug.metrics CompileTime", "capture_inputs": None}


def _compile_nki(spec: dict, out_dir: Path, options: dict, entry: Path) -> dict:
    """NKI route: NKI_ARTIFACTS_DIR (nki >= 0.2) or nki.benchmark's save_neff_name (legacy)."""
    from ..kernels import for_spec

    why = for_spec(spec).supported(spec)
    if why:
        raise UserError(f"case {workload_id(spec)}: the NKI {spec['kind']} kernel does not handle this shape "
                        f"({why}); use impl: compiler for it.")
    workdir = out_dir.resolve() / "nki"
    shutil.rmtree(workdir, ignore_errors=True)
    artifacts = workdir / "artifacts"
    artifacts.mkdir(parents=True)
    env = tool_env(on_device=True)
    env.update({"NKI_ARTIFACTS_DIR": str(artifacts), "NEURON_PLATFORM_TARGET_OVERRIDE": options.get("target", "trn1"),
                "NEURON_LOGICAL_NC_CONFIG": str(lnc(options)), "NEURON_CC_FLAGS": cc_flags(options)})
    run_child("nki_program", ["--spec", json.dumps(spec), "--out", str(workdir / "nki_result.json"),
                              "--inputs-dir", str(entry / "inputs")], spec, workdir, env, "NKI kernel run",
              timeout(options, "build"))
    result = json.loads((workdir / "nki_result.json").read_text())
    if len(result["neffs"]) != 1:
        raise UserError(f"case {workload_id(spec)}: expected one NEFF from the NKI kernel, found "
                        f"{result['neffs'] or 'none'} under {artifacts}.")
    return {"neff_source": result["neffs"][0], "candidates": [{"path": p, "phase": "kernel"} for p in result["neffs"]],
            "compile_s": result["compile_s"], "compile_count": None, "compile_s_source": result["compile_s_source"],
            "nki_api": result["api"], "recompiled_on_second_call": result["recompiled_on_second_call"],
            "max_abs_error_vs_numpy": result.get("max_abs_error_vs_numpy"),
            "max_abs_error_note": result.get("max_abs_error_note"),
            "benchmark_us": result.get("benchmark_us"), "capture_inputs": result["inputs"]}


def build(spec: dict, out_dir: Path, cache: CompileCache, options: dict) -> dict:
    versions = package_versions(NEURON_PACKAGES)
    flags = cc_flags(options)
    nki_impl = spec.get("impl") == "nki"

    def compile_neff(entry: Path) -> tuple[Path, dict]:
        # both routes execute the workload on a NeuronCore: hold the device like a capture
        with devicelock.held(options.get("device_lock") or devicelock.DEFAULT_LOCK):
            made = (_compile_nki if nki_impl else _compile_xla)(spec, out_dir, options, entry)
        return Path(made["neff_source"]), made

    material = {"spec": spec, "backend": "neuron", "cc_flags": flags, "xla_debug": bool(options.get("xla_debug")),
                "versions": versions, "format": ARTIFACT_FORMAT}
    meta, fields = cache.through(material, ARTIFACT, out_dir / ARTIFACT, compile_neff)
    entry = Path(fields["cache"]["entry"])
    env = {"NKI_ARTIFACTS_DIR": "<build>/nki/artifacts"} if nki_impl else \
        {k: v for k, v in compile_env(options, entry / "neuron-compile-cache").items()
         if k.startswith(("NEURON_FRAMEWORK_DEBUG", "NEURON_CC_FLAGS", "NEURON_COMPILE_CACHE_URL", "XLA_"))}
    return {
        "toolchain": versions, "compiler": "NKI kernel (nki.jit)" if nki_impl else "neuronx-cc via torch-xla",
        "artifact_format": ARTIFACT_FORMAT, "cc_flags": flags, "target": options.get("target", "trn1"),
        "auto_cast": auto_cast(options), "lnc": lnc(options), "visible_cores": VISIBLE_CORES,
        "env": env, "compile_cache": None if nki_impl else str(entry / "neuron-compile-cache"),
        **{k: v for k, v in meta.items() if k != "made_at"}, **fields,
        "recompilation_flag": recompilation_flag("kernel" if nki_impl else "graph")
        if meta.get("recompiled_on_second_call") else None,
    }


# -------------------------------------------------------------------------------------- capture


def expected_ntff(num_exec: int, nth: int, stem: str = "profile", rank: int | None = None) -> str:
    """The NTFF the profiler writes for the profiled execution, for -s <stem>.ntff (AWS nki-library
    profiler_utils._generate_expected_ntff_files): one execution, or nth 1, gives <stem>.ntff (nth 1 of
    several also writes <stem>_exec_2..N); nth M of several gives <stem>_exec_M.ntff; collectives put
    _rank_<r> after the stem."""
    base = stem if rank is None else f"{stem}_rank_{rank}"
    return f"{base}.ntff" if num_exec == 1 or nth == 1 else f"{base}_exec_{nth}.ntff"


def find_ntff(raw_dir: Path, num_exec: int, nth: int) -> Path:
    expected = raw_dir / expected_ntff(num_exec, nth)
    if expected.is_file():
        return expected
    found = sorted(raw_dir.glob("profile*.ntff"))
    ranked = [p for p in found if p.name.endswith(f"_exec_{nth}.ntff")] or found
    if len(ranked) == 1:
        return ranked[0]
    raise UserError(f"{raw_dir}: expected {expected.name} after capture, found "
                    f"{[p.name for p in found] or 'no NTFF'}; check the capture log.")


def capture_neff(neff: Path, out_dir: Path, settings: dict, inputs: list[tuple[str, str]] | None = None) -> dict:
    """Run the profiler's capture on one NEFF; returns the capture record (NTFF at out_dir/profile.ntff)."""
    profiler = resolve_profiler(settings.get("profiler", "auto"))
    raw = out_dir / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    marker = out_dir / OOM_MARKER
    single_io = bool(settings.get("single_io")) or (settings.get("attempt", 1) > 1 and marker.exists())
    argv = [profiler, "capture", "-n", str(neff.resolve()), "-s", str(raw.resolve() / "profile.ntff"),
            "--num-exec", str(settings["num_exec"]), "--profile-nth-exec", str(settings["nth_exec"])]
    if settings.get("enable_dge_notifs"):
        argv.append("--enable-dge-notifs")
    if single_io:
        argv.append("--single-io")
    if inputs:
        argv += [item for pair in inputs for item in pair]
    else:
        argv.append("--ignore-exec-errors")
    started = time.time()
    proc = run_tool(argv, timeout(settings, "capture"), f"{neff}: capture", cwd=raw, env=tool_env(on_device=True))
    wall = time.time() - started
    (out_dir / "capture.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        if OOM.search(text) and not single_io:
            marker.write_text(json.dumps({"argv": argv, "stderr_tail": _tail(text)}))
            raise UserError(f"{neff}: device out of memory during capture; it is retried with --single-io "
                            "(Snakemake retries: 1), whose timings stay representative but whose outputs are not valid.")
        last = (text.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{neff}: {Path(profiler).name} capture exited {proc.returncode}: {last} "
                        f"(full output: {out_dir / 'capture.log'}).")
    ntff = find_ntff(raw, settings["num_exec"], settings["nth_exec"])
    os.replace(ntff, out_dir / NTFF)
    marker.unlink(missing_ok=True)
    return {"profiler": profiler, "profiler_version": tool_version(profiler), "argv": argv,
            "exit_status": proc.returncode, "stderr_tail": _tail(proc.stderr), "capture_wall_s": wall,
            "ntff_written_as": ntff.name, "neff": str(neff), "neff_sha256": _sha256(neff),
            "profiled_exec": settings["nth_exec"], "single_io": single_io,
            "outputs_valid": not single_io, "inputs": inputs or "zero-filled (--ignore-exec-errors)",
            "artifacts": {"ntff": NTFF}}


def tool_version(tool: str) -> str | None:
    try:
        proc = run_tool([tool, "--version"], 60, f"{tool} --version", env=tool_env())
    except UserError:
        return None
    out = (proc.stdout or proc.stderr).strip().splitlines()
    return out[0] if proc.returncode == 0 and out else None


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def framework_timing(build_record: dict, settings: dict, workdir: Path) -> dict:
    """warmup + iterations on the XLA device, each synced; reuses the build's compile cache, so a
    compile here means the graph changed (recompilation), which is recorded, not hidden."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = tool_env(on_device=True)
    env.update(build_record["env"])
    cache = build_record["compile_cache"]
    result = xla_program.run(build_record["spec"], workdir / "timing.json", env, workdir,
                             [str(Path(cache) / "**" / "*.neff")], timeout(settings, "capture"),
                             warmup=settings["warmup"], iterations=settings["iterations"],
                             repeats=settings.get("repeats", 1))
    timing = result["timing"]
    timing["compiles_in_first_run"] = result["compile"]["count"]
    return timing


def capture(build_record: dict, build_dir: Path, settings: dict, out_dir: Path) -> dict:
    record = capture_neff(build_dir / ARTIFACT, out_dir, settings, build_record.get("capture_inputs"))
    if build_record["spec"].get("impl") == "nki":
        record["latency"] = None
        record["latency_note"] = "NKI kernels run outside a framework here; their device time is in the profile"
    else:
        record["latency"] = framework_timing(build_record, settings, out_dir / "framework")
    record["threads"] = None
    return record


# ----------------------------------------------------------------------------------------- view


# Where a tool version ignores --output-file, it writes its default name into the working directory.
DEFAULT_OUTPUT = {"perfetto": "ntff.pftrace", "json": "ntff.json"}


def view_profile(neff: Path, ntff: Path, out_dir: Path, options: dict) -> dict:
    """summary-json always; parquet (neuron-explorer), json and perfetto as the options ask. Each view
    runs in out_dir with a time limit; neuron-explorer gets --ingest-only for exports, since its view
    otherwise keeps serving its UI and API after writing."""
    profiler = resolve_profiler(options.get("profiler", "auto"))
    out_dir = out_dir.resolve()
    base = [profiler, "view", "-n", str(neff.resolve()), "-s", str(ntff.resolve())]
    limit, name = timeout(options, "view"), Path(profiler).name
    commands = {}

    def run(fmt: str, extra: list[str]):
        argv = base + ["--output-format", fmt] + extra
        commands[fmt] = argv
        proc = run_tool(argv, limit, f"{ntff}: {name} view --output-format {fmt}", cwd=out_dir, env=tool_env())
        if proc.returncode != 0:
            raise UserError(f"{ntff}: {name} view --output-format {fmt} exited {proc.returncode}: "
                            f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}.")
        return proc

    proc = run("summary-json", [])
    (out_dir / "summary-json.txt").write_text(proc.stdout)
    summary = neuron_summary.parse(proc.stdout, str(out_dir / "summary-json.txt"))

    outputs = {}
    wanted = []
    if options.get("parquet", True) and is_explorer(profiler):
        wanted.append(("parquet", out_dir / "parquet", []))
    if options.get("json"):
        wanted.append(("json", out_dir / "profile.json", []))
    if options.get("pftrace", True):
        wanted.append(("perfetto", out_dir / "trace.pftrace",
                       ["--show-perfetto-flows"] if options.get("perfetto_flows") else []))
    for fmt, target, extra in wanted:
        run(fmt, ["--output-file", str(target), *extra, *(["--ingest-only"] if is_explorer(profiler) else [])])
        fallback = out_dir / DEFAULT_OUTPUT.get(fmt, "")
        if not target.exists() and fmt in DEFAULT_OUTPUT and fallback.is_file():
            os.replace(fallback, target)  # this tool version ignored --output-file
        if not target.exists():
            raise UserError(f"{ntff}: {name} view --output-format {fmt} exited 0 without writing {target.name} "
                            f"(nor {DEFAULT_OUTPUT.get(fmt, 'its default name')} in {out_dir}); check the tool version.")
        outputs[fmt] = target.name
    return {"summary": summary, "profiler": profiler, "commands": commands, "outputs": outputs,
            **({"pftrace": outputs["perfetto"]} if "perfetto" in outputs else {})}


def view(capture_record: dict, capture_dir: Path, out_dir: Path, options: dict) -> dict:
    return view_profile(Path(capture_record["neff"]), capture_dir / NTFF, out_dir, options)
