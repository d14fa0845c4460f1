"""Latency statistics shared by every backend's framework timing."""

from __future__ import annotations

import statistics
from typing import TypedDict

# a case whose spread exceeds this share of its median is `noisy`: listed, never ranked or recommended
NOISY_REL_SPREAD = 0.25


# capture.json `latency.samples_are`: samples that are the profiler's device time of each execution (an NKI
# kernel's, which no framework times), not a framework's wall time
DEVICE_TIMES = "device times"


class LatencyStats(TypedDict):
    """capture.json's `latency`: the timed runs' statistics (a backend adds fields of its own beside them)."""

    median_s: float
    iqr_s: float
    q1_s: float
    q3_s: float
    min_s: float
    max_s: float
    mean_s: float
    n: int
    rounds: int
    round_medians_s: list[float]
    spread_s: float
    rounds_in_processes: bool
    samples_s: list[float]


def latency_stats(samples_s: list[float], rounds: int = 1, in_processes: bool = False) -> LatencyStats:
    """Median, IQR (p75 - p25, inclusive quantiles), min, max, mean, n and every sample; with several
    rounds (config `repeats`), each round's median and the spread: max(IQR, range of round medians).
    `in_processes`: each round ran in a fresh process of its own (cpu, capture.rounds_in_processes),
    so the round medians are replicates of the code that analysis/verdict.py tests."""
    q1, _, q3 = statistics.quantiles(samples_s, n=4, method="inclusive") if len(samples_s) > 1 else (samples_s[0],) * 3
    per = len(samples_s) // rounds
    round_medians = [statistics.median(samples_s[i * per : (i + 1) * per]) for i in range(rounds)]
    return {
        "median_s": statistics.median(samples_s),
        "iqr_s": q3 - q1,
        "q1_s": q1,
        "q3_s": q3,
        "min_s": min(samples_s),
        "max_s": max(samples_s),
        "mean_s": statistics.fmean(samples_s),
        "n": len(samples_s),
        "rounds": rounds,
        "round_medians_s": round_medians,
        "spread_s": max(q3 - q1, max(round_medians) - min(round_medians)),
        "rounds_in_processes": in_processes,
        "samples_s": samples_s,
    }


def process_rounds(runs: list[dict]) -> dict:
    """One timing from runs of one round each, every run a process of its own (capture.rounds_in_processes):
    every sample, each run's median a round that analysis/verdict.py tests, their recompiles summed, their
    pids (`round_pids`); XLA's per-iteration execute times merged alike where the runs have them."""
    samples = [x for run in runs for x in run["samples_s"]]
    merged = {
        **latency_stats(samples, len(runs), in_processes=True),
        "recompiles_during_timing": sum(run.get("recompiles_during_timing") or 0 for run in runs),
        "sync": runs[0]["sync"],
        "round_pids": [run["pid"] for run in runs],
    }
    if "execute" in runs[0]:
        executes = [x for run in runs for x in (run["execute"] or {}).get("samples_s", [])]
        merged["execute"] = (
            latency_stats(executes, len(runs), in_processes=True) if all(run["execute"] for run in runs) else None
        )
        merged["execute_source"] = runs[0].get("execute_source")
    return merged
