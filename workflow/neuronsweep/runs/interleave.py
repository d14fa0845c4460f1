"""`neuronsweep compare A B` on cpu (and `--interleaved N`): time both runs' built programs again, here
and now, N fresh processes, A and B alternating inside each, and judge on those rounds instead of the
stored ones.

Why: two runs timed minutes (or a month) apart differ by the machine's moment as well as by their
code. On our 2-vCPU KVM hosts the moment moves within seconds: one process timing a 1024^3 GEMM in
blocks half a second apart saw 31 to 44 ms, and eight processes timing a program one after another
had medians 9-32 % apart (sd of their logs), far more than the 5 % a gate asks about. So each round
is one fresh interpreter that loads both sides' program of every workload and times them in
alternation, one execution of A, one of B, and again (backends/programs/cpu_round.py --pairs): the
two sides of each execution run milliseconds apart, in the same moment, and the ratio of their
medians moved 2-4 % between processes where each side alone moved 9-32 %. The order of A and B and
of the workloads is drawn per round (seeded), so neither side always goes first. The process stays the
unit analysis/verdict.py tests (a fresh one per round: where the libraries and the heap land is drawn
when a process starts), now on the ratio each process measured: the rounds are paired (Timing.paired).
This is Abedi and Brecht's randomized multiple interleaved trials ("Conducting repeatable experiments
in highly variable cloud computing environments", ICPE 2017) at the finest grain the programs allow.

cpu runs only: a neuron or xla run's programs run on its device or runtime, and their profiles hold
one execution each; capture them again there. Both programs run on this environment's torch, so
runs built with another torch (an SDK release, on cpu) are refused: that change would not be timed.
"""

from __future__ import annotations

import platform
import random
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Protocol, TypedDict

from neuronsweep.analysis.stats import latency_stats
from neuronsweep.analysis.verdict import MIN_ROUNDS
from neuronsweep.atomic import read_json
from neuronsweep.backends.cpu_timing import ARTIFACT, AlternatingJob, alternating_in_process
from neuronsweep.config.backends import BACKENDS
from neuronsweep.config.schema import schema_default
from neuronsweep.errors import UserError
from neuronsweep.host import devicelock
from neuronsweep.store.records import Timing

DEFAULT_ROUNDS = 8  # compare's default for one-process runs: the rounds the bench measured (docs/comparing-runs.md)
MORE_ROUNDS = 4  # a batch of further rounds for the cases whose test cannot yet see the gate
DEFAULT_BUDGET_S = 240.0  # compare's timing in all: the default sweep's 8 rounds take about 90 s on 2 cores
DEFAULT_TIMEOUT_S = 3600  # a round's time limit where the capture did not record its own
Pairs = dict[str, tuple[Timing, Timing]]  # workload id -> (A's Timing, B's), timed again together


class Side(Protocol):
    """One run folder as the rounds read it: runs/compare.py's Run (which imports this module)."""

    folder: Path
    backend: str
    workloads: Path

    def toolchains(self) -> dict[str, str]:
        """Package -> its versions over the run's workloads, joined by ", "."""
        ...


def retime(
    a: Side, b: Side, wids: list[str], rounds: int, seed: int = 0, say: Callable[[str], None] | None = None
) -> Pairs:
    """Per workload id: (A's timing, B's timing), paired: `rounds` fresh processes, each timing A's and
    B's program of every workload in alternation, with A's capture settings (threads, warm-up,
    iterations) for both, under the device lock so that no capture runs beside them. `a`, `b`:
    runs/compare.py's Run."""
    if rounds < MIN_ROUNDS:
        raise UserError(f"--interleaved {rounds}: at least {MIN_ROUNDS} rounds a side are needed for a test.")
    for run in (a, b):
        if not BACKENDS[run.backend].retimed_here:
            raise UserError(
                f"{run.folder}: --interleaved times cpu runs again, and this one ran on {run.backend}, whose "
                "programs need their device; compare the stored timings (without --interleaved)."
            )
    _same_toolchain(a, b)
    if not wids:
        return {}
    builds = {(wid, side): run.workloads / wid / "build" for wid in wids for side, run in (("a", a), ("b", b))}
    for (wid, side), build in builds.items():
        if not (build / ARTIFACT).is_file():
            raise UserError(
                f"{build / ARTIFACT}: missing, so {wid} cannot be timed again; run the sweep for "
                f"{(a if side == 'a' else b).folder.name} again (snakemake rebuilds it), or compare without "
                "--interleaved."
            )
    settings = {wid: _settings(a.workloads / wid) for wid in wids}
    rng = random.Random(seed)
    samples: dict[tuple[str, str], list[list[float]]] = {key: [] for key in builds}
    lock = settings[wids[0]]["device_lock"] or schema_default("capture.device_lock")
    say = say or (lambda line: print(line, file=sys.stderr))
    t0 = time.monotonic()
    timeout = 2 * sum(s["timeout_s"] for s in settings.values())  # one process times both sides of every workload
    with devicelock.held(lock, "neuronsweep compare: both runs timed again"):
        for r in range(1, rounds + 1):
            order = [(wid, rng.sample(["a", "b"], 2)) for wid in rng.sample(wids, len(wids))]
            jobs = [_job([str(builds[(wid, side)]) for side in sides], settings[wid]) for wid, sides in order]
            for (wid, sides), taken in zip(order, alternating_in_process(jobs, timeout, r)["samples"]):
                for side, side_samples in zip(sides, taken):
                    samples[(wid, side)].append(side_samples)
            spent = time.monotonic() - t0
            say(f"interleaved: round {r} of {rounds} done ({spent:.0f} s; about {spent / r * (rounds - r):.0f} s left)")
    return {wid: (_timing_of(samples[(wid, "a")], True), _timing_of(samples[(wid, "b")], True)) for wid in wids}


def more_rounds(
    a: Side,
    b: Side,
    timings: Pairs,
    blind: Callable[[Pairs], list[str]],
    budget_s: float,
    spent_s: float,
    say: Callable[[str], None] | None = None,
) -> list[str]:
    """Further rounds, MORE_ROUNDS at a time, for the workloads `blind(timings)` names (those whose test
    could not yet see the gate), added to `timings` in place while the next batch fits in what is left
    of `budget_s` (`spent_s` already spent on the first rounds). A batch is estimated at what a round
    took last, a process timing all the workloads asked then: the cases left only shrink, so the
    estimate errs long. Returns one line per batch, and why it stopped where cases were left."""
    lines: list[str] = []
    per_round = spent_s / max(1, max((len(ta.rounds or ()) for ta, _ in timings.values()), default=1))
    wids, batch = blind(timings), 0
    while wids and spent_s + MORE_ROUNDS * per_round <= budget_s:
        batch += 1
        t0 = time.monotonic()
        more = retime(a, b, wids, MORE_ROUNDS, seed=batch, say=say)
        took = time.monotonic() - t0
        spent_s, per_round = spent_s + took, took / MORE_ROUNDS
        for wid, (ta, tb) in more.items():
            timings[wid] = (_joined(timings[wid][0], ta), _joined(timings[wid][1], tb))
        lines.append(f"more rounds: {MORE_ROUNDS} for {len(wids)} workload(s) whose test could not see the gate")
        wids = blind(timings)
    if wids:
        lines.append(
            f"budget: {len(wids)} workload(s) could still not see the gate after {spent_s:.0f} s of timing; "
            f"{MORE_ROUNDS} more rounds (about {MORE_ROUNDS * per_round:.0f} s) would pass --budget-s {budget_s:g}"
        )
    return lines


def _joined(first: Timing, then: Timing) -> Timing:
    """Two sets of paired rounds of one side as one."""
    return Timing(first.samples + then.samples, (first.rounds or []) + (then.rounds or []), first.paired)


def time_together(
    groups: list[dict[str, Path]], rounds: int, seed: int = 0, say: Callable[[str], None] | None = None
) -> dict[str, Timing]:
    """Programs of one run compared with each other (a search's finalists, one group per shape: each
    finalist's build of it) timed again: `rounds` fresh processes, each timing the programs of every group
    in alternation, as compare times A and B, the groups and the programs' order drawn per round. Per key:
    its Timing, paired with the others of its group (one round median per process). A group is timed with
    its first program's capture settings."""
    if rounds < MIN_ROUNDS:
        raise UserError(f"{rounds} rounds: at least {MIN_ROUNDS} are needed for a test.")
    settings = [_settings(next(iter(group.values())).parent) for group in groups]
    rng = random.Random(seed)
    samples: dict[str, list[list[float]]] = {key: [] for group in groups for key in group}
    lock = settings[0]["device_lock"] or schema_default("capture.device_lock")
    timeout = sum(s["timeout_s"] * len(group) for s, group in zip(settings, groups))
    say = say or (lambda line: print(line, file=sys.stderr))
    with devicelock.held(lock, "neuronsweep search: the finalists timed again"):
        for r in range(1, rounds + 1):
            order = [
                (i, rng.sample(list(groups[i]), len(groups[i]))) for i in rng.sample(range(len(groups)), len(groups))
            ]
            jobs = [_job([str(groups[i][key]) for key in keys], settings[i]) for i, keys in order]
            for (_, keys), taken in zip(order, alternating_in_process(jobs, timeout, r)["samples"]):
                for key, key_samples in zip(keys, taken):
                    samples[key].append(key_samples)
            say(f"finalists: round {r} of {rounds} done")
    return {key: _timing_of(per_round, paired=True) for key, per_round in samples.items()}


def _timing_of(per_round: list[list[float]], paired: bool = False) -> Timing:
    """One side's samples, a list per fresh process, as a Timing with each process's median."""
    flat = [x for got in per_round for x in got]
    return Timing(flat, latency_stats(flat, len(per_round), in_processes=True)["round_medians_s"], paired)


def _job(builds: list[str], settings: TimedAs) -> AlternatingJob:
    """Programs timed in alternation as the first one's capture settings time it."""
    return AlternatingJob(
        builds=builds, threads=settings["threads"], warmup=settings["warmup"], iterations=settings["iterations"]
    )


def _same_toolchain(a: Side, b: Side) -> None:
    """Both programs run on this environment's torch and Python: refuse runs built with others, whose
    change (a new torch is what an SDK release is on cpu) timing them here would not measure."""
    here = {"torch": metadata.version("torch"), "python": platform.python_version()}
    for run in (a, b):
        built = run.toolchains()  # package -> "v1, v2" over the run's workloads
        for package, version in here.items():
            other = [v for v in built.get(package, version).split(", ") if v != version]
            if other:
                raise UserError(
                    f"{run.folder}: built with {package} {other[0]}, and --interleaved would run its "
                    f"program on this environment's {package} {version}, which does not measure a change of "
                    f"{package}; compare the stored timings (without --interleaved), or install {package} "
                    f"{other[0]} here."
                )


class TimedAs(TypedDict):
    """The timing settings a case's capture used (its capture.json's), which its programs are timed again at."""

    threads: int
    warmup: int
    iterations: int
    timeout_s: float
    device_lock: str | None


def _settings(workload_dir: Path) -> TimedAs:
    """The timing settings A's capture used."""
    try:
        settings = read_json(workload_dir / "capture" / "capture.json")["settings"]
        return {
            "threads": int(settings["threads"]),
            "warmup": int(settings["warmup"]),
            "iterations": int(settings["iterations"]),
            "timeout_s": settings.get("timeout_s") or DEFAULT_TIMEOUT_S,
            "device_lock": settings.get("device_lock"),
        }
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(
            f"{workload_dir / 'capture' / 'capture.json'}: no readable capture settings, so the case cannot be "
            "timed again as it was; run the sweep again."
        ) from None
