"""Neuron backend: the real Neuron tools, driven exactly as documented in the Neuron SDK 2.27-2.33
documentation (neuron-explorer and neuron-profile, TorchNeuron; docs/neuron.md). This module holds the
compile environment and the compile routes; the profiler's command line (capture, view, NTFF names,
out-of-memory detection) is neuron_profiler.py; which route and target a run takes, neuron_setup.py.

build   route torchneuron (SDK 2.33+, trn2/trn3): torch.compile(backend="neuron") in a child with a
        NEFF cache folder of its own per build (TorchNeuron's cache key ignores the compiler flags);
        the NEFF is the one that appears during the first call (torchneuron_program.py)
        route xla (SDK <= 2.31): torch-xla runs the workload with NEURON_FRAMEWORK_DEBUG=1,
        NEURON_CC_FLAGS from config and a compile cache directory of its own (NEURON_COMPILE_CACHE_URL);
        the NEFF of the workload graph is the one that appears while the workload runs (xla_program.py)
        impl nki, on either route: the kernel's own NEFF (nki_program.py)
capture <profiler> capture -n NEFF -s DIR/profile.ntff --num-exec N --profile-nth-exec K
        --ignore-exec-errors (or the saved inputs); the NTFF is found by the documented naming rules;
        a device out-of-memory is retried by Snakemake with --single-io; a NEFF the profiler refuses
        (TorchNeuron) is profiled by the runtime's inspect mode instead; then framework timing
view    summary-json (always), parquet (neuron-explorer), legacy json (when asked), perfetto
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from neuronsweep.analysis import device_collectives, rank_timeline
from neuronsweep.analysis.correctness import Correctness, rejudge, worst
from neuronsweep.analysis.stats import latency_stats, process_rounds
from neuronsweep.atomic import read_json
from neuronsweep.backends import BACKENDS, nccom_test, neuron_setup
from neuronsweep.backends.build_facts import package_versions, recompilation_flag
from neuronsweep.backends.cores import cores_at_lnc
from neuronsweep.backends.neuron_profiler import (
    INSPECT_MODES,
    NTFF,
    CaptureRefused,
    capture_neff,
    execution_samples,
    inspect_env,
    pair_inspect_outputs,
    tool_env,
    view_profile,
    view_ranks,
    view_session,
)
from neuronsweep.backends.processes import child_args, fresh, run_child
from neuronsweep.backends.programs import torchneuron_collective, torchneuron_forward, xla_collective, xla_program
from neuronsweep.config.settings import BuildSettings, CaptureSettings, ViewSettings
from neuronsweep.errors import UserError
from neuronsweep.formats import pftrace_writer
from neuronsweep.host import slots, targets
from neuronsweep.host.targets import TARGETS
from neuronsweep.kernels import unsupported as nki_unsupported
from neuronsweep.kernels.nki_matmul import loops as kernel_loops
from neuronsweep.kernels.nki_matmul import nki_version
from neuronsweep.store.cache import CompileCache
from neuronsweep.store.records import BuildRecord, CaptureFields, CaptureRecord, ViewFields
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import described, dtype_of, forward_of, ranks_of, uses_nki, workload_id

ARTIFACT = BACKENDS["neuron"].artifacts["build"]
# v4: torch-xla with autograd off, a prefill layer writes its KV cache; v5: TorchNeuron gets the HLO debug variables
ARTIFACT_FORMAT = "NEFF via TorchNeuron, torch-xla or nki.jit, v5"
NEURON_PACKAGES = neuron_setup.PACKAGES


@dataclass(frozen=True)
class Compiler:
    """The neuron section's compiler options, read once (the section with the schema's defaults filled in:
    settings.BuildSettings.for_backend), and the command lines and environments they make."""

    target: str
    optlevel: int
    configured_auto_cast: str | None
    configured_lnc: int | None
    disable_dge: bool
    extra_cc_flags: str | None
    xla_debug: bool  # HLO metadata naming the framework source: asked for, or needed by the Memory Tracker

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> Compiler:
        """The compiler options of a neuron section."""
        return cls(
            target=options["target"],
            optlevel=options["optlevel"],
            configured_auto_cast=options["auto_cast"],
            configured_lnc=options["lnc"],
            disable_dge=bool(options["disable_dge"]),
            extra_cc_flags=options["extra_cc_flags"],
            xla_debug=bool(options["xla_debug"] or options.get("memory_tracker")),
        )

    @property
    def auto_cast(self) -> str:
        """--auto-cast is always passed: its default changed between SDKs (matmult, then none in 2.27), and
        an fp32 workload silently run as bf16 would be measured against the fp32 peak."""
        return self.configured_auto_cast or "none"

    @property
    def lnc(self) -> int:
        """Logical NeuronCore size: the configured `lnc`, else the target's default (2 on trn2)."""
        return TARGETS[self.target].lnc(self.configured_lnc)

    def cc_flags(self) -> str:
        """NEURON_CC_FLAGS (neuronx-cc compile options)."""
        flags = [f"--target {self.target}", f"-O{self.optlevel}", f"--auto-cast {self.auto_cast}"]
        if self.configured_lnc and (self.configured_lnc != 1 or len(TARGETS[self.target].lnc_choices) > 1):
            flags.append(f"--logical-nc-config {self.configured_lnc}")  # explicit wherever the target has a choice
        return " ".join(flags + self._own_flags())

    def torchneuron_cc_flags(self) -> str:
        """NEURON_CC_FLAGS on the TorchNeuron route: only what the config sets to another value than the
        flags TorchNeuron passes itself (passing those again would say twice what is already said)."""
        flags = [] if self.optlevel == 2 else [f"-O{self.optlevel}"]
        if self.auto_cast != "none":
            flags.append(f"--auto-cast {self.auto_cast}")
        return " ".join(flags + self._own_flags())

    def torchneuron_effective_flags(self) -> str:
        """The compiler's command line as TorchNeuron makes it: its own flags, then NEURON_CC_FLAGS."""
        own = [f"--target {self.target}", f"--logical-nc-config {self.lnc}", *TORCHNEURON_DEFAULT_FLAGS]
        return " ".join([*own, self.torchneuron_cc_flags()]).strip()

    def _own_flags(self) -> list[str]:
        """What every route passes as the config says: --disable-dge, then the user's extra flags."""
        return ["--disable-dge"] * self.disable_dge + ([self.extra_cc_flags] if self.extra_cc_flags else [])


# TorchNeuron's own compiler flags ("torch.compile on Neuron", SDK 2.33): it passes --target (from the
# runtime), the LNC (from NEURON_LOGICAL_NC_CONFIG), -O2, --model-type transformer and --auto-cast=none
# itself, then appends NEURON_CC_FLAGS, so the last value of a flag wins.
TORCHNEURON_DEFAULT_FLAGS = ("-O2", "--model-type transformer", "--auto-cast=none")


# ---------------------------------------------------------------------------------------- build


def compile_env(compiler: Compiler, compile_cache: Path, visible_cores: str | None = None) -> dict[str, str]:
    """The environment a neuron compile runs in: the tools' environment on the slot's cores, NEURON_CC_FLAGS from the
    config, the compile cache and the LNC (the runtime's must be the compiler's), plus the HLO debug variables when
    asked."""
    env = tool_env(visible_cores)
    env.update(
        {
            "NEURON_FRAMEWORK_DEBUG": "1",
            "NEURON_CC_FLAGS": compiler.cc_flags(),
            "NEURON_COMPILE_CACHE_URL": str(compile_cache),
            "NEURON_LOGICAL_NC_CONFIG": str(compiler.lnc),  # the runtime's LNC must be the compiler's
        }
    )
    if compiler.xla_debug:
        env.update({"XLA_IR_DEBUG": "1", "XLA_HLO_DEBUG": "1"})
    return env


def _compile_xla(spec: Spec, out_dir: Path, settings: BuildSettings, entry: Path) -> dict:
    """torch-xla route: per-workload NEURON_COMPILE_CACHE_URL, wiped so attribution sees the compile.
    A collective runs its program on `world` NeuronCores, one rank each (xla_collective.py), and its
    NEFF is attributed from rank 0's phases as any workload's."""
    collective = described(spec).ranks
    if collective and not described(spec).bandwidth:
        raise UserError(
            f"case {workload_id(spec)}: a forward across ranks runs on the TorchNeuron route only (trn2, trn3); "
            "the torch-xla route of trn1 and inf2 serves with NxD Inference, whose graphs neuron-sweep times as "
            "parts: set forward_layers: 0 for this model, or neuron.route: torchneuron on a trn2 or trn3."
        )
    compile_cache = fresh(entry / "neuron-compile-cache")
    workdir = fresh(out_dir.resolve() / "xla")
    env = compile_env(Compiler.of(settings.options), compile_cache, settings.visible_cores)
    globs = [str(compile_cache / "**" / "*.neff"), str(workdir / ("rank_0" if collective else "") / "MODULE_*.neff")]
    if collective:
        result = xla_collective.run(spec, workdir, env, globs, settings.timeout_s, check=1)
    else:
        result = xla_program.run(spec, workdir / "xla_result.json", env, workdir, globs, settings.timeout_s, check=1)
    neff, candidates = xla_program.attribute(result, spec, "NEFF")
    return {
        "neff_source": neff,
        "candidates": candidates,
        "compile_s": result["compile"]["seconds"],
        "compile_count": result["compile"]["count"],
        "second_call_compile_count": result["compile"]["second_call_count"],
        "recompiled_on_second_call": result["compile"]["second_call_count"] > 0,
        "compile_s_source": "torch_xla.debug.metrics CompileTime" + (" (rank 0)" if collective else ""),
        "capture_inputs": None,
        "experts_implementation": result.get("experts_implementation"),  # a layer's (workloads/layer.py)
        "correctness": rank_checks(workdir, spec) if collective else result.get("correctness"),
        **({"ranks_launched_by": "torchrun --standalone, one NeuronCore per rank"} if collective else {}),
    }


def rank_checks(workdir: Path, spec: Spec) -> Correctness:
    """A collective's verdict: every rank's check_rank_<r>.json (its output against the float64 NumPy
    result), the worst one standing for the case."""
    return worst([read_json(workdir / f"check_rank_{r}.json") for r in range(ranks_of(spec))])


def torchneuron_env(
    compiler: Compiler, neff_cache: Path, debug_dir: Path, visible_cores: str | None = None
) -> dict[str, str]:
    """TorchNeuron's environment ("TorchNeuron environment variables", SDK 2.33): the build's own NEFF
    cache, artifacts kept, no silent fallback to CPU execution, the runtime's LNC equal to the compiler's;
    the HLO debug variables when asked (a layer case's build always asks)."""
    env = tool_env(visible_cores)
    env.pop("TORCH_NEURONX_NEFF_DISABLE_CACHE", None)  # inherited, it would leave no NEFF to attribute
    env.update(
        {
            "NEURON_CC_FLAGS": compiler.torchneuron_cc_flags(),
            "TORCH_NEURONX_NEFF_CACHE_DIR": str(neff_cache),
            "TORCH_NEURONX_DEBUG_DIR": str(debug_dir),
            "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS": "1",
            "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "1",
            "NEURON_LOGICAL_NC_CONFIG": str(compiler.lnc),
        }
    )
    if compiler.xla_debug:  # "Setup (all methods)" of how-to-profile-workload: descriptive layer names in the profile
        env.update({"XLA_IR_DEBUG": "1", "XLA_HLO_DEBUG": "1"})
    return env


def _compile_torchneuron(spec: Spec, out_dir: Path, settings: BuildSettings, entry: Path) -> dict:
    """TorchNeuron route: a fresh NEFF cache folder per build (its key ignores NEURON_CC_FLAGS and the
    compiler version, so a shared one can hand back a NEFF compiled with other flags); the workload's NEFF
    is the one new NEFF after the first compiled call, none or several fail with the list. A collective
    runs on `world` NeuronCores, one rank each (torchneuron_collective.py; a forward across ranks
    torchneuron_forward.py), its NEFF rank 0's."""
    wid = workload_id(spec)
    collective = described(spec).ranks
    neff_cache = fresh(entry / "torchneuron-neff-cache")
    workdir = fresh(out_dir.resolve() / "torchneuron")
    env = torchneuron_env(Compiler.of(settings.options), neff_cache, workdir / "debug", settings.visible_cores)
    if collective:
        result = rank_program(spec).run(spec, workdir, env, neff_cache, settings.timeout_s, check=1)
    else:
        result = torchneuron_run(spec, workdir, env, neff_cache, settings.timeout_s, check=1)
    listed = neff_cache / "rank_0" if collective else neff_cache
    digests = result["digests"]
    first = {digests[p]: p for p in result["first_call"]}  # distinct NEFFs by content
    if len(first) != 1:
        raise UserError(
            f"case {wid}: expected one new NEFF in {listed} after the compiled call, found "
            f"{sorted(first.values()) or 'none'}; "
            + (
                "the graph is split: simplify the workload or profile each graph."
                if first
                else f"check the torch.compile log ({'torchrun' if collective else 'torchneuron_program'}.log "
                "in the build's torchneuron/ folder)."
            )
        )
    neff = next(iter(first.values()))
    return {
        "neff_source": neff,
        **({"rank_neffs": rank_neffs(neff_cache, ranks_of(spec))} if collective else {}),
        "candidates": [{"path": p, "phase": "first call"} for p in result["first_call"]]
        + [{"path": p, "phase": "second call"} for p in result["second_call"]],
        "compile_s": max(0.0, result["first_call_s"] - result["second_call_s"]),
        "compile_count": len(first),
        "second_call_compile_count": len(result["second_call"]),
        "recompiled_on_second_call": bool(result["second_call"]),
        "compile_s_source": "first compiled call minus the second (cached) call, wall clock"
        + (" (rank 0)" if collective else ""),
        "neff_cache": str(listed),
        "torch_neuronx": result["torch_neuronx"],
        "device": result["device"],
        "correctness": rank_checks(workdir, spec) if collective else result.get("correctness"),
        # a NEFF's input names are its own ("Neuron Explorer reads each input name and size from the NEFF"),
        # not the PyTorch argument names: the capture passes none (zero-filled buffers of the right size);
        # the output was checked here, on the workload's own tensors
        "capture_inputs": None,
        **({"ranks_launched_by": "torchrun --standalone, one NeuronCore per rank"} if collective else {}),
    }


def rank_program(spec: Spec) -> ModuleType:
    """The TorchNeuron program a workload run on ranks runs under torchrun: a collective alone, or a forward."""
    return torchneuron_collective if described(spec).bandwidth else torchneuron_forward


def rank_neffs(neff_cache: Path, world: int) -> list[str | None]:
    """Each rank's own NEFF (rank_<r>/ of the build's NEFF cache): ranks compile separately and every
    compilation carries its own uuid (profile schema reference, NeffHeader), so rank r's profile pairs only
    with rank r's NEFF. None where a rank left other than one NEFF (its pairing then fails saying so)."""
    out = []
    for r in range(world):
        found = sorted(str(p) for p in (neff_cache / f"rank_{r}").rglob("*.neff"))
        out.append(found[0] if len(found) == 1 else None)
    return out


def torchneuron_run(
    spec: Spec, workdir: Path, env: dict[str, str], neff_cache: Path, timeout_s: float, **options: object
) -> dict:
    """Run torchneuron_program in `workdir`; options: check, warmup, iterations, repeats, inspect_nth."""
    workdir = workdir.resolve()
    args = child_args(spec, workdir / "result.json", neff_cache=neff_cache, **options)
    run_child("torchneuron_program", args, spec, workdir, env, "TorchNeuron run", timeout_s)
    return json.loads((workdir / "result.json").read_text())


def _compile_nki(spec: Spec, out_dir: Path, settings: BuildSettings, entry: Path) -> dict:
    """NKI route: NKI_ARTIFACTS_DIR (nki >= 0.2) or nki.benchmark's save_neff_name (legacy)."""
    why = nki_unsupported(spec, settings.options["target"], chip=targets.onchip(settings.options["target"]))
    if why:
        raise UserError(f"case {workload_id(spec)}: {why}; use impl: compiler for it.")
    workdir = out_dir.resolve() / "nki"
    shutil.rmtree(workdir, ignore_errors=True)
    artifacts = fresh(workdir / "artifacts")
    env, compiler = tool_env(settings.visible_cores), Compiler.of(settings.options)
    # inherited, it would build with the custom frontend (deprecated in 2.33, removed next: the nki.jit page
    # of 2.33.1), where our kernels' nl.fori_loop has no NkiScalar
    env.pop("NKI_COMPILER_FRONTEND", None)
    env.update(
        {
            "NKI_ARTIFACTS_DIR": str(artifacts),
            "NEURON_PLATFORM_TARGET_OVERRIDE": TARGETS[compiler.target].nki_platform,
            "NEURON_LOGICAL_NC_CONFIG": str(compiler.lnc),  # NKI_LNC: build() runs NKI kernels at LNC 1
            "NEURON_CC_FLAGS": compiler.cc_flags(),
        }
    )
    run_child(
        "nki_program",
        ["--spec", json.dumps(spec), "--out", str(workdir / "nki_result.json"), "--inputs-dir", str(entry / "inputs")],
        spec,
        workdir,
        env,
        "NKI kernel run",
        settings.timeout_s,
    )
    result = json.loads((workdir / "nki_result.json").read_text())
    if len(result["neffs"]) != 1:
        raise UserError(
            f"case {workload_id(spec)}: expected one NEFF from the NKI kernel, found "
            f"{result['neffs'] or 'none'} under {artifacts}."
        )
    return {
        "neff_source": result["neffs"][0],
        "candidates": [{"path": p, "phase": "kernel"} for p in result["neffs"]],
        "compile_s": result["compile_s"],
        "compile_count": None,
        "compile_s_source": result["compile_s_source"],
        "nki_api": result["api"],
        "nki_loops": result["loops"],
        "recompiled_on_second_call": result["recompiled_on_second_call"],
        "correctness": result["correctness"],
        "benchmark_us": result.get("benchmark_us"),
        "capture_inputs": result["inputs"],
    }


def nki_loops() -> str:
    """The loops our NKI kernels trace with the installed nki (read from its metadata, not imported here)."""
    return kernel_loops("nki" if nki_version() else "neuronxcc.nki")


ROUTES = {"torchneuron": _compile_torchneuron, "xla": _compile_xla}
COMPILERS = {"torchneuron": "neuronx-cc via TorchNeuron torch.compile", "xla": "neuronx-cc via torch-xla"}


NKI_LNC = 1
"""NKI kernels run at LNC 1 end to end (compile, NEURON_LOGICAL_NC_CONFIG, capture): an @nki.jit kernel
launches at LNC 1 unless called as kernel[lnc](...) with its work split by nl.program_id, and a launch
that differs from the runtime's LNC fails (the nki.jit docstring, NKI "About LNC"). Our kernels are
single-core kernels, so on trn2/trn3 (LNC 2) they are measured on one physical core, against one
physical core's peaks."""


def build(spec: Spec, out_dir: Path, cache: CompileCache, settings: BuildSettings) -> dict:
    # what is still auto is settled on this machine (a cluster node, a build run by hand)
    """Compile the workload to a NEFF on the route the run settled (TorchNeuron, torch-xla compiler route, or an
    NKI kernel) and attribute the NEFF that belongs to it, through the compile cache.

    Args:
        spec: the workload (workloads/).
        out_dir: the case's build/ folder (the NEFF and the route's logs go there).
        cache: the compile cache (keyed by spec, toolchain and flags).
        settings: the build settings (the neuron section with its target, LNC, route and compiler flags).

    Returns:
        build.json's fields: toolchain versions, the effective compiler command line, target and LNC, the NEFF and its
        attribution, compile time, cache hit, correctness.
    """
    nki_impl = uses_nki(spec)
    options, setup = neuron_setup.settle(settings.options, check_route=False, need_route=not nki_impl)
    slot_lnc = setup["machine_lnc"]  # the LNC the slots number their cores at: the machine's (neuron-ls)
    if nki_impl:
        options = {**options, "lnc": NKI_LNC}
    if described(spec).layer_split:  # its split reads the profile's FrameworkInstruction, which needs the HLO metadata
        options = {**options, "xla_debug": True}
    settings, compiler = replace(settings, options=options), Compiler.of(options)
    versions = package_versions(NEURON_PACKAGES)
    torchneuron = not nki_impl and options["route"] == "torchneuron"
    flags = compiler.torchneuron_cc_flags() if torchneuron else compiler.cc_flags()
    route = _compile_nki if nki_impl else ROUTES[options["route"]]

    def compile_neff(entry: Path) -> tuple[Path, dict]:
        # every route executes the workload on NeuronCores: take a device slot like a capture
        with slots.held(
            settings,
            "neuron",
            f"neuron build {workload_id(spec)}",
            compiler.target,
            slot_lnc,
            cores=ranks_of(spec),
        ) as (on_slot, span):
            on_slot = replace(on_slot, visible_cores=cores_at_lnc(on_slot.visible_cores, slot_lnc, compiler.lnc))
            made = route(spec, out_dir, on_slot, entry)
        return Path(made["neff_source"]), {**made, "visible_cores": on_slot.visible_cores, "device_span": span}

    material = {
        "spec": spec,
        "backend": "neuron",
        "route": "nki" if nki_impl else options["route"],
        "cc_flags": flags,
        "target": compiler.target,  # TorchNeuron takes both from the runtime, not from NEURON_CC_FLAGS
        "lnc": compiler.lnc,
        "xla_debug": compiler.xla_debug,
        "versions": versions,
        "format": ARTIFACT_FORMAT,
        **({"nki_loops": nki_loops()} if nki_impl and not described(spec).user_code else {}),  # our kernels' loops
    }
    meta, fields = cache.through(material, ARTIFACT, out_dir / ARTIFACT, compile_neff)
    entry = Path(fields["cache"]["entry"])
    if nki_impl:
        env = {"NKI_ARTIFACTS_DIR": "<build>/nki/artifacts", "NEURON_LOGICAL_NC_CONFIG": str(NKI_LNC)}
    elif options["route"] == "torchneuron":
        env = torchneuron_env(compiler, entry / "torchneuron-neff-cache", out_dir.resolve() / "torchneuron" / "debug")
    else:
        env = compile_env(compiler, entry / "neuron-compile-cache")
    env = {
        k: v
        for k, v in env.items()
        if k.startswith(
            (
                "NEURON_FRAMEWORK_DEBUG",
                "NEURON_CC_FLAGS",
                "NEURON_COMPILE",
                "NEURON_LOGICAL",
                "TORCH_NEURONX_",
                "XLA_",
                "NKI_",
            )
        )
    }
    return {
        "toolchain": versions,
        "route": "nki" if nki_impl else options["route"],
        "route_reason": None
        if nki_impl
        else setup.get("route") or f"neuron.route {options['route']} (settled when the run was planned)",
        "target_reason": setup["target"],
        "compiler": "NKI kernel (nki.jit)" if nki_impl else COMPILERS[options["route"]],
        "artifact_format": ARTIFACT_FORMAT,
        "cc_flags": flags,
        "compiler_flags": compiler.torchneuron_effective_flags() if torchneuron else flags,
        "compiler_flags_source": "TorchNeuron's own flags, then NEURON_CC_FLAGS (torch.compile on Neuron)"
        if torchneuron
        else "NEURON_CC_FLAGS",
        "target": compiler.target,
        "auto_cast": compiler.auto_cast,
        "lnc": compiler.lnc,
        "slot_lnc": slot_lnc,
        "env": env,
        "compile_cache": str(entry / "neuron-compile-cache") if options["route"] == "xla" and not nki_impl else None,
        **{k: v for k, v in meta.items() if k != "made_at"},
        "correctness": rejudge(meta.get("correctness"), dtype_of(spec), compiler.auto_cast),
        **fields,
        "recompilation_flag": recompilation_flag("kernel" if nki_impl else "graph")
        if meta.get("recompiled_on_second_call")
        else None,
    }


# -------------------------------------------------------------------------------------- capture


def framework_timing(build: BuildRecord, settings: CaptureSettings, workdir: Path) -> dict:
    """warmup + iterations on the XLA device, each synced; reuses the build's compile cache, so a
    compile here means the graph changed (recompilation), which is recorded, not hidden."""
    env = tool_env(settings.visible_cores, settings.runtime_lnc)
    env.update(build.env)
    globs = [str(Path(build.details["compile_cache"]) / "**" / "*.neff")]

    def one_run(folder: Path, repeats: int) -> dict:
        timing = {"warmup": settings.warmup, "iterations": settings.iterations, "repeats": repeats}
        result = xla_program.run(build.spec, folder / "timing.json", env, folder, globs, settings.timeout_s, **timing)
        return {**result["timing"], "compiles_in_first_run": result["compile"]["count"], "pid": result.get("pid")}

    timing, runs = _timed(one_run, workdir, settings)
    if len(runs) > 1:  # rounds in processes: the first run's compiles
        timing["compiles_in_first_run"] = runs[0]["compiles_in_first_run"]
    return timing


def _timed(one_run: Callable[[Path, int], dict], workdir: Path, settings: CaptureSettings) -> tuple[dict, list[dict]]:
    """A device program's timing and the runs it came from: one run of `repeats` rounds in `workdir`, or
    (capture.rounds_in_processes) a run of one round each in workdir/round_<r>/, merged: every sample, each
    run's median a round that analysis/verdict.py tests, their recompiles summed, their pids (round_pids).
    `one_run(folder, repeats)`: the program's timing dict with its samples_s, sync and pid."""
    if not settings.rounds_in_processes:
        workdir.mkdir(parents=True, exist_ok=True)
        timing = one_run(workdir, settings.repeats)
        timing.pop("pid", None)
        return timing, [timing]
    runs = []
    for r in range(1, settings.repeats + 1):
        (workdir / f"round_{r}").mkdir(parents=True, exist_ok=True)
        runs.append(one_run(workdir / f"round_{r}", 1))
    return process_rounds(runs), runs


def collective_timing(build: BuildRecord, settings: CaptureSettings, workdir: Path) -> CaptureFields:
    """Every rank's times on its NeuronCore (xla_collective.py, torchneuron_collective.py or a forward's
    torchneuron_forward.py), through the build's compile or NEFF cache; an execution's time is the slowest
    rank's, as for the gloo ranks; nccom-test's figures beside a collective's."""
    spec = build.spec
    env = {**tool_env(settings.visible_cores, settings.runtime_lnc), **build.env}
    timing = {"warmup": settings.warmup, "iterations": settings.iterations, "repeats": settings.repeats}
    if build.details.get("route") == "torchneuron":
        ranks = rerun_torchneuron(build, settings, workdir, {}, **timing)["ranks"]
        compiles = {"recompiles_during_timing": sum(r["recompiles_during_timing"] for r in ranks)}
        sync = "torch.neuron.synchronize() before and after each execution, after a barrier of all ranks"
    else:
        cache = build.details["compile_cache"]
        globs = [str(Path(cache) / "**" / "*.neff")]
        result = xla_collective.run(spec, workdir, env, globs, settings.timeout_s, **timing)
        ranks = result["ranks"]
        compiles = {"compiles_in_first_run": result["compile"]["count"]}
        sync = "xm.mark_step() + xm.wait_device_ops() per execution, after a rendezvous of all ranks"
    per_exec = [max(r["samples_s"][i] for r in ranks) for i in range(len(ranks[0]["samples_s"]))]
    timed: CaptureFields = {
        "latency": {**latency_stats(per_exec, settings.repeats), **compiles, "sync": sync},
        "latency_basis": "per execution, the slowest rank's time (each execution starts after a rendezvous)",
        "rank_latency": [
            {"rank": r["rank"], "core": r["core"], **latency_stats(r["samples_s"], settings.repeats)} for r in ranks
        ],
    }
    if not described(spec).bandwidth:  # a forward across ranks: its collectives sit inside its NEFF
        return timed | forward_inside_neff(ranks, spec)
    return timed | {
        "nccom_test": nccom_test.measure(
            spec,
            tool_env(settings.visible_cores, settings.runtime_lnc),
            settings.iterations * settings.repeats,
            settings.warmup,
            settings.timeout_s,
            workdir / "nccom-test.log",
        ),
    }


def forward_inside_neff(ranks: list[dict], spec: Spec) -> CaptureFields:
    """capture.json's `forward_across_ranks` of a forward compiled whole: its layers and collective calls; the
    time inside them, waiting and computing are not told apart from the host (the NEFF runs them together),
    and each rank's device profile (profile_rank_<r>.ntff) holds them."""
    why = (
        "the forward's collectives run inside its NEFF, so the host sees each execution whole: the time inside "
        "them, waiting in them and computing between them are in each rank's device profile "
        "(capture/profile_rank_<r>.ntff), whose parquet view's CcOp table the view puts on one timeline"
    )
    return {
        "forward_across_ranks": {
            "layers_run": forward_of(spec).layers_run,
            "collective_calls": len(ranks[0]["calls"]),
            "ops": dict(Counter(ranks[0]["calls"])),
            "collectives_s": None,
            "wait_s": None,
            "compute_s": None,
            "why": why,
            "overlap_why": why,
        },
        "rank_timeline_why": why,
    }


RANKS_TRACE = "ranks.pftrace"  # every profiled rank's collective operations on one timeline, a process each


def ranks_timeline(out_dir: Path) -> ViewFields:
    """view.json's `rank_timeline`: the ranks' collective operations from their parquet views on one timeline
    (analysis/device_collectives.py), drawn as out_dir/ranks.pftrace, a process track per rank on rank 0's
    clock; nothing where no rank was viewed as parquet."""
    found = device_collectives.read(out_dir)
    if found is None:
        return {}
    if found.timeline is None:
        return {"rank_timeline": found.summary()}
    spans = [list(s) for s in found.spans]
    events = rank_timeline.chrome_trace(spans, found.timeline, "collective", list(found.operations) or None)
    pftrace_writer.chrome_to_pftrace(events, out_dir / RANKS_TRACE)
    return {"rank_timeline": found.summary(), "ranks_pftrace": RANKS_TRACE}


def rerun_torchneuron(
    build: BuildRecord, settings: CaptureSettings, workdir: Path, env: dict[str, str], **options: object
) -> dict:
    """The build's workload again in TorchNeuron on the capture's cores, through the build's NEFF cache
    (a NEFF appearing there now is a recompile): torchneuron_program, or a collective's ranks."""
    env = {**tool_env(settings.visible_cores, settings.runtime_lnc), **build.env, **env}
    cache = Path(build.env["TORCH_NEURONX_NEFF_CACHE_DIR"])
    if described(build.spec).ranks:
        return rank_program(build.spec).run(build.spec, workdir, env, cache, settings.timeout_s, **options)
    return torchneuron_run(build.spec, workdir, env, cache, settings.timeout_s, **options)


def torchneuron_timing(build: BuildRecord, settings: CaptureSettings, workdir: Path) -> dict:
    """warmup + repeats x iterations compiled calls on the neuron device, each between two
    torch.neuron.synchronize(); with capture.rounds_in_processes each round a process of its own."""

    def one_run(folder: Path, repeats: int) -> dict:
        timing = {"warmup": settings.warmup, "iterations": settings.iterations, "repeats": repeats}
        result = rerun_torchneuron(build, settings, folder, {}, **timing)
        return {**result["timing"], "pid": result.get("pid")}

    return _timed(one_run, workdir, settings)[0]


def device_time_rounds(build: BuildRecord, neff: Path, settings: CaptureSettings, out_dir: Path) -> dict:
    """Samples that are the profiler's device time of each of the `iterations` executions after the warm-up,
    every one profiled (an NKI kernel's always; a compiler build's with neuron.latency_samples: device). One
    capture process (the case's own) or, with capture.rounds_in_processes, `repeats` of them, each a round:
    the first is the case's capture, the others profile into rounds/<r>/."""
    first = settings.warmup + 1
    runs = [execution_samples(neff, out_dir, settings, first, settings.iterations)]
    if settings.rounds_in_processes:
        for r in range(2, settings.repeats + 1):
            folder = fresh(out_dir / "rounds" / f"round_{r}")
            capture_neff(neff, folder, settings, build.details.get("capture_inputs"), kept=first)
            runs.append(execution_samples(neff, folder, settings, first, settings.iterations))
    samples = [x for run in runs for x in run["samples_s"]]
    processes = len(runs)
    return {
        **latency_stats(samples, processes, in_processes=settings.rounds_in_processes),
        "samples_are": runs[0]["samples_are"],
        "basis": runs[0]["basis"]
        + ("" if processes == 1 else f", each of {processes} such processes a round (capture.rounds_in_processes)"),
        "executions": runs[0]["executions"],
    }


def inspect_capture(
    build: BuildRecord, neff: Path, settings: CaptureSettings, out_dir: Path, refused: str
) -> CaptureFields:
    """The runtime's own profiler (SDK 2.33 inspect mode) where the profiler's capture refuses the NEFF. The
    two documented device modes are tried in turn, since the pages disagree on which a PyTorch-native
    process needs: `model` (the workload runs nth times, the runtime profiles execution nth), then, where no
    device trace appeared, `session` (every execution of the process in one NTFF). The NTFF is paired with
    its NEFF as that mode's layout pairs them, the NEFF the build's. A collective's ranks each profile into
    inspect/<mode>/rank_<r>/, each paired with its own NEFF; rank 0's NTFF is the capture's own, and every
    rank's is kept as profile_rank_<r>.ntff, as a multi-worker capture keeps them."""
    collective = described(build.spec).ranks
    world = ranks_of(build.spec)
    own = build.details.get("rank_neffs") or [str(neff)] * world
    started, tried = time.time(), {}
    for mode in INSPECT_MODES:
        raw = fresh(out_dir / "inspect" / mode)
        env = inspect_env(raw, settings, mode)
        rerun_torchneuron(build, settings, out_dir, env, inspect_nth=settings.nth_exec if mode == "model" else None)
        folders = [raw / f"rank_{r}" for r in range(world)] if collective else [raw]
        pairs = [pair_inspect_outputs(f, Path(own[r] or neff), mode) for r, f in enumerate(folders)]
        if all(pairs):
            break
        tried[mode] = f"no device trace for {sum(p is None for p in pairs)} of {len(pairs)} process(es)"
    else:
        raise UserError(
            f"case {build.workload_id}: the profiler refused the NEFF ({refused}) and the runtime's inspect mode "
            f"wrote no device trace in either documented mode ({'; '.join(f'{m}: {w}' for m, w in tried.items())}); "
            "run neuronsweep doctor --field-test and attach its archive to a bug report."
        )
    ntffs = [p for p in pairs if p is not None]  # every one: the loop above stopped where all(pairs)
    ranks = None
    if collective:
        ranks = []
        for r, ntff in enumerate(ntffs):
            shutil.copyfile(ntff, out_dir / f"profile_rank_{r}.ntff")
            ranks.append(
                {"rank": r, "ntff": f"profile_rank_{r}.ntff", "written_as": f"inspect/{mode}/rank_{r}", "neff": own[r]}
            )
    shutil.copyfile(ntffs[0], out_dir / NTFF)
    return {
        "profiler": "Neuron Runtime inspect mode (NEURON_RT_INSPECT_*)",
        "profiler_version": None,
        "argv": None,
        "inspect_mode": mode,
        "inspect_modes_tried": {**tried, mode: "device trace written"},
        **(
            {"profile_scope": "session mode: the NTFF holds every execution of the workload in its process"}
            if mode == "session"
            else {}
        ),
        "inspect_env": {k: v for k, v in env.items() if k.startswith(("NEURON_RT_INSPECT", "NEURON_RT_ENABLE_DGE"))},
        "dge_notifications": "NEURON_RT_ENABLE_DGE_NOTIFICATIONS" in env,
        "capture_refused": refused,
        "exit_status": 0,
        "capture_wall_s": time.time() - started,
        "ntff_written_as": ntffs[0].name,
        "neff": str(neff),
        "neff_sha256": hashlib.sha256(neff.read_bytes()).hexdigest(),
        **({"ranks": ranks, "session_dir": f"inspect/{mode}"} if ranks else {}),
        "single_io": False,
        "outputs_valid": True,
        "inputs": "the workload's own tensors, in TorchNeuron",
        "artifacts": {"ntff": NTFF},
    }


def capture(build: BuildRecord, build_dir: Path, settings: CaptureSettings, out_dir: Path) -> CaptureFields:
    """Profile the NEFF with the Neuron profiler (its nth execution; the runtime's inspect mode where the profiler
    cannot run it) and time it on the device.

    Args:
        build: the case's build record.
        build_dir: the folder holding its NEFF.
        settings: the capture settings (warmup, iterations, nth_exec, the slot's cores, collectives' workers).
        out_dir: the case's capture/ folder (the NTFF goes there).

    Returns:
        capture.json's fields: profiler and its command, latency, per-rank times, the inspect mode that worked, DGE
        notifications, nccom-test's anchor.
    """
    if described(build.spec).ranks and not settings.collectives:  # a worker per rank, as the build ran
        settings = replace(settings, collectives={"workers_per_node": ranks_of(build.spec)})
    # every device process runs at the NEFF's LNC, on the slot's cores named at that LNC
    neff_lnc = build.lnc
    if neff_lnc is not None:
        slot_lnc = build.details.get("slot_lnc", neff_lnc)
        cores = cores_at_lnc(settings.visible_cores, slot_lnc, neff_lnc)
        settings = replace(settings, runtime_lnc=neff_lnc, visible_cores=cores)
    neff = build_dir / ARTIFACT
    torchneuron = build.details.get("route") == "torchneuron"
    collective = described(build.spec).ranks
    nki = uses_nki(build.spec) and not collective
    device_asked = not collective and settings.options.get("latency_samples") == "device"
    device_samples, asked = nki or device_asked, settings
    if device_samples:  # every execution profiled: the warm-up, then `iterations` whose device times are samples
        settings = replace(settings, num_exec=settings.warmup + settings.iterations, nth_exec=1)
    try:
        kept = settings.warmup + 1 if device_samples else None
        record = capture_neff(neff, out_dir, settings, build.details.get("capture_inputs"), kept=kept)
    except CaptureRefused as exc:
        if not torchneuron:
            raise
        record, device_samples = inspect_capture(build, neff, asked, out_dir, str(exc)), False
        settings = asked
    if collective:
        record.update(collective_timing(build, settings, out_dir / "framework"))
    elif device_samples:  # an NKI kernel (no supported NKI timing API) or neuron.latency_samples: device
        record["latency"] = device_time_rounds(build, neff, settings, out_dir)
        record["latency_note"] = (
            "NKI kernels run outside a framework here: each sample is one execution's device time"
            if nki
            else "neuron.latency_samples device: each sample is one execution's device time, not a framework's"
        )
    elif torchneuron:
        record["latency"] = torchneuron_timing(build, settings, out_dir / "framework")
        if device_asked:  # the profiler refused the NEFF: the inspect mode profiles, TorchNeuron times
            record["latency_note"] = (
                "neuron.latency_samples device asked, but the profiler refused this NEFF (timed through the "
                "runtime's inspect mode): the samples are TorchNeuron's wall clock"
            )
    else:
        record["latency"] = framework_timing(build, settings, out_dir / "framework")
    record["round_pids"] = record["latency"].pop("round_pids", None)  # where each round was a process of its own
    record["threads"] = None
    record["runtime_lnc"] = settings.runtime_lnc
    return record


# ----------------------------------------------------------------------------------------- view


def captured_with_dge_notifications(cap: CaptureRecord) -> bool:
    """The capture's own record: the profiler's flag, or the runtime variable of an inspect capture."""
    if "dge_notifications" in cap.details:
        return bool(cap.details["dge_notifications"])
    return "--enable-dge-notifs" in (cap.details.get("argv") or [])  # captures recorded before the field


def view(cap: CaptureRecord, capture_dir: Path, out_dir: Path, settings: ViewSettings) -> ViewFields:
    """Turn the NTFF and its NEFF into summary-json, parquet (and a legacy json where the tool still writes one)
    and a pftrace, per rank for a multi-worker capture.

    Args:
        cap: the case's capture record.
        capture_dir: the folder holding its NTFF(s).
        out_dir: the case's view/ folder.
        settings: the view settings (profiler, output formats, memory tracker, time limit).

    Returns:
        view.json's fields: the summary, the outputs written and each rank's.
    """
    if settings.memory_tracker and not captured_with_dge_notifications(cap):
        raise UserError(
            f"case {cap.workload_id}: neuron.memory_tracker is on, but its capture ran without DGE "
            "notifications (--enable-dge-notifs), which the Memory Tracker needs; capture it again "
            "(snakemake --forcerun capture, or neuronsweep capture with the option set)."
        )
    neff = Path(cap.details["neff"])
    settings = replace(settings, runtime_lnc=cap.details.get("runtime_lnc"))
    captured_with = (cap.details.get("profiler"), cap.details.get("profiler_version"))  # its version, not asked again
    result = view_profile(neff, capture_dir / NTFF, out_dir, settings, captured_with)
    if cap.details.get("ranks"):
        result["ranks"] = view_ranks(neff, capture_dir, cap.details["ranks"], out_dir, settings)
        result |= ranks_timeline(out_dir)
        if settings.pftrace:  # the guide's combined view, over the folder the capture wrote the ranks to
            session = capture_dir / cap.details.get("session_dir", "raw")
            try:
                neffs = [neff, *(Path(r["neff"]) for r in cap.details["ranks"] if r.get("neff"))]
                result["session"] = view_session(neffs, session, out_dir, settings)
            except UserError as e:  # documented for inspect output; the per-rank views stand without it
                result["session"], result["session_why"] = None, str(e)
    return result
