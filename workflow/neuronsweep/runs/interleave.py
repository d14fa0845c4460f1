"""`neuronsweep compare A B --interleaved N`: time both runs' built programs again, here and now, N
rounds each, A and B alternating in fresh processes, and judge on those rounds instead of the stored ones.

Why: two runs timed minutes (or a month) apart differ by the machine's moment as well as by their
code. On our 2-vCPU hosts a small case's level moved 2-4 % between back-to-back runs of the same
code, beyond what its rounds' spread accounts for, so a +10 % change showed as anything from +3 % to
+14 % and was found in 15 to 20 of 20 cases (docs/comparing-runs.md). Rounds of A and B taken in
turns share that moment, and what still differs between the sides is the programs: Abedi and
Brecht's randomized multiple interleaved trials ("Conducting repeatable experiments in highly
variable cloud computing environments", ICPE 2017). In each round the order of A and B is drawn at
random (seeded), so a slow start or a drift within the session falls on both sides alike, and one
fresh interpreter a side times every workload once, in an order drawn too (backends/programs/cpu_round.py
--many): the process is the unit analysis/verdict.py tests, and importing torch once a side and
round, not once a workload, is what lets `compare` do this by default on a whole run.

cpu runs only: a neuron or xla run's programs run on its device or runtime, and their profiles hold
one execution each; capture them again there. Both programs run on this environment's torch, so
runs built with another torch (an SDK release, on cpu) are refused: that change would not be timed.
"""

from __future__ import annotations

import platform
import random
import sys
import time
from importlib import metadata
from pathlib import Path

from neuronsweep.analysis.stats import NOISY_REL_SPREAD, latency_stats
from neuronsweep.analysis.verdict import MIN_ROUNDS
from neuronsweep.atomic import read_json
from neuronsweep.backends.cpu_timing import ARTIFACT, rounds_in_process
from neuronsweep.config.schema import schema_default
from neuronsweep.errors import UserError
from neuronsweep.host import devicelock
from neuronsweep.store.records import Timing

DEFAULT_ROUNDS = 8  # compare's default for one-process runs: the rounds the bench measured (docs/comparing-runs.md)
DEFAULT_TIMEOUT_S = 3600  # a round's time limit where the capture did not record its own


def retime(a, b, wids: list[str], rounds: int, seed: int = 0, say=None) -> dict[str, tuple[Timing, Timing, bool]]:
    """Per workload id: (A's timing, B's timing, noisy), from `rounds` fresh processes a side taken in
    turns, with A's capture settings (threads, warm-up, iterations) for both, under the device lock so
    that no capture runs beside them. `a`, `b`: runs/compare.py's Run."""
    if rounds < MIN_ROUNDS:
        raise UserError(f"--interleaved {rounds}: at least {MIN_ROUNDS} rounds a side are needed for a test.")
    for run in (a, b):
        if run.backend != "cpu":
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
    timeout = sum(s["timeout_s"] for s in settings.values())  # one process times every workload of a side
    with devicelock.held(lock, "neuronsweep compare --interleaved"):
        for r in range(1, rounds + 1):
            for side in rng.sample(["a", "b"], 2):
                order = rng.sample(wids, len(wids))
                jobs = [{"build": str(builds[(wid, side)]), **_timing(settings[wid])} for wid in order]
                got = rounds_in_process(jobs, timeout, r)
                for wid, taken in zip(order, got["samples"]):
                    samples[(wid, side)].append(taken)
            spent = time.monotonic() - t0
            say(f"interleaved: round {r} of {rounds} done ({spent:.0f} s; about {spent / r * (rounds - r):.0f} s left)")
    out = {}
    for wid in wids:
        sides = []
        noisy = False
        for side in ("a", "b"):
            per_round = samples[(wid, side)]
            flat = [x for got in per_round for x in got]
            stats = latency_stats(flat, len(per_round), in_processes=True)
            noisy = noisy or stats["spread_s"] > NOISY_REL_SPREAD * stats["median_s"]
            sides.append(Timing(flat, stats["round_medians_s"]))
        out[wid] = (sides[0], sides[1], noisy)
    return out


def time_together(builds: dict[str, Path], rounds: int, seed: int = 0, say=None) -> dict[str, tuple[Timing, bool]]:
    """Several programs of one run (a search's finalists) timed again: `rounds` fresh processes, each
    timing every program once in an order drawn at random, so every program shares each process's moment.
    Per key: (its Timing with one round median per process, noisy). Each program is timed with its own
    capture's settings."""
    if rounds < MIN_ROUNDS:
        raise UserError(f"{rounds} rounds: at least {MIN_ROUNDS} are needed for a test.")
    settings = {key: _settings(build.parent) for key, build in builds.items()}
    rng, keys = random.Random(seed), list(builds)
    samples: dict[str, list[list[float]]] = {key: [] for key in keys}
    lock = settings[keys[0]]["device_lock"] or schema_default("capture.device_lock")
    timeout = sum(s["timeout_s"] for s in settings.values())
    say = say or (lambda line: print(line, file=sys.stderr))
    with devicelock.held(lock, "neuronsweep search: the finalists timed again"):
        for r in range(1, rounds + 1):
            order = rng.sample(keys, len(keys))
            jobs = [{"build": str(builds[key]), **_timing(settings[key])} for key in order]
            for key, taken in zip(order, rounds_in_process(jobs, timeout, r)["samples"]):
                samples[key].append(taken)
            say(f"finalists: round {r} of {rounds} done")
    out = {}
    for key, per_round in samples.items():
        stats = latency_stats([x for got in per_round for x in got], len(per_round), in_processes=True)
        noisy = stats["spread_s"] > NOISY_REL_SPREAD * stats["median_s"]
        out[key] = (Timing([x for got in per_round for x in got], stats["round_medians_s"]), noisy)
    return out


def _timing(settings: dict) -> dict:
    return {k: settings[k] for k in ("threads", "warmup", "iterations")}


def _same_toolchain(a, b) -> None:
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


def _settings(workload_dir: Path) -> dict:
    """The timing settings A's capture used."""
    try:
        settings = read_json(workload_dir / "capture" / "capture.json")["settings"]
        return {k: int(settings[k]) for k in ("threads", "warmup", "iterations")} | {
            "timeout_s": settings.get("timeout_s") or DEFAULT_TIMEOUT_S,
            "device_lock": settings.get("device_lock"),
        }
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(
            f"{workload_dir / 'capture' / 'capture.json'}: no readable capture settings, so the case cannot be "
            "timed again as it was; run the sweep again."
        ) from None
