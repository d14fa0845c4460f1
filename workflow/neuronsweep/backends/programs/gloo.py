"""The collectives suite, and a model's forward across its ranks, on the cpu backend: torch.distributed with
gloo, one process per rank on this host, measured for real.

build   nothing to compile (gloo runs library calls; a forward's ranks run the model's layers eagerly): the
        launch plan, collective.json
capture start `world` rank processes (`python -m neuronsweep.backends.programs.gloo`, or `.gloo_forward` for a
        forward), rendezvous through a FileStore in the capture folder; each rank warms up, runs num_exec
        executions (rank 0 profiles the nth under torch.profiler), then times `repeats x iterations`
        executions, each after a barrier so that all ranks start together. An execution's time is the
        slowest rank's (it is done when every rank is), and each rank's own times make tables/ranks.csv;
        every collective call's entry and exit on each rank put the ranks on one timeline (ranks.pftrace).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

from neuronsweep.analysis import rank_timeline
from neuronsweep.analysis.correctness import check_rank, worst
from neuronsweep.analysis.rank_timeline import Span
from neuronsweep.analysis.stats import latency_stats
from neuronsweep.atomic import read_json, replacing, write_json
from neuronsweep.backends import BACKENDS, COLLECTIVE_PLAN
from neuronsweep.backends.build_facts import package_versions
from neuronsweep.backends.trace_spans import EXEC_MARK
from neuronsweep.config.settings import CaptureSettings
from neuronsweep.errors import UserError
from neuronsweep.formats import pftrace_writer
from neuronsweep.host import caps
from neuronsweep.store.records import BuildRecord, CaptureFields
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import TORCH_DTYPES, collective_of, described, forward_of, ranks_of

TRACE = BACKENDS["cpu"].artifacts["capture"]  # rank 0's chrome trace: the cpu view reads it as any other
RANKS_TRACE = "ranks.pftrace"  # every rank's timed executions on one timeline, a process track each
BACKEND = "gloo"
FORWARD_PROGRAM = "neuronsweep.backends.programs.gloo_forward"  # a forward's ranks (workloads/forward.py)


def _torch_version() -> str | None:
    """The ranks import torch; this process only records its version (importing it costs seconds)."""
    return package_versions(["torch"])["torch"]


def build(spec: Spec, out_dir: Path) -> dict:
    """The collective's rank plan (spec, process-group backend, torch version) in out_dir: gloo has nothing to compile.
    Returns build.json's fields."""
    alone = described(spec).bandwidth  # a collective alone, else a forward across ranks
    plan: dict[str, object] = {"spec": spec, "process_group_backend": BACKEND}
    if alone:
        plan["counts"] = dict(zip(("input", "output"), collective_of(spec).counts))
    write_json(out_dir / COLLECTIVE_PLAN, plan)
    return {
        "toolchain": {"torch": _torch_version()},
        "compiler": "none (gloo runs library calls)" if alone else "none (each rank runs the layers eagerly)",
        "artifact_format": "collective launch plan, v1" if alone else "forward launch plan, v1",
        "compile_s": None,
        "compile_s_source": "nothing is compiled for a gloo collective",
        "cache": {"hit": None, "note": "nothing to cache: no compile"},
    }


def capture(build: BuildRecord, build_dir: Path, settings: CaptureSettings, out_dir: Path) -> CaptureFields:
    """Start one process per rank on this host, rendezvous over a file, and collect each rank's timed samples,
    correctness and profiled span. Returns capture.json's fields (rank 0's latency and every rank's)."""
    spec = build.spec
    world = ranks_of(spec)
    work = out_dir / "ranks"
    work.mkdir(exist_ok=True)
    store = (work / "store").resolve()  # a relative path in a file:// URL would read as a host name
    for stale in [store, *work.glob("rank_*"), work / TRACE]:  # of an earlier attempt
        stale.unlink(missing_ok=True)
    given: RankArgs = {
        "spec": spec,
        "warmup": settings.warmup,
        "num_exec": settings.num_exec,
        "nth_exec": settings.nth_exec,
        "samples": settings.repeats * settings.iterations,
        "threads": max(1, settings.threads // world),
        "store": str(store),
        "out": str(work),
    }
    args = json.dumps(given)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logs = [work / f"rank_{rank}.log" for rank in range(world)]
    program = __name__ if described(spec).bandwidth else FORWARD_PROGRAM
    procs = []
    for rank in range(world):
        with open(logs[rank], "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", program, str(rank), args], env=env, stdout=log, stderr=subprocess.STDOUT
                )
            )
    try:
        _wait(procs, logs, time.monotonic() + settings.timeout_s, build.workload_id, settings.timeout_s)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    ranks = [read_json(work / f"rank_{r}.json") for r in range(world)]
    per_exec = [max(r["samples_s"][i] for r in ranks) for i in range(len(ranks[0]["samples_s"]))]
    os.replace(work / TRACE, out_dir / TRACE)
    timeline = _timeline(ranks, build.workload_id, out_dir)
    if not described(spec).bandwidth:
        timeline |= _forward(ranks, timeline["rank_waits"], forward_of(spec).layers_run)
    store.unlink(missing_ok=True)
    cores = os.cpu_count() or 1
    return {
        "profiler": f"torch.profiler (torch {_torch_version()}), rank 0",
        "latency": latency_stats(per_exec, settings.repeats),
        "latency_basis": "per execution, the slowest rank's time (each execution starts after a barrier)",
        "ranks": [{"rank": r["rank"], **latency_stats(r["samples_s"], settings.repeats)} for r in ranks],
        "correctness": worst([r["correctness"] for r in ranks if r.get("correctness")]),  # a forward: rank 0's
        "threads": ranks[0]["threads"],
        "process_group_backend": BACKEND,
        "host": caps.host_record(),
        "oversubscribed": (
            f"{world} ranks on {cores} cores: ranks share cores, so the times include waiting for a core"
        )
        if world > cores
        else None,
        "artifacts": {"trace": TRACE, "ranks_trace": RANKS_TRACE},
        **timeline,
    }


def _timeline(ranks: list[dict], name: str, out_dir: Path) -> CaptureFields:
    """The ranks' collective calls on one timeline (analysis/rank_timeline.py): capture.json's `rank_timeline`
    and `rank_waits`, and ranks.pftrace, one process track per rank (a forward's executions beside its calls)."""
    spans = [[(float(a), float(b)) for a, b in r["spans_s"]] for r in ranks]
    timeline = rank_timeline.align(spans)
    calls = ranks[0].get("calls")  # a forward's: each call's op, the same on every rank
    names = calls * (len(spans[0]) // len(calls)) if calls else None
    executions = [[(float(a), float(b)) for a, b in r["exec_spans_s"]] for r in ranks] if calls else None
    events = rank_timeline.chrome_trace(spans, timeline, name, names, executions)
    pftrace_writer.chrome_to_pftrace(events, out_dir / RANKS_TRACE)
    summary = {
        "offsets_s": list(timeline.offsets_s),
        "residual_s": timeline.residual_s,
        "straggler_rank": timeline.straggler_rank,
        "rank_wait_max_s": timeline.rank_wait_max_s,
        "collective_wait_pct": timeline.collective_wait_pct,
        "instances": len(timeline.arrivals_s),
    }
    return {"rank_timeline": summary, "rank_waits": timeline.rows()}


def _forward(ranks: list[dict[str, Any]], waits: list[dict[str, Any]], layers_run: int) -> CaptureFields:
    """A forward's time inside its collectives, waiting in them and computing, per execution the ranks'
    mean, the median over executions (capture.json `forward_across_ranks`). No overlap of compute and
    collectives is measured: gloo's calls block the rank that makes them."""
    samples = len(ranks[0]["samples_s"])
    calls = len(ranks[0]["calls"])
    inside = [[sum(b - a for a, b in r["spans_s"][i * calls : (i + 1) * calls]) for i in range(samples)] for r in ranks]
    waited = [[0.0] * samples for _ in ranks]
    for row in waits:
        waited[row["rank"]][row["instance"] // calls] += row["wait_s"]
    per_exec = [
        (statistics.fmean(r[i] for r in inside), statistics.fmean(r[i] for r in waited)) for i in range(samples)
    ]
    compute = [statistics.fmean(r["samples_s"][i] - inside[k][i] for k, r in enumerate(ranks)) for i in range(samples)]
    return {
        "forward_across_ranks": {
            "layers_run": layers_run,
            "collective_calls": calls,
            "ops": dict(Counter(ranks[0]["calls"])),
            "collectives_s": statistics.median(c for c, _ in per_exec),
            "wait_s": statistics.median(w for _, w in per_exec),
            "compute_s": statistics.median(compute),
            "overlap_why": "not measured on cpu: gloo's calls block the rank that makes them (synchronous "
            "torch.distributed calls), so nothing of its own compute can run beside them; a device that runs "
            "collectives on their own engine measures it",
        }
    }


def _wait(procs: list, logs: list[Path], deadline: float, wid: str, timeout_s: float) -> None:
    """Until every rank has exited; the first rank to fail stops the others (they would wait for it in
    the next collective until the timeout), and so does the timeout."""
    while True:
        failed = next((r for r, proc in enumerate(procs) if proc.poll()), None)  # exited, not with 0
        if failed is not None or all(proc.poll() is not None for proc in procs):
            break
        if time.monotonic() > deadline:
            raise UserError(
                f"case {wid}: the {len(procs)} gloo ranks did not finish within the capture timeout "
                f"({timeout_s:.0f} s, config key timeouts.capture); raise it or shrink the message size."
            )
        time.sleep(0.05)
    if failed is not None:
        lines = logs[failed].read_text(errors="replace").strip().splitlines()
        raise UserError(
            f"case {wid}: gloo rank {failed} of {len(procs)} failed (exit {procs[failed].returncode}): "
            f"{lines[-1] if lines else 'no output'} (whole output: {logs[failed]})"
        )


if TYPE_CHECKING:
    import numpy as np
    import torch


def collective_call(
    dist: ModuleType, torch: ModuleType, spec: Spec, values: np.ndarray | None = None
) -> tuple[Callable[[], object], torch.Tensor]:
    """The collective as a no-argument call on preallocated buffers (input: ones, or `values`), and the
    buffer its result lands in."""
    c = collective_of(spec)
    dtype = getattr(torch, TORCH_DTYPES[c.dtype])
    n_in, n_out = collective_of(spec).counts
    inp = torch.ones(n_in, dtype=dtype) if values is None else torch.tensor(values, dtype=dtype)
    out = torch.empty(n_out, dtype=dtype)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    call = {
        "all_reduce": lambda: dist.all_reduce(inp),
        "all_gather": lambda: gather(out, inp),
        "reduce_scatter": lambda: scatter(out, inp),
        "all_to_all": lambda: dist.all_to_all_single(out, inp),
    }[c.op]
    return call, inp if c.op == "all_reduce" else out


class RankArgs(TypedDict):
    """What capture hands every rank's process (one JSON argument): the workload, the executions, where to meet."""

    spec: Spec
    warmup: int
    num_exec: int
    nth_exec: int
    samples: int
    threads: int
    store: str  # the file the ranks rendezvous over
    out: str  # the folder each rank writes rank_<r>.json (and rank 0 the trace) into


def _rank(rank: int, args: RankArgs) -> None:
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # renamed collectives across torch versions
    spec = args["spec"]
    torch.set_num_threads(args["threads"])
    dist.init_process_group(BACKEND, init_method=f"file://{args['store']}", rank=rank, world_size=ranks_of(spec))
    check, result = collective_call(dist, torch, spec, collective_of(spec).rank_input(rank))
    check()  # once, on inputs whose every sum is exact, against the float64 NumPy result
    correctness = check_rank(spec, rank, result)
    op, _ = collective_call(dist, torch, spec)
    samples, spans, profiled = timed(op, rank, args, dist)
    done(rank, args, dist, profiled, {"samples_s": samples, "spans_s": spans, "correctness": correctness})


def timed(
    call: Callable[[], object], rank: int, args: RankArgs, dist: ModuleType, sampled: Callable[[], object] | None = None
) -> tuple[list[float], list[Span], Any]:
    """A rank's executions of `call`: the warm-up, then num_exec with rank 0 profiling the nth under
    torch.profiler, then the timed samples (of `sampled` where given: the same call, recording), each after
    a barrier. Returns each sample's seconds, its entry and exit on the rank's own clock, and rank 0's
    profile (None on the others)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    profiled = None
    for _ in range(args["warmup"]):
        call()
    dist.barrier()
    for i in range(1, args["num_exec"] + 1):
        if rank == 0 and i == args["nth_exec"]:
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiled:
                with record_function(f"{EXEC_MARK}{i}"):
                    call()
        else:
            call()
    samples, spans = [], []
    for _ in range(args["samples"]):
        dist.barrier()
        t0 = time.perf_counter_ns()
        (sampled or call)()
        t1 = time.perf_counter_ns()
        samples.append((t1 - t0) * 1e-9)
        spans.append((t0 * 1e-9, t1 * 1e-9))
    return samples, spans, profiled


def done(rank: int, args: RankArgs, dist: ModuleType, profiled: Any, record: dict) -> None:
    """After the last barrier: the process group left, rank 0's profiled execution written as the capture's
    trace, and the rank's record (`record` with its rank and threads) as rank_<r>.json."""
    import torch

    dist.barrier()
    dist.destroy_process_group()
    out = Path(args["out"])
    if profiled is not None:
        with replacing(out / TRACE) as tmp:
            profiled.export_chrome_trace(str(tmp))
    write_json(out / f"rank_{rank}.json", {"rank": rank, **record, "threads": torch.get_num_threads()})


def leave() -> NoReturn:
    """End a rank whose record is written without the interpreter's teardown: a thread of torch's profiler or
    of gloo left unjoined there can abort the process ("terminate called without an active exception", exit
    -6) after its work is done and written, which would fail the case for nothing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _rank(int(sys.argv[1]), json.loads(sys.argv[2]))
    leave()
