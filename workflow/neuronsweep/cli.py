"""neuronsweep: where the time goes, for a whole sweep of workloads. `snakemake --cores 1` runs a
sweep; these commands plan, follow, compare and query it, and each stage the workflow runs is a
command too, runnable by hand with the arguments its record's `command` field shows."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
import traceback
from argparse import ArgumentParser, Namespace
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from neuronsweep import __version__, backends
from neuronsweep.backends.cores import default_threads
from neuronsweep.backends.processes import DEFAULT_TIMEOUT_S
from neuronsweep.config import schema as config
from neuronsweep.config.schema import schema_default
from neuronsweep.config.settings import Collectives, host_setting
from neuronsweep.errors import ERROR_PREFIX, UserError
from neuronsweep.host.devicelock import DEFAULT_LOCK
from neuronsweep.search import FINALIST_ROUNDS
from neuronsweep.store.failures import STAGES, clear_failure, record_failure
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import as_spec, workload_id

log = logging.getLogger("neuronsweep")

# Stage modules are imported inside their commands: every job starts a fresh `neuronsweep`, and
# pandas (aggregate) or perfetto (view) would add most of a second to each of them.


def _spec(text: str) -> Spec:
    raw = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"--spec is not valid JSON ({exc.msg}); pass a workload spec such as "
            '\'{"kind":"matmul","m":128,"k":128,"n":128,"dtype":"fp32"}\'.'
        ) from None
    return as_spec(spec, "--spec")


def cmd_plan(args: Namespace) -> None:
    """`neuronsweep plan`: the cases a config makes, as the workflow plans them, without running any."""
    from neuronsweep.analysis import deployments
    from neuronsweep.config.run_config import RunConfig
    from neuronsweep.host import slots
    from neuronsweep.search import searches
    from neuronsweep.stages import plan
    from neuronsweep.stages.run_setup import settle_run

    cfg = config.load(args.config)
    if searches(cfg):  # its searches and tunes built before the plan, as the Snakefile does
        from neuronsweep.search import checks

        checks.check(cfg, args.config)
    run = settle_run(RunConfig.of(cfg))  # as the workflow settles it
    p = json.loads(run.plan_json())
    for line in run.log_lines():
        log.warning(line)  # stderr: stdout is the plan itself (JSON with --json)
    log.warning(plan.estimate(run.plan, run.config, run.host_probe))
    log.warning(f"captures: {slots.for_config(run.config, run.backend).describe()}")
    if args.json:
        print(json.dumps(p, indent=2))
        return
    c = p["counts"]
    print(
        f"run {p['run']}: {c['scenarios']} scenarios -> {c['workloads']} workloads to build and capture "
        f"on {p['backend']}, {c['unsupported']} unsupported there"
    )
    assumed = {(sc["labels"]["model"], sc["labels"]["assumed"]) for sc in p["scenarios"] if "assumed" in sc["labels"]}
    for model, said in sorted(assumed):  # what a deployment left out and the plan took: said, never silent
        print(f"  model {model} assumed: {said}")
    for i, entry in enumerate(run.config.suites.get("model") or []):
        if entry.get("slo"):
            print("  " + deployments.announce(entry, f"suites.model[{i}] ({entry['name']})"))
    for sc in p["scenarios"]:
        why = p["unsupported"].get(sc["workload_id"])
        print(f"  {sc['suite']:8} {sc['id']:44} -> {sc['workload_id']}" + (f"  (unsupported: {why})" if why else ""))


def _add_plan(p: ArgumentParser) -> None:
    p.add_argument("--config", default="config/config.yaml", help="the sweep's config file")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (the plan.json format)")


def _slots(text: str) -> str | int:
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"--slots is {text!r}; pass auto or a whole number of at least 1.")


def _percentage(text: str) -> float:
    """--min-effect of compare and history: a percentage of 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"--min-effect is {text!r}; give a percentage of 0 or more (default 2).")
    return value


def _slot_args(p: ArgumentParser) -> None:
    p.add_argument(
        "--slots",
        type=_slots,
        default=host_setting("slots", schema_default("capture.slots")),
        help="neuron: device slots to choose from, auto (every one here) or N (the first N)",
    )
    p.add_argument(
        "--isolation",
        choices=("chip", "core"),
        default=host_setting("isolation", schema_default("capture.isolation")),
        help="neuron: a slot is a chip (never two captures on one chip's HBM) or a NeuronCore",
    )


def _options(text: str) -> dict:
    try:
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"--options is not valid JSON ({exc.msg}); pass the backend's config section as JSON."
        ) from None
    if not isinstance(options, dict):
        raise UserError("--options must be a JSON object (the backend's config section).")
    return options


def cmd_build(args: Namespace) -> None:
    """`neuronsweep build`: the build stage of one case (the workflow's build jobs run this)."""
    from neuronsweep.config.settings import BuildSettings
    from neuronsweep.stages import build

    settings = BuildSettings(
        _options(args.options),
        device_lock=args.device_lock,
        timeout_s=args.timeout,
        slots=args.slots,
        isolation=args.isolation,
    )
    rec = build.run(_spec(args.spec), args.backend, Path(args.out), args.cache_dir, settings)
    hit = {True: "cache hit", False: "compiled", None: "nothing to compile"}[rec.cache.get("hit")]
    took = f"{rec.compile_s:.3f} s" if rec.compile_s is not None else "compile time unknown"
    log.info(f"build {rec.workload_id}: {hit}, {rec.compiler}, {took} -> {args.out}")
    if rec.recompilation_flag:
        log.warning(f"warning: {rec.recompilation_flag}")


def _add_build(p: ArgumentParser) -> None:
    p.add_argument("--spec", required=True, help="workload spec as JSON, or @FILE")
    p.add_argument("--backend", default="cpu", choices=backends.NAMES, help="the backend to build for")
    p.add_argument("--out", required=True, help="build directory to write")
    p.add_argument(
        "--cache-dir", default=host_setting("cache_dir", schema_default("cache_dir")), help="the compile cache"
    )
    p.add_argument("--options", default="{}", help="the backend's config section as JSON (neuron: target, flags)")
    p.add_argument(
        "--device-lock",
        default=host_setting("device_lock", DEFAULT_LOCK),
        help="neuron: OS lock held while the build runs on the device",
    )
    _slot_args(p)
    _timeout_arg(p, "build")


def cmd_capture(args: Namespace) -> None:
    """`neuronsweep capture`: the capture stage of one case, or of a NEFF made anywhere (--neff)."""
    from neuronsweep.config.settings import CaptureSettings
    from neuronsweep.stages import capture

    settings = CaptureSettings(
        warmup=args.warmup,
        iterations=args.iterations,
        repeats=args.repeats,
        num_exec=args.num_exec,
        nth_exec=args.nth_exec,
        threads=args.threads,
        device_lock=args.device_lock,
        timeout_s=args.timeout,
        attempt=args.attempt,
        single_io=args.single_io,
        rounds_in_processes=args.rounds_in_processes,
        options=_options(args.options),
        slots=args.slots,
        isolation=args.isolation,
        collectives=_collectives(args),
    )
    if (args.build is None) == (args.neff is None):
        raise UserError("capture needs exactly one of --build DIR (a build stage's output) or --neff FILE.")
    rec = (
        capture.run(Path(args.build), Path(args.out), settings)
        if args.build
        else capture.run_neff(Path(args.neff), Path(args.out), settings)
    )
    lat = rec.latency
    timing = (
        f"median {lat['median_s'] * 1e3:.4f} ms, IQR {lat['iqr_s'] * 1e3:.4f} ms, n={lat['n']}"
        if lat
        else "no framework timing"
    )
    log.info(f"capture {rec.workload_id}: {timing} -> {args.out}")


def _add_capture(p: ArgumentParser) -> None:
    p.add_argument("--build", help="build directory (holds build.json)")
    p.add_argument("--neff", help="or any NEFF file (neuron; no framework timing)")
    p.add_argument("--out", required=True, help="capture directory to write")
    p.add_argument("--warmup", type=int, default=schema_default("capture.warmup"), help="executions discarded first")
    p.add_argument(
        "--iterations", type=int, default=schema_default("capture.iterations"), help="timed executions a round"
    )
    p.add_argument(
        "--repeats", type=int, default=schema_default("capture.repeats"), help="rounds of --iterations timed executions"
    )
    p.add_argument(
        "--num-exec", type=int, default=schema_default("capture.num_exec"), help="executions in the profiled run"
    )
    p.add_argument("--nth-exec", type=int, default=schema_default("capture.nth_exec"), help="the profiled one of them")
    p.add_argument("--threads", type=int, default=default_threads(), help="cpu: torch's intra-op threads")
    p.add_argument("--attempt", type=int, default=1, help="Snakemake attempt; after a device OOM, 2 adds --single-io")
    p.add_argument("--single-io", action="store_true", help="neuron: capture with --single-io (outputs not valid)")
    p.add_argument(
        "--rounds-in-processes", action="store_true", help="cpu: time each round in a fresh process of its own"
    )
    p.add_argument(
        "--device-lock", default=host_setting("device_lock", DEFAULT_LOCK), help="OS lock file held during the capture"
    )
    _slot_args(p)
    p.add_argument("--options", default="{}", help="the backend's config section as JSON (neuron: profiler)")
    for flag, kind, what in (
        ("workers-per-node", int, "workers on this node (turns collectives on)"),
        ("worker-count", int, "workers across all nodes (turns collectives on)"),
        ("worker-start-id", int, "global id of this node's first worker (default 0)"),
        ("profile-id", str, "the worker to profile, or all (default all)"),
    ):
        p.add_argument(f"--collectives-{flag}", type=kind, help=f"neuron, a collectives NEFF: {what}")
    _timeout_arg(p, "capture")


def _collectives(args: Namespace) -> Collectives | None:
    """The --collectives-* options; a worker count or workers per node turns collectives mode on, as
    in the profiler itself."""
    given = {
        k: getattr(args, f"collectives_{k}")
        for k in ("workers_per_node", "worker_count", "worker_start_id", "profile_id")
    }
    if given["workers_per_node"] is None and given["worker_count"] is None:
        if given["worker_start_id"] is not None or given["profile_id"] is not None:
            raise UserError(
                "--collectives-worker-start-id and --collectives-profile-id need "
                "--collectives-workers-per-node or --collectives-worker-count, which turn collectives on."
            )
        return None
    if given["profile_id"] not in (None, "all") and not str(given["profile_id"]).isdigit():
        raise UserError(f"--collectives-profile-id is {given['profile_id']!r}; pass all or a worker id (0, 1, ...).")
    return cast(Collectives, {k: v for k, v in given.items() if v is not None})  # argparse typed each flag


def cmd_view(args: Namespace) -> None:
    """`neuronsweep view`: the view stage of one capture (the profiler's exports, or the trace's tables)."""
    from neuronsweep.config.settings import ViewSettings
    from neuronsweep.stages import view

    settings = ViewSettings.from_section(_options(args.options), args.timeout)
    if args.capture:
        rec = view.run(Path(args.capture), Path(args.out), settings)
    elif args.neff and args.ntff:
        rec = view.run_ntff(Path(args.neff), Path(args.ntff), Path(args.out), settings)
    else:
        raise UserError("view needs --capture DIR, or --neff FILE and --ntff FILE.")
    log.info(f"view {rec.workload_id}: summary.json, {rec.pftrace or 'no pftrace'} -> {args.out}")


def _add_view(p: ArgumentParser) -> None:
    p.add_argument("--capture", help="capture directory (holds capture.json)")
    p.add_argument("--neff", help="or a NEFF ...")
    p.add_argument("--ntff", help="... and its NTFF (neuron)")
    p.add_argument("--out", required=True, help="view directory to write")
    p.add_argument("--options", default="{}", help="the backend's config section as JSON (neuron: formats)")
    _timeout_arg(p, "view")


def cmd_extract(args: Namespace) -> None:
    """`neuronsweep extract`: the normalized metrics of one case from its build, capture and view."""
    from neuronsweep.stages import extract

    opt = lambda p: Path(p) if p else None  # noqa: E731
    m = extract.run(
        Path(args.summary_json),
        Path(args.out),
        opt(args.capture_json),
        opt(args.build_json),
        opt(args.profile_json),
        opt(args.calibration),
        track_patterns=_options(args.track_patterns),
    )
    log.info(
        f"extract {m.values['workload_id'] or args.summary_json}: {len(m.notes)} notes on null or flagged "
        f"metrics -> {args.out}"
    )


def _add_extract(p: ArgumentParser) -> None:
    p.add_argument("--summary-json", required=True, help="a view's summary.json, or raw summary-json output")
    p.add_argument("--profile-json", help="legacy full-profile JSON (streamed) for fields the summary lacks")
    p.add_argument("--capture-json", help="the capture's capture.json (timing, settings)")
    p.add_argument("--build-json", help="the build's build.json (spec, toolchain)")
    p.add_argument("--calibration", help="cpu: the host's measured peaks (neuronsweep calibrate) for the roofline")
    p.add_argument("--track-patterns", default="{}", help="JSON {class: regex} to classify profile tracks")
    p.add_argument("--out", required=True, help="the metrics.json to write")


def cmd_report(args: Namespace) -> None:
    """`neuronsweep report`: report.html from a run's summary and plan."""
    from neuronsweep.stages import report

    report.run(
        Path(args.summary), Path(args.plan), Path(args.out), Path(args.targets) if args.targets else None, args.tunes
    )
    log.info(f"report: {args.out}")


def _add_report(p: ArgumentParser) -> None:
    p.add_argument("--summary", required=True, help="the run's summary.csv")
    p.add_argument("--plan", required=True, help="the run's plan.json")
    p.add_argument("--out", required=True, help="the report.html to write")
    p.add_argument("--targets", help="roofline_targets.csv: the workloads modelled on trn1, inf2, trn2")
    p.add_argument(
        "--tunes",
        nargs="*",
        default=[],
        metavar="MODEL",
        help="the models the run tunes: the page links their tune.html",
    )


def cmd_compare(args: Namespace) -> int:
    """`neuronsweep compare A B`: B's cases judged against A's; exit 1 past --fail-on-regression."""
    from neuronsweep.runs import compare as compare_runs

    out = Path(args.out) if args.out else Path(args.run_b) / f"compare-{Path(args.run_a).name}"
    lines, code = compare_runs.run(
        Path(args.run_a),
        Path(args.run_b),
        out,
        args.fail_on_regression,
        args.min_effect,
        args.interleaved,
        stored=args.stored,
        budget_s=args.budget_s,
    )
    print("\n".join(lines))
    return code


def compare_budget_default() -> float:
    """compare's --budget-s default (runs/interleave.py), read only when the parser is built."""
    from neuronsweep.runs.interleave import DEFAULT_BUDGET_S

    return DEFAULT_BUDGET_S


def _add_compare(p: ArgumentParser) -> None:
    p.add_argument("run_a", help="results/<run> folder: the baseline")
    p.add_argument("run_b", help="results/<run> folder: the candidate")
    p.add_argument(
        "--out",
        help="folder for compare.csv, compare_metrics.csv, compare_ops.csv, compare.html (default: RUN_B/compare-<A>)",
    )
    p.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PCT",
        help="exit 1 when a workload is judged slower and its 95%% interval of B/A lies above 1 + PCT/100",
    )
    p.add_argument(
        "--min-effect",
        type=_percentage,
        default=2.0,
        metavar="PCT",
        help="slower or faster only where the change is shown past this (its interval beyond it), percent",
    )
    p.add_argument(
        "--interleaved",
        type=int,
        metavar="N",
        help="cpu: time both runs' programs again here, N fresh processes, each timing A and B in "
        "alternation, and judge those rounds: the machine's moment then falls on both sides. Done by default, "
        "8 rounds, for two cpu runs whose programs are there",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=compare_budget_default(),
        metavar="S",
        help="cpu, with --fail-on-regression: the seconds compare may spend timing again in all; cases whose "
        "test could not yet see a change the size of the gate get more rounds while it lasts",
    )
    p.add_argument(
        "--stored",
        action="store_true",
        help="judge the stored timings, never time again (fast; one process a side is then not judged)",
    )


def cmd_history(args: Namespace) -> int:
    """`neuronsweep history`: each case's time across runs, its steps, and the gate on the newest."""
    from neuronsweep.runs import history

    if args.last < 1:
        raise UserError(f"--last {args.last}: give a number of runs of 1 or more.")
    if args.record:  # the workflow's history rule: add the run, say which entry it is
        from neuronsweep.atomic import write_json

        path, new = history.append(Path(args.record).parent, args.store and Path(args.store))
        write_json(Path(args.record), {"entry": str(path), "added": new})
        print(f"{'added to' if new else 'already in'} the history: {path}")
        try:
            print("\n".join(history.run(path.parent.parent, [], [], None, None, args.last, args.min_effect)[0]))
        except UserError as exc:  # the page is a view: a damaged store never fails the sweep
            print(f"history.html not drawn: {exc}")
        return 0
    store = Path(args.store) if args.store else Path("results") / "history"
    lines, code = history.run(
        store,
        args.runs,
        [Path(f) for f in args.add],
        Path(args.out) if args.out else None,
        args.fail_on_regression,
        args.last,
        args.min_effect,
    )
    print("\n".join(lines))
    return code


def _add_history(p: ArgumentParser) -> None:
    p.add_argument("runs", nargs="*", metavar="RUN", help="only these runs (their names); default every run")
    p.add_argument("--store", help="the history folder (default: results/history)")
    p.add_argument("--add", nargs="+", default=[], metavar="FOLDER", help="add finished results/<run> folders first")
    p.add_argument("--out", help="where to write the page (default: STORE/history.html)")
    p.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PCT",
        help="exit 1 when the newest run is judged slower than the runs before it, its 95%% interval above 1 + PCT/100",
    )
    p.add_argument("--last", type=int, default=1, metavar="N", help="the gate's baseline: the N runs before the newest")
    p.add_argument("--min-effect", type=_percentage, default=2.0, metavar="PCT", help="smallest step reported, percent")
    p.add_argument("--record", help=argparse.SUPPRESS)  # the workflow's history rule: results/<run>/history.json


def cmd_search(args: Namespace) -> None:
    """`neuronsweep search run|status`: a search or a model's tune, run or resumed, or where it stands."""
    from neuronsweep.search import build
    from neuronsweep.search.driver import pick

    cfg = config.load(args.config)
    kind, entry = pick(cfg, args.name, args.config)
    found = build(kind, cfg, entry, args.config, args.cores, args.snakefile)
    wrote = found.drive(say=print, rounds=args.finalist_rounds) if args.action == "run" else None
    print("\n".join(found.status_lines()))
    if wrote:
        print(wrote)


def _add_search(p: ArgumentParser) -> None:
    p.add_argument(
        "action", choices=["run", "status"], help="run: search until the budget is spent (resumes); status: where it is"
    )
    p.add_argument("config", help="a config with a search: block (a suites.custom entry's, or a top-level one)")
    p.add_argument("--name", help="the search's name, where the config has several")
    p.add_argument(
        "--cores",
        type=int,
        default=default_threads(),
        help="Snakemake's --cores for each round (default: the CPUs this process may run on, its affinity)",
    )
    p.add_argument(
        "--snakefile",
        help="the workflow each round runs (default: ./Snakefile, else the checkout's this package is installed from)",
    )
    p.add_argument(
        "--finalist-rounds",
        type=int,
        default=FINALIST_ROUNDS,
        metavar="N",
        help="cpu: fresh processes that time the winner, the runner-up and the default again (0: none)",
    )


def cmd_status(args: Namespace) -> None:
    """`neuronsweep status RUN`: each stage's cases done, running, failed and waiting, and the time left."""
    from neuronsweep.runs import status

    run_dir = Path(args.run)
    if not (run_dir / "plan.json").is_file():
        raise UserError(f"{run_dir}: no plan.json; pass a results/<run> folder of a sweep that has started.")
    summary = status.summarize(run_dir)
    print(json.dumps(summary, indent=2) if args.json else status.render(summary))


def _add_status(p: ArgumentParser) -> None:
    p.add_argument("run", help="results/<run> folder")
    p.add_argument("--json", action="store_true", help="print it as JSON, for scripts")


def cmd_query(args: Namespace) -> None:
    """`neuronsweep query PROFILE [SQL]`: a profile's tables in DuckDB, printed as a table or CSV."""
    from neuronsweep.formats.profile_db import ProfileDB, patterns_from

    db = ProfileDB(patterns_from(_options(args.track_patterns))).load(args.path)
    if not args.sql:
        for name in db.names:
            print(f"{name}: {', '.join(column for column, _ in db.describe(name))}")
        return
    from neuronsweep.report import query_text

    query_text.write(*db.fetch(args.sql, query_text.limit_for(args.max_rows, args.csv)), args.csv)


def _add_query(p: ArgumentParser) -> None:
    p.add_argument(
        "path",
        help=".pftrace / .parquet / profile .json / Chrome trace .json[.gz], a view or workload folder, "
        "or results/<run>",
    )
    p.add_argument("sql", nargs="?", help="omit to list the tables and their columns")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.add_argument(
        "--max-rows",
        type=int,
        help="print the first N rows, then how many more (0: all; default: 60 in a table, all with --csv)",
    )
    p.add_argument("--track-patterns", default="{}", help="JSON {class: regex} to classify tracks")


def cmd_convert(args: Namespace) -> None:
    """`neuronsweep convert`: a Chrome trace as a .pftrace that Perfetto opens."""
    from neuronsweep.formats import pftrace_writer

    src = Path(args.trace)
    if not src.is_file():
        raise UserError(f"{src}: no such file; pass a Chrome trace (.json or .json.gz, torch.profiler's export).")
    stem = src.name.removesuffix(".gz").removesuffix(".json")
    out = Path(args.out) if args.out else src.with_name(f"{stem}.pftrace")
    from neuronsweep.formats.gzip_files import gzip_damage

    with gzip_damage(src):
        counts = pftrace_writer.chrome_to_pftrace(src, out)
    said = ", ".join(f"{counts[k]} {k}" for k in ("slices", "instants", "counters", "flows") if counts.get(k))
    if counts.get("overlapping"):
        said += f" ({counts['overlapping']} slices on tracks beside their thread)"
    log.info(f"{src} -> {out}: {said or 'no events'}")


def _add_convert(p: ArgumentParser) -> None:
    p.add_argument("trace", help="the Chrome trace (plain or gzip, told by content)")
    p.add_argument("out", nargs="?", help="the .pftrace to write (default: beside the trace, <name>.pftrace)")


def cmd_session(args: Namespace) -> None:
    """`neuronsweep session`: a vLLM Neuron server's profile session, every rank side by side."""
    from neuronsweep.stages import session

    root = Path(args.dir)
    out = Path(args.out) if args.out else Path("results") / "sessions" / root.resolve().name
    summary = session.run(root, out, args.profiler, args.timeout)
    for line in session.lines(summary, out):
        log.info(line)


def _add_session(p: ArgumentParser) -> None:
    p.add_argument("dir", help="the output_dir of vLLM Neuron's neuron_profiler (i-<instance>_pid_<pid>/, neffs/)")
    p.add_argument("--out", help="where to write (default: results/sessions/<the folder's name>)")
    p.add_argument("--profiler", default="auto", help="neuron-explorer, or its path (default: found on PATH)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds Neuron Explorer's view may take")


def cmd_calibrate(args: Namespace) -> None:
    """`neuronsweep calibrate`: this host's measured GEMM rates and copy bandwidth (cpu peaks)."""
    from neuronsweep.atomic import write_json
    from neuronsweep.backends import cpu
    from neuronsweep.host import caps

    dtypes = [d for d in args.dtypes.split(",") if d]
    unknown = sorted(set(dtypes) - set(caps.DTYPES))
    if unknown or not dtypes:
        raise UserError(f"--dtypes {args.dtypes!r}: give a comma-separated list of {', '.join(caps.DTYPES)}.")
    rec = cpu.calibrate(args.threads, args.cache_dir, dtypes, args.device_lock)
    write_json(args.out, rec)
    peaks = ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in rec["peak_flops_per_s"].items())
    log.info(
        f"calibrate ({'cached' if rec['cache_hit'] else 'measured'}, {args.threads} threads): {peaks}, "
        f"copy {rec['peak_bytes_per_s'] / 1e9:.1f} GB/s -> {args.out}"
    )


def _add_calibrate(p: ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="the calibration.json to write")
    p.add_argument("--threads", type=int, default=default_threads(), help="torch's intra-op threads")
    p.add_argument("--dtypes", default="fp32", help="comma-separated dtypes to measure (the sweep's)")
    p.add_argument(
        "--cache-dir", default=host_setting("cache_dir", schema_default("cache_dir")), help="the compile cache"
    )
    p.add_argument(
        "--device-lock",
        default=host_setting("device_lock", DEFAULT_LOCK),
        help="OS lock held while measuring (no capture beside it)",
    )


def cmd_doctor(args: Namespace) -> int:
    """`neuronsweep doctor`: devices, tools and versions; --field-test checks every Neuron contract."""
    if args.field_test:
        from neuronsweep import fieldtest

        return fieldtest.run(Path(args.out), session_dir=Path(args.session) if args.session else None)
    from neuronsweep import doctor

    print(doctor.report(args.config))
    return 0


def _add_doctor(p: ArgumentParser) -> None:
    p.add_argument("--config", default="config/config.yaml", help="the config whose backend and target it resolves")
    p.add_argument(
        "--field-test",
        action="store_true",
        help="compile, capture and view a small bf16 matmul through every route here and check each "
        "contract the project assumes (PASS/FAIL/SKIP), writing field-test.tar.gz for a bug report",
    )
    p.add_argument("--out", default="field-test", help="with --field-test: where its run and bundle go")
    p.add_argument(
        "--session",
        help="with --field-test: a vLLM Neuron server's profile (its neuron_profiler output_dir) whose layout, "
        "ranks, graphs and clocks are checked against what neuronsweep session assumes",
    )


def cmd_aggregate(args: Namespace) -> None:
    """`neuronsweep aggregate`: every case's metrics as the run's summary.csv."""
    from neuronsweep.stages import aggregate

    table = aggregate.run(Path(args.plan), Path(args.out), Path(args.targets_out) if args.targets_out else None)
    counts = table["status"].value_counts().to_dict()
    log.info(f"aggregate: {len(table)} scenarios {counts} -> {args.out}")
    for _, row in table[table["status"] != "ok"].iterrows():
        log.info(f"  {row['status']}: {row['scenario_id']}: {row['reason']}")


def _add_aggregate(p: ArgumentParser) -> None:
    p.add_argument("--plan", required=True, help="results/<run>/plan.json")
    p.add_argument("--out", required=True, help="the summary.csv to write")
    p.add_argument(
        "--targets-out", help="also write the tile model and ideal times of every workload on trn1, inf2, trn2"
    )


def _timeout_arg(p: ArgumentParser, stage: str) -> None:
    p.add_argument(
        "--timeout",
        type=float,
        default=host_setting("timeouts", {}).get(stage, DEFAULT_TIMEOUT_S[stage]),
        help="seconds an external program (profiler, compiler child) may run before it is killed",
    )


@dataclass(frozen=True)
class Command:
    """A command of the CLI: its help, description, examples, arguments and handler, listed or not."""

    help: str  # one line in `neuronsweep --help`
    description: str  # what it is for, in `neuronsweep COMMAND --help`
    examples: tuple[str, ...]
    add: Callable  # its arguments
    run: Callable  # cmd_<name>
    user: bool = True  # False: a stage the workflow runs (listed apart)


COMMANDS = {
    "plan": Command(
        "expand a config into scenarios and unique workloads",
        "Validates the config as the workflow does, then lists every scenario, the workload it runs and "
        "what the backend cannot run (with the reason), an estimate of the time, and the capture slots.",
        ("neuronsweep plan --config config/examples/smoke.yaml", "neuronsweep plan --json > plan.json"),
        _add_plan,
        cmd_plan,
    ),
    "status": Command(
        "a sweep's progress per stage (done, running, failed, waiting) and the time left",
        "Reads what the stages wrote: works beside a running Snakemake, a Slurm run, or after one.",
        ("neuronsweep status results/default", "neuronsweep status results/default --json"),
        _add_status,
        cmd_status,
    ),
    "compare": Command(
        "two runs side by side: versions, config, and which workloads got faster or slower",
        "Toolchain versions and config differences first, then per workload the ratio B/A and the "
        "verdict: two cpu runs' programs are timed again here (8 fresh processes, each timing A and B in "
        "alternation) and judged on those processes, more rounds where a gate needs them; --stored judges "
        "the stored timings. Writes compare.csv and "
        "compare.html (docs/comparing-runs.md).",
        (
            "neuronsweep compare results/default results/again",
            "neuronsweep compare results/default results/again --fail-on-regression 5",
        ),
        _add_compare,
        cmd_compare,
    ),
    "search": Command(
        "autotune: the fastest correct params of your kernel, within a budget",
        "Searches a suites.custom entry's search: block (grid, random or Optuna's TPE), each trial an ordinary "
        "cached case run by the workflow, a round per Snakemake call; resumes where it stopped; writes "
        "results/<run>/search/<name>/trials.csv and best.json (docs/autotune.md).",
        (
            "neuronsweep search run config/examples/autotune.yaml",
            "neuronsweep search status config/examples/autotune.yaml",
        ),
        _add_search,
        cmd_search,
    ),
    "history": Command(
        "every workload's time over the runs in results/history, with its change points",
        "Every finished sweep adds itself to results/history; this prints each workload's series and its "
        "change points, writes history.html, and gates the newest run against the ones before it.",
        ("neuronsweep history", "neuronsweep history --fail-on-regression 5 --last 3"),
        _add_history,
        cmd_history,
    ),
    "query": Command(
        "SQL (DuckDB) over a profile, view folder, workload or whole run",
        "Perfetto's table names (slice, track, thread, args, ...) and views for the first questions "
        "(top_ops, slice_self_dur, track_busy); PATH alone lists the tables and their columns.",
        (
            'neuronsweep query trace.json.gz "SELECT * FROM top_ops" --max-rows 10',
            'neuronsweep query results/default "SELECT workload_id, sum(dur) FROM slice GROUP BY ALL"',
        ),
        _add_query,
        cmd_query,
    ),
    "convert": Command(
        "a Chrome trace (torch.profiler's .json or .json.gz) as a Perfetto .pftrace, exactly",
        "Every slice to the nanosecond, with its args and flows; open the result in ui.perfetto.dev.",
        ("neuronsweep convert trace.json.gz", "neuronsweep convert trace.json out.pftrace"),
        _add_convert,
        cmd_convert,
    ),
    "session": Command(
        "a vLLM Neuron server's profile session: every rank's steps, their skew, one timeline",
        "Reads the output_dir vLLM Neuron's profiler wrote (one i-<instance>_pid_<pid> folder per profiled "
        "worker, neffs/): views it with Neuron Explorer, then writes each execution as a step (its NEFF and "
        "graph, device time, the gap after it), each kind of step's share, the ranks' waits at their "
        "collectives and ranks.pftrace (docs/your-code.md).",
        ("neuronsweep session neuron_profiles", "neuronsweep session neuron_profiles --out results/sessions/run1"),
        _add_session,
        cmd_session,
    ),
    "doctor": Command(
        "what Neuron devices and tools are here, and which backend a run would use",
        "Devices, tools and versions, the instance's target and LNC; --field-test checks each contract the "
        "project assumes on a real instance and writes a bundle for a bug report.",
        ("neuronsweep doctor", "neuronsweep doctor --field-test"),
        _add_doctor,
        cmd_doctor,
    ),
    "build": Command(
        "compile one workload (cached)",
        "The workflow's build rule: one workload spec to its program (a .pt2 on cpu, a NEFF on neuron) "
        "and build.json, through the compile cache.",
        ('neuronsweep build --spec \'{"kind":"matmul","m":128,"k":128,"n":128,"dtype":"fp32"}\' --out build',),
        _add_build,
        cmd_build,
        user=False,
    ),
    "capture": Command(
        "profile the nth execution of a built workload and time it",
        "The workflow's capture rule: the profiled execution (--nth-exec of --num-exec) and the timed rounds.",
        ("neuronsweep capture --build build --out capture --iterations 30 --repeats 3",),
        _add_capture,
        cmd_capture,
        user=False,
    ),
    "view": Command(
        "convert a capture into summary.json and a .pftrace",
        "The workflow's view rule: the profiler's output as summary.json, trace.pftrace and (neuron) parquet.",
        ("neuronsweep view --capture capture --out view",),
        _add_view,
        cmd_view,
        user=False,
    ),
    "extract": Command(
        "normalize one workload's records into metrics.json",
        "The workflow's extract rule: every metric of one case, null with a reason where not measured.",
        (
            "neuronsweep extract --summary-json view/summary.json --capture-json capture/capture.json "
            "--out metrics.json",
        ),
        _add_extract,
        cmd_extract,
        user=False,
    ),
    "aggregate": Command(
        "one summary.csv row per scenario, failures with their reason",
        "The workflow's aggregate rule: every case's metrics.json, or its failure, as one table.",
        ("neuronsweep aggregate --plan results/default/plan.json --out results/default/summary.csv",),
        _add_aggregate,
        cmd_aggregate,
        user=False,
    ),
    "report": Command(
        "report.html (self-contained, interactive) from summary.csv",
        "The workflow's report rule: figures, rankings and recommendations from summary.csv.",
        ("neuronsweep report --summary summary.csv --plan plan.json --out report.html",),
        _add_report,
        cmd_report,
        user=False,
    ),
    "calibrate": Command(
        "measure the host CPU's peak FLOP/s and bandwidth for the roofline (cached)",
        "The workflow's calibration rule (cpu): a GEMM per dtype and a copy, under the device lock.",
        ("neuronsweep calibrate --out calibration.json --dtypes fp32,bf16",),
        _add_calibrate,
        cmd_calibrate,
        user=False,
    ),
}


class _Help(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; each option's default shown where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            action.default not in (None, False, [], argparse.SUPPRESS)
            and "default" not in text
            and action.option_strings
        ):
            text += " (default: %(default)s)"
        return text


def parser() -> argparse.ArgumentParser:
    """The CLI's argument parser: the user's commands listed, the stage commands runnable but unlisted."""
    stages = ", ".join(n for n, c in COMMANDS.items() if not c.user)
    ap = argparse.ArgumentParser(
        prog="neuronsweep",
        description=__doc__,
        epilog=textwrap.fill(f"run by the workflow (each also by hand; neuronsweep STAGE --help): {stages}", 100),
        formatter_class=_Help,
    )
    ap.add_argument("--version", action="version", version=__version__)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name, command in COMMANDS.items():
        listed: dict[str, Any] = {"help": command.help} if command.user else {}  # stage commands: not listed
        p = sub.add_parser(
            name,
            **listed,
            description=textwrap.fill(f"{command.help[0].upper()}{command.help[1:]}. {command.description}", 100),
            epilog="example:\n  " + "\n  ".join(command.examples),
            formatter_class=_Help,
        )
        command.add(p)
        p.set_defaults(func=command.run)
    return ap


def _case(args: Namespace) -> str:
    """Name the case a failed command was working on, for the one-sentence error."""
    try:
        if args.command == "build":
            return f"case {workload_id(_spec(args.spec))}"
        if args.command in STAGES:  # --out sits in the case's folder
            return f"case {Path(args.out).resolve().parent.name}"
    except Exception:  # noqa: BLE001 - naming the case must never mask the real error
        pass
    return args.command


def _setup_logging() -> None:
    """Progress to stdout, warnings and errors to stderr (Snakemake sends both to the job's log)."""
    if log.handlers:
        return
    out, err = logging.StreamHandler(sys.stdout), logging.StreamHandler(sys.stderr)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err.setLevel(logging.WARNING)
    for handler in (out, err):
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit code. A failure is one sentence on stderr (2: bad input; 1: anything
    else, after its traceback) and, for a stage of the workflow, a failure record in the case's logs."""
    args = parser().parse_args(argv)
    _setup_logging()
    # a case folder of the workflow (Snakemake made its logs/): failures are recorded there for aggregate
    case_dir = Path(args.out).parent if args.command in STAGES else None
    case_dir = case_dir if case_dir is not None and (case_dir / "logs").is_dir() else None
    if case_dir is not None:  # `neuronsweep status` shows this stage as running while the process lives
        from neuronsweep.runs.status import mark_running

        mark_running(case_dir, args.command)
    try:
        code = args.func(args) or 0
    except Exception as exc:  # noqa: BLE001 - every failure ends in one sentence, also as data
        if isinstance(exc, UserError):
            reason, code = str(exc), 2
        else:
            log.error(traceback.format_exc().rstrip())
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            reason, code = (
                f"{_case(args)}: {args.command} failed with {type(exc).__name__}: {first} (traceback above).",
                1,
            )
        log.error(f"{ERROR_PREFIX}{reason}")
        if case_dir is not None:
            record_failure(case_dir, args.command, _case(args), reason, type(exc).__name__)
        return code
    finally:
        if case_dir is not None:
            from neuronsweep.runs.status import clear_running

            clear_running(case_dir, args.command)
    if case_dir is not None:
        clear_failure(case_dir, args.command)
    return code


if __name__ == "__main__":
    sys.exit(main())
