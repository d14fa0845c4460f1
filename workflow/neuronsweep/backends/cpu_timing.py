"""The cpu backend's timing loop, on its own so a timed round in a fresh interpreter (cpu_round.py)
imports torch and nothing else heavy: backends/cpu.py pulls in the trace readers (DuckDB, pyarrow,
pandas), which cost every round about a third of a second for nothing it measures."""

from __future__ import annotations

import gc
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NotRequired, TypedDict, cast

from neuronsweep.backends import BACKENDS
from neuronsweep.backends.processes import run_tool
from neuronsweep.errors import UserError
from neuronsweep.store.records import BuildRecord
from neuronsweep.store.specs import Spec
from neuronsweep.workloads import TORCH_DTYPES, dtype_of, input_names, load_program, tensor_shapes, torch_module

if TYPE_CHECKING:
    import torch

ARTIFACT = BACKENDS["cpu"].artifacts["build"]
WARMUP_MIN_S = 0.05  # the warm-up lasts at least this long, beside the config's count
LEAD_S = 0.01  # untimed runs at the start of the timing loop's call (one at least)


class ScreenJob(TypedDict):
    """One configuration's case in a search's screen: its workload run eagerly, a few iterations."""

    spec: Spec
    threads: int
    warmup: int
    iterations: int


class Screened(TypedDict):
    """What a screen gave one job: its samples, or the user's exception that stopped it."""

    samples: NotRequired[list[float]]
    error: NotRequired[str]


class AlternatingJob(TypedDict):
    """Built programs timed in alternation in one process (compare's rounds, a search's finalists)."""

    builds: list[str]  # each program's build folder
    threads: int
    warmup: int
    iterations: int


class TimedRound(TypedDict):
    """A round timed in a fresh interpreter (cpu_round.py): its samples and its pid."""

    samples: list[float]
    pid: int


class AlternatedRound(TypedDict):
    """A round of programs timed in alternation in a fresh interpreter: per job, each program's samples."""

    samples: list[list[list[float]]]
    pid: int


def torch_dtype(torch: ModuleType, name: str) -> torch.dtype:
    """The torch dtype for a config dtype name (fp32, bf16, ...)."""
    return getattr(torch, TORCH_DTYPES[name])


def freeze_what_is_loaded() -> None:
    """Collect once, then move every live object (torch and its modules) out of the collector's reach
    (gc.freeze): the collection between two jobs then scans only what the jobs made. With torch loaded,
    a full collection takes about 80 ms (a 24-configuration screen spent 1.9 s of its 4.5 s in them; with
    the freeze, bench/search_trial_cost.py's 9-configuration screen takes 1.60 s against 2.58 s)."""
    gc.collect()
    gc.freeze()


def time_round(build_dir: Path, threads: int, warmup: int, iterations: int) -> list[float]:
    """One timed round in this process, from nothing: backends/programs/cpu_round.py runs it in a fresh one."""
    import torch

    spec = BuildRecord.read(build_dir).spec
    module = load_program(build_dir / ARTIFACT, spec)
    torch.set_num_threads(threads)
    with torch.inference_mode():
        return warm_then_time(timing_loop(module, inputs(torch, spec)), warmup, iterations)


def time_alternating(jobs: list[AlternatingJob]) -> list[list[list[float]]]:
    """compare's rounds and a search's finalists: for each job ({"builds": [first, second, ...], "threads",
    "warmup", "iterations"}) the programs loaded in this process, warmed, then timed in alternation
    (first, second, ..., first, ...), so that one iteration of each runs within milliseconds of the
    others'. On our 2-vCPU KVM hosts the machine's speed moves 20-40 % within seconds (one process
    timing a 1024^3 GEMM in blocks 0.5 s apart: 31 to 44 ms), far more than a program changes;
    alternating inside one process puts both sides in the same moment, and the ratio of their medians
    moved 2-4 % between processes where each side alone moved 9-32 %. Returns the samples of each
    program per job, in the order given."""
    import torch

    out = []
    for job in jobs:
        torch.set_num_threads(int(job["threads"]))
        with torch.inference_mode():
            loops = []
            for build in job["builds"]:
                spec = BuildRecord.read(Path(build)).spec
                module = load_program(Path(build) / ARTIFACT, spec)
                loops.append(timing_loop(module, inputs(torch, spec)))
            for loop in loops:  # each warmed as a lone round is
                warm_then_time(loop, int(job["warmup"]), 1)
            samples: list[list[float]] = [[] for _ in loops]
            gc.disable()
            try:
                for _ in range(int(job["iterations"])):
                    for side, loop in enumerate(loops):
                        samples[side] += loop(1)
            finally:
                gc.enable()
        out.append(samples)
        gc.collect()
    return out


def screen(jobs: list[ScreenJob]) -> list[Screened]:
    """A search's cheapest rung (runs/search.py, halving): each job's workload ({"spec", "threads",
    "warmup", "iterations"}) run eagerly, as PyTorch runs the user's module without torch.export, timed
    in this one process: {"samples"} or {"error"} (the user's exception, that job only)."""
    import torch

    freeze_what_is_loaded()
    out: list[Screened] = []  # per job: its samples, or the error that stopped it
    for job in jobs:
        spec = job["spec"]
        try:
            module = torch_module(spec)
            torch.set_num_threads(int(job["threads"]))
            with torch.inference_mode():
                loop = timing_loop(module, inputs(torch, spec))
                out.append({"samples": warm_then_time(loop, int(job["warmup"]), int(job["iterations"]))})
        except Exception as exc:  # noqa: BLE001 - the user's code: that job fails, the others are timed
            out.append({"error": f"{type(exc).__name__}: {exc}".strip()[:300]})
        gc.collect()
    return out


class RoundAnswer(TypedDict, total=False):
    """cpu_round.py's last line: a round's samples (alternated: per job and program), or a screen's results."""

    samples: list[float] | list[list[list[float]]]
    results: list[Screened]
    pid: int


def _cpu_round(args: list[str], timeout_s: float, what: str) -> RoundAnswer:
    """cpu_round.py in a fresh interpreter: its last line of JSON, or one sentence of what failed."""
    proc = run_tool([sys.executable, "-m", "neuronsweep.backends.programs.cpu_round", *args], timeout_s, what)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise UserError(f"{what} failed: {why}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def screen_in_process(jobs: list[ScreenJob], timeout_s: float) -> list[Screened]:
    """screen() in one fresh interpreter (cpu_round.py --screen): one torch import for every job."""
    what = f"screened {len(jobs)} configuration case(s) in one process"
    return _cpu_round(["--screen", json.dumps(jobs)], timeout_s, what)["results"]


def alternating_in_process(jobs: list[AlternatingJob], timeout_s: float, r: int) -> AlternatedRound:
    """Round r of programs timed in alternation in one fresh interpreter (cpu_round.py --alternate):
    {"samples": per job, each of its programs' samples, "pid"}."""
    what = f"timed round {r} of {len(jobs)} group(s) of programs in alternation in one process"
    return cast(AlternatedRound, _cpu_round(["--alternate", json.dumps(jobs)], timeout_s, what))  # cpu_round.py's


def round_in_process(
    build_dir: Path, threads: int, warmup: int, iterations: int, timeout_s: float, r: int
) -> TimedRound:
    """Round r in a fresh interpreter (cpu_round.py): its samples and pid. One after another, never
    two at once (they would share the cores they measure); the caller waits idle meanwhile."""
    args = [str(build_dir), str(threads), str(warmup), str(iterations)]
    return cast(TimedRound, _cpu_round(args, timeout_s, f"timed round {r} of {build_dir} in its own process"))


def inputs(torch: ModuleType, spec: Spec) -> list:
    """The case's inputs, the same values in every process (seeded)."""
    gen = torch.Generator().manual_seed(0)
    shapes, dtype = tensor_shapes(spec), torch_dtype(torch, dtype_of(spec))
    return [torch.randn(shapes[n], generator=gen, dtype=dtype) for n in input_names(spec)]


def timing_loop(module: Callable, args: list) -> Callable[[int], list[float]]:
    """timed(n): n executions, each timed alone (perf_counter_ns), in seconds."""

    def timed(executions: int) -> list[float]:
        samples = [0.0] * executions
        for i in range(executions):
            t0 = time.perf_counter_ns()
            module(*args)
            samples[i] = (time.perf_counter_ns() - t0) * 1e-9
        return samples

    return timed


def warm_then_time(timed: Callable[[int], list[float]], warmup: int, iterations: int) -> list[float]:
    """`iterations` timed runs after `warmup` runs and at least WARMUP_MIN_S of runs. `timed(n)` is the
    timing loop run n times; the warm-up runs that loop itself, and the call that times also runs
    LEAD_S of untimed runs first: a loop that had not run made the 1st and 8th timed runs of a 55 us
    case 1.5x slower (Python 3.11 specializes a loop's bytecode during its first executions), and the
    first run of each call stayed slow now and then, which in rounds of 10 flagged small cases noisy."""
    deadline = time.perf_counter() + WARMUP_MIN_S
    last = timed(max(1, warmup))
    while time.perf_counter() < deadline:
        last = timed(max(1, warmup))
    lead = math.ceil(LEAD_S / max(min(last), 1e-9))
    gc.disable()  # as timeit does: a collection inside a timed run is not the workload's time
    try:
        return timed(lead + iterations)[lead:]
    finally:
        gc.enable()
