"""Latency statistics shared by every backend's framework timing."""

from __future__ import annotations

import statistics

# a case whose spread exceeds this share of its median is `noisy`: listed, never ranked or recommended
NOISY_REL_SPREAD = 0.25


# capture.json `latency.samples_are`: samples that are the profiler's device time of each execution (an NKI
# kernel's, which no framework times), not a framework's wall time
DEVICE_TIMES = "device times"


def latency_stats(samples_s: list[float], rounds: int = 1, in_processes: bool = False) -> dict:
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
