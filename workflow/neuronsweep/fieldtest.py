"""`neuronsweep doctor --field-test`: every assumption this project makes about the Neuron tools, checked
on the machine it runs on, before a user trusts a sweep there (a new SDK, a new instance type).

It runs the real workflow on one small bf16 matmul through each route this environment has (TorchNeuron
or torch-xla, and NKI where the `nki` package is installed), in every view format the tool offers, then
prints one PASS / FAIL / SKIP line per contract and writes field-test.tar.gz: versions, command lines,
the tails of the logs and the small records (no NEFF, NTFF or tensors), to attach to a bug report.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from neuronsweep import doctor, kernels
from neuronsweep.analysis import derived, framework_split, intervals
from neuronsweep.analysis.metrics import memory
from neuronsweep.analysis.metrics.bounds import DGE
from neuronsweep.analysis.profile_tables import columns, find_table
from neuronsweep.analysis.stats import DEVICE_TIMES
from neuronsweep.backends import neuron_setup
from neuronsweep.errors import UserError
from neuronsweep.formats import profile_schema
from neuronsweep.formats.profile_db import ProfileDB
from neuronsweep.host import neuron_ls, targets
from neuronsweep.stages import session
from neuronsweep.store import layout
from neuronsweep.workloads import as_spec, described, record

# Two stationary tiles by one PSUM bank: every route and the NKI kernel take it, and the kernel's device loop
# (NKI 0.6+: nl.fori_loop over M tiles) runs twice, so its addressing of the second tile is checked.
CASE = {"m": 256, "k": 128, "n": 512}
SMALL = {".json", ".txt", ".log", ".csv", ".yaml"}  # what the bundle keeps; binaries and tensors stay out
REPO = Path(__file__).resolve().parents[2]  # the checkout: Snakefile, config/


@dataclass
class Line:
    """One line of the field test's table: a contract and what was found."""

    verdict: str  # PASS, FAIL or SKIP
    contract: str
    detail: str

    def __str__(self) -> str:
        return f"{self.verdict:4}  {self.contract:28} {self.detail}"


def available() -> tuple[str | None, bool, str]:
    """(framework route or None, NKI importable, what was found)."""
    probe = neuron_setup.probe_packages()
    try:
        route, why = neuron_setup.choose_route("auto", probe)
    except UserError as exc:  # no framework route: the refusal is the finding (NKI may still run)
        route, why = None, str(exc)
    nki = importlib.util.find_spec("nki") is not None or importlib.util.find_spec("neuronxcc") is not None
    return route, nki, why


# a user's NKI kernel with a keyword param (config/examples/kernels/matmul_t*.py): the custom-kernel route,
# whose call passes `tile_n=` by name (kernels/custom_nki.py)
KERNELS = REPO / "config" / "examples" / "kernels"
USERS_KERNEL = {
    "name": "users_kernel",
    "function": f"{KERNELS / 'matmul_t.py'}:matmul_t",
    "nki_kernel": f"{KERNELS / 'matmul_t_nki.py'}:matmul_t_kernel",
    "inputs": {"lhsT": ["k", "m"], "rhs": ["k", "n"]},
    "grid": {"m": [CASE["m"]], "k": [CASE["k"]], "n": [CASE["n"]]},
    "params": {"tile_n": [256]},
    "impl": ["nki"],
    "dtype": ["bf16"],
}


def config(work: Path, route: str | None, nki: bool) -> dict:
    """The field test's sweep: one case per route and NKI kernel available here (and a collective on TorchNeuron)."""
    suites: dict = {
        "matmul": {
            "shapes": [CASE],
            "dtype": ["bf16"],
            "impl": (["compiler"] if route else []) + (["nki"] if nki else []),
        }
    }
    if nki:
        suites["custom"] = [USERS_KERNEL]
    if route == "torchneuron":  # two ranks, each compiling its own NEFF: the per-rank pairing
        suites["collectives"] = {"operations": ["all_reduce"], "sizes": [4096], "world_sizes": [2]}
    return {
        "run": "field-test",
        "backend": "neuron",
        "cache_dir": str(work / "cache"),
        "capture": {
            "warmup": 2,
            "iterations": 10,
            "repeats": 1,
            "num_exec": 2,
            "nth_exec": 2,
            "device_lock": str(work / "device.lock"),
        },
        # xla_debug: the NEFF maps its instructions back to framework ops (framework_ops_line)
        "neuron": {"route": route or "auto", "json": True, "parquet": True, "pftrace": True, "xla_debug": True},
        "suites": suites,
    }


def run_workflow(work: Path, cfg: dict, timeout_s: float) -> subprocess.CompletedProcess:
    """The field test's sweep through the real workflow (Snakemake, keep-going), its log kept for the bundle."""
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    argv = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(work),
        "--configfile",
        str(work / "config.yaml"),
        "--cores",
        "2",
        "--keep-going",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=work)
    (work / "snakemake.log").write_text(" ".join(argv) + "\n" + proc.stdout + proc.stderr)
    return proc


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check_case(case: Path, name: str) -> list[Line]:
    """The contracts of one case, from what its stages wrote."""
    build, capture = _read(case / "build" / "build.json"), _read(case / "capture" / "capture.json")
    view, metrics = _read(case / "view" / "view.json"), _read(case / "metrics.json")
    summary = _read(case / "view" / "summary.json")
    lines = []

    def add(ok: bool | None, contract: str, detail: str) -> None:
        lines.append(Line("SKIP" if ok is None else "PASS" if ok else "FAIL", f"{name}: {contract}", detail))

    if build is None:
        error = _read(case / "logs" / "build.error.json") or {}
        add(False, "build", error.get("reason", "no build.json (see snakemake.log)"))
        return lines
    neff = Path(build.get("neff_source") or "")
    add(neff.suffix == ".neff", "NEFF attribution", f"{neff.name} of {len(build.get('candidates', []))} candidate(s)")
    if capture is None:
        add(False, "capture", (_read(case / "logs" / "capture.error.json") or {}).get("reason", "no capture.json"))
        return lines
    written = capture.get("ntffs_written") or [capture.get("ntff_written_as")]
    add(bool(written and written[0]), "NTFF names", f"{written}, viewed {capture.get('ntff_written_as')}")
    lncs = {build.get("lnc"), capture.get("runtime_lnc"), (metrics or {}).get("lnc")}
    add(
        len(lncs) == 1,
        "LNC consistent",
        f"build {build.get('lnc')}, runtime {capture.get('runtime_lnc')}, peaks {(metrics or {}).get('lnc')}",
    )
    if view is None or summary is None:
        add(False, "view", (_read(case / "logs" / "view.error.json") or {}).get("reason", "no view.json"))
        return lines
    fractions = {k: v for k, v in summary.items() if k.endswith("_percent") and isinstance(v, (int, float))}
    units = (
        isinstance(summary.get("total_time"), (int, float))
        and 0 < summary["total_time"] < 60
        and all(0 <= v <= 1.0 + 1e-9 for v in fractions.values())
        and 0 <= summary.get("total_active_time", 0) <= summary["total_time"]
    )
    add(
        units, "summary keys and units", f"total_time {summary.get('total_time')} s, {len(fractions)} fractions in 0..1"
    )
    for fmt in ("parquet", "json", "perfetto"):
        if fmt in (view.get("outputs") or {}):
            add(True, f"view {fmt}", view["outputs"][fmt])
        else:
            add(None, f"view {fmt}", (view.get("skipped") or {}).get(fmt, "not offered by this tool"))
    version = view.get("profile_schema_version")
    add(version is not None or None, "schema version", f"{version} (dump: {view.get('profile_schema_dump')})")
    if view.get("ranks"):
        lines += [collective_time_line(case, name, capture), rank_timeline_line(view, name)]
    if (case / "view" / "parquet").is_dir():
        db = ProfileDB()
        db.load_view(case / "view", case.name)
        db.finish()
        missing = profile_schema.problems(db, version)
        add(not missing, "parquet columns we read", "; ".join(missing) or ", ".join(sorted(db.tables)))
        lines.append(framework_ops_line(db, name, build, summary))
        lines += headroom_lines(db, name, summary)
    if metrics is None:
        add(False, "extract", (_read(case / "logs" / "extract.error.json") or {}).get("reason", "no metrics.json"))
        return lines
    lines += metrics_lines(metrics, name, capture)
    lines += contract_lines(case, name, build, capture, view)
    return lines


def collective_time_line(case: Path, name: str, capture: dict) -> Line:
    """A forward across ranks on neuron takes each rank's time in its collectives from its summary's
    cc_op_time (the time in collective operations of the profiled execution): on a collective's ranks, a
    NEFF that is nearly all collective, it must be there, above 0 and within total_time."""
    contract = f"{name}: cc_op_time"
    if capture.get("profile_scope"):
        return Line("SKIP", contract, "an inspect session: each NTFF holds every execution")
    found = []
    for path in sorted((case / "view" / "ranks").glob("rank_*/summary.json")):
        s = _read(path) or {}
        found.append((path.parent.name, s.get("cc_op_time"), s.get("total_time")))
    ok = bool(found) and all(isinstance(c, (int, float)) and t and 0 < c <= t for _, c, t in found)
    return Line("PASS" if ok else "FAIL", contract, "; ".join(f"{r}: {c} of {t} s" for r, c, t in found) or "none")


def rank_timeline_line(view: dict, name: str) -> Line:
    """The ranks' collectives on one timeline from their CcOp rows (analysis/device_collectives.py) rest on what
    the docs leave open: trigger_start_ts present (an optional field), the ranks running the same operations
    in the same order, and leaving each together, which the residual after aligning their exits shows."""
    contract = f"{name}: ranks' CcOp timeline"
    found = view.get("rank_timeline")
    if not found:
        return Line("SKIP", contract, "no rank was viewed as parquet")
    if found.get("why"):
        return Line("FAIL", contract, found["why"])
    detail = (
        f"{found['instances']} operations on {found['ranks']} ranks, clock offsets "
        f"{', '.join(f'{o * 1e6:+.1f}' for o in found['offsets_s'])} us, exits apart by at most "
        f"{found['residual_s'] * 1e6:.2f} us after aligning them"
    )
    return Line("PASS" if not found.get("notes") else "FAIL", contract, "; ".join([detail, *found.get("notes", [])]))


def metrics_lines(metrics: dict, name: str, capture: dict) -> list[Line]:
    """What the case's metrics.json must agree with: the tool's MFU, the framework's time, the output's
    reference, and a profile whose DMA metadata is complete."""
    lines = []

    def add(ok: bool | None, contract: str, detail: str) -> None:
        lines.append(Line("SKIP" if ok is None else "PASS" if ok else "FAIL", f"{name}: {contract}", detail))

    tool, ours = metrics.get("mfu_tool_pct"), metrics.get("mfu_recomputed_pct")
    close = None if tool is None or ours is None else math.isclose(tool, ours, rel_tol=1e-3)
    add(close, "MFU recomputed = tool's", f"tool {tool}, recomputed {ours}")
    # device busy time, not total_time: total_time holds ~2 ms of start-up per profiled execution (trn1)
    latency, device = metrics.get("latency_median_s"), metrics.get("profile_active_time_s")
    device_samples = (capture.get("latency") or {}).get("samples_are") == DEVICE_TIMES
    add(
        None if latency is None or device is None or device_samples else 0 < device <= latency * 1.05,
        "device time vs framework",
        f"profile active time {device} s within the framework median {latency} s"
        + (" (the samples are the profiler's device times: no framework here)" if device_samples else ""),
    )
    add(
        metrics.get("correct"),
        "correctness",
        f"max_rel_error {metrics.get('max_rel_error')} "
        f"(tolerance {metrics.get('tolerance_rel')}) {metrics.get('notes', {}).get('correct', '')}".strip(),
    )
    return [*lines, dge_line(metrics, name, capture)]


def dge_line(metrics: dict, name: str, capture: dict) -> Line:
    """The capture asked for DGE notifications (neuron.enable_dge_notifs, the default): its profile must no
    longer warn that dynamic DMA metadata is missing, which the real inf2 profiles captured without it do (and
    which nulls the memory bounds that rest on DMA bytes)."""
    contract = f"{name}: DMA metadata complete"
    warnings = metrics.get("profile_warnings")
    if warnings is None:
        return Line(
            "SKIP", contract, "no warnings list: the view kept no legacy profile JSON, where the tool writes it"
        )
    if capture.get("dge_notifications") is False:
        return Line("SKIP", contract, "captured without DGE notifications (neuron.enable_dge_notifs: false)")
    dge = [w for w in warnings if DGE in str(w)]
    return Line("FAIL" if dge else "PASS", contract, dge[0] if dge else f"{len(warnings)} warning(s), none about DMA")


def framework_ops_line(db: ProfileDB, name: str, build: dict, summary: dict) -> Line:
    """Whether the profile maps device time to framework ops (parquet FrameworkInstruction), which a layer
    case's split reads, for a NEFF compiled with XLA_IR_DEBUG=1 and XLA_HLO_DEBUG=1 (which the field test
    sets on every route). The docs show the table for torch-xla's NEFFs; for native PyTorch (TorchNeuron)
    they recommend the same variables ("Setup (all methods)") but show no table, so there it is a finding."""
    contract = f"{name}: framework ops"
    debug = (build.get("env") or {}).get("XLA_HLO_DEBUG") == "1"
    rows, why = derived.framework_ops(db)
    if rows is None and why is None:
        detail = "no FrameworkInstruction table: a layer case's split on this route is null"
        if not debug:
            return Line("SKIP", contract, f"{detail} (the NEFF was compiled without the HLO debug variables)")
        if name == "torchneuron":
            return Line("SKIP", contract, f"{detail}, with the HLO debug variables set: TorchNeuron's NEFF has none")
        return Line("FAIL", contract, f"{detail}, though the NEFF was compiled with XLA_IR_DEBUG/XLA_HLO_DEBUG")
    split, why = (None, why) if rows is None else framework_split.split(rows, summary.get("total_time"))
    if rows is None or split is None:
        return Line("FAIL", contract, f"the table is there but unreadable: {why}")
    ops = [framework_split.parse(n)[0] for n, _ in rows]
    shares = {c: round(v / split.span_s, 3) for c, v in split.categories_s.items() if v}
    return Line(
        "PASS" if all(ops) else "FAIL",
        contract,
        f"{len(rows)} framework ops (e.g. {rows[0][0]!r}), the split of total_time: {shares}",
    )


def headroom_lines(db: ProfileDB, name: str, summary: dict) -> list[Line]:
    """What the docs leave open about the tables the headroom reads, settled on a real profile: whether the
    summary's TensorE active time at LNC 2 is the union over the physical cores' ActiveTime (the ladder takes
    it so); whether ThrottleSummary's throttle_active_time_percent and the SbufUsage / PsumUsage series'
    avg_util_percent are fractions, as the summary's percent fields are; which usage types
    HbmUsageSummaryByType names (device memory reads the legacy names)."""
    lines = []
    meta, active = find_table(db, "Metadata"), find_table(db, "ActiveTime")
    cores = (
        db.df(f'SELECT max(num_physical_cores) AS n FROM "{meta}"')["n"].iloc[0]
        if (meta and "num_physical_cores" in columns(db, meta))
        else None
    )
    te = summary.get("tensor_engine_active_time")
    if active is None or not cores or cores < 2 or not te:
        lines.append(Line("SKIP", f"{name}: LNC 2 active", f"physical cores {cores}: nothing to settle"))
    else:
        busy = db.df(f"SELECT start_ts, end_ts FROM \"{active}\" WHERE lower(engine) = 'tensor'")
        union = intervals.union_length(busy["start_ts"], busy["end_ts"]) * 1e-9
        close = math.isclose(union, te, rel_tol=0.02)
        detail = f"summary tensor_engine_active_time {te} s, the union of both cores' ActiveTime {union} s"
        lines.append(Line("PASS" if close else "FAIL", f"{name}: LNC 2 active", detail))
    throttle = find_table(db, "ThrottleSummary")
    wanted = {"throttle_active_time_ns", "throttle_active_time_percent"}
    if throttle and wanted <= columns(db, throttle) and summary.get("total_time"):
        rows = db.df(f'SELECT {", ".join(sorted(wanted))} FROM "{throttle}"').to_dict("records")
        pairs = [
            (r["throttle_active_time_ns"] * 1e-9 / summary["total_time"], r["throttle_active_time_percent"])
            for r in rows
            if r["throttle_active_time_ns"] and r["throttle_active_time_percent"] is not None
        ]
        verdict = "SKIP" if not pairs else "PASS" if all(math.isclose(a, b, rel_tol=0.02) for a, b in pairs) else "FAIL"
        detail = f"(ns / total_time, throttle_active_time_percent): {pairs[:3]}" if pairs else "no throttled row"
        lines.append(Line(verdict, f"{name}: throttle unit", detail))
    usage = memory.parquet_usage(db)  # as device memory reads the tables
    for kind, table in (("sb", "SbufUsage"), ("psum", "PsumUsage")):
        values = [r["usage_avg"] for r in usage["buffer_usage"] or () if r["type"] == kind]
        if values:
            verdict = "PASS" if 0 <= max(values) <= 1 else "FAIL"
            detail = f"highest avg_util_percent {max(values)} (read as a fraction, as the summary's percent fields are)"
            lines.append(Line(verdict, f"{name}: {table} unit", detail))
    if usage["hbm_usage_by_type"]:
        kinds = sorted({str(r["usage_type"]) for r in usage["hbm_usage_by_type"]})
        lines.append(Line("PASS" if "Tensors" in kinds else "FAIL", f"{name}: HBM types", ", ".join(kinds)))
    return lines


def _log_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*.log")) if p.is_file())


def contract_lines(case: Path, name: str, build: dict, capture: dict, view: dict) -> list[Line]:
    """The contracts a device confirms that the stand-ins only assume (issue: Neuron as a trn2 runs it):
    input names, the inspect layout, per-rank NEFFs, LNC per process, the compiler's command line, NKI
    device loops (0.6+)."""
    out = []

    def add(ok: bool | None, contract: str, detail: str) -> None:
        out.append(Line("SKIP" if ok is None else "PASS" if ok else "FAIL", f"{name}: {contract}", detail))

    inputs = capture.get("inputs")
    add(
        True,
        "input names",
        f"the capture ran with the NEFF's own names {[n for n, _ in inputs]}"
        if isinstance(inputs, list)
        else "no names passed: the tool filled the NEFF's own inputs with zeros, and the capture ran",
    )
    mode = capture.get("inspect_mode")
    add(
        bool(mode) if capture.get("capture_refused") else None,
        "inspect layout",
        f"{mode} mode wrote the device trace ({capture.get('inspect_modes_tried')}), paired as its layout says"
        if mode
        else "the profiler's capture took the NEFF: no inspect capture was needed",
    )
    neffs = build.get("rank_neffs")
    if neffs is not None:
        distinct = len({Path(p).read_bytes() for p in neffs if p and Path(p).is_file()})
        viewed = len(view.get("ranks") or [])
        add(
            viewed == len(neffs),
            "per-rank NEFFs",
            f"{len(neffs)} ranks, {distinct} distinct NEFF(s), {viewed} rank profile(s) viewed with their own NEFF",
        )
    if build.get("slot_lnc") is not None:
        per_process = build.get("lnc") != build.get("slot_lnc")
        add(
            True if per_process else None,
            "LNC per process",
            f"built and run at LNC {build.get('lnc')} on a runtime listed at LNC {build.get('slot_lnc')}"
            if per_process
            else f"the case runs at the runtime's own LNC {build.get('lnc')}",
        )
    flags, logs = build.get("compiler_flags") or "", _log_text(case / "build")
    seen = [line for line in logs.splitlines() if "neuronx-cc" in line and "--target" in line]
    add(
        all(flag in seen[-1] for flag in flags.split() if flag.startswith("--")) if seen and flags else None,
        "compiler command line",
        f"build.json: {flags!r}"
        + (
            f"; the compile log: {seen[-1].strip()[:200]!r}" if seen else "; no compiler command line in the build logs"
        ),
    )
    if build.get("route") == "nki":
        users = described(build.get("spec")).user_code
        if not users:  # the loops of our kernels (a user's are theirs)
            out.append(nki_loops_line(name, build, logs))
            if "fori_loop" in (build.get("nki_loops") or ""):
                out.append(nki_body_line(name, build))
        target = build.get("target") or "the target"
        out.append(
            Line("PASS", f"{name}: NKI on {target}", f"built and ran on {target} (its output: the correctness line)")
        )
        if users:
            params = dict((build.get("spec") or {}).get("params") or [])
            add(
                True,
                "keyword params",
                f"the user's kernel compiled and ran called with {', '.join(f'{k}={v}' for k, v in params.items())} "
                "by name (its output: the correctness line)",
            )
    return out


def neuron_ls_line() -> Line:
    """What neuron-ls's JSON is on this machine (a device list, or the object 2.34 prints) and what we read."""
    exe = neuron_ls.tool()
    if not exe:
        return Line("SKIP", "neuron-ls JSON shape", "neuron-ls not found")
    for form in neuron_ls.JSON_FORMS:
        proc = subprocess.run([exe, *form], capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            continue
        try:
            raw = json.loads(proc.stdout)
            devices, top = neuron_ls.parse_json(proc.stdout)
        except ValueError as exc:
            return Line("FAIL", "neuron-ls JSON shape", f"{' '.join(form)}: not JSON we read ({exc})")
        shape = f"a list of {len(raw)}" if isinstance(raw, list) else f"an object with keys {sorted(raw)}"
        return Line(
            "PASS" if devices else "FAIL",
            "neuron-ls JSON shape",
            f"{' '.join(form)}: {shape}; read {len(devices)} device(s), top-level fields {sorted(top) or 'none'}",
        )
    return Line("FAIL", "neuron-ls JSON shape", f"no JSON form answered ({neuron_ls.JSON_FORMS})")


RANGE_ITERATOR = re.compile(r"\b(affine|sequential|static)_range\b|\brange\b")  # what an NKI loop iterates with


def nki_loops_line(name: str, build: dict, logs: str) -> Line:
    """NKI loops: no deprecated range iterator in the compile log (another deprecation, of an API our kernels do
    not loop with, is not this contract's), and a device loop (nl.fori_loop, whose tiles are addressed by
    scalar_offset) confirmed only by the kernel's output matching numpy."""
    deprecated = [line for line in logs.splitlines() if "deprecated" in line.lower() and RANGE_ITERATOR.search(line)]
    loops = build.get("nki_loops") or "loops not recorded"
    correct = (build.get("correctness") or {}).get("correct")
    if deprecated:
        return Line("FAIL", f"{name}: NKI loops", deprecated[0].strip()[:200])
    if "fori_loop" in loops and correct is not True:
        return Line("SKIP", f"{name}: NKI loops", f"{loops}: not confirmed, the kernel's output check did not pass")
    confirmed = ", its output matches numpy" if "fori_loop" in loops else ""
    return Line("PASS", f"{name}: NKI loops", f"{loops}{confirmed}; no deprecated range iterator in the compile log")


def nki_body_line(name: str, build: dict) -> Line:
    """NKI loop body: what one body of our kernel's device loop keeps live on chip, as we bound it, beside
    the target's partition. The NKI Dynamic Loops page keeps every live tensor of a body on chip for the
    whole loop but does not say when a tile stops being live; our bound counts a tile until the next one of
    its name replaces it (as the stand-in does). A device that built and ran the case says the bound held
    here; a body we refused is not tried, so a device that would take more is not seen by this line."""
    spec = as_spec(build.get("spec"), "the NKI case's build.json")
    need = kernels.for_spec(spec).body_bytes(record(spec))
    chip = targets.onchip(build.get("target"))
    built = (build.get("correctness") or {}).get("correct") is True
    return Line(
        "PASS" if built else "SKIP",
        f"{name}: NKI loop body",
        f"one body keeps up to {need['sbuf']} B of SBUF and {need['psum']} B of PSUM live per partition, of the "
        f"{chip.sbuf_partition_bytes} and {chip.psum_partition_bytes} on {chip.name} ({chip.onchip_source}); "
        + (
            "the compiler built it and its output matches numpy"
            if built
            else "not confirmed: its output check did not pass"
        ),
    )


def bundle(out: Path, work: Path) -> Path:
    """field-test.tar.gz: the small records and logs of the run, no binaries or tensors."""
    target = out / "field-test.tar.gz"
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            inside = path.relative_to(work)
            if (
                path.is_file()
                and path.suffix in SMALL
                and "inputs" not in inside.parts
                and ".snakemake" not in inside.parts
            ):
                if path.stat().st_size <= 2 * 2**20:
                    tar.add(path, arcname=str(Path("field-test") / inside))
        tar.add(out / "field-test.txt", arcname="field-test/field-test.txt")
    return target


def session_lines(root: Path | None, out: Path) -> list[Line]:
    """What `neuronsweep session` assumes of a vLLM Neuron server's profile, checked on a real one (`root`, the
    neuron_profiler output_dir): its layout, which rank each worker is, which graph each step ran, how the
    ranks' clocks relate. SKIP without one."""
    if root is None:
        why = "give --session <a vLLM Neuron profile's output_dir> to check its layout, ranks, graphs and clocks"
        return [Line("SKIP", "server session", why)]
    try:
        summary = session.run(root, out / "session")
    except UserError as exc:
        return [Line("FAIL", "server session", str(exc))]
    workers = ", ".join(f"{w['name']} ({w['session']})" for w in summary["workers"])
    lines = [
        Line(
            "PASS" if not summary["missing"] else "FAIL",
            "session layout",
            f"{workers}; " + "; ".join(summary["missing"]),
        )
    ]
    ranks = ", ".join(f"rank {r['rank']} = worker_gid {r['worker_gid']}" for r in summary["ranks"])
    lines.append(Line("SKIP", "session rank of a worker", f"{ranks}: compare with the server's log (not documented)"))
    unmatched = [n for n in summary["notes"] if "names no NEFF" in n]
    graphs = ", ".join(f"{g['graph']} x{g['steps']}" for g in summary["graphs"])
    lines.append(
        Line(
            "FAIL" if unmatched else "PASS",
            "session graph of a step",
            f"{graphs}" + "".join(f"; {u}" for u in unmatched),
        )
    )
    clocks = [n for n in summary["notes"] if n.startswith(("the ranks' clocks", "no skew", "the ranks made"))]
    lines.append(
        Line("SKIP", "session ranks' clocks", "; ".join(clocks) + " (how the ranks' clocks relate is not documented)")
    )
    return [*lines, executions_clock_line(summary)]


def executions_clock_line(summary: dict) -> Line:
    """Each kind of step's headroom reads a worker's tables over its executions' time ranges, which
    ExecutionInfo gives "relative to the start of the profile": the instructions must fall inside them, or the
    tables run on another clock (not documented)."""
    shares = summary.get("instructions_in_executions_pct") or {}
    measured = {w: p for w, p in shares.items() if p is not None}
    if not measured:
        return Line("SKIP", "session executions' clock", summary.get("headroom_why") or "no device profile was read")
    detail = ", ".join(f"{w}: {p:.1f} %" for w, p in measured.items()) + " of the instructions inside an execution"
    return Line("PASS" if min(measured.values()) >= 99.0 else "FAIL", "session executions' clock", detail)


def run(out: Path, timeout_s: float = 7200, session_dir: Path | None = None) -> int:
    """The field test into `out` (`session_dir`: a vLLM Neuron server's profile to check too); exit 0 when
    nothing failed."""
    out = out.resolve()
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    if not (REPO / "Snakefile").is_file():
        raise UserError(
            f"the field test runs the workflow's Snakefile, which is not at {REPO}: run it from a clone "
            '(pip install -e ".[workflow]" in the checkout), as the README says.'
        )
    route, nki, why = available()
    lines = [
        Line(
            "PASS" if route or nki else "FAIL",
            "route detection",
            f"{why}; NKI {'importable' if nki else 'not installed'}",
        ),
        neuron_ls_line(),
    ]
    if route or nki:
        proc = run_workflow(work, config(work, route, nki), timeout_s)
        cases = sorted(layout.workloads_dir(work / "results" / "field-test", "neuron").glob("*"))
        if not cases:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
            lines.append(
                Line("FAIL", "workflow", f"snakemake exited {proc.returncode}: {tail[0]} (work/snakemake.log)")
            )
        for case in cases:
            kind = "nki" if case.name.endswith("-nki") else "collective" if case.name.startswith("coll") else route
            kind = "users-kernel" if case.name.startswith("custom-users_kernel") else kind
            lines += check_case(case, kind or "?")
    lines += session_lines(session_dir, out)
    text = "\n".join(["neuronsweep field test", doctor.report(str(work / "config.yaml")), "", *map(str, lines)])
    (out / "field-test.txt").write_text(text + "\n")
    print("\n".join(map(str, lines)))
    print(f"bundle: {bundle(out, work)} (versions, command lines, log tails and records; attach it to a bug report)")
    return 1 if any(line.verdict == "FAIL" for line in lines) else 0
